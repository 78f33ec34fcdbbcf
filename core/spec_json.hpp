// Trainers as JSON: how a job's spec is kept in the store and how `tjob train`
// hands a request to its supervisor. One encoding for both.
#pragma once

#include <tjob/types.hpp>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

namespace tjob::detail {

/// {"kind":"command","command":[...],"env":{...},"working_dir":"..."}
boost::json::object to_json(const command_trainer& t);
/// {"kind":"python","source":...,"function":...,...}
boost::json::object to_json(const python_trainer& t);
boost::json::object to_json(const trainer& t);
/// The inverse of to_json; throws std::exception on a malformed object.
trainer trainer_from_json(const boost::json::object& o);

/// {"max_restarts":3,"backoff_ms":1000,"backoff_factor":2,"max_backoff_ms":60000,
///  "retry_on":[...],"never_retry":[...]}: a request's "retry".
boost::json::object to_json(const retry_policy& p);
/// The inverse of to_json(retry_policy), every field checked: throws
/// tjob::spec_error naming the field ("retry.backoff_ms").
retry_policy retry_from_json(const boost::json::value& v);

/// {"signal":"USR1","before":300}: a request's "warning".
boost::json::object to_json(const stop_warning& w);
/// The inverse of to_json(stop_warning), every field checked: throws
/// tjob::spec_error naming the field ("warning.signal").
stop_warning warning_from_json(const boost::json::value& v);

}  // namespace tjob::detail
