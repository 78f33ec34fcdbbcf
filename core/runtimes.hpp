// Training runtimes: Kubeflow's ClusterTrainingRuntime / TrainingRuntime
// manifests, built in (runtimes/*.yaml, compiled into the binary) and from
// user directories, which override built-ins by name.
#pragma once

#include <tjob/types.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tjob::detail {

inline constexpr std::string_view default_runtime_name = "torch-distributed";
/// Annotation with the packages a local job of the runtime installs (comma-separated).
inline constexpr std::string_view packages_annotation = "tjob/packages";
inline constexpr std::string_view framework_label = "trainer.kubeflow.org/framework";

struct runtime_catalog {
  std::vector<runtime> runtimes;      ///< by name
  std::vector<std::string> sources;   ///< where each came from, same order
  std::vector<std::string> problems;  ///< one line per manifest that could not be used
  /// How to add one, for the not-found message; empty: a runtime directory.
  std::string how_to_add;

  const runtime* find(std::string_view name) const;
  /// "Runtime 'x' not found. Known runtimes: a, b. ..."
  std::string not_found_message(std::string_view name) const;
};

/// Parses every runtime document in `text` (a file may hold several, as a
/// kustomize bundle does; documents of other kinds are ignored). Appends one
/// problem per unusable document, naming `source`, the document and the field.
void parse_runtime_documents(std::string_view text, const std::string& source, std::vector<runtime>& out,
                             std::vector<std::string>& sources, std::vector<std::string>& problems);

/// The built-in runtimes, then each directory's `*.yaml` / `*.yml` files in
/// name order; a later runtime of the same name replaces an earlier one.
/// Directories that do not exist are skipped.
runtime_catalog load_runtimes(const std::vector<std::filesystem::path>& dirs);

/// load_runtimes, parsed again only when a manifest file in `dirs` appeared,
/// went, or changed size or modification time since the last call: a manifest
/// dropped into a runtime directory is still seen by the next call, and a
/// `train` does not parse YAML when nothing changed.
class runtime_cache {
 public:
  std::shared_ptr<const runtime_catalog> load(const std::vector<std::filesystem::path>& dirs);

 private:
  struct stamp {
    std::string path;
    std::uintmax_t size = 0;
    std::int64_t mtime_ns = 0;
    bool operator==(const stamp&) const = default;
  };
  static std::vector<stamp> stamps_of(const std::vector<std::filesystem::path>& dirs);

  std::shared_ptr<const runtime_catalog> catalog_;
  std::vector<std::filesystem::path> dirs_;
  std::vector<stamp> stamps_;
};

}  // namespace tjob::detail
