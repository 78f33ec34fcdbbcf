// The venv cache of local Python jobs: built once per interpreter, package
// list, index URLs and system-site-packages flag; each job gets a copy.
#include "tests/support/test_support.hpp"

#include <tjob/client.hpp>

#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <thread>

using namespace tjob;
using namespace std::chrono_literals;

namespace {

using tjob::test::package_index;

struct fixture : tjob::test::home_fixture {
  fixture() {
    ::setenv("PIP_CONFIG_FILE", "/dev/null", 1);  // hermetic pip
    ::unsetenv("DEFAULT_PIP_INDEX_URLS");
  }
  engine_config config() const { return home_fixture::config(2s); }
  std::filesystem::path cache_dir() const { return std::filesystem::path(home()) / "cache" / "venvs"; }
};

// A job that imports tinyjob (from the index) and runs `extra` after.
train_request tiny_job(const std::string& index_url, const std::string& extra = "") {
  python_trainer t;
  t.source =
      "def main():\n"
      "    import tinyjob\n"
      "    print(tinyjob.hello(), flush=True)\n" +
      extra;
  t.function = "main";
  t.packages_to_install = {"tinyjob"};
  t.pip_index_urls = {index_url};
  train_request r;
  r.runtime = "python";
  r.job_trainer = t;
  return r;
}

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

std::string run_to_end(trainer_client& c, const train_request& r) {
  auto name = c.train(r);
  c.wait_for_job_status(name, {job_status::complete}, 180s);
  return c.get_job_logs(name).read_all();
}

// The file of tinyjob inside the cached venv.
std::filesystem::path cached_module(const std::filesystem::path& cache, const std::string& key) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(cache / key / "venv"))
    if (e.path().filename() == "__init__.py" && e.path().parent_path().filename() == "tinyjob")
      return e.path();
  return {};
}

}  // namespace

TEST_CASE_FIXTURE(
    fixture, "a second job with the same packages gets a copy of the cached venv and runs no venv or pip") {
  package_index index;
  trainer_client c(config());
  auto first = run_to_end(c, tiny_job(index.url));
  CAPTURE(first);
  CHECK(count(first, "[tjob] building the cached venv ") == 1);
  CHECK(first.find("[tjob] pip install done in ") != std::string::npos);
  CHECK(first.find("hi from tinyjob 1.2.0 on tinydep 0.1.0\n") != std::string::npos);
  auto second = run_to_end(c, tiny_job(index.url));
  CAPTURE(second);
  CHECK(second.find("[tjob] venv from the cache (") != std::string::npos);
  CHECK(second.find("creating a virtual environment") == std::string::npos);
  CHECK(second.find("pip install") == std::string::npos);
  CHECK(second.find("hi from tinyjob 1.2.0 on tinydep 0.1.0\n") != std::string::npos);

  auto entries = c.list_venv_cache();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].packages == std::vector<std::string>{"tinyjob"});
  CHECK(entries[0].index_urls == std::vector<std::string>{index.url});
  CHECK(entries[0].problem.empty());
  CHECK(entries[0].bytes > 0);
  CHECK(entries[0].python_version.rfind("3.", 0) == 0);
  CHECK(entries[0].last_used >= entries[0].created);
  // The job's own copy went with the job; the entry stays.
  CHECK(std::filesystem::exists(cache_dir() / entries[0].key / "venv"));
}

TEST_CASE_FIXTURE(fixture, "what a job does to its venv never reaches the next job") {
  package_index index;
  trainer_client c(config());
  // It rewrites tinyjob in place and removes tinydep from its venv.
  auto vandal = tiny_job(index.url,
                         "    import os, shutil, tinydep\n"
                         "    open(tinyjob.__file__, 'w').write('raise SystemExit(9)\\n')\n"
                         "    shutil.rmtree(os.path.dirname(tinydep.__file__))\n"
                         "    print('vandalised', flush=True)\n");
  auto log = run_to_end(c, vandal);
  CHECK(log.find("vandalised\n") != std::string::npos);
  auto next = run_to_end(c, tiny_job(index.url));
  CAPTURE(next);
  CHECK(next.find("[tjob] venv from the cache (") != std::string::npos);
  CHECK(next.find("hi from tinyjob 1.2.0 on tinydep 0.1.0\n") != std::string::npos);
  auto entries = c.list_venv_cache();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].problem.empty());
}

TEST_CASE_FIXTURE(fixture, "a broken cache entry is rebuilt, never used") {
  package_index index;
  trainer_client c(config());
  run_to_end(c, tiny_job(index.url));
  auto entries = c.list_venv_cache();
  REQUIRE(entries.size() == 1);
  auto module = cached_module(cache_dir(), entries[0].key);
  REQUIRE(!module.empty());
  std::ofstream(module, std::ios::trunc) << "raise SystemExit(7)\n";  // another size than the manifest's
  CHECK_FALSE(c.list_venv_cache().at(0).problem.empty());

  auto log = run_to_end(c, tiny_job(index.url));
  CAPTURE(log);
  CHECK(log.find("[tjob] the cached venv " + entries[0].key + " is broken (") != std::string::npos);
  CHECK(count(log, "[tjob] building the cached venv ") == 1);
  CHECK(log.find("hi from tinyjob 1.2.0 on tinydep 0.1.0\n") != std::string::npos);
  auto after = c.list_venv_cache();
  REQUIRE(after.size() == 1);
  CHECK(after[0].problem.empty());

  // An entry without its manifest is rebuilt too.
  std::filesystem::remove(cache_dir() / after[0].key / "tjob-venv.json");
  log = run_to_end(c, tiny_job(index.url));
  CHECK(log.find("is broken (no manifest); rebuilding it") != std::string::npos);
  CHECK(log.find("hi from tinyjob") != std::string::npos);
}

TEST_CASE_FIXTURE(fixture, "jobs that need the same venv at once build it once, in one engine or two") {
  package_index index;
  trainer_client a(config()), b(config());
  std::vector<std::pair<trainer_client*, std::string>> jobs;
  for (int i = 0; i < 3; ++i) jobs.emplace_back(&a, a.train(tiny_job(index.url)));
  jobs.emplace_back(&b, b.train(tiny_job(index.url)));
  std::string all;
  for (auto& [c, name] : jobs) {
    auto job = c->wait_for_job_status(name, {job_status::complete, job_status::failed}, 180s);
    auto log = c->get_job_logs(name).read_all();
    CAPTURE(log);
    CHECK(job.status == job_status::complete);
    CHECK(log.find("hi from tinyjob 1.2.0 on tinydep 0.1.0\n") != std::string::npos);
    all += log;
  }
  CAPTURE(all);
  CHECK(count(all, "[tjob] building the cached venv ") == 1);
  CHECK(count(all, "[tjob] venv from the cache (") == 3);
  CHECK(a.list_venv_cache().size() == 1);
}

TEST_CASE_FIXTURE(fixture,
                  "the interpreter's view of system packages and the index are part of what a venv is") {
  package_index index, other;
  trainer_client c(config());
  run_to_end(c, tiny_job(index.url));
  run_to_end(c, tiny_job(other.url));
  auto with_site = tiny_job(index.url);
  std::get<python_trainer>(with_site.job_trainer).system_site_packages = true;
  run_to_end(c, with_site);
  auto entries = c.list_venv_cache();
  CHECK(entries.size() == 3);
}

TEST_CASE_FIXTURE(fixture, "prune removes what no job uses and a failed build leaves nothing behind") {
  package_index index;
  trainer_client c(config());
  run_to_end(c, tiny_job(index.url));
  CHECK(c.prune_venv_cache(std::chrono::hours(24 * 7)).empty());  // just used
  auto removed = c.prune_venv_cache(0s);
  CHECK(removed.size() == 1);
  CHECK(c.list_venv_cache().empty());
  auto log = run_to_end(c, tiny_job(index.url));
  CHECK(count(log, "[tjob] building the cached venv ") == 1);

  auto missing = tiny_job(index.url);
  std::get<python_trainer>(missing.job_trainer).packages_to_install = {"nosuchpkg-tjob"};
  auto name = c.train(missing);
  auto job = c.wait_for_job_status(name, {job_status::complete, job_status::failed}, 180s);
  CHECK(job.status == job_status::failed);
  CHECK(job.steps[0].reason == "setup failed: pip install exit code 1");
  CHECK(c.list_venv_cache().size() == 1);  // only the good one
  for (const auto& e : std::filesystem::directory_iterator(cache_dir()))
    CHECK(e.path().filename().string().find(".build-") == std::string::npos);
}

TEST_CASE_FIXTURE(fixture, "without the cache every job builds its own venv") {
  package_index index;
  auto cfg = config();
  cfg.venv_cache = false;
  trainer_client c(cfg);
  for (int i = 0; i < 2; ++i) {
    auto log = run_to_end(c, tiny_job(index.url));
    CHECK(log.find("[tjob] pip install done in ") != std::string::npos);
    CHECK(log.find("cache") == std::string::npos);
  }
  CHECK(c.list_venv_cache().empty());
}

namespace {

// Makes the cache entry look built `age` ago (its manifest says when).
void age_entry(const std::filesystem::path& entry, std::chrono::seconds age) {
  auto manifest = entry / "tjob-venv.json";
  auto text = tjob::test::read_file(manifest);
  auto at = text.find("\"created_ms\":");
  REQUIRE(at != std::string::npos);
  at += 13;
  auto end = text.find_first_not_of("0123456789", at);
  auto then = std::chrono::duration_cast<std::chrono::milliseconds>(
      (std::chrono::system_clock::now() - age).time_since_epoch());
  text.replace(at, end - at, std::to_string(then.count()));
  std::ofstream(manifest, std::ios::trunc) << text;
}

}  // namespace

TEST_CASE_FIXTURE(fixture, "an unpinned requirement's cached venv expires, and refresh rebuilds it at once") {
  package_index index;
  trainer_client c(config());
  CHECK(run_to_end(c, tiny_job(index.url)).find("hi from tinyjob 1.2.0 ") != std::string::npos);
  const auto key = c.list_venv_cache().at(0).key;

  // A newer release is published: a young entry is still used as it is.
  index.publish_tinyjob("1.3.0");
  auto log = run_to_end(c, tiny_job(index.url));
  CAPTURE(log);
  CHECK(log.find("[tjob] venv from the cache (") != std::string::npos);
  CHECK(log.find("hi from tinyjob 1.2.0 ") != std::string::npos);

  // refresh rebuilds it, and the next job copies what that built.
  auto refresh = tiny_job(index.url);
  std::get<python_trainer>(refresh.job_trainer).refresh_venv = true;
  log = run_to_end(c, refresh);
  CHECK(log.find("[tjob] the cached venv " + key + " is stale: built ") != std::string::npos);
  CHECK(log.find("before this job asked for a refresh; rebuilding it") != std::string::npos);
  CHECK(count(log, "[tjob] building the cached venv ") == 1);
  CHECK(log.find("hi from tinyjob 1.3.0 ") != std::string::npos);
  log = run_to_end(c, tiny_job(index.url));
  CHECK(log.find("[tjob] venv from the cache (") != std::string::npos);
  CHECK(log.find("hi from tinyjob 1.3.0 ") != std::string::npos);

  // A day old, it expires: the next job rebuilds it and gets the newest.
  index.publish_tinyjob("1.4.0");
  age_entry(cache_dir() / key, 25h);
  log = run_to_end(c, tiny_job(index.url));
  CHECK(log.find("is stale: built 25 h ago, and its requirement not pinned to a version (tinyjob) expire "
                 "after 86400 s; rebuilding it") != std::string::npos);
  CHECK(log.find("hi from tinyjob 1.4.0 ") != std::string::npos);
  REQUIRE(c.list_venv_cache().size() == 1);
}

TEST_CASE_FIXTURE(fixture, "a venv of pinned requirements never expires, nor anything with a zero expiry") {
  package_index index;
  index.publish_tinyjob("1.3.0");
  auto pinned = tiny_job(index.url);
  std::get<python_trainer>(pinned.job_trainer).packages_to_install = {"tinyjob==1.2.0"};
  {
    trainer_client c(config());
    run_to_end(c, pinned);
    age_entry(cache_dir() / c.list_venv_cache().at(0).key, std::chrono::hours(24 * 30));
    auto log = run_to_end(c, pinned);
    CAPTURE(log);
    CHECK(log.find("[tjob] venv from the cache (") != std::string::npos);
    CHECK(log.find("hi from tinyjob 1.2.0 ") != std::string::npos);
  }
  auto cfg = config();
  cfg.venv_cache_unpinned_ttl = 0s;
  trainer_client c(cfg);
  run_to_end(c, tiny_job(index.url));
  for (const auto& e : c.list_venv_cache())
    if (e.packages == std::vector<std::string>{"tinyjob"}) age_entry(cache_dir() / e.key, 24h * 30);
  auto log = run_to_end(c, tiny_job(index.url));
  CAPTURE(log);
  CHECK(log.find("[tjob] venv from the cache (") != std::string::npos);
  CHECK(log.find("hi from tinyjob 1.3.0 ") != std::string::npos);
}

TEST_CASE_FIXTURE(fixture, "an index URL's password and a script's secrets are never recorded or shown") {
  // Issue 41: the index URL was pip's argument (every local user's `ps`
  // showed it) and stood in the Setup event and the cache's listing; a
  // script's --password=... stood in its Started event.
  package_index index;
  auto with_password = index.url;
  with_password.insert(with_password.find("://") + 3, "tjob:s3cretpw@");
  python_trainer t;
  t.source = "import sys, tinyjob\nprint(tinyjob.hello(), sys.argv[1:], flush=True)\n";
  t.packages_to_install = {"tinyjob"};
  t.pip_index_urls = {with_password};
  t.args = {"--password=hunter2", "--hf-token", "abc123", "--max-tokens", "64"};
  train_request r;
  r.runtime = "python";
  r.job_trainer = t;
  trainer_client c(config());
  auto log = run_to_end(c, r);
  CAPTURE(log);
  CHECK(log.find("hi from tinyjob") != std::string::npos);  // pip reached the index with the password
  auto jobs = c.list_jobs();
  REQUIRE(jobs.size() == 1);
  std::string events;
  for (const auto& e : c.get_job_events(jobs[0].name)) events += e.message + "\n";
  CAPTURE(events);
  CHECK(events.find("pip install") != std::string::npos);
  for (const char* secret : {"s3cretpw", "hunter2", "abc123"}) CHECK(events.find(secret) == std::string::npos);
  CHECK(events.find("--password=*** --hf-token *** --max-tokens 64") != std::string::npos);
  auto entries = c.list_venv_cache();
  REQUIRE(entries.size() == 1);
  auto masked = index.url;
  masked.insert(masked.find("://") + 3, "tjob:***@");
  CHECK(entries[0].index_urls == std::vector<std::string>{masked});
  for (const auto& f : std::filesystem::recursive_directory_iterator(cache_dir()))
    if (f.is_regular_file() && f.path().filename() == "tjob-venv.json") {
      std::ifstream in(f.path());
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      CHECK(text.find("s3cretpw") == std::string::npos);
    }
}
