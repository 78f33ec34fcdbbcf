// A check run on YAML from outside (runtime manifests, kubeconfig files)
// before yaml-cpp sees it. yaml-cpp 0.7 (Debian 12's) never returns, and
// grows its memory without bound, on a ',' where a document's root node
// should begin or after it has ended: a one-byte file "," hangs it (found by
// fuzz_runtimes; ",", " ,", "- a\n,", "[b],", "\"x\",", "a: b\n---\n,").
// Inside a block mapping the same ',' is a clean parse error. Every document
// tjob reads must be a mapping anyway, so this requires each document's root
// to be one: a block mapping whose first key is at column 0 (a quoted key
// followed by its ':'), or a flow mapping {...} with nothing after its
// closing brace; nothing after a "..." end marker on its line; no NUL byte
// (yaml-cpp reads it as the end of input); no carriage return but in CRLF.
// Each rule closed a hang the fuzzers found (tests/fuzz/corpus/*/regress-*).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tjob::detail {

/// Nothing when every document of `text` has a mapping at its root (as
/// above); else what is wrong, with its line ("document 2 (line 7) does not
/// start with a key at column 0: ...").
std::optional<std::string> yaml_mapping_problem(std::string_view text);

}  // namespace tjob::detail
