#include "adapters/kubernetes/kubeconfig.hpp"

#include "core/yaml_guard.hpp"

#include <tjob/error.hpp>

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

namespace tjob::kube {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void bad(const std::string& message) { throw error(errc::invalid_argument, message); }

std::string sq(const std::string& s) { return "'" + s + "'"; }

std::optional<std::string> read_text(const fs::path& p, std::size_t limit = 4 << 20) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::string out;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    out.append(buf, static_cast<std::size_t>(in.gcount()));
    if (out.size() > limit) return std::nullopt;
  }
  return out;
}

// One named entry of a kubeconfig list (a cluster, user or context) and the
// directory its relative paths start from.
struct entry {
  YAML::Node body;
  fs::path dir;
  fs::path file;
};

struct merged {
  std::map<std::string, entry> clusters, users, contexts;
  std::string current_context;
  std::vector<fs::path> files;
  std::string describe() const {
    std::string s;
    for (const auto& f : files) s += (s.empty() ? "" : ":") + f.string();
    return "kubeconfig " + s;
  }
};

std::string scalar(const YAML::Node& n, const char* key) {
  if (!n || !n.IsMap()) return {};
  auto v = n[key];
  if (!v || !v.IsScalar()) return {};
  return v.as<std::string>();
}

bool truthy(const YAML::Node& n, const char* key) {
  auto s = scalar(n, key);
  return s == "true" || s == "True" || s == "TRUE" || s == "yes";
}

// Merges one file: the first file to name an entry keeps it, as kubectl does.
void merge_file(merged& m, const fs::path& file, bool required) {
  auto text = read_text(file);
  if (!text) {
    if (!required) return;
    std::error_code ec;
    if (!fs::exists(file, ec))
      bad("kubeconfig " + file.string() +
          " does not exist; give the right file (--kubeconfig) "
          "or set KUBECONFIG");
    bad("cannot read kubeconfig " + file.string() + " (unreadable or over 4 MiB)");
  }
  if (auto problem = detail::yaml_mapping_problem(*text))
    bad("kubeconfig " + file.string() + " is not a kubeconfig: " + *problem +
        " (with clusters, users and contexts)");
  YAML::Node root;
  try {
    root = YAML::Load(*text);
  } catch (const YAML::Exception& e) {
    bad("kubeconfig " + file.string() + " is not YAML: line " + std::to_string(e.mark.line + 1) +
        ", column " + std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  if (root.IsNull()) {
    m.files.push_back(file);
    return;
  }
  if (!root.IsMap())
    bad("kubeconfig " + file.string() +
        " is not a kubeconfig (its top level is not a mapping "
        "with clusters, users and contexts)");
  m.files.push_back(file);
  auto dir = fs::absolute(file).parent_path();
  auto take = [&](const char* list, const char* field, std::map<std::string, entry>& into) {
    auto l = root[list];
    if (!l) return;
    if (!l.IsSequence()) bad("kubeconfig " + file.string() + ": " + list + " is not a list");
    for (std::size_t i = 0; i < l.size(); ++i) {
      auto item = l[i];
      auto name = scalar(item, "name");
      if (name.empty())
        bad("kubeconfig " + file.string() + ": " + list + "[" + std::to_string(i) + "] has no name");
      auto body = item[field];
      if (body && !body.IsMap())
        bad("kubeconfig " + file.string() + ": " + list + " " + sq(name) + ": " + field +
            " is not a mapping");
      into.emplace(name, entry{body ? body : YAML::Node(YAML::NodeType::Map), dir, file});
    }
  };
  try {
    take("clusters", "cluster", m.clusters);
    take("users", "user", m.users);
    take("contexts", "context", m.contexts);
    if (m.current_context.empty()) m.current_context = scalar(root, "current-context");
  } catch (const YAML::Exception& e) {
    bad("kubeconfig " + file.string() + " is not a kubeconfig: line " + std::to_string(e.mark.line + 1) +
        ": " + e.msg);
  }
}

fs::path resolve(const entry& e, const std::string& p) {
  fs::path path(p);
  return path.is_absolute() ? path : e.dir / path;
}

// The bytes of `<key>-data` (base64) or of the file `<key>`; empty when neither.
std::string file_or_data(const entry& e, const std::string& key, const std::string& what,
                         const std::string& where) {
  auto data = scalar(e.body, (key + "-data").c_str());
  if (!data.empty()) {
    auto dec = base64_decode(data);
    if (!dec) bad(where + ": " + key + "-data is not base64; give the PEM text base64-encoded");
    return *dec;
  }
  auto file = scalar(e.body, key.c_str());
  if (file.empty()) return {};
  auto path = resolve(e, file);
  auto text = read_text(path);
  if (!text) bad(where + ": cannot read the " + what + " file " + path.string() + " (" + key + ")");
  return *text;
}

// The credentials of the context's user: a token (or tokenFile), or a
// client certificate with its key. Plugins and basic auth are refused.
void read_user(const merged& m, const std::string& src, const std::string& where_ctx,
               const std::string& user_name, connection& c) {
  auto us = m.users.find(user_name);
  if (us == m.users.end()) bad(where_ctx + ": its user " + sq(user_name) + " is not in the kubeconfig");
  auto where_us = src + " (user " + sq(user_name) + ")";
  const auto& u = us->second;
  if (u.body["exec"] || u.body["auth-provider"])
    bad(where_us +
        " gets its credentials from an exec or auth-provider plugin, which tjob "
        "does not run; give the user a token, tokenFile or client certificate");
  if (!scalar(u.body, "username").empty() || !scalar(u.body, "password").empty())
    bad(where_us +
        " uses basic authentication, which Kubernetes no longer supports; give "
        "the user a token or client certificate");
  c.token = scalar(u.body, "token");
  if (c.token.empty()) {
    auto tf = scalar(u.body, "tokenFile");
    if (!tf.empty()) {
      auto path = resolve(u, tf);
      auto text = read_token(path);
      if (!text) bad(where_us + ": cannot read its tokenFile " + path.string());
      c.token = *text;
      c.token_file = path;
    }
  }
  c.tls.client_cert_pem = file_or_data(u, "client-certificate", "client certificate", where_us);
  c.tls.client_key_pem = file_or_data(u, "client-key", "client key", where_us);
  if (c.tls.client_cert_pem.empty() != c.tls.client_key_pem.empty())
    bad(where_us +
        " has a client certificate without its key, or a key without its "
        "certificate; give both");
}

connection from_kubeconfig(const load_options& opt) {
  merged m;
  if (!opt.config_file.empty()) {
    merge_file(m, opt.config_file, true);
  } else {
    auto files = kubeconfig_files();
    for (const auto& f : files) merge_file(m, f, files.size() == 1);
    if (m.files.empty())
      bad("no kubeconfig: none of " +
          [&] {
            std::string s;
            for (const auto& f : files) s += (s.empty() ? "" : ", ") + f.string();
            return s;
          }() +
          " exists; give one (--kubeconfig or KUBECONFIG) or run inside a pod");
  }
  auto src = m.describe();
  std::string ctx_name = opt.context.empty() ? m.current_context : opt.context;
  if (ctx_name.empty())
    bad(src + " names no current-context; pass a context (--context)" +
        (m.contexts.empty() ? std::string(" (it has none)") : [&] {
          std::string s = "; its contexts are: ";
          bool first = true;
          for (const auto& [n, _] : m.contexts) s += (first ? "" : ", ") + n, first = false;
          return s;
        }()));
  auto ci = m.contexts.find(ctx_name);
  if (ci == m.contexts.end()) {
    std::string known;
    for (const auto& [n, _] : m.contexts) known += (known.empty() ? "" : ", ") + n;
    bad(src + " has no context " + sq(ctx_name) +
        (known.empty() ? std::string("; it has no contexts") : "; its contexts are: " + known) +
        "; pass one of them (--context)");
  }
  const auto& ctx = ci->second;
  auto where_ctx = src + " (context " + sq(ctx_name) + ")";
  auto cluster_name = scalar(ctx.body, "cluster");
  auto user_name = scalar(ctx.body, "user");
  auto cl = m.clusters.find(cluster_name);
  if (cluster_name.empty() || cl == m.clusters.end())
    bad(where_ctx + ": its cluster " + sq(cluster_name) + " is not in the kubeconfig");
  connection c;
  c.context = ctx_name;
  c.source = where_ctx;
  auto where_cl = src + " (cluster " + sq(cluster_name) + ")";
  c.server = scalar(cl->second.body, "server");
  if (c.server.empty()) bad(where_cl + " has no server URL");
  if (!c.server.starts_with("https://") && !c.server.starts_with("http://"))
    bad(where_cl + ": server " + sq(c.server) + " is not an http(s) URL");
  c.tls.insecure_skip_verify = truthy(cl->second.body, "insecure-skip-tls-verify");
  c.tls.ca_pem = file_or_data(cl->second, "certificate-authority", "certificate authority", where_cl);
  c.tls.server_name = scalar(cl->second.body, "tls-server-name");
  c.tls.source = where_cl;
  if (!user_name.empty()) read_user(m, src, where_ctx, user_name, c);
  c.ns = opt.ns.empty() ? scalar(ctx.body, "namespace") : opt.ns;
  if (c.ns.empty()) c.ns = "default";
  return c;
}

connection in_cluster(const load_options& opt) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  auto dir = opt.in_cluster_dir;
  auto src = "in-cluster service account " + dir.string();
  if (!host || !*host || !port || !*port)
    bad(src +
        " exists but KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT are not set; give "
        "a kubeconfig (--kubeconfig)");
  connection c;
  std::string h = host;
  if (h.find(':') != std::string::npos) h = "[" + h + "]";
  c.server = "https://" + h + ":" + port;
  auto token = read_token(dir / "token");
  if (!token) bad(src + ": cannot read " + (dir / "token").string());
  c.token = *token;
  c.token_file = dir / "token";
  if (auto ca = read_text(dir / "ca.crt"))
    c.tls.ca_pem = *ca;
  else
    bad(src + ": cannot read " + (dir / "ca.crt").string());
  c.tls.source = src;
  c.source = src;
  c.ns = opt.ns;
  if (c.ns.empty()) {
    if (auto n = read_text(dir / "namespace", 4096)) {
      c.ns = *n;
      while (!c.ns.empty() && (c.ns.back() == '\n' || c.ns.back() == ' ')) c.ns.pop_back();
    }
  }
  if (c.ns.empty()) c.ns = "default";
  return c;
}

}  // namespace

std::vector<fs::path> kubeconfig_files() {
  std::vector<fs::path> out;
  const char* env = std::getenv("KUBECONFIG");
  if (env && *env) {
    std::string_view s(env);
    while (!s.empty()) {
      auto colon = s.find(':');
      auto part = s.substr(0, colon);
      if (!part.empty()) out.emplace_back(std::string(part));
      if (colon == std::string_view::npos) break;
      s.remove_prefix(colon + 1);
    }
    if (!out.empty()) return out;
  }
  const char* home = std::getenv("HOME");
  out.push_back(fs::path(home && *home ? home : "/root") / ".kube" / "config");
  return out;
}

connection load(const load_options& opt) {
  std::error_code ec;
  if (opt.config_file.empty() && !opt.in_cluster_dir.empty() && fs::exists(opt.in_cluster_dir / "token", ec))
    return in_cluster(opt);
  return from_kubeconfig(opt);
}

std::optional<std::string> read_token(const fs::path& file) {
  auto text = read_text(file, 1 << 20);
  if (!text) return std::nullopt;
  while (!text->empty() && (text->back() == '\n' || text->back() == '\r' || text->back() == ' '))
    text->pop_back();
  return text;
}

std::optional<std::string> base64_decode(std::string_view in) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  unsigned acc = 0;
  int bits = 0, pad = 0;
  for (char c : in) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      ++pad;
      continue;
    }
    if (pad) return std::nullopt;  // data after padding
    int v = val(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  if (pad > 2) return std::nullopt;
  return out;
}

}  // namespace tjob::kube
