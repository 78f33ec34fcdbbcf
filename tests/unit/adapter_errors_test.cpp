// Failures inside the adapters are values with a code of the adapter's own:
// these cases decide on them the way the backends do, against real peers of
// the smallest kind (the kernel for spawn, a unix socket that answers with
// canned bytes for HTTP and the Docker API), and check what the API's edge
// throws for them.
#include "adapters/container/docker_api.hpp"
#include "adapters/http/http_client.hpp"
#include "adapters/process/proc_info.hpp"
#include "adapters/process/process_adapter.hpp"
#include "core/messages.hpp"
#include "core/outcome.hpp"
#include "tests/support/test_support.hpp"

#include <tjob/error.hpp>

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/write.hpp>

#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>

#include <sys/stat.h>

using namespace tjob;
namespace asio = boost::asio;
using local = asio::local::stream_protocol;
using detail::errc_of;

namespace {

// Answers each connection on a unix socket with the next canned answer, after
// reading the request's head and body. It owns its coroutine: the destructor
// closes the acceptor and runs `io` until the coroutine has ended.
class canned_server {
 public:
  canned_server(asio::io_context& io, std::vector<std::string> answers)
      : io_(io), path_((dir_.path() / "s.sock").string()), acceptor_(io, local::endpoint(path_)) {
    asio::co_spawn(io, serve(std::move(answers)), [this](std::exception_ptr) { ended_ = true; });
  }
  canned_server(const canned_server&) = delete;
  canned_server& operator=(const canned_server&) = delete;
  ~canned_server() {
    boost::system::error_code ec;
    acceptor_.close(ec);  // a pending accept ends with operation_aborted
    while (!ended_) {
      if (io_.stopped()) io_.restart();
      io_.run_one();
    }
  }
  http::endpoint endpoint() const {
    http::endpoint ep;
    ep.path = path_;
    return ep;
  }
  /// The request lines received, in order.
  const std::vector<std::string>& requests() const { return requests_; }

 private:
  asio::awaitable<void> serve(std::vector<std::string> answers) {
    for (auto& answer : answers) {
      boost::system::error_code ec;
      auto peer = co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      std::string in;
      auto dyn = asio::dynamic_buffer(in);
      auto head = co_await asio::async_read_until(peer, dyn, "\r\n\r\n",
                                                  asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      requests_.push_back(in.substr(0, in.find("\r\n")));
      auto cl = in.find("Content-Length: ");
      std::size_t body = cl == std::string::npos || cl > head ? 0 : std::stoul(in.substr(cl + 16));
      if (in.size() < head + body) {
        auto rest = asio::transfer_exactly(head + body - in.size());  // (named: g++ 12)
        co_await asio::async_read(peer, dyn, rest, asio::redirect_error(asio::use_awaitable, ec));
      }
      co_await asio::async_write(peer, asio::buffer(answer), asio::redirect_error(asio::use_awaitable, ec));
      peer.shutdown(local::socket::shutdown_both, ec);
    }
  }

  asio::io_context& io_;
  bool ended_ = false;
  tjob::test::temp_dir dir_;
  std::string path_;
  local::acceptor acceptor_;
  std::vector<std::string> requests_;
};

std::string answer(unsigned status, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) +
         " X\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

// Runs `io` until the coroutine `f` has ended (the server's accept stays
// pending) and returns what it returned.
template <class T>
T run(asio::io_context& io, asio::awaitable<T> f) {
  auto done = asio::co_spawn(io, std::move(f), asio::use_future);
  while (done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    if (io.stopped()) io.restart();  // it ran out of work before f was spawned
    io.run_one();
  }
  return done.get();
}

}  // namespace

TEST_CASE(
    "a failure's code means a tjob::errc, and the edge throws that error with the message and the peer's "
    "words") {
  detail::failure f(http::http_errc::timed_out, "GET /x at unix:///s timed out", "peer words");
  CHECK(errc_of(f.code) == errc::backend_unavailable);
  CHECK(detail::means(f.code, errc::backend_unavailable));
  CHECK_FALSE(detail::means(f.code, errc::protocol_error));
  CHECK(errc_of(make_error_code(errc::duplicate_name)) == errc::duplicate_name);
  // a code no adapter owns is a refusal, not silence
  CHECK(errc_of(boost::system::error_code(EIO, boost::system::generic_category())) == errc::backend_error);
  detail::outcome<int> failed = detail::prefixed(f, "TrainJob 'a': ");
  try {
    (void)failed.value();
    FAIL("value() of a failure did not throw");
  } catch (const tjob::error& e) {
    CHECK(e.code() == errc::backend_unavailable);
    CHECK(std::string(e.what()) == "TrainJob 'a': GET /x at unix:///s timed out");
    CHECK(e.diagnostics() == "peer words");
  }
  CHECK(std::string(http::http_category().name()) == "http");
  CHECK(http::http_category().message(static_cast<int>(http::http_errc::too_large)) == "answer over a limit");
}

TEST_CASE("spawn says which step failed: no such program, not executable, a bad cwd, a log it cannot open") {
  tjob::test::temp_dir dir;
  asio::io_context io;
  auto spec = [&](std::string exe) {
    process::spawn_spec s;
    s.executable = exe;
    s.argv = {exe};
    s.stdout_path = (dir.path() / "log").string();
    return s;
  };
  auto missing = process::child::spawn(io.get_executor(), spec((dir.path() / "nope").string()));
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().code == process::process_errc::not_found);
  CHECK(errc_of(missing.error().code) == errc::executable_not_found);
  CHECK(missing.error().diagnostics == std::strerror(ENOENT));
  CHECK(missing.error().message.find((dir.path() / "nope").string()) != std::string::npos);

  auto text = dir.path() / "text";
  std::ofstream(text) << "not a program\n";
  ::chmod(text.c_str(), 0644);
  auto denied = process::child::spawn(io.get_executor(), spec(text.string()));
  REQUIRE_FALSE(denied.has_value());
  CHECK(denied.error().code == process::process_errc::not_permitted);

  auto s = spec("/bin/true");
  s.cwd = (dir.path() / "no-such-dir").string();
  auto bad_cwd = process::child::spawn(io.get_executor(), s);
  REQUIRE_FALSE(bad_cwd.has_value());
  CHECK(bad_cwd.error().code == process::process_errc::bad_cwd);
  CHECK(errc_of(bad_cwd.error().code) == errc::spawn_failed);
  CHECK(bad_cwd.error().message.find("cannot enter " + s.cwd) != std::string::npos);

  s = spec("/bin/true");
  s.stdout_path = (dir.path() / "no-such-dir" / "log").string();
  auto no_log = process::child::spawn(io.get_executor(), s);
  REQUIRE_FALSE(no_log.has_value());
  CHECK(no_log.error().code == process::process_errc::log_unopenable);
  CHECK(no_log.error().message.find("cannot open its log " + s.stdout_path) != std::string::npos);

  auto ok = process::child::spawn(io.get_executor(), spec("/bin/true"));
  REQUIRE(ok.has_value());
  CHECK(ok->pid() > 0);
}

TEST_CASE("reap of a child that has not exited says so on a non-blocking pidfd, then reaps it once it has") {
  tjob::test::temp_dir dir;
  asio::io_context io;
  tjob::test::gate g;
  process::spawn_spec s;
  s.executable = tjob::test::helper_bin();
  s.argv = {s.executable, "read-fifo", g.path(), "exit", "3"};
  s.stdout_path = (dir.path() / "log").string();
  auto c = process::child::spawn(io.get_executor(), s);
  REQUIRE(c.has_value());
  // As asio leaves it once an operation has made it non-blocking: a wake-up
  // that was not the exit finds nothing to reap, and that is no failure.
  c->exit_signal().non_blocking(true);
  auto early = c->reap();
  REQUIRE(early.has_value());
  CHECK_FALSE(early->has_value());
  g.release();
  c->exit_signal().non_blocking(false);
  auto reaped = c->reap();
  REQUIRE(reaped.has_value());
  REQUIRE(reaped->has_value());
  CHECK((*reaped)->code == 3);
}

TEST_CASE("a child's start time is the one /proc/<pid>/stat gives, which other processes check it by") {
  // spawn() knows it from the clock around the clone when no tick boundary
  // fell within it; either way it must be exactly what /proc says, or a
  // reconciling process would take the live job for a lost one.
  tjob::test::temp_dir dir;
  asio::io_context io;
  for (int i = 0; i < 100; ++i) {
    process::spawn_spec s;
    s.executable = "/bin/sleep";
    s.argv = {s.executable, "60"};
    s.stdout_path = (dir.path() / "log").string();
    auto c = process::child::spawn(io.get_executor(), s);
    REQUIRE(c.has_value());
    auto from_proc = process::start_time(c->pid());
    CHECK(c->signal_group(SIGKILL));
    REQUIRE(from_proc.has_value());
    CHECK(c->start_time() == *from_proc);
    auto reaped = c->reap();
    REQUIRE(reaped.has_value());
  }
}

TEST_CASE(
    "the HTTP client's failures: no socket, an answer that is not HTTP, one closed early, one too big") {
  asio::io_context io;
  tjob::test::temp_dir dir;
  http::endpoint nowhere;
  nowhere.path = (dir.path() / "nobody.sock").string();
  http::client to_nowhere(io.get_executor(), nowhere);
  http::request r;
  r.target = "/x";
  auto refused = run(io, to_nowhere.send(r));
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == http::http_errc::connect_failed);
  CHECK(errc_of(refused.error().code) == errc::backend_unavailable);
  CHECK(refused.error().message.find(nowhere.path) != std::string::npos);

  canned_server server(io, {"SMTP ready\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort",
                            answer(200, std::string(200, 'x'))});
  http::client c(io.get_executor(), server.endpoint(), 100);
  auto garbage = run(io, c.send(r));
  REQUIRE_FALSE(garbage.has_value());
  CHECK(garbage.error().code == http::http_errc::malformed);
  CHECK(errc_of(garbage.error().code) == errc::protocol_error);
  auto cut = run(io, c.send(r));
  REQUIRE_FALSE(cut.has_value());
  CHECK(cut.error().code == http::http_errc::closed_early);
  auto big = run(io, c.send(r));
  REQUIRE_FALSE(big.has_value());
  CHECK(big.error().code == http::http_errc::too_large);
  CHECK(server.requests().size() == 3);
  // at the edge, the same failure is the error users know
  CHECK(tjob::test::code_of([&] { run(io, to_nowhere.send(r)).value(); }) == errc::backend_unavailable);
}

TEST_CASE("the Docker API's refusals have codes by status, and a lookup of nothing is no failure") {
  asio::io_context io;
  canned_server server(
      io,
      {answer(404, R"({"message":"No such container: c1"})"), answer(409, R"({"message":"is in use"})"),
       answer(500, R"({"message":"driver failed"})"), answer(404, R"({"message":"No such container: c2"})"),
       answer(200, "not json"), answer(200, R"({"NoId":1})"),
       // Podman, for a container removed while it looked it up
       answer(
           500,
           R"({"cause":"no such container","message":"container c3 does not exist in database: no such container","response":500})")});
  container::docker_api d(io.get_executor(), server.endpoint());
  auto start = run(io, d.container_start("c1"));
  REQUIRE_FALSE(start.has_value());
  CHECK(start.error().code == container::docker_errc::not_found);
  CHECK(start.error().message.find("No such container: c1") != std::string::npos);
  CHECK(start.error().message.find("404") != std::string::npos);
  CHECK(start.error().diagnostics == R"({"message":"No such container: c1"})");
  auto create = run(io, d.container_create("c", {}));
  CHECK(create.error().code == container::docker_errc::conflict);
  auto wait = run(io, d.container_wait("c"));
  CHECK(wait.error().code == container::docker_errc::daemon_failed);
  CHECK(errc_of(wait.error().code) == errc::backend_error);
  auto inspect = run(io, d.container_inspect("c2"));
  REQUIRE(inspect.has_value());
  CHECK_FALSE(inspect->has_value());
  auto list = run(io, d.container_list({}));
  CHECK(list.error().code == container::docker_errc::bad_answer);
  CHECK(errc_of(list.error().code) == errc::protocol_error);
  auto no_id = run(io, d.container_create("c", {}));
  CHECK(no_id.error().code == container::docker_errc::bad_answer);
  CHECK(no_id.error().message.find("no Id") != std::string::npos);
  auto vanished = run(io, d.container_inspect("c3"));  // a lookup of nothing, on Podman too
  REQUIRE(vanished.has_value());
  CHECK_FALSE(vanished->has_value());
  CHECK(server.requests() ==
        std::vector<std::string>{
            "POST /containers/c1/start HTTP/1.1", "POST /containers/create?name=c HTTP/1.1",
            "POST /containers/c/wait HTTP/1.1", "GET /containers/c2/json HTTP/1.1",
            "GET /containers/json?all=1&filters=%7B%22label%22%3A%5B%5D%7D HTTP/1.1",
            "POST /containers/create?name=c HTTP/1.1", "GET /containers/c3/json HTTP/1.1"});
}

TEST_CASE("a container list that met a container exiting is asked again, and other refusals are not") {
  asio::io_context io;
  const std::string exiting =
      R"({"cause":"no such process","message":"read /proc/12929/cgroup: no such process","response":500})";
  canned_server server(io,
                       {answer(500, exiting), answer(200, "[]"), answer(500, exiting), answer(500, exiting),
                        answer(500, exiting), answer(500, R"({"message":"driver failed"})")});
  container::docker_api d(io.get_executor(), server.endpoint());
  auto once = run(io, d.container_list({}));  // Podman's race, then the list
  REQUIRE(once.has_value());
  CHECK(once->empty());
  auto thrice = run(io, d.container_list({}));  // three times: that is not a race any more
  REQUIRE_FALSE(thrice.has_value());
  CHECK(thrice.error().message.find("no such process") != std::string::npos);
  auto other = run(io, d.container_list({}));  // any other failure is said at once
  REQUIRE_FALSE(other.has_value());
  CHECK(other.error().code == container::docker_errc::daemon_failed);
  CHECK(server.requests().size() == 6);
}

TEST_CASE("a container inspect that met the container exiting is asked again") {
  asio::io_context io;
  const std::string exiting =
      R"({"cause":"no such process","message":"read /proc/1196/cgroup: no such process","response":500})";
  canned_server server(io, {answer(500, exiting), answer(200, R"({"Id":"c1","State":{"Status":"exited"}})"),
                            answer(500, exiting), answer(500, exiting), answer(500, exiting)});
  container::docker_api d(io.get_executor(), server.endpoint());
  auto once = run(io, d.container_inspect("c1"));  // Podman's race, then the container
  REQUIRE(once.has_value());
  REQUIRE(once->has_value());
  CHECK((**once).at("Id").as_string() == "c1");
  auto thrice = run(io, d.container_inspect("c1"));  // three times: that is not a race any more
  REQUIRE_FALSE(thrice.has_value());
  CHECK(thrice.error().message.find("inspecting container 'c1'") != std::string::npos);
  CHECK(server.requests().size() == 5);
}

TEST_CASE(
    "a failure's last logs are those of the step whose failure it is, not of the steps stopped for it") {
  tjob::train_job job;
  job.name = "ddp";
  job.status = tjob::job_status::failed;
  job.reason = "rank 1 raised RuntimeError: bad x=8 (exit code 1)";
  tjob::step n0, n1;
  n0.name = "node-0";
  n0.status = tjob::job_status::failed;
  n0.exit_code = 1;
  n0.reason = "stopped: node-1 failed (exit code 1)";
  n1.name = "node-1";
  n1.status = tjob::job_status::failed;
  n1.exit_code = 1;
  n1.reason = job.reason;
  job.steps = {n0, n1};
  const std::map<std::string, std::string> logs = {
      {"node-0", "torch.distributed.elastic.multiprocessing.api.SignalException: Process 7 got signal: 15\n"},
      {"node-1", "RuntimeError: bad x=8\n"}};
  auto msg = tjob::detail::failure_message(job, logs);
  CAPTURE(msg);
  CHECK(msg.find("node-0: status=Failed, exit_code=1, reason=stopped: node-1 failed") != std::string::npos);
  CHECK(msg.find("node-1: status=Failed, exit_code=1, reason=rank 1 raised") != std::string::npos);
  CHECK(msg.find("    RuntimeError: bad x=8") != std::string::npos);
  CHECK(msg.find("SignalException") == std::string::npos);
  CHECK(
      msg.find(
          "(node-0 was stopped because another step failed: `tjob logs ddp --step node-0` shows its log)") !=
      std::string::npos);
  // When every failed step was stopped (nothing else to show), their logs are shown.
  job.steps = {n0};
  CHECK(tjob::detail::failure_message(job, logs).find("SignalException") != std::string::npos);
}
