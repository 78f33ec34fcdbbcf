#include <tjob/error.hpp>

#include <iterator>

namespace tjob {
namespace {

class category_impl : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "tjob"; }
  std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
      case errc::job_not_found:
        return "no such job";
      case errc::step_not_found:
        return "no such step";
      case errc::invalid_name:
        return "invalid job name";
      case errc::duplicate_name:
        return "a job with that name exists";
      case errc::invalid_argument:
        return "invalid argument";
      case errc::executable_not_found:
        return "executable not found";
      case errc::runtime_not_found:
        return "runtime not found";
      case errc::job_failed:
        return "job failed";
      case errc::unreachable_status:
        return "job ended in another status";
      case errc::timeout:
        return "timed out";
      case errc::store_unavailable:
        return "store unavailable";
      case errc::store_corrupt:
        return "store corrupt";
      case errc::store_locked:
        return "store locked";
      case errc::spawn_failed:
        return "process could not be started";
      case errc::shut_down:
        return "engine shut down";
      case errc::backend_unavailable:
        return "backend unavailable";
      case errc::backend_error:
        return "backend refused the request";
      case errc::protocol_error:
        return "malformed answer from a peer";
    }
    return "unknown tjob error";
  }
};

}  // namespace

namespace {

constexpr const char* errc_names[] = {"",
                                      "job_not_found",
                                      "step_not_found",
                                      "invalid_name",
                                      "duplicate_name",
                                      "invalid_argument",
                                      "executable_not_found",
                                      "runtime_not_found",
                                      "job_failed",
                                      "unreachable_status",
                                      "timeout",
                                      "store_unavailable",
                                      "store_corrupt",
                                      "store_locked",
                                      "spawn_failed",
                                      "shut_down",
                                      "backend_unavailable",
                                      "backend_error",
                                      "protocol_error"};

}  // namespace

const char* to_string(errc e) noexcept {
  auto i = static_cast<std::size_t>(e);
  return i > 0 && i < std::size(errc_names) ? errc_names[i] : "unknown";
}

std::optional<errc> parse_errc(std::string_view name) noexcept {
  for (std::size_t i = 1; i < std::size(errc_names); ++i)
    if (name == errc_names[i]) return static_cast<errc>(i);
  return std::nullopt;
}

const boost::system::error_category& category() noexcept {
  static const category_impl instance;
  return instance;
}

error::error(boost::system::error_code code, std::string message, std::string diagnostics)
    : std::runtime_error(std::move(message)), code_(code), diagnostics_(std::move(diagnostics)) {}

bool is_usage_error(const boost::system::error_code& ec) noexcept {
  if (ec.category() != category()) return false;
  switch (static_cast<errc>(ec.value())) {
    case errc::job_not_found:
    case errc::step_not_found:
    case errc::invalid_name:
    case errc::duplicate_name:
    case errc::invalid_argument:
    case errc::executable_not_found:
    case errc::runtime_not_found:
      return true;
    default:
      return false;
  }
}

}  // namespace tjob
