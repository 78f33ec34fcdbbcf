// What the backend interface and the log stream do for every backend.
#include "core/driver.hpp"

#include "core/log_stream_impl.hpp"

#include <tjob/error.hpp>

#include <climits>

namespace tjob {

namespace asio = boost::asio;

// ---------------------------------------------------------------------------
// what every backend gets unless it says otherwise

namespace detail {

asio::awaitable<std::shared_ptr<const runtime_catalog>> backend::runtimes(bool report) {
  co_return ctx_.runtimes(report);
}

asio::awaitable<std::vector<venv_cache_entry>> backend::list_venv_cache() {
  throw error(errc::invalid_argument,
              "the " + capabilities().id +
                  " backend keeps no venv cache (its jobs install their packages "
                  "where they run); the cache is the local backend's: --backend local");
  co_return std::vector<venv_cache_entry>{};
}

asio::awaitable<std::vector<venv_cache_entry>> backend::prune_venv_cache(std::chrono::seconds) {
  co_return co_await list_venv_cache();
}

asio::awaitable<store_check> backend::check_store(bool) {
  throw error(errc::invalid_argument,
              "the " + capabilities().id +
                  " backend keeps no store of tjob's to check (its jobs are recorded by its peer); the store "
                  "is the local backend's: run tjob doctor where the jobs run, with --backend local");
  co_return store_check{};
}

asio::awaitable<std::vector<queue_entry>> backend::queue() {
  const auto caps = capabilities();
  throw error(errc::invalid_argument,
              "the " + caps.id + " backend has no queue of tjob's: its jobs go to the " +
                  (caps.queued_by.empty() ? std::string("daemon at once") : caps.queued_by) +
                  "; tjob's admission queue is the local backend's (docs/scheduling.md)");
  co_return std::vector<queue_entry>{};
}

asio::awaitable<backend_capabilities> backend::job_backend() { co_return capabilities(); }

// --- reading a backend's config ---------------------------------------------

void config_reader::bad(std::string_view member, const std::string& why) const {
  throw error(errc::invalid_argument, name_of(member) + " " + why);
}

void config_reader::only(std::initializer_list<std::string_view> known) const {
  for (const auto& [k, v] : config) {
    bool ok = false;
    for (auto n : known) ok = ok || k == n;
    if (!ok) {
      std::string list;
      for (auto n : known) list += (list.empty() ? "" : ", ") + name_of(n);
      throw error(errc::invalid_argument, "the " + std::string(backend) + " backend has no option " +
                                              name_of(std::string_view(k)) + "; its options are " + list);
    }
  }
}

std::optional<std::string> config_reader::text(std::string_view member) const {
  auto* v = config.if_contains(member);
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_string()) bad(member, "must be a string");
  return std::string(v->as_string());
}

std::optional<std::vector<std::string>> config_reader::texts(std::string_view member) const {
  auto* v = config.if_contains(member);
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_array()) bad(member, "must be a list of strings");
  std::vector<std::string> out;
  for (const auto& x : v->as_array()) {
    if (!x.is_string()) bad(member, "must be a list of strings");
    out.emplace_back(x.as_string());
  }
  return out;
}

std::optional<bool> config_reader::flag(std::string_view member) const {
  auto* v = config.if_contains(member);
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_bool()) bad(member, "must be true or false");
  return v->as_bool();
}

std::optional<std::int64_t> config_reader::number(std::string_view member, std::int64_t least) const {
  auto* v = config.if_contains(member);
  if (!v || v->is_null()) return std::nullopt;
  std::int64_t n = 0;
  if (v->is_int64())
    n = v->as_int64();
  else if (v->is_uint64() && v->as_uint64() <= static_cast<std::uint64_t>(INT64_MAX))
    n = static_cast<std::int64_t>(v->as_uint64());
  else
    bad(member, "must be a whole number");
  if (n < least) bad(member, "must be " + std::to_string(least) + " or more");
  return n;
}

}  // namespace detail

log_stream::log_stream() = default;
log_stream::log_stream(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
log_stream::log_stream(log_stream&&) noexcept = default;
log_stream& log_stream::operator=(log_stream&&) noexcept = default;
log_stream::~log_stream() = default;

asio::awaitable<std::optional<std::string>> log_stream::next() {
  if (!impl_) co_return std::nullopt;
  co_return co_await impl_->next(false);
}

asio::awaitable<std::optional<std::string>> log_stream::read_some() {
  if (!impl_) co_return std::nullopt;
  co_return co_await impl_->next(true);
}

}  // namespace tjob
