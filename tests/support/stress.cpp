// tjob-stress HOME JOURNAL HELPER TAG FIRST: an engine under heavy submission and
// logging, made to be SIGKILLed at any point (tests/integration/crash_test).
//
// It keeps up to 24 command jobs in flight on $TJOB_HOME=HOME. Job i (from
// FIRST on, so that runs on one home never repeat an i) runs
//   HELPER prefixed 150 "<TAG> <i> a" sleep <i%5*10> prefixed 150 "<TAG> <i> b" exit <i%3>
// (so its whole log is known in advance) and every 7th job is cancelled
// while it runs. After train() returns, "<name> <i>\n" is appended to
// JOURNAL/submitted and printed on stdout. Every 3rd job has a live follower
// in this process that appends what it is given, as it is given, to
// JOURNAL/followed-<name>: whatever a follower had been handed before the
// kill is in that file. Runs until it is killed.
#include <tjob/engine.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fcntl.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

namespace asio = boost::asio;

namespace {

void append(const std::string& path, std::string_view data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;
  while (!data.empty()) {
    ssize_t w = ::write(fd, data.data(), data.size());
    if (w <= 0) break;
    data.remove_prefix(static_cast<std::size_t>(w));
  }
  ::close(fd);
}

// Named, not braced inside a co_await's arguments: g++ 12 mishandles those.
const std::set<tjob::job_status> ended{tjob::job_status::complete, tjob::job_status::failed};
const tjob::log_options follow_all{.follow = true};

struct stress {
  tjob::engine& eng;
  std::string journal, helper, tag;
  int next = 0;

  tjob::train_request job(int i) const {
    tjob::command_trainer t;
    t.command = {helper,
                 "prefixed",
                 "150",
                 tag + " " + std::to_string(i) + " a",
                 "sleep",
                 std::to_string(i % 5 * 10),
                 "prefixed",
                 "150",
                 tag + " " + std::to_string(i) + " b",
                 "exit",
                 std::to_string(i % 3)};
    tjob::train_request r;
    r.job_trainer = std::move(t);
    return r;
  }

  asio::awaitable<void> follow(std::string name) {
    auto log = co_await eng.get_job_logs(name, follow_all);
    const std::string out = journal + "/followed-" + name;
    while (auto chunk = co_await log.read_some()) append(out, *chunk);
  }

  asio::awaitable<void> worker() {
    for (;;) {
      int i = next++;
      auto req = job(i);
      auto name = co_await eng.train(std::move(req));
      std::string line = name + " " + std::to_string(i) + "\n";
      append(journal + "/submitted", line);
      std::fwrite(line.data(), 1, line.size(), stdout);
      std::fflush(stdout);
      if (i % 3 == 0) {
        auto ex = co_await asio::this_coro::executor;
        asio::co_spawn(ex, follow(name), asio::detached);
      }
      if (i % 7 == 6) co_await eng.cancel_job(name);
      co_await eng.wait_for_job_status(name, ended, std::chrono::seconds(300));
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: tjob-stress HOME JOURNAL HELPER TAG FIRST\n");
    return 2;
  }
  asio::io_context ctx(1);
  tjob::engine_config cfg;
  cfg.home = argv[1];
  cfg.grace_period = std::chrono::milliseconds(200);
  tjob::engine eng(ctx.get_executor(), cfg);
  stress s{eng, argv[2], argv[3], argv[4], std::atoi(argv[5])};
  for (int w = 0; w < 24; ++w) asio::co_spawn(ctx, s.worker(), asio::detached);
  ctx.run();
  return 0;
}
