#include "core/secrets.hpp"

#include <tjob/types.hpp>

#include <fmt/format.h>

#include <boost/asio/ip/address.hpp>

#include <sys/stat.h>
#include <algorithm>
#include <cctype>

namespace tjob::detail {

namespace {

constexpr std::string_view masked = "***";

// The words of an option's name ("--HF_Token" -> {"hf", "token"}).
std::vector<std::string> words_of(std::string_view name) {
  std::vector<std::string> out(1);
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      out.back() += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!out.back().empty()) {
      out.emplace_back();
    }
  }
  if (out.back().empty()) out.pop_back();
  return out;
}

// An option's name as a program's parser takes one: dashes, then letters,
// digits, '-' and '_' (anything else is an argument that starts with '-').
bool option_name(std::string_view s) {
  auto body = s.substr(s.find_first_not_of('-') == std::string_view::npos ? s.size() : s.find_first_not_of('-'));
  return !body.empty() && std::all_of(body.begin(), body.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  });
}

bool secret_name(std::string_view option) {
  if (!option_name(option)) return false;
  auto w = words_of(option);
  static constexpr std::string_view alone[] = {"password",  "passwd",      "pwd",  "token",  "secret",
                                               "apikey",    "credential",  "credentials", "auth", "passphrase"};
  static constexpr std::string_view before_key[] = {"api", "access", "private", "secret"};
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (std::find(std::begin(alone), std::end(alone), w[i]) != std::end(alone)) return true;
    if (i + 1 < w.size() && w[i + 1] == "key" &&
        std::find(std::begin(before_key), std::end(before_key), w[i]) != std::end(before_key))
      return true;
  }
  return false;
}

}  // namespace

std::string mask_url(std::string_view url) {
  auto scheme = url.find("://");
  if (scheme == std::string_view::npos) return std::string(url);
  auto authority = scheme + 3;
  auto end = url.find_first_of("/?#", authority);
  if (end == std::string_view::npos) end = url.size();
  auto at = url.rfind('@', end - 1);
  if (at == std::string_view::npos || at < authority) return std::string(url);
  auto info = url.substr(authority, at - authority);
  auto colon = info.find(':');
  std::string out(url.substr(0, authority));
  if (colon == std::string_view::npos)
    out += masked;
  else
    out += std::string(info.substr(0, colon)) + ":" + std::string(masked);
  out += url.substr(at);
  return out;
}

std::vector<std::string> mask_urls(const std::vector<std::string>& urls) {
  std::vector<std::string> out;
  out.reserve(urls.size());
  for (const auto& u : urls) out.push_back(mask_url(u));
  return out;
}

std::vector<std::string> masked_args(const std::vector<std::string>& argv) {
  std::vector<std::string> out;
  out.reserve(argv.size());
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const auto& a = argv[i];
    if (a.size() > 1 && a[0] == '-') {
      const auto eq = a.find('=');
      const auto name = std::string_view(a).substr(0, eq);
      if (secret_name(name)) {
        if (eq != std::string::npos) {
          out.push_back(std::string(name) + "=" + std::string(masked));
        } else {
          out.push_back(a);
          if (i + 1 < argv.size() && !argv[i + 1].starts_with("--")) {
            out.emplace_back(masked);  // its value, the next argument (not another option)
            ++i;
          }
        }
        continue;
      }
    }
    out.push_back(mask_url(a));
  }
  return out;
}

bool is_loopback_host(std::string_view host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost" || host == "localhost.") return true;
  boost::system::error_code ec;
  auto a = boost::asio::ip::make_address(std::string(host), ec);
  return !ec && a.is_loopback();
}

bool job_environment_allowed(std::string_view key) {
  static constexpr std::string_view names[] = {
      "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM",
      "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy",
      "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "LD_LIBRARY_PATH",
      "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME"};
  static constexpr std::string_view prefixes[] = {"LC_", "PIP_", "CUDA_", "NVIDIA_", "NCCL_", "OMP_", "MKL_"};
  for (auto n : names)
    if (key == n) return true;
  for (auto p : prefixes)
    if (key.starts_with(p)) return true;
  return false;
}

}  // namespace tjob::detail

namespace tjob {

std::string secret_file_problem(const std::filesystem::path& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
  if ((st.st_mode & 077) == 0) return {};
  const bool readable = (st.st_mode & 044) != 0;
  return fmt::format("is {} by others (mode {:04o}); a secret's file must be its owner's alone: chmod 600 {}",
                     readable ? "readable" : "writable", st.st_mode & 07777, file.string());
}

}  // namespace tjob
