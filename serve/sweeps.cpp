// tjob serve's sweep routes (/v1/sweeps): a sweep is started, read, cancelled
// and deleted through tjob/sweep.hpp with the server's own engine settings,
// so its owner's trials are the server's jobs. Those calls read files and
// start a process: they run on a thread of the api's pool, never on the
// engine's reactor.
#include "serve/api.hpp"
#include "serve/query.hpp"

#include <tjob/sweep.hpp>
#include <tjob/wire.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

namespace tjob::serve {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// f() on the pool; the caller resumes on its own executor. (Every lambda
// here is a named local before its co_await: g++ 12 miscompiles one made
// inside a co_await's arguments, docs/architecture.md.)
template <class F>
asio::awaitable<std::string> on_pool(asio::thread_pool& pool, F f) {
  auto run = [f = std::move(f)]() mutable -> asio::awaitable<std::string> { co_return f(); };
  auto spawned = asio::co_spawn(pool, std::move(run), asio::use_awaitable);
  co_return co_await std::move(spawned);
}

reply sweep_reply(int status, const std::string& text) {
  reply r;
  r.status = status;
  r.body = text + "\n";
  return r;
}

}  // namespace

asio::awaitable<answer> api::sweeps(call& c) {
  only(c.query, {});
  auto cfg = config_.engine;
  auto work = [cfg] {
    std::string out = "{\"items\":[";
    bool first = true;
    for (const auto& s : list_sweeps(cfg)) {
      out += (first ? "" : ",") + sweep_to_json(s);
      first = false;
    }
    return out + "]}";
  };
  auto text = co_await on_pool(pool_, std::move(work));
  co_return sweep_reply(200, text);
}

asio::awaitable<answer> api::start_sweep(call& c) {
  only(c.query, {});
  if (draining_)
    co_return error_reply(503, "shut_down",
                          "tjob serve is shutting down and takes no new sweeps; retry against the next server");
  boost::system::error_code ec;
  auto v = json::parse(c.req.body, ec);
  if (ec || !v.is_object())
    throw bad_request("",
                      "the body is not a JSON object; send a sweep, as {\"trial\": {\"trainer\": {\"kind\": "
                      "\"command\", \"command\": [\"train\", \"--lr\", \"${trialParameters.lr}\"]}}, "
                      "\"search_space\": [{\"name\": \"lr\", \"distribution\": \"loguniform\", \"min\": 0.001, "
                      "\"max\": 0.1}]}",
                      "invalid_json");
  // The trial's spec as POST /v1/jobs reads one (a training file by path only over the unix socket).
  auto& o = v.as_object();
  train_request trial;
  if (auto* t = o.if_contains("trial")) trial = request_from_json(*t, c.req.local_peer);
  o["trial"] = json::parse(R"({"trainer":{"kind":"command","command":["true"]}})");
  auto request = sweep_request_from_json(json::serialize(o));
  request.trial = std::move(trial);
  auto cfg = config_.engine;
  auto work = [cfg, request]() mutable {
    auto name = optimize(std::move(request), cfg);
    return sweep_to_json(get_sweep(name, cfg));
  };
  auto text = co_await on_pool(pool_, std::move(work));
  auto r = sweep_reply(201, text);
  r.headers.emplace_back("Location", "/v1/sweeps/" + std::string(json::parse(text).at("name").as_string()));
  co_return r;
}

asio::awaitable<answer> api::sweep(call& c) {
  only(c.query, {});
  auto cfg = config_.engine;
  auto work = [cfg, name = c.name] { return sweep_to_json(get_sweep(name, cfg)); };
  auto text = co_await on_pool(pool_, std::move(work));
  co_return sweep_reply(200, text);
}

asio::awaitable<answer> api::cancel_sweep(call& c) {
  only(c.query, {});
  auto cfg = config_.engine;
  auto work = [cfg, name = c.name] {
    tjob::cancel_sweep(name, cfg);
    return sweep_to_json(get_sweep(name, cfg));
  };
  auto text = co_await on_pool(pool_, std::move(work));
  co_return sweep_reply(200, text);
}

asio::awaitable<answer> api::delete_sweep(call& c) {
  only(c.query, {});
  auto cfg = config_.engine;
  auto work = [cfg, name = c.name] {
    tjob::delete_sweep(name, cfg);
    return std::string();
  };
  co_await on_pool(pool_, std::move(work));
  json::object o{{"name", c.name}, {"deleted", true}};
  co_return json_reply(200, o);
}

}  // namespace tjob::serve
