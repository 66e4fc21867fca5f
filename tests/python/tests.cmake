# pytest of the Python bindings (tests/python/test_*.py), included from the top-level
# CMakeLists.txt when the bindings are built. The package comes from <build>/python; the tests
# compare with the kvshrink binary of the same build.
add_test(NAME python.bindings
         COMMAND ${Python_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_LIST_DIR})
set_tests_properties(python.bindings PROPERTIES LABELS unit TIMEOUT 300
  ENVIRONMENT "PYTHONPATH=${PROJECT_BINARY_DIR}/python;KVS_SOURCE_DIR=${PROJECT_SOURCE_DIR};KVS_BINARY_DIR=${PROJECT_BINARY_DIR};KVS_CLI=$<TARGET_FILE:kvshrink>")

# `pip install --no-build-isolation .` into a fresh venv (system site-packages for numpy), offline,
# then the package used from outside the checkout. Label slow: pip runs its own CMake build
# (seconds with a warm ccache, minutes without).
add_test(NAME python.pip_install COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/pip_install.sh ${Python_EXECUTABLE}
                                         ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/test_tmp/pip)
set_tests_properties(python.pip_install PROPERTIES LABELS slow TIMEOUT 1800 RUN_SERIAL ON)
