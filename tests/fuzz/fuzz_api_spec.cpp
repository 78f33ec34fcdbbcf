// Job specs as tjob serve receives them (POST /v1/jobs), and the job, event
// and runtime objects its clients read back: any JSON. A spec is refused by
// a spec_error naming a field, or read into a request that encodes to the
// same spec again; an answer is read or refused as a tjob::error.
#include "tests/fuzz/fuzz_support.hpp"

#include <tjob/wire.hpp>

#include <boost/json.hpp>

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto text = tjob::fuzz::text(data, size);
  boost::system::error_code ec;
  auto v = boost::json::parse(text, ec);
  if (ec) return 0;
  try {
    auto req = tjob::request_from_json(v);
    auto again = tjob::request_from_json(tjob::to_json(req));
    if (boost::json::serialize(tjob::to_json(again)) != boost::json::serialize(tjob::to_json(req)))
      std::abort();
  } catch (const tjob::spec_error& e) {
    if (std::string(e.what()).empty()) std::abort();
  }
  try {
    // as read from the unix socket, where a spec may name its training file
    auto req = tjob::request_from_json(v, true);
    auto again = tjob::request_from_json(tjob::to_json(req), true);
    if (boost::json::serialize(tjob::to_json(again)) != boost::json::serialize(tjob::to_json(req)))
      std::abort();
  } catch (const tjob::spec_error& e) {
    if (std::string(e.what()).empty()) std::abort();
  }
  try {
    auto j = tjob::job_from_json(v);
    if (tjob::job_from_json(tjob::to_json(j)).name != j.name) std::abort();
  } catch (const tjob::error&) {
  }
  try {
    (void)tjob::event_from_json(v);
  } catch (const tjob::error&) {
  }
  try {
    (void)tjob::runtime_from_json(v);
  } catch (const tjob::error&) {
  }
  try {
    (void)tjob::venv_cache_entry_from_json(v);
  } catch (const tjob::error&) {
  }
  return 0;
}
