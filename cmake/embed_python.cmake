# Writes OUT: a C++ file holding the Python helper that engines put on a
# job's PYTHONPATH (adapters/progress/tjob_shim.py as tjob/__init__.py, and
# python/tjob/report.py as tjob/report.py), so it travels inside the binary.
file(READ "${SRC}/adapters/progress/tjob_shim.py" shim)
file(READ "${SRC}/python/tjob/report.py" report)
set(body "// Generated from adapters/progress/tjob_shim.py and python/tjob/report.py; do not edit.\n")
string(APPEND body "namespace tjob::python {\nextern const char* const helper_init_py;\nextern const char* const helper_report_py;\n")
string(APPEND body "const char* const helper_init_py = R\"tjob_py(${shim})tjob_py\";\n")
string(APPEND body "const char* const helper_report_py = R\"tjob_py(${report})tjob_py\";\n")
string(APPEND body "}  // namespace tjob::python\n")
file(WRITE "${OUT}.tmp" "${body}")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT}.tmp" "${OUT}")
