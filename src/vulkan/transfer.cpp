#include "vulkan/transfer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "vulkan/api.h"
#include "vulkan/context.h"

namespace kvs::vulkan {

Transfer::Transfer(Context& ctx, VkDeviceSize staging_bytes)
    : ctx_(ctx), host_(ctx, MemoryKind::HostVisible, staging_bytes) {
  staging_ = host_.allocate(staging_bytes);
}

void Transfer::upload(const BufferView& dst, const void* src, size_t bytes, VkDeviceSize at) {
  if (at + bytes > dst.size) fail("Vulkan upload: {} bytes at {} do not fit a buffer of {} bytes", bytes, at, dst.size);
  const auto* p = static_cast<const char*>(src);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min<size_t>(bytes - done, staging_.size());
    ctx_.submit_and_wait();  // earlier work may still read the staging bytes
    std::memcpy(staging_.mapped(), p + done, n);
    VkBufferCopy c{staging_.view().offset, dst.offset + at + done, n};
    api().vkCmdCopyBuffer(ctx_.cmd(), staging_.view().buffer, dst.buffer, 1, &c);
    ctx_.barrier();
    ctx_.submit_and_wait();
    done += n;
  }
}

void Transfer::download(const BufferView& src, void* dst, size_t bytes, VkDeviceSize at) {
  if (at + bytes > src.size)
    fail("Vulkan download: {} bytes at {} do not fit a buffer of {} bytes", bytes, at, src.size);
  auto* p = static_cast<char*>(dst);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min<size_t>(bytes - done, staging_.size());
    ctx_.barrier();  // the shader writes recorded before are visible to the copy
    VkBufferCopy c{src.offset + at + done, staging_.view().offset, n};
    api().vkCmdCopyBuffer(ctx_.cmd(), src.buffer, staging_.view().buffer, 1, &c);
    ctx_.submit_and_wait();
    std::memcpy(p + done, staging_.mapped(), n);
    done += n;
  }
}

}  // namespace kvs::vulkan
