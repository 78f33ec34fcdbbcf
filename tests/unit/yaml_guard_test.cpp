// The check that keeps yaml-cpp 0.7 from inputs it never returns from.
#include "core/yaml_guard.hpp"

#include <doctest/doctest.h>

#include <string>

using tjob::detail::yaml_mapping_problem;

TEST_CASE("documents whose root is not a mapping are refused before yaml-cpp sees them") {
  // Each of these hangs yaml-cpp 0.7, growing its memory (found by fuzz_runtimes).
  for (std::string text : {",",
                           " ,",
                           ", a",
                           "- a\n,",
                           "[b]\n,",
                           "[b],",
                           "\"x\",",
                           "'x',",
                           "&a x\n,",
                           "{b: c}\n,",
                           "{b: c},",
                           "a: b\n---\n,",
                           "a: b\n...\n,",
                           "# c\n,",
                           "- - a\n,",
                           "'x','y: z\n",
                           "\"x\",\"y: z\n",
                           "'x'\n,a: b\n",
                           "'x':/\n,\n",
                           "\"x\":b\n,\n",
                           "a: b\n%x\n,\n",
                           "a: b\n%YAML 1.2\n,\n"}) {
    CAPTURE(text);
    auto p = yaml_mapping_problem(text);
    REQUIRE(p.has_value());
    CHECK(p->find("must be a mapping") != std::string::npos);
  }
  CHECK(*yaml_mapping_problem("a: b\n---\n- x\n") ==
        "document 2 (line 3) must be a mapping: it does not start with a key (key: value)");
  CHECK(*yaml_mapping_problem("  a: b\n") ==
        "document 1 (line 1) must be a mapping: it does not start at column 0");
  CHECK(yaml_mapping_problem("{a: [1, 2]}\n# done\nx")->find("text after the closing '}'") !=
        std::string::npos);
  CHECK(yaml_mapping_problem("{a: [1, 2]")->find("never closed") != std::string::npos);
  // found by fuzz_runtimes: a quoted scalar after "..." on its line hangs yaml-cpp
  CHECK(*yaml_mapping_problem("a: b\n... \"x\",y:\n") == "line 2: text after the document end marker '...'");
  CHECK(*yaml_mapping_problem("... 'x',\n") == "line 1: text after the document end marker '...'");
  CHECK(*yaml_mapping_problem(std::string("a: b\n\0,\tm:", 10)) ==
        "line 2: a NUL byte (a YAML file is text)");
  // found by fuzz_runtimes: ":\r" is a key to the check and not to yaml-cpp
  CHECK(*yaml_mapping_problem(":\rl\n#\n\"\"\"\",") ==
        "line 1: a carriage return without a line feed after it");
  CHECK(*yaml_mapping_problem("a: b\r\nc: d\r") == "line 2: a carriage return without a line feed after it");
}

TEST_CASE("mappings in every form tjob reads pass") {
  for (std::string text : {"",
                           "\n\n# only a comment\n",
                           "a: b\n",
                           "\xEF\xBB\xBF"
                           "a: b\n",
                           "a:\n  - x\n  - y\n",
                           "\"quoted key\": 1\n",
                           "'it''s': 1\n",
                           "'spaced' : 1\n",
                           "\"a:b\": c\n",
                           "'k':\n  v: 1\n",
                           "%YAML 1.2\n---\nkind: x\n",
                           "%YAML 1.2\n%TAG ! tag:x,2000:\n---\nkind: x\n",
                           "%x\nkind: x\n",
                           "--- # first\nkind: x\n---\nkind: y\n...\n",
                           "a: b\n... # end\n",
                           "kind: x\r\nmetadata: {name: y}\r\n",
                           "script: |\n  , a line that starts with a comma\n  - and a dash\nnext: 1\n",
                           "{\"apiVersion\": \"v1\", \"kind\": \"Config\", \"clusters\": []}\n",
                           "--- {\"kind\": \"Config\"}\n",
                           "{a: \"}\", b: '{'} # fine\n",
                           "url: http://x:80/y\nk: v\n",
                           "key: value # comment\n,not: seen\n"}) {
    CAPTURE(text);
    CHECK_FALSE(yaml_mapping_problem(text).has_value());
  }
}
