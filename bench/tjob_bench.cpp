// tjob-bench: the engine side of each benchmark (bench/floor.c is the floor
// side). The engine is embedded as a scheduler embeds it: tjob::engine on an
// io_context run by this thread. Every mode prints one JSON object on stdout;
// bench/run pairs it with the floor's and prints the report.
//
//   tjob-bench HOME spawn N K PROG [ARGS]   N command jobs, at most K in flight
//   tjob-bench HOME ingest PROG [ARGS]      one job and one live follower
//   tjob-bench HOME hold N PROG [ARGS]      N jobs left running: launch time,
//                                           memory and descriptors per job
//   tjob-bench HOME wake N UNTIL [LOAD]     wake-up of a waiter after each exit
//                                           (with LOAD /bin/true jobs cycling)
//   tjob-bench HOME python PY INDEX MARKER  Python jobs with a package: submit
//                                           until MARKER is in the log; the
//                                           first of a new home, a cache miss,
//                                           a cache hit
//   tjob-bench HOME container RUNTIME HOST IMAGE N
//                                           N command jobs `true`, one at a time
//   tjob-bench HOME queue N K PROG [ARGS]   N command jobs submitted at once,
//                                           the engine's admission running at
//                                           most K (max_running)
//   tjob-bench HOME detach N each|array PROG [ARGS]
//                                           N jobs handed to supervisors
//                                           (train_detached): one each, or one
//                                           for all as a job array's members
#include "alloc_count.hpp"

#include <malloc.h>

#include <tjob/client.hpp>
#include <tjob/engine.hpp>
#include <tjob/spec.hpp>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

double cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// CPU time by thread name (its comm: the reactor is this process's main
// thread, tjob-bench; the engine names its pool and checkpoint threads), in
// ns, from each task's schedstat. Threads of one name are summed.
std::map<std::string, double> thread_cpu_ns() {
  std::map<std::string, double> out;
  std::error_code ec;
  for (auto& t : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::string name;
    double ns = 0;
    if (FILE* f = std::fopen((t.path() / "comm").c_str(), "r")) {
      char buf[32] = {};
      if (std::fgets(buf, sizeof buf, f)) name = buf;
      std::fclose(f);
    }
    if (!name.empty() && name.back() == '\n') name.pop_back();
    if (FILE* f = std::fopen((t.path() / "schedstat").c_str(), "r")) {
      if (std::fscanf(f, "%lf", &ns) != 1) ns = 0;
      std::fclose(f);
    }
    out[name] += ns;
  }
  return out;
}

// "allocations_per_run":total,"allocations_per_run_by_thread":{"name":n,...},
// each since `before`.
std::string allocations_json(const std::map<std::string, std::uint64_t>& before, int runs) {
  std::string by = "{";
  double total = 0;
  for (const auto& [name, n] : tjob::bench::allocations_by_thread()) {
    auto it = before.find(name);
    const double d = static_cast<double>(n - (it == before.end() ? 0 : it->second)) / runs;
    total += d;
    if (by.size() > 1) by += ",";
    char buf[96];
    std::snprintf(buf, sizeof buf, "\"%s\":%.1f", name.c_str(), d);
    by += buf;
  }
  char head[64];
  std::snprintf(head, sizeof head, "\"allocations_per_run\":%.1f,", total);
  return head + std::string("\"allocations_per_run_by_thread\":") + by + "}";
}

// {"name":µs per run,...} of the CPU each thread spent since `before`.
std::string thread_cpu_json(const std::map<std::string, double>& before, int runs) {
  std::string out = "{";
  for (const auto& [name, ns] : thread_cpu_ns()) {
    auto it = before.find(name);
    double d = ns - (it == before.end() ? 0 : it->second);
    if (out.size() > 1) out += ",";
    char buf[96];
    std::snprintf(buf, sizeof buf, "\"%s\":%.1f", name.c_str(), d / 1e3 / runs);
    out += buf;
  }
  return out + "}";
}

// The heap's bytes in use (glibc's count): of RSS, what the engine's own
// allocations hold, as opposed to the store's mappings and freed pages.
long heap_bytes() { return static_cast<long>(::mallinfo2().uordblks); }

long rss_bytes() {
  long pages = 0, rss = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
    std::fclose(f);
  }
  return rss * ::sysconf(_SC_PAGESIZE);
}

int open_fds() {
  int n = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

double seconds_since(steady::time_point t) {
  return std::chrono::duration<double>(steady::now() - t).count();
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5)];
}

// g++ 12 cannot take a braced list inside a co_await's arguments ("array used
// as initializer"), so the status sets are named.
const std::set<tjob::job_status> complete_only{tjob::job_status::complete};
const std::set<tjob::job_status> running_only{tjob::job_status::running};
const std::set<tjob::job_status> failed_only{tjob::job_status::failed};

void kill_job(const tjob::train_job& job) {
  if (!job.steps.empty() && job.steps[0].pid > 0) ::killpg(static_cast<pid_t>(job.steps[0].pid), SIGKILL);
}

bool in_container = false;

// The engine's "admission decision: 57.3 us for 2 job(s); 9934 waiting here"
// trace lines (adapters/local): each decision's time per job, and how many
// jobs waited when it was made.
struct decision {
  double us_per_job;
  long waiting;
  double written_us_per_job;  // with the writes that record it
};
struct decision_sink final : spdlog::sinks::base_sink<std::mutex> {
  std::vector<decision> seen;

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    std::string_view text(msg.payload.data(), msg.payload.size());
    if (!text.starts_with("admission decision: ")) return;
    double us = 0, written = 0;
    long jobs = 1, waiting = 0;
    std::string copy(text);
    if (std::sscanf(copy.c_str(), "admission decision: %lf us for %ld job(s); %ld waiting here; %lf us", &us,
                    &jobs, &waiting, &written) == 4 &&
        jobs > 0)
      seen.push_back({us / static_cast<double>(jobs), waiting, written / static_cast<double>(jobs)});
  }
  void flush_() override {}
};
std::shared_ptr<decision_sink> decisions;

tjob::train_request command_job(std::vector<std::string> argv) {
  tjob::train_request r;
  tjob::command_trainer t;
  t.command = std::move(argv);
  // Local jobs run in the current directory, as `tjob run` runs them and as
  // the floor does (a container job runs in its own /workspace).
  if (!in_container) t.working_dir = ".";
  r.job_trainer = std::move(t);
  return r;
}

const tjob::log_options follow{.follow = true};
const tjob::log_options whole_log{};
const std::vector<std::string> true_argv{"/bin/true"};

// Coroutines a case runs beside its own, which use its frame: join() waits
// until every one has ended, then rethrows the first failure (a detached
// coroutine's failure would be swallowed, and its end never counted).
class workers {
 public:
  explicit workers(asio::any_io_executor ex) : ex_(std::move(ex)), done_(ex_, steady::time_point::max()) {}
  /// `f`: a callable returning asio::awaitable<void>, kept alive by co_spawn.
  template <class F>
  void start(F f) {
    ++left_;
    asio::co_spawn(ex_, std::move(f), [this](std::exception_ptr e) {
      if (e && !failed_) failed_ = e;
      if (--left_ == 0) done_.cancel();
    });
  }
  bool failed() const { return failed_ != nullptr; }
  asio::awaitable<void> join() {
    if (left_ > 0) {
      boost::system::error_code ec;
      co_await done_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    if (failed_) std::rethrow_exception(failed_);
  }

 private:
  asio::any_io_executor ex_;
  asio::steady_timer done_;
  int left_ = 0;
  std::exception_ptr failed_;
};

struct bench {
  tjob::engine& eng;
  std::vector<std::string> args;  // after the mode

  asio::awaitable<void> spawn() {
    int n = std::stoi(args.at(0)), k = std::stoi(args.at(1));
    std::vector<std::string> argv(args.begin() + 2, args.end());
    std::vector<double> lat;
    lat.reserve(static_cast<std::size_t>(n));
    int next = 0;
    auto threads0 = thread_cpu_ns();
    auto allocations0 = tjob::bench::allocations_by_thread();
    double cpu0 = cpu_seconds();
    auto t0 = steady::now();
    workers submitters(co_await asio::this_coro::executor);
    for (int w = 0; w < k; ++w)
      submitters.start([&]() -> asio::awaitable<void> {
        while (next < n && !submitters.failed()) {
          ++next;
          auto t = steady::now();
          auto name = co_await eng.train(command_job(argv));
          co_await eng.wait_for_job_status(name, complete_only, 600s);
          lat.push_back(seconds_since(t) * 1e6);
        }
      });
    co_await submitters.join();
    double wall = seconds_since(t0);
    double cpu = cpu_seconds() - cpu0;
    std::printf(
        "{\"runs\":%d,\"in_flight\":%d,\"wall_s\":%.6f,\"per_s\":%.3f,\"cpu_us_per_run\":%.3f,"
        "\"p50_us\":%.3f,\"p99_us\":%.3f,\"cpu_us_per_run_by_thread\":%s,%s}\n",
        n, k, wall, n / wall, cpu / n * 1e6, pct(lat, 0.5), pct(lat, 0.99),
        thread_cpu_json(threads0, n).c_str(), allocations_json(allocations0, n).c_str());
  }

  // Every job submitted at once; the engine's queue lets K run at a time.
  // spawn with the same N and K is this case's baseline: the submitter keeps
  // K in flight itself and every job is admitted as it comes.
  asio::awaitable<void> queue() {
    int n = std::stoi(args.at(0));
    std::vector<std::string> argv(args.begin() + 2, args.end());
    double cpu0 = cpu_seconds();
    auto t0 = steady::now();
    workers submitters(co_await asio::this_coro::executor);
    int submitting = n;
    double submitted = 0;
    // All at once: each submission its own coroutine, as many callers would
    // submit (the engine commits them together).
    for (int i = 0; i < n; ++i)
      submitters.start([&]() -> asio::awaitable<void> {
        auto name = co_await eng.train(command_job(argv));
        if (--submitting == 0) submitted = seconds_since(t0);
        co_await eng.wait_for_job_status(name, complete_only, 3600s);
      });
    co_await submitters.join();
    double wall = seconds_since(t0);
    double cpu = cpu_seconds() - cpu0;
    // The decisions made while at least half the jobs still waited: the queue
    // was deep (the target is stated at a depth of 10,000).
    std::vector<double> deep, all, deep_written;
    long most = 0;
    for (const auto& d : decisions->seen) {
      all.push_back(d.us_per_job);
      most = std::max(most, d.waiting);
      if (d.waiting >= n / 2) {
        deep.push_back(d.us_per_job);
        deep_written.push_back(d.written_us_per_job);
      }
    }
    std::printf(
        "{\"runs\":%d,\"in_flight\":%s,\"wall_s\":%.6f,\"per_s\":%.3f,\"cpu_us_per_run\":%.3f,"
        "\"submit_s\":%.6f,\"decisions\":%zu,\"deepest\":%ld,\"decide_p50_us\":%.3f,"
        "\"decide_p99_us\":%.3f,\"deep_decisions\":%zu,\"deep_decide_p99_us\":%.3f,"
        "\"deep_written_p99_us\":%.3f}\n",
        n, args.at(1).c_str(), wall, n / wall, cpu / n * 1e6, submitted, all.size(), most, pct(all, 0.5),
        pct(all, 0.99), deep.size(), pct(deep, 0.99), pct(deep_written, 0.99));
  }

  asio::awaitable<void> ingest() {
    double cpu0 = cpu_seconds();
    auto t0 = steady::now();
    auto name = co_await eng.train(command_job(args));
    auto log = co_await eng.get_job_logs(name, follow);
    std::uint64_t bytes = 0, lines = 0;
    while (auto chunk = co_await log.read_some()) {
      bytes += chunk->size();
      const char* p = chunk->data();
      const char* end = p + chunk->size();
      while ((p = static_cast<const char*>(std::memchr(p, '\n', static_cast<std::size_t>(end - p))))) {
        ++lines;
        ++p;
      }
    }
    co_await eng.wait_for_job_status(name, complete_only, 600s);
    double cpu = cpu_seconds() - cpu0;
    std::printf("{\"bytes\":%llu,\"lines\":%llu,\"wall_s\":%.6f,\"cpu_s\":%.6f,\"cpu_s_per_gib\":%.6f}\n",
                static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(lines),
                seconds_since(t0), cpu, cpu / (static_cast<double>(bytes) / (1 << 30)));
  }

  asio::awaitable<void> hold() {
    int n = std::stoi(args.at(0));
    std::vector<std::string> argv(args.begin() + 1, args.end());
    // One job first, so that what is allocated once (store, caches) is not counted per job.
    auto warm = co_await eng.train(command_job(true_argv));
    co_await eng.wait_for_job_status(warm, complete_only, 60s);
    long rss0 = rss_bytes();
    long heap0 = heap_bytes();
    int fds0 = open_fds();
    auto t0 = steady::now();
    std::vector<std::string> names;
    names.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      auto name = co_await eng.train(command_job(argv));
      names.push_back(std::move(name));
    }
    for (auto& name : names) co_await eng.wait_for_job_status(name, running_only, 600s);
    double launch = seconds_since(t0);
    long rss1 = rss_bytes();
    long heap1 = heap_bytes();
    if (std::getenv("TJOB_BENCH_STOP_AT_HOLD")) ::raise(SIGSTOP);  // (a heap profiler's snapshot)
    int fds1 = open_fds();
    for (auto& name : names) {
      auto job = co_await eng.get_job(name);
      kill_job(job);
    }
    for (auto& name : names) co_await eng.wait_for_job_status(name, failed_only, 600s);
    std::printf(
        "{\"runs\":%d,\"launch_s\":%.6f,\"rss_bytes_per_run\":%.1f,\"heap_bytes_per_run\":%.1f,"
        "\"fds_per_run\":%.3f,\"peak_fds\":%d}\n",
        n, launch, static_cast<double>(rss1 - rss0) / n, static_cast<double>(heap1 - heap0) / n,
        static_cast<double>(fds1 - fds0) / n, fds1);
  }

  asio::awaitable<void> wake() {
    int n = std::stoi(args.at(0));
    // With LOAD, that many /bin/true jobs cycle in the same engine meanwhile:
    // the wake-up under load.
    const int load = args.size() > 2 ? std::stoi(args.at(2)) : 0;
    bool measuring = true;
    // The load's coroutines use this frame: joined before it returns,
    // whatever fails.
    workers loaders(co_await asio::this_coro::executor);
    for (int k = 0; k < load; ++k)
      loaders.start([&]() -> asio::awaitable<void> {
        while (measuring && !loaders.failed()) {
          auto request = command_job(true_argv);  // (a named local: g++ 12 and co_await)
          auto name = co_await eng.train(std::move(request));
          co_await eng.wait_for_job_status(name, complete_only, 600s);
        }
      });
    std::vector<double> lat;
    std::exception_ptr failed;
    try {
      for (int i = 0; i < n && !loaders.failed(); ++i) {
        auto deadline = steady::now() + 20ms;
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count();
        std::vector<std::string> argv{args.at(1), std::to_string(ns)};
        auto name = co_await eng.train(command_job(std::move(argv)));
        co_await eng.wait_for_job_status(name, complete_only, 60s);
        auto woken =
            std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now().time_since_epoch()).count();
        // Its last words are the time it exited (bench/until.c).
        auto log = co_await eng.get_job_logs(name, whole_log);
        auto line = co_await log.next();
        if (!line) throw std::runtime_error("job " + name + " left no exit time");
        lat.push_back(static_cast<double>(woken - std::stoll(*line)) / 1e3);
      }
    } catch (...) {
      failed = std::current_exception();
    }
    measuring = false;
    co_await loaders.join();  // (a load job's failure is rethrown here)
    if (failed) std::rethrow_exception(failed);
    std::printf("{\"runs\":%d,\"load\":%d,\"p50_us\":%.3f,\"p99_us\":%.3f}\n", n, load, pct(lat, 0.5),
                pct(lat, 0.99));
  }

  // Submit until the training function has printed MARKER (it does so first).
  asio::awaitable<double> python_start(const std::string& py, const std::string& index,
                                       const std::string& marker, const std::string& package) {
    tjob::train_request r;
    r.runtime = "python";
    tjob::python_trainer t;
    t.source = "def train():\n    print('" + marker + "', flush=True)\n    import " + package + "\n";
    t.function = "train";
    t.python = py;
    t.packages_to_install = {package};
    t.pip_index_urls = {index};
    r.job_trainer = t;
    auto t0 = steady::now();
    auto name = co_await eng.train(r);
    auto log = co_await eng.get_job_logs(name, follow);
    double at = -1;
    std::string all;
    while (auto line = co_await log.next()) {
      all += *line;
      if (at < 0 && line->find(marker) != std::string::npos) at = seconds_since(t0);
    }
    co_await eng.wait_for_job_status(name, complete_only, 600s);
    if (at < 0) throw std::runtime_error("the marker never came; the log was:\n" + all);
    co_return at;
  }

  // first: the first Python job of a new $TJOB_HOME (it also unpacks pip);
  // cold: another package set, so a venv is built (a cache miss); warm: the
  // same again, a copy of the cached venv.
  asio::awaitable<void> python() {
    double first = co_await python_start(args.at(0), args.at(1), args.at(2), "tinydep");
    double cold = co_await python_start(args.at(0), args.at(1), args.at(2), "tinyjob");
    double warm = co_await python_start(args.at(0), args.at(1), args.at(2), "tinyjob");
    std::printf("{\"first_s\":%.6f,\"cold_s\":%.6f,\"warm_s\":%.6f}\n", first, cold, warm);
  }

  asio::awaitable<void> container() {
    int n = std::stoi(args.at(3));
    std::vector<double> complete, removed;
    for (int i = 0; i < n; ++i) {
      auto t0 = steady::now();
      std::vector<std::string> argv{"true"};
      auto name = co_await eng.train(command_job(std::move(argv)));
      co_await eng.wait_for_job_status(name, complete_only, 120s);
      complete.push_back(seconds_since(t0));
      co_await eng.delete_job(name);
      removed.push_back(seconds_since(t0));
    }
    std::printf("{\"runs\":%d,\"complete_s\":%.6f,\"removed_s\":%.6f}\n", n, pct(complete, 0.5),
                pct(removed, 0.5));
  }
};

}  // namespace

// detach: the submit (every supervisor has answered) and the end of the
// last job, with no engine in this process (the supervisors own the jobs).
int detach(tjob::engine_config cfg, const std::vector<std::string>& args) {
  const int n = std::stoi(args.at(0));
  const bool each = args.at(1) == "each";
  tjob::train_request req;
  req.name = "member";
  req.job_trainer = tjob::command_trainer{.command = {args.begin() + 2, args.end()}};
  auto reqs = tjob::array_members(req, "0-" + std::to_string(n - 1));
  if (each)
    for (auto& r : reqs) r.array.clear();  // plain jobs, one supervisor each
  const auto t0 = steady::now();
  std::vector<std::string> names;
  if (each)
    for (const auto& r : reqs) names.push_back(tjob::train_detached(r, cfg));
  else
    names = tjob::train_detached(reqs, cfg);
  const double submitted = std::chrono::duration<double>(steady::now() - t0).count();
  tjob::trainer_client c(cfg);
  for (const auto& name : names) c.wait_for_job_status(name, {tjob::job_status::complete}, 600s);
  const double complete = std::chrono::duration<double>(steady::now() - t0).count();
  std::printf("{\"runs\":%d,\"submit_s\":%.6f,\"complete_s\":%.6f}\n", n, submitted, complete);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: tjob-bench HOME spawn|ingest|hold|wake|python|container|queue|detach ARGS...\n");
    return 2;
  }
  std::string mode = argv[2];
  tjob::engine_config cfg;
  cfg.home = argv[1];
  // Every job of a case is let in at once, as the floors start theirs: the
  // rows measure the engine's own cost per job (the admission queue's writes
  // included), not the default CPU budget's holding jobs back.
  cfg.admission.cpus = 0;
  std::vector<std::string> args(argv + 3, argv + argc);
  if (mode == "detach") {
    try {
      return detach(cfg, args);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tjob-bench detach: %s\n", e.what());
      return 1;
    }
  }
  if (mode == "queue") {
    cfg.admission.max_running = std::stoi(args.at(1));
    decisions = std::make_shared<decision_sink>();
    cfg.logger = std::make_shared<spdlog::logger>("tjob-bench", decisions);
    cfg.logger->set_level(spdlog::level::trace);
  }
  if (mode == "container") {
    in_container = true;
    cfg.backend = "container";
    cfg.backend_config = {{"container_runtime", args.at(0)},
                          {"container_host", args.at(1)},
                          {"image", args.at(2)},
                          {"network", "none"},
                          {"pull_policy", "Never"}};
  }
  asio::io_context ctx(1);
  int rc = 0;
  {
    tjob::engine eng(ctx.get_executor(), cfg);
    asio::co_spawn(
        ctx,
        [&]() -> asio::awaitable<void> {
          bench b{eng, args};
          try {
            if (mode == "spawn")
              co_await b.spawn();
            else if (mode == "ingest")
              co_await b.ingest();
            else if (mode == "hold")
              co_await b.hold();
            else if (mode == "wake")
              co_await b.wake();
            else if (mode == "python")
              co_await b.python();
            else if (mode == "container")
              co_await b.container();
            else if (mode == "queue")
              co_await b.queue();
            else
              throw std::runtime_error("unknown mode " + mode);
          } catch (const std::exception& e) {
            std::fprintf(stderr, "tjob-bench %s: %s\n", mode.c_str(), e.what());
            rc = 1;
          }
          co_await eng.shutdown();
        },
        asio::detached);
    ctx.run();
  }
  std::fflush(stdout);
  return rc;
}
