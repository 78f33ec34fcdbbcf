// Job specs as the CLI's supervisor and the API receive them: any JSON as a
// trainer, then the checks every train runs (name, env, command, Python code,
// packages). Bad specs are tjob::error, never a crash.
#include "adapters/python/python_plan.hpp"
#include "adapters/python/python_setup.hpp"
#include "core/names.hpp"
#include "core/spec_json.hpp"
#include "core/trainer_checks.hpp"
#include "tests/fuzz/fuzz_support.hpp"

#include <tjob/error.hpp>

#include <boost/json.hpp>

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto text = tjob::fuzz::text(data, size);
  boost::system::error_code ec;
  auto v = boost::json::parse(text, ec);
  (void)tjob::detail::name_problem(text);
  (void)tjob::detail::printable(text, 40);
  if (ec || !v.is_object()) return 0;
  try {
    auto t = tjob::detail::trainer_from_json(v.as_object());
    const std::string who = "TrainJob 'fuzz'";
    if (auto* c = std::get_if<tjob::command_trainer>(&t)) {
      tjob::detail::check_command(who, *c);
      tjob::detail::check_env(who, c->env);
    } else {
      auto& p = std::get<tjob::python_trainer>(t);
      tjob::detail::check_env(who, p.env);
      if (!p.source.empty()) {
        p.source_file.clear();
        (void)tjob::python::check_python_code(who, p);
      }
      (void)tjob::python::merge_packages({"torch"}, p.packages_to_install);
    }
    // What went in comes back out the same.
    auto again = tjob::detail::trainer_from_json(tjob::detail::to_json(t));
    if (boost::json::serialize(tjob::detail::to_json(again)) !=
        boost::json::serialize(tjob::detail::to_json(t)))
      std::abort();
  } catch (const tjob::error&) {
  }
  return 0;
}
