#include "serve/api.hpp"

#include "serve/target.hpp"

#include <tjob/wire.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <boost/asio/this_coro.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <random>
#include <sstream>

namespace tjob::serve {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

std::string json_text(const json::value& v) { return json::serialize(v) + "\n"; }

reply json_reply(int status, const json::value& v) {
  reply r;
  r.status = status;
  r.body = json_text(v);
  return r;
}

// An error of the request itself (a query parameter, the body): 400.
struct bad_request : std::runtime_error {
  bad_request(std::string field, std::string message, std::string code = "bad_request")
      : std::runtime_error(std::move(message)), field(std::move(field)), code(std::move(code)) {}
  std::string field, code;
};

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

using query_map = std::map<std::string, std::string>;

// Refuses a query parameter the route does not take, by name.
void only(const query_map& q, std::initializer_list<const char*> allowed) {
  for (const auto& kv : q) {
    const auto& k = kv.first;  // (clang 14: a structured binding cannot be captured)
    bool ok = std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return k == a; });
    if (ok) continue;
    std::string names;
    for (auto* a : allowed) names += (names.empty() ? "" : ", ") + std::string(a);
    throw bad_request(
        k, "query parameter '" + k + "' is not known here; " +
               (names.empty() ? std::string("this route takes none") : "this route takes " + names));
  }
}

std::optional<std::string> param(const query_map& q, const char* key) {
  auto it = q.find(key);
  if (it == q.end()) return std::nullopt;
  return it->second;
}

bool flag_param(const query_map& q, const char* key) {
  auto v = param(q, key);
  if (!v) return false;
  if (*v == "1" || *v == "true" || v->empty()) return true;
  if (*v == "0" || *v == "false") return false;
  throw bad_request(key, std::string(key) + "=" + *v + ": give 1 or true, 0 or false");
}

std::optional<std::int64_t> int_param(const query_map& q, const char* key, std::int64_t lo, std::int64_t hi) {
  auto v = param(q, key);
  if (!v) return std::nullopt;
  std::int64_t n = 0;
  auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
  if (ec != std::errc() || end != v->data() + v->size() || n < lo || n > hi)
    throw bad_request(key, fmt::format("{}={}: give a whole number from {} to {}", key, *v, lo, hi));
  return n;
}

std::optional<double> seconds_param(const query_map& q, const char* key, double hi) {
  auto v = param(q, key);
  if (!v) return std::nullopt;
  char* end = nullptr;
  double s = std::strtod(v->c_str(), &end);
  if (v->empty() || *end || !(s > 0) || s > hi)
    throw bad_request(key, fmt::format("{}={}: give seconds, more than 0 and at most {}", key, *v, hi));
  return s;
}

std::set<job_status> statuses_param(const query_map& q, const char* key) {
  std::set<job_status> out;
  auto v = param(q, key);
  if (!v) return out;
  std::size_t start = 0;
  while (start <= v->size()) {
    auto end = v->find(',', start);
    if (end == std::string::npos) end = v->size();
    auto item = v->substr(start, end - start);
    start = end + 1;
    std::optional<job_status> found;
    for (auto s : {job_status::created, job_status::running, job_status::complete, job_status::failed}) {
      auto name = to_string(s);
      if (std::equal(item.begin(), item.end(), name.begin(), name.end(), [](char a, char b) {
            return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
          }))
        found = s;
    }
    if (!found)
      throw bad_request(
          key, std::string(key) + "=" + *v + ": '" + item +
                   "' is not a status; give a comma-separated list of Created, Running, Complete, Failed");
    out.insert(*found);
  }
  return out;
}

std::string hex_sha256(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  std::string out;
  for (unsigned i = 0; i < len; ++i) out += fmt::format("{:02x}", md[i]);
  return out;
}

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

// --- Idempotency-Key records: <dir>/<sha256 of the key>, {"name","digest"}.

struct key_record {
  std::string name, digest;
};

std::optional<key_record> read_record(const std::filesystem::path& file, std::chrono::hours ttl) {
  std::error_code ec;
  auto mtime = std::filesystem::last_write_time(file, ec);
  if (ec) return std::nullopt;
  if (std::filesystem::file_time_type::clock::now() - mtime > ttl) return std::nullopt;
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  boost::system::error_code jec;
  auto v = json::parse(text.str(), jec);
  if (jec || !v.is_object()) return std::nullopt;
  auto* name = v.as_object().if_contains("name");
  auto* digest = v.as_object().if_contains("digest");
  if (!name || !digest || !name->is_string() || !digest->is_string()) return std::nullopt;
  return key_record{std::string(name->get_string()), std::string(digest->get_string())};
}

void write_record(const std::filesystem::path& file, const key_record& r) {
  // Private as everything in $TJOB_HOME (0700, 0600), whatever the umask and
  // the home's own mode (an administrator's /var/lib/tjob may be 0755).
  std::filesystem::create_directories(file.parent_path().parent_path().parent_path());
  for (const auto& d : {file.parent_path().parent_path(), file.parent_path()})
    if (::mkdir(d.c_str(), 0700) != 0 && errno != EEXIST)
      throw error(errc::store_unavailable, "cannot create " + d.string() + ": " + std::strerror(errno));
  ::chmod(file.parent_path().c_str(), 0700);  // (one an older tjob made 0755)
  auto tmp = file;
  tmp += ".tmp";
  json::object o{{"name", r.name}, {"digest", r.digest}};
  const auto text = json::serialize(o);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  bool ok = fd >= 0 && ::fchmod(fd, 0600) == 0 &&
            ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (fd >= 0) ::close(fd);
  if (!ok) throw error(errc::store_unavailable, "cannot write the Idempotency-Key record " + tmp.string());
  std::filesystem::rename(tmp, file);
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

api::api(engine& e, watch_hub& hub, api_config config) : engine_(e), hub_(hub), config_(std::move(config)) {
  // Forget what is past its time (records are tiny; this runs once per start).
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(config_.idempotency_dir, ec))
    if (!read_record(f.path(), config_.idempotency_ttl)) std::filesystem::remove(f.path(), ec);
}

asio::awaitable<answer> api::handle(request req) {
  std::string problem;
  auto t = parse_target(req.target, problem);
  if (!t) throw bad_request("", problem);
  const auto& seg = t->segments;
  const auto& q = t->query;
  const auto& m = req.method;
  auto not_allowed = [&](const char* allow) -> answer {
    auto r = error_reply(
        405, "method_not_allowed",
        m + " is not allowed on " + req.target.substr(0, req.target.find('?')) + "; use " + allow);
    r.headers.emplace_back("Allow", allow);
    return r;
  };
  if (seg.size() == 1 && seg[0] == "healthz") {
    if (m != "GET") co_return not_allowed("GET");
    only(q, {});
    auto runs = co_await engine_.job_backend();
    json::object o{{"status", draining_ ? "draining" : "ok"}, {"backend", runs.id}, {"capabilities", to_json(runs)}};
    co_return json_reply(draining_ ? 503 : 200, o);
  }
  if (seg.size() == 1 && seg[0] == "metrics" && config_.metrics_text) {
    if (m != "GET") co_return not_allowed("GET");
    only(q, {});
    reply r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = co_await config_.metrics_text();
    co_return r;
  }
  // The dashboard: static files of the binary, no data (the page asks /v1 with the token).
  if (seg.empty() || (seg.size() == 2 && seg[0] == "ui")) {
    const std::string path = seg.empty() ? "/" : "/ui/" + seg[1];
    if (const auto* file = web_file(path)) {
      if (m != "GET") co_return not_allowed("GET");
      reply r;
      r.content_type = file->content_type;
      r.body = file->body;
      r.headers.emplace_back("Cache-Control", "no-cache");
      r.headers.emplace_back("X-Content-Type-Options", "nosniff");
      // (its scripts and styles are its own files; fetch goes to this server only)
      r.headers.emplace_back("Content-Security-Policy",
                             "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                             "connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
      co_return r;
    }
  }
  if (seg.empty() || seg[0] != "v1")
    co_return error_reply(404, "not_found",
                          "no such route: " + req.target.substr(0, req.target.find('?')) +
                              "; the API is under /v1 (see /v1/openapi.json)");
  if (seg.size() == 2 && seg[1] == "openapi.json") {
    if (m != "GET") co_return not_allowed("GET");
    only(q, {});
    reply r;
    r.body = openapi_document();
    co_return r;
  }
  if (seg.size() == 2 && seg[1] == "jobs") {
    if (m == "POST") {
      only(q, {});
      co_return co_await submit(req);
    }
    if (m != "GET") co_return not_allowed("GET, POST");
    co_return co_await list(q);
  }
  if (seg.size() == 2 && seg[1] == "watch") {
    if (m != "GET") co_return not_allowed("GET");
    co_return watch(q);
  }
  if (seg.size() >= 3 && seg[1] == "jobs") {
    std::string name = seg[2];
    if (auto problem = job_name_problem(name))
      co_return error_reply(400, "invalid_name", "the job name in the path: " + *problem, "name");
    if (seg.size() == 3) {
      if (m == "GET") {
        only(q, {});
        auto job = co_await engine_.get_job(name);
        co_return json_reply(200, to_json(job));
      }
      if (m == "DELETE") {
        only(q, {});
        co_await engine_.delete_job(name);
        json::object o{{"name", name}, {"deleted", true}};
        co_return json_reply(200, o);
      }
      co_return not_allowed("GET, DELETE");
    }
    if (seg.size() == 4 && seg[3] == "cancel") {
      if (m != "POST") co_return not_allowed("POST");
      only(q, {"force"});
      cancel_options opts;
      opts.force = flag_param(q, "force");
      co_await engine_.cancel_job(name, opts);
      auto job = co_await engine_.get_job(name);
      co_return json_reply(200, to_json(job));
    }
    if (seg.size() == 4 && seg[3] == "logs") {
      if (m != "GET") co_return not_allowed("GET");
      // the stream is opened here, so a job or step that is not there is a
      // 404 before any of the answer is sent
      co_return co_await logs(name, q);
    }
    if (seg.size() == 4 && seg[3] == "events") {
      if (m != "GET") co_return not_allowed("GET");
      only(q, {});
      auto events = co_await engine_.get_job_events(name);
      json::array items;
      for (const auto& ev : events) items.push_back(to_json(ev));
      json::object o{{"items", std::move(items)}};
      co_return json_reply(200, o);
    }
    if (seg.size() == 4 && seg[3] == "wait") {
      if (m != "GET") co_return not_allowed("GET");
      co_return wait(name, q);
    }
  }
  if (seg.size() == 2 && seg[1] == "runtimes") {
    if (m != "GET") co_return not_allowed("GET");
    only(q, {});
    auto rts = co_await engine_.list_runtimes();
    auto problems = co_await engine_.runtime_problems();
    json::array items;
    for (const auto& rt : rts) items.push_back(to_json(rt));
    json::array lines;
    for (const auto& p : problems) lines.emplace_back(p);
    json::object o{{"items", std::move(items)}, {"problems", std::move(lines)}};
    co_return json_reply(200, o);
  }
  if (seg.size() >= 2 && seg[1] == "venv-cache") {
    std::vector<venv_cache_entry> entries;
    if (seg.size() == 2) {
      if (m != "GET") co_return not_allowed("GET");
      only(q, {});
      entries = co_await engine_.list_venv_cache();
    } else if (seg.size() == 3 && seg[2] == "prune") {
      if (m != "POST") co_return not_allowed("POST");
      only(q, {"unused_for"});
      auto unused_for = int_param(q, "unused_for", 0, std::int64_t(1) << 40).value_or(0);
      entries = co_await engine_.prune_venv_cache(std::chrono::seconds(unused_for));
    } else {
      co_return error_reply(
          404, "not_found",
          "no such route: " + req.target.substr(0, req.target.find('?')) + " (see /v1/openapi.json)");
    }
    json::array items;
    for (const auto& e : entries) items.push_back(to_json(e));
    json::object o{{"items", std::move(items)}};
    co_return json_reply(200, o);
  }
  if (seg.size() == 2 && seg[1] == "queue") {
    if (m != "GET") co_return not_allowed("GET");
    only(q, {});
    auto queue = co_await engine_.get_queue();
    json::array items;
    for (const auto& e : queue) items.push_back(to_json(e));
    json::object o{{"items", std::move(items)}};
    co_return json_reply(200, o);
  }
  if (seg.size() == 3 && seg[1] == "runtimes") {
    if (m != "GET") co_return not_allowed("GET");
    only(q, {});
    auto rt = co_await engine_.get_runtime(seg[2]);
    co_return json_reply(200, to_json(rt));
  }
  co_return error_reply(
      404, "not_found",
      "no such route: " + req.target.substr(0, req.target.find('?')) + " (see /v1/openapi.json)");
}

asio::awaitable<answer> api::submit(request& req) {
  if (draining_)
    co_return error_reply(503, "shut_down",
                          "tjob serve is shutting down and takes no new jobs; retry against the next server");
  boost::system::error_code ec;
  auto v = json::parse(req.body, ec);
  if (ec)
    throw bad_request(
        "",
        "the body is not JSON (" + ec.message() +
            "); send a job spec, as {\"trainer\": {\"kind\": \"command\", \"command\": [\"true\"]}}",
        "invalid_json");
  auto spec = request_from_json(v, req.local_peer);
  if (req.idempotency_key.empty()) {
    auto name = co_await engine_.train(std::move(spec));
    auto job = co_await engine_.get_job(name);
    auto r = json_reply(201, to_json(job));
    r.headers.emplace_back("Location", "/v1/jobs/" + name);
    co_return r;
  }
  const auto& key = req.idempotency_key;
  if (key.size() > 255)
    throw bad_request("Idempotency-Key",
                      "the Idempotency-Key header is longer than 255 characters; use a UUID");
  auto key_id = hex_sha256(key);
  auto digest = hex_sha256(json::serialize(to_json(spec)));
  if (!keys_in_flight_.insert(key_id).second)
    co_return error_reply(409, "in_progress",
                          "a request with this Idempotency-Key is being served; retry when it has answered");
  struct release {
    std::set<std::string>& keys;
    std::string id;
    ~release() { keys.erase(id); }
  } released{keys_in_flight_, key_id};
  auto file = config_.idempotency_dir / key_id;
  auto record = read_record(file, config_.idempotency_ttl);
  if (record && record->digest != digest)
    co_return error_reply(422, "idempotency_key_reused",
                          "this Idempotency-Key was used for another spec (job " + record->name +
                              "); use a new key for a new job");
  if (record) {
    // Created before, unless the server stopped between the record and the train.
    bool exists = true;
    try {
      auto job = co_await engine_.get_job(record->name);
      auto r = json_reply(200, to_json(job));
      r.headers.emplace_back("Location", "/v1/jobs/" + record->name);
      r.headers.emplace_back("Idempotent-Replayed", "true");
      co_return r;
    } catch (const error& e) {
      if (e.code() != make_error_code(errc::job_not_found)) throw;
      exists = false;
    }
    (void)exists;
    spec.name = record->name;
  } else {
    if (spec.name.empty()) spec.name = new_job_name();
    write_record(file, key_record{spec.name, digest});
  }
  std::string name;
  try {
    name = co_await engine_.train(std::move(spec));
  } catch (...) {
    std::error_code rm;
    std::filesystem::remove(file, rm);  // nothing was made: the key is free again
    throw;
  }
  auto job = co_await engine_.get_job(name);
  auto r = json_reply(201, to_json(job));
  r.headers.emplace_back("Location", "/v1/jobs/" + name);
  co_return r;
}

asio::awaitable<answer> api::list(const query_map& q) {
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

asio::awaitable<answer> api::logs(std::string name, const query_map& q) {
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
  auto opened = co_await engine_.get_job_logs(name, opts);
  auto stream = std::make_shared<log_stream>(std::move(opened));
  stream_reply s;
  s.content_type = "text/plain; charset=utf-8";
  s.next = [stream]() -> asio::awaitable<std::optional<std::string>> {
    co_return co_await stream->read_some();
  };
  co_return s;
}

answer api::wait(std::string name, const query_map& q) {
  only(q, {"status", "timeout"});
  auto statuses = statuses_param(q, "status");
  if (statuses.empty()) statuses.insert(job_status::complete);
  auto seconds = seconds_param(q, "timeout", 86400).value_or(600);
  auto timeout = std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
  auto& eng = engine_;
  long_reply l;
  l.run = [&eng, name = std::move(name), statuses, timeout]() -> asio::awaitable<reply> {
    auto job = co_await eng.wait_for_job_status(name, statuses, timeout);
    co_return json_reply(200, to_json(job));
  };
  return l;
}

answer api::watch(const query_map& q) {
  only(q, {"since", "runtime"});
  auto runtime = param(q, "runtime");
  auto since = int_param(q, "since", 0, std::numeric_limits<std::int64_t>::max());
  std::vector<watch_hub::line> first;
  std::int64_t at = hub_.head();
  if (since) {
    auto lines = hub_.since(*since);
    if (!lines)
      return error_reply(410, "expired",
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
      for (const auto& l : st->pending) {
        if (runtime && l.runtime != *runtime) continue;
        chunk += *l.text;
      }
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
  return s;
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
