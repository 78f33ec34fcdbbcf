// Trainers as JSON: how a job's spec is kept in the store and how `tjob train`
// hands a request to its supervisor. One encoding for both.
#pragma once

#include <tjob/types.hpp>

#include <boost/json/object.hpp>

namespace tjob::detail {

/// {"kind":"command","command":[...],"env":{...},"working_dir":"..."}
boost::json::object to_json(const command_trainer& t);
/// {"kind":"python","source":...,"function":...,...}
boost::json::object to_json(const python_trainer& t);
boost::json::object to_json(const trainer& t);
/// The inverse of to_json; throws std::exception on a malformed object.
trainer trainer_from_json(const boost::json::object& o);

}  // namespace tjob::detail
