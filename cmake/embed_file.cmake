# Writes OUT: a C++ file defining `const char* const SYMBOL` (a namespace-
# qualified name) as the text of IN, so a document travels inside the binary.
file(READ "${IN}" text)
string(REGEX MATCH "^(.*)::([^:]+)$" _ "${SYMBOL}")
set(ns "${CMAKE_MATCH_1}")
set(name "${CMAKE_MATCH_2}")
set(body "// Generated from ${IN}; do not edit.\nnamespace ${ns} {\nextern const char* const ${name};\nconst char* const ${name} = R\"tjob_embedded(${text})tjob_embedded\";\n}  // namespace ${ns}\n")
file(WRITE "${OUT}.tmp" "${body}")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT}.tmp" "${OUT}")
