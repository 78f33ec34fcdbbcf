// The event log is the truth and the store's status columns are its cache:
// tests check that the two agree for every job a test leaves behind.
#pragma once

#include "adapters/local/store.hpp"
#include "tests/support/test_support.hpp"

#include <tjob/error.hpp>

#include <doctest/doctest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace tjob::test {

/// Each job of the store under `home` whose status columns differ from the
/// fold of its event log, with what differs; empty when all agree.
inline std::vector<std::string> fold_mismatches(const std::filesystem::path& home) {
  std::vector<std::string> out;
  auto path = home / "tjob.db";
  if (!std::filesystem::exists(path)) return out;
  std::unique_ptr<detail::store> opened;
  try {
    opened = std::make_unique<detail::store>(path, std::chrono::seconds(10));
  } catch (const tjob::error& e) {
    if (e.code() == errc::store_corrupt) return out;  // not a tjob store: a case about that
    throw;
  }
  auto& db = *opened;
  for (const auto& job : db.load_jobs()) {
    auto f = db.fold_log(job);
    auto say = [&](const std::string& what) { out.push_back(job.name + ": " + what); };
    if (f.status != job.status)
      say(std::string("status ") + std::string(to_string(job.status)) + ", the log says " +
          std::string(to_string(f.status)));
    if (f.reason != job.reason) say("reason '" + job.reason + "', the log says '" + f.reason + "'");
    for (std::size_t i = 0; i < f.steps.size(); ++i) {
      const auto& c = job.steps[i];
      const auto& l = f.steps[i];
      if (c.status != l.status) say(c.name + " status " + std::string(to_string(c.status)));
      if (c.exit_code != l.exit_code)
        say(c.name + " exit code " + (c.exit_code ? std::to_string(*c.exit_code) : "none") +
            ", the log says " + (l.exit_code ? std::to_string(*l.exit_code) : "none"));
      if (c.reason != l.reason) say(c.name + " reason '" + c.reason + "', the log says '" + l.reason + "'");
      if (c.attempt != l.attempt)
        say(c.name + " attempt " + std::to_string(c.attempt) + ", the log says " + std::to_string(l.attempt));
    }
  }
  return out;
}

/// A home_fixture that, as the case ends, checks the columns against the log.
struct folded_home : home_fixture {
  ~folded_home() {
    for (const auto& m : fold_mismatches(home()))
      FAIL_CHECK("the store's columns and its log disagree: " << m);
  }
};

}  // namespace tjob::test
