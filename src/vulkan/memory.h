// Device memory in large blocks, sub-allocated: each block is one VkBuffer bound to one
// VkDeviceMemory (storage + transfer usage), and a tensor is a range of a block, so a model's
// hundreds of weights cost a handful of allocations (drivers cap them: maxMemoryAllocationCount
// can be 4096). Ranges are aligned to the device's minStorageBufferOffsetAlignment (at least 256
// bytes) so that any range can be bound as a storage buffer. First fit, neighbours merged on free.
#pragma once
#include <vulkan/vulkan.h>

#include <cstdint>
#include <map>
#include <vector>

namespace kvs::vulkan {

class Context;

// A range of a block's buffer, as a shader binding sees it.
struct BufferView {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceSize offset = 0;
  VkDeviceSize size = 0;
};

enum class MemoryKind {
  DeviceLocal,  // weights, activations, cache pages (filled through staging)
  HostVisible,  // staging: mapped, coherent
};

class BlockAllocator;

// One sub-allocation, freed when it goes out of scope. Move-only.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  ~Buffer() { reset(); }
  void reset();

  const BufferView& view() const { return view_; }
  VkDeviceSize size() const { return view_.size; }
  // The mapped bytes of a HostVisible buffer (nullptr for DeviceLocal).
  void* mapped() const { return mapped_; }
  explicit operator bool() const { return owner_ != nullptr; }

 private:
  friend class BlockAllocator;
  BlockAllocator* owner_ = nullptr;
  uint32_t block_ = 0;
  BufferView view_;
  void* mapped_ = nullptr;
};

class BlockAllocator {
 public:
  // block_bytes: the size of a new block (a request larger than it gets a block of its own size).
  BlockAllocator(Context& ctx, MemoryKind kind, VkDeviceSize block_bytes = VkDeviceSize{256} << 20);
  ~BlockAllocator();
  BlockAllocator(const BlockAllocator&) = delete;
  BlockAllocator& operator=(const BlockAllocator&) = delete;

  // bytes > 0. Fails naming the size and the call when the device is out of memory.
  Buffer allocate(VkDeviceSize bytes);

  VkDeviceSize alignment() const { return align_; }
  // Bytes of device memory actually held (every block), and of that what live buffers use.
  VkDeviceSize bytes_held() const;
  VkDeviceSize bytes_in_use() const { return in_use_; }
  size_t blocks() const { return blocks_.size(); }

 private:
  friend class Buffer;
  struct Block {
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceMemory memory = VK_NULL_HANDLE;
    VkDeviceSize size = 0;
    void* mapped = nullptr;
    std::map<VkDeviceSize, VkDeviceSize> free;  // offset -> length, disjoint, not adjacent
  };
  void new_block(VkDeviceSize bytes);
  void release(uint32_t block, VkDeviceSize offset, VkDeviceSize size);

  Context& ctx_;
  MemoryKind kind_;
  VkDeviceSize block_bytes_;
  VkDeviceSize align_;
  VkDeviceSize in_use_ = 0;
  std::vector<Block> blocks_;
};

}  // namespace kvs::vulkan
