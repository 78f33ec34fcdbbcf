// A working directory that travels with a job (issue 40): a snapshot of a
// local directory, taken when the job is submitted, with .gitignore-style
// excludes and a size limit, kept once per content under
// $TJOB_HOME/snapshots/<sha256>, so an unchanged directory is not copied
// again. The backends copy it into the job's own working directory.
// Blocking file work: the engine runs it on its pool.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace tjob::detail {

/// The excludes of a directory: tjob's defaults (.git/, __pycache__/,
/// *.pyc, .venv/, .tjob/), then the patterns of its .gitignore and its
/// .tjobignore (top level only), in .gitignore's syntax: `#` comments,
/// `!` re-includes, a trailing `/` for directories only, a `/` elsewhere
/// anchors the pattern to the top, `*`, `?`, `[...]` and a leading `**/`.
/// The last pattern that matches decides.
class ignore_rules {
 public:
  static ignore_rules of_directory(const std::filesystem::path& root);
  void add(std::string_view line);
  /// Whether `relative` (with '/' separators) is excluded.
  bool excluded(const std::string& relative, bool directory) const;

 private:
  struct rule {
    std::string pattern;
    bool negate = false, directory_only = false, anchored = false;
  };
  std::vector<rule> rules_;
};

struct snapshot {
  std::filesystem::path source;  ///< the directory taken, canonical
  std::filesystem::path dir;     ///< $TJOB_HOME/snapshots/<hash>
  std::string hash;           ///< sha256 of the paths, modes and contents
  std::uint64_t bytes = 0;
  std::size_t files = 0;
  bool reused = false;  ///< that content was there already: nothing copied
};

/// At most this many bytes of files in a snapshot.
inline constexpr std::uint64_t snapshot_limit = 256ull << 20;

/// The snapshot of `source` under `home`/snapshots. Throws tjob::error
/// (invalid_argument) naming `who`, the field and the fix for a source that
/// is not a directory or holds more than `limit` bytes after its excludes.
snapshot take_snapshot(const std::filesystem::path& source, const std::filesystem::path& home,
                       const std::string& who, std::uint64_t limit = snapshot_limit);

}  // namespace tjob::detail
