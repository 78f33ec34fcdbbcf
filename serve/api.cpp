// tjob serve's router: a table of paths and methods (one handler each, in
// serve/routes.cpp), the dashboard's files, and the one error object of every
// refusal.
#include "serve/api.hpp"

#include "serve/query.hpp"
#include "serve/target.hpp"

#include <tjob/wire.hpp>

#include <boost/json.hpp>

#include <string_view>
#include <vector>

namespace tjob::serve {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// The HTTP status of each engine error: what the client did wrong is 4xx,
// what the machine or a peer did is 5xx.
int status_of(errc e) {
  switch (e) {
    case errc::job_not_found:
    case errc::step_not_found:
    case errc::runtime_not_found:
      return 404;
    case errc::invalid_name:
    case errc::invalid_argument:
    case errc::executable_not_found:
      return 400;
    case errc::duplicate_name:
    case errc::job_failed:
    case errc::unreachable_status:
      return 409;
    case errc::timeout:
      return 504;  // Kubernetes' StatusReasonTimeout: the wait ran out, the job is as it was
    case errc::shut_down:
    case errc::store_locked:
    case errc::store_unavailable:
      return 503;
    case errc::backend_unavailable:
    case errc::backend_error:
    case errc::protocol_error:
      return 502;
    case errc::store_corrupt:
    case errc::spawn_failed:
      return 500;
  }
  return 500;
}

// The field an engine error is about, where its code says it.
std::string field_of(errc e) {
  switch (e) {
    case errc::invalid_name:
    case errc::duplicate_name:
      return "name";
    case errc::runtime_not_found:
      return "runtime";
    case errc::executable_not_found:
      return "trainer.command";
    default:
      return {};
  }
}

// A path: literal segments, and at most one variable, "{job}" (a job's
// name, checked as one) or "{runtime}"; each method's handler.
struct route {
  std::vector<std::string_view> path;
  std::vector<std::pair<std::string_view, api::handler>> methods;
};

const std::vector<route>& routes() {
  static const std::vector<route> table = {
      {{"healthz"}, {{"GET", &api::health}}},
      {{"metrics"}, {{"GET", &api::metrics}}},
      {{"v1", "openapi.json"}, {{"GET", &api::openapi}}},
      {{"v1", "jobs"}, {{"GET", &api::list}, {"POST", &api::submit}}},
      {{"v1", "watch"}, {{"GET", &api::watch}}},
      {{"v1", "jobs", "{job}"}, {{"GET", &api::get}, {"DELETE", &api::remove}}},
      {{"v1", "jobs", "{job}", "cancel"}, {{"POST", &api::cancel}}},
      {{"v1", "jobs", "{job}", "logs"}, {{"GET", &api::logs}}},
      {{"v1", "jobs", "{job}", "events"}, {{"GET", &api::events}}},
      {{"v1", "jobs", "{job}", "wait"}, {{"GET", &api::wait}}},
      {{"v1", "runtimes"}, {{"GET", &api::runtimes}}},
      {{"v1", "runtimes", "{runtime}"}, {{"GET", &api::runtime}}},
      {{"v1", "venv-cache"}, {{"GET", &api::venv_cache}}},
      {{"v1", "venv-cache", "prune"}, {{"POST", &api::prune}}},
      {{"v1", "queue"}, {{"GET", &api::queue}}},
      {{"v1", "sweeps"}, {{"GET", &api::sweeps}, {"POST", &api::start_sweep}}},
      {{"v1", "sweeps", "{sweep}"}, {{"GET", &api::sweep}, {"DELETE", &api::delete_sweep}}},
      {{"v1", "sweeps", "{sweep}", "cancel"}, {{"POST", &api::cancel_sweep}}},
  };
  return table;
}

// The route of `seg`, and its variable segment; null when none.
const route* match(const std::vector<std::string>& seg, std::string& variable) {
  for (const auto& r : routes()) {
    if (r.path.size() != seg.size()) continue;
    bool same = true;
    for (std::size_t i = 0; i < seg.size() && same; ++i) {
      if (r.path[i].front() == '{')
        variable = seg[i];
      else
        same = r.path[i] == seg[i];
    }
    if (same) return &r;
  }
  return nullptr;
}

reply not_found(const std::string& target, const std::vector<std::string>& seg) {
  const bool v1 = !seg.empty() && seg[0] == "v1";
  return error_reply(404, "not_found",
                     "no such route: " + target.substr(0, target.find('?')) +
                         (v1 ? " (see /v1/openapi.json)" : "; the API is under /v1 (see /v1/openapi.json)"));
}

// A file of the dashboard: static, holding no data (the page asks /v1 with the token).
std::optional<answer> dashboard_file(const request& req, const std::vector<std::string>& seg) {
  if (!(seg.empty() || (seg.size() == 2 && seg[0] == "ui"))) return std::nullopt;
  const auto* file = web_file(seg.empty() ? "/" : "/ui/" + seg[1]);
  if (!file) return std::nullopt;
  if (req.method != "GET") {
    auto r = error_reply(
        405, "method_not_allowed",
        req.method + " is not allowed on " + req.target.substr(0, req.target.find('?')) + "; use GET");
    r.headers.emplace_back("Allow", "GET");
    return r;
  }
  reply r;
  r.content_type = file->content_type;
  r.body = file->body;
  r.headers.emplace_back("Cache-Control", "no-cache");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  // (its scripts and styles are its own files; fetch goes to this server only)
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                         "connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
  return r;
}

}  // namespace

reply error_reply(int status, std::string code, std::string message, std::string field) {
  json::object o;
  o["status"] = status;
  o["code"] = code;
  o["message"] = message;
  if (field.empty())
    o["field"] = nullptr;
  else
    o["field"] = field;
  return json_reply(status, o);
}

reply reply_of(std::exception_ptr e, bool draining) {
  try {
    std::rethrow_exception(e);
  } catch (const spec_error& x) {
    return error_reply(400, "invalid_argument", x.what(), x.field());
  } catch (const error& x) {
    auto code = x.code();
    if (code.category() != category()) return error_reply(500, "internal", x.what());
    auto ec = static_cast<errc>(code.value());
    auto r = error_reply(status_of(ec), to_string(ec), x.what(), field_of(ec));
    return r;
  } catch (const bad_request& x) {
    return error_reply(400, x.code, x.what(), x.field);
  } catch (const boost::system::system_error& x) {
    if (x.code() == asio::error::operation_aborted && draining)
      return error_reply(503, "shut_down", "tjob serve is shutting down; retry against the next server");
    return error_reply(500, "internal", x.what());
  } catch (const std::exception& x) {
    return error_reply(500, "internal", x.what());
  }
}

api::api(engine& e, watch_hub& hub, api_config config)
    : engine_(e),
      hub_(hub),
      config_(std::move(config)),
      keys_(config_.idempotency_dir, config_.idempotency_ttl) {}

asio::awaitable<answer> api::handle(request req) {
  std::string problem;
  auto t = parse_target(req.target, problem);
  if (!t) throw bad_request("", problem);
  const auto& seg = t->segments;
  if (auto file = dashboard_file(req, seg)) co_return std::move(*file);
  // A job's (or a sweep's) name in the path is checked first, whatever follows it.
  if (seg.size() >= 3 && seg[0] == "v1" && (seg[1] == "jobs" || seg[1] == "sweeps"))
    if (auto problem = job_name_problem(seg[2]))
      co_return error_reply(400, "invalid_name",
                            std::string("the ") + (seg[1] == "jobs" ? "job" : "sweep") + " name in the path: " + *problem,
                            "name");
  std::string variable;
  const auto* r = match(seg, variable);
  if (!r || (seg.size() == 1 && seg[0] == "metrics" && !config_.metrics_text))
    co_return not_found(req.target, seg);
  std::string allow;
  for (const auto& [method, h] : r->methods) {
    if (req.method == method) {
      call c{req, t->query, std::move(variable)};
      if (seg.size() < 3 || seg[1] != "jobs") co_return co_await (this->*h)(c);
      // The job the path names is not there. The backend said where it
      // looked (the server's store, its daemon); the client asked this
      // server, and the name is what is at fault.
      try {
        co_return co_await (this->*h)(c);
      } catch (const error& e) {
        if (e.code() != make_error_code(errc::job_not_found)) throw;
      }
      co_return error_reply(404, to_string(errc::job_not_found),
                            "No TrainJob with name '" + seg[2] +
                                "' on this server; GET /v1/jobs (tjob list) shows the jobs there",
                            "name");
    }
    allow += (allow.empty() ? "" : ", ") + std::string(method);
  }
  auto refusal = error_reply(
      405, "method_not_allowed",
      req.method + " is not allowed on " + req.target.substr(0, req.target.find('?')) + "; use " + allow);
  refusal.headers.emplace_back("Allow", allow);
  co_return refusal;
}

}  // namespace tjob::serve

namespace tjob::serve {

extern const char* const openapi_json;    // serve/openapi.json, embedded by the build
extern const char* const web_files[][3];  // web/, embedded by the build (cmake/embed_web.cmake)
extern const std::size_t web_file_count;

const web_asset* web_file(std::string_view path) {
  static const std::vector<web_asset> files = [] {
    std::vector<web_asset> out;
    for (std::size_t i = 0; i < web_file_count; ++i)
      out.push_back({web_files[i][0], web_files[i][1], web_files[i][2]});
    return out;
  }();
  for (const auto& f : files)
    if (f.path == path) return &f;
  return nullptr;
}

bool token_free(std::string_view method, std::string_view target) {
  return target.substr(0, 8) == "/healthz" ||
         (method == "GET" && web_file(target.substr(0, target.find('?'))));
}

const std::string& openapi_document() {
  static const std::string doc(openapi_json);
  return doc;
}

}  // namespace tjob::serve
