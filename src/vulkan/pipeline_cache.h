// Compute pipelines, built on first use and kept, keyed by shader name and specialisation
// constants (one pipeline per distinct key). Every pipeline's interface: n storage buffers at
// bindings 0..n-1 of set 0, and a push-constant block of push_bytes.
#pragma once
#include <vulkan/vulkan.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kvs::vulkan {

class Context;

struct Pipeline {
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
  uint32_t n_buffers = 0;
  uint32_t push_bytes = 0;
};

class PipelineCache {
 public:
  explicit PipelineCache(Context& ctx) : ctx_(ctx) {}
  ~PipelineCache();
  PipelineCache(const PipelineCache&) = delete;
  PipelineCache& operator=(const PipelineCache&) = delete;

  // spec[i] is specialisation constant i (32-bit). Fails naming the shader and the call.
  const Pipeline& get(const std::string& shader, uint32_t n_buffers, uint32_t push_bytes,
                      const std::vector<uint32_t>& spec);
  size_t size() const { return pipelines_.size(); }

 private:
  Context& ctx_;
  std::map<std::pair<std::string, std::vector<uint32_t>>, Pipeline> pipelines_;
};

}  // namespace kvs::vulkan
