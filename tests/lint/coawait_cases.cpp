// Cases for tools/coawait_check: every line marked `bad:` must be reported,
// and no other. tests/lint/check_coawait compiles this file with the plugin
// and compares the lines reported with the marked ones. Which patterns are
// bad is what a probe under g++ 12.2 with AddressSanitizer found
// (docs/architecture.md, "g++ 12 and coroutines").
#include <boost/asio/awaitable.hpp>

#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace asio = boost::asio;
namespace fs = std::filesystem;

struct widget {
  std::string name;
};

asio::awaitable<void> by_ref(const fs::path& p);
asio::awaitable<void> by_value(std::string s);
asio::awaitable<void> two(std::string a, std::string b);
asio::awaitable<void> list(std::vector<std::string> v);
asio::awaitable<void> list_ref(const std::vector<std::string>& v);
asio::awaitable<void> numbers(int a, std::string_view b);
asio::awaitable<void> callback(std::function<void()> f);
asio::awaitable<int> value();
asio::awaitable<void> make(widget w);
asio::awaitable<void> pair(std::pair<std::string, int> p);
asio::awaitable<std::vector<int>> items();

asio::awaitable<void> cases(bool keep, fs::path dir, std::string name, std::vector<std::string> v) {
  co_await by_ref(keep ? fs::path() : dir);           // bad: the double free of issue 41
  co_await by_value(keep ? std::string() : name);     // bad: a conditional's temporary, by value
  co_await by_value(keep ? name : name + "-x");       // bad: a temporary in one arm only
  co_await list({name, name});                        // bad: an initializer list
  co_await list_ref({name});                          // bad: a braced list bound to a reference
  co_await callback([name] {});                       // bad: a lambda capturing a string
  co_await make(widget{name});                        // bad: a braced aggregate
  co_await pair(std::pair<std::string, int>{name, 1});  // bad: a list-initialized temporary
  widget w{co_await value() > 0 ? name : ""};         // bad: co_await inside a braced initializer

  // good: named locals, plain temporaries, copies and moves of names
  auto path = keep ? fs::path() : dir;
  co_await by_ref(path);
  co_await by_ref(dir);
  co_await by_ref(fs::path("/tmp"));
  co_await by_value(std::string("x"));
  co_await by_value(name + "-x");
  co_await by_value("literal");
  co_await by_value(name);
  co_await by_value(std::move(name));
  co_await by_value(std::string(keep ? "a" : "b"));  // a conditional of pointers makes no temporary
  co_await two(name, w.name);
  co_await list(v);
  co_await numbers(keep ? 1 : 2, "view");
  std::function<void()> f = [name] {};
  co_await callback(f);
  co_await callback([] {});
  co_await callback([&name] { (void)name; });  // by reference: nothing to destroy
  int count = 2;
  co_await callback([count] { (void)count; });  // a trivial capture
  auto x = co_await value();
  widget w2{name};
  co_await make(w2);
  for (const auto& s : v) co_await by_value(s);
  auto got = co_await items();
  for (int i : got) co_await numbers(i, "i");
  std::vector<std::string> fine{name, name};  // a braced list with no co_await in it
  (void)x;
}
