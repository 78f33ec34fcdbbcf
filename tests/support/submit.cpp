// tjob-submit HOME PREFIX FIRST COUNT MAX_RUNNING PRIORITY -- ARGV...: one
// process of several that share a queue (tests/integration/scheduling_test).
// It submits COUNT command jobs PREFIX-FIRST .. PREFIX-(FIRST+COUNT-1), each
// running ARGV with "{i}" replaced by the job's number, at PRIORITY, under an
// engine whose budget allows MAX_RUNNING jobs at once (no CPU or memory
// limit); prints "submitted" once all are recorded, then waits for every one
// to end and prints "ended <complete> <failed>". Exits 0 when it got so far.
#include <tjob/client.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 9 || std::string(argv[7]) != "--") {
    std::fprintf(stderr, "usage: tjob-submit HOME PREFIX FIRST COUNT MAX_RUNNING PRIORITY -- ARGV...\n");
    return 2;
  }
  tjob::engine_config cfg;
  cfg.home = argv[1];
  const std::string prefix = argv[2];
  const int first = std::atoi(argv[3]), count = std::atoi(argv[4]);
  cfg.admission.max_running = std::atoi(argv[5]);
  cfg.admission.cpus = 0;
  cfg.admission.memory = 0;
  const int priority = std::atoi(argv[6]);
  try {
    tjob::trainer_client c(cfg);
    std::vector<std::string> names;
    for (int i = first; i < first + count; ++i) {
      tjob::command_trainer t;
      for (int a = 8; a < argc; ++a) {
        std::string arg = argv[a];
        if (auto at = arg.find("{i}"); at != std::string::npos) arg.replace(at, 3, std::to_string(i));
        t.command.push_back(arg);
      }
      tjob::train_request r;
      r.name = prefix + "-" + std::to_string(i);
      r.priority = priority;
      r.job_trainer = std::move(t);
      names.push_back(c.train(r));
    }
    std::printf("submitted\n");
    std::fflush(stdout);
    int complete = 0, failed = 0;
    for (const auto& n : names) {
      auto j = c.wait_for_job_status(n, {tjob::job_status::complete, tjob::job_status::failed},
                                     std::chrono::minutes(20));
      (j.status == tjob::job_status::complete ? complete : failed)++;
    }
    std::printf("ended %d %d\n", complete, failed);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tjob-submit: %s\n", e.what());
    return 1;
  }
}
