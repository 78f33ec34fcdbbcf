#include "adapters/progress/home_tls.hpp"

#include "adapters/python/python_plan.hpp"

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

namespace tjob::progress {

namespace fs = std::filesystem;

namespace {

struct pkey_free {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct x509_free {
  void operator()(X509* x) const { X509_free(x); }
};
struct bio_free {
  void operator()(BIO* b) const { BIO_free(b); }
};
using pkey_ptr = std::unique_ptr<EVP_PKEY, pkey_free>;
using x509_ptr = std::unique_ptr<X509, x509_free>;
using bio_ptr = std::unique_ptr<BIO, bio_free>;

[[noreturn]] void openssl_failed(const char* what) {
  char buf[256] = "unknown error";
  if (auto e = ERR_get_error()) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  throw std::runtime_error(std::string("cannot make the progress endpoint's TLS files: ") + what + ": " +
                           buf);
}

void check(int ok, const char* what) {
  if (ok != 1) openssl_failed(what);
}

pkey_ptr new_key() {
  pkey_ptr k(EVP_EC_gen("P-256"));
  if (!k) openssl_failed("a P-256 key");
  return k;
}

void add_ext(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!ext) openssl_failed(value);
  int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (ok != 1) openssl_failed(value);
}

// A certificate of `key` named `cn`, valid from an hour ago for ten years.
x509_ptr new_cert(EVP_PKEY* key, const char* cn) {
  x509_ptr cert(X509_new());
  if (!cert) openssl_failed("a certificate");
  check(X509_set_version(cert.get(), 2), "the version");
  unsigned char serial[16];
  check(RAND_bytes(serial, sizeof serial), "a serial number");
  serial[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  if (!bn || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()))) openssl_failed("a serial number");
  BN_free(bn);
  if (!X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) ||
      !X509_gmtime_adj(X509_getm_notAfter(cert.get()), 10L * 365 * 24 * 3600))
    openssl_failed("the validity");
  check(X509_set_pubkey(cert.get(), key), "the public key");
  X509_NAME* name = X509_get_subject_name(cert.get());
  check(X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("tjob"),
                                   -1, -1, 0),
        "the name");
  check(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn), -1,
                                   -1, 0),
        "the name");
  return cert;
}

std::string pem_of(X509* cert, EVP_PKEY* key) {
  bio_ptr b(BIO_new(BIO_s_mem()));
  if (!b) openssl_failed("a buffer");
  if (cert) check(PEM_write_bio_X509(b.get(), cert), "the certificate's PEM");
  if (key)
    check(PEM_write_bio_PrivateKey(b.get(), key, nullptr, nullptr, 0, nullptr, nullptr), "the key's PEM");
  char* data = nullptr;
  long n = BIO_get_mem_data(b.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

// `text` into `path` whole: a temporary file of `mode`, synced, renamed.
void write_whole(const fs::path& path, const std::string& text, mode_t mode) {
  auto tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot write " + tmp.string());
  ::fchmod(fd, mode);  // (not narrowed by the umask)
  std::size_t done = 0;
  while (done < text.size()) {
    auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      throw std::system_error(e, std::generic_category(), "cannot write " + tmp.string());
    }
    done += static_cast<std::size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::system_error(errno, std::generic_category(), "cannot write " + path.string());
}

// `cert` issued by `issuer` (its name and key) with `extensions` (NID, value).
void issue(X509* cert, X509* issuer, EVP_PKEY* issuer_key,
           std::initializer_list<std::pair<int, const char*>> extensions, const char* what) {
  X509_set_issuer_name(cert, X509_get_subject_name(issuer));
  for (const auto& [nid, value] : extensions) add_ext(cert, issuer, nid, value);
  if (!X509_sign(cert, issuer_key, EVP_sha256())) openssl_failed(what);
}

void make_files(const tls_files& f) {
  auto ca_key = new_key();
  auto ca = new_cert(ca_key.get(), "tjob progress CA");
  issue(ca.get(), ca.get(), ca_key.get(),
        {{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
         {NID_key_usage, "critical,keyCertSign,cRLSign"},
         {NID_subject_key_identifier, "hash"},
         {NID_authority_key_identifier, "keyid:always"}},
        "signing the CA");
  auto key = new_key();
  auto cert = new_cert(key.get(), "localhost");
  issue(cert.get(), ca.get(), ca_key.get(),
        {{NID_basic_constraints, "critical,CA:FALSE"},
         {NID_key_usage, "critical,digitalSignature"},
         {NID_ext_key_usage, "serverAuth"},
         {NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1,IP:::1"},
         {NID_subject_key_identifier, "hash"},
         {NID_authority_key_identifier, "keyid:always"}},
        "signing the server certificate");

  // The key first and the CA last: a CA file present means all three are.
  write_whole(f.server_key, pem_of(nullptr, key.get()), 0600);
  write_whole(f.server_cert, pem_of(cert.get(), nullptr), 0600);
  write_whole(f.ca_cert, pem_of(ca.get(), nullptr), 0644);
}

}  // namespace

fs::path python_helper(const fs::path& dir) {
  auto root = dir / "python", package = root / "tjob";
  for (const auto& d : {dir, root, package})
    if (::mkdir(d.c_str(), d == dir ? 0700 : 0755) != 0 && errno != EEXIST)
      throw std::system_error(errno, std::generic_category(), "cannot make " + d.string());
  for (const auto& [name, want] : python::helper_files()) {
    auto path = root / name;
    std::string have;
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      char buf[4096];
      std::size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) have.append(buf, n);
      std::fclose(f);
    }
    if (have != want) write_whole(path, want, 0644);
  }
  return root;
}

tls_files home_tls(const fs::path& dir) {
  tls_files f{dir / "ca.crt", dir / "server.crt", dir / "server.key"};
  std::error_code ec;
  if (fs::exists(f.ca_cert, ec)) return f;
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw std::system_error(errno, std::generic_category(), "cannot make " + dir.string());
  auto lock_path = dir / ".lock";
  int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock < 0) throw std::system_error(errno, std::generic_category(), "cannot open " + lock_path.string());
  while (::flock(lock, LOCK_EX) != 0 && errno == EINTR) {
  }
  try {
    if (!fs::exists(f.ca_cert, ec)) make_files(f);
  } catch (...) {
    ::close(lock);
    throw;
  }
  ::close(lock);
  return f;
}

}  // namespace tjob::progress
