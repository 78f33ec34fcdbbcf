// Kubeflow's resources_per_node on a Python trainer: one rule for the CLI's
// --resources, the Python package and any other front end.
#include <tjob/error.hpp>
#include <tjob/types.hpp>

#include <cstdlib>
#include <map>
#include <string>

namespace tjob {

namespace {

[[noreturn]] void refuse(const std::string& what, const std::string& key, const std::string& value,
                         const std::string& fix) {
  throw error(errc::invalid_argument, what + " " + key + "=" + value + ": " + fix);
}

// A whole number in [lo, hi], else a refusal saying `unit`.
int count_of(const std::string& what, const std::string& key, const std::string& value, long lo, long hi,
             const char* unit) {
  char* rest = nullptr;
  long n = std::strtol(value.c_str(), &rest, 10);
  if (value.empty() || *rest || n < lo || n > hi)
    refuse(what, key, value, std::string("give a whole number of ") + unit);
  return static_cast<int>(n);
}

std::uint64_t bytes_of(const std::string& what, const std::string& value) {
  char* rest = nullptr;
  double n = std::strtod(value.c_str(), &rest);
  std::string unit(rest ? rest : "");
  static const std::map<std::string, double> units = {
      {"", 1},           {"K", 1e3},           {"M", 1e6},
      {"G", 1e9},        {"T", 1e12},          {"Ki", 1024.0},
      {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0}};
  auto it = units.find(unit);
  if (value.empty() || rest == value.c_str() || it == units.end() || !(n > 0))
    refuse(what, "memory", value, "give bytes with an optional unit, as 512Mi or 4Gi");
  double bytes = n * it->second;
  if (!(bytes < 1152921504606846976.0))  // 2^60 (1 EiB), well inside a uint64_t
    refuse(what, "memory", value, "give at most 1Ei (1024Pi)");
  return static_cast<std::uint64_t>(bytes);
}

}  // namespace

std::uint64_t parse_memory(const std::string& value, const std::string& what) {
  return bytes_of(what, value);
}

void set_resources_per_node(python_trainer& t, const std::map<std::string, std::string>& resources,
                            const std::string& what) {
  for (const auto& [key, value] : resources) {
    if (key == "cpu") {
      t.procs_per_node = count_of(what, key, value, 1, 1024, "processes, 1 or more");
      t.cpu_limit = true;
    } else if (key == "memory") {
      t.memory_limit = bytes_of(what, value);
    } else if (key == "gpu" || key == "nvidia.com/gpu") {
      t.gpus = count_of(what, key, value, 0, 64, "GPUs per node, 0 to 64");
    } else {
      throw error(errc::invalid_argument, what + " '" + key +
                                              "': unknown key; the accepted keys are cpu, memory, gpu (or "
                                              "nvidia.com/gpu)");
    }
  }
}

}  // namespace tjob
