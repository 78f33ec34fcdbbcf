#include "core/runtimes.hpp"

#include "core/names.hpp"
#include "core/strings.hpp"
#include "core/yaml_guard.hpp"

#include <yaml-cpp/yaml.h>

#include <sys/stat.h>
#include <algorithm>
#include <fstream>
#include <sstream>

namespace tjob::detail {

// Generated from runtimes/*.yaml by CMake.
extern const char* const builtin_runtime_files[][2];
extern const std::size_t builtin_runtime_file_count;

namespace {

constexpr std::size_t max_manifest_bytes = 1 << 20;

std::string problem(const std::string& source, std::size_t doc, const std::string& name,
                    const std::string& what) {
  std::string where = source;
  if (doc > 0) where += ": document " + std::to_string(doc);
  if (!name.empty()) where += " (runtime '" + printable(name) + "')";
  return where + ": " + what;
}

std::optional<std::string> scalar(const YAML::Node& n) {
  if (!n || !n.IsScalar()) return std::nullopt;
  return n.as<std::string>();
}

void insert(runtime_catalog& cat, runtime rt, std::string source) {
  for (std::size_t i = 0; i < cat.runtimes.size(); ++i)
    if (cat.runtimes[i].name == rt.name) {
      cat.runtimes[i] = std::move(rt);
      cat.sources[i] = std::move(source);
      return;
    }
  cat.runtimes.push_back(std::move(rt));
  cat.sources.push_back(std::move(source));
}

// The image of the runtime's trainer: the container named `node` of its
// replicated job `node` (else that job's first container with an image).
// False, with `why`, when there is no such job.
bool read_node_job(const YAML::Node& spec, runtime& rt, std::string& why) {
  auto jobs = spec["template"]["spec"]["replicatedJobs"];
  if (!jobs || !jobs.IsSequence()) {
    why = "spec.template.spec.replicatedJobs is missing or not a list";
    return false;
  }
  YAML::Node node_job;
  bool has_node_job = false;
  for (const auto& j : jobs)
    if (j.IsMap() && scalar(j["name"]) == std::string("node")) {
      node_job.reset(j);
      has_node_job = true;
    }
  if (!has_node_job) {
    why = "spec.template.spec.replicatedJobs has no job named 'node'";
    return false;
  }
  auto containers = node_job["template"]["spec"]["template"]["spec"]["containers"];
  if (containers && containers.IsSequence()) {
    for (const auto& c : containers)
      if (c.IsMap() && scalar(c["name"]) == std::string("node") && scalar(c["image"]))
        rt.trainer.image = *scalar(c["image"]);
    if (rt.trainer.image.empty())
      for (const auto& c : containers)
        if (c.IsMap() && scalar(c["image"])) {
          rt.trainer.image = *scalar(c["image"]);
          break;
        }
  }
  return true;
}

// The runtime one document describes. nullopt with `why` empty for a
// document of another kind; with `why` set for one that cannot be used
// (`name` is then its name, when it has one).
std::optional<runtime> runtime_of(const YAML::Node& doc, std::string& name, std::string& why) {
  auto bad = [&](std::string text) -> std::optional<runtime> {
    why = std::move(text);
    return std::nullopt;
  };
  if (!doc.IsMap()) return bad("a manifest must be a mapping");
  auto kind = scalar(doc["kind"]);
  if (!kind) return bad("kind is missing; use ClusterTrainingRuntime");
  if (*kind != "ClusterTrainingRuntime" && *kind != "TrainingRuntime") return std::nullopt;
  auto meta = doc["metadata"];
  if (!meta || !meta.IsMap()) return bad("metadata is missing");
  auto n = scalar(meta["name"]);
  if (!n || n->empty()) return bad("metadata.name is missing");
  name = *n;
  std::optional<std::string> framework;
  if (auto labels = meta["labels"]; labels && labels.IsMap())
    framework = scalar(labels[std::string(framework_label)]);
  if (!framework || framework->empty())
    return bad("metadata.labels." + std::string(framework_label) +
               " is missing; add the label naming the framework (torch, python, ...)");
  auto spec = doc["spec"];
  if (!spec || !spec.IsMap()) return bad("spec is missing");
  runtime rt;
  rt.name = name;
  rt.kind = *kind;
  rt.trainer.framework = *framework;
  if (auto ml = spec["mlPolicy"]; ml && ml.IsMap() && ml["numNodes"]) {
    try {
      rt.trainer.num_nodes = ml["numNodes"].as<int>();
    } catch (const YAML::Exception&) {
      return bad("spec.mlPolicy.numNodes is not an integer");
    }
    if (rt.trainer.num_nodes < 1) return bad("spec.mlPolicy.numNodes must be 1 or more");
  }
  if (!read_node_job(spec, rt, why)) return std::nullopt;
  if (auto ann = meta["annotations"]; ann && ann.IsMap()) {
    if (auto pk = scalar(ann[std::string(packages_annotation)])) rt.trainer.packages = split_list(*pk);
  }
  return rt;
}

}  // namespace

void parse_runtime_documents(std::string_view text, const std::string& source, std::vector<runtime>& out,
                             std::vector<std::string>& sources, std::vector<std::string>& problems) {
  if (auto bad = yaml_mapping_problem(text)) {
    problems.push_back(problem(source, 0, "", "not a manifest: " + *bad));
    return;
  }
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(std::string(text));
  } catch (const YAML::Exception& e) {
    problems.push_back(
        problem(source, 0, "", "not valid YAML: " + e.msg + " at line " + std::to_string(e.mark.line + 1)));
    return;
  }
  std::size_t index = 0;
  for (const auto& doc : docs) {
    ++index;
    if (!doc || doc.IsNull()) continue;
    std::string name, why;
    try {
      auto rt = runtime_of(doc, name, why);
      if (rt) {
        out.push_back(std::move(*rt));
        sources.push_back(source);
      } else if (!why.empty()) {
        problems.push_back(problem(source, index, name, why));
      }
    } catch (const YAML::Exception& e) {
      problems.push_back(problem(source, index, name, "unreadable: " + e.msg));
    }
  }
}

runtime_catalog load_runtimes(const std::vector<std::filesystem::path>& dirs) {
  runtime_catalog cat;
  auto add_text = [&](std::string_view text, const std::string& source) {
    std::vector<runtime> found;
    std::vector<std::string> srcs;
    parse_runtime_documents(text, source, found, srcs, cat.problems);
    for (std::size_t i = 0; i < found.size(); ++i) insert(cat, std::move(found[i]), srcs[i]);
  };
  for (std::size_t i = 0; i < builtin_runtime_file_count; ++i)
    add_text(builtin_runtime_files[i][1], std::string("built-in ") + builtin_runtime_files[i][0]);
  for (const auto& dir : dirs) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) continue;
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      auto ext = e.path().extension();
      if ((ext == ".yaml" || ext == ".yml") && e.is_regular_file(ec)) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      auto size = std::filesystem::file_size(f, ec);
      if (ec || size > max_manifest_bytes) {
        cat.problems.push_back(f.string() + ": larger than 1 MiB; a runtime manifest is a few KiB");
        continue;
      }
      std::ifstream in(f, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      add_text(ss.str(), f.string());
    }
  }
  std::vector<std::size_t> order(cat.runtimes.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](auto a, auto b) { return cat.runtimes[a].name < cat.runtimes[b].name; });
  runtime_catalog sorted;
  for (auto i : order) {
    sorted.runtimes.push_back(cat.runtimes[i]);
    sorted.sources.push_back(cat.sources[i]);
  }
  sorted.problems = std::move(cat.problems);
  return sorted;
}

std::vector<runtime_cache::stamp> runtime_cache::stamps_of(const std::vector<std::filesystem::path>& dirs) {
  std::vector<stamp> out;
  for (const auto& dir : dirs) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      auto ext = e.path().extension();
      if (ext != ".yaml" && ext != ".yml") continue;
      struct stat st {};
      if (::stat(e.path().c_str(), &st) != 0) continue;
      out.push_back({e.path().string(), static_cast<std::uintmax_t>(st.st_size),
                     static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec});
    }
  }
  std::sort(out.begin(), out.end(), [](const stamp& a, const stamp& b) { return a.path < b.path; });
  return out;
}

std::shared_ptr<const runtime_catalog> runtime_cache::load(const std::vector<std::filesystem::path>& dirs) {
  auto stamps = stamps_of(dirs);
  if (!catalog_ || dirs != dirs_ || stamps != stamps_) {
    catalog_ = std::make_shared<const runtime_catalog>(load_runtimes(dirs));
    dirs_ = dirs;
    stamps_ = std::move(stamps);
  }
  return catalog_;
}

const runtime* runtime_catalog::find(std::string_view name) const {
  for (const auto& r : runtimes)
    if (r.name == name) return &r;
  return nullptr;
}

std::string runtime_catalog::not_found_message(std::string_view name) const {
  std::string known;
  for (const auto& r : runtimes) known += (known.empty() ? "" : ", ") + r.name;
  if (known.empty()) known = "none";
  return "Runtime '" + printable(name) + "' not found. Known runtimes: " + known + ". Pass one of them, or " +
         (how_to_add.empty() ? std::string("add a ClusterTrainingRuntime manifest to a runtime directory")
                             : how_to_add) +
         ".";
}

}  // namespace tjob::detail
