// The logs and the event log of container jobs: a node container's log
// stream (Docker's frames; a job that waited for admission follows the
// container it gets), and the daemon's events of a job after its time in the
// queue.
#include "adapters/container/container_impl.hpp"

#include "core/json_fields.hpp"
#include "core/log_stream_impl.hpp"
#include "core/messages.hpp"
#include "core/names.hpp"
#include "core/times.hpp"

#include <boost/json/parse.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <fstream>

namespace tjob::container {

using detail::quote;

namespace {

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(clock::now().time_since_epoch()).count();
}

// Ends a follower's stream on Podman once the event stream says its container
// died (Podman ends a follow only after its cleanup and a poll interval,
// about 250 ms later); the follower then reads what is left without following.
struct died_watch {
  explicit died_watch(asio::any_io_executor ex) : sig(std::move(ex)) {}
  detail::wake_signal sig;
  http::body_stream* body = nullptr;  // the follow, while it is open
  bool gone = false;                  // the follower was dropped
  bool died = false;
};

asio::awaitable<void> watch_died(std::shared_ptr<backend::impl> b, std::shared_ptr<died_watch> w,
                                 std::string id) {
  detail::wake_registration reg(b->waiters, &w->sig);
  while (!w->gone && !b->stopping) {
    if (b->died.contains(id)) {
      w->died = true;
      if (w->body) w->body->close();
      co_return;
    }
    co_await w->sig.wait_until(steady::time_point::max());
  }
}

struct container_log final : detail::piecewise_log {
  std::shared_ptr<backend::impl> b;
  std::string what, container, job, step;  // container: empty while the job waits for admission
  log_options options;
  std::optional<http::body_stream> body;
  frame_decoder dec;
  // A follow: what was handed out so far and, once the follow ended and the
  // log is read again, how much of it is still to skip (that much was).
  std::shared_ptr<died_watch> watch;
  std::uint64_t emitted = 0, skip = 0;
  bool following = false;  // the open stream follows
  bool rereading = false;
  bool raw = false;  // a TTY's log: no frames
  bool finished = false;  // the log has ended and what was held is handed out
  // Each stream's bytes after its last line end ('\n' or '\r'), held until
  // that line ends: the daemon may cut a line where its log driver read a
  // pipe (Podman's conmon does), and the other stream's next frame would
  // then land inside it. Lines are handed out whole, in the order they end.
  std::string held_out, held_err;
  static constexpr std::size_t hold_limit = 1 << 20;  // a longer line goes out in pieces

  // What is held goes out (the log ended, or is read again from its start).
  void release(std::string& out) {
    out += held_out;
    out += held_err;
    held_out.clear();
    held_err.clear();
  }
  // Its container had ended for good when the log was asked for: its log is
  // whole, and a follow would only wait (Podman ends a follow of an ended
  // container a poll interval later, 250 ms; Docker at once).
  bool whole = false;

  ~container_log() override {
    if (!watch) return;
    watch->gone = true;
    watch->body = nullptr;
    watch->sig.notify();
  }

  container_log(std::shared_ptr<backend::impl> bk, std::string w, std::string c, log_options o, bool tty)
      // the daemon's since is exact (Podman's too, though it prints whole seconds)
      : piecewise_log(o.timestamps ? std::optional(detail::peer_stamps(true, std::nullopt)) : std::nullopt),
        b(std::move(bk)),
        what(std::move(w)),
        container(std::move(c)),
        options(std::move(o)),
        dec(tty),
        raw(tty) {}

  // The log's stream, opened (following where asked, and the container may
  // still write).
  asio::awaitable<void> open_body(const std::string& where) {
    auto asked = options;
    if (whole) asked.follow = false;
    auto opened = co_await b->api->container_logs(container, asked);
    if (!opened) raise(prefixed(opened.error(), where));
    body.emplace(std::move(*opened));
    following = asked.follow;
    // Reading the log again from its start gives the same bytes first only
    // without tail and since; then a follow can end at the container's death.
    if (asked.follow && !options.tail && !options.since && b->api->info().kind == daemon_kind::podman) {
      b->ensure_events();
      watch = std::make_shared<died_watch>(b->ctx.ex);
      watch->body = &*body;
      b->tasks.spawn(watch_died(b, watch, container), "a log follower's container");
    }
  }

  // A frame's bytes, past what a reread skips: whole lines out, the rest held.
  void take(int stream, std::string_view p, std::string& out) {
    if (skip > 0) {
      const auto n = std::min<std::uint64_t>(skip, p.size());
      p.remove_prefix(n);
      skip -= n;
    }
    emitted += p.size();
    if (raw) {
      out.append(p);
      return;
    }
    auto& held = stream == 2 ? held_err : held_out;
    held.append(p);
    auto end = held.find_last_of("\n\r");
    if (end == std::string::npos && held.size() < hold_limit) return;
    const auto n = end == std::string::npos ? held.size() : end + 1;
    out.append(held, 0, n);
    held.erase(0, n);
  }

  asio::awaitable<bool> read_piece(std::string& out) override {
    if (finished) co_return false;
    if (container.empty()) {
      // The job waits for admission: its container comes when it is let in.
      auto c = co_await b->await_container(job, step, options.follow);
      if (!c) co_return false;  // it ended (or was deleted) before it had one, or this does not follow
      container = c->id;
      dec = frame_decoder(c->tty);
      raw = c->tty;
      whole = b->for_good(*c);
    }
    auto where = what + " (container " + quote(container) + "): ";
    if (!body) co_await open_body(where);
    auto piece = co_await body->read_some();
    const bool died = !piece && watch && watch->died;
    const bool ended = piece && !*piece;
    if (ended && !dec.at_boundary())
      raise(failure(docker_errc::bad_answer, where + "the stream ended inside a frame"));
    if ((died || ended) && following && !rereading && !options.tail && !options.since) {
      // The follow ended: Podman's at the container's death (our watch; its
      // own ends only after the cleanup), Docker's at the exit, which can
      // come before the log driver has the last line without a newline (so
      // `docker logs -f` loses it). The log is read once more without
      // following, what was handed out skipped: byte-exact, and whole.
      b->ctx.log->debug(
          "{}: {}; the rest of its log is read without following ({} bytes were handed out)", what,
          died ? "container " + quote(container) + " died" : std::string("the follow ended"), emitted);
      if (watch) watch->body = nullptr;
      body.reset();
      rereading = true;
      release(out);  // (all that was received: the reread skips that much)
      skip = emitted;
      dec = frame_decoder(raw);
      auto rest = options;
      rest.follow = false;
      auto opened = co_await b->api->container_logs(container, rest);
      if (!opened) {
        if (died) raise(prefixed(opened.error(), where));
        co_return false;  // gone meanwhile (deleted, the daemon stopping): what was read stands
      }
      body.emplace(std::move(*opened));
      co_return true;
    }
    if (!piece) raise(prefixed(piece.error(), where));
    if (ended) {
      release(out);
      finished = true;
      co_return !out.empty();
    }
    auto fed = dec.feed(**piece, [&](int stream, std::string_view p) { take(stream, p, out); });
    if (!fed) raise(prefixed(fed.error(), where));
    co_return true;
  }
};

}  // namespace

// --- logs -----------------------------------------------------------------

asio::awaitable<std::optional<seen>> backend::impl::await_container(const std::string& job,
                                                                    const std::string& step, bool follow) {
  detail::wake_signal sig(ctx.ex);
  detail::wake_registration reg(waiters, &sig);
  ensure_events();
  // Once started: Docker ends a follow of a container that was made but not
  // started yet at once, empty.
  auto of_step = [&](std::vector<seen>& cs) -> std::optional<seen> {
    for (auto& c : cs)
      if (c.step == step && (c.state != "created" || !follow)) return std::move(c);
    return std::nullopt;
  };
  for (;;) {
    auto found = co_await containers(job);
    if (auto c = of_step(found.value())) co_return c;
    if (!follow || stopping) co_return std::nullopt;
    auto q = read_queue(job);
    if (!q) {
      // Its file moves only after its containers are made (and started): one more look.
      auto again = co_await containers(job);
      co_return of_step(again.value());
    }
    if (!waits(*q) || is_terminal(queued_job(*q, std::nullopt).status)) co_return std::nullopt;
    // A file has no events: the daemon's (its containers made) or half a second.
    co_await sig.wait_until(steady::now() + std::chrono::milliseconds(500));
  }
}

asio::awaitable<log_stream> backend::impl::logs(const std::string& name, const log_options& o) {
  auto found = co_await containers(name);
  auto cs = std::move(found).value();
  if (cs.empty()) {
    // No container yet: a job that waits for admission reads as an empty
    // log, and a follower waits for its container.
    auto q = read_queue(name);
    if (!q || q->state == "started") raise(not_found(name));
    auto j = queued_job(*q, std::nullopt);
    std::vector<std::string> steps;
    for (const auto& s : j.steps) steps.push_back(s.name);
    if (std::find(steps.begin(), steps.end(), o.step) == steps.end())
      detail::throw_step_not_found(name, o.step, steps);
    auto log = std::make_unique<container_log>(
        shared_from_this(), "the log of TrainJob " + quote(name) + " step " + quote(o.step), std::string(), o,
        false);
    log->job = name;
    log->step = o.step;
    co_return log_stream(std::move(log));
  }
  std::vector<std::string> known;
  for (const auto& c : cs) {
    if (c.step == o.step) {
      auto log = std::make_unique<container_log>(
          shared_from_this(), "the log of TrainJob " + quote(name) + " step " + quote(o.step), c.id, o,
          c.tty);
      log->whole = for_good(c);
      co_return log_stream(std::move(log));
    }
    known.push_back(c.step);
  }
  detail::throw_step_not_found(name, o.step, known);
}

// --- events ---------------------------------------------------------------

asio::awaitable<std::vector<event>> backend::impl::job_events(const std::string& name) {
  auto found = co_await containers(name);
  auto cs = std::move(found).value();
  // Its time in the queue, from its queue file (moved to its work dir once
  // its containers were made): Waiting, Queued, Admitted, or how it ended.
  std::vector<event> out;
  auto add = [&](std::int64_t ms, const char* reason, std::string message) {
    if (ms <= 0) return;
    event e;
    e.seq = static_cast<std::int64_t>(out.size()) + 1;
    e.time = clock::time_point(std::chrono::milliseconds(ms));
    e.reason = reason;
    e.message = std::move(message);
    out.push_back(std::move(e));
  };
  std::optional<queue_file> q = read_queue(name);
  if (!q || q->state == "started") {
    q.reset();
    auto dir = state(name);
    auto text = dir ? dir->read("admission.json") : std::string();
    boost::system::error_code ec;
    if (auto v = json::parse(text, ec); !ec && v.is_object()) q = queue_file_of(v.as_object());
  }
  if (cs.empty() && (!q || q->state == "started")) raise(not_found(name));
  if (q) {
    std::string deps;
    for (const auto& [list, kind] : {std::pair{&q->after_ok, "after_ok"},
                                     {&q->after_any, "after_any"},
                                     {&q->after_not_ok, "after_not_ok"}})
      for (const auto& d : *list) deps += (deps.empty() ? "" : ", ") + std::string(kind) + " " + d;
    if (q->begin_ms > 0)
      deps += (deps.empty() ? "its begin time " : ", and its begin time ") +
              format_time(clock::time_point(std::chrono::milliseconds(q->begin_ms)));
    if (!deps.empty()) add(q->created_ms, "Waiting", "waits for " + deps);
    if (q->seq > 0)
      add(q->since_ms, "Queued",
          "needs " + detail::describe_need(q->need) + ", priority " + std::to_string(q->priority));
    add(q->admitted_ms, "Admitted",
        fmt::format("admitted after {:.1f} s in the queue", (q->admitted_ms - q->since_ms) / 1000.0));
    if (q->state == "failed")
      add(q->ended_ms, q->reason == "cancelled" ? "Cancelled" : "StartFailed", q->message);
  }
  if (cs.empty()) co_return out;
  auto daemon_ = co_await daemon();
  auto& d = *daemon_.value();
  std::int64_t since = cs.front().created - 1;
  for (const auto& c : cs) since = std::min(since, c.created - 1);
  json::object filters{{"label", json::array{std::string(label_job) + "=" + name}}};
  auto opened = co_await d.events(filters, std::max<std::int64_t>(since, 1), unix_now() + 1);
  auto body = std::move(opened).value();
  http::line_splitter lines(1 << 20, "the event stream of " + d.describe());
  std::vector<std::string> got;
  auto handle = [&](const std::string& line) {
    if (auto e = event_of_line(line, static_cast<std::int64_t>(out.size()) + 1)) out.push_back(std::move(*e));
  };
  for (;;) {
    auto piece = co_await body.read_some();
    if (!piece.value()) break;
    got.clear();
    lines.feed(**piece, got).value();
    for (const auto& l : got) handle(l);
  }
  if (auto rest = lines.finish()) handle(*rest);
  // What its code reported, among the daemon's events by time.
  if (auto dir = state(name)) read_progress_events(*dir, out);
  std::stable_sort(out.begin(), out.end(), [](const event& a, const event& b) { return a.time < b.time; });
  for (std::size_t i = 0; i < out.size(); ++i) out[i].seq = static_cast<std::int64_t>(i) + 1;
  co_return out;
}

}  // namespace tjob::container
