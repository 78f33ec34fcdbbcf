// tjob serve's routes, one handler per path and method (the table is in
// serve/api.cpp): each reads its query, asks the engine, and answers JSON, a
// chunked stream (logs, watch) or a long poll (wait).
#include "serve/api.hpp"
#include "serve/query.hpp"

#include <tjob/wire.hpp>

#include <fmt/format.h>
#include <boost/asio/this_coro.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <limits>
#include <random>

namespace tjob::serve {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// A letter and 11 hex characters, as the engine names a job.
std::string new_job_name() {
  static std::mt19937_64 gen{std::random_device{}()};
  std::uniform_int_distribution<int> letter(0, 25);
  std::uniform_int_distribution<std::uint64_t> hex(0, (std::uint64_t(1) << 44) - 1);
  return fmt::format("{}{:011x}", static_cast<char>('a' + letter(gen)), hex(gen));
}

// The ordering key of a job in /v1/jobs pages and its `continue` token.
std::string page_key(const train_job& j) {
  return fmt::format("{:020}.{}", j.creation_timestamp.time_since_epoch().count(), j.name);
}

bool job_order(const train_job& a, const train_job& b) {
  if (a.creation_timestamp != b.creation_timestamp) return a.creation_timestamp < b.creation_timestamp;
  return a.name < b.name;
}

template <class T>
reply items_reply(const std::vector<T>& all) {
  json::array items;
  for (const auto& x : all) items.push_back(to_json(x));
  json::object o{{"items", std::move(items)}};
  return json_reply(200, o);
}

reply created(const train_job& job) {
  auto r = json_reply(201, to_json(job));
  r.headers.emplace_back("Location", "/v1/jobs/" + job.name);
  return r;
}

}  // namespace

asio::awaitable<answer> api::health(call& c) {
  only(c.query, {});
  auto runs = co_await engine_.job_backend();
  json::object o{
      {"status", draining_ ? "draining" : "ok"}, {"backend", runs.id}, {"capabilities", to_json(runs)}};
  co_return json_reply(draining_ ? 503 : 200, o);
}

asio::awaitable<answer> api::metrics(call& c) {
  only(c.query, {});
  reply r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = co_await config_.metrics_text();
  co_return r;
}

asio::awaitable<answer> api::openapi(call& c) {
  only(c.query, {});
  reply r;
  r.body = openapi_document();
  co_return r;
}

asio::awaitable<answer> api::submit(call& c) {
  only(c.query, {});
  if (draining_)
    co_return error_reply(503, "shut_down",
                          "tjob serve is shutting down and takes no new jobs; retry against the next server");
  boost::system::error_code ec;
  auto v = json::parse(c.req.body, ec);
  if (ec)
    throw bad_request(
        "",
        "the body is not JSON (" + ec.message() +
            "); send a job spec, as {\"trainer\": {\"kind\": \"command\", \"command\": [\"true\"]}}",
        "invalid_json");
  auto spec = request_from_json(v, c.req.local_peer);
  if (c.req.idempotency_key.empty()) {
    auto name = co_await engine_.train(std::move(spec));
    co_return created(co_await engine_.get_job(name));
  }
  const auto& key = c.req.idempotency_key;
  if (key.size() > 255)
    throw bad_request("Idempotency-Key",
                      "the Idempotency-Key header is longer than 255 characters; use a UUID");
  auto key_id = idempotency_keys::sha256(key);
  auto digest = idempotency_keys::sha256(json::serialize(to_json(spec)));
  if (!keys_.begin(key_id))
    co_return error_reply(409, "in_progress",
                          "a request with this Idempotency-Key is being served; retry when it has answered");
  struct release {
    idempotency_keys& keys;
    std::string id;
    ~release() { keys.end(id); }
  } released{keys_, key_id};
  auto record = keys_.find(key_id);
  if (record && record->digest != digest)
    co_return error_reply(422, "idempotency_key_reused",
                          "this Idempotency-Key was used for another spec (job " + record->name +
                              "); use a new key for a new job");
  if (record) {
    // Made before, unless the server stopped between the record and the train.
    std::optional<train_job> made;
    try {
      made = co_await engine_.get_job(record->name);
    } catch (const error& e) {
      if (e.code() != make_error_code(errc::job_not_found)) throw;
    }
    if (made) {
      auto r = json_reply(200, to_json(*made));
      r.headers.emplace_back("Location", "/v1/jobs/" + record->name);
      r.headers.emplace_back("Idempotent-Replayed", "true");
      co_return r;
    }
    spec.name = record->name;
  } else {
    if (spec.name.empty()) spec.name = new_job_name();
    keys_.put(key_id, {spec.name, digest});
  }
  std::string name;
  try {
    name = co_await engine_.train(std::move(spec));
  } catch (...) {
    keys_.forget(key_id);  // nothing was made: the key is free again
    throw;
  }
  co_return created(co_await engine_.get_job(name));
}

asio::awaitable<answer> api::list(call& c) {
  const auto& q = c.query;
  only(q, {"status", "runtime", "limit", "continue"});
  auto statuses = statuses_param(q, "status");
  auto runtime = param(q, "runtime");
  auto limit = int_param(q, "limit", 1, 100000);
  auto after = param(q, "continue");
  if (after && after->find('.') != 20)
    throw bad_request("continue",
                      "continue=" + *after + ": not a token this server gave; leave it out to start again");
  std::int64_t seq = hub_.head();  // before the read: a watch from it misses nothing
  auto jobs = co_await engine_.list_jobs(runtime);
  std::sort(jobs.begin(), jobs.end(), job_order);
  json::array items;
  std::string last;
  bool more = false;
  for (const auto& j : jobs) {
    if (!statuses.empty() && !statuses.count(j.status)) continue;
    auto k = page_key(j);
    if (after && k <= *after) continue;
    if (limit && items.size() == static_cast<std::size_t>(*limit)) {
      more = true;
      break;
    }
    items.push_back(to_json(j));
    last = std::move(k);
  }
  json::object o;
  o["items"] = std::move(items);
  o["seq"] = seq;
  if (more)
    o["continue"] = last;
  else
    o["continue"] = nullptr;
  co_return json_reply(200, o);
}

asio::awaitable<answer> api::get(call& c) {
  only(c.query, {});
  auto job = co_await engine_.get_job(c.name);
  co_return json_reply(200, to_json(job));
}

asio::awaitable<answer> api::remove(call& c) {
  only(c.query, {});
  co_await engine_.delete_job(c.name);
  json::object o{{"name", c.name}, {"deleted", true}};
  co_return json_reply(200, o);
}

asio::awaitable<answer> api::cancel(call& c) {
  only(c.query, {"force", "grace_ms", "checkpoint"});
  cancel_options opts;
  opts.force = flag_param(c.query, "force");
  opts.checkpoint = flag_param(c.query, "checkpoint");
  if (auto g = int_param(c.query, "grace_ms", 0, std::int64_t(1) << 40))
    opts.grace = std::chrono::milliseconds(*g);
  co_await engine_.cancel_job(c.name, opts);
  auto job = co_await engine_.get_job(c.name);
  co_return json_reply(200, to_json(job));
}

asio::awaitable<answer> api::events(call& c) {
  only(c.query, {});
  auto events = co_await engine_.get_job_events(c.name);
  co_return items_reply(events);
}

// The stream is opened here, so a job or step that is not there is a 404
// before any of the answer is sent.
asio::awaitable<answer> api::logs(call& c) {
  const auto& q = c.query;
  only(q, {"step", "tail", "follow", "timestamps", "since", "attempt"});
  log_options opts;
  if (auto s = param(q, "step")) opts.step = *s;
  if (auto n = int_param(q, "attempt", 1, 1001)) opts.attempt = static_cast<int>(*n);
  if (auto t = int_param(q, "tail", 0, std::int64_t(1) << 40)) opts.tail = static_cast<std::size_t>(*t);
  opts.follow = flag_param(q, "follow");
  opts.timestamps = flag_param(q, "timestamps");
  if (auto s = param(q, "since")) {
    opts.since = parse_time(*s);
    if (!opts.since)
      throw bad_request("since", "since=" + *s + ": give an RFC 3339 time, as 2026-12-03T19:00:00Z");
  }
  auto opened = co_await engine_.get_job_logs(c.name, opts);
  auto stream = std::make_shared<log_stream>(std::move(opened));
  stream_reply s;
  s.content_type = "text/plain; charset=utf-8";
  s.next = [stream]() -> asio::awaitable<std::optional<std::string>> {
    co_return co_await stream->read_some();
  };
  co_return s;
}

asio::awaitable<answer> api::wait(call& c) {
  const auto& q = c.query;
  only(q, {"status", "timeout"});
  auto statuses = statuses_param(q, "status");
  if (statuses.empty()) statuses.insert(job_status::complete);
  auto seconds = seconds_param(q, "timeout", 86400).value_or(600);
  auto timeout = std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
  auto& eng = engine_;
  long_reply l;
  l.run = [&eng, name = c.name, statuses, timeout]() -> asio::awaitable<reply> {
    auto job = co_await eng.wait_for_job_status(name, statuses, timeout);
    co_return json_reply(200, to_json(job));
  };
  co_return l;
}

asio::awaitable<answer> api::watch(call& c) {
  const auto& q = c.query;
  only(q, {"since", "runtime"});
  auto runtime = param(q, "runtime");
  auto since = int_param(q, "since", 0, std::numeric_limits<std::int64_t>::max());
  std::vector<watch_hub::line> first;
  std::int64_t at = hub_.head();
  if (since) {
    auto lines = hub_.since(*since);
    if (!lines)
      co_return error_reply(410, "expired",
                            fmt::format("since={}: this server no longer has the changes after that sequence "
                                        "number (it keeps the last ones from {} on); list the jobs again "
                                        "(GET /v1/jobs gives a seq) and watch from there",
                                        *since, at));
    first = std::move(*lines);
  } else {
    first = hub_.snapshot();
  }
  struct state {
    std::vector<watch_hub::line> pending;
    std::int64_t at;
  };
  auto st = std::make_shared<state>(state{std::move(first), at});
  auto& hub = hub_;
  stream_reply s;
  s.content_type = "application/x-ndjson";
  s.next = [st, &hub, runtime]() -> asio::awaitable<std::optional<std::string>> {
    for (;;) {
      std::string chunk;
      for (const auto& l : st->pending)
        if (!runtime || l.runtime == *runtime) chunk += *l.text;
      st->pending.clear();
      if (!chunk.empty()) co_return chunk;
      if (hub.stopped()) co_return std::nullopt;
      co_await hub.changed(st->at);
      auto cs = co_await asio::this_coro::cancellation_state;
      if (cs.cancelled() != asio::cancellation_type::none)
        throw boost::system::system_error(asio::error::operation_aborted);
      auto lines = hub.since(st->at);
      if (!lines) co_return std::nullopt;  // fell behind the ring: the client lists again
      if (!lines->empty()) st->at = lines->back().seq;
      st->pending = std::move(*lines);
    }
  };
  co_return s;
}

asio::awaitable<answer> api::runtimes(call& c) {
  only(c.query, {});
  auto rts = co_await engine_.list_runtimes();
  auto problems = co_await engine_.runtime_problems();
  json::array items;
  for (const auto& rt : rts) items.push_back(to_json(rt));
  json::array lines;
  for (const auto& p : problems) lines.emplace_back(p);
  json::object o{{"items", std::move(items)}, {"problems", std::move(lines)}};
  co_return json_reply(200, o);
}

asio::awaitable<answer> api::runtime(call& c) {
  only(c.query, {});
  auto rt = co_await engine_.get_runtime(c.name);
  co_return json_reply(200, to_json(rt));
}

asio::awaitable<answer> api::venv_cache(call& c) {
  only(c.query, {});
  auto entries = co_await engine_.list_venv_cache();
  co_return items_reply(entries);
}

asio::awaitable<answer> api::prune(call& c) {
  only(c.query, {"unused_for"});
  auto unused_for = int_param(c.query, "unused_for", 0, std::int64_t(1) << 40).value_or(0);
  auto entries = co_await engine_.prune_venv_cache(std::chrono::seconds(unused_for));
  co_return items_reply(entries);
}

asio::awaitable<answer> api::queue(call& c) {
  only(c.query, {});
  auto entries = co_await engine_.get_queue();
  co_return items_reply(entries);
}

}  // namespace tjob::serve
