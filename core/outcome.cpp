#include "core/outcome.hpp"

#include <ostream>

namespace tjob::detail {

errc errc_of(const boost::system::error_code& ec) noexcept {
  if (ec.category() == category()) return static_cast<errc>(ec.value());
  auto cond = ec.default_error_condition();
  if (cond.category() == category()) return static_cast<errc>(cond.value());
  return errc::backend_error;
}

std::ostream& operator<<(std::ostream& os, const failure& f) {
  return os << f.code.category().name() << ':' << f.code.value() << ' ' << f.message;
}

failure make_failure(errc e, std::string message, std::string diagnostics) {
  return failure{make_error_code(e), std::move(message), std::move(diagnostics)};
}

failure prefixed(failure f, const std::string& prefix) {
  f.message.insert(0, prefix);
  return f;
}

void raise(const failure& f) { throw error(make_error_code(errc_of(f.code)), f.message, f.diagnostics); }

void throw_exception_from_error(const failure& f, const boost::source_location&) { raise(f); }

std::string table_category::message(int ev) const {
  if (ev < 1 || static_cast<std::size_t>(ev) > codes_.size())
    return std::string(name_) + " error " + std::to_string(ev);
  return codes_[static_cast<std::size_t>(ev) - 1].message;
}

boost::system::error_condition table_category::default_error_condition(int ev) const noexcept {
  if (ev < 1 || static_cast<std::size_t>(ev) > codes_.size())
    return {static_cast<int>(errc::backend_error), category()};
  return {static_cast<int>(codes_[static_cast<std::size_t>(ev) - 1].means), category()};
}

}  // namespace tjob::detail
