// The TLS files of a $TJOB_HOME's progress endpoint, made once: a CA of the
// home (its key is never written: it signs the one server certificate and is
// dropped), and a server certificate for localhost, 127.0.0.1 and ::1 with
// its key. Jobs verify the endpoint against the CA
// (KUBEFLOW_TRAINER_SERVER_CA_CERT).
//
// Threading: any thread; several processes may make them at once (a lock
// file orders them, and each file appears whole, by rename).
// Errors: throws std::system_error (a file) or std::runtime_error (OpenSSL).
#pragma once

#include <filesystem>

namespace tjob::progress {

struct tls_files {
  std::filesystem::path ca_cert;      ///< PEM, 0644: jobs read it (not secret)
  std::filesystem::path server_cert;  ///< PEM, 0600
  std::filesystem::path server_key;   ///< PEM, 0600
};

/// The files under `dir` ($TJOB_HOME/progress), made when they are not there
/// (`dir` is made 0700).
tls_files home_tls(const std::filesystem::path& dir);

/// The directory a job's PYTHONPATH gets, `dir`/python, holding the helper
/// package `tjob` (report(); see adapters/progress/tjob_shim.py), written
/// when it is not there or not this tjob's (files 0644, directories 0755:
/// a container's user reads them).
std::filesystem::path python_helper(const std::filesystem::path& dir);

}  // namespace tjob::progress
