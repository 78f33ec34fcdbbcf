// What the backend interface and the log stream do for every backend.
#include "engine/backend.hpp"

#include "engine/log_stream_impl.hpp"

#include <tjob/error.hpp>

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
              "the " + std::string(to_string(traits().kind)) +
                  " backend keeps no venv cache (its jobs install their packages "
                  "where they run); the cache is the local backend's: --backend local");
  co_return std::vector<venv_cache_entry>{};
}

asio::awaitable<std::vector<venv_cache_entry>> backend::prune_venv_cache(std::chrono::seconds) {
  co_return co_await list_venv_cache();
}

asio::awaitable<std::vector<queue_entry>> backend::queue() {
  throw error(errc::invalid_argument,
              "the " + std::string(to_string(traits().kind)) +
                  " backend has no queue of tjob's: its jobs go to the " +
                  (traits().kind == backend_kind::kubernetes ? "cluster, where Kueue queues them"
                                                             : "daemon at once") +
                  "; tjob's admission queue is the local backend's (docs/scheduling.md)");
  co_return std::vector<queue_entry>{};
}

asio::awaitable<backend_kind> backend::job_backend() { co_return traits().kind; }

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
