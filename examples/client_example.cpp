// The README's C++ example: submit a Python training function, follow its
// log, wait for it. Built as build/tjob-client-example; run it from the
// source tree (it reads examples/train_linear.py).
#include <tjob/client.hpp>

#include <iostream>

int main() {
  tjob::trainer_client client;  // $TJOB_HOME, as the CLI uses

  tjob::python_trainer trainer;
  trainer.source_file = "examples/train_linear.py";
  trainer.function = "train_model";
  trainer.function_args = R"({"epochs": 3})";
  trainer.python = "/usr/bin/python3";  // Debian's python, which has torch
  trainer.system_site_packages = true;
  tjob::train_request request;
  request.runtime = "torch-distributed";
  request.job_trainer = trainer;
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
