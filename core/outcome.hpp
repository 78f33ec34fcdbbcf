// Failures inside the adapters are values, not exceptions.
//
// An adapter speaks to a peer (a daemon, an API server, the kernel) and
// decides on what the peer answered: retry while the daemon restarts, relist
// when a watch expired, call a 404 "no such job". It decides on a `failure`:
// an error_code in the adapter's own category (http_errc, docker_errc,
// kube_errc, process_errc), our message for a person, and the peer's own
// words apart. Each adapter category maps its codes onto tjob::errc (its
// `default_error_condition`), so the edge that hands a failure to the API's
// caller throws the tjob::error users know: `outcome<T>::value()` does that.
#pragma once

#include <tjob/error.hpp>

#include <boost/system/result.hpp>

#include <iosfwd>
#include <span>
#include <string>

namespace tjob::detail {

/// What went wrong, for the code that decides on it and for a person.
struct failure {
  failure() = default;
  failure(boost::system::error_code c, std::string m, std::string d = {})
      : code(c), message(std::move(m)), diagnostics(std::move(d)) {}
  boost::system::error_code code;  ///< the adapter's own code (or a tjob::errc)
  std::string message;             ///< our sentence: names the job, the peer and what to do
  std::string diagnostics;         ///< the peer's own text, if any
};

/// "<category>:<code> <message>", for logs and test output.
std::ostream& operator<<(std::ostream& os, const failure& f);

/// A value or the failure that took its place.
template <class T>
using outcome = boost::system::result<T, failure>;

/// The tjob::errc a code stands for: itself when it is one, else what its
/// category maps it to (backend_error when the category does not say).
errc errc_of(const boost::system::error_code& ec) noexcept;

/// True when `ec` stands for `e` (its own code, or its category's mapping).
inline bool means(const boost::system::error_code& ec, errc e) noexcept { return ec && errc_of(ec) == e; }

/// A failure in tjob's own category.
failure make_failure(errc e, std::string message, std::string diagnostics = {});

/// The same failure, its message after `prefix` ("job x: node-1: ").
failure prefixed(failure f, const std::string& prefix);

/// Throws the tjob::error for `f` (the code mapped by errc_of).
[[noreturn]] void raise(const failure& f);

/// Found by boost::system::result<T, failure>::value() (ADL): the edge throws.
[[noreturn]] void throw_exception_from_error(const failure& f, const boost::source_location& loc);

/// One code of an adapter's category: its message and what it means to tjob.
struct code_info {
  const char* message;
  errc means;
};

/// An adapter's error category from a table: code N is `codes[N - 1]`.
class table_category final : public boost::system::error_category {
 public:
  table_category(const char* name, std::span<const code_info> codes) noexcept : name_(name), codes_(codes) {}
  const char* name() const noexcept override { return name_; }
  std::string message(int ev) const override;
  boost::system::error_condition default_error_condition(int ev) const noexcept override;

 private:
  const char* name_;
  std::span<const code_info> codes_;
};

}  // namespace tjob::detail
