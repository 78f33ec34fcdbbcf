// Signals by name, durations in whole units, and a warning before a stop as
// Slurm's --signal writes it (tjob/spec.hpp).
#include <tjob/error.hpp>
#include <tjob/spec.hpp>

#include <array>
#include <cctype>
#include <csignal>
#include <string>
#include <utility>

namespace tjob {

namespace {

// The signals a job may be warned with, by name: those a program can handle
// (not KILL or STOP) and that mean nothing else to tjob's own processes.
constexpr std::array<std::pair<const char*, int>, 10> named_signals{{{"HUP", SIGHUP},
                                                                     {"INT", SIGINT},
                                                                     {"QUIT", SIGQUIT},
                                                                     {"USR1", SIGUSR1},
                                                                     {"USR2", SIGUSR2},
                                                                     {"ALRM", SIGALRM},
                                                                     {"TERM", SIGTERM},
                                                                     {"CONT", SIGCONT},
                                                                     {"URG", SIGURG},
                                                                     {"WINCH", SIGWINCH}}};

}  // namespace

std::string signal_name(int signal) {
  for (const auto& [name, number] : named_signals)
    if (number == signal) return name;
  return std::to_string(signal);
}

std::optional<int> signal_number(std::string_view text) {
  if (text.starts_with("SIG")) text.remove_prefix(3);
  if (text.empty()) return std::nullopt;
  for (const auto& [name, number] : named_signals)
    if (text == name) return number;
  int n = 0;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c)) || n > 64) return std::nullopt;
    n = n * 10 + (c - '0');
  }
  if (n < 1 || n > SIGRTMAX || n == SIGKILL || n == SIGSTOP) return std::nullopt;
  return n;
}

std::optional<std::chrono::seconds> parse_seconds(std::string_view text) {
  long long total = 0;
  std::size_t i = 0;
  if (text.empty()) return std::nullopt;
  while (i < text.size()) {
    const std::size_t start = i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
    const std::size_t unit_at = i;
    while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) ++i;
    const auto unit = text.substr(unit_at, i - unit_at);
    const long long scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : 0;
    // digits, at most 9 of them, each run with a unit but a last bare one
    if (unit_at == start || unit_at - start > 9 || scale == 0 || (unit.empty() && i < text.size()))
      return std::nullopt;
    total += std::stoll(std::string(text.substr(start, unit_at - start))) * scale;
  }
  return std::chrono::seconds(total);
}

stop_warning parse_stop_warning(std::string_view spec) {
  auto refuse = [&](const std::string& why) {
    return error(errc::invalid_argument, "signal " + std::string(spec) + ": " + why);
  };
  const auto at = spec.find('@');
  stop_warning w;
  const auto sig = signal_number(spec.substr(0, at));
  if (!sig)
    throw refuse("'" + std::string(spec.substr(0, at)) +
                 "' is not a signal a job can handle; give a name such as USR1 (or SIGUSR1), or its number, "
                 "then @TIME (USR1@90s)");
  w.signal = *sig;
  if (at != std::string_view::npos) {
    auto before = parse_seconds(spec.substr(at + 1));
    if (!before || before->count() < 1 || before->count() > 366LL * 86400)
      throw refuse("'" + std::string(spec.substr(at + 1)) +
                   "' is not a time before the stop; give whole seconds (90) or units (90s, 10m, 1h30m), "
                   "at least 1 s");
    w.before = *before;
  }
  return w;
}

std::string stop_warning_text(const stop_warning& w) {
  return signal_name(w.signal) + "@" + std::to_string(w.before.count()) + "s";
}

}  // namespace tjob
