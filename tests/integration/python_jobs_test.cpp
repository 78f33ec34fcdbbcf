// Python training jobs: venv, pip against a real index on 127.0.0.1, the
// training code under python or torchrun.
#include "tests/support/fold_check.hpp"
#include "tests/support/test_support.hpp"

#include <tjob/client.hpp>

#include <doctest/doctest.h>

#include <sys/stat.h>

#include <unistd.h>
#include <cstdlib>
#include <fstream>

using namespace tjob;
using namespace std::chrono_literals;
using tjob::test::code_of;
using tjob::test::message_of;

namespace {

using tjob::test::package_index;

struct fixture : tjob::test::folded_home {
  fixture() {
    // Hermetic pip: no user or machine pip.conf (find-links, other indexes).
    ::setenv("PIP_CONFIG_FILE", "/dev/null", 1);
    ::unsetenv("DEFAULT_PIP_INDEX_URLS");
  }
  engine_config config() const { return home_fixture::config(2s); }
  std::string write(const std::string& name, const std::string& text) const {
    auto p = dir.path() / name;
    std::ofstream(p) << text;
    return p.string();
  }
};

train_request python_job(python_trainer t, std::string runtime = "python", std::string name = {}) {
  train_request r;
  r.name = std::move(name);
  r.runtime = std::move(runtime);
  r.job_trainer = std::move(t);
  return r;
}

}  // namespace

TEST_CASE_FIXTURE(fixture,
                  "a function job installs its packages from the index and runs with its keyword arguments") {
  package_index index;
  trainer_client c(config());
  python_trainer t;
  t.source =
      "def train_model(lr, epochs=1, note=''):\n"
      "    import sys, tinyjob\n"
      "    print(tinyjob.hello())\n"
      "    print('lr', lr, 'epochs', epochs, 'note', note)\n"
      "    print('in venv', sys.prefix != sys.base_prefix)\n";
  t.function = "train_model";
  t.function_args = R"js({"lr": 0.5, "epochs": 3, "note": "a'b\"c $(x)"})js";
  t.packages_to_install = {"tinyjob"};
  t.pip_index_urls = {index.url};
  auto name = c.train(python_job(t));
  auto job = c.wait_for_job_status(name, {job_status::complete}, 120s);
  CHECK(job.steps[0].exit_code == 0);
  auto log = c.get_job_logs(name).read_all();
  CAPTURE(log);
  CHECK(log.find("hi from tinyjob 1.2.0 on tinydep 0.1.0\n") != std::string::npos);
  CHECK(log.find("lr 0.5 epochs 3 note a'b\"c $(x)\n") != std::string::npos);
  CHECK(log.find("in venv True\n") != std::string::npos);
  CHECK(log.find("[tjob] venv done in ") != std::string::npos);
  CHECK(log.find("[tjob] installing 1 package(s): tinyjob") != std::string::npos);
  CHECK(log.find("[tjob] pip install done in ") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(c.home() / "jobs" / name / "venv"));  // cleaned up after success
  int setup_events = 0;
  for (const auto& e : c.get_job_events(name)) setup_events += e.reason == "Setup";
  CHECK(setup_events >= 3);  // venv done, pip started, pip done
}

TEST_CASE_FIXTURE(fixture,
                  "a package that does not exist fails the job with pip's message and removes the venv") {
  package_index index;
  trainer_client c(config());
  python_trainer t;
  t.source = "def main():\n    print('never')\n";
  t.function = "main";
  t.packages_to_install = {"nosuchpkg-tjob"};
  t.pip_index_urls = {index.url};
  auto name = c.train(python_job(t));
  std::string msg = message_of([&] { c.wait_for_job_status(name, {job_status::complete}, 120s); });
  CHECK(msg.find("TrainJob " + name + " is Failed") != std::string::npos);
  CHECK(msg.find("No matching distribution found for nosuchpkg-tjob") != std::string::npos);
  auto job = c.get_job(name);
  CHECK(job.steps[0].reason == "setup failed: pip install exit code 1");
  CHECK(c.get_job_logs(name).read_all().find("never") == std::string::npos);
  CHECK_FALSE(std::filesystem::exists(c.home() / "jobs" / name / "venv"));
}

TEST_CASE_FIXTURE(fixture, "package names with shell syntax reach pip as inert data") {
  package_index index;
  trainer_client c(config());
  auto marker = dir.path() / "pwned";
  python_trainer t;
  t.source = "def main():\n    pass\n";
  t.function = "main";
  t.packages_to_install = {"tinyjob; $(touch " + marker.string() + ")",
                           "x\"; touch " + marker.string() + "; \""};
  t.pip_index_urls = {index.url};
  auto name = c.train(python_job(t));
  auto job = c.wait_for_job_status(name, {job_status::complete, job_status::failed}, 120s);
  CHECK(job.status == job_status::failed);
  CHECK_FALSE(std::filesystem::exists(marker));
}

TEST_CASE_FIXTURE(fixture, "a script runs as it is with its arguments and the engine's environment") {
  ::setenv("TJOB_TEST_FROM_ENGINE", "yes", 1);
  trainer_client c(config());
  python_trainer t;
  t.source_file = write("script.py",
                        "import os, sys\nprint('argv', sys.argv[1:])\nprint('engine', "
                        "os.environ.get('TJOB_TEST_FROM_ENGINE'))\n"
                        "print('job', os.environ.get('MY_VAR'))\nsys.exit(3)\n");
  t.args = {"--epochs", "2", "it's"};
  t.env = {{"MY_VAR", "v1"}};
  auto name = c.train(python_job(t));
  auto job = c.wait_for_job_status(name, {job_status::failed}, 120s);
  CHECK(job.steps[0].exit_code == 3);
  auto log = c.get_job_logs(name).read_all();
  CHECK(log.find("argv ['--epochs', '2', \"it's\"]\n") != std::string::npos);
  CHECK(log.find("engine yes\n") != std::string::npos);
  CHECK(log.find("job v1\n") != std::string::npos);
}

TEST_CASE_FIXTURE(fixture, "script text given through the API runs as a script") {
  trainer_client c(config());
  python_trainer t;
  t.source = "import sys\nprint('text script', sys.argv[1:])\n";
  t.args = {"x"};
  auto name = c.train(python_job(t));
  c.wait_for_job_status(name, {job_status::complete}, 120s);
  CHECK(c.get_job_logs(name).read_all().find("text script ['x']\n") != std::string::npos);
}

TEST_CASE_FIXTURE(fixture, "a function whose code starts processes with spawn or forkserver runs them and ends") {
  // Issue 42: each child re-imported the launcher as __mp_main__, whose last
  // line called the function again without a __name__ guard: every child
  // failed, the pool respawned them, and the job never ended.
  trainer_client c(config());
  for (const std::string method : {"spawn", "forkserver"}) {
    python_trainer t;
    t.source =
        "import multiprocessing\n"
        "def square(x):\n"
        "    return x * x\n"
        "def train(method):\n"
        "    with multiprocessing.get_context(method).Pool(2) as pool:\n"
        "        print(method, sum(pool.map(square, range(10))), flush=True)\n";
    t.function = "train";
    t.function_args = R"({"method": ")" + method + R"("})";
    t.python = "/usr/bin/python3";
    auto name = c.train(python_job(t));
    auto job = c.wait_for_job_status(name, {job_status::complete}, 120s);
    auto log = c.get_job_logs(name).read_all();
    CAPTURE(log);
    CHECK(log.find(method + " 285\n") != std::string::npos);
    CHECK(log.find("Traceback") == std::string::npos);
  }
}

TEST_CASE_FIXTURE(fixture, "a syntax error fails the job with Python's traceback in the log") {
  trainer_client c(config());
  python_trainer t;
  t.source = "def main():\n    print('x'\n";
  t.function = "main";
  auto name = c.train(python_job(t));
  c.wait_for_job_status(name, {job_status::failed}, 120s);
  CHECK(c.get_job_logs(name).read_all().find("SyntaxError") != std::string::npos);
}

TEST_CASE_FIXTURE(fixture, "a syntax error is found before a venv is built for nothing") {
  auto cfg = config();
  cfg.venv_cache = false;  // every job builds its venv: the check must come first
  trainer_client c(cfg);
  python_trainer t;
  t.source_file = write("broken.py", "import os\ndef main():\n    print('x'\n");
  t.function = "main";
  t.packages_to_install = {"never-installed"};
  auto job = c.wait_for_job_status(c.train(python_job(t)), {job_status::failed}, 120s);
  auto log = c.get_job_logs(job.name).read_all();
  CHECK(log.find("[tjob] checking the syntax of " + t.source_file) != std::string::npos);
  CHECK(log.find("File \"" + t.source_file + "\", line 3") != std::string::npos);
  CHECK(log.find("SyntaxError") != std::string::npos);
  CHECK(log.find("virtual environment") == std::string::npos);  // no venv, no pip
  CHECK(log.find("never-installed") == std::string::npos);
  CHECK(job.steps[0].reason.find("setup failed: check") == 0);
}

TEST_CASE_FIXTURE(fixture, "bad Python requests are rejected before anything is created") {
  trainer_client c(config());
  python_trainer t;
  t.source = "def train_model():\n    pass\n";
  t.function = "nope";
  CHECK(message_of([&] { c.train(python_job(t)); }).find("function 'nope' is not defined") !=
        std::string::npos);
  t.function = "train_model";
  t.function_args = "[1, 2]";
  CHECK(message_of([&] { c.train(python_job(t)); }).find("function_args") != std::string::npos);
  t.function_args = "{not json";
  CHECK(code_of([&] { c.train(python_job(t)); }) == errc::invalid_argument);
  t.function_args = {};
  t.packages_to_install = {"numpy", "NumPy"};
  CHECK(message_of([&] { c.train(python_job(t)); }).find("Duplicate dependency") != std::string::npos);
  t.packages_to_install = {};
  t.python = "no-such-python-tjob";
  CHECK(code_of([&] { c.train(python_job(t)); }) == errc::executable_not_found);
  t.python = {};
  t.source_file = write("f.py", "def train_model(): pass\n");
  CHECK(code_of([&] { c.train(python_job(t)); }) == errc::invalid_argument);  // both source and file
  t.source = {};
  t.source_file = (dir.path() / "missing.py").string();
  t.function = {};
  CHECK(code_of([&] { c.train(python_job(t)); }) == errc::invalid_argument);
  CHECK(c.list_jobs().empty());
}

TEST_CASE_FIXTURE(fixture, "keep_venv keeps the venv and says where it is") {
  trainer_client c(config());
  python_trainer t;
  t.source = "def main():\n    print('ok')\n";
  t.function = "main";
  t.keep_venv = true;
  auto name = c.train(python_job(t));
  c.wait_for_job_status(name, {job_status::complete}, 120s);
  auto venv = c.home() / "jobs" / name / "venv";
  CHECK(std::filesystem::exists(venv / "bin" / "python"));
  CHECK(c.get_job_logs(name).read_all().find("[tjob] venv kept at " + venv.string()) != std::string::npos);
}

TEST_CASE_FIXTURE(fixture, "a torch job runs two processes under torchrun with gloo all_reduce") {
  if (!tjob::test::system_python_has("torch.distributed")) return;
  auto cfg = config();
  cfg.admission.cpus = 0;  // two jobs of two processes each, at once, on any machine
  trainer_client c(cfg);
  python_trainer t;
  t.source =
      "def allreduce():\n"
      "    import os, torch, torch.distributed as dist\n"
      "    dist.init_process_group('gloo')\n"
      "    r = dist.get_rank()\n"
      "    x = torch.tensor([float(r + 1)])\n"
      "    dist.all_reduce(x)\n"
      "    print(f\"rank={r} world={os.environ['WORLD_SIZE']} sum={x.item()}\", flush=True)\n"
      "    dist.destroy_process_group()\n";
  t.function = "allreduce";
  t.python = "/usr/bin/python3";
  t.system_site_packages = true;
  t.procs_per_node = 2;
  // Two at once: each gets its own rendezvous port.
  auto a = c.train(python_job(t, "torch-distributed"));
  auto b = c.train(python_job(t, "torch-distributed"));
  for (const auto& name : {a, b}) {
    auto job = c.wait_for_job_status(name, {job_status::complete}, 300s);
    CHECK(job.steps[0].exit_code == 0);
    auto log = c.get_job_logs(name).read_all();
    CAPTURE(log);
    CHECK(log.find("rank=0 world=2 sum=3.0") != std::string::npos);
    CHECK(log.find("rank=1 world=2 sum=3.0") != std::string::npos);
  }
}

TEST_CASE_FIXTURE(fixture,
                  "a 2-node torch job runs steps node-0 and node-1 with WORLD_SIZE the sum of processes") {
  if (!tjob::test::system_python_has("torch.distributed")) return;
  auto cfg = config();
  cfg.admission.cpus = 0;  // 2 nodes x 2 processes, on a machine of any size
  trainer_client c(cfg);
  python_trainer t;
  t.source = tjob::test::allreduce_source;
  t.function = "allreduce";
  t.python = "/usr/bin/python3";
  t.system_site_packages = true;
  t.procs_per_node = 2;
  auto req = python_job(t, "torch-distributed");
  req.num_nodes = 2;
  auto name = c.train(req);
  auto job = c.wait_for_job_status(name, {job_status::complete}, 300s);
  CHECK(job.num_nodes == 2);
  REQUIRE(job.steps.size() == 2);
  CHECK(job.steps[0].name == "node-0");
  CHECK(job.steps[1].name == "node-1");
  for (const auto& s : job.steps) {
    CHECK(s.status == job_status::complete);
    CHECK(s.exit_code == 0);
  }
  auto log0 = c.get_job_logs(name, {.step = "node-0"}).read_all();
  auto log1 = c.get_job_logs(name, {.step = "node-1"}).read_all();
  CAPTURE(log0);
  CAPTURE(log1);
  CHECK(log0.find("node=0 rank=0 world=4 sum=10.0") != std::string::npos);
  CHECK(log0.find("node=0 rank=1 world=4 sum=10.0") != std::string::npos);
  CHECK(log1.find("node=1 rank=2 world=4 sum=10.0") != std::string::npos);
  CHECK(log1.find("node=1 rank=3 world=4 sum=10.0") != std::string::npos);
  CHECK(log0.find("[tjob] venv done") != std::string::npos);  // setup runs once, in node-0
  CHECK(log1.find("[tjob]") == std::string::npos);
}

TEST_CASE_FIXTURE(fixture,
                  "two ranks that print at once on one node never tear each other's lines in the log") {
  if (!tjob::test::system_python_has("torch.distributed")) return;
  // Issue 42: torchrun gives its workers `python -u`, so print() wrote the
  // text and its newline apart, and the ranks' writes to the shared log
  // interleaved (246 of 600 lines whole in one run).
  auto cfg = config();
  cfg.admission.cpus = 0;
  trainer_client c(cfg);
  python_trainer t;
  t.source = tjob::test::rank_chatter_source;
  t.function = "chatter";
  t.python = "/usr/bin/python3";
  t.system_site_packages = true;
  t.procs_per_node = 2;
  auto name = c.train(python_job(t, "torch-distributed"));
  c.wait_for_job_status(name, {job_status::complete}, 300s);
  auto lines = tjob::test::read_rank_chatter(c.get_job_logs(name).read_all());
  CHECK_MESSAGE(lines.torn == 0, lines.torn << " torn lines, e.g. \"" << lines.example << "\"");
  CHECK(lines.whole.size() == 1200);  // 300 of each kind, from each rank
}

TEST_CASE_FIXTURE(fixture, "one failing node stops the others and the job is Failed") {
  if (!tjob::test::system_python_has("torch.distributed")) return;
  trainer_client c(config());
  python_trainer t;
  t.source =
      // Node 1 crashes outright (its torchrun agent dies); node 0 would work on.
      "def work():\n"
      "    import os, signal, time\n"
      "    if os.environ['GROUP_RANK'] == '1':\n"
      "        print('node 1 crashes', flush=True)\n"
      "        os.kill(os.getppid(), signal.SIGKILL)\n"
      "        time.sleep(120)\n"
      "    print('node 0 works', flush=True)\n"
      "    time.sleep(120)\n";
  t.function = "work";
  t.python = "/usr/bin/python3";
  t.system_site_packages = true;
  auto req = python_job(t, "torch-distributed");
  req.num_nodes = 2;
  auto name = c.train(req);
  auto job = c.wait_for_job_status(name, {job_status::failed}, 300s);
  REQUIRE(job.steps.size() == 2);
  CHECK(job.steps[1].status == job_status::failed);
  CHECK(job.steps[1].reason == "killed by signal 9 (SIGKILL)");
  CHECK(job.steps[0].status == job_status::failed);
  CAPTURE(job.steps[0].reason);
  CHECK(job.steps[0].reason.find("stopped: node-1 failed") == 0);
}

TEST_CASE_FIXTURE(fixture,
                  "the node whose worker fails first is blamed, and the others are stopped at once") {
  if (!tjob::test::system_python_has("torch.distributed")) return;
  trainer_client c(config());
  python_trainer t;
  t.python = "/usr/bin/python3";
  t.system_site_packages = true;
  t.function = "work";
  // Rank 1 raises after the first all_reduce; rank 0's next collective then
  // fails with a connection error, and its torchrun may well end first.
  t.source =
      "def work():\n"
      "    import os, torch, torch.distributed as dist\n"
      "    dist.init_process_group('gloo')\n"
      "    x = torch.ones(1)\n"
      "    dist.all_reduce(x)\n"
      "    if os.environ['GROUP_RANK'] == '1':\n"
      "        raise RuntimeError('boom on node 1')\n"
      "    for _ in range(1000):\n"
      "        dist.all_reduce(x)\n";
  auto req = python_job(t, "torch-distributed");
  req.num_nodes = 2;
  auto job = c.wait_for_job_status(c.train(req), {job_status::failed}, 300s);
  REQUIRE(job.steps.size() == 2);
  CAPTURE(job.steps[0].reason);
  CAPTURE(job.steps[1].reason);
  CHECK(job.reason.rfind("rank 1 raised RuntimeError: boom on node 1 (", 0) == 0);
  CHECK(job.steps[1].reason == job.reason);
  CHECK(job.steps[0].reason.find("node-1 failed") != std::string::npos);
  auto log1 = c.get_job_logs(job.name, {.step = "node-1"}).read_all();
  CHECK(log1.find("RuntimeError: boom on node 1") != std::string::npos);  // the traceback is there

  // Rank 1 raises while rank 0 sleeps without collectives: node-1's torchrun
  // would wait at its exit barrier until node-0 ended. Both are stopped now.
  t.source =
      "def work():\n"
      "    import os, time\n"
      "    if os.environ['GROUP_RANK'] == '1':\n"
      "        raise ValueError('bad shard')\n"
      "    time.sleep(900)\n";
  req.job_trainer = t;
  auto quiet = c.wait_for_job_status(c.train(req), {job_status::failed}, 240s);
  CAPTURE(quiet.steps[0].reason);
  CHECK(quiet.reason.rfind("rank 1 raised ValueError: bad shard (", 0) == 0);
  CHECK(quiet.steps[0].reason.rfind("stopped: node-1 failed (", 0) == 0);
}

TEST_CASE_FIXTURE(fixture, "several nodes need a torch runtime") {
  trainer_client c(config());
  python_trainer t;
  t.source = "def main():\n    pass\n";
  t.function = "main";
  auto req = python_job(t, "python");
  req.num_nodes = 2;
  CHECK(message_of([&] { c.train(req); }).find("needs a torch runtime") != std::string::npos);
  req.num_nodes = 0;
  CHECK(code_of([&] { c.train(req); }) == errc::invalid_argument);
}

TEST_CASE_FIXTURE(fixture,
                  "GPUs are leased from the device list and a job waits Created until its GPUs are free") {
  auto cfg = config();
  cfg.gpu_devices = {"0", "1"};
  trainer_client c(cfg);
  python_trainer hog;
  hog.source =
      "def hold(path):\n"
      "    import os, time\n"
      "    print('A has', os.environ['CUDA_VISIBLE_DEVICES'], flush=True)\n"
      "    time.sleep(120)\n";
  hog.function = "hold";
  hog.function_args = "{\"path\": \"unused\"}";
  hog.gpus = 2;
  auto a = c.train(python_job(hog));
  auto a_log = c.get_job_logs(a, {.follow = true});
  while (auto line = a_log.next())
    if (line->rfind("A has", 0) == 0) {
      CHECK(*line == "A has 0,1\n");
      break;
    }

  python_trainer one;
  one.source = "def show():\n    import os\n    print('B has', os.environ['CUDA_VISIBLE_DEVICES'])\n";
  one.function = "show";
  one.gpus = 1;
  auto b = c.train(python_job(one));
  auto b_log = c.get_job_logs(b, {.follow = true});
  auto first = b_log.next();
  REQUIRE(first.has_value());
  CHECK(first->find("[tjob] waiting for 1 GPU(s)") == 0);
  CHECK(c.get_job(b).status == job_status::created);  // queued, not running

  c.cancel_job(a);  // frees both
  auto job = c.wait_for_job_status(b, {job_status::complete}, 120s);
  CHECK(job.steps[0].exit_code == 0);
  auto log = c.get_job_logs(b).read_all();
  CHECK((log.find("B has 0\n") != std::string::npos || log.find("B has 1\n") != std::string::npos));
  bool queued = false;
  for (const auto& e : c.get_job_events(b)) queued = queued || e.reason == "Queued";
  CHECK(queued);

  one.gpus = 3;
  CHECK(message_of([&] { c.train(python_job(one)); }).find("needs 3 GPU(s)") != std::string::npos);
}

TEST_CASE_FIXTURE(fixture, "a job waiting for GPUs can be cancelled and never starts") {
  auto cfg = config();
  cfg.gpu_devices = {"7"};
  trainer_client c(cfg);
  python_trainer hog;
  hog.source = "def hold():\n    import time\n    print('holding', flush=True)\n    time.sleep(120)\n";
  hog.function = "hold";
  hog.gpus = 1;
  auto a = c.train(python_job(hog));
  auto a_log = c.get_job_logs(a, {.follow = true});
  REQUIRE(a_log.next().has_value());
  auto b = c.train(python_job(hog));
  auto b_log = c.get_job_logs(b, {.follow = true});
  REQUIRE(b_log.next().has_value());  // "waiting for 1 GPU(s)"
  c.cancel_job(b);
  auto job = c.get_job(b);
  CHECK(job.status == job_status::failed);
  CHECK(job.steps[0].reason == "cancelled");
  CHECK(job.steps[0].pid == 0);  // it never ran
  c.cancel_job(a);
}

namespace {

// Maps 2 GiB (address space, nothing resident), then touches `mib` MiB.
python_trainer memory_eater(int mib) {
  python_trainer t;
  t.source =
      "def grab(mib):\n"
      "    import mmap\n"
      "    m = mmap.mmap(-1, 2 << 30)\n"
      "    print('mapped 2 GiB', flush=True)\n"
      "    b = bytearray(mib << 20)\n"
      "    for i in range(0, len(b), 4096):\n"
      "        b[i] = 1\n"
      "    print('touched', mib, 'MiB', flush=True)\n";
  t.function = "grab";
  t.function_args = "{\"mib\": " + std::to_string(mib) + "}";
  t.memory_limit = 512ull << 20;
  return t;
}

bool memory_cgroups_writable() {
  if (::access("/sys/fs/cgroup/memory/cgroup.procs", W_OK) == 0) return true;
  auto controllers = tjob::test::read_file("/sys/fs/cgroup/cgroup.controllers");
  return controllers.find("memory") != std::string::npos &&
         ::access("/sys/fs/cgroup/cgroup.procs", W_OK) == 0;
}

}  // namespace

TEST_CASE_FIXTURE(fixture,
                  "memory= limits the node's resident memory with a cgroup the OOM killer enforces") {
  trainer_client c(config());
  if (!memory_cgroups_writable()) {
    // What this machine allows: the fallback, and the log says so.
    auto name = c.train(python_job(memory_eater(64)));
    c.wait_for_job_status(name, {job_status::complete, job_status::failed}, 120s);
    CHECK(c.get_job_logs(name).read_all().find("[tjob] warning: memory limited as address space") !=
          std::string::npos);
    return;
  }
  // 2 GiB mapped and 64 MiB used fits 512 MiB: only what is resident counts.
  auto fits = c.train(python_job(memory_eater(64)));
  c.wait_for_job_status(fits, {job_status::complete}, 120s);
  auto log = c.get_job_logs(fits).read_all();
  CAPTURE(log);
  CHECK(log.find("[tjob] memory limited to 512 MiB for the node (") != std::string::npos);
  // (the engine's line may come between the two: it writes it once the process runs)
  CHECK(log.find("mapped 2 GiB\n") != std::string::npos);
  CHECK(log.find("touched 64 MiB\n") != std::string::npos);
  auto at = log.find("for the node (") + 14;
  auto dir = log.substr(at, log.find(')', at) - at);
  CHECK_FALSE(std::filesystem::exists(dir));  // removed with the step

  // 1 GiB used does not: the OOM killer ends it, and the step says so.
  auto over = c.train(python_job(memory_eater(1024)));
  auto job = c.wait_for_job_status(over, {job_status::failed}, 120s);
  CHECK(job.steps[0].reason == "OOMKilled");
  CHECK(job.reason == "OOMKilled");
  auto over_log = c.get_job_logs(over).read_all();
  CAPTURE(over_log);
  CHECK(over_log.find("mapped 2 GiB\n") != std::string::npos);
  CHECK(over_log.find("touched") == std::string::npos);
  CHECK(over_log.find("[tjob] the kernel's OOM killer ended a process of node-0") != std::string::npos);

  // The issue's case: torch imports under 500 MiB (its mappings are far larger).
  if (!tjob::test::system_python_has("torch")) return;
  python_trainer t;
  t.source = "def main():\n    import torch\n    print('sum', float(torch.ones(4).sum()), flush=True)\n";
  t.function = "main";
  t.python = "/usr/bin/python3";
  t.system_site_packages = true;
  t.memory_limit = 500ull << 20;
  auto with_torch = c.train(python_job(t));
  c.wait_for_job_status(with_torch, {job_status::complete}, 300s);
  CHECK(c.get_job_logs(with_torch).read_all().find("sum 4.0\n") != std::string::npos);
}

TEST_CASE_FIXTURE(fixture, "a command's memory= is its limit too, said in its events and never in its log") {
  // Issue 42: --resources memory= on a command was accepted and not enforced.
  if (!memory_cgroups_writable()) return (void)tjob::test::skip("a writable memory cgroup (run as root)");
  trainer_client c(config());
  auto command_job = [](const std::string& name, int mib, std::uint64_t memory) {
    train_request r;
    r.name = name;
    command_trainer t;
    t.command = {
        "/usr/bin/python3", "-c",
        "b = bytearray(" + std::to_string(mib) +
            " << 20)\nfor i in range(0, len(b), 4096):\n    b[i] = 1\nprint('touched', flush=True)\n"};
    t.memory = memory;
    r.job_trainer = t;
    return r;
  };
  auto fits = c.train(command_job("cmd-fits", 32, 256ull << 20));
  c.wait_for_job_status(fits, {job_status::complete}, 120s);
  CHECK(c.get_job_logs(fits).read_all() == "touched\n");  // its own bytes only
  bool said = false;
  for (const auto& e : c.get_job_events(fits))
    said = said || (e.reason == "Setup" && e.message.find("memory limited to 256 MiB for the node (") == 0);
  CHECK(said);

  auto over = c.train(command_job("cmd-over", 600, 128ull << 20));
  auto job = c.wait_for_job_status(over, {job_status::failed}, 120s);
  CHECK(job.steps[0].reason == "OOMKilled");
  CHECK(c.get_job_logs(over).read_all().find("touched") == std::string::npos);
  bool killed = false;
  for (const auto& e : c.get_job_events(over))
    killed =
        killed || e.message.find("the kernel's OOM killer ended a process of node-0") != std::string::npos;
  CHECK(killed);
}

TEST_CASE_FIXTURE(fixture,
                  "without a memory cgroup, memory= falls back to an address-space limit and says so") {
  // No cgroup filesystem where tjob looks: the fallback, as on a machine without one.
  struct root_guard {
    explicit root_guard(const std::string& r) { ::setenv("TJOB_CGROUP_ROOT", r.c_str(), 1); }
    ~root_guard() { ::unsetenv("TJOB_CGROUP_ROOT"); }
  } guard((dir.path() / "no-cgroups").string());
  trainer_client c(config());
  auto name = c.train(python_job(memory_eater(64)));
  auto job = c.wait_for_job_status(name, {job_status::failed}, 120s);
  auto log = c.get_job_logs(name).read_all();
  CAPTURE(log);
  CHECK(log.find("[tjob] warning: memory limited as address space, not resident memory: no cgroup memory "
                 "controller is mounted") != std::string::npos);
  const bool refused =
      log.find("MemoryError") != std::string::npos || log.find("Cannot allocate memory") != std::string::npos;
  CHECK(refused);
  CHECK(log.find("mapped 2 GiB") == std::string::npos);  // the mapping itself is refused
  CHECK(job.steps[0].exit_code == 1);
}

TEST_CASE_FIXTURE(fixture, "a job with dependencies from the system site packages (Debian's numpy)") {
  if (!tjob::test::system_python_has("numpy")) return;
  trainer_client c(config());
  python_trainer t;
  t.source =
      "def fit(n=200):\n"
      "    import numpy as np\n"
      "    rng = np.random.default_rng(0)\n"
      "    X = np.c_[rng.normal(size=(n, 3)), np.ones(n)]\n"
      "    w = np.array([1.5, -2.0, 0.5, 3.0])\n"
      "    y = X @ w + 0.01 * rng.normal(size=n)\n"
      "    est, *_ = np.linalg.lstsq(X, y, rcond=None)\n"
      "    print('weights', ' '.join(f'{v:.2f}' for v in est))\n";
  t.function = "fit";
  t.python = "/usr/bin/python3";
  t.system_site_packages = true;
  t.packages_to_install = {"numpy"};  // satisfied by the system's; pip needs no index
  auto name = c.train(python_job(t));
  c.wait_for_job_status(name, {job_status::complete}, 120s);
  auto log = c.get_job_logs(name).read_all();
  CAPTURE(log);
  CHECK(log.find("weights 1.50 -2.00 0.50 3.00\n") != std::string::npos);
  CHECK(log.find("Requirement already satisfied: numpy") != std::string::npos);
}

TEST_CASE_FIXTURE(fixture, "an unreachable index fails the job with pip's message instead of hanging") {
  trainer_client c(config());
  python_trainer t;
  t.source = "def main():\n    pass\n";
  t.function = "main";
  t.packages_to_install = {"tinyjob"};
  t.pip_index_urls = {"http://127.0.0.1:1/simple/"};  // nothing listens on port 1
  auto name = c.train(python_job(t));
  auto job = c.wait_for_job_status(name, {job_status::failed}, 120s);
  CHECK(job.steps[0].reason == "setup failed: pip install exit code 1");
  auto log = c.get_job_logs(name).read_all();
  CHECK(log.find("Connection refused") != std::string::npos);
  CHECK(log.find("[tjob] pip install failed after") != std::string::npos);
}

TEST_CASE_FIXTURE(fixture, "a venv that cannot be created fails the job at that step") {
  trainer_client c(config());
  python_trainer t;
  t.source = "def main():\n    pass\n";
  t.function = "main";
  // a Python whose `-m venv` fails (the syntax check before it passes)
  auto no_venv = write("no-venv-python",
                       "#!/bin/sh\n[ \"$1\" = -m ] && { echo no venv here >&2; exit 1; }\n"
                       "exec /usr/bin/python3 \"$@\"\n");
  ::chmod(no_venv.c_str(), 0755);
  t.python = no_venv;
  auto name = c.train(python_job(t));
  auto job = c.wait_for_job_status(name, {job_status::failed}, 60s);
  CHECK(job.steps[0].reason.rfind("setup failed: venv", 0) == 0);
  auto log = c.get_job_logs(name).read_all();
  CHECK(log.find("[tjob] venv failed after") != std::string::npos);
  CHECK(log.find("no venv here") != std::string::npos);
  // a program that runs but is no Python fails the first setup phase, the check
  t.python = tjob::test::helper_bin();
  auto not_python = c.wait_for_job_status(c.train(python_job(t)), {job_status::failed}, 60s);
  CHECK(not_python.steps[0].reason.rfind("setup failed: check", 0) == 0);
}

TEST_CASE_FIXTURE(fixture, "cpu=N limits a node's CPU time with a cgroup where the machine allows") {
  trainer_client c(config());
  python_trainer t;
  t.source = "def work():\n    import time\n    print('ready', flush=True)\n    time.sleep(120)\n";
  t.function = "work";
  t.procs_per_node = 1;
  t.cpu_limit = true;
  auto name = c.train(python_job(t));
  auto log = c.get_job_logs(name, {.follow = true});
  std::string seen;
  bool limited = false, refused = false, ready = false;
  while (!(ready && (limited || refused))) {
    auto line = log.next();
    REQUIRE(line.has_value());
    seen += *line;
    limited = limited || line->rfind("[tjob] CPU time limited to 1 CPU(s) (", 0) == 0;
    refused = refused || line->rfind("[tjob] CPU time not limited: ", 0) == 0;
    ready = ready || *line == "ready\n";
  }
  CAPTURE(seen);
  if (::access("/sys/fs/cgroup/cpu/cgroup.procs", W_OK) == 0) {
    REQUIRE(limited);
    auto at = seen.find("[tjob] CPU time limited to 1 CPU(s) (") + 37;
    auto dir = seen.substr(at, seen.find(')', at) - at);
    CHECK(tjob::test::read_file(dir + "/cpu.cfs_quota_us") == "100000\n");
    auto pid = c.get_job(name).steps[0].pid;
    auto where = tjob::test::read_file("/proc/" + std::to_string(pid) + "/cgroup");
    CHECK(where.find(dir.substr(std::string("/sys/fs/cgroup/cpu").size()) + "\n") != std::string::npos);
    c.cancel_job(name);
    CHECK_FALSE(std::filesystem::exists(dir));  // removed with the step
  } else {
    CHECK(refused);
    c.cancel_job(name);
  }
}

TEST_CASE_FIXTURE(fixture,
                  "a directory sent with a job is its working directory and importable, a copy per job, its "
                  "snapshot taken once") {
  // Issue 40: a package of several modules and a data file beside the function.
  const auto src = dir.path() / "project";
  std::filesystem::create_directories(src / "pkg");
  std::filesystem::create_directories(src / "data");
  std::filesystem::create_directories(src / "outputs");
  std::ofstream(src / "pkg" / "__init__.py") << "from pkg.maths import double\n";
  std::ofstream(src / "pkg" / "maths.py") << "def double(x):\n    return 2 * x\n";
  std::ofstream(src / "data" / "n.txt") << "21\n";
  std::ofstream(src / "outputs" / "old.ckpt") << "not sent\n";
  std::ofstream(src / ".gitignore") << "outputs/\n";
  trainer_client c(config());
  python_trainer t;
  t.source =
      "def train():\n"
      "    import os, pkg\n"
      "    print('answer', pkg.double(int(open('data/n.txt').read())), flush=True)\n"
      "    print('outputs sent:', os.path.exists('outputs'), flush=True)\n"
      "    seen = os.path.exists('mine.txt')\n"
      "    open('mine.txt', 'w').write('x')\n"
      "    print('saw another job\\'s file:', seen, flush=True)\n";
  t.function = "train";
  t.code_dir = src.string();
  std::vector<std::string> names;
  for (int i = 0; i < 2; ++i) {
    auto name = c.train(python_job(t));
    auto job = c.wait_for_job_status(name, {job_status::complete, job_status::failed}, 120s);
    auto log = c.get_job_logs(name).read_all();
    CAPTURE(log);
    REQUIRE(job.status == job_status::complete);
    CHECK(log.find("answer 42\n") != std::string::npos);
    CHECK(log.find("outputs sent: False\n") != std::string::npos);
    CHECK(log.find("saw another job's file: False\n") != std::string::npos);
    names.push_back(name);
  }
  // One snapshot for both (unchanged), untouched by what the jobs wrote.
  std::vector<std::filesystem::path> snapshots;
  for (const auto& e : std::filesystem::directory_iterator(c.home() / "snapshots"))
    snapshots.push_back(e.path());
  REQUIRE(snapshots.size() == 1);
  CHECK_FALSE(std::filesystem::exists(snapshots[0] / "mine.txt"));
  CHECK(std::filesystem::exists(c.home() / "jobs" / names[0] / "work" / "mine.txt"));
  // With working_dir as well: refused, naming both.
  t.working_dir = dir.path().string();
  auto said = tjob::test::message_of([&] { c.train(python_job(t)); });
  CHECK(said.find("is sent with the job and becomes its working directory; drop --workdir") !=
        std::string::npos);
}
