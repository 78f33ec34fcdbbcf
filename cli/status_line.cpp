#include "cli/status_line.hpp"

#include "cli/run_job.hpp"

#include <fmt/format.h>

#include <sys/ioctl.h>
#include <unistd.h>
#include <cstdlib>
#include <cstring>

namespace tjob::cli {

namespace {

std::atomic<status_line*> active{nullptr};

// Clears the line the cursor is on and goes to its start.
constexpr std::string_view clear_line = "\r\x1b[2K";

std::string duration(double s) {
  auto n = static_cast<long long>(s);
  if (n >= 3600) return fmt::format("{}h {}m", n / 3600, n % 3600 / 60);
  if (n >= 60) return fmt::format("{}m {}s", n / 60, n % 60);
  return fmt::format("{:.0f}s", s);
}

// A setup phase that a "[tjob] " line begins (venv, pip, the cache),
// or that it ends ("... done in 0.6 s", "... failed after ..."): nullopt for
// the other lines (limits, GPUs), which change nothing.
std::optional<std::string> phase_of(std::string_view text) {
  if (text.find(" done in ") != std::string_view::npos || text.find(" failed") != std::string_view::npos ||
      text.find(" from the cache") != std::string_view::npos)
    return std::string();
  for (std::string_view start :
       {"building ", "checking ", "creating ", "installing ", "copying ", "waiting for ", "pulling "})
    if (text.starts_with(start)) return std::string(text);
  return std::nullopt;
}

bool utf8_locale() {
  for (const char* var : {"LC_ALL", "LC_CTYPE", "LANG"})
    if (const char* v = std::getenv(var); v && *v) {
      std::string s(v);
      return s.find("UTF-8") != std::string::npos || s.find("utf8") != std::string::npos ||
             s.find("utf-8") != std::string::npos;
    }
  return false;
}

int terminal_width() {
  winsize ws{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

// `s` cut to `n` characters (UTF-8 sequences counted as one: every character
// used here is one column wide).
std::string cut(const std::string& s, int n) {
  std::string out;
  int cols = 0;
  for (std::size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t len = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    if (cols == n) break;
    out.append(s, i, len);
    ++cols;
    i += len;
  }
  return out;
}

}  // namespace

std::string render_status(const status_view& v, int width, bool utf8) {
  static constexpr const char* braille[] = {"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"};
  static constexpr const char* ascii[] = {"|", "/", "-", "\\"};
  std::string spin = utf8 ? braille[v.tick % 10] : ascii[v.tick % 4];
  std::string line;
  if (v.percent) {
    constexpr int cells = 20;
    int filled = *v.percent * cells / 100;
    std::string bar;
    for (int i = 0; i < cells; ++i) bar += i < filled ? (utf8 ? "█" : "#") : (utf8 ? "░" : "-");
    line = fmt::format("{} {:3}%", bar, *v.percent);
    if (v.eta) line += "  ETA " + duration(static_cast<double>(*v.eta));
  } else if (!v.phase.empty()) {
    line = fmt::format("{} {} ({:.1f}s)", spin, v.phase, v.phase_seconds);
  } else {
    line = fmt::format("{} {}", spin, v.status);
  }
  for (const auto& [name, value] : v.metrics) line += "  " + name + "=" + value;
  if (v.percent || v.phase.empty()) line += "  [" + duration(v.elapsed) + "]";
  return cut(line, std::max(1, width - 1));
}

bool status_line_wanted() {
  const char* term = std::getenv("TERM");
  return ::isatty(STDOUT_FILENO) && term && *term && std::strcmp(term, "dumb") != 0;
}

status_line* active_status_line() { return active.load(); }

status_line::status_line(trainer_client& client, std::string job)
    : client_(client), job_(std::move(job)), utf8_(utf8_locale()), began_(std::chrono::steady_clock::now()) {
  active = this;
  watcher_ = std::thread([this] { watch(); });
}

status_line::~status_line() {
  stop_ = true;
  if (watcher_.joinable()) watcher_.join();
  active = nullptr;
  std::lock_guard lock(mu_);
  if (gone_) return;
  std::string out;
  if (drawn_) out = clear_line;
  out += held_ + partial_;  // a phase that never ended says what it was; a last line without its newline
  if (!out.empty()) write_out(out);
}

void status_line::watch() {
  std::optional<train_job> known;
  while (!stop_) {
    try {
      // (a short timeout: the spinner and the elapsed time move while nothing changes)
      known = known ? client_.wait_for_job_change(job_, *known, std::chrono::milliseconds(150))
                    : client_.get_job(job_);
    } catch (const std::exception&) {
      return;  // deleted meanwhile, or the server went: the log says the rest
    }
    std::lock_guard lock(mu_);
    seen_ = known;
    ++tick_;
    if (at_line_start_) redraw_locked();
    if (is_terminal(known->status)) return;
  }
}

std::string status_line::line_locked() const {
  status_view v;
  auto now = std::chrono::steady_clock::now();
  v.elapsed = std::chrono::duration<double>(now - began_).count();
  v.tick = tick_;
  v.phase = phase_;
  v.phase_seconds = std::chrono::duration<double>(now - phase_began_).count();
  if (seen_) {
    v.status = std::string(to_string(seen_->status));
    if (seen_->queue_position)
      v.status += fmt::format(" (Queued #{})", *seen_->queue_position);
    else if (!seen_->reason.empty())
      v.status += " (" + seen_->reason + ")";
    v.percent = seen_->progress_percent;
    v.eta = seen_->estimated_remaining_seconds;
    v.metrics = seen_->metrics;
  }
  return render_status(v, terminal_width(), utf8_);
}

void status_line::redraw_locked() {
  if (gone_) return;
  std::string out(clear_line);
  out += line_locked();
  if (!write_out(out)) gone_ = true;
  drawn_ = true;
}

// The log's bytes go out as they come, but for tjob's own line that begins a
// setup phase ("[tjob] creating a virtual environment ..."): that one is
// shown as the phase in the status line instead, and its "... done in" line
// is what stays on the screen. The line is printed after all when the phase
// has output of its own (pip's lines follow it), fails, or never ends. So a
// line that may be one of tjob's is held back until it is whole; any other
// partial line goes out at once.
bool status_line::write_log(std::string_view bytes) {
  static constexpr std::string_view mark = "[tjob] ";
  std::lock_guard lock(mu_);
  if (gone_) return false;
  std::string out;
  auto emit = [&](std::string_view text) {
    if (text.empty()) return;
    if (drawn_) out += clear_line;
    drawn_ = false;
    out.append(text);
    at_line_start_ = text.back() == '\n';
  };
  while (!bytes.empty()) {
    if (passing_) {  // the rest of a line already going out
      auto nl = bytes.find('\n');
      auto piece = bytes.substr(0, nl == std::string_view::npos ? bytes.size() : nl + 1);
      emit(piece);
      bytes.remove_prefix(piece.size());
      if (nl != std::string_view::npos) passing_ = false;
      continue;
    }
    auto nl = bytes.find('\n');
    partial_.append(bytes.substr(0, nl == std::string_view::npos ? bytes.size() : nl + 1));
    bytes.remove_prefix(nl == std::string_view::npos ? bytes.size() : nl + 1);
    const bool whole = !partial_.empty() && partial_.back() == '\n';
    const std::string_view line(partial_.data(), partial_.size() - (whole ? 1 : 0));
    const bool ours = line.starts_with(mark);
    if (!whole) {
      // held while it may still be one of tjob's lines (and not without end)
      if ((ours || mark.starts_with(line)) && partial_.size() < 4096) continue;
      emit(held_);
      held_.clear();
      emit(partial_);
      partial_.clear();
      passing_ = true;
      continue;
    }
    auto phase = ours ? phase_of(line.substr(mark.size())) : std::nullopt;
    if (phase && !phase->empty()) {  // a phase begins: the status line shows it
      held_ = partial_;
      phase_ = *phase;
      phase_began_ = std::chrono::steady_clock::now();
    } else {
      if (phase) {  // it ends: its line stays
        if (line.find(" failed") != std::string_view::npos) emit(held_);
        held_.clear();
        phase_.clear();
      } else if (!ours && !held_.empty()) {  // the phase's own output: after its line
        emit(held_);
        held_.clear();
      }
      emit(partial_);
    }
    partial_.clear();
  }
  if (at_line_start_) {
    if (drawn_) out += clear_line;
    out += clear_line;
    out += line_locked();
    drawn_ = true;
  }
  if (!out.empty() && !write_out(out)) gone_ = true;
  return !gone_;
}

}  // namespace tjob::cli
