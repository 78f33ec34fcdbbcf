#include "serve/idempotency.hpp"

#include <tjob/error.hpp>

#include <fmt/format.h>
#include <openssl/evp.h>
#include <boost/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace tjob::serve {

namespace json = boost::json;

idempotency_keys::idempotency_keys(std::filesystem::path dir, std::chrono::hours ttl)
    : dir_(std::move(dir)), ttl_(ttl) {
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(dir_, ec))
    if (!find(f.path().filename().string())) std::filesystem::remove(f.path(), ec);
}

std::string idempotency_keys::sha256(std::string_view text) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(text.data(), text.size(), md, &len, EVP_sha256(), nullptr);
  std::string out;
  for (unsigned i = 0; i < len; ++i) out += fmt::format("{:02x}", md[i]);
  return out;
}

std::optional<idempotency_keys::record> idempotency_keys::find(const std::string& key_id) const {
  const auto file = dir_ / key_id;
  std::error_code ec;
  auto mtime = std::filesystem::last_write_time(file, ec);
  if (ec) return std::nullopt;
  if (std::filesystem::file_time_type::clock::now() - mtime > ttl_) return std::nullopt;
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  boost::system::error_code jec;
  auto v = json::parse(text.str(), jec);
  if (jec || !v.is_object()) return std::nullopt;
  auto* name = v.as_object().if_contains("name");
  auto* digest = v.as_object().if_contains("digest");
  if (!name || !digest || !name->is_string() || !digest->is_string()) return std::nullopt;
  return record{std::string(name->get_string()), std::string(digest->get_string())};
}

void idempotency_keys::put(const std::string& key_id, const record& r) const {
  // Private as everything in $TJOB_HOME (0700, 0600), whatever the umask and
  // the home's own mode (an administrator's /var/lib/tjob may be 0755).
  std::filesystem::create_directories(dir_.parent_path().parent_path());
  for (const auto& d : {dir_.parent_path(), dir_})
    if (::mkdir(d.c_str(), 0700) != 0 && errno != EEXIST)
      throw error(errc::store_unavailable, "cannot create " + d.string() + ": " + std::strerror(errno));
  ::chmod(dir_.c_str(), 0700);  // (one an older tjob made 0755)
  const auto file = dir_ / key_id;
  auto tmp = file;
  tmp += ".tmp";
  json::object o{{"name", r.name}, {"digest", r.digest}};
  const auto text = json::serialize(o);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  bool ok = fd >= 0 && ::fchmod(fd, 0600) == 0 &&
            ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (fd >= 0) ::close(fd);
  if (!ok) throw error(errc::store_unavailable, "cannot write the Idempotency-Key record " + tmp.string());
  std::filesystem::rename(tmp, file);
}

void idempotency_keys::forget(const std::string& key_id) const {
  std::error_code ec;
  std::filesystem::remove(dir_ / key_id, ec);
}

}  // namespace tjob::serve
