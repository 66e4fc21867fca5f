# Tests of the public C++ API, included from the top-level CMakeLists.txt (the API's targets are
# defined after tests/ is added):
#  - test_api: GoogleTest against libkvshrink.so and include/kvshrink only (no internal header);
#  - api.installed_consumer: `cmake --install` into build/test_tmp/install, then examples/ built
#    with find_package(kvshrink) and with pkg-config against that tree, and run.
file(GLOB kvs_api_test_srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.cpp)
add_executable(test_api ${kvs_api_test_srcs})
target_link_libraries(test_api PRIVATE kvshrink::kvshrink GTest::gtest GTest::gtest_main)
target_compile_definitions(test_api PRIVATE KVS_SOURCE_DIR="${PROJECT_SOURCE_DIR}" KVS_BINARY_DIR="${PROJECT_BINARY_DIR}")
kvs_target_defaults(test_api)
gtest_discover_tests(test_api PROPERTIES LABELS model DISCOVERY_TIMEOUT 60)

if(TARGET kvshrink AND NOT KVS_SANITIZE)  # an uninstrumented consumer cannot load an ASan library
  add_test(NAME api.installed_consumer
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/installed_consumer.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR}
                   ${PROJECT_BINARY_DIR}/test_tmp/install)
  # It installs the build tree, so not beside another test that might rebuild it.
  set_tests_properties(api.installed_consumer PROPERTIES LABELS unit TIMEOUT 300 RUN_SERIAL ON)
  if(KVS_HAVE_PYTHON)
    set_tests_properties(api.installed_consumer PROPERTIES ENVIRONMENT "KVS_PYTHON=${Python_EXECUTABLE}")
  endif()
endif()

# Layering: every #include of src/ against the link graph (cmake/Layers.cmake).
kvs_write_layers(${PROJECT_BINARY_DIR}/layers.txt)
add_test(NAME api.layering COMMAND ${CMAKE_COMMAND} -DSRC=${PROJECT_SOURCE_DIR}/src -DLAYERS=${PROJECT_BINARY_DIR}/layers.txt
                                   -P ${PROJECT_SOURCE_DIR}/cmake/CheckLayers.cmake)
set_tests_properties(api.layering PROPERTIES LABELS unit TIMEOUT 60)
