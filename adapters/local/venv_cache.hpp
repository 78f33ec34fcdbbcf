// The venv cache of the local backend: a Python job's virtual environment,
// built once per distinct (interpreter, merged package list, index URLs,
// system-site-packages) and copied into each job that needs the same one.
//
// Layout, under $TJOB_HOME/cache/venvs/:
//   <key>/venv/            the built venv (never run, never written to by a job)
//   <key>/tjob-venv.json   what it was built from and every file in it
//   <key>/last-used        its modification time is when a job last took a copy
//   <key>.lock             flock: exclusive while (re)building or removing,
//                          shared while copying; holds "<pid> <start>" of the
//                          builder, so a waiter in another process can watch it
//   <key>.build-<tag>/     a build in progress (renamed to <key> when done)
//
// A job gets a copy (a reflink where the filesystem can, else an in-kernel
// copy), with the paths in bin/ and pyvenv.cfg moved to its own venv: what a
// job does to its venv never reaches the next job. An entry whose files do not
// match its manifest is rebuilt, never used.
//
// Threading: plain functions and a value type; the engine calls the blocking
// ones (copy, verify, remove) on its thread pool.
// Errors: throw std::system_error or tjob::error with the path and the fix.
#pragma once

#include <sys/types.h>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tjob::detail::venv_cache {

/// What a cached venv is made from; its key is a hash of all of it.
struct inputs {
  std::string python;           ///< the interpreter's real executable
  std::string python_identity;  ///< device:inode:size:mtime of that file
  std::vector<std::string> packages;
  std::vector<std::string> index_urls;
  bool system_site_packages = false;
};

/// 32 hex characters of SHA-256 over the inputs, in a fixed encoding.
std::string key_of(const inputs& in);

/// The real executable and identity of `python` when it is a native binary
/// (so the file itself says which Python it is); nullopt for a script such as
/// a pyenv shim, which picks an interpreter when it runs and must be asked.
std::optional<std::pair<std::string, std::string>> native_identity(const std::string& python);

/// Identity ("device:inode:size:mtime") of an existing file.
std::string file_identity(const std::string& path);

/// Whether a pip requirement names one exact version (`name==1.2`,
/// `name===1.2`, markers aside); anything else (a range, a bare name, a URL
/// or a path) can install something newer tomorrow.
bool pinned(std::string_view requirement);
/// The requirements of `in` that are not pinned.
std::vector<std::string> unpinned(const inputs& in);

/// One entry, as `tjob cache list` shows it.
struct entry_info {
  std::string key;
  inputs from;
  std::string python_version;  ///< from the venv's pyvenv.cfg
  std::uint64_t bytes = 0;
  std::int64_t created_ms = 0;
  std::int64_t last_used_ms = 0;
  std::string problem;  ///< empty when usable
};

class cache {
 public:
  explicit cache(std::filesystem::path root);
  const std::filesystem::path& root() const noexcept { return root_; }

  std::filesystem::path entry_dir(const std::string& key) const;
  std::filesystem::path venv_dir(const std::string& key) const;
  /// A fresh directory for building `key` (its venv goes in `<dir>/venv`).
  std::filesystem::path build_dir(const std::string& key, const std::string& tag) const;

  /// flock on `<key>.lock`, without waiting: the descriptor, or -1 when
  /// another holder is in the way. An exclusive holder writes "<pid> <start>"
  /// into the file. Throws when the lock file cannot be opened.
  int try_lock(const std::string& key, bool exclusive) const;
  static void unlock(int fd) noexcept;
  /// Who holds (or last held) the exclusive lock of `key`.
  std::optional<std::pair<pid_t, std::uint64_t>> holder(const std::string& key) const;

  /// Nothing when `key`'s entry is there and every file matches its manifest;
  /// else why not ("missing", "bin/python: size 10, expected 12", …). An
  /// entry built before `not_before_ms` (ms since the epoch) is stale: the
  /// answer then says when it was built, followed by `why`.
  std::optional<std::string> check(const std::string& key, std::int64_t not_before_ms = 0,
                                   std::string_view why = {}) const;
  /// Writes the manifest of the venv built in `build` and moves it into place
  /// as `key` (replacing nothing: call with the exclusive lock, after remove).
  void finalize(const std::string& key, const std::filesystem::path& build, const inputs& in) const;
  /// Removes `key`'s entry (under the exclusive lock) and its stale builds.
  void remove(const std::string& key) const;
  /// Copies `key`'s venv to `to` (which must not exist), moving its paths to
  /// `to`, and marks the entry used now.
  void copy_to(const std::string& key, const std::filesystem::path& to) const;

  std::vector<entry_info> list() const;
  /// Removes entries last used before `unused_for` ago (all of them when
  /// zero), broken ones and abandoned builds; entries in use are skipped.
  /// Returns what was removed.
  std::vector<entry_info> prune(std::chrono::seconds unused_for) const;

 private:
  std::filesystem::path root_;
};

}  // namespace tjob::detail::venv_cache
