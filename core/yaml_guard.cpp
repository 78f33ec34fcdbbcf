#include "core/yaml_guard.hpp"

#include <algorithm>
#include <vector>

namespace tjob::detail {

namespace {

struct line {
  std::string_view text;
  std::size_t number;  // 1-based
};

bool blank_or_comment(std::string_view l) {
  for (char c : l) {
    if (c == ' ' || c == '\t' || c == '\r') continue;
    return c == '#';
  }
  return true;
}

// "---" or "..." at column 0, alone or followed by a space or tab.
bool marker(std::string_view l, std::string_view m) {
  if (l.substr(0, 3) != m) return false;
  return l.size() == 3 || l[3] == ' ' || l[3] == '\t' || l[3] == '\r';
}

// Is l[i] a ':' that marks a value: followed by a blank or the line's end?
bool value_indicator(std::string_view l, std::size_t i) {
  return i < l.size() && l[i] == ':' &&
         (i + 1 == l.size() || l[i + 1] == ' ' || l[i + 1] == '\t' || l[i + 1] == '\r');
}

// Does the first line of a block mapping hold a key: a ':' followed by a
// blank or the end, before a comment; or, when the line starts with a quoted
// scalar, such a ':' right after its closing quote (blanks between)? A quoted
// scalar followed by anything else is the document's root ("'x','y: z" and
// "'x':/" are scalars, and a ',' after either hangs yaml-cpp).
bool has_key(std::string_view l) {
  char quote = 0;
  for (std::size_t i = 0; i < l.size(); ++i) {
    char c = l[i];
    if (quote) {
      if (quote == '"' && c == '\\') {
        ++i;
      } else if (c == quote) {
        if (quote == '\'' && i + 1 < l.size() && l[i + 1] == '\'')
          ++i;
        else
          return value_indicator(l, l.find_first_not_of(" \t", i + 1));
      }
      continue;
    }
    if ((c == '"' || c == '\'') && i == 0) {
      quote = c;
    } else if (c == '#' && i > 0 && (l[i - 1] == ' ' || l[i - 1] == '\t')) {
      return false;
    } else if (value_indicator(l, i)) {
      return true;
    }
  }
  return false;
}

// A flow mapping that starts at lines[first] column `col`: nothing but blanks
// and comments may follow its closing brace in the document.
std::optional<std::string> check_flow_root(const std::vector<line>& lines, std::size_t first, std::size_t end,
                                           std::size_t col) {
  int depth = 0;
  char quote = 0;
  bool closed = false;
  for (std::size_t li = first; li < end; ++li) {
    std::string_view l = lines[li].text;
    for (std::size_t i = li == first ? col : 0; i < l.size(); ++i) {
      char c = l[i];
      if (quote) {
        if (quote == '"' && c == '\\') {
          ++i;
        } else if (c == quote) {
          if (quote == '\'' && i + 1 < l.size() && l[i + 1] == '\'')
            ++i;
          else
            quote = 0;
        }
        continue;
      }
      if (c == ' ' || c == '\t' || c == '\r') continue;
      if (c == '#' && (i == 0 || l[i - 1] == ' ' || l[i - 1] == '\t')) break;  // a comment
      if (closed)
        return "line " + std::to_string(lines[li].number) +
               ": text after the closing '}' of the document's mapping";
      if (c == '"' || c == '\'') {
        quote = c;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (--depth == 0) closed = true;
      }
    }
  }
  if (!closed)
    return "line " + std::to_string(lines[first].number) +
           ": the '{' of the document's mapping is never closed";
  return std::nullopt;
}

}  // namespace

std::optional<std::string> yaml_mapping_problem(std::string_view text) {
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  // YAML is text, and yaml-cpp takes a NUL for the end of its input, so that
  // what follows is after the root ("\0,m:" hangs it).
  auto line_of = [&](std::size_t at) {
    return std::to_string(1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
  };
  if (auto nul = text.find('\0'); nul != std::string_view::npos)
    return "line " + line_of(nul) + ": a NUL byte (a YAML file is text)";
  // A carriage return is a line end only before a line feed (CRLF files
  // pass); alone, yaml-cpp and this check would read the line differently
  // (":\rl" is a key to one and not the other, and hangs yaml-cpp).
  for (auto cr = text.find('\r'); cr != std::string_view::npos; cr = text.find('\r', cr + 1))
    if (cr + 1 == text.size() || text[cr + 1] != '\n')
      return "line " + line_of(cr) + ": a carriage return without a line feed after it";
  std::vector<line> lines;
  for (std::size_t start = 0, n = 1; start <= text.size(); ++n) {
    auto nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    lines.push_back({text.substr(start, nl - start), n});
    start = nl + 1;
  }
  std::size_t doc = 0;
  auto directive = [&](std::size_t i) { return lines[i].text.substr(0, 1) == "%"; };
  for (std::size_t i = 0; i < lines.size();) {
    // A '%' at column 0 is a directive to yaml-cpp wherever it stands, and
    // it ends the document before it ("a: b\n%x\n," hangs it).
    if (directive(i)) {
      ++i;
      continue;
    }
    // One document: up to the next "---", "..." or directive line.
    ++doc;
    std::size_t begin = i, end = i;
    std::size_t first_col = 0;
    if (marker(lines[i].text, "---")) {
      // Content on the "---" line itself is the root's start.
      auto rest = lines[i].text.substr(3);
      auto at = rest.find_first_not_of(" \t\r");
      if (at != std::string_view::npos && rest[at] != '#') {
        first_col = 3 + at;
      } else {
        ++begin;
      }
      end = i + 1;
    }
    while (end < lines.size() && !marker(lines[end].text, "---") && !marker(lines[end].text, "...") &&
           !directive(end))
      ++end;
    std::size_t first = begin;
    if (first_col == 0) {
      while (first < end && blank_or_comment(lines[first].text)) ++first;
    }
    if (first < end) {
      auto l = lines[first].text;
      auto where = "document " + std::to_string(doc) + " (line " + std::to_string(lines[first].number) + ")";
      std::size_t col = first_col ? first_col : l.find_first_not_of(" \t");
      if (l[col] == '{') {
        if (auto p = check_flow_root(lines, first, end, col)) return where + " must be a mapping: " + *p;
      } else if (first_col != 0 || col != 0) {
        return where + " must be a mapping: it does not start at column 0";
      } else if (std::string_view("-?,[]}|>&*!%@`").find(l[0]) != std::string_view::npos || !has_key(l)) {
        return where + " must be a mapping: it does not start with a key (key: value)";
      }
    }
    i = end;
    if (i < lines.size() && marker(lines[i].text, "...")) {  // the end marker belongs to this document
      // and nothing may follow it on its line: yaml-cpp reads what does as a
      // root (another way to a ',' after the root).
      if (!blank_or_comment(lines[i].text.substr(3)))
        return "line " + std::to_string(lines[i].number) + ": text after the document end marker '...'";
      ++i;
    }
  }
  return std::nullopt;
}

}  // namespace tjob::detail
