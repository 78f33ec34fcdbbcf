#include "adapters/local/log_files.hpp"
#include "tests/support/test_support.hpp"

#include <doctest/doctest.h>

#include <sys/stat.h>

using namespace tjob::detail;

namespace {

std::string tail_of(const std::filesystem::path& p, std::size_t n) {
  log_cursor c(p, tail_offset(p, n));
  std::string out;
  while (c.read_more(out) > 0) {
  }
  return out;
}

}  // namespace

TEST_CASE("append_file appends byte for byte and creates the file 0600") {
  tjob::test::temp_dir d;
  auto p = d.path() / "x.log";
  CHECK_FALSE(append_file(p, std::string("a\0b", 3)));
  CHECK_FALSE(append_file(p, "\xff\n"));
  CHECK(tjob::test::read_file(p) == std::string("a\0b\xff\n", 5));
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(append_file(d.path() / "missing-dir" / "x.log", "x"));
}

TEST_CASE("tail_offset finds where the last N lines begin") {
  tjob::test::temp_dir d;
  auto p = d.path() / "t.log";
  CHECK(tail_offset(p, 3) == 0);  // no file yet
  append_file(p, "one\ntwo\nthree\n");
  CHECK(tail_of(p, 1) == "three\n");
  CHECK(tail_of(p, 2) == "two\nthree\n");
  CHECK(tail_of(p, 3) == "one\ntwo\nthree\n");
  CHECK(tail_of(p, 10) == "one\ntwo\nthree\n");
  CHECK(tail_of(p, 0) == "");
  append_file(p, "partial");
  CHECK(tail_of(p, 1) == "partial");
  CHECK(tail_of(p, 2) == "three\npartial");
}

TEST_CASE("tail_offset works across read blocks") {
  tjob::test::temp_dir d;
  auto p = d.path() / "big.log";
  std::string content;
  for (int i = 0; i < 20000; ++i) content += "line " + std::to_string(i) + "\n";
  append_file(p, content);
  CHECK(tail_of(p, 2) == "line 19998\nline 19999\n");
  auto all = tail_of(p, 20000);
  CHECK(all == content);
}

TEST_CASE("log_cursor reads what is appended after it") {
  tjob::test::temp_dir d;
  auto p = d.path() / "c.log";
  log_cursor c(p, 0);
  std::string out;
  CHECK(c.read_more(out) == 0);  // the file does not exist yet
  append_file(p, "abc");
  CHECK(c.read_more(out) == 3);
  append_file(p, "def");
  CHECK(c.read_more(out) == 3);
  CHECK(c.read_more(out) == 0);
  CHECK(out == "abcdef");
  CHECK(c.offset() == 6);
}

TEST_CASE("line_start finds the beginning of the line that holds a byte") {
  tjob::test::temp_dir d;
  auto p = d.path() / "l.log";
  append_file(p, "one\ntwo\nthree");
  CHECK(line_start(p, 0) == 0);
  CHECK(line_start(p, 2) == 0);
  CHECK(line_start(p, 4) == 4);  // just past a '\n': a line begins there
  CHECK(line_start(p, 6) == 4);
  CHECK(line_start(p, 12) == 8);
  CHECK(line_start(p, 13) == 8);  // the end of a last line without '\n'
  CHECK(line_start(d.path() / "missing", 5) == 0);
}

TEST_CASE(
    "a line's time is the first record at or past its end, and older_than bounds what since leaves out") {
  tjob::test::temp_dir d;
  auto log = d.path() / "j" / "node-0.log";
  std::filesystem::create_directories(log.parent_path());
  auto times_path = times_path_of(log);
  CHECK(times_path == d.path() / "j" / "log-times" / "node-0");
  // an older tjob's jobs/<name>/logs/<step>.log has its times in the same place
  CHECK(times_path_of(d.path() / "j" / "logs" / "node-0.log") == times_path);
  auto at = [](std::int64_t ns) {
    return tjob::clock::time_point(
        std::chrono::duration_cast<tjob::clock::duration>(std::chrono::nanoseconds(ns)));
  };
  log_times none(times_path);
  CHECK_FALSE(none.time_of(1));
  CHECK(none.older_than(at(5)) == 0);
  CHECK_FALSE(append_time_record(times_path, {4, 100}));  // makes log-times/
  CHECK_FALSE(append_time_record(times_path, {10, 200}));
  log_times t(times_path);
  CHECK(t.time_of(1) == at(100));
  CHECK(t.time_of(4) == at(100));
  CHECK(t.time_of(5) == at(200));
  CHECK_FALSE(t.time_of(11));  // not recorded yet
  // the reader sees records appended after it was made, and ignores a half-written one
  CHECK_FALSE(append_time_record(times_path, {20, 300}));
  CHECK_FALSE(append_file(times_path, std::string(7, '\0')));
  CHECK(t.time_of(11) == at(300));
  CHECK_FALSE(t.time_of(21));
  CHECK(t.older_than(at(100)) == 0);  // the first record is not older
  CHECK(t.older_than(at(101)) == 4);  // what the first record covers is
  CHECK(t.older_than(at(200)) == 4);
  CHECK(t.older_than(at(250)) == 10);
  CHECK(t.older_than(at(999)) == 20);  // everything recorded
}
