#include "engine/runtimes.hpp"

#include "engine/names.hpp"

namespace tjob::detail {

std::vector<runtime> builtin_runtimes() {
  runtime torch;
  torch.name = std::string(default_runtime_name);
  torch.trainer.framework = "torch";
  torch.trainer.image = "local";
  torch.trainer.packages = {"torch"};
  return {torch};
}

std::optional<runtime> find_runtime(std::string_view name) {
  for (auto& r : builtin_runtimes())
    if (r.name == name) return r;
  return std::nullopt;
}

std::string runtime_not_found_message(std::string_view name) {
  std::string known;
  for (auto& r : builtin_runtimes()) known += (known.empty() ? "" : ", ") + r.name;
  return "Runtime '" + printable(name) + "' not found. Known runtimes: " + known +
         ". Pass one of them as the runtime.";
}

}  // namespace tjob::detail
