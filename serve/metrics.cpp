#include "serve/metrics.hpp"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

namespace tjob::serve {

namespace {

double seconds_between(clock::time_point a, clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

struct metrics::impl {
  std::string backend;
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  prometheus::Family<prometheus::Gauge>& jobs =
      prometheus::BuildGauge()
          .Name("tjob_jobs")
          .Help("Jobs by status and backend, as the server sees them")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& submitted =
      prometheus::BuildCounter()
          .Name("tjob_jobs_submitted_total")
          .Help("Jobs that appeared (any submitter of this store, daemon or cluster)")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& ended = prometheus::BuildCounter()
                                                       .Name("tjob_jobs_ended_total")
                                                       .Help("Jobs that ended, by status (Complete, Failed)")
                                                       .Register(*registry);
  prometheus::Family<prometheus::Histogram>& to_running = prometheus::BuildHistogram()
                                                              .Name("tjob_job_start_seconds")
                                                              .Help("Submit to Running, per job")
                                                              .Register(*registry);
  prometheus::Family<prometheus::Histogram>& running = prometheus::BuildHistogram()
                                                           .Name("tjob_job_run_seconds")
                                                           .Help("Running to its end, per job")
                                                           .Register(*registry);
  prometheus::Family<prometheus::Counter>& requests = prometheus::BuildCounter()
                                                          .Name("tjob_http_requests_total")
                                                          .Help("HTTP requests answered, by status code")
                                                          .Register(*registry);
  prometheus::Gauge& connections = prometheus::BuildGauge()
                                       .Name("tjob_http_connections")
                                       .Help("HTTP connections open")
                                       .Register(*registry)
                                       .Add({});
  prometheus::Family<prometheus::Gauge>& held =
      prometheus::BuildGauge()
          .Name("tjob_http_held")
          .Help("Answers held open: log followers, watches, wait long polls")
          .Register(*registry);
  prometheus::Counter& log_bytes = prometheus::BuildCounter()
                                       .Name("tjob_log_bytes_served_total")
                                       .Help("Log bytes sent to clients")
                                       .Register(*registry)
                                       .Add({});
  prometheus::Family<prometheus::Histogram>& setup =
      prometheus::BuildHistogram()
          .Name("tjob_setup_seconds")
          .Help(
              "Setup phases of Python jobs, by phase (check, venv, pip install, cache copy), once a job ends")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& venv_cache =
      prometheus::BuildCounter()
          .Name("tjob_venv_cache_total")
          .Help("Jobs whose venv came from the cache (hit) or was built into it (miss)")
          .Register(*registry);
  prometheus::Histogram& lag =
      prometheus::BuildHistogram()
          .Name("tjob_reactor_lag_seconds")
          .Help("How late a 100 ms timer of the reactor fires")
          .Register(*registry)
          .Add({}, prometheus::Histogram::BucketBoundaries{0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05,
                                                           0.1, 0.5, 1});

  prometheus::Gauge& held_gauge(metrics::held k) {
    const char* kind = k == metrics::held::log_follow ? "log_follow"
                       : k == metrics::held::watch    ? "watch"
                                                      : "wait";
    return held.Add({{"kind", kind}});
  }
};

metrics::metrics(std::string backend) : impl_(std::make_unique<impl>()) {
  impl_->backend = std::move(backend);
  for (auto s : {"Complete", "Failed"}) impl_->ended.Add({{"status", s}, {"backend", impl_->backend}});
  impl_->submitted.Add({{"backend", impl_->backend}});
  for (auto k : {held::log_follow, held::watch, held::wait}) impl_->held_gauge(k);
  for (auto r : {"hit", "miss"}) impl_->venv_cache.Add({{"result", r}});
}

metrics::~metrics() = default;

void metrics::job_changed(const train_job* before, const train_job* now) {
  auto& m = *impl_;
  if (!now) return;
  if (!before) m.submitted.Add({{"backend", m.backend}}).Increment();
  static const prometheus::Histogram::BucketBoundaries start_buckets{0.001, 0.005, 0.01, 0.05, 0.1, 0.5,
                                                                     1,     5,     10,   60,   300};
  static const prometheus::Histogram::BucketBoundaries run_buckets{0.1,  1,    10,    60,   300,
                                                                   1800, 3600, 14400, 86400};
  bool started_now = now->start_time && !(before && before->start_time);
  if (started_now)
    m.to_running.Add({{"backend", m.backend}}, start_buckets)
        .Observe(seconds_between(now->creation_timestamp, *now->start_time));
  bool ended_now = is_terminal(now->status) && !(before && is_terminal(before->status));
  if (ended_now) {
    m.ended.Add({{"status", std::string(to_string(now->status))}, {"backend", m.backend}}).Increment();
    if (now->start_time && now->end_time)
      m.running.Add({{"backend", m.backend}}, run_buckets)
          .Observe(seconds_between(*now->start_time, *now->end_time));
  }
}

void metrics::setup_events(const std::vector<event>& events) {
  static const prometheus::Histogram::BucketBoundaries buckets{0.001, 0.01, 0.05, 0.1, 0.5, 1,
                                                               5,     10,   30,   60,  300, 1800};
  for (const auto& e : events) {
    auto p = setup_phase_of(e);
    if (!p) continue;
    impl_->setup.Add({{"phase", p->phase}}, buckets).Observe(p->seconds);
    if (p->cache_hit) impl_->venv_cache.Add({{"result", *p->cache_hit ? "hit" : "miss"}}).Increment();
  }
}

void metrics::request_done(int status) {
  impl_->requests.Add({{"code", std::to_string(status)}}).Increment();
}
void metrics::connection_opened() { impl_->connections.Increment(); }
void metrics::connection_closed() { impl_->connections.Decrement(); }
void metrics::held_opened(held kind) { impl_->held_gauge(kind).Increment(); }
void metrics::held_closed(held kind) { impl_->held_gauge(kind).Decrement(); }
void metrics::log_bytes_served(std::size_t n) { impl_->log_bytes.Increment(static_cast<double>(n)); }
void metrics::reactor_lag(double seconds) { impl_->lag.Observe(seconds); }

std::string metrics::scrape(const std::vector<const train_job*>& jobs) {
  auto& m = *impl_;
  std::map<std::string, double> count;
  for (auto s : {job_status::created, job_status::running, job_status::complete, job_status::failed})
    count[std::string(to_string(s))] = 0;
  for (const auto* j : jobs) count[std::string(to_string(j->status))] += 1;
  for (const auto& [status, n] : count) m.jobs.Add({{"status", status}, {"backend", m.backend}}).Set(n);
  prometheus::TextSerializer text;
  return text.Serialize(m.registry->Collect());
}

}  // namespace tjob::serve
