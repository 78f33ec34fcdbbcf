// The rules of admission (engine/admission.hpp), without a store: who starts
// in which order, what each waiting job is told it waits for, and the budgets
// of $TJOB_HOME/config.yaml.
#include "core/admission.hpp"
#include "core/job_state.hpp"
#include "tests/support/test_support.hpp"

#include <tjob/error.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <random>

using namespace tjob;
using namespace tjob::detail;

namespace {

queue_row row(std::string job, std::int64_t seq, int cpus = 1, int priority = 0, bool admitted = false) {
  queue_row r;
  r.job = std::move(job);
  r.seq = seq;
  r.need.cpus = cpus;
  r.priority = priority;
  r.admitted = admitted;
  return r;
}

admission_budget cpus(int n) {
  admission_budget b;
  b.cpus = n;
  return b;
}

}  // namespace

TEST_CASE("admission: jobs start in queue order while they fit, the rest wait with their place") {
  auto plan = plan_admission({row("c", 3), row("a", 1), row("b", 2), row("d", 4)}, cpus(2));
  CHECK(plan.admit == std::vector<std::string>{"a", "b"});
  REQUIRE(plan.queue.size() == 4);
  CHECK(plan.queue[2].job == "c");
  CHECK(plan.queue[2].position == 3);
  CHECK(plan.queue[2].waits_for == "1 CPU (2 of 2 in use)");
  CHECK(plan.queue[3].waits_for == "job c ahead of it");
  CHECK(plan.queue[0].waits_for.empty());
}

TEST_CASE("admission: higher priority first, and within one, first submitted first") {
  auto plan = plan_admission(
      {row("old-low", 1, 1, 0), row("new-high", 9, 1, 7), row("mid", 5, 1, 3), row("old-high", 2, 1, 7)},
      cpus(1));
  std::vector<std::string> order;
  for (const auto& w : plan.queue) order.push_back(w.job);
  CHECK(order == std::vector<std::string>{"old-high", "new-high", "mid", "old-low"});
  CHECK(plan.admit == std::vector<std::string>{"old-high"});
}

TEST_CASE("admission: a job that does not fit stops those behind it, so a big job is never starved") {
  // 3 of 4 CPUs in use: the big job (2) waits, and the small one (1) must not pass it.
  auto plan = plan_admission({row("running", 0, 3, 0, true), row("big", 1, 2), row("small", 2, 1)}, cpus(4));
  CHECK(plan.admit.empty());
  CHECK(plan.queue[0].waits_for == "2 CPUs (3 of 4 in use)");
  CHECK(plan.queue[1].waits_for == "job big ahead of it");
}

TEST_CASE("admission: an array at its own limit waits without holding up the others") {
  auto a1 = row("arr-1", 1), a2 = row("arr-2", 2);
  for (auto* r : {&a1, &a2}) {
    r->group = "arr";
    r->group_limit = 1;
  }
  a1.admitted = true;
  auto plan = plan_admission({a1, a2, row("other", 3)}, cpus(8));
  CHECK(plan.admit == std::vector<std::string>{"other"});
  CHECK(plan.queue[0].waits_for == "its array arr: 1 of 1 running");
}

TEST_CASE("admission: every budget can hold a job back, and each says so") {
  admission_budget b;
  b.max_running = 1;
  b.memory = 1ULL << 30;
  b.gpus = 2;
  auto running = row("r", 0, 1, 0, true);
  running.need.memory = 768ULL << 20;
  running.need.gpus = 2;
  auto next = row("n", 1);
  next.need.memory = 512ULL << 20;
  next.need.gpus = 1;
  auto plan = plan_admission({running, next}, b);
  CHECK(plan.queue[0].waits_for ==
        "a running slot (1 of max_running 1 in use), 512Mi of memory (768Mi of 1Gi in use), 1 GPU(s) (2 of 2 "
        "in use)");
  CHECK(never_fits(next.need, b).empty());
  next.need.gpus = 3;
  next.need.memory = 2ULL << 30;
  CHECK(never_fits(next.need, b) ==
        "needs 2Gi of memory; the memory budget is 1Gi; needs 3 GPU(s); the engine has 2");
  CHECK(plan_admission({row("x", 1, 500)}, admission_budget{}).admit.size() == 1);  // 0: no limit
}

TEST_CASE("admission: the budgets come from the config, then config.yaml, then the machine") {
  tjob::test::temp_dir d;
  auto machine = machine_budget(0);
  CHECK(machine.cpus >= 1);
  CHECK(machine.memory > 0);
  CHECK(machine.max_running == 0);
  admission_config none;
  auto b = home_budget(none, d.path(), 1);
  CHECK(b.cpus == machine.cpus);
  CHECK(b.gpus == 1);
  std::ofstream(d.path() / "config.yaml") << "admission:\n  max_running: 4\n  memory: 16Gi\n";
  b = home_budget(none, d.path(), 0);
  CHECK(b.max_running == 4);
  CHECK(b.memory == 16ULL << 30);
  CHECK(b.cpus == machine.cpus);
  admission_config set;
  set.max_running = 2;
  set.cpus = 0;
  b = home_budget(set, d.path(), 0);
  CHECK(b.max_running == 2);
  CHECK(b.cpus == 0);
  CHECK(b.memory == 16ULL << 30);
  auto refused = [&](const std::string& text) {
    std::ofstream(d.path() / "config.yaml") << text;
    return tjob::test::message_of([&] { home_budget(none, d.path(), 0); });
  };
  CHECK(refused("admission:\n  max_running: many\n")
            .find("config.yaml: admission.max_running many: give a whole number") != std::string::npos);
  CHECK(refused("admission:\n  memory: lots\n").find("admission.memory lots: give bytes") !=
        std::string::npos);
  CHECK(refused("admission:\n  gpus: 2\n").find("admission.gpus: unknown setting") != std::string::npos);
  CHECK(refused(",").find("config.yaml") != std::string::npos);
  CHECK(refused("").empty());
}

TEST_CASE("fold: Queued is the reason of a waiting job until it is admitted or anything happens to it") {
  auto state = initial_state(std::vector<std::string>{"node-0"});
  fold_event(state, {"", log_event::created, {}, {}});
  fold_event(state, {"", log_event::queued, {}, {}});
  CHECK(state.reason == "Queued");
  auto cancelled = state;
  fold_event(state, {"", log_event::admitted, {}, {}});
  CHECK(state.reason.empty());
  fold_event(cancelled, {"node-0", log_event::cancelled, {}, "cancelled"});
  CHECK(cancelled.status == job_status::failed);
  CHECK(cancelled.reason == "cancelled");
}

TEST_CASE("admission property: the plan from the admitted jobs' sums is the plan from every row") {
  const char* fixed = std::getenv("TJOB_TEST_SEED");  // to replay a failure
  unsigned seed = fixed != nullptr ? static_cast<unsigned>(std::stoul(fixed)) : std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int regardless = 0;
  for (int round = 0; round < 500; ++round) {
    std::vector<queue_row> rows;
    int n = pick(0, 30);
    std::vector<int> seqs(static_cast<std::size_t>(n));
    std::iota(seqs.begin(), seqs.end(), 1);
    std::shuffle(seqs.begin(), seqs.end(), rng);  // submission numbers are unique
    for (int i = 0; i < n; ++i) {
      auto r = row("j" + std::to_string(i), seqs[static_cast<std::size_t>(i)], pick(0, 3), pick(-1, 1),
                   pick(0, 3) == 0);
      r.need.memory = static_cast<std::uint64_t>(pick(0, 4)) << 30;
      r.need.gpus = pick(0, 4) == 0 ? 1 : 0;
      if (pick(0, 3) == 0) {
        r.group = "g" + std::to_string(pick(0, 1));
        r.group_limit = pick(0, 2);
      }
      rows.push_back(r);
    }
    admission_budget b;
    b.max_running = pick(0, 8);
    b.cpus = pick(0, 12);
    b.memory = static_cast<std::uint64_t>(pick(0, 8)) << 30;
    b.gpus = pick(0, 2);
    // Both limits off at random is 1 round in 117, so 500 rounds could miss
    // the case below (CI did, seed 147776367): every 8th round has them off.
    if (round % 8 == 0) b.max_running = b.cpus = 0;
    admitted_usage used;
    std::vector<queue_row> waiting;
    for (const auto& r : rows) {
      if (r.admitted)
        used.add(r);
      else
        waiting.push_back(r);
    }
    std::shuffle(waiting.begin(), waiting.end(), rng);
    auto a = plan_admission(rows, b);
    auto c = plan_admission(waiting, b, used);
    CHECK(a.admit == c.admit);
    CHECK(a.blocker == c.blocker);
    REQUIRE(a.queue.size() == c.queue.size());
    for (std::size_t i = 0; i < a.queue.size(); ++i) {
      CHECK(a.queue[i].job == c.queue[i].job);
      CHECK(a.queue[i].waits_for == c.queue[i].waits_for);
    }
    // A row that fits regardless is admitted whatever the others hold (the
    // store then skips reading their sums).
    for (const auto& r : waiting) {
      if (!fits_regardless(r, b)) continue;
      ++regardless;
      std::vector<queue_row> alone{r};
      CHECK(plan_admission(alone, b, used).admit == std::vector<std::string>{r.job});
    }
    // Reading only the head is enough: past the blocker nobody is admitted.
    if (!a.blocker.empty()) {
      std::sort(waiting.begin(), waiting.end(), queue_before);
      auto at = std::find_if(waiting.begin(), waiting.end(),
                             [&](const queue_row& r) { return r.job == a.blocker; });
      std::vector<queue_row> head(waiting.begin(), at + 1);
      CHECK(plan_admission(head, b, used).admit == a.admit);
    }
  }
  CHECK(regardless > 0);  // the rounds did meet rows that fit regardless
}
