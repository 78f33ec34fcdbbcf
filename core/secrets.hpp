// What tjob shows and stores of a secret: index URLs with a password, a
// script's --password=..., and the files that hold its own tokens and keys.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tjob::detail {

/// `url` with the password of its user info masked
/// ("https://user:***@host/simple"); user info without a ':' (a token as the
/// user name, as GitLab's and Artifactory's indexes take) is masked whole
/// ("https://***@host/simple"). Text without user info comes back as it is.
std::string mask_url(std::string_view url);
/// Each of `urls` masked (mask_url).
std::vector<std::string> mask_urls(const std::vector<std::string>& urls);

/// An argument vector as tjob records and shows it: every URL masked, and
/// the value of an option whose name says it is a secret (a word password,
/// passwd, pwd, token, secret, credential(s), auth, or api/access/private/
/// secret followed by key: --password=x, --hf-token x, --wandb-api-key x)
/// replaced by ***, whether written --name=value or as the next argument.
std::vector<std::string> masked_args(const std::vector<std::string>& argv);

/// (Why a file holding a secret must not be used: tjob::secret_file_problem,
/// in the public API, <tjob/types.hpp>.)

/// The host is this machine's loopback: localhost, 127.0.0.0/8 or ::1.
bool is_loopback_host(std::string_view host);

/// A variable of this process that a job started for a server's client
/// inherits (engine_config::clean_job_environment): the locale, PATH, HOME,
/// proxies, CA bundles, and PIP_/CUDA_/NCCL_/OMP_ settings; not the
/// server's own secrets.
bool job_environment_allowed(std::string_view key);

}  // namespace tjob::detail
