#include "adapters/kubernetes/informer.hpp"
#include "adapters/kubernetes/trainjob.hpp"
#include "core/backoff.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include <spdlog/spdlog.h>

namespace tjob::kube {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {
constexpr std::size_t max_watch_line = 16 << 20;  // one object; Kubernetes' own limit is ~3 MiB
constexpr int watch_timeout_s = 300;
}  // namespace

struct informer::state {
  asio::any_io_executor ex;
  std::shared_ptr<api> a;
  std::string path, selector, what;
  std::shared_ptr<spdlog::logger> log;
  std::map<std::string, json::object> items;
  detail::wake_list waiters;
  std::string rv, last_error;
  bool started = false, stopped = false, synced = false;
  std::uint64_t lists = 0, watches = 0;
  http::body_stream* current = nullptr;
  asio::steady_timer pause;

  state(asio::any_io_executor e) : ex(e), pause(e) {}

  std::string query(bool watch) const {
    std::string q = "?";
    if (!selector.empty()) q += "labelSelector=" + http::url_encode(selector) + "&";
    if (watch)
      q += "watch=1&allowWatchBookmarks=true&timeoutSeconds=" + std::to_string(watch_timeout_s) +
           "&resourceVersion=" + http::url_encode(rv);
    else
      q += "limit=500";
    return path + q;
  }

  void changed() { waiters.notify_all(); }

  asio::awaitable<outcome<void>> relist() {
    std::map<std::string, json::object> fresh;
    std::string cont;
    std::string list_rv;
    do {
      auto target = query(false) + (cont.empty() ? "" : "&continue=" + http::url_encode(cont));
      auto v = co_await a->get(std::move(target));
      if (stopped) co_return outcome<void>();
      if (!v) co_return v.error();
      if (!v->is_object()) co_return failure(kube_errc::bad_answer, what + ": the list is not an object");
      auto& o = v->as_object();
      if (auto* items_v = o.if_contains("items"); items_v && items_v->is_array())
        for (auto& it : items_v->as_array())
          if (it.is_object()) fresh[name_of(it.as_object())] = std::move(it.as_object());
      cont.clear();
      if (auto* md = o.if_contains("metadata"); md && md->is_object()) {
        if (auto* c = md->as_object().if_contains("continue"); c && c->is_string())
          cont = std::string(c->as_string());
        if (auto* r = md->as_object().if_contains("resourceVersion"); r && r->is_string())
          list_rv = std::string(r->as_string());
      }
    } while (!cont.empty());
    items = std::move(fresh);
    rv = list_rv;
    synced = true;
    ++lists;
    changed();
    co_return outcome<void>();
  }

  // One watch connection, until the server ends it. True: relist first.
  asio::awaitable<outcome<bool>> watch_once() {
    auto target = query(true);
    auto opened = co_await a->stream(std::move(target));
    if (!opened) co_return opened.error();
    auto stream = std::move(*opened);
    ++watches;
    current = &stream;
    struct reset {
      http::body_stream** p;
      ~reset() { *p = nullptr; }
    } guard{&current};
    if (!last_error.empty()) {
      log->info("{}: watching again", what);
      last_error.clear();
    }
    http::line_splitter lines(max_watch_line, what + " watch");
    std::vector<std::string> got;
    while (!stopped) {
      auto chunk = co_await stream.read_some();
      if (!chunk) co_return chunk.error();
      if (!*chunk) break;
      got.clear();
      if (auto fed = lines.feed(**chunk, got); !fed) co_return fed.error();
      bool any = false;
      for (const auto& line : got) {
        if (line.empty()) continue;
        auto parsed = parse_watch_event(line, what + " watch");
        if (!parsed) co_return parsed.error();
        auto& ev = *parsed;
        if (ev.type == "ERROR") {
          // The object is a Status: its code says what happened.
          auto* code = ev.object.if_contains("code");
          unsigned status = code && code->is_int64() ? static_cast<unsigned>(code->as_int64()) : 500;
          auto f = status_failure(a->server(), "the watch of " + what, status, json::serialize(ev.object));
          if (f.code == kube_errc::expired) {
            log->info("{}: watch from version {} expired; listing again", what, rv);
            co_return true;
          }
          co_return f;
        }
        auto v = resource_version_of(ev.object);
        if (ev.type == "BOOKMARK") {
          if (!v.empty()) rv = v;
          continue;
        }
        auto name = name_of(ev.object);
        if (ev.type == "DELETED")
          items.erase(name);
        else if (ev.type == "ADDED" || ev.type == "MODIFIED")
          items[name] = std::move(ev.object);
        else
          continue;
        if (!v.empty()) rv = v;
        any = true;
      }
      if (any) changed();
    }
    co_return false;
  }

  static asio::awaitable<void> run(std::shared_ptr<state> self) {
    bool need_list = true;
    detail::backoff retry(std::chrono::milliseconds(200), std::chrono::milliseconds(5000));
    while (!self->stopped) {
      std::optional<failure> failed;
      if (need_list) {
        auto listed = co_await self->relist();
        if (listed)
          need_list = false;
        else
          failed = std::move(listed.error());
      }
      if (!failed && !self->stopped) {
        auto watched = co_await self->watch_once();
        if (watched) {
          need_list = *watched;
          retry.reset();
        } else {
          failed = std::move(watched.error());
        }
      }
      if (self->stopped) break;
      if (failed && failed->code == kube_errc::expired) {  // the version is too old: list again now
        need_list = true;
        continue;
      }
      if (failed) {
        self->last_error = failed->message;
        // what we hold may be off after a malformed answer
        if (detail::means(failed->code, errc::protocol_error)) need_list = true;
        auto delay = retry.next();
        self->log->warn("{}: {}; trying again in {} ms", self->what, self->last_error, delay.count());
        self->changed();  // waiters may report it
        self->pause.expires_after(delay);
        boost::system::error_code ec;
        co_await self->pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
    }
  }
};

informer::informer(asio::any_io_executor ex, std::shared_ptr<api> a, std::string collection_path,
                   std::string label_selector, std::string what, std::shared_ptr<spdlog::logger> log)
    : s_(std::make_shared<state>(ex)) {
  s_->a = std::move(a);
  s_->path = std::move(collection_path);
  s_->selector = std::move(label_selector);
  s_->what = std::move(what);
  s_->log = std::move(log);
}

informer::~informer() { stop(); }

void informer::start(detail::task_group& owner) {
  if (s_->started) return;
  s_->started = true;
  owner.spawn(state::run(s_), s_->what);
}

void informer::stop() {
  if (s_->stopped) return;
  s_->stopped = true;
  if (s_->current) s_->current->close();
  s_->pause.cancel();
  s_->changed();
}

bool informer::synced() const { return s_->synced; }
const std::map<std::string, json::object>& informer::items() const { return s_->items; }
detail::wake_list& informer::waiters() { return s_->waiters; }
const std::string& informer::last_error() const { return s_->last_error; }
std::uint64_t informer::lists() const { return s_->lists; }
std::uint64_t informer::watches() const { return s_->watches; }

}  // namespace tjob::kube
