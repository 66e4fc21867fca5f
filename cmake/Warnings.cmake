# Common compile options for kvshrink targets: kvs_target_defaults(<target>)
function(kvs_target_defaults tgt)
  target_compile_options(${tgt} PRIVATE -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare)
  if(KVS_SANITIZE)
    # UBSan is fatal (-fno-sanitize-recover=all): a report fails the test that triggered it instead
    # of scrolling past while the test passes. scripts/sanitize builds and runs the suite this way.
    target_compile_options(${tgt} PRIVATE -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
    target_link_options(${tgt} PRIVATE -fsanitize=address,undefined -fno-sanitize-recover=all)
  endif()
endfunction()

# Sources that use AVX2/FMA/F16C intrinsics; they are only called after a runtime CPU check.
function(kvs_avx2_sources)
  set_source_files_properties(${ARGN} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
endfunction()
