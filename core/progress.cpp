#include "core/progress.hpp"

#include <fmt/format.h>
#include <boost/json.hpp>

#include <algorithm>
#include <cmath>

namespace tjob::detail {

namespace json = boost::json;

namespace {

// Why `s` cannot be a metric's name or value; empty when it can.
std::string text_problem(std::string_view s, bool name) {
  if (name && s.empty()) return "is empty";
  if (s.size() > max_metric_bytes)
    return fmt::format("is {} bytes; Kubeflow allows at most {}", s.size(), max_metric_bytes);
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    // C0 controls and DEL; C1 controls are U+0080..U+009F, 0xC2 0x80..0x9F in UTF-8
    bool control = c < 0x20 || c == 0x7f ||
                   (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) <= 0x9f);
    if (control)
      return fmt::format("has a control character (byte {}: 0x{:02x})", i,
                         c == 0xc2 ? static_cast<unsigned char>(s[i + 1]) : c);
  }
  return {};
}

}  // namespace

std::optional<double> number_of(const json::value& v) {
  if (!v.is_number()) return std::nullopt;
  boost::system::error_code ec;
  double d = v.to_number<double>(ec);
  if (ec || !std::isfinite(d)) return std::nullopt;
  return d;
}

int percent_of(double d) { return static_cast<int>(std::clamp(d, 0.0, 100.0)); }

std::int64_t remaining_of(double d) { return static_cast<std::int64_t>(std::clamp(d, 0.0, 1e15)); }

void put_metric(std::vector<std::pair<std::string, std::string>>& metrics, std::string name,
                std::string value) {
  auto same = std::find_if(metrics.begin(), metrics.end(), [&](const auto& kv) { return kv.first == name; });
  if (same != metrics.end())
    same->second = std::move(value);
  else
    metrics.emplace_back(std::move(name), std::move(value));
}

std::string number_text(const json::value& v) {
  if (v.is_int64()) return std::to_string(v.as_int64());
  if (v.is_uint64()) return std::to_string(v.as_uint64());
  return fmt::format("{}", v.as_double());  // the shortest text that reads back the same: 0.9, not 9E-1
}

parsed_progress parse_progress_body(std::string_view body) {
  parsed_progress out;
  auto refuse = [&](std::string why) {
    out.error = std::move(why);
    return out;
  };
  boost::system::error_code ec;
  json::parse_options opts;
  opts.max_depth = 8;
  auto doc = json::parse(body, ec, {}, opts);
  if (ec) return refuse("the body is not JSON (" + ec.message() + ")");
  if (!doc.is_object()) return refuse("the body is not a JSON object: send {\"trainerStatus\": {...}}");
  auto* ts = doc.as_object().if_contains("trainerStatus");
  if (!ts || !ts->is_object())
    return refuse(
        "the body has no trainerStatus object: send {\"trainerStatus\": {\"progressPercentage\": ...}}");
  const auto& st = ts->as_object();
  progress_report r;
  if (auto* p = st.if_contains("progressPercentage"); p && !p->is_null()) {
    auto d = number_of(*p);
    if (!d) return refuse("trainerStatus.progressPercentage is not a number; give 0 to 100");
    r.percent = percent_of(*d);
  }
  if (auto* e = st.if_contains("estimatedRemainingSeconds"); e && !e->is_null()) {
    auto d = number_of(*e);
    if (!d) return refuse("trainerStatus.estimatedRemainingSeconds is not a number; give the seconds left");
    r.remaining = remaining_of(*d);
  }
  if (auto* m = st.if_contains("metrics"); m && !m->is_null()) {
    if (!m->is_array())
      return refuse("trainerStatus.metrics is not a list; give [{\"name\": ..., \"value\": ...}]");
    const auto& list = m->as_array();
    std::size_t i = 0;
    for (const auto& item : list) {
      if (i == max_metrics) {
        out.dropped = list.size() - max_metrics;
        break;
      }
      auto where = fmt::format("trainerStatus.metrics[{}]", i++);
      if (!item.is_object()) return refuse(where + " is not an object; give {\"name\": ..., \"value\": ...}");
      const auto& mo = item.as_object();
      auto* name = mo.if_contains("name");
      if (!name || !name->is_string()) return refuse(where + ".name is missing or not a string");
      std::string n(name->as_string());
      if (auto why = text_problem(n, true); !why.empty())
        return refuse(fmt::format("{}.name {}; a metric's name is printable text, 1 to {} bytes", where, why,
                                  max_metric_bytes));
      std::string value;
      auto* v = mo.if_contains("value");
      if (v && v->is_string())
        value = std::string(v->as_string());
      else if (v && number_of(*v))
        value = number_text(*v);
      else
        return refuse(where + ".value (metric " + n + ") is missing or not a string or number");
      if (auto why = text_problem(value, false); !why.empty())
        return refuse(fmt::format("{}.value (metric {}) {}; a value is printable text of at most {} bytes",
                                  where, n, why, max_metric_bytes));
      put_metric(r.metrics, std::move(n), std::move(value));
    }
  }
  out.report = std::move(r);
  return out;
}

std::string progress_body(const progress_report& r) {
  json::object st;
  if (r.percent) st["progressPercentage"] = *r.percent;
  if (r.remaining) st["estimatedRemainingSeconds"] = *r.remaining;
  if (!r.metrics.empty()) {
    json::array list;
    for (const auto& [n, v] : r.metrics) list.push_back(json::object{{"name", n}, {"value", v}});
    st["metrics"] = std::move(list);
  }
  json::object body;
  body["trainerStatus"] = std::move(st);
  return json::serialize(body);
}

json::object progress_object(const progress_report& r) {
  json::object o;
  if (r.percent) o["progress_percent"] = *r.percent;
  if (r.remaining) o["estimated_remaining_seconds"] = *r.remaining;
  json::object m;
  for (const auto& [n, v] : r.metrics) m[n] = v;
  o["metrics"] = std::move(m);
  return o;
}

std::string progress_json(const progress_report& r) { return json::serialize(progress_object(r)); }

progress_report progress_from_json(std::string_view text) {
  boost::system::error_code ec;
  auto doc = json::parse(text, ec);
  return ec || !doc.is_object() ? progress_report{} : progress_from_json(doc.as_object());
}

progress_report progress_from_json(const json::object& o) {
  progress_report r;
  if (auto* p = o.if_contains("progress_percent"))
    if (auto d = number_of(*p)) r.percent = percent_of(*d);
  if (auto* e = o.if_contains("estimated_remaining_seconds"))
    if (auto d = number_of(*e)) r.remaining = remaining_of(*d);
  if (auto* m = o.if_contains("metrics"); m && m->is_object())
    for (const auto& kv : m->as_object()) {
      if (r.metrics.size() == max_metrics) break;
      if (kv.value().is_string())
        put_metric(r.metrics, std::string(kv.key()), std::string(kv.value().as_string()));
    }
  return r;
}

std::string progress_message(const progress_report& r) {
  std::string out;
  if (r.percent) out = fmt::format("{}%", *r.percent);
  if (r.remaining) {
    auto s = *r.remaining;
    std::string left = s >= 3600 ? fmt::format("{}h {}m", s / 3600, s % 3600 / 60)
                       : s >= 60 ? fmt::format("{}m {}s", s / 60, s % 60)
                                 : fmt::format("{}s", s);
    out += (out.empty() ? "" : ", ") + left + " left";
  }
  std::size_t shown = 0;
  for (const auto& [n, v] : r.metrics) {
    if (out.size() > 200) break;
    out += (shown == 0 ? (out.empty() ? "" : ": ") : " ") + n + "=" + v;
    ++shown;
  }
  if (shown < r.metrics.size()) out += fmt::format(" (and {} more metrics)", r.metrics.size() - shown);
  return out.empty() ? "progress reported (no fields)" : out;
}

void apply_progress(train_job& j, const progress_report& r, clock::time_point when) {
  j.progress_percent = r.percent;
  j.estimated_remaining_seconds = r.remaining;
  j.metrics = r.metrics;
  j.progress_updated = when;
}

void apply_progress(event& e, const progress_report& r) {
  e.progress_percent = r.percent;
  e.estimated_remaining_seconds = r.remaining;
  e.metrics = r.metrics;
}

bool progress_gate::take(std::chrono::steady_clock::time_point now) {
  if (refilled_) {
    double secs = std::chrono::duration<double>(now - *refilled_).count();
    tokens_ = std::min(burst, tokens_ + std::max(0.0, secs) * per_second);
  }
  refilled_ = now;
  if (tokens_ < 1) return false;
  tokens_ -= 1;
  return true;
}

bool progress_gate::record(std::chrono::steady_clock::time_point now, std::size_t bytes) {
  if (recorded_bytes_ + bytes > most_bytes) return false;
  if (recorded_ >= events) {
    const auto steps = std::min<std::size_t>((recorded_ - events) / per_step, max_doublings);
    if (now - last_recorded_ < thin_after * (std::int64_t{1} << steps)) return false;
  }
  ++recorded_;
  recorded_bytes_ += bytes;
  last_recorded_ = now;
  return true;
}

int progress_gate::retry_after() const {
  return static_cast<int>(std::ceil(std::max(0.0, 1 - tokens_) / per_second));
}

}  // namespace tjob::detail
