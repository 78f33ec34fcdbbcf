// Job arrays (tjob/spec.hpp): the spec as Slurm's --array reads it, and the
// members' requests.
#include "core/json_fields.hpp"
#include "core/names.hpp"

#include <tjob/error.hpp>
#include <tjob/spec.hpp>

#include <boost/json.hpp>

#include <algorithm>
#include <variant>

namespace tjob {

namespace json = boost::json;

namespace {

constexpr std::size_t max_members = 10000;

// {"__tjob__": "array_index"}: the Python package's ARRAY_INDEX in func_args.
bool is_index_marker(const json::value& v) {
  const auto* o = v.if_object();
  if (!o || o->size() != 1) return false;
  const auto* m = o->if_contains("__tjob__");
  return m && m->is_string() && m->get_string() == "array_index";
}

// Replaces every marker in `v`, at any depth; true when one was found.
bool put_index(json::value& v, int index) {
  if (is_index_marker(v)) {
    v = index;
    return true;
  }
  bool found = false;
  if (auto* o = v.if_object())
    for (auto& kv : *o) found = put_index(kv.value(), index) || found;
  else if (auto* a = v.if_array())
    for (auto& e : *a) found = put_index(e, index) || found;
  return found;
}

}  // namespace

array_spec parse_array(std::string_view text) {
  const std::string spec(text);
  auto refuse = [&](const std::string& why) {
    return error(errc::invalid_argument,
                 "array " + detail::printable(spec) + ": " + why +
                     "; give indices as 0-99, 1,3,5, 0-15:4 (every 4th), and %N for the most running at once "
                     "(0-99%8)");
  };
  auto number = [&](const std::string& t) {
    if (t.empty() || t.size() > 6 || t.find_first_not_of("0123456789") != std::string::npos)
      throw refuse(detail::quote(t) + " is not an index from 0 to 999999");
    return std::stoi(t);
  };
  std::string body = spec;
  array_spec out;
  if (auto pct = body.find('%'); pct != std::string::npos) {
    out.limit = number(body.substr(pct + 1));
    if (out.limit < 1) throw refuse("%" + body.substr(pct + 1) + " must be 1 or more");
    body.resize(pct);
  }
  std::size_t start = 0;
  while (start <= body.size()) {
    auto end = body.find(',', start);
    if (end == std::string::npos) end = body.size();
    auto item = body.substr(start, end - start);
    int step = 1;
    if (auto colon = item.find(':'); colon != std::string::npos) {
      step = number(item.substr(colon + 1));
      if (step < 1) throw refuse("a step must be 1 or more");
      item.resize(colon);
    }
    auto dash = item.find('-');
    int lo = number(item.substr(0, dash)),
        hi = dash == std::string::npos ? lo : number(item.substr(dash + 1));
    if (hi < lo) throw refuse(item + " runs backwards");
    for (int i = lo; i <= hi; i += step) {
      if (out.indices.size() >= max_members)
        throw refuse("more than " + std::to_string(max_members) + " members");
      out.indices.push_back(i);
    }
    start = end + 1;
  }
  std::sort(out.indices.begin(), out.indices.end());
  if (std::adjacent_find(out.indices.begin(), out.indices.end()) != out.indices.end())
    throw refuse("an index is given twice");
  return out;
}

std::vector<train_request> array_members(const train_request& request, std::string_view text) {
  if (request.name.empty())
    throw error(errc::invalid_argument,
                "a job array needs a name: its members are NAME-0, NAME-1, ... and NAME addresses them all");
  auto spec = parse_array(text);
  // The longest member name is the last's; a name too long for one is refused
  // here, before any member is submitted.
  const std::string longest = request.name + "-" + std::to_string(spec.indices.back());
  if (auto problem = detail::name_problem(longest))
    throw error(errc::invalid_argument, "job array " + detail::quote(request.name) + ": member " +
                                            detail::quote(longest) + ": " + *problem +
                                            "; give the array a shorter name");
  // A Python function's arguments, parsed once: members differ only in the index.
  std::optional<json::value> args;
  if (const auto* p = std::get_if<python_trainer>(&request.job_trainer); p && !p->function_args.empty()) {
    boost::system::error_code ec;
    auto v = json::parse(p->function_args, ec);
    if (auto probe = v; !ec && put_index(probe, 0)) {  // kept only when it has a marker
      // (written again with each index, a number beyond a double's range would become `Infinity`)
      if (!detail::finite_numbers(v))
        throw error(
            errc::invalid_argument,
            "job array " + detail::quote(request.name) +
                ": function_args holds a number beyond a double's range (such as 1e400), which cannot "
                "be written again with each member's ARRAY_INDEX; pass it as a string");
      args = std::move(v);
    }
  }
  std::vector<train_request> out;
  out.reserve(spec.indices.size());
  for (int i : spec.indices) {
    auto r = request;
    r.name = request.name + "-" + std::to_string(i);
    r.array = request.name;
    r.array_limit = spec.limit;
    std::visit([&](auto& t) { t.env["TJOB_ARRAY_INDEX"] = std::to_string(i); }, r.job_trainer);
    if (args) {
      auto v = *args;
      put_index(v, i);
      std::get<python_trainer>(r.job_trainer).function_args = json::serialize(v);
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace tjob
