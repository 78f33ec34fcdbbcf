// Where the Kubernetes API server is and who we are to it: a kubeconfig (one
// file, or $KUBECONFIG's list merged as kubectl merges it) or the in-cluster
// service account, chosen as Kubeflow's KubernetesBackend chooses.
//
// Threading: plain functions and values.
// Errors: tjob::error(invalid_argument) naming the file, the context or the
//   field and the fix. Tokens and keys never appear in a message.
#pragma once

#include "adapters/http/http_client.hpp"

#include <filesystem>
#include <string>
#include <vector>

namespace tjob::kube {

struct connection {
  std::string server;    ///< https://host:port (or http:// for a plain server)
  http::tls_config tls;  ///< CA, client certificate, verification
  std::string token;     ///< bearer token; empty: none
  /// Where the token came from (tokenFile, or the service account's); it is
  /// read again as it rotates (api re-reads it each minute). Empty: fixed token.
  std::filesystem::path token_file;
  std::string ns;       ///< the namespace jobs go to
  std::string context;  ///< the kubeconfig context used; empty in-cluster
  std::string source;   ///< for messages: "kubeconfig /x (context c)" or "in-cluster service account"
};

struct load_options {
  std::string config_file;  ///< empty: $KUBECONFIG, else ~/.kube/config (or in-cluster)
  std::string context;      ///< empty: the current-context
  std::string ns;           ///< empty: the context's namespace, else "default"
  /// The service-account directory whose presence means "in a pod".
  std::filesystem::path in_cluster_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
};

/// Kubeflow's rule: with no config_file and running in a pod, the in-cluster
/// config; otherwise the kubeconfig.
connection load(const load_options& opt);

/// The files $KUBECONFIG names (':'-separated, empty entries dropped); when it
/// is unset or empty, ~/.kube/config.
std::vector<std::filesystem::path> kubeconfig_files();

/// A token file's text without its trailing newline; nullopt when unreadable.
std::optional<std::string> read_token(const std::filesystem::path& file);

/// Decodes standard base64 (whitespace ignored); nullopt when it is not base64.
std::optional<std::string> base64_decode(std::string_view in);

}  // namespace tjob::kube
