#include "engine/trainer_checks.hpp"

#include "adapters/process/python_setup.hpp"
#include "engine/names.hpp"

#include <tjob/error.hpp>

#include <boost/json/parse.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace tjob::detail {

namespace json = boost::json;

namespace {
[[noreturn]] void fail(errc e, std::string message) { throw error(e, std::move(message)); }
}  // namespace

bool has_nul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

void check_env(const std::string& who, const std::map<std::string, std::string>& env) {
  for (const auto& [k, v] : env) {
    if (k.empty() || k.find('=') != std::string::npos || has_nul(k))
      fail(errc::invalid_argument, who + ": env name " + quote(k) +
                                       " is not a valid variable name; use NAME=VALUE with a "
                                       "non-empty NAME without '='");
    if (has_nul(v))
      fail(errc::invalid_argument,
           who + ": the value of env " + quote(k) + " holds a NUL byte; remove it");
  }
}

std::string read_source(const std::string& who, const std::string& file) {
  std::error_code ec;
  auto size = std::filesystem::file_size(file, ec);
  if (ec)
    fail(errc::invalid_argument, who + ": cannot read the training file " + quote(file) + ": " +
                                     ec.message() + "; check the path");
  if (size > (16u << 20))
    fail(errc::invalid_argument, who + ": the training file " + quote(file) +
                                     " is larger than 16 MiB; pass a script, not data");
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const runtime& check_request(train_request& req, const runtime_catalog& catalog) {
  if (req.name.empty()) {
    req.name = generate_job_name();
  } else if (auto problem = name_problem(req.name)) {
    fail(errc::invalid_name,
         "Invalid job name " + quote(req.name) + ": " + *problem +
             ". Use an RFC 1035 label: lowercase letters, digits and '-', starting with a "
             "letter and ending with a letter or digit, at most 63 characters");
  }
  auto me = who(req.name);
  if (req.runtime.empty()) req.runtime = std::string(default_runtime_name);
  const runtime* rt = catalog.find(req.runtime);
  if (!rt) fail(errc::runtime_not_found, me + ": " + catalog.not_found_message(req.runtime));
  if (req.num_nodes < 1 || req.num_nodes > 64)
    fail(errc::invalid_argument, me + ": num_nodes=" + std::to_string(req.num_nodes) +
                                     " is out of range; give 1 to 64 nodes");
  if (req.num_nodes > 1 && std::holds_alternative<python_trainer>(req.job_trainer) &&
      rt->trainer.framework != "torch")
    fail(errc::invalid_argument, me + ": num_nodes=" + std::to_string(req.num_nodes) +
                                     " needs a torch runtime (the nodes meet through torchrun); "
                                     "runtime '" + rt->name + "' is framework " +
                                     rt->trainer.framework);
  return *rt;
}

void check_command(const std::string& who, const command_trainer& ct) {
  if (ct.command.empty())
    fail(errc::invalid_argument,
         who + ": the trainer's command is empty; give the program to run and its arguments");
  for (const auto& a : ct.command)
    if (has_nul(a))
      fail(errc::invalid_argument, who + ": a command argument holds a NUL byte, which no "
                                         "program can receive; remove it");
  check_env(who, ct.env);
}

std::string check_python_code(const std::string& who, python_trainer& pt) {
  if (pt.source.empty() == pt.source_file.empty())
    fail(errc::invalid_argument, who + ": give the training code either as source text or as a "
                                       "file (source or source_file), not both or neither");
  if (!pt.source_file.empty()) {
    std::error_code ec;
    pt.source_file = std::filesystem::absolute(pt.source_file, ec).string();
    if (pt.function.empty() && !std::filesystem::is_regular_file(pt.source_file, ec))
      fail(errc::invalid_argument, who + ": the training file " + quote(pt.source_file) +
                                       " does not exist; check the path");
  }
  std::string source = !pt.source.empty() ? pt.source
                       : pt.function.empty() ? std::string()
                                             : read_source(who, pt.source_file);
  std::string where = pt.source_file.empty() ? "the source" : quote(pt.source_file);
  if (!pt.function.empty() && !process::defines_function(source, pt.function))
    fail(errc::invalid_argument, who + ": function " + quote(pt.function) +
                                     " is not defined at the top level of " + where +
                                     "; give the name of a top-level `def`");
  if (!pt.function_args.empty()) {
    if (pt.function.empty())
      fail(errc::invalid_argument,
           who + ": function_args (--args) needs a function (--func); a script takes args");
    boost::system::error_code jec;
    auto v = json::parse(pt.function_args, jec);
    if (jec || !v.is_object())
      fail(errc::invalid_argument,
           who + ": function_args (--args) must be a JSON object of keyword arguments, such as "
                 "{\"lr\": 0.1}; got " + printable(pt.function_args, 60));
  }
  if (pt.procs_per_node < 1)
    fail(errc::invalid_argument, who + ": procs_per_node must be 1 or more");
  for (const auto& a : pt.args)
    if (has_nul(a)) fail(errc::invalid_argument, who + ": a script argument holds a NUL byte");
  for (const auto& p : pt.packages_to_install)
    if (has_nul(p)) fail(errc::invalid_argument, who + ": a package name holds a NUL byte");
  check_env(who, pt.env);
  return source;
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 29500;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 29500;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

}  // namespace tjob::detail
