#include "adapters/kubernetes/informer.hpp"
#include "adapters/kubernetes/trainjob.hpp"
#include "engine/backoff.hpp"

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

  asio::awaitable<void> relist() {
    std::map<std::string, json::object> fresh;
    std::string cont;
    std::string list_rv;
    do {
      auto target = query(false) + (cont.empty() ? "" : "&continue=" + http::url_encode(cont));
      auto v = co_await a->get(std::move(target));
      if (stopped) co_return;
      auto& o = v.as_object();
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
  }

  // One watch connection, until the server ends it. True: relist first.
  asio::awaitable<bool> watch_once() {
    auto target = query(true);
    auto stream = co_await a->stream(std::move(target));
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
      if (!chunk) break;
      got.clear();
      lines.feed(*chunk, got);
      bool any = false;
      for (const auto& line : got) {
        if (line.empty()) continue;
        auto ev = parse_watch_event(line, what + " watch");
        if (ev.type == "ERROR") {
          auto code = ev.object.if_contains("code");
          auto msg = ev.object.if_contains("message");
          std::string m = msg && msg->is_string() ? std::string(msg->as_string()) : "";
          if (code && code->is_int64() && code->as_int64() == 410) {
            log->info("{}: watch from version {} expired ({}); listing again", what, rv, m);
            co_return true;
          }
          throw error(errc::backend_error, what + " watch: the server sent an error: " + m);
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
      bool failed = false;
      try {
        if (need_list) {
          co_await self->relist();
          need_list = false;
        }
        if (self->stopped) break;
        need_list = co_await self->watch_once();
        retry.reset();
      } catch (const status_error& e) {
        if (e.http_code() == 410) {
          need_list = true;
          continue;
        }
        self->last_error = e.what();
        failed = true;
      } catch (const error& e) {
        if (self->stopped) break;
        self->last_error = e.what();
        if (e.code() == errc::protocol_error) need_list = true;  // what we hold may be off
        failed = true;
      } catch (const std::exception& e) {
        if (self->stopped) break;
        self->last_error = e.what();
        need_list = true;
        failed = true;
      }
      if (self->stopped) break;
      if (failed) {
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
