// The Idempotency-Key records of POST /v1/jobs: <dir>/<sha256 of the key>,
// {"name","digest"} (the job made for it, and the digest of its spec), kept
// for a time; and the keys whose job is being made right now.
//
// Threading: the engine's executor only.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace tjob::serve {

class idempotency_keys {
 public:
  struct record {
    std::string name, digest;
  };

  /// Forgets the records past `ttl` (they are tiny; this runs once per start).
  idempotency_keys(std::filesystem::path dir, std::chrono::hours ttl);

  /// The hex SHA-256 of `text`: a key's file name, a spec's digest.
  static std::string sha256(std::string_view text);

  /// The record of a key (by its sha256), unless past its time.
  std::optional<record> find(const std::string& key_id) const;
  /// Writes it (replaced whole; 0700 directories, 0600 files, whatever the umask).
  void put(const std::string& key_id, const record& r) const;
  void forget(const std::string& key_id) const;

  /// The key's job is being made: false when it already is.
  bool begin(const std::string& key_id) { return in_flight_.insert(key_id).second; }
  void end(const std::string& key_id) { in_flight_.erase(key_id); }

 private:
  std::filesystem::path dir_;
  std::chrono::hours ttl_;
  std::set<std::string> in_flight_;
};

}  // namespace tjob::serve
