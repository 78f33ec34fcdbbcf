// `tjob doctor`: SQLite's integrity_check of a store, and the rebuild of its
// indexes, on a connection of its own (store.hpp, store::check_file).
#include "adapters/local/store.hpp"

#include "adapters/local/store_sql.hpp"

#include <tjob/error.hpp>

#include <sqlite3.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tjob::detail {

store::integrity store::check_file(const std::filesystem::path& db_path, bool repair,
                                   std::chrono::milliseconds busy_timeout) {
  sqlite3* db = nullptr;
  int flags = (repair ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READONLY) | SQLITE_OPEN_NOMUTEX;
  int rc = sqlite3_open_v2(db_path.c_str(), &db, flags, nullptr);
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> owned(db, sqlite3_close_v2);
  auto failed = [&](int code, std::string_view what) {
    std::string peer = db ? sqlite3_errmsg(db) : sqlite3_errstr(code);
    throw error(classify(code),
                "store " + db_path.string() + ": " + std::string(what) + " (" + peer + "); " +
                    fix_for(classify(code), db_path),
                peer);
  };
  if (rc != SQLITE_OK) failed(rc, "cannot open it to check it");
  sqlite3_busy_timeout(db, static_cast<int>(busy_timeout.count()));
  auto run_check = [&] {
    std::vector<std::string> found;
    char* msg = nullptr;
    int code = sqlite3_exec(
        db, "PRAGMA integrity_check(100)",
        [](void* out, int, char** v, char**) {
          std::string line = v[0] ? v[0] : "";
          if (line != "ok") static_cast<std::vector<std::string>*>(out)->push_back(line);
          return 0;
        },
        &found, &msg);
    // A file too damaged to be read as a database is one problem, in SQLite's words.
    if (code != SQLITE_OK) {
      if (code == SQLITE_BUSY || code == SQLITE_LOCKED) failed(code, "cannot read it to check it");
      found.push_back(msg ? msg : sqlite3_errstr(code));
    }
    sqlite3_free(msg);
    return found;
  };
  integrity out;
  out.problems = run_check();
  if (!repair || out.problems.empty()) return out;
  char* msg = nullptr;
  rc = sqlite3_exec(db, "BEGIN IMMEDIATE; REINDEX; COMMIT", nullptr, nullptr, &msg);
  std::string why = msg ? msg : "";
  sqlite3_free(msg);
  if (rc != SQLITE_OK) {
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED || (rc & 0xff) == SQLITE_FULL ||
        (rc & 0xff) == SQLITE_IOERR || rc == SQLITE_READONLY)
      failed(rc, "cannot rebuild its indexes");
    out.problems.push_back("rebuilding the indexes failed: " + why);  // the damage stopped it
    return out;
  }
  auto left = run_check();
  out.repaired = left.empty();
  if (!out.repaired) out.problems = std::move(left);  // mended: what was found stays, to be told
  return out;
}

}  // namespace tjob::detail
