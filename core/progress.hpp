// What training code reports of its progress (Kubeflow's
// update_trainjob_status: a percentage, the seconds left, metrics), as the
// same policy on every backend: reading a report's body, its bounds, how it
// is kept (a Progress event's JSON) and how fast it may come. No I/O, no
// clock: the caller gives the time.
#pragma once

#include <tjob/types.hpp>

#include <boost/json/fwd.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tjob::detail {

/// Kubeflow's bounds (TrainJob status.trainerStatus): at most 256 metrics,
/// names and values of at most 64 bytes.
inline constexpr std::size_t max_metrics = 256;
inline constexpr std::size_t max_metric_bytes = 64;

struct progress_report {
  std::optional<int> percent;                                ///< 0 to 100
  std::optional<std::int64_t> remaining;                     ///< seconds, 0 or more
  std::vector<std::pair<std::string, std::string>> metrics;  ///< names unique, in the order first given
  bool operator==(const progress_report&) const = default;
};

/// A body as Kubeflow's update_trainjob_status sends it,
/// {"trainerStatus": {"progressPercentage", "estimatedRemainingSeconds",
/// "metrics": [{"name", "value"}], "lastUpdatedTime"}}, read strictly: what
/// is not that is refused (`error` says which field and why), and nothing of
/// it is kept. A percentage past 0..100 is clamped and a negative ETA is 0,
/// as Kubeflow's client clamps; metrics past 256 are dropped (`dropped`
/// counts them), as its client truncates; a name given twice keeps its last
/// value. A name or value must be 1 to 64 bytes (a value may be empty) of
/// printable text: a control character is refused. lastUpdatedTime is not
/// read: the receiver's clock says when.
struct parsed_progress {
  std::optional<progress_report> report;
  std::string error;
  std::size_t dropped = 0;
};
parsed_progress parse_progress_body(std::string_view body);

/// A JSON number that is finite, as a double; nullopt for anything else.
std::optional<double> number_of(const boost::json::value& v);
/// A reported number within Kubeflow's bounds: a percentage 0 to 100, seconds left 0 or more.
int percent_of(double d);
std::int64_t remaining_of(double d);
/// Adds a metric, or gives a name already there its new value (a name given twice keeps its last).
void put_metric(std::vector<std::pair<std::string, std::string>>& metrics, std::string name,
                std::string value);

/// A metric's value given as a JSON number, as text: 3, 0.9 (never 9E-1).
std::string number_text(const boost::json::value& v);

/// The body our own helper and Kubeflow's client send for `r`.
std::string progress_body(const progress_report& r);

/// How a report is kept (a Progress event's data, a job's latest): compact
/// JSON {"progress_percent", "estimated_remaining_seconds", "metrics": {}}.
std::string progress_json(const progress_report& r);
/// The same, as an object (to add members to before it is written).
boost::json::object progress_object(const progress_report& r);
/// Reads what progress_json wrote; what does not read is left out (stored
/// data is never a reason to fail a read).
progress_report progress_from_json(std::string_view text);
/// The same, of JSON already parsed (its other members are not read).
progress_report progress_from_json(const boost::json::object& o);
/// The Progress event's message, for a person: "37%, 2m 0s left: loss=0.31
/// accuracy=0.9" (cut near 200 bytes, saying how many metrics are left out).
std::string progress_message(const progress_report& r);
/// The job's latest progress fields from `r`, reported at `when`.
void apply_progress(train_job& j, const progress_report& r, clock::time_point when);
/// A Progress event's fields from `r`.
void apply_progress(event& e, const progress_report& r);

/// How fast one job's reports are taken: a bucket of `burst` reports that
/// refills at `per_second`; a report that finds it empty is refused (429),
/// and nothing of it is kept. And how many of the taken ones become events
/// (the latest fields always change), so that what a job keeps is bounded
/// however long it runs: all of them up to `events`, then one each
/// `thin_after`, an interval that doubles after each further `per_step`
/// events up to `max_doublings` (a month-long job keeps about 18,000, ten
/// years of reports fewer than 30,000), and none past `most_bytes` of
/// reports; 256 metrics of 64-byte names and values bound a report.
/// The count is the owning process's: an owner that takes a job over after
/// a restart counts anew.
class progress_gate {
 public:
  static constexpr double burst = 20, per_second = 5;
  static constexpr std::size_t events = 10'000, per_step = 1'000, max_doublings = 20;
  static constexpr std::size_t most_bytes = 64u << 20;
  static constexpr std::chrono::seconds thin_after{10};

  /// Whether a report arriving at `now` is taken.
  bool take(std::chrono::steady_clock::time_point now);
  /// Whether the taken report, of `bytes` as stored, becomes an event (call after take).
  bool record(std::chrono::steady_clock::time_point now, std::size_t bytes = 0);
  /// Seconds until one more report would be taken (Retry-After).
  int retry_after() const;

 private:
  double tokens_ = burst;
  std::optional<std::chrono::steady_clock::time_point> refilled_;
  std::size_t recorded_ = 0, recorded_bytes_ = 0;
  std::chrono::steady_clock::time_point last_recorded_{};
};

}  // namespace tjob::detail
