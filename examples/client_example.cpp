// The README's C++ example: submit a job, follow its log, wait for it.
// Build: part of the default build (build/tjob-client-example).
#include <tjob/client.hpp>

#include <iostream>

int main() {
  tjob::trainer_client client;  // $TJOB_HOME, as the CLI uses

  tjob::train_request request;
  request.job_trainer = tjob::command_trainer{
      .command = {"python3", "examples/train_linear.py"},
      .env = {{"EPOCHS", "20"}},
      .working_dir = ".",
  };
  std::string name = client.train(request);
  std::cout << "submitted " << name << "\n";

  auto log = client.get_job_logs(name, {.follow = true});
  while (auto line = log.next()) std::cout << *line;

  try {
    auto job = client.wait_for_job_status(name, {tjob::job_status::complete});
    std::cout << name << " is " << tjob::to_string(job.status) << "\n";
  } catch (const tjob::error& e) {  // Failed: names the step, its exit code, its last lines
    std::cerr << e.what() << "\n";
    return 1;
  }
}
