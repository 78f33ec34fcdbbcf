// The kubernetes backend (kube_backend.hpp): its registration, and the driver
// interface over its state (kube_impl.hpp).
#include "adapters/kubernetes/kube_impl.hpp"

namespace tjob::kube {

namespace {

// A waiter's view of one job, through the two watches (TrainJobs and their
// pods) that every waiter shares. The job is read directly each time: the
// watches need not agree at every moment (the job's condition may arrive
// before its pod's phase); they only say when to read again.
class kube_watch final : public detail::job_watch {
 public:
  kube_watch(std::shared_ptr<backend::impl> b, std::string name) : b_(std::move(b)), name_(std::move(name)) {}

  asio::awaitable<std::optional<train_job>> current() override {
    if (read_) {
      auto job = co_await b_->find(name_);
      if (!job && job.error().code == errc::job_not_found)
        fail(errc::job_not_found,
             "TrainJob " + quote(name_) + " was deleted from " + b_->where + " while it was waited for");
      // The watches said it changed, and it did not (yet): wait for a change.
      after_change_ = same_state(job.value(), last_);
      last_ = *job;
      co_return std::move(*job);
    }
    // The first read: a job that is not there is an error now, and a
    // runtime's node count is known before the watches answer.
    read_ = true;
    auto job = co_await b_->get(name_);
    last_ = job;
    co_return job;
  }

  // Any change of the job's state wakes the waiter, not only its status: a
  // step's, or a progress report (wait_for_job_change).
  asio::awaitable<bool> changed(steady::time_point deadline) override {
    bool ok = co_await b_->watch_until(
        name_, deadline, [&](const std::optional<train_job>& j) { return !j || !same_state(*j, last_); },
        after_change_);
    co_return ok;
  }

  std::string trouble() const override { return b_->watch_trouble(); }

 private:
  std::shared_ptr<backend::impl> b_;
  std::string name_;
  train_job last_;  // as last read
  bool read_ = false, after_change_ = false;
};

}  // namespace

backend::backend(detail::backend_context ctx)
    : detail::backend(ctx), impl_(std::make_shared<impl>(std::move(ctx))) {}
backend::~backend() {
  if (impl_) {
    impl_->stopping = true;
    if (impl_->jobs_inf) impl_->jobs_inf->stop();
    if (impl_->pods_inf) impl_->pods_inf->stop();
  }
}

namespace {

backend_capabilities capabilities_of() {
  backend_capabilities c;
  c.id = "kubernetes";
  c.queued_by = "cluster, where Kueue queues them";
  c.keeps_labels = true;
  c.takes_image = true;
  c.runs_images_as_is = true;
  return c;
}

}  // namespace

backend_capabilities backend::capabilities() const { return capabilities_of(); }

kubernetes_backend_config config_of(const boost::json::object& config,
                                    const std::function<std::string(std::string_view)>& name_of) {
  detail::config_reader r{config, name_of, "kubernetes"};
  r.only({"namespace", "config_file", "context", "request_timeout_ms", "in_cluster_dir"});
  kubernetes_backend_config c;
  if (auto v = r.text("namespace")) c.namespace_name = *v;
  if (auto v = r.text("config_file")) c.config_file = *v;
  if (auto v = r.text("context")) c.context = *v;
  if (auto v = r.number("request_timeout_ms", 1)) c.request_timeout = std::chrono::milliseconds(*v);
  if (auto v = r.text("in_cluster_dir")) c.in_cluster_dir = *v;
  return c;
}

detail::backend_registration registration() {
  using kind = backend_option::value_kind;
  detail::backend_registration r;
  r.description.id = "kubernetes";
  r.description.summary = "kubernetes";
  r.description.capabilities = capabilities_of();
  r.description.options = {
      {"namespace", "--namespace",
       "Kubernetes backend: the namespace; default: the kubeconfig context's, else default", kind::text},
      {"context", "--context", "Kubernetes backend: the kubeconfig context; default: its current-context",
       kind::text},
      {"config_file", "--kubeconfig",
       "Kubernetes backend: the kubeconfig file; default: $KUBECONFIG, else ~/.kube/config (in a pod: the "
       "service account)",
       kind::path},
  };
  r.check = [](const boost::json::object& c, const std::function<std::string(std::string_view)>& name_of) {
    config_of(c, name_of);
  };
  r.make = [](detail::backend_context ctx) -> std::shared_ptr<detail::backend> {
    return std::make_shared<backend>(std::move(ctx));
  };
  return r;
}

asio::awaitable<std::string> backend::train(detail::checked_request request) {
  co_return co_await impl_->train(std::move(request));
}
asio::awaitable<train_job> backend::get_job(std::string name) { co_return co_await impl_->get(name); }
asio::awaitable<std::vector<train_job>> backend::list_jobs(std::optional<std::string> runtime) {
  co_return co_await impl_->list(std::move(runtime));
}
asio::awaitable<log_stream> backend::get_job_logs(std::string name, log_options options) {
  co_return co_await impl_->logs(name, options);
}
asio::awaitable<std::unique_ptr<detail::job_watch>> backend::watch_job(std::string name) {
  co_return std::make_unique<kube_watch>(impl_, std::move(name));
}

namespace {

// The TrainJob and pod informers wake their waiters on every watch event.
class kube_changes final : public detail::change_watch {
 public:
  explicit kube_changes(std::shared_ptr<backend::impl> b) : b_(std::move(b)), sig_(b_->ctx.ex) {
    b_->ensure_watches();
    r1_.emplace(b_->jobs_inf->waiters(), &sig_);
    r2_.emplace(b_->pods_inf->waiters(), &sig_);
  }

  asio::awaitable<bool> changed(steady::time_point deadline) override {
    b_->check_running();
    co_return co_await sig_.wait_until(deadline);
  }

 private:
  std::shared_ptr<backend::impl> b_;
  detail::wake_signal sig_;
  std::optional<detail::wake_registration> r1_, r2_;
};

}  // namespace

asio::awaitable<std::unique_ptr<detail::change_watch>> backend::watch_all() {
  co_return std::make_unique<kube_changes>(impl_);
}
// `force` changes nothing here: suspending the TrainJob deletes its pods, and
// the kubelet gives them the pod's own terminationGracePeriodSeconds.
asio::awaitable<void> backend::cancel_job(std::string name, cancel_options) { co_await impl_->cancel(name); }
asio::awaitable<void> backend::delete_job(std::string name) { co_await impl_->remove(name); }
asio::awaitable<std::vector<event>> backend::get_job_events(std::string name) {
  co_return co_await impl_->job_events(name);
}
asio::awaitable<void> backend::shutdown() { co_await impl_->shutdown(); }
asio::awaitable<std::shared_ptr<const detail::runtime_catalog>> backend::runtimes(bool) {
  auto found = co_await impl_->cluster_runtimes();
  co_return std::make_shared<const detail::runtime_catalog>(impl_->catalog(std::move(found).value()));
}

}  // namespace tjob::kube
