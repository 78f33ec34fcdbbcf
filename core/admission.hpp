// Admission: which waiting jobs may start, under the budgets of one
// $TJOB_HOME (CPUs, memory, GPUs, jobs running at once), in priority order.
// Pure: the backend that keeps the shared queue (the local store) reads its
// rows, asks plan_admission, and writes the answer in the same transaction.
// docs/scheduling.md has the rules.
//
// Threading: pure functions, except machine_budget and home_budget (they read
// /proc and $TJOB_HOME/config.yaml).
#pragma once

#include <tjob/engine.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace tjob::detail {

/// What a job holds while it runs, all its nodes together.
struct admission_need {
  int cpus = 1;
  std::uint64_t memory = 0;
  int gpus = 0;
};

/// The budgets jobs share; 0 for max_running, cpus or memory: no limit.
/// GPUs are always limited, by the device list.
struct admission_budget {
  int max_running = 0;
  int cpus = 0;
  std::uint64_t memory = 0;
  int gpus = 0;
};

/// One job of the shared queue, waiting or admitted (running).
struct queue_row {
  std::string job;
  int priority = 0;
  std::int64_t seq = 0;  ///< submission order within the queue
  admission_need need;
  std::string group;    ///< a job array: its jobs share `group_limit`
  int group_limit = 0;  ///< 0: none
  bool admitted = false;
  std::int64_t since_ms = 0;  ///< when it was queued
};

struct admission_plan {
  /// Waiting jobs that may start now, in queue order.
  std::vector<std::string> admit;
  struct waiting {
    std::string job;
    int position = 0;  ///< 1: the next to start
    /// "2 CPUs (2 of 2 in use)", "its array a: 8 of 8 running", "job x ahead
    /// of it"; empty for a job in `admit`.
    std::string waits_for;
  };
  /// Every waiting job (those in `admit` too), in queue order.
  std::vector<waiting> queue;
  /// The first waiting job that does not fit, which holds back everyone
  /// behind it; empty when none does. Rows past it cannot change `admit`,
  /// so a caller that read only the head of a long queue has read enough.
  std::string blocker;
};

/// The waiting jobs of `plan` as tjob queue lists them, from their `rows`
/// (the rows plan_admission was given, or more).
std::vector<queue_entry> queue_entries(const admission_plan& plan, const std::vector<queue_row>& rows);

/// Each owner admits its jobs by its own budgets; the process that lists the
/// queue judges by `mine`: each entry whose owner (by name in `owner_of`) is
/// not `self_pid` says so, with the budgets and the owner (issue 42).
void note_judged_by(std::vector<queue_entry>& entries, const std::map<std::string, std::int64_t>& owner_of,
                    std::int64_t self_pid, const admission_budget& mine);

/// What the admitted jobs hold together: all plan_admission needs of them.
struct admitted_usage {
  int running = 0, cpus = 0, gpus = 0;
  std::uint64_t memory = 0;
  std::map<std::string, int, std::less<>> groups;  ///< the running jobs of each array
  void add(const queue_row& r);
};

/// The queue order: higher priority first, then first submitted first.
bool queue_before(const queue_row& a, const queue_row& b);

/// Who starts now. Jobs are taken in queue order; the first that does not fit
/// stops everyone behind it (no job passes a waiting one for lack of
/// resources, so a big job is never starved by small ones). A job held back
/// only by its array's own limit does not stop the others.
admission_plan plan_admission(std::vector<queue_row> rows, const admission_budget& budget);
/// The same from what the admitted jobs hold (`used`) and the waiting rows
/// alone, in any order: a caller with an index reads a sum, not every row.
admission_plan plan_admission(std::vector<queue_row> waiting, const admission_budget& budget,
                              admitted_usage used);

/// Whether `row` fits whatever the admitted jobs hold: no limit of `budget`
/// or of its array applies to it. The caller need not sum them.
bool fits_regardless(const queue_row& row, const admission_budget& budget);

/// Why `need` can never fit in `budget` ("needs 8 CPUs; the budget is 2"),
/// empty when it can.
std::string never_fits(const admission_need& need, const admission_budget& budget);

/// A dependency of `kind` (after_ok, after_any, after_not_ok) on `job`,
/// whose status is `status` (nullopt: it is gone): `met` when it is met, and
/// why it never can be ("job x ended Failed; after_ok needs it Complete"),
/// empty while it may still be (docs/scheduling.md).
std::string dependency_verdict(std::string_view job, std::string_view kind, std::optional<job_status> status,
                               bool& met);

/// What `r` is admitted for, all its nodes together (docs/scheduling.md): a
/// command its cpus and memory (--resources), Python code its processes per
/// node, memory and GPUs times its nodes.
admission_need need_of(const train_request& r);

/// Refuses (invalid_argument, naming `who`, the budget and how to raise it) a
/// need that could never fit in `budget`, the budgets of `home`.
void check_fits(const std::string& who, const admission_need& need, const admission_budget& budget,
                const std::filesystem::path& home);

/// The machine's own: its CPUs (sched_getaffinity) and MemTotal; no limit on
/// the jobs at once; `gpus` devices.
admission_budget machine_budget(int gpus);

/// The budgets of `home`: each field of `cfg` that is set, else
/// $TJOB_HOME/config.yaml's `admission:` (max_running, cpus, memory), else
/// the machine's. Throws tjob::error (invalid_argument) naming the file and
/// the field for a config.yaml that cannot be used.
admission_budget home_budget(const admission_config& cfg, const std::filesystem::path& home, int gpus);

/// The GPU devices jobs are admitted against: `cfg.gpu_devices`, else
/// $TJOB_GPU_DEVICES (comma-separated), else each /dev/nvidiaN.
std::vector<std::string> gpu_devices(const engine_config& cfg);

/// home_budget, read again when config.yaml changes (its mtime in ns, size
/// and inode: one stat per look), so an edit reaches a running process.
class budget_reader {
 public:
  budget_reader(admission_config cfg, std::filesystem::path home, int gpus)
      : cfg_(std::move(cfg)), home_(std::move(home)), gpus_(gpus) {}
  struct refreshed {
    bool read_again = false;  ///< the file changed and was read again (not the first read)
    std::string warning;      ///< an edit that cannot be used: the budgets read before stay
  };
  /// Reads the file when it changed. The first read raises (as home_budget).
  refreshed refresh();
  /// The budgets of the last refresh().
  const admission_budget& budget() const { return budget_; }
  const std::filesystem::path& home() const { return home_; }

 private:
  admission_config cfg_;
  std::filesystem::path home_;
  int gpus_ = 0;
  admission_budget budget_;
  std::tuple<std::int64_t, std::int64_t, std::uint64_t> stamp_{-1, -1, 0};
};

/// "2 CPUs, 512Mi, 1 GPU" (only what is not zero; "nothing" when all are).
std::string describe_need(const admission_need& need);
/// Bytes as Kubernetes writes them: 512Mi, 4Gi, 1500000.
std::string format_bytes(std::uint64_t bytes);

}  // namespace tjob::detail
