// The few helpers the store's SQL needs in every file of it (store.cpp,
// store_queue.cpp, store_check.cpp): a column as text, a text bound, a
// statement reset, and what an SQLite code means (classify, fix_for).
#pragma once

#include <tjob/error.hpp>

#include <sqlite3.h>

#include <filesystem>
#include <string>
#include <string_view>

namespace tjob::detail {

/// The error an SQLite result code is (locked, corrupt, else unavailable).
errc classify(int rc);
/// What to do about `e` for the store at `p`.
std::string fix_for(errc e, const std::filesystem::path& p);

inline std::string text_of(sqlite3_stmt* s, int col) {
  auto* t = sqlite3_column_text(s, col);
  return t ? std::string(reinterpret_cast<const char*>(t),
                         static_cast<std::size_t>(sqlite3_column_bytes(s, col)))
           : std::string();
}

// Bound without a copy (SQLITE_STATIC): the text must outlive every step of
// the statement until its reset_guard clears the bindings. Every caller binds
// a parameter, a member or a constant that does. (This SQLite is built with
// no lookaside, so each copy was a malloc and a free: about 40 a job.)
inline void bind_text(sqlite3_stmt* s, int i, std::string_view v) {
  // An empty view may have no data: SQLite would bind that as NULL.
  sqlite3_bind_text(s, i, v.data() ? v.data() : "", static_cast<int>(v.size()), SQLITE_STATIC);
}

// Resets a cached statement when the scope ends, whatever happened.
struct reset_guard {
  sqlite3_stmt* s;
  ~reset_guard() {
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
  }
};

}  // namespace tjob::detail
