#include "adapters/local/fs_watch.hpp"
#include "core/wake.hpp"
#include "tests/support/test_support.hpp"

#include <doctest/doctest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <fstream>

namespace asio = boost::asio;
using tjob::detail::named_wake_lists;
using tjob::detail::wake_signal;
using steady = std::chrono::steady_clock;

namespace {

// Whether `w` was notified, without waiting: a deadline already passed.
asio::awaitable<bool> notified(wake_signal& w) {
  auto now = steady::now();
  co_return co_await w.wait_until(now);
}

// A coroutine's failure comes out of io.run(), for doctest to see.
void rethrow(std::exception_ptr e) {
  if (e) std::rethrow_exception(e);
}

}  // namespace

TEST_CASE("named wake lists wake a name's waiters and every-name ones, and forget a name nobody waits on") {
  asio::io_context io;
  wake_signal a(io.get_executor()), b(io.get_executor()), any(io.get_executor());
  named_wake_lists lists;
  lists.add(&a, "a");
  lists.add(&b, "b");
  lists.add(&any);
  lists.notify("a");
  bool got_a = false, got_b = true, got_any = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        got_a = co_await notified(a);
        got_b = co_await notified(b);
        got_any = co_await notified(any);
      },
      rethrow);
  io.run();
  CHECK(got_a);
  CHECK(!got_b);
  CHECK(got_any);
  lists.remove(&a);
  lists.remove(&b);
  CHECK(!lists.empty());  // `any` still waits
  lists.remove(&any);
  CHECK(lists.empty());  // and the names went with their last waiter
}

TEST_CASE("a watch of one file in a directory wakes on that file's writes, not on the others'") {
  // The store's watches wait on its wake file: a log that a server writes in
  // $TJOB_HOME on every request must not re-list every job.
  tjob::test::temp_dir d;
  asio::io_context io;
  auto log = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  tjob::detail::task_group tasks(io.get_executor(), log);
  tjob::detail::fs_watch watch(io.get_executor(), log, tasks);
  wake_signal store(io.get_executor()), any(io.get_executor());
  bool other_woke_any = false, other_woke_store = true, store_woke_store = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        int wd_store = watch.add(d.path(), &store, "tjob.db-wake");
        int wd_any = watch.add(d.path(), &any);
        CHECK(wd_store >= 0);
        CHECK(wd_any >= 0);
        const auto deadline = steady::now() + std::chrono::seconds(30);
        std::ofstream(d.path() / "serve.log") << "a request\n";
        // one inotify read hands both subscribers the event: once `any` has it, `store` has had its chance
        other_woke_any = co_await any.wait_until(deadline);
        other_woke_store = co_await notified(store);
        std::ofstream(d.path() / "tjob.db-wake") << "w";
        store_woke_store = co_await store.wait_until(deadline);
        watch.remove(wd_store, &store);
        watch.remove(wd_any, &any);
        watch.close();
      },
      rethrow);
  io.run();
  CHECK(other_woke_any);
  CHECK(!other_woke_store);
  CHECK(store_woke_store);
}
