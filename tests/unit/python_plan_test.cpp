// The Python plan every backend shares (adapters/python/python_plan.hpp):
// torchrun's flags, the training files, the entry plan, and the entry script
// itself, run by a real python3.
#include "adapters/python/python_plan.hpp"
#include "tests/support/test_support.hpp"

#include <tjob/error.hpp>

#include <doctest/doctest.h>
#include <boost/json.hpp>

#include <fstream>

using namespace tjob;
using strings = std::vector<std::string>;
namespace json = boost::json;

namespace {

void write(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// A python3 that finds a stand-in `torch` package first: its
// torch.distributed.run prints the argv it was given.
std::map<std::string, std::string> fake_torch(const tjob::test::temp_dir& dir) {
  write(dir.path() / "torch" / "__init__.py", "");
  write(dir.path() / "torch" / "distributed" / "__init__.py", "");
  write(dir.path() / "torch" / "distributed" / "run.py", "import sys\nprint('TORCHRUN', sys.argv[1:])\n");
  return {{"PYTHONPATH", dir.str()}};
}

}  // namespace

TEST_CASE("torchrun's flags: a static rendezvous, underscore spellings, the Python 3.11 workaround") {
  python::torch_topology t;
  t.nnodes = "2";
  t.node_rank = "1";
  t.nproc_per_node = "4";
  t.master_addr = "node-0";
  t.master_port = "29400";
  CHECK(python::torchrun_flags(t) == strings{"--nproc_per_node=4", "--nnodes=2", "--node_rank=1",
                                             "--rdzv_backend=static", "--rdzv_endpoint=node-0:29400",
                                             "--master_addr=node-0", "--master_port=29400",
                                             "--monitor_interval=0.2", "--redirects", "9:1", "--tee", "9:1"});
}

TEST_CASE("a node's argv: torchrun as a module for a torch runtime, python -u otherwise") {
  python::torch_topology t;
  auto torch = python::code_argv("/v/bin/python", true, t, "/w/train.py", {"--epochs", "3"});
  REQUIRE(torch.size() > 6);
  CHECK(strings(torch.begin(), torch.begin() + 3) == strings{"/v/bin/python", "-m", "torch.distributed.run"});
  CHECK(strings(torch.end() - 3, torch.end()) == strings{"/w/train.py", "--epochs", "3"});
  CHECK(python::code_argv("/v/bin/python", false, t, "/w/train.py", {"x"}) ==
        strings{"/v/bin/python", "-u", "/w/train.py", "x"});
}

TEST_CASE("training files: a function gets a launcher and its kwargs file, script text is as given") {
  python_trainer pt;
  pt.function = "train";
  pt.function_args = R"({"lr": 0.1})";
  // function source given as text: the launcher loads the code written beside it
  auto files = python::training_files(pt, "def train(lr):\n    print(lr)\n", "train_job1");
  REQUIRE(files.size() == 3);
  CHECK(files[0].first == "train_job1.py");
  CHECK(files[0].second.find("_tjob_path = \"train_job1.code.py\"") != std::string::npos);
  CHECK(files[0].second.find("_tjob_module.train(**_tjob_kwargs)") != std::string::npos);
  CHECK(files[1] ==
        std::pair<std::string, std::string>{"train_job1.code.py", "def train(lr):\n    print(lr)\n"});
  CHECK(files[2] == std::pair<std::string, std::string>{"train_job1.kwargs.json", R"({"lr": 0.1})"});
  // a file on this machine is loaded where it is, not copied
  pt.source_file = "/home/u/my \"proj\"/train.py";
  files = python::training_files(pt, "def train(lr):\n    print(lr)\n", "train_job1");
  REQUIRE(files.size() == 2);
  CHECK(files[0].second.find(R"(_tjob_path = "/home/u/my \"proj\"/train.py")") != std::string::npos);
  CHECK(files[1].first == "train_job1.kwargs.json");

  python_trainer text;
  text.source = "print('hi')\n";
  CHECK(python::training_files(text, text.source, "train") ==
        std::vector<std::pair<std::string, std::string>>{{"train.py", "print('hi')\n"}});

  python_trainer script;  // a script file runs where it is
  script.source_file = "/somewhere/train.py";
  CHECK(python::training_files(script, "", "train").empty());

  // the file the code is in: what the syntax check compiles, the name training_files writes
  CHECK(python::code_file_of(script, "train") == "/somewhere/train.py");
  CHECK(python::code_file_of(script, "train", false) == "train.py");  // shipped as train.py
  CHECK(python::code_file_of(text, "train") == "train.py");
  CHECK(python::code_file_of(pt, "train_job1") == "/home/u/my \"proj\"/train.py");
  pt.source_file.clear();
  CHECK(python::code_file_of(pt, "train_job1") == "train_job1.code.py");
}

TEST_CASE("a remote trainer's checks: each package a requirement, gpus not negative") {
  python_trainer pt;
  pt.source = "print(1)\n";
  pt.packages_to_install = {"numpy>=1", "; rm -rf /"};
  auto m = tjob::test::message_of([&] { python::check_remote_trainer("TrainJob 'j'", pt); });
  CHECK(m.find("TrainJob 'j': package '; rm -rf /' is not a requirement") != std::string::npos);
  pt.packages_to_install = {"numpy"};
  pt.gpus = -1;
  CHECK(tjob::test::message_of([&] {
          python::check_remote_trainer("TrainJob 'j'", pt);
        }).find("gpus must be 0 or more") != std::string::npos);
}

TEST_CASE("the entry script runs code carried in its plan, with the script's arguments") {
  REQUIRE(std::filesystem::exists("/usr/bin/python3"));  // scripts/setup installs it
  python_trainer pt;
  pt.function = "train";
  pt.function_args = R"({"who": "plan"})";
  pt.args = {"--flag", "a b"};
  auto plan = python::entry_plan(pt, "import sys\ndef train(who):\n    print('hello', who, sys.argv[1:])\n",
                                 false, true, {});
  CHECK(plan.contains("files"));
  CHECK(plan.at("run").as_string() == "train.py");
  CHECK(!plan.contains("script"));
  tjob::test::temp_dir dir;
  write(dir.path() / "entry.py", std::string(python::entry_script()));
  auto r = tjob::test::run({"/usr/bin/python3", (dir.path() / "entry.py").string(), json::serialize(plan)});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("hello plan ['--flag', 'a b']") != std::string::npos);
}

TEST_CASE("the entry script reads a plan file and fills torchrun's placeholders from PET_* variables") {
  REQUIRE(std::filesystem::exists("/usr/bin/python3"));  // scripts/setup installs it
  tjob::test::temp_dir dir;
  auto env = fake_torch(dir);
  write(dir.path() / "entry.py", std::string(python::entry_script()));
  write(dir.path() / "train.py", "print('never run by the stand-in')\n");
  python_trainer pt;
  pt.source_file = (dir.path() / "train.py").string();
  auto plan = python::entry_plan(pt, "", true, false, (dir.path() / "train.py").string());
  CHECK(plan.at("script").as_string() == (dir.path() / "train.py").string());
  python::torch_topology t{"{PET_NNODES}", "{PET_NODE_RANK}", "{PET_NPROC_PER_NODE}", "{PET_MASTER_ADDR}",
                           "{PET_MASTER_PORT}"};
  json::array flags;
  for (auto& f : python::torchrun_flags(t)) flags.emplace_back(f);
  plan["torchrun_args"] = flags;
  plan["env_defaults"] = json::object{{"PET_NPROC_PER_NODE", "2"}, {"PET_MASTER_PORT", "29500"}};
  write(dir.path() / "plan.json", json::serialize(plan));
  env["PET_NNODES"] = "3";
  env["PET_NODE_RANK"] = "2";
  env["PET_NPROC_PER_NODE"] = "auto";  // not a number: the plan's default
  env["PET_MASTER_ADDR"] = "job-node-0-0.job";
  auto r = tjob::test::run(
      {"/usr/bin/python3", (dir.path() / "entry.py").string(), (dir.path() / "plan.json").string()}, env);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("TORCHRUN ['--nproc_per_node=2', '--nnodes=3', '--node_rank=2', '--rdzv_backend=static', "
                   "'--rdzv_endpoint=job-node-0-0.job:29500', '--master_addr=job-node-0-0.job', "
                   "'--master_port=29500'") != std::string::npos);
}

TEST_CASE("a job that runs elsewhere takes its code with it, a script file's text too") {
  python_trainer script;
  script.source_file = "/somewhere/train.py";
  CHECK(python::shipped_files(script, "print('from the file')\n") ==
        std::vector<std::pair<std::string, std::string>>{{"train.py", "print('from the file')\n"}});
  python_trainer fn;
  fn.function = "go";
  fn.function_args = "{}";
  fn.source_file = "/somewhere/train.py";  // not there where the job runs: shipped
  auto files = python::shipped_files(fn, "def go():\n    pass\n");
  REQUIRE(files.size() == 3);
  CHECK(files[0].first == "train.py");
  CHECK(files[1] == std::pair<std::string, std::string>{"train.code.py", "def go():\n    pass\n"});
  CHECK(files[2] == std::pair<std::string, std::string>{"train.kwargs.json", "{}"});
}

TEST_CASE("an index URL that pip could not read is refused when the job is submitted") {
  python_trainer pt;
  pt.source = "print(1)\n";
  for (std::string good :
       {"https://pypi.org/simple", "http://127.0.0.1:8080/simple", "HTTPS://x/y", "file:///srv/index"}) {
    pt.pip_index_urls = {good};
    CHECK_NOTHROW(python::check_python_code("TrainJob 'j'", pt));
  }
  for (std::string bad : {"notaurl", "https://", "ftp://x/simple", "https://x/ simple", "/srv/index"}) {
    CAPTURE(bad);
    pt.pip_index_urls = {"https://pypi.org/simple", bad};
    CHECK(tjob::test::code_of([&] { python::check_python_code("TrainJob 'j'", pt); }) ==
          errc::invalid_argument);
    auto m = tjob::test::message_of([&] { python::check_python_code("TrainJob 'j'", pt); });
    CHECK(m.find("TrainJob 'j': pip_index_urls (--index-url): ") == 0);
    CHECK(m.find("give an http://, https:// or file:// URL") != std::string::npos);
  }
}

TEST_CASE(
    "resources_per_node: cpu, memory and gpu set the trainer, and a bad one names the key and the fix") {
  tjob::python_trainer t;
  tjob::set_resources_per_node(t, {{"cpu", "4"}, {"memory", "10G"}, {"nvidia.com/gpu", "2"}});
  CHECK(t.procs_per_node == 4);
  CHECK(t.cpu_limit);
  CHECK(t.memory_limit == 10000000000ull);
  CHECK(t.gpus == 2);
  tjob::set_resources_per_node(t, {{"memory", "512Mi"}, {"gpu", "0"}});
  CHECK(t.memory_limit == 512ull << 20);
  CHECK(t.gpus == 0);
  struct bad {
    std::map<std::string, std::string> r;
    std::string said;
  };
  for (const auto& b :
       std::vector<bad>{{{{"cpu", "0"}}, "--resources cpu=0: give a whole number of processes"},
                        {{{"cpu", "500m"}}, "cpu=500m"},
                        {{{"memory", "4Gb"}}, "memory=4Gb: give bytes"},
                        {{{"gpu", "-1"}}, "gpu=-1: give a whole number of GPUs"},
                        {{{"disk", "1"}}, "--resources 'disk': unknown key"}}) {
    try {
      tjob::python_trainer u;
      tjob::set_resources_per_node(u, b.r, "--resources");
      FAIL("accepted: " << b.said);
    } catch (const tjob::error& e) {
      CHECK(e.code() == tjob::errc::invalid_argument);
      CHECK_MESSAGE(std::string(e.what()).find(b.said) != std::string::npos, e.what());
    }
  }
}
