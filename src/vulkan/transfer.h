// Host <-> device copies through one host-visible staging buffer, in chunks of its size: upload
// copies host bytes into staging and records a buffer copy; both directions submit and wait, so
// the staging bytes can be reused at once and everything recorded before is done.
#pragma once
#include <cstddef>
#include <cstdint>

#include "vulkan/memory.h"

namespace kvs::vulkan {

class Transfer {
 public:
  Transfer(Context& ctx, VkDeviceSize staging_bytes = VkDeviceSize{32} << 20);

  // dst.offset + at .. + bytes must lie within dst (fails naming the sizes otherwise).
  void upload(const BufferView& dst, const void* src, size_t bytes, VkDeviceSize at = 0);
  void download(const BufferView& src, void* dst, size_t bytes, VkDeviceSize at = 0);

  VkDeviceSize bytes_held() const { return host_.bytes_held(); }

 private:
  Context& ctx_;
  BlockAllocator host_;
  Buffer staging_;
};

}  // namespace kvs::vulkan
