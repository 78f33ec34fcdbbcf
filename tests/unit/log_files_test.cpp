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
