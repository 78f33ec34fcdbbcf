#include "adapters/container/container_backend.hpp"

#include "adapters/container/docker_api.hpp"
#include "adapters/container/layout.hpp"
#include "adapters/process/python_setup.hpp"
#include "engine/job_state.hpp"
#include "engine/json_fields.hpp"
#include "engine/log_stream_impl.hpp"
#include "engine/messages.hpp"
#include "engine/names.hpp"
#include "engine/trainer_checks.hpp"
#include "engine/wake.hpp"

#include <tjob/error.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>

#include <cerrno>
#include <cstring>
#include <sys/stat.h>

namespace tjob::container {

namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using steady = std::chrono::steady_clock;
using detail::obj_of;
using detail::quote;
using detail::str_of;
using detail::who;

namespace {

[[noreturn]] void fail(errc e, std::string message, std::string diagnostics = {}) {
  throw error(e, std::move(message), std::move(diagnostics));
}

// The same error (code and diagnostics) with `prefix` saying where it happened.
[[noreturn]] void rethrow_as(const error& e, const std::string& prefix) {
  throw error(e.code(), prefix + e.what(), e.diagnostics());
}

// Labels as the list and inspect answers hold them ("Labels"; libpod "labels").
std::map<std::string, std::string> labels_of(const json::object& o) {
  std::map<std::string, std::string> out;
  const json::object* l = obj_of(o, "Labels");
  if (!l) l = obj_of(o, "labels");
  if (!l)
    if (auto* cfg = obj_of(o, "Config")) l = obj_of(*cfg, "Labels");
  if (l)
    for (const auto& [k, v] : *l)
      if (v.is_string()) out[std::string(k)] = std::string(v.as_string());
  return out;
}

// The rank of a step named node-<rank>; -1 for others.
int rank_of(const std::string& step) {
  if (!step.starts_with("node-")) return -1;
  try {
    return std::stoi(step.substr(5));
  } catch (...) {
    return -1;
  }
}

// The fixed entry point of a Python node: finds an interpreter in the image
// and runs entry.py (our own code; everything the user gave is data in
// plan.json).
constexpr const char* entry_sh =
    "for py in python3 python; do\n"
    "  if command -v \"$py\" >/dev/null 2>&1; then exec \"$py\" /workspace/.tjob/entry.py \"$1\"; fi\n"
    "done\n"
    "echo 'tjob: the image has neither python3 nor python on PATH; use an image with Python' >&2\n"
    "exit 127\n";

// Installs the packages (pip --user, then system-wide, as Kubeflow), then
// runs the code under torchrun when the runtime is torch and the image has
// torch, else under python. Argument vectors only; no shell.
constexpr const char* entry_py = R"PY(import importlib.util, json, os, subprocess, sys
plan = json.load(open(sys.argv[1], encoding="utf-8"))
packages = plan.get("packages") or []
if packages:
    urls = plan["index_urls"]
    base = [sys.executable, "-m", "pip", "install", "--no-warn-script-location", "--index-url", urls[0]]
    for url in urls[1:]:
        base += ["--extra-index-url", url]
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_BREAK_SYSTEM_PACKAGES="1")
    where = None
    with open("/tmp/pip_install.log", "wb") as log:
        if subprocess.call(base + ["--user"] + packages, stdout=log, stderr=subprocess.STDOUT, env=env) == 0:
            where = "user"
        elif subprocess.call(base + packages, stdout=log, stderr=subprocess.STDOUT, env=env) == 0:
            where = "system-wide"
    if where is None:
        print("ERROR: Failed to install Python packages: " + " ".join(packages), file=sys.stderr)
        sys.stderr.write(open("/tmp/pip_install.log", encoding="utf-8", errors="replace").read())
        sys.exit(1)
    print("Successfully installed Python packages (%s): %s" % (where, " ".join(packages)), flush=True)
    if where == "user":
        import site
        sys.path.insert(0, site.getusersitepackages())
script = plan["script"]
if plan.get("torch") and importlib.util.find_spec("torch") is not None:
    argv = [sys.executable, "-m", "torch.distributed.run"] + plan["torchrun_args"] + [script]
else:
    argv = [sys.executable, script]
argv += plan.get("args") or []
sys.stdout.flush()
os.execv(argv[0], argv)
)PY";

void write_file(const fs::path& p, std::string_view text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out) fail(errc::invalid_argument, "cannot write " + p.string());
}

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(clock::now().time_since_epoch()).count();
}

// One container of a job, as the daemon reports it.
struct seen {
  std::string id, name, step, state;
  std::map<std::string, std::string> labels;
  std::int64_t created = 0;
  std::optional<int> exit_code;
  bool oom = false;
  bool tty = false;  // its log is a raw stream, not frames
  std::string error;
  std::int64_t pid = 0;
};

}  // namespace

// ---------------------------------------------------------------------------

struct backend::impl : std::enable_shared_from_this<backend::impl> {
  impl(context c, container_backend_config k) : ctx(std::move(c)), cfg(std::move(k)), loop_done(ctx.ex), backoff_wake(ctx.ex) {}

  context ctx;
  container_backend_config cfg;
  std::unique_ptr<docker_api> api;
  // the /events stream: one per backend, waking every waiter
  std::optional<http::body_stream> events;
  bool events_running = false, events_connected = false;
  std::map<std::string, std::uint64_t, std::less<>> generation;  // per job, bumped by its events
  std::uint64_t epoch = 0;  // bumped when the stream connects or breaks
  detail::wake_list waiters;
  detail::wake_signal loop_done, backoff_wake;
  bool stopping = false;
  std::map<std::string, json::object> exited;  // inspect answers of exited containers (final)

  // --- the daemon -----------------------------------------------------------

  asio::awaitable<docker_api*> daemon() {
    if (api) co_return api.get();
    struct candidate {
      std::string url, origin;
    };
    std::vector<candidate> tried;
    bool want_docker = cfg.container_runtime != "podman";
    bool want_podman = cfg.container_runtime != "docker";
    if (!cfg.container_runtime.empty() && cfg.container_runtime != "docker" &&
        cfg.container_runtime != "podman")
      fail(errc::invalid_argument, "container_runtime " + quote(cfg.container_runtime) +
                                       " is neither docker nor podman; give one of them, or "
                                       "leave it empty to use whichever answers");
    if (!cfg.container_host.empty()) {
      tried.push_back({cfg.container_host, "container_host"});
    } else {
      if (const char* h = std::getenv("DOCKER_HOST"); h && *h && want_docker)
        tried.push_back({h, "DOCKER_HOST"});
      if (const char* h = std::getenv("CONTAINER_HOST"); h && *h && want_podman)
        tried.push_back({h, "CONTAINER_HOST"});
      if (want_docker) tried.push_back({"unix:///var/run/docker.sock", "docker"});
      if (want_podman) {
        tried.push_back({"unix:///run/podman/podman.sock", "podman"});
        if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x)
          tried.push_back({std::string("unix://") + x + "/podman/podman.sock", "podman"});
      }
    }
    std::string failures;
    for (const auto& c : tried) {
      std::string why;
      try {
        auto ep = http::parse_endpoint(c.url);
        if (ep.type == http::endpoint::kind::unix_socket) {
          struct stat st{};
          if (::stat(ep.path.c_str(), &st) != 0) {
            why = "no such socket";
          } else if (!S_ISSOCK(st.st_mode)) {
            why = "not a socket";
          }
        }
        if (why.empty()) {
          auto a = std::make_unique<docker_api>(ctx.ex, ep);
          a->timeout = cfg.request_timeout;
          co_await a->connect(std::min(cfg.request_timeout, std::chrono::milliseconds(5'000)));
          if (!api) {
            ctx.log->debug("using {}", a->describe());
            api = std::move(a);
          }
          co_return api.get();
        }
      } catch (const error& e) {
        why = e.what();
      }
      failures += "\n  " + c.url + " (" + c.origin + "): " + why;
    }
    std::string which = cfg.container_runtime.empty() ? "Docker or Podman" : cfg.container_runtime;
    fail(errc::backend_unavailable,
         "Could not connect to " + which + " (tried:" + failures +
             ")\nTo name a socket: --container-host unix:///path/to/socket (container_host in "
             "the config), or set DOCKER_HOST or CONTAINER_HOST; start one with `dockerd` or "
             "`podman system service`.\nOr use the local backend (--backend local) for "
             "non-containerized execution.");
  }

  // --- reading jobs ---------------------------------------------------------

  // The containers of one job (or of every job), oldest first.
  asio::awaitable<std::vector<seen>> containers(const std::string& job) {
    auto& d = *co_await daemon();
    // (a named vector: g++ 12 miscompiles an initializer list inside co_await)
    std::vector<std::string> filter{job.empty() ? std::string(label_job)
                                                : std::string(label_job) + "=" + job};
    auto list = co_await d.container_list(filter);
    std::vector<seen> out;
    for (const auto& v : list) {
      if (!v.is_object()) continue;
      const auto& o = v.as_object();
      seen c;
      c.id = str_of(o, "Id");
      c.labels = labels_of(o);
      c.step = c.labels[label_step];
      if (auto* names = o.if_contains("Names"); names && names->is_array() && !names->as_array().empty() &&
                                               names->as_array()[0].is_string()) {
        c.name = std::string(names->as_array()[0].as_string());
        if (c.name.starts_with("/")) c.name.erase(0, 1);
      }
      c.state = str_of(o, "State");
      if (auto* cr = o.if_contains("Created"); cr && cr->is_number()) c.created = cr->to_number<std::int64_t>();
      if (c.id.empty() || c.labels[label_job].empty()) continue;
      out.push_back(std::move(c));
    }
    // exit codes (and pids) are only in inspect; an exited container's answer is final
    for (auto& c : out) {
      const json::object* ins = nullptr;
      std::optional<json::object> fresh;
      if (auto it = exited.find(c.id); it != exited.end()) {
        ins = &it->second;
      } else {
        fresh = co_await d.container_inspect(c.id);
        if (!fresh) {
          c.state = "removing";
          c.error = "removed while being read";
          continue;
        }
        ins = &*fresh;
      }
      if (auto* config = obj_of(*ins, "Config"))
        if (auto* t = config->if_contains("Tty"); t && t->is_bool()) c.tty = t->as_bool();
      if (auto* st = obj_of(*ins, "State")) {
        c.state = str_of(*st, "Status");
        if (auto* p = st->if_contains("Pid"); p && p->is_number()) c.pid = p->to_number<std::int64_t>();
        if (auto* oom = st->if_contains("OOMKilled"); oom && oom->is_bool()) c.oom = oom->as_bool();
        c.error = str_of(*st, "Error");
        if (c.state == "exited" || c.state == "dead" || c.state == "stopped")
          if (auto* x = st->if_contains("ExitCode"); x && x->is_number())
            c.exit_code = static_cast<int>(x->to_number<std::int64_t>());
      }
      if (fresh && (c.state == "exited" || c.state == "dead")) exited[c.id] = std::move(*fresh);
    }
    std::stable_sort(out.begin(), out.end(), [](const seen& a, const seen& b) {
      return a.created < b.created;
    });
    co_return out;
  }

  bool cancelled(const std::string& job) const {
    std::error_code ec;
    return fs::exists(workdir(job) / ".tjob" / "cancelled", ec);
  }

  fs::path workdir(const std::string& job) const { return ctx.home / "containers" / job; }

  train_job to_job(const std::string& name, std::vector<seen> cs) {
    train_job j;
    j.name = name;
    std::sort(cs.begin(), cs.end(), [](const seen& a, const seen& b) {
      int ra = rank_of(a.step), rb = rank_of(b.step);
      if ((ra < 0) != (rb < 0)) return ra >= 0;
      if (ra != rb) return ra < rb;
      return a.step < b.step;
    });
    std::vector<job_status> statuses;
    std::int64_t created = 0;
    bool was_cancelled = cancelled(name);
    int nodes = 0;
    for (const auto& c : cs) {
      step s;
      s.name = c.step.empty() ? c.name : c.step;
      s.status = status_of(c.state, c.exit_code);
      s.exit_code = c.exit_code;
      if (s.status == job_status::running) s.pid = c.pid;
      if (s.status == job_status::failed) {
        if (was_cancelled) s.reason = "cancelled";
        else if (c.oom) s.reason = "OOMKilled";
        else if (c.exit_code) s.reason = "exit code " + std::to_string(*c.exit_code);
        else s.reason = c.state + (c.error.empty() ? "" : ": " + c.error);
      }
      statuses.push_back(s.status);
      if (rank_of(s.name) >= 0) ++nodes;
      if (j.runtime.empty()) j.runtime = c.labels.count(label_runtime) ? c.labels.at(label_runtime) : "";
      if (created == 0 || (c.created > 0 && c.created < created)) created = c.created;
      j.steps.push_back(std::move(s));
    }
    j.num_nodes = std::max(nodes, 1);
    j.status = detail::aggregate(statuses);
    for (const auto& s : j.steps)
      if (s.status == job_status::failed && j.reason.empty()) j.reason = s.reason;
    j.creation_timestamp = clock::time_point(std::chrono::seconds(created));
    return j;
  }


  [[noreturn]] void not_found(const std::string& name) {
    fail(errc::job_not_found, "No TrainJob with name " + quote(name) + " on " + api->describe() +
                                  "; `tjob list --backend container` shows the jobs there");
  }

  asio::awaitable<train_job> get(const std::string& name) {
    auto cs = co_await containers(name);
    if (cs.empty()) not_found(name);
    co_return to_job(name, std::move(cs));
  }

  // --- events ---------------------------------------------------------------

  void ensure_events() {
    if (events_running || stopping) return;
    events_running = true;
    asio::co_spawn(ctx.ex, events_loop(shared_from_this()), asio::detached);
  }

  static asio::awaitable<void> events_loop(std::shared_ptr<impl> self) {
    auto& b = *self;
    auto backoff = std::chrono::milliseconds(100);
    while (!b.stopping) {
      try {
        auto& d = *co_await b.daemon();
        // Podman's events match no bare-key label filter; on_event picks
        // the jobs' containers by their label instead.
        json::object filters{{"type", json::array{"container"}}};
        if (d.info().kind == daemon_kind::docker) filters["label"] = json::array{label_job};
        b.events.emplace(co_await d.events(filters, 0, 0));
        b.events_connected = true;
        ++b.epoch;
        b.waiters.notify_all();
        backoff = std::chrono::milliseconds(100);
        http::line_splitter lines(1 << 20, "the event stream of " + d.describe());
        std::vector<std::string> got;
        while (auto piece = co_await b.events->read_some()) {
          got.clear();
          lines.feed(*piece, got);
          for (const auto& line : got) b.on_event(line);
        }
      } catch (const error& e) {
        if (!b.stopping) b.ctx.log->debug("container events: {}", e.what());
      }
      b.events.reset();
      b.events_connected = false;
      ++b.epoch;
      b.waiters.notify_all();
      if (b.stopping) break;
      co_await b.backoff_wake.wait_until(steady::now() + backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(5'000));
    }
    b.events_running = false;
    b.loop_done.notify();
  }

  void on_event(const std::string& line) {
    auto job = job_of_event(line);
    if (job.empty()) return;
    ++generation[job];
    waiters.notify_all();
  }

  std::uint64_t mark(const std::string& job) {
    auto it = generation.find(job);
    return epoch + (it == generation.end() ? 0 : it->second);
  }

  // --- messages -------------------------------------------------------------

  asio::awaitable<std::string> failure_message(const train_job& job) {
    std::map<std::string, std::string> last_logs;
    for (const auto& s : job.steps) {
      if (s.status != job_status::failed) continue;
      auto& text = last_logs[s.name];
      try {
        auto body = co_await api->container_logs(container_of(job.name, s.name), false,
                                                 ctx.failure_log_lines);
        frame_decoder dec;
        while (auto piece = co_await body.read_some()) {
          dec.feed(*piece, [&](int, std::string_view p) {
            if (text.size() < (1u << 20)) text.append(p);
          });
        }
      } catch (const error& e) {
        text = "(" + s.name + ": cannot read its log: " + e.what() + ")";
      }
    }
    co_return detail::failure_message(job, last_logs);
  }

  static std::string container_of(const std::string& job, const std::string& step) {
    int r = rank_of(step);
    return r >= 0 ? node_name(job, r) : job + "-" + step;
  }

  // --- train ----------------------------------------------------------------

  asio::awaitable<void> ensure_image(docker_api& d, const std::string& who, const std::string& image) {
    try {
      bool have = cfg.pull == pull_policy::always ? false : (co_await d.image_inspect(image)).has_value();
      if (have) co_return;
      if (cfg.pull == pull_policy::never)
        fail(errc::invalid_argument,
             "Image " + quote(image) + " not found locally and pull policy is Never; import or "
             "load it first (docker load, podman load), or use pull policy IfNotPresent");
      ctx.log->info("{}: pulling image {} on {}", who, image, d.describe());
      co_await d.image_pull(image, [&](const std::string& line) {
        ctx.log->info("{}: pull {}: {}", who, image, line);
      });
    } catch (const error& e) {
      fail(e.code().value() == static_cast<int>(errc::invalid_argument) &&
                   e.code().category() == category()
               ? errc::invalid_argument
               : errc::backend_error,
           who + ": Failed to ensure image " + quote(image) + ": " + e.what(), e.diagnostics());
    }
  }

  asio::awaitable<std::string> train(train_request r) {
    auto catalog = ctx.runtimes();
    const runtime* rt = &detail::check_request(r, catalog);
    const auto name = r.name;
    auto me = who(name);
    for (const auto& v : cfg.volumes) check_volume(v);

    // what each node runs
    std::vector<std::string> cmd;
    std::map<std::string, std::string> env;
    std::string image = cfg.image, working_dir = workspace;
    std::vector<std::pair<std::string, std::string>> files;  // under .tjob/
    json::object plan;
    std::int64_t memory = 0, nano_cpus = 0;
    int gpus = 0, procs = 1;
    if (auto* ct = std::get_if<command_trainer>(&r.job_trainer)) {
      detail::check_command(me, *ct);
      if (!ct->working_dir.empty()) {
        if (ct->working_dir.front() != '/')
          fail(errc::invalid_argument, me + ": working_dir " + quote(ct->working_dir) +
                                           " must be an absolute path inside the container");
        working_dir = ct->working_dir;
      }
      cmd = ct->command;
      env = ct->env;
      if (!ct->image.empty()) image = ct->image;
    } else {
      auto& pt = std::get<python_trainer>(r.job_trainer);
      auto source = detail::check_python_code(me, pt);
      if (!pt.working_dir.empty())
        fail(errc::invalid_argument, me + ": working_dir is a local-backend field; a container "
                                          "job runs in /workspace (its work dir, mounted from the "
                                          "host); leave it empty");
      if (source.empty()) source = detail::read_source(me, pt.source_file);
      files.emplace_back("train.py", pt.function.empty()
                                         ? source
                                         : process::training_file(source, pt.function,
                                                                  !pt.function_args.empty()));
      if (!pt.function_args.empty()) files.emplace_back("train.kwargs.json", pt.function_args);
      files.emplace_back("entry.py", entry_py);
      for (const auto& p : pt.packages_to_install)
        if (!process::requirement_name(p))
          fail(errc::invalid_argument, me + ": package " + quote(p) + " is not a requirement "
                                            "(a name, optionally with extras and a version)");
      json::array pk, urls, args;
      for (const auto& p : pt.packages_to_install) pk.emplace_back(p);
      for (const auto& u : process::index_urls(pt.pip_index_urls)) urls.emplace_back(u);
      for (const auto& a : pt.args) args.emplace_back(a);
      plan = {{"packages", std::move(pk)}, {"index_urls", std::move(urls)},
              {"script", "/workspace/.tjob/train.py"}, {"args", std::move(args)},
              {"torch", rt->trainer.framework == "torch"}};
      env = pt.env;
      env.emplace("PYTHONUNBUFFERED", "1");
      // the node's plan file is the last argument
      cmd = pt.python.empty() ? std::vector<std::string>{"/bin/sh", "-c", entry_sh, "tjob-entry"}
                              : std::vector<std::string>{pt.python, "/workspace/.tjob/entry.py"};
      if (!pt.image.empty()) image = pt.image;
      procs = pt.procs_per_node;
      if (pt.memory_limit > 0) memory = static_cast<std::int64_t>(pt.memory_limit);
      if (pt.cpu_limit) nano_cpus = std::int64_t(procs) * 1'000'000'000;
      if (pt.gpus < 0) fail(errc::invalid_argument, me + ": gpus must be 0 or more");
      gpus = pt.gpus;
      if (gpus > 0) procs = gpus;  // Kubeflow: one process per GPU
    }
    if (cfg.image.empty() && image.empty()) image = rt->trainer.image;
    if (image.empty())
      fail(errc::invalid_argument, me + ": no image: runtime " + quote(rt->name) +
                                       " names none; give one (--image, or image in the trainer)");
    if (r.num_nodes > 1 && cfg.network == container_network::none)
      fail(errc::invalid_argument, me + ": " + std::to_string(r.num_nodes) +
                                       " nodes cannot meet without a network; use network job "
                                       "or host (--network)");

    auto& d = *co_await daemon();
    if (!(co_await containers(name)).empty())
      fail(errc::duplicate_name, me + " exists already on " + d.describe() +
                                     "; delete it (tjob delete) or choose another name");
    co_await ensure_image(d, me, image);

    auto dir = workdir(name);
    std::error_code ec;
    // The job's work dir is the user's own (0700), as everything in $TJOB_HOME.
    for (const auto& d : {ctx.home / "containers", dir, dir / ".tjob"})
      if (::mkdir(d.c_str(), 0700) != 0 && errno != EEXIST)
        fail(errc::invalid_argument, me + ": cannot create its work dir " + d.string() + ": " + std::strerror(errno));

    std::vector<std::string> made;  // container ids, for cleanup
    std::string network_id;
    bool made_network = false;
    auto net = network_name(name);
    std::exception_ptr failed;
    try {
      for (const auto& [file, text] : files) write_file(dir / ".tjob" / file, text);
      fs::remove(dir / ".tjob" / "cancelled", ec);
      std::map<std::string, std::string> net_labels{{label_job, name},
                                                    {label_runtime, rt->name},
                                                    {label_workdir, dir.string()}};
      // The job network exists only where the nodes use it: with host or
      // none networking a network would carry nothing and still cost a bridge,
      // an address range from the daemon's pool and about 0.1 s per job.
      if (cfg.network == container_network::job) {
        if (auto existing = co_await d.network_inspect(net);
            existing && labels_of(*existing)[label_job] == name) {
          network_id = str_of(*existing, "Id");  // left by an earlier try, as Kubeflow re-uses it
        } else {
          network_id = co_await d.network_create(net, net_labels, false);
          made_network = true;
        }
      }
      std::string master = "127.0.0.1";
      int port = cfg.network == container_network::host ? detail::free_port() : 29500;
      if (cfg.network == container_network::job) master = node_name(name, 0);
      for (int rank = 0; rank < r.num_nodes; ++rank) {
        node_spec n;
        n.job = name;
        n.step = "node-" + std::to_string(rank);
        n.container_name = node_name(name, rank);
        n.image = image;
        n.network_id = network_id;
        n.runtime = rt->name;
        n.workdir = dir.string();
        n.cmd = cmd;
        n.env = env;
        n.working_dir = working_dir;
        n.network = cfg.network;
        n.network_name = net;
        n.volumes = cfg.volumes;
        n.memory = memory;
        n.nano_cpus = nano_cpus;
        n.gpus = gpus;
        if (!plan.empty()) {
          json::array targs{"--nproc_per_node=" + std::to_string(procs),
                            "--nnodes=" + std::to_string(r.num_nodes),
                            "--node_rank=" + std::to_string(rank), "--rdzv_backend=static",
                            "--rdzv_endpoint=" + master + ":" + std::to_string(port),
                            "--master_addr=" + master, "--master_port=" + std::to_string(port),
                            "--monitor_interval=0.2", "--redirects", "9:1", "--tee", "9:1"};
          plan["torchrun_args"] = std::move(targs);
          auto own = "plan-" + std::to_string(rank) + ".json";
          write_file(dir / ".tjob" / own, json::serialize(plan));
          n.cmd.push_back(std::string(workspace) + "/.tjob/" + own);
        }
        std::string id;
        try {
          id = co_await d.container_create(n.container_name, create_body(n));
          made.push_back(id);
          co_await d.container_start(id);
        } catch (const error& e) {
          rethrow_as(e, me + ": node-" + std::to_string(rank) + " (container " +
                            quote(n.container_name) + "): ");
        }
        if (rank == 0 && r.num_nodes > 1 && cfg.network == container_network::job &&
            d.info().kind == daemon_kind::podman) {
          // Podman's compat networks may have no DNS: reach node-0 by its address.
          if (auto ins = co_await d.container_inspect(id))
            if (auto* ns = obj_of(*ins, "NetworkSettings"))
              if (auto* nets = obj_of(*ns, "Networks"))
                if (auto* mine = obj_of(*nets, net)) {
                  auto ip = str_of(*mine, "IPAddress");
                  if (!ip.empty()) master = ip;
                }
        }
      }
    } catch (...) {
      failed = std::current_exception();
    }
    if (failed) {
      // nothing of a failed train stays behind
      for (const auto& id : made) {
        try {
          co_await d.container_remove(id);
        } catch (const std::exception& e) {
          ctx.log->warn("{}: cleanup: {}", me, e.what());
        }
      }
      if (made_network) {
        try {
          co_await d.network_remove(network_id);
        } catch (const std::exception& e) {
          ctx.log->warn("{}: cleanup: {}", me, e.what());
        }
      }
      fs::remove_all(dir, ec);
      std::rethrow_exception(failed);
    }
    co_return name;
  }

  // --- logs -----------------------------------------------------------------

  struct container_log final : detail::piecewise_log {
    std::shared_ptr<backend::impl> b;
    std::string what, container;
    bool follow;
    std::optional<std::size_t> tail;
    std::optional<http::body_stream> body;
    frame_decoder dec;

    container_log(std::shared_ptr<backend::impl> bk, std::string w, std::string c, bool f,
                  std::optional<std::size_t> t, bool tty)
        : b(std::move(bk)), what(std::move(w)), container(std::move(c)), follow(f), tail(t),
          dec(tty) {}

    asio::awaitable<bool> read_piece(std::string& out) override {
      try {
        if (!body) body.emplace(co_await b->api->container_logs(container, follow, tail));
        auto piece = co_await body->read_some();
        if (!piece) {
          if (!dec.at_boundary()) fail(errc::protocol_error, "the stream ended inside a frame");
          co_return false;
        }
        dec.feed(*piece, [&](int, std::string_view p) { out.append(p); });
        co_return true;
      } catch (const error& e) {
        rethrow_as(e, what + " (container " + quote(container) + "): ");
      }
    }
  };

  asio::awaitable<log_stream> logs(const std::string& name, const log_options& o) {
    auto cs = co_await containers(name);
    if (cs.empty()) not_found(name);
    std::string known;
    for (const auto& c : cs) {
      if (c.step == o.step) {
        co_return log_stream(std::make_unique<container_log>(
            shared_from_this(), "the log of TrainJob " + quote(name) + " step " + quote(o.step),
            c.id, o.follow, o.tail, c.tty));
      }
      known += (known.empty() ? "" : ", ") + c.step;
    }
    fail(errc::step_not_found, "TrainJob " + quote(name) + " has no step " + quote(o.step) +
                                   "; its steps are: " + known);
  }

  // --- wait -----------------------------------------------------------------

  asio::awaitable<train_job> wait(const std::string& name, const std::set<job_status>& want,
                                  std::chrono::milliseconds timeout) {
    auto deadline = steady::now() + timeout;
    co_await daemon();
    ensure_events();
    detail::wake_signal sig(ctx.ex);
    detail::wake_registration reg(waiters, &sig);
    // the stream first, so no change can fall between a read and the wait
    auto settle = std::min(deadline, steady::now() + std::chrono::seconds(5));
    while (!events_connected && events_running && steady::now() < settle)
      if (!co_await sig.wait_until(settle)) break;
    std::optional<steady::time_point> unreachable_since;
    for (;;) {
      if (stopping) fail(errc::shut_down, "the engine is shutting down");
      auto m = mark(name);
      std::optional<train_job> job;
      try {
        job = co_await get(name);
        unreachable_since.reset();
      } catch (const error& e) {
        if (e.code() != make_error_code(errc::backend_unavailable)) throw;
        // the daemon went away: retry while it restarts, for a while
        if (!unreachable_since) unreachable_since = steady::now();
        if (steady::now() - *unreachable_since > std::chrono::seconds(30)) throw;
        ctx.log->warn("{}: waiting: {}", who(name), e.what());
      }
      if (job) {
        if (want.count(job->status)) co_return *job;
        if (job->status == job_status::failed)
          fail(errc::job_failed, co_await failure_message(*job));
        if (is_terminal(job->status))
          fail(errc::unreachable_status, "TrainJob " + name + " is " +
                                             std::string(tjob::to_string(job->status)) +
                                             " and cannot reach the status asked for");
      }
      while (mark(name) == m) {
        // Without the event stream (the daemon restarting, or refusing /events)
        // status is re-read each second until the stream is back.
        auto until = job && events_connected
                         ? deadline
                         : std::min(deadline, steady::now() + std::chrono::seconds(1));
        if (!co_await sig.wait_until(until)) {
          if (steady::now() >= deadline) {
            std::string set;
            for (auto s : want) set += (set.empty() ? "" : ", ") + std::string(tjob::to_string(s));
            fail(errc::timeout, "Timeout waiting for TrainJob " + name + " to reach status: {" + set + "}");
          }
          break;
        }
      }
    }
  }

  // --- cancel / delete ------------------------------------------------------

  asio::awaitable<void> stop_all(const std::vector<seen>& cs) {
    int grace = static_cast<int>((ctx.grace_period.count() + 999) / 1000);
    for (const auto& c : cs)
      if (c.state == "running") co_await api->container_kill(c.id, "SIGTERM");
    for (const auto& c : cs)
      if (c.state == "running" || c.state == "paused" || c.state == "restarting")
        co_await api->container_stop(c.id, grace);
  }

  asio::awaitable<void> cancel(const std::string& name) {
    auto cs = co_await containers(name);
    if (cs.empty()) not_found(name);
    auto j = to_job(name, cs);
    if (is_terminal(j.status)) co_return;
    std::error_code ec;
    fs::create_directories(workdir(name) / ".tjob", ec);
    write_file(workdir(name) / ".tjob" / "cancelled", "");
    co_await stop_all(cs);
  }

  asio::awaitable<void> remove(const std::string& name) {
    auto& d = *co_await daemon();
    auto cs = co_await containers(name);
    auto net = co_await d.network_inspect(network_name(name));
    bool ours = net && labels_of(*net)[label_job] == name;
    if (cs.empty() && !ours) {
      // Nothing of it in the daemon (its containers removed behind our back):
      // the work dir this engine made for it is all that is left.
      std::error_code ec;
      if (cfg.auto_remove && fs::exists(workdir(name) / ".tjob", ec)) fs::remove_all(workdir(name), ec);
      not_found(name);
    }
    co_await stop_all(cs);
    std::set<std::string> networks;
    for (const auto& c : cs) {
      co_await d.container_remove(c.id);
      exited.erase(c.id);
      if (auto it = c.labels.find(label_network); it != c.labels.end() && !it->second.empty())
        networks.insert(it->second);
    }
    if (ours) networks.insert(str_of(*net, "Id"));
    for (const auto& n : networks) co_await d.network_remove(n);
    if (cfg.auto_remove) {
      // only the work dir this engine made; a label is not trusted with rm -rf
      std::error_code ec;
      fs::remove_all(workdir(name), ec);
      if (ec) ctx.log->warn("{}: cannot remove its work dir: {}", who(name), ec.message());
    }
  }

  // --- events ---------------------------------------------------------------

  asio::awaitable<std::vector<event>> job_events(const std::string& name) {
    auto& d = *co_await daemon();
    auto cs = co_await containers(name);
    if (cs.empty()) not_found(name);
    std::int64_t since = cs.front().created - 1;
    for (const auto& c : cs) since = std::min(since, c.created - 1);
    json::object filters{{"label", json::array{std::string(label_job) + "=" + name}}};
    auto body = co_await d.events(filters, std::max<std::int64_t>(since, 1), unix_now() + 1);
    http::line_splitter lines(1 << 20, "the event stream of " + d.describe());
    std::vector<std::string> got;
    std::vector<event> out;
    auto handle = [&](const std::string& line) {
      if (auto e = event_of_line(line, static_cast<std::int64_t>(out.size()) + 1)) out.push_back(std::move(*e));
    };
    while (auto piece = co_await body.read_some()) {
      got.clear();
      lines.feed(*piece, got);
      for (const auto& l : got) handle(l);
    }
    if (auto rest = lines.finish()) handle(*rest);
    co_return out;
  }

  asio::awaitable<void> shutdown() {
    stopping = true;
    if (events) events->close();
    backoff_wake.notify();
    waiters.notify_all();
    while (events_running) co_await loop_done.wait_until(steady::time_point::max());
  }
};

// ---------------------------------------------------------------------------

backend::backend(context ctx, container_backend_config cfg)
    : impl_(std::make_shared<impl>(std::move(ctx), std::move(cfg))) {}
backend::~backend() = default;

asio::awaitable<std::string> backend::train(train_request request) {
  co_return co_await impl_->train(std::move(request));
}
asio::awaitable<train_job> backend::get_job(std::string name) {
  co_return co_await impl_->get(name);
}
asio::awaitable<std::vector<train_job>> backend::list_jobs(std::optional<std::string> runtime) {
  auto all = co_await impl_->containers({});
  std::map<std::string, std::vector<seen>> by_job;
  std::vector<std::string> order;
  for (auto& c : all) {
    auto job = c.labels[label_job];
    if (!by_job.count(job)) order.push_back(job);
    by_job[job].push_back(std::move(c));
  }
  std::vector<train_job> out;
  for (const auto& name : order) {
    auto j = impl_->to_job(name, std::move(by_job[name]));
    if (!runtime || j.runtime == *runtime) out.push_back(std::move(j));
  }
  std::stable_sort(out.begin(), out.end(), [](const train_job& a, const train_job& b) {
    return a.creation_timestamp < b.creation_timestamp;
  });
  co_return out;
}
asio::awaitable<log_stream> backend::get_job_logs(std::string name, log_options options) {
  co_return co_await impl_->logs(name, options);
}
asio::awaitable<train_job> backend::wait_for_job_status(std::string name,
                                                        std::set<job_status> statuses,
                                                        std::chrono::milliseconds timeout) {
  co_return co_await impl_->wait(name, statuses, timeout);
}
asio::awaitable<void> backend::cancel_job(std::string name) { co_await impl_->cancel(name); }
asio::awaitable<void> backend::delete_job(std::string name) { co_await impl_->remove(name); }
asio::awaitable<std::vector<event>> backend::get_job_events(std::string name) {
  co_return co_await impl_->job_events(name);
}
asio::awaitable<void> backend::shutdown() { co_await impl_->shutdown(); }

}  // namespace tjob::container
