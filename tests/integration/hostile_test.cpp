// Hostile input and security defaults: names that try to escape, strings that
// look like shell, a 100 MB line, and the modes of everything tjob writes.
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
using tjob::test::helper_job;
namespace fs = std::filesystem;

namespace {

struct fixture : tjob::test::home_fixture {
  fixture() { ::setenv("PIP_CONFIG_FILE", "/dev/null", 1); }
};

long rss_bytes() {
  long pages = 0, rss = 0;
  std::ifstream("/proc/self/statm") >> pages >> rss;
  return rss * ::sysconf(_SC_PAGESIZE);
}

unsigned mode_of(const fs::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

}  // namespace

TEST_CASE_FIXTURE(fixture,
                  "names with ../, /, NUL or 64 characters are refused and nothing is made for them") {
  trainer_client c(config());
  for (std::string name :
       {std::string("../escape"), std::string("a/b"), std::string("/abs"), std::string("a\0b", 3),
        std::string(64, 'a'), std::string("."), std::string(".."), std::string("A-upper")}) {
    CAPTURE(name);
    CHECK(code_of([&] { c.train(helper_job({"print", "x"}, name)); }) == errc::invalid_name);
  }
  CHECK(c.list_jobs().empty());
  CHECK(fs::is_empty(fs::path(home()) / "jobs"));
  CHECK_FALSE(fs::exists(dir.path() / "escape"));
}

TEST_CASE_FIXTURE(fixture,
                  "shell syntax in arguments, env values, script paths and working dirs is data, never run") {
  trainer_client c(config());
  auto marker = dir.path() / "pwned";
  std::string nasty =
      "'; touch " + marker.string() + "; echo \"$(touch " + marker.string() + ")\" `id` \n;|&";
  auto job = helper_job({"print", nasty, "env", "NASTY"});
  std::get<command_trainer>(job.job_trainer).env = {{"NASTY", nasty}};
  auto name = c.train(job);
  c.wait_for_job_status(name, {job_status::complete}, 60s);
  CHECK(c.get_job_logs(name).read_all() == nasty + nasty + "\n");

  // A script and a working dir whose names are themselves hostile.
  auto weird = dir.path() / ("we'ird; $(touch " + marker.string() + ")\n`id`");
  fs::create_directories(weird);
  auto script = weird / "a b'\"$(x);.py";
  std::ofstream(script) << "import os, sys\nprint('ran', sys.argv[1:], os.getcwd().endswith('`id`'))\n";
  python_trainer t;
  t.source_file = script.string();
  t.args = {"$(touch " + marker.string() + ")"};
  t.working_dir = weird.string();
  train_request r;
  r.runtime = "python";
  r.job_trainer = t;
  auto py = c.train(r);
  c.wait_for_job_status(py, {job_status::complete}, 120s);
  CHECK(c.get_job_logs(py).read_all().find("ran ['$(touch " + marker.string() + ")'] True\n") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(marker));
}

TEST_CASE_FIXTURE(fixture,
                  "a 100 MB line is stored byte for byte and read in 1 MiB pieces without 100 MB of memory") {
  trainer_client c(config());
  constexpr long long size = 100ll << 20;
  auto name = c.train(helper_job({"longline", std::to_string(size)}));
  auto log = c.get_job_logs(name, {.follow = true});
  long before = rss_bytes(), peak = before;
  long long total = 0;
  std::size_t pieces = 0, largest = 0;
  while (auto piece = log.next()) {
    total += static_cast<long long>(piece->size());
    largest = std::max(largest, piece->size());
    ++pieces;
    peak = std::max(peak, rss_bytes());
  }
  CHECK(total == size + 1);
  CHECK(largest <= (1u << 20) + 1);
  CHECK(pieces >= 100);
  if (!tjob::test::under_sanitizer()) CHECK(peak - before < 48l << 20);  // pieces, not the line
  CHECK(fs::file_size(fs::path(home()) / "jobs" / name / "node-0.log") ==
        static_cast<std::uintmax_t>(size + 1));
  CHECK(c.get_job(name).status == job_status::complete);
}

TEST_CASE_FIXTURE(fixture, "everything in TJOB_HOME is the user's alone: directories 0700, files 0600") {
  {
    trainer_client c(config());
    auto name = c.train(helper_job({"print", "x"}, "modes"));
    c.wait_for_job_status(name, {job_status::complete}, 60s);
    python_trainer t;
    t.source = "print('hi')\n";
    train_request r;
    r.runtime = "python";
    r.job_trainer = t;
    auto py = c.train(r);
    c.wait_for_job_status(py, {job_status::complete}, 120s);
    fs::path h = home();
    for (const auto& d : {h, h / "jobs", h / "jobs" / "modes", h / "jobs" / "modes",
                          h / "jobs" / py / "work", h / "cache", h / "cache" / "venvs"}) {
      CAPTURE(d);
      CHECK(mode_of(d) == 0700u);
    }
    for (const auto& f :
         {h / "tjob.db", h / "tjob.db-wal", h / "tjob.db-shm", h / "tjob.db-wake",
          h / "jobs" / "modes" / "node-0.log", h / "jobs" / py / "node-0.log"}) {
      CAPTURE(f);
      CHECK(mode_of(f) == 0600u);
    }
    for (const auto& e : fs::directory_iterator(h / "cache" / "venvs")) {
      CAPTURE(e.path());
      CHECK(mode_of(e.path()) == (e.is_directory() ? 0700u : 0600u));
    }
  }
  // A store somebody else can write into is refused, and left as it is.
  fs::path other = dir.path() / "shared";
  fs::create_directories(other);
  ::chmod(other.c_str(), 0777);
  engine_config cfg;
  cfg.home = other;
  auto msg = tjob::test::message_of([&] { trainer_client c(cfg); });
  CHECK(msg.find("can be written by other users (mode 0777); chmod 700 it") != std::string::npos);
  CHECK(fs::is_empty(other));
  if (::geteuid() == 0) {
    ::chmod(other.c_str(), 0700);
    REQUIRE(::chown(other.c_str(), 65534, 65534) == 0);
    msg = tjob::test::message_of([&] { trainer_client c(cfg); });
    CHECK(msg.find("belongs to uid 65534, not to this user") != std::string::npos);
  }
}

TEST_CASE("without TJOB_HOME, XDG_STATE_HOME or HOME the store is in the user's passwd home, never in /tmp") {
  std::map<std::string, std::string> saved;
  for (const char* v : {"TJOB_HOME", "XDG_STATE_HOME", "HOME"}) {
    if (const char* x = std::getenv(v)) saved[v] = x;
    ::unsetenv(v);
  }
  auto h = default_home();
  for (const auto& [k, v] : saved) ::setenv(k.c_str(), v.c_str(), 1);
  CHECK(h.string().rfind("/tmp", 0) != 0);
  CHECK(h.filename() == "tjob");
  CHECK(h.parent_path().filename() == "state");
}
