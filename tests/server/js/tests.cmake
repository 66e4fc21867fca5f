# The official `openai` npm client against `kvshrink serve` (docs/server.md). `npm ci` installs the
# locked client into the build tree (server_js/, never the source tree), then node's test runner
# starts servers on free loopback ports. Included from tests/CMakeLists.txt.
find_program(KVS_NODE node)
find_program(KVS_NPM npm)
if(TARGET kvshrink)
  if(KVS_NODE AND KVS_NPM)
    set(js_dir ${PROJECT_BINARY_DIR}/server_js)
    set(js_model ${KVS_TEST_DATA}/models/stories260K/stories260K.gguf)
    foreach(f package.json package-lock.json server_process.mjs openai.test.mjs scoring.test.mjs)
      configure_file(${CMAKE_CURRENT_LIST_DIR}/${f} ${js_dir}/${f} COPYONLY)
    endforeach()
    add_test(NAME server.npm_ci COMMAND ${KVS_NPM} ci --no-audit --no-fund --prefer-offline WORKING_DIRECTORY ${js_dir})
    set_tests_properties(server.npm_ci PROPERTIES FIXTURES_SETUP server_js LABELS model TIMEOUT 300)
    add_test(NAME server.openai_client COMMAND ${KVS_NODE} --test openai.test.mjs
             WORKING_DIRECTORY ${js_dir})
    set_tests_properties(server.openai_client PROPERTIES FIXTURES_REQUIRED server_js LABELS model TIMEOUT 300
        ENVIRONMENT "KVSHRINK_BIN=$<TARGET_FILE:kvshrink>;KVSHRINK_MODEL=${js_model}")
    # Log-probabilities, echo, n and several prompts through the same client.
    add_test(NAME server.openai_scoring COMMAND ${KVS_NODE} --test scoring.test.mjs WORKING_DIRECTORY ${js_dir})
    set_tests_properties(server.openai_scoring PROPERTIES FIXTURES_REQUIRED server_js LABELS model TIMEOUT 300
        ENVIRONMENT "KVSHRINK_BIN=$<TARGET_FILE:kvshrink>;KVSHRINK_MODEL=${js_model}")
  else()
    # Missing node/npm must fail the suite, not skip it silently.
    add_test(NAME server.openai_client COMMAND ${CMAKE_COMMAND} -E echo "node and npm are needed (scripts/setup installs them)")
    set_tests_properties(server.openai_client PROPERTIES WILL_FAIL TRUE LABELS model)
  endif()
endif()
