#include "serve/watch_hub.hpp"

#include <tjob/wire.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>

namespace tjob::serve {

namespace asio = boost::asio;

namespace {

std::int64_t start_seq() {
  return std::chrono::duration_cast<std::chrono::microseconds>(clock::now().time_since_epoch()).count();
}

std::string line_of(std::int64_t seq, const char* type, const train_job& job) {
  boost::json::object o;
  o["seq"] = seq;
  o["type"] = type;
  o["job"] = to_json(job);
  return boost::json::serialize(o) + "\n";
}

}  // namespace

watch_hub::watch_hub(engine& e, std::size_t history)
    : engine_(e), history_(history), head_(start_seq()), wake_(e.get_executor()) {
  wake_.expires_at(asio::steady_timer::time_point::max());
}

void watch_hub::publish(const char* type, const train_job& job) {
  ++head_;
  ring_.push_back(line{head_, job.runtime, std::make_shared<const std::string>(line_of(head_, type, job))});
  while (ring_.size() > history_) ring_.pop_front();
}

asio::awaitable<void> watch_hub::load() {
  known_ = co_await engine_.list_jobs();
  for (auto& j : known_) jobs_[j.name] = kept_job{j, round_};
}

asio::awaitable<void> watch_hub::run() {
  std::vector<train_job> known = std::move(known_);
  while (!stopped_) {
    auto wait = engine_.wait_for_jobs_change(known, std::nullopt, std::chrono::minutes(10));
    std::vector<train_job> now;
    try {
      now = co_await asio::co_spawn(engine_.get_executor(), std::move(wait),
                                    asio::bind_cancellation_slot(cancel_.slot(), asio::use_awaitable));
    } catch (const std::exception&) {
      if (stopped_) break;
      throw;
    }
    if (stopped_) break;
    // In place: a job that did not change is neither copied nor encoded.
    ++round_;
    bool any = false;
    for (const auto& j : now) {
      auto [it, added] = jobs_.try_emplace(j.name);
      auto& kept = it->second;
      if (added) {
        kept.job = j;
        publish("ADDED", j);
        if (on_change) on_change(nullptr, &kept.job);
        any = true;
      } else if (!same_state(kept.job, j)) {
        publish("MODIFIED", j);
        if (on_change) on_change(&kept.job, &j);
        kept.job = j;
        any = true;
      }
      kept.round = round_;
    }
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      if (it->second.round == round_) {
        ++it;
        continue;
      }
      publish("DELETED", it->second.job);
      if (on_change) on_change(&it->second.job, nullptr);
      any = true;
      it = jobs_.erase(it);
    }
    known = std::move(now);
    if (any) wake_.cancel();  // every changed() returns
  }
}

void watch_hub::stop() {
  stopped_ = true;
  cancel_.emit(asio::cancellation_type::terminal);
  wake_.cancel();
}

std::vector<watch_hub::line> watch_hub::snapshot() const {
  std::vector<line> out;
  for (const auto& [name, k] : jobs_)
    out.push_back(
        line{head_, k.job.runtime, std::make_shared<const std::string>(line_of(head_, "ADDED", k.job))});
  return out;
}

std::vector<const train_job*> watch_hub::jobs() const {
  std::vector<const train_job*> out;
  for (const auto& [name, k] : jobs_) out.push_back(&k.job);
  return out;
}

std::optional<std::vector<watch_hub::line>> watch_hub::since(std::int64_t seq) const {
  if (seq > head_) return std::nullopt;
  std::int64_t oldest_known = ring_.empty() ? head_ : ring_.front().seq - 1;
  if (seq < oldest_known) return std::nullopt;
  // the ring is in seq order: the first line after `seq` by bisection, not by walking it
  auto first = std::upper_bound(ring_.begin(), ring_.end(), seq,
                                [](std::int64_t s, const line& l) { return s < l.seq; });
  return std::vector<line>(first, ring_.end());
}

asio::awaitable<void> watch_hub::changed(std::int64_t seq) {
  if (head_ > seq || stopped_) co_return;
  boost::system::error_code ec;  // the hub's wake and the caller's cancel alike
  co_await wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
}

}  // namespace tjob::serve
