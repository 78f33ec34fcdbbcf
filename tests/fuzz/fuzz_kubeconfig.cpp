// kubeconfig files: any YAML (or not) as the only file of $KUBECONFIG-less
// loading. Unusable files are tjob::error naming the problem; a token or key
// in the file never appears in that message.
#include "adapters/kubernetes/kubeconfig.hpp"
#include "core/yaml_guard.hpp"
#include "tests/fuzz/fuzz_support.hpp"

#include <tjob/error.hpp>

#include <yaml-cpp/yaml.h>

#include <fcntl.h>
#include <unistd.h>
#include <cstdlib>
#include <string>

namespace {

std::string scratch_file() {
  static std::string path = [] {
    char tmpl[] = "/tmp/tjob-fuzz-kubeconfig-XXXXXX";
    int fd = ::mkstemp(tmpl);
    if (fd >= 0) ::close(fd);
    return std::string(tmpl);
  }();
  return path;
}

// Whether the file, read as YAML, gives `secret` as a user's token: text that
// only looks like "token: ..." inside another value (an unterminated quote
// swallows the lines after it into a context's name) is that value, and a
// message may quote it as the name it is.
bool parsed_as_token(std::string_view text, std::string_view secret) {
  if (tjob::detail::yaml_mapping_problem(text)) return false;  // (yaml-cpp is never given what hangs it)
  try {
    auto users = YAML::Load(std::string(text))["users"];
    if (!users || !users.IsSequence()) return false;
    for (const auto& u : users) {
      auto token = u["user"] ? u["user"]["token"] : YAML::Node();
      if (token && token.IsScalar() && token.as<std::string>() == secret) return true;
    }
  } catch (const YAML::Exception&) {
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto text = tjob::fuzz::text(data, size);
  auto path = scratch_file();
  int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC);
  if (fd < 0) std::abort();
  if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) std::abort();
  ::close(fd);
  tjob::kube::load_options opt;
  opt.config_file = path;
  opt.in_cluster_dir = "/nonexistent";
  try {
    auto conn = tjob::kube::load(opt);
    (void)conn;
  } catch (const tjob::error& e) {
    // The secret a fuzzed file carries must not be quoted back (unless the
    // file also uses that text elsewhere: a context may be named anything).
    std::string msg = e.what();
    constexpr std::string_view secret = "SECRET-FUZZ-TOKEN";
    auto at = text.find(secret);
    bool only_as_token = at != std::string_view::npos && at >= 7 && text.substr(at - 7, 7) == "token: " &&
                         text.find(secret, at + 1) == std::string_view::npos && parsed_as_token(text, secret);
    if (only_as_token && msg.find(secret) != std::string::npos) std::abort();
  }
  return 0;
}
