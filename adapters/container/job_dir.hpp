// Where a container job's files are, and how tjob opens its own (issue 41).
//
//   $TJOB_HOME/containers/<job>/             tjob's: its state files (below); the label workdir
//   $TJOB_HOME/containers/<job>/workspace/   the job's: bound read-write at /workspace
//   $TJOB_HOME/containers/<job>/inputs/      tjob's, for the job to read: bound read-only at
//                                            /workspace/.tjob (entry.py, train.py, plan-N.json,
//                                            progress-token, progress-ca.crt)
//
// The engine (root with a rootful daemon) never writes where the job can: a
// job that links a name of its workspace to a host file steers nothing. Its
// state files (cancelled, deadline-exceeded, admission.json, progress.json,
// progress.jsonl, supervisor.log) are opened with openat on a directory
// handle opened O_DIRECTORY|O_NOFOLLOW below $TJOB_HOME/containers, and
// O_NOFOLLOW on the file, so a link anywhere is refused, not followed.
//
// A job made by a tjob before this layout (its files in <job>/.tjob/, inside
// its workspace, which was <job> itself) is read the same careful way; for
// it a marker is only ever created (O_EXCL), never written into a file that
// is there, and a file with another link is not appended to.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace tjob::container {

inline constexpr const char* workspace_dir_name = "workspace";
inline constexpr const char* inputs_dir_name = "inputs";
/// The job's checkpoint directory, bound read-write at checkpoints_mount.
inline constexpr const char* checkpoints_dir_name = "checkpoints";

/// The state directory of one job, open. Move-only; closes on destruction.
class job_dir {
 public:
  /// The job's directory under `containers` ($TJOB_HOME/containers), or
  /// nullopt when there is none (or a link or a file is in its place).
  static std::optional<job_dir> open(const std::filesystem::path& containers, const std::string& job);
  job_dir(job_dir&& other) noexcept;
  job_dir& operator=(job_dir&& other) noexcept;
  job_dir(const job_dir&) = delete;
  job_dir& operator=(const job_dir&) = delete;
  ~job_dir();

  /// Made by a tjob before the inputs/workspace layout: its state lives
  /// where the job can write.
  bool legacy() const { return legacy_; }
  /// The descriptor of the state directory (for openat).
  int fd() const { return fd_; }

  /// The file is there (a regular file, not a link).
  bool exists(std::string_view file) const;
  /// Its whole text; empty when it is not there (or is a link or no regular file).
  std::string read(std::string_view file) const;
  /// Creates the file with `text` when it is not there; one that is there is
  /// left as it is. Throws tjob::error naming the path when it cannot.
  void mark(std::string_view file, std::string_view text = {}) const;
  /// Replaces the file whole (a new file, then a rename over the old).
  void replace(std::string_view file, std::string_view text) const;
  /// Appends a line's text (one write).
  void append(std::string_view file, std::string_view text) const;
  /// Removes the file (a link is removed, never followed).
  void remove(std::string_view file) const;
  /// A descriptor open for appending (the supervisor's log), or -1.
  int open_append(std::string_view file) const;

 private:
  job_dir(int fd, bool legacy, std::filesystem::path path) : fd_(fd), legacy_(legacy), path_(std::move(path)) {}
  int open_new(std::string_view file, int flags) const;
  std::string where(std::string_view file) const;
  int fd_ = -1;
  bool legacy_ = false;
  std::filesystem::path path_;  // for messages only
};

/// Makes `path` (absent or an empty directory) a private directory (0700),
/// refusing a link in its place. Throws tjob::error naming it.
void make_private_dir(const std::filesystem::path& path);

/// Makes a tjob home's container directories where they are missing: `home`
/// and its missing parents, then `home/containers` and its `.queue`, each
/// private (0700). Throws tjob::error naming the one it could not make.
void make_home_dirs(const std::filesystem::path& home);

}  // namespace tjob::container
