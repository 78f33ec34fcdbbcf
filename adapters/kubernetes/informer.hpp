// List, then watch: a local copy of one kind of object (in one namespace,
// matching a label selector), kept current by one watch connection however
// many jobs it serves. The watch resumes from the last resourceVersion when
// the server ends it, relists when the version has expired (410), and backs
// off on errors. Waiters register in `waiters()` and are woken on every change.
//
// Threading: the executor it was made on.
// Errors: none thrown; the last failure is in last_error() and the log.
#pragma once

#include "adapters/kubernetes/kube_api.hpp"
#include "core/task_group.hpp"
#include "core/wake.hpp"

#include <boost/json/object.hpp>

#include <map>
#include <memory>
#include <string>

namespace spdlog {
class logger;
}

namespace tjob::kube {

class informer {
 public:
  informer(boost::asio::any_io_executor ex, std::shared_ptr<api> a, std::string collection_path,
           std::string label_selector, std::string what, std::shared_ptr<spdlog::logger> log);
  ~informer();
  informer(const informer&) = delete;
  informer& operator=(const informer&) = delete;

  /// Starts listing and watching (once), a task of `owner`, which must
  /// outlive it: stop() ends it, and the owner's join() awaits that.
  void start(detail::task_group& owner);
  void stop();
  bool synced() const;
  const std::map<std::string, boost::json::object>& items() const;
  detail::wake_list& waiters();
  /// The last failure of the list or watch, empty when the watch is up.
  const std::string& last_error() const;
  std::uint64_t lists() const;    ///< lists done (the first, and each relist)
  std::uint64_t watches() const;  ///< watch connections opened

  struct state;

 private:
  std::shared_ptr<state> s_;
};

}  // namespace tjob::kube
