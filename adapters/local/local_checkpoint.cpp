// A cancel that warns the job first (cancel_options::checkpoint, `tjob cancel
// --checkpoint`): the job's warning signal now, then up to the warning's lead
// time for it to save and end by itself, then the usual cancel. The
// CancelRequested event comes first, so that an end by itself is a cancel's
// (the owner reads it at every exit: local_tree.cpp).
#include "adapters/local/local_impl.hpp"

#include "core/messages.hpp"
#include "core/spec_json.hpp"

#include <boost/json/parse.hpp>

#include <csignal>

namespace tjob::local {

namespace {

std::string cancel_text(const stop_warning& w, std::chrono::milliseconds grace) {
  return "cancel with checkpoint requested by process " + std::to_string(::getpid()) + ": SIG" +
         signal_name(w.signal) + " to the job's processes now, SIGTERM in " +
         std::to_string(w.before.count()) + " s unless it ends first, SIGKILL " +
         std::to_string(grace.count()) + " ms after";
}

}  // namespace

std::optional<stop_warning> engine_state::warning_of(const detail::job_row& row) const {
  boost::system::error_code ec;
  auto spec = boost::json::parse(row.spec, ec);
  if (ec || !spec.is_object()) return std::nullopt;
  const auto* w = spec.as_object().if_contains("warning");
  if (!w) return std::nullopt;
  try {
    return detail::warning_from_json(*w);
  } catch (const std::exception&) {
    return std::nullopt;  // (not a warning tjob wrote)
  }
}

asio::awaitable<void> engine_state::warn_owned(std::shared_ptr<job_rec> j,
                                               std::optional<std::chrono::milliseconds> grace) {
  if (is_terminal(j->row.status)) co_return;  // (as a plain cancel of an ended job: nothing to do)
  if (!j->warning) detail::throw_no_warning(j->row.name);
  const auto w = j->warning->warning;
  const auto text = cancel_text(w, grace.value_or(j->grace));
  transact([&](detail::store& db) {
    db.append_event(j->row.name, "", now_ms(), log_event::cancel_requested, text);
  });
  const auto when = "by a cancel with checkpoint; SIGTERM follows in " + std::to_string(w.before.count()) +
                    " s unless the job ends first";
  if (!send_warning(*j, when)) co_return;  // nothing of its code runs yet: nothing to save
  const auto deadline = steady::now() + w.before;
  detail::wake_signal wake(ex);
  detail::wake_registration reg(j->watchers, &wake);
  while (!is_terminal(j->row.status) && steady::now() < deadline) {
    check_running();
    co_await wake.wait_until(deadline);
  }
}

asio::awaitable<void> engine_state::warn_foreign(const detail::job_row& row,
                                                 std::chrono::milliseconds grace) {
  const auto w = warning_of(row);
  if (!w) detail::throw_no_warning(row.name);
  transact([&](detail::store& db) {
    db.append_event(row.name, "", now_ms(), log_event::cancel_requested, cancel_text(*w, grace));
  });
  // Every process of the job's steps that run (a step still in its setup
  // ends of it, and is then cancelled: it has nothing to save).
  if (signal_running_steps(row, w->signal) == 0) co_return;
  transact([&](detail::store& db) {
    db.append_event(row.name, "", now_ms(), log_event::warned,
                    "SIG" + signal_name(w->signal) +
                        " sent to the job's processes by a cancel with checkpoint " + "(process " +
                        std::to_string(self_pid) + "); SIGTERM follows in " +
                        std::to_string(w->before.count()) + " s unless the job ends first");
  });
  foreign_watch fw(*this, row, false);
  const auto deadline = steady::now() + w->before;
  for (;;) {
    check_running();
    auto r = load_fresh(row.name);
    if (!r || is_terminal(r->status)) co_return;
    if (!co_await fw.wait_until(deadline)) co_return;
  }
}

}  // namespace tjob::local
