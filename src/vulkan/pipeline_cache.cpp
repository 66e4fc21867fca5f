#include "vulkan/pipeline_cache.h"

#include <fmt/format.h>

#include "core/error.h"
#include "vulkan/api.h"
#include "vulkan/check.h"
#include "vulkan/context.h"
#include "vulkan/shaders.h"

namespace kvs::vulkan {

const EmbeddedShader& shader(std::string_view name) {
  std::string names;
  for (const auto& s : embedded_shaders()) {
    if (name == s.name) return s;
    names += fmt::format("{}{}", names.empty() ? "" : ", ", s.name);
  }
  fail("Vulkan: no shader '{}' in this build (built in: {})", name, names);
}

PipelineCache::~PipelineCache() {
  const Api& vk = api();
  for (auto& [key, p] : pipelines_) {
    vk.vkDestroyPipeline(ctx_.device(), p.pipeline, nullptr);
    vk.vkDestroyPipelineLayout(ctx_.device(), p.layout, nullptr);
    vk.vkDestroyDescriptorSetLayout(ctx_.device(), p.set_layout, nullptr);
  }
}

const Pipeline& PipelineCache::get(const std::string& name, uint32_t n_buffers, uint32_t push_bytes,
                                   const std::vector<uint32_t>& spec) {
  auto key = std::make_pair(name, spec);
  if (auto it = pipelines_.find(key); it != pipelines_.end()) return it->second;
  const EmbeddedShader& sh = shader(name);
  const Api& vk = api();
  VkDevice dev = ctx_.device();
  Pipeline p;
  p.n_buffers = n_buffers;
  p.push_bytes = push_bytes;
  VkShaderModule module = VK_NULL_HANDLE;
  try {
    std::vector<VkDescriptorSetLayoutBinding> binds(n_buffers);
    for (uint32_t i = 0; i < n_buffers; ++i)
      binds[i] = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
    VkDescriptorSetLayoutCreateInfo dl{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    dl.bindingCount = n_buffers;
    dl.pBindings = binds.data();
    KVS_VK(vk.vkCreateDescriptorSetLayout(dev, &dl, nullptr, &p.set_layout));
    VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes};
    VkPipelineLayoutCreateInfo pl{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    pl.setLayoutCount = 1;
    pl.pSetLayouts = &p.set_layout;
    pl.pushConstantRangeCount = push_bytes ? 1 : 0;
    pl.pPushConstantRanges = &range;
    KVS_VK(vk.vkCreatePipelineLayout(dev, &pl, nullptr, &p.layout));
    VkShaderModuleCreateInfo sm{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    sm.codeSize = sh.n_words * sizeof(uint32_t);
    sm.pCode = sh.words;
    KVS_VK(vk.vkCreateShaderModule(dev, &sm, nullptr, &module));
    std::vector<VkSpecializationMapEntry> entries(spec.size());
    for (uint32_t i = 0; i < spec.size(); ++i) entries[i] = {i, i * uint32_t(sizeof(uint32_t)), sizeof(uint32_t)};
    VkSpecializationInfo si{uint32_t(entries.size()), entries.data(), spec.size() * sizeof(uint32_t), spec.data()};
    VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    ci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
    ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    ci.stage.module = module;
    ci.stage.pName = "main";
    ci.stage.pSpecializationInfo = spec.empty() ? nullptr : &si;
    ci.layout = p.layout;
    const VkResult r = vk.vkCreateComputePipelines(dev, VK_NULL_HANDLE, 1, &ci, nullptr, &p.pipeline);
    if (r != VK_SUCCESS) check(r, fmt::format("vkCreateComputePipelines({})", name).c_str());
    vk.vkDestroyShaderModule(dev, module, nullptr);
  } catch (...) {
    if (module) vk.vkDestroyShaderModule(dev, module, nullptr);
    if (p.layout) vk.vkDestroyPipelineLayout(dev, p.layout, nullptr);
    if (p.set_layout) vk.vkDestroyDescriptorSetLayout(dev, p.set_layout, nullptr);
    throw;
  }
  return pipelines_.emplace(std::move(key), p).first->second;
}

}  // namespace kvs::vulkan
