// A working directory that travels with a job (issue 40): what a snapshot
// leaves out, its content hash, its reuse and its limit.
#include "engine/snapshot.hpp"

#include <tjob/error.hpp>

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

using namespace tjob;
using tjob::detail::ignore_rules;
using tjob::detail::take_snapshot;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
  fs::path path;
  temp_dir() {
    std::string t = (fs::temp_directory_path() / "tjob-snap-XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

TEST_CASE(
    "ignore rules read .gitignore's syntax: defaults, names at any depth, anchors, dirs only, re-includes") {
  ignore_rules r;
  for (const char* line :
       {"# a comment", "", "*.log", "!keep.log", "build/", "/top.txt", "docs/*.md", "**/tmp", "data/**"})
    r.add(line);
  CHECK(r.excluded("a.log", false));
  CHECK(r.excluded("sub/dir/b.log", false));
  CHECK_FALSE(r.excluded("keep.log", false));  // the last match decides
  CHECK(r.excluded("build", true));
  CHECK(r.excluded("src/build", true));
  CHECK_FALSE(r.excluded("build", false));  // a file named build: the pattern is for directories
  CHECK(r.excluded("top.txt", false));
  CHECK_FALSE(r.excluded("sub/top.txt", false));  // anchored to the top
  CHECK(r.excluded("docs/a.md", false));
  CHECK_FALSE(r.excluded("docs/deep/a.md", false));  // '*' does not cross '/'
  CHECK(r.excluded("x/y/tmp", true));
  CHECK(r.excluded("data/a/b.bin", false));
  CHECK_FALSE(r.excluded("train.py", false));
}

TEST_CASE(
    "a snapshot leaves out the excluded files, is reused while nothing changes, and changes with a byte") {
  temp_dir src, home;
  write(src.path / "train.py", "import pkg\n");
  write(src.path / "pkg/__init__.py", "X = 1\n");
  write(src.path / "pkg/__pycache__/x.pyc", "junk");
  write(src.path / ".git/HEAD", "ref: x");
  write(src.path / "out/model.bin", "big");
  write(src.path / "notes.tmp", "n");
  write(src.path / ".gitignore", "out/\n");
  write(src.path / ".tjobignore", "*.tmp\n");
  write(src.path / "run.sh", "#!/bin/sh\n");
  fs::permissions(src.path / "run.sh", fs::perms(0755));
  fs::create_symlink("train.py", src.path / "main.py");

  auto a = take_snapshot(src.path, home.path, "TrainJob 'j'");
  CHECK_FALSE(a.reused);
  CHECK(a.dir == home.path / "snapshots" / a.hash);
  CHECK(read(a.dir / "train.py") == "import pkg\n");
  CHECK(read(a.dir / "pkg/__init__.py") == "X = 1\n");
  CHECK(fs::exists(a.dir / ".gitignore"));
  for (const char* gone : {"pkg/__pycache__", ".git", "out", "notes.tmp"})
    CHECK_MESSAGE(!fs::exists(a.dir / gone), gone);
  CHECK((fs::status(a.dir / "run.sh").permissions() & fs::perms::owner_exec) != fs::perms::none);
  CHECK(fs::is_symlink(a.dir / "main.py"));
  CHECK(a.files == 5);  // train.py, pkg/__init__.py, .gitignore, .tjobignore, run.sh

  // Unchanged (an excluded file changed): the same snapshot, not copied again.
  write(src.path / "out/model.bin", "bigger");
  auto b = take_snapshot(src.path, home.path, "TrainJob 'j'");
  CHECK(b.reused);
  CHECK(b.hash == a.hash);
  // One byte of code changed: another snapshot; the first is as it was.
  write(src.path / "pkg/__init__.py", "X = 2\n");
  auto c = take_snapshot(src.path, home.path, "TrainJob 'j'");
  CHECK_FALSE(c.reused);
  CHECK(c.hash != a.hash);
  CHECK(read(a.dir / "pkg/__init__.py") == "X = 1\n");
  CHECK(read(c.dir / "pkg/__init__.py") == "X = 2\n");
  // Nothing half-made is left beside them.
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(home.path / "snapshots")) ++entries;
  CHECK(entries == 2);
}

TEST_CASE("a snapshot over its limit, or of no directory, is refused naming the job, the field and the fix") {
  temp_dir src, home;
  write(src.path / "a.bin", std::string(600, 'x'));
  write(src.path / "b.bin", std::string(600, 'y'));
  try {
    take_snapshot(src.path, home.path, "TrainJob 'big'", 1000);
    FAIL("a directory over the limit was taken");
  } catch (const error& e) {
    std::string said = e.what();
    CHECK(static_cast<errc>(e.code().value()) == errc::invalid_argument);
    CHECK(said.find("TrainJob 'big': working_dir") != std::string::npos);
    CHECK(said.find(".tjobignore") != std::string::npos);
  }
  CHECK_FALSE(fs::exists(home.path / "snapshots"));
  try {
    take_snapshot(src.path / "missing", home.path, "TrainJob 'j'");
    FAIL("a missing directory was taken");
  } catch (const error& e) {
    CHECK(std::string(e.what()).find("is not a directory here") != std::string::npos);
  }
}
