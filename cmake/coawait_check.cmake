# tools/coawait_check: under clang (the sanitizer tiers), every source of the
# project compiles with a plugin that refuses the coroutine code g++ 12
# miscompiles (docs/architecture.md, "g++ 12 and coroutines"). The plugin is
# built here, at configure time, by the same clang, against Debian's
# libclang-14-dev headers; it costs the build a walk of each AST.
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  set(tjob_coawait_default ON)
else()
  set(tjob_coawait_default OFF)
endif()
option(TJOB_COAWAIT_CHECK "Compile with tools/coawait_check (clang only)" ${tjob_coawait_default})
if(NOT TJOB_COAWAIT_CHECK)
  return()
endif()
string(REGEX MATCH "^[0-9]+" tjob_clang_major "${CMAKE_CXX_COMPILER_VERSION}")
find_path(TJOB_CLANG_INCLUDE clang/Frontend/FrontendPluginRegistry.h
          PATHS /usr/lib/llvm-${tjob_clang_major}/include NO_DEFAULT_PATH)
if(NOT TJOB_CLANG_INCLUDE)
  message(FATAL_ERROR "TJOB_COAWAIT_CHECK needs clang's headers (Debian: libclang-${tjob_clang_major}-dev, "
                      "which scripts/setup installs), or -DTJOB_COAWAIT_CHECK=OFF")
endif()
set(tjob_coawait_source ${PROJECT_SOURCE_DIR}/tools/coawait_check/coawait_check.cpp)
set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${tjob_coawait_source})
# Named by its source's hash: ccache hashes the -fplugin path, not the file,
# so a changed check reaches every source again.
file(MD5 ${tjob_coawait_source} tjob_coawait_hash)
string(SUBSTRING ${tjob_coawait_hash} 0 12 tjob_coawait_hash)
set(TJOB_COAWAIT_PLUGIN ${PROJECT_BINARY_DIR}/coawait_check-${tjob_coawait_hash}.so)
if(NOT EXISTS ${TJOB_COAWAIT_PLUGIN})
  message(STATUS "Building tools/coawait_check")
  execute_process(
    COMMAND ${CMAKE_CXX_COMPILER} -shared -fPIC -fno-rtti -O1 -std=c++17 -I${TJOB_CLANG_INCLUDE}
            -D__STDC_CONSTANT_MACROS -D__STDC_FORMAT_MACROS -D__STDC_LIMIT_MACROS
            ${tjob_coawait_source} -o ${TJOB_COAWAIT_PLUGIN}
    RESULT_VARIABLE tjob_coawait_rc ERROR_VARIABLE tjob_coawait_err)
  if(NOT tjob_coawait_rc EQUAL 0)
    file(REMOVE ${TJOB_COAWAIT_PLUGIN})
    message(FATAL_ERROR "tools/coawait_check did not build:\n${tjob_coawait_err}")
  endif()
endif()
add_compile_options(-fplugin=${TJOB_COAWAIT_PLUGIN})
