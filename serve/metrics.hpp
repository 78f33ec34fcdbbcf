// tjob serve's Prometheus metrics (prometheus-cpp's core: the registry and
// the text format; the server serves them at GET /metrics).
//
// Threading: the engine's executor only (prometheus-cpp's own locks make a
//   scrape safe anyway).
#pragma once

#include <tjob/types.hpp>

#include <memory>
#include <string>
#include <vector>

namespace tjob::serve {

class metrics {
 public:
  explicit metrics(std::string backend);
  ~metrics();

  /// A change the watch hub saw: `before` is null for a job that appeared,
  /// `now` null for one that went.
  void job_changed(const train_job* before, const train_job* now);
  /// The setup phases of a job that ended, from its Setup events
  /// (tjob::setup_phase_of): their times, and the venv cache's hit or miss.
  void setup_events(const std::vector<event>& events);
  /// A request answered with `status`.
  void request_done(int status);
  void connection_opened();
  void connection_closed();
  enum class held { log_follow, watch, wait };
  void held_opened(held kind);
  void held_closed(held kind);
  void log_bytes_served(std::size_t n);
  /// How late a timer of the reactor fired, in seconds.
  void reactor_lag(double seconds);

  /// The text format, with the jobs by status and backend counted from `jobs`.
  std::string scrape(const std::vector<const train_job*>& jobs);

  struct impl;

 private:
  std::unique_ptr<impl> impl_;
};

}  // namespace tjob::serve
