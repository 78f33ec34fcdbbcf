// A sweep's record: $TJOB_HOME/sweeps/<name>/ holds sweep.json (the request,
// the status and every trial: parameters, status, metrics), `lock` (flock:
// one read-modify-write at a time, the owner's and a cancel's) and `owner`
// (flock held by the process that drives the sweep for as long as it lives,
// so a dead owner is seen without trusting a pid).
#pragma once

#include <tjob/sweep.hpp>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <filesystem>
#include <optional>

namespace tjob::detail {

boost::json::object to_json(const sweep_request& r);
sweep_request sweep_request_from(const boost::json::value& v);
boost::json::object record_to_json(const sweep_job& s);
sweep_job record_from_json(const boost::json::value& v);

std::filesystem::path sweeps_dir(const std::filesystem::path& home);
std::filesystem::path sweep_dir(const std::filesystem::path& home, const std::string& name);

/// The record, or nullopt when there is none (never made, or deleted).
/// Throws store_corrupt naming the file when it cannot be read.
std::optional<sweep_job> read_record(const std::filesystem::path& dir);
/// Replaces the record whole (a new file renamed over the old).
void write_record(const std::filesystem::path& dir, const sweep_job& s);

/// The record's lock (flock on dir/lock), held while it lives.
class record_lock {
 public:
  explicit record_lock(const std::filesystem::path& dir);
  record_lock(const record_lock&) = delete;
  record_lock& operator=(const record_lock&) = delete;
  ~record_lock();

 private:
  int fd_ = -1;
};

/// Takes the owner's lock: its descriptor (held until closed), or -1 when
/// another process holds it.
int take_owner(const std::filesystem::path& dir);
/// Whether a process holds the owner's lock now.
bool has_owner(const std::filesystem::path& dir);

/// Ended: Complete or Failed.
bool sweep_ended(const std::string& status);
bool trial_ended(const std::string& status);

}  // namespace tjob::detail
