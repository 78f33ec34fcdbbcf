// A sweep's owner (sweep_trials.hpp's drive_sweep): the loop that follows
// its trials, ends it, plans and submits the next ones.
//
// The owner keeps at most parallel_trials trials that have not ended; each
// round it follows them (one list of the jobs), records what ended (metrics
// from the job's Progress events and its stdout), ends the sweep when
// max_failed_trials is passed or the last trial has ended, makes the next
// trials' parameters and submits them, then waits for a job to change. A
// trial's parameters are recorded (Pending) before it is submitted, so an
// owner that dies leaves nothing unknown: a Pending trial whose job exists
// was submitted and is followed, one without a job is submitted then.
#include "engine/sweep_trials.hpp"

#include "core/sweep_search.hpp"
#include "engine/sweep_record.hpp"

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <exception>
#include <filesystem>
#include <functional>
#include <future>
#include <map>

namespace tjob::detail {

namespace {

constexpr auto owner_wake = std::chrono::seconds(30);  // a backstop: a trial's change wakes it first
constexpr auto save_every = std::chrono::milliseconds(100);
constexpr std::size_t finish_lanes = 4;  // threads reading ended trials' metrics

// An owner's descriptor, closed when it goes.
struct owner_fd {
  int fd = -1;
  ~owner_fd() {
    if (fd >= 0) ::close(fd);
  }
};

class owner {
 public:
  owner(trainer_client& client, std::string name) : client_(client), name_(std::move(name)) {
    dir_ = sweep_dir(client.home(), name_);
  }

  // Drives the sweep to its end. `started` is called once the first round's
  // trials are submitted; a trial refused before it (a bad template) is
  // thrown instead, nothing of the sweep's jobs left.
  sweep_job drive(const std::function<void()>& started) {
    claim();
    auto rec = read_record(dir_);
    if (!rec) throw error(errc::job_not_found, "sweep " + name_ + ": no such sweep");
    s_ = std::move(*rec);
    if (sweep_ended(s_.status)) {
      if (started) started();
      return s_;
    }
    const auto caps = client_.job_backend();
    arrays_ = caps.arrays;
    needs_owner_ = caps.needs_owner;
    total_ = sweep_trial_count(s_.request);
    const bool fresh = s_.trials.empty();
    s_.status = "Running";
    s_.owned = true;
    auto known = client_.list_jobs();
    bool dirty = false;
    for (bool first = true;; first = false) {
      bool changed = follow(known) || first;
      if (auto over = too_many_failed()) {
        end("Failed", *over);
        break;
      }
      if (plan() && !save()) break;
      changed = submit(first && started && fresh) || changed;
      if (first && started) started();
      if (not_ended() == 0 && static_cast<int>(s_.trials.size()) >= total_) {
        if (auto b = best_trial(s_))
          end("Complete", "");
        else
          end("Failed", s_.trials.empty() ? "no trial"
                                          : "no trial reported the objective '" + primary(s_.request).metric +
                                                "': " + failed_list(s_, 3));
        break;
      }
      // At most one write per save_every while trials change (a sweep of a
      // thousand short trials would otherwise write its record a thousand
      // times); a cancel or a delete from outside is seen on every round.
      dirty = dirty || changed;
      const auto since = std::chrono::steady_clock::now() - last_save_;
      if (ended_outside() || (dirty && since >= save_every)) {
        if (!save()) break;
        dirty = false;
      }
      const auto wake = dirty ? std::chrono::duration_cast<std::chrono::milliseconds>(save_every - since)
                              : std::chrono::milliseconds(owner_wake);
      known = client_.wait_for_jobs_change(known, std::nullopt, std::max(wake, std::chrono::milliseconds(1)));
    }
    s_.owned = false;
    return s_;
  }

 private:
  // Takes the sweep's owner lock, or says who holds it.
  void claim() {
    owned_.fd = take_owner(dir_);
    if (owned_.fd >= 0) {  // who owns it, for a person (the lock is what counts)
      const auto pid = std::to_string(::getpid()) + "\n";
      if (::ftruncate(owned_.fd, 0) != 0 || ::pwrite(owned_.fd, pid.data(), pid.size(), 0) < 0) {
      }
    }
    if (owned_.fd < 0)
      throw error(errc::invalid_argument, "sweep " + name_ +
                                              " has an owner already (another process drives it); "
                                              "tjob get " +
                                              name_ + " follows it");
  }

  int not_ended() const {
    int n = 0;
    for (const auto& t : s_.trials) n += !trial_ended(t.status);
    return n;
  }

  // Every trial not ended, against the jobs as listed.
  bool follow(const std::vector<train_job>& jobs) {
    std::map<std::string_view, const train_job*> by_name;
    for (const auto& j : jobs) by_name.emplace(j.name, &j);
    bool changed = false;
    std::vector<std::pair<sweep_trial*, const train_job*>> ended, watched;
    for (auto& t : s_.trials) {
      if (trial_ended(t.status)) continue;
      auto it = by_name.find(t.name);
      if (it == by_name.end()) {
        if (t.status == "Pending") continue;  // not submitted yet (an owner died first)
        if (gone(t)) changed = true;
      } else if (is_terminal(it->second->status)) {
        ended.emplace_back(&t, it->second);
      } else {
        changed = follow_trial(s_.request, t, *it->second) || changed;
        if (s_.request.early_stopping) watched.emplace_back(&t, it->second);
      }
    }
    finish_all(ended);
    changed = changed || !ended.empty();
    changed = stop_hopeless(watched) || changed;
    auto b = best_trial(s_);
    changed = changed || b != s_.best;
    s_.best = b;
    return changed;
  }

  // The median stopping rule, for each running trial that has reported since
  // it was last judged (the trials that ended this round already count): a
  // trial judged hopeless keeps its verdict as its reason and is cancelled,
  // off this thread (a cancel waits out the job's grace); its end makes it
  // Complete (finish_trial). A verdict found in the record (an owner died
  // before the cancel ended) is carried out again.
  bool stop_hopeless(const std::vector<std::pair<sweep_trial*, const train_job*>>& running) {
    bool changed = false;
    for (auto [t, job] : running) {
      if (stopping_.contains(t->name)) continue;
      if (!early_stopped(*t)) {
        if (!job->progress_updated) continue;
        auto& seen = judged_[t->name];
        if (seen == *job->progress_updated) continue;
        seen = *job->progress_updated;
        auto verdict = median_stop_check(client_, s_, *t);
        if (verdict.empty()) continue;
        t->reason = std::move(verdict);
        changed = true;
      }
      judged_.erase(t->name);
      stopping_[t->name] = std::async(std::launch::async, [this, name = t->name] {
        try {
          client_.cancel_job(name);
        } catch (const error&) {  // it ended first, or went
        }
      });
    }
    return changed;
  }

  // A trial whose job the list did not show: asked for by name (a backend's
  // list is not one atomic read), and Failed only when it is truly gone.
  bool gone(sweep_trial& t) {
    try {
      auto job = client_.get_job(t.name);
      if (is_terminal(job.status)) {
        finish_trial(client_, s_.request, t, job);
        return true;
      }
      return follow_trial(s_.request, t, job);
    } catch (const error& e) {
      if (e.code() != errc::job_not_found) throw;
    }
    t.status = "Failed";
    t.reason = "its job was deleted";
    return true;
  }

  // Reads the ended trials' metrics, a few at once: each read is a round trip
  // to the engine's thread (its cost is mostly the hop), and a thousand short
  // trials end together.
  void finish_all(const std::vector<std::pair<sweep_trial*, const train_job*>>& ended) {
    const std::size_t lanes = std::min<std::size_t>(finish_lanes, ended.size());
    auto lane = [&](std::size_t k) {
      for (std::size_t i = k; i < ended.size(); i += lanes)
        finish_trial(client_, s_.request, *ended[i].first, *ended[i].second);
    };
    if (lanes <= 1) {
      if (lanes == 1) lane(0);
      return;
    }
    std::vector<std::future<void>> others;
    for (std::size_t k = 1; k < lanes; ++k) others.push_back(std::async(std::launch::async, lane, k));
    std::exception_ptr failure;
    try {
      lane(0);
    } catch (...) {
      failure = std::current_exception();
    }
    for (auto& f : others) try {
        f.get();
      } catch (...) {
        if (!failure) failure = std::current_exception();
      }
    if (failure) std::rethrow_exception(failure);
  }

  std::optional<std::string> too_many_failed() const {
    if (!s_.request.max_failed_trials) return std::nullopt;
    int failed = 0;
    for (const auto& t : s_.trials) failed += t.status == "Failed";
    if (failed <= *s_.request.max_failed_trials) return std::nullopt;
    return std::to_string(failed) + " trials failed, more than max_failed_trials " +
           std::to_string(*s_.request.max_failed_trials) + ": " + failed_list(s_, 5);
  }

  // The next trials' parameters, recorded before they are submitted. Where
  // they do not depend on the trials' results (random, grid), the backend
  // holds an array to its limit and no failure budget may stop the sweep,
  // every trial at once: the sweep is then the array, its trials admitted as
  // the array's members are. Otherwise as many as may run.
  bool plan() {
    std::vector<observation> done;
    const double sign = primary(s_.request).maximize ? -1 : 1;
    for (const auto& t : s_.trials)
      if (t.status == "Complete" && t.objective) done.push_back({t.parameters, sign * *t.objective});
    // (with a failure budget, as many as may run: a trial that would start
    // after the budget is spent is never made)
    const bool all_at_once = arrays_ && s_.request.algorithm != "tpe" && !s_.request.max_failed_trials;
    bool changed = false;
    for (int open = not_ended();
         (all_at_once || open < s_.request.parallel_trials) && static_cast<int>(s_.trials.size()) < total_;
         ++open) {
      sweep_trial t;
      t.index = static_cast<int>(s_.trials.size());
      t.name = s_.name + "-" + std::to_string(t.index);
      t.parameters = sweep_parameters(s_.request, *s_.request.seed, t.index, done);
      s_.trials.push_back(std::move(t));
      changed = true;
    }
    return changed;
  }

  // Submits every Pending trial, together: where the backend needs an owner,
  // a supervising process of their own owns them (train_detached), so they
  // run on when this owner dies. Before the sweep is started (`refuse`), a
  // refusal (a bad template) is thrown, nothing of it submitted.
  bool submit(bool refuse) {
    std::vector<train_request> batch;
    std::vector<sweep_trial*> trials;
    for (auto& t : s_.trials)
      if (t.status == "Pending") {
        batch.push_back(trial_request(s_, t, arrays_));
        trials.push_back(&t);
      }
    if (batch.empty()) return false;
    try {
      if (needs_owner_) {
        (void)train_detached(batch, client_.config());
      } else {
        for (std::size_t i = 0; i < batch.size(); ++i) {
          client_.train(batch[i]);
          trials[i]->status = "Created";
        }
      }
      for (auto* t : trials) t->status = "Created";
    } catch (const error& e) {
      if (refuse && usage_class(e)) {
        for (auto* t : trials)
          if (t->status == "Created") try {
              client_.delete_job(t->name);
            } catch (const error&) {
            }
        throw error(e.code(), "sweep " + s_.name + ": trial_template: " + e.what(), e.diagnostics());
      }
      for (auto* t : trials)
        if (t->status == "Pending") {
          t->status = "Failed";
          t->reason = std::string("not submitted: ") + e.what();
        }
    }
    return true;
  }

  void end(const std::string& status, const std::string& reason) {
    cancel_open();
    s_.status = status;
    s_.reason = reason;
    s_.end_time = clock::now();
    s_.best = best_trial(s_);
    save();
  }

  void cancel_open() {
    std::vector<std::string> open;
    for (const auto& t : s_.trials)
      if (!trial_ended(t.status) && t.status != "Pending") open.push_back(t.name);
    try {
      client_.cancel_jobs(open);
    } catch (const error&) {  // gone already
    }
    for (auto& t : s_.trials) {
      if (trial_ended(t.status)) continue;
      if (t.status == "Pending") {
        t.status = "Failed";
        t.reason = "cancelled before it was submitted";
        continue;
      }
      try {
        auto job = client_.get_job(t.name);
        if (is_terminal(job.status)) finish_trial(client_, s_.request, t, job);
      } catch (const error&) {
        t.status = "Failed";
        t.reason = "its job was deleted";
      }
    }
  }

  // A cancel (the `cancelled` marker) or a delete (no record) from outside:
  // two looks at the directory, no read of the record.
  bool ended_outside() const {
    std::error_code ec;
    return std::filesystem::exists(dir_ / "cancelled", ec) ||
           !std::filesystem::exists(dir_ / "sweep.json", ec);
  }

  // Writes the record; false when someone else ended it (a cancel) or
  // removed it (a delete): then the trials that run are cancelled.
  bool save() {
    std::optional<record_lock> lock(std::in_place, dir_);
    std::error_code ec;
    if (!std::filesystem::exists(dir_ / "sweep.json", ec)) {
      lock.reset();
      stopped_ = true;
      cancel_open();
      return false;
    }
    // A cancel recorded before this owner ended the sweep wins, whatever the
    // trials' ends (cancelled) made of it here.
    if (std::filesystem::exists(dir_ / "cancelled", ec) && s_.reason != "cancelled") {
      const bool ending = sweep_ended(s_.status);
      s_.status = "Failed";
      s_.reason = "cancelled";
      if (!s_.end_time) s_.end_time = clock::now();
      if (ending) {  // (end() has stopped what ran)
        write_record(dir_, s_);
        return false;
      }
      lock.reset();
      cancel_open();
      std::optional<record_lock> again(std::in_place, dir_);
      if (std::filesystem::exists(dir_ / "sweep.json", ec)) write_record(dir_, s_);
      return false;
    }
    write_record(dir_, s_);
    last_save_ = std::chrono::steady_clock::now();
    return !stopped_;
  }

  trainer_client& client_;
  std::string name_;
  std::filesystem::path dir_;
  owner_fd owned_;
  sweep_job s_;
  bool arrays_ = false, needs_owner_ = false, stopped_ = false;
  std::chrono::steady_clock::time_point last_save_{};
  int total_ = 0;
  std::map<std::string, clock::time_point> judged_;    // a running trial's last report judged
  std::map<std::string, std::future<void>> stopping_;  // cancels under way (joined when the owner goes)
};

}  // namespace

sweep_job drive_sweep(trainer_client& client, const std::string& name, const std::function<void()>& started) {
  owner o(client, name);
  return o.drive(started);
}

}  // namespace tjob::detail
