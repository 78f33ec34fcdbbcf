// The README's C++ example: submit a Python training function, follow its
// log, wait for it. Built as build/tjob-client-example.
//
//   tjob-client-example [PATH/TO/train_linear.py]
//
// Without an argument it reads examples/train_linear.py from the directory it
// runs in (the source tree). Every failure is a tjob::error with a message
// that says what to fix: the example prints it and exits 2 for a usage error
// (a path, a field), 1 for anything else, as the CLI does.
#include <tjob/client.hpp>
#include <tjob/error.hpp>

#include <iostream>
#include <string>

int main(int argc, char** argv) {
  if (argc > 2) {
    std::cerr << "usage: " << argv[0] << " [PATH/TO/train_linear.py]\n";
    return 2;
  }
  try {
    tjob::trainer_client client;  // $TJOB_HOME, as the CLI uses

    tjob::python_trainer trainer;
    trainer.source_file = argc == 2 ? argv[1] : "examples/train_linear.py";
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

    // Failed: the error names the step, its exit code and its last lines.
    auto job = client.wait_for_job_status(name, {tjob::job_status::complete});
    std::cout << name << " is " << tjob::to_string(job.status) << "\n";
    return 0;
  } catch (const tjob::error& e) {
    std::cerr << argv[0] << ": " << e.what() << "\n";
    if (tjob::is_usage_error(e.code())) {
      std::cerr << "(run it in the source tree, or give the path of examples/train_linear.py)\n";
      return 2;
    }
    return 1;
  }
}
