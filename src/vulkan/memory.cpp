#include "vulkan/memory.h"

#include <algorithm>

#include "core/error.h"
#include "vulkan/api.h"
#include "vulkan/check.h"
#include "vulkan/context.h"

namespace kvs::vulkan {
namespace {

VkDeviceSize align_up(VkDeviceSize v, VkDeviceSize a) { return (v + a - 1) / a * a; }

}  // namespace

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    owner_ = o.owner_;
    block_ = o.block_;
    view_ = o.view_;
    mapped_ = o.mapped_;
    o.owner_ = nullptr;
    o.mapped_ = nullptr;
    o.view_ = {};
  }
  return *this;
}

void Buffer::reset() {
  if (owner_) owner_->release(block_, view_.offset, view_.size);
  owner_ = nullptr;
  mapped_ = nullptr;
  view_ = {};
}

BlockAllocator::BlockAllocator(Context& ctx, MemoryKind kind, VkDeviceSize block_bytes)
    : ctx_(ctx), kind_(kind), block_bytes_(block_bytes) {
  align_ = std::max<VkDeviceSize>(256, ctx.info().min_storage_buffer_offset_alignment);
  block_bytes_ = align_up(std::max(block_bytes_, align_), align_);
}

BlockAllocator::~BlockAllocator() {
  const Api& vk = api();
  for (auto& b : blocks_) {
    if (b.mapped) vk.vkUnmapMemory(ctx_.device(), b.memory);
    vk.vkDestroyBuffer(ctx_.device(), b.buffer, nullptr);
    vk.vkFreeMemory(ctx_.device(), b.memory, nullptr);
  }
}

VkDeviceSize BlockAllocator::bytes_held() const {
  VkDeviceSize s = 0;
  for (const auto& b : blocks_) s += b.size;
  return s;
}

void BlockAllocator::new_block(VkDeviceSize bytes) {
  const Api& vk = api();
  VkDevice dev = ctx_.device();
  Block b;
  b.size = bytes;
  VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  info.size = bytes;
  info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  KVS_VK(vk.vkCreateBuffer(dev, &info, nullptr, &b.buffer));
  VkMemoryRequirements req{};
  vk.vkGetBufferMemoryRequirements(dev, b.buffer, &req);
  const bool host = kind_ == MemoryKind::HostVisible;
  const VkMemoryPropertyFlags need =
      host ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT : 0;
  const VkMemoryPropertyFlags prefer = host ? VK_MEMORY_PROPERTY_HOST_CACHED_BIT : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  VkMemoryAllocateInfo a{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  a.allocationSize = req.size;
  try {
    a.memoryTypeIndex = ctx_.memory_type(req.memoryTypeBits, need, prefer);
    const VkResult r = vk.vkAllocateMemory(dev, &a, nullptr, &b.memory);
    if (r != VK_SUCCESS)
      fail("Vulkan: vkAllocateMemory of {} bytes ({}) on {} failed: {} (device memory held already: {} bytes)",
           bytes, host ? "host-visible" : "device-local", ctx_.info().name, result_name(r) ? result_name(r) : "?",
           bytes_held());
    KVS_VK(vk.vkBindBufferMemory(dev, b.buffer, b.memory, 0));
    if (host) KVS_VK(vk.vkMapMemory(dev, b.memory, 0, VK_WHOLE_SIZE, 0, &b.mapped));
  } catch (...) {
    if (b.memory) vk.vkFreeMemory(dev, b.memory, nullptr);
    vk.vkDestroyBuffer(dev, b.buffer, nullptr);
    throw;
  }
  b.free.emplace(0, bytes);
  blocks_.push_back(std::move(b));
}

Buffer BlockAllocator::allocate(VkDeviceSize bytes) {
  if (bytes == 0) fail("Vulkan: a buffer of 0 bytes was asked for");
  const VkDeviceSize size = align_up(bytes, align_);
  // First fit in block bi: the offset taken, or none.
  auto take = [&](uint32_t bi, VkDeviceSize* off) -> bool {
    auto& fl = blocks_[bi].free;
    for (auto it = fl.begin(); it != fl.end(); ++it) {
      if (it->second < size) continue;
      *off = it->first;
      const VkDeviceSize len = it->second;
      fl.erase(it);
      if (len > size) fl.emplace(*off + size, len - size);
      return true;
    }
    return false;
  };
  uint32_t bi = 0;
  VkDeviceSize off = 0;
  while (bi < blocks_.size() && !take(bi, &off)) ++bi;
  if (bi == blocks_.size()) {
    new_block(std::max(block_bytes_, size));
    const bool fits = take(bi, &off);
    KVS_ASSERT(fits);
  }
  Buffer out;
  out.owner_ = this;
  out.block_ = bi;
  out.view_ = {blocks_[bi].buffer, off, bytes};
  if (blocks_[bi].mapped) out.mapped_ = static_cast<char*>(blocks_[bi].mapped) + off;
  in_use_ += size;
  return out;
}

void BlockAllocator::release(uint32_t block, VkDeviceSize offset, VkDeviceSize bytes) {
  const VkDeviceSize size = align_up(bytes, align_);
  auto& fl = blocks_[block].free;
  auto [it, inserted] = fl.emplace(offset, size);
  KVS_ASSERT(inserted);
  auto next = std::next(it);
  if (next != fl.end() && it->first + it->second == next->first) {
    it->second += next->second;
    fl.erase(next);
  }
  if (it != fl.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      fl.erase(it);
    }
  }
  in_use_ -= size;
}

}  // namespace kvs::vulkan
