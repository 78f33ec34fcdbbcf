// The command line's backends: `--backend` and every registered backend's
// own options (registered_backends(): their flags and help), read into the
// backend's JSON config. The CLI names no backend: what it says of one comes
// from its registration.
#pragma once

#include <tjob/backends.hpp>
#include <tjob/error.hpp>

#include <boost/json/object.hpp>

#include <deque>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace tjob::cli {

/// The refusal of a setting that is the server's when a server runs the
/// jobs (--server): `chosen_by` names what chose it ("--server unix:///x").
std::string server_settings_refusal(const std::string& chosen_by);

class backend_options {
 public:
  /// The backend a command line chose, with its config (checked).
  struct chosen {
    std::string id;
    backend_capabilities capabilities;
    boost::json::object config;
    /// The options and variables that chose it ("--server unix:///x"), for messages.
    std::string chosen_by;
  };

  /// Adds --backend and each registered backend's options to `app`.
  void add_to(CLI::App& app);
  /// The backend named by --backend (else $TJOB_BACKEND, else "local"), or
  /// by an option that chooses its backend (--server, $TJOB_SERVER); its
  /// options' values as its config, checked by the backend in the CLI's
  /// words. Throws usage_error naming the options at fault and the fix.
  chosen choose() const;

 private:
  struct value {
    backend_description backend;
    backend_option option;
    std::string text;
    std::vector<std::string> texts;
    bool flag = false;
    CLI::Option* cli = nullptr;
    bool given() const;
    /// What the environment gives it (option.env), when the command line does not.
    std::string from_env() const;
  };
  std::string backend_;  // --backend
  std::deque<value> values_;

  std::string flag_of(const std::string& backend, std::string_view member) const;
  std::string given_flags(const std::string& backend) const;
  void refuse_others(const chosen& c) const;
  boost::json::object config_of(const std::string& backend) const;
};

}  // namespace tjob::cli
