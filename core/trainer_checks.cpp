#include "core/trainer_checks.hpp"

#include "core/fail.hpp"
#include "core/names.hpp"
#include "core/retry.hpp"

#include <tjob/error.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <utility>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace tjob::detail {

bool has_nul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

void check_env(const std::string& who, const std::map<std::string, std::string>& env) {
  for (const auto& [k, v] : env) {
    if (k.empty() || k.find('=') != std::string::npos || has_nul(k))
      fail(errc::invalid_argument, who + ": env name " + quote(k) +
                                       " is not a valid variable name; use NAME=VALUE with a "
                                       "non-empty NAME without '='");
    if (has_nul(v))
      fail(errc::invalid_argument, who + ": the value of env " + quote(k) + " holds a NUL byte; remove it");
  }
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
  // A command job names a runtime only when it is given one: the default
  // still supplies what a backend may take from it (a container's image, a
  // TrainJob's runtimeRef), but the job is not listed under it.
  const bool named = !req.runtime.empty();
  const std::string lookup = named ? req.runtime : std::string(default_runtime_name);
  const runtime* rt = catalog.find(lookup);
  if (!rt) fail(errc::runtime_not_found, me + ": " + catalog.not_found_message(lookup));
  if (named || !std::holds_alternative<command_trainer>(req.job_trainer)) req.runtime = lookup;
  if (req.num_nodes < 1 || req.num_nodes > 64)
    fail(errc::invalid_argument,
         me + ": num_nodes=" + std::to_string(req.num_nodes) + " is out of range; give 1 to 64 nodes");
  if (req.num_nodes > 1 && std::holds_alternative<python_trainer>(req.job_trainer) &&
      rt->trainer.framework != "torch")
    fail(errc::invalid_argument, me + ": num_nodes=" + std::to_string(req.num_nodes) +
                                     " needs a torch runtime (the nodes meet through torchrun); "
                                     "runtime '" +
                                     rt->name + "' is framework " + rt->trainer.framework);
  if (req.priority < -1'000'000 || req.priority > 1'000'000)
    fail(errc::invalid_argument, me + ": priority=" + std::to_string(req.priority) +
                                     " is out of range; give -1000000 to 1000000 (higher starts first)");
  if (req.active_deadline.count() < 0 || req.active_deadline > std::chrono::hours(24 * 366))
    fail(errc::invalid_argument, me + ": active_deadline=" + std::to_string(req.active_deadline.count()) +
                                     "s is out of range; give 1 s to a year, or 0 for none");
  check_retry(me, req.retry);
  if (!req.array.empty()) {
    if (auto problem = name_problem(req.array))
      fail(errc::invalid_argument, me + ": array " + quote(req.array) + ": " + *problem);
  }
  if (req.array_limit < 0 || (req.array_limit > 0 && req.array.empty()))
    fail(errc::invalid_argument, me + ": array_limit=" + std::to_string(req.array_limit) +
                                     ": give 0 or more, with the array's name (array)");
  if (const auto* ct = std::get_if<command_trainer>(&req.job_trainer)) {
    if (ct->cpus < 0 || ct->cpus > 1024)
      fail(errc::invalid_argument, me + ": cpus=" + std::to_string(ct->cpus) +
                                       " is out of range; give 0 to 1024 CPUs to be admitted for");
    if (ct->memory > (std::uint64_t(1) << 60))
      fail(errc::invalid_argument, me + ": memory=" + std::to_string(ct->memory) + " is over 1Ei; give less");
  }
  return *rt;
}

void check_command(const std::string& who, const command_trainer& ct) {
  if (ct.command.empty())
    fail(errc::invalid_argument,
         who + ": the trainer's command is empty; give the program to run and its arguments");
  for (const auto& a : ct.command)
    if (has_nul(a))
      fail(errc::invalid_argument, who +
                                       ": a command argument holds a NUL byte, which no "
                                       "program can receive; remove it");
  check_env(who, ct.env);
}

namespace {

// Whether nobody holds `port` on any local address: torch's TCPStore binds
// [::] and 0.0.0.0, so that is what is tried (dual-stack where the machine
// has IPv6). Binding sends nothing.
bool port_is_free(int port) {
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool ok = false;
  if (fd >= 0) {
    int off = 0;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    sockaddr_in6 a6{};
    a6.sin6_family = AF_INET6;
    a6.sin6_addr = in6addr_any;
    a6.sin6_port = htons(static_cast<std::uint16_t>(port));
    ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a6), sizeof a6) == 0;
    ::close(fd);
    return ok;
  }
  fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a4{};
  a4.sin_family = AF_INET;
  a4.sin_addr.s_addr = htonl(INADDR_ANY);
  a4.sin_port = htons(static_cast<std::uint16_t>(port));
  ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a4), sizeof a4) == 0;
  ::close(fd);
  return ok;
}

// The kernel's port range for bind(0) and connect(): 32768-60999 unless the
// machine says otherwise.
std::pair<int, int> ephemeral_range() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int lo = 0, hi = 0;
  if (in >> lo >> hi && lo > 0 && hi >= lo && hi <= 65535) return {lo, hi};
  return {32768, 60999};
}

}  // namespace

std::pair<int, int> rendezvous_port_range() {
  auto [lo, hi] = ephemeral_range();
  // Below the ephemeral range where it leaves room (Linux's default), else
  // above it; ports under 10000 are left to well-known services.
  if (lo - 1 >= 10000 + 1024) return {std::max(10000, lo - 16384), lo - 1};
  if (hi + 1 + 1024 <= 65535) return {hi + 1, 65535};
  return {0, 0};
}

int free_port() {
  static thread_local std::mt19937 rng{std::random_device{}()};
  if (auto [lo, hi] = rendezvous_port_range(); lo > 0) {
    std::uniform_int_distribution<int> pick(lo, hi);
    for (int tries = 0; tries < 64; ++tries)
      if (int port = pick(rng); port_is_free(port)) return port;
  }
  // No room outside the ephemeral range, or all tried are taken: let the
  // kernel pick one (it may be handed out again before torch binds it).
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
