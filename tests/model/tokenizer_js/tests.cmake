# kvshrink's tokenizers against transformers.js's on Qwen3's, Gemma 2's and Gemma 3's own tokenizer
# files (issue 26; reference.test.mjs says what is compared). `npm ci` installs the locked packages
# (the reference code and the three tokenizer files, ~460 MB unpacked) into the build tree, never the
# source tree. Included from tests/CMakeLists.txt; node and npm come from scripts/setup.
if(TARGET kvshrink)
  if(KVS_NODE AND KVS_NPM)
    set(tokjs_dir ${PROJECT_BINARY_DIR}/tokenizer_js)
    foreach(f package.json package-lock.json reference.test.mjs)
      configure_file(${CMAKE_CURRENT_LIST_DIR}/${f} ${tokjs_dir}/${f} COPYONLY)
    endforeach()
    add_test(NAME model.tokenizer_js_npm_ci COMMAND ${KVS_NPM} ci --no-audit --no-fund --prefer-offline
             WORKING_DIRECTORY ${tokjs_dir})
    set_tests_properties(model.tokenizer_js_npm_ci PROPERTIES FIXTURES_SETUP tokenizer_js LABELS model TIMEOUT 600)
    add_test(NAME model.tokenizers_vs_transformers_js COMMAND ${KVS_NODE} --test reference.test.mjs
             WORKING_DIRECTORY ${tokjs_dir})
    set_tests_properties(model.tokenizers_vs_transformers_js PROPERTIES FIXTURES_REQUIRED tokenizer_js LABELS model
        TIMEOUT 300 ENVIRONMENT "KVSHRINK_BIN=$<TARGET_FILE:kvshrink>;KVSHRINK_TEST_DATA=${KVS_TEST_DATA}")
  else()
    add_test(NAME model.tokenizers_vs_transformers_js COMMAND ${CMAKE_COMMAND} -E echo "node and npm are needed (scripts/setup installs them)")
    set_tests_properties(model.tokenizers_vs_transformers_js PROPERTIES WILL_FAIL TRUE LABELS model)
  endif()
endif()
