# The Vulkan compute device layer (src/vulkan, docs/vulkan.md).
#   -DKVS_VULKAN=AUTO  (default) on when the Vulkan headers and glslc are found, else a CPU-only build
#   -DKVS_VULKAN=ON    the same, failing when either is missing
#   -DKVS_VULKAN=OFF   CPU only
# The loader (libvulkan.so.1) is opened at run time, so a binary built with Vulkan still starts,
# and reports one clear error, on a machine without it. Sets KVS_HAVE_VULKAN and KVS_GLSLC.
set(KVS_VULKAN AUTO CACHE STRING "Vulkan compute device layer: AUTO, ON or OFF")
set_property(CACHE KVS_VULKAN PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${KVS_VULKAN}" kvs_vulkan_mode)
if(NOT kvs_vulkan_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "KVS_VULKAN='${KVS_VULKAN}': expected AUTO, ON or OFF")
endif()
set(KVS_HAVE_VULKAN OFF)
if(kvs_vulkan_mode STREQUAL "OFF")
  message(STATUS "kvshrink: Vulkan off (-DKVS_VULKAN=OFF): CPU-only build")
else()
  find_path(KVS_VULKAN_INCLUDE_DIR vulkan/vulkan.h)
  find_program(KVS_GLSLC glslc)
  set(kvs_vulkan_missing "")
  if(NOT KVS_VULKAN_INCLUDE_DIR)
    list(APPEND kvs_vulkan_missing "the Vulkan headers (vulkan/vulkan.h, Debian: libvulkan-dev)")
  endif()
  if(NOT KVS_GLSLC)
    list(APPEND kvs_vulkan_missing "glslc (Debian: glslc)")
  endif()
  if(kvs_vulkan_missing)
    list(JOIN kvs_vulkan_missing " and " kvs_missing_text)
    if(kvs_vulkan_mode STREQUAL "ON")
      message(FATAL_ERROR "-DKVS_VULKAN=ON but ${kvs_missing_text} not found (scripts/setup installs them)")
    endif()
    message(STATUS "kvshrink: Vulkan off: ${kvs_missing_text} not found: CPU-only build (scripts/setup installs them)")
  else()
    set(KVS_HAVE_VULKAN ON)
    message(STATUS "kvshrink: Vulkan on (headers ${KVS_VULKAN_INCLUDE_DIR}, ${KVS_GLSLC})")
  endif()
endif()

# kvs_vulkan_shaders(<target> <out.cpp> <shader dir> VARIANTS name|source|DEFINE1,DEFINE2 ...)
# Compiles each variant with glslc to SPIR-V at build time and embeds the words in <out.cpp>
# (cmake/EmbedSpirv.cmake), added to <target>'s sources: no shader file is read at run time.
function(kvs_vulkan_shaders tgt out_cpp shader_dir)
  cmake_parse_arguments(ARG "" "" "VARIANTS" ${ARGN})
  file(GLOB shader_includes CONFIGURE_DEPENDS ${shader_dir}/*.glsl)
  set(spvs "")
  set(names "")
  foreach(v IN LISTS ARG_VARIANTS)
    string(REPLACE "|" ";" parts "${v}")
    list(GET parts 0 name)
    list(GET parts 1 src)
    list(LENGTH parts n_parts)
    set(defs "")
    if(n_parts GREATER 2)
      list(GET parts 2 def_text)
      string(REPLACE "," ";" def_list "${def_text}")
      foreach(d IN LISTS def_list)
        list(APPEND defs "-D${d}")
      endforeach()
    endif()
    set(spv ${CMAKE_CURRENT_BINARY_DIR}/shaders/${name}.spv)
    add_custom_command(OUTPUT ${spv}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/shaders
      COMMAND ${KVS_GLSLC} --target-env=vulkan1.1 -O -Werror ${defs} -I ${shader_dir} -o ${spv} ${shader_dir}/${src}
      DEPENDS ${shader_dir}/${src} ${shader_includes}
      COMMENT "glslc ${name}.spv"
      VERBATIM)
    list(APPEND spvs ${spv})
    list(APPEND names ${name})
  endforeach()
  list(JOIN names "," names_text)
  list(JOIN spvs "," spvs_text)
  add_custom_command(OUTPUT ${out_cpp}
    COMMAND ${CMAKE_COMMAND} -DNAMES=${names_text} -DSPVS=${spvs_text} -DOUT=${out_cpp}
            -P ${PROJECT_SOURCE_DIR}/cmake/EmbedSpirv.cmake
    DEPENDS ${spvs} ${PROJECT_SOURCE_DIR}/cmake/EmbedSpirv.cmake
    COMMENT "embedding the SPIR-V shaders"
    VERBATIM)
  target_sources(${tgt} PRIVATE ${out_cpp})
endfunction()
