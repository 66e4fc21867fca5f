# pytest of the Python bindings (tests/python/test_*.py), included from the top-level
# CMakeLists.txt when the bindings are built. The package comes from <build>/python; the tests
# compare with the kvshrink binary of the same build.
add_test(NAME python.bindings
         COMMAND ${Python_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_LIST_DIR})
set_tests_properties(python.bindings PROPERTIES LABELS unit TIMEOUT 300
  ENVIRONMENT "PYTHONPATH=${PROJECT_BINARY_DIR}/python;KVS_SOURCE_DIR=${PROJECT_SOURCE_DIR};KVS_BINARY_DIR=${PROJECT_BINARY_DIR};KVS_CLI=$<TARGET_FILE:kvshrink>")
