// The compute shaders, compiled from src/vulkan/shaders/*.comp by glslc at build time and embedded
// as SPIR-V words (cmake/EmbedSpirv.cmake writes the table): nothing is read from disk at run time.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace kvs::vulkan {

struct EmbeddedShader {
  const char* name;  // the variant's name, e.g. "mul_mat_vec_q8_0"
  const uint32_t* words;
  size_t n_words;
};

std::span<const EmbeddedShader> embedded_shaders();
// The shader called name; fails naming it (and the shaders built in) when there is none.
const EmbeddedShader& shader(std::string_view name);

}  // namespace kvs::vulkan
