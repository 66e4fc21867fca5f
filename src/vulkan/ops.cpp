#include "vulkan/ops.h"

#include <fmt/format.h>

#include <limits>
#include <vector>

#include "core/error.h"
#include "vulkan/api.h"
#include "vulkan/context.h"

namespace kvs::vulkan {
namespace {

// Workgroup sizes (specialisation constant 0, a power of two): row reductions use 128 lanes, the
// element-wise ops 256; argmax one group of 256.
constexpr uint32_t kRowWg = 128;
constexpr uint32_t kElemWg = 256;
constexpr uint64_t kMaxGroupsX = 65535;  // the minimum maxComputeWorkGroupCount[0] Vulkan guarantees

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

uint32_t u32(const char* op, const char* what, int64_t v) {
  if (v < 0 || v > int64_t(std::numeric_limits<uint32_t>::max()))
    fail("Vulkan {}: {} = {} out of range [0, 2^32)", op, what, v);
  return uint32_t(v);
}

}  // namespace

Ops::Ops(Context& ctx) : ctx_(ctx), pipelines_(ctx) {}

bool Ops::mat_vec_supports(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::Q8_0 || t == DType::Q4_0;
}

void Ops::need(const char* op, const char* what, const BufferView& v, uint64_t bytes) const {
  if (v.size < bytes) fail("Vulkan {}: {} holds {} bytes, the shape needs {}", op, what, v.size, bytes);
}

void Ops::dispatch(const char* op, const std::string& shader, std::initializer_list<BufferView> buffers,
                   const void* push, uint32_t push_bytes, uint64_t groups, uint32_t wg) {
  if (groups == 0) return;
  const uint64_t max_range = ctx_.info().max_storage_buffer_range;
  for (const BufferView& b : buffers)
    if (b.size > max_range)
      fail("Vulkan {}: a buffer of {} bytes exceeds {}'s maxStorageBufferRange of {} bytes", op, b.size,
           ctx_.info().name, max_range);
  const uint64_t gx = groups < kMaxGroupsX ? groups : kMaxGroupsX;
  const uint64_t gy = ceil_div(groups, gx);
  if (gy > kMaxGroupsX) fail("Vulkan {}: {} workgroups are more than one dispatch takes", op, groups);
  const Pipeline& p = pipelines_.get(shader, uint32_t(buffers.size()), push_bytes, {wg});
  const Api& vk = api();
  VkDescriptorSet set = ctx_.descriptor_set(p.set_layout);
  std::vector<VkDescriptorBufferInfo> infos;
  for (const BufferView& b : buffers) infos.push_back({b.buffer, b.offset, b.size});
  std::vector<VkWriteDescriptorSet> writes(infos.size());
  for (size_t i = 0; i < infos.size(); ++i) {
    writes[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    writes[i].dstSet = set;
    writes[i].dstBinding = uint32_t(i);
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  vk.vkUpdateDescriptorSets(ctx_.device(), uint32_t(writes.size()), writes.data(), 0, nullptr);
  VkCommandBuffer cmd = ctx_.cmd();
  vk.vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline);
  vk.vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1, &set, 0, nullptr);
  if (push_bytes) vk.vkCmdPushConstants(cmd, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
  vk.vkCmdDispatch(cmd, uint32_t(gx), uint32_t(gy), 1);
  ctx_.barrier();
}

void Ops::mat_vec(DType wtype, const BufferView& W, int64_t rows, int64_t cols, const BufferView& x,
                  const BufferView& y) {
  const char* op = "mat_vec";
  const char* variant = nullptr;
  uint64_t row_bytes = 0;
  switch (wtype) {
    case DType::F32: variant = "mul_mat_vec_f32"; row_bytes = uint64_t(cols) * 4; break;
    case DType::F16: variant = "mul_mat_vec_f16"; row_bytes = uint64_t(cols) * 2; break;
    case DType::Q8_0: variant = "mul_mat_vec_q8_0"; row_bytes = uint64_t(cols) / 32 * 34; break;
    case DType::Q4_0: variant = "mul_mat_vec_q4_0"; row_bytes = uint64_t(cols) / 32 * 18; break;
    default:
      fail("Vulkan mat_vec: weight type {} has no shader yet (f32, f16, q8_0, q4_0 have)", dtype_name(wtype));
  }
  if (rows <= 0 || cols <= 0) fail("Vulkan mat_vec: shape {} x {} is empty", rows, cols);
  if ((wtype == DType::Q8_0 || wtype == DType::Q4_0) && cols % 32 != 0)
    fail("Vulkan mat_vec: {} rows of {} columns: not a multiple of the 32-element block", dtype_name(wtype), cols);
  struct {
    uint32_t rows, cols;
  } pc{u32(op, "rows", rows), u32(op, "cols", cols)};
  need(op, "the weights", W, row_bytes * uint64_t(rows));
  need(op, "x", x, uint64_t(cols) * 4);
  need(op, "y", y, uint64_t(rows) * 4);
  dispatch(op, variant, {W, x, y}, &pc, sizeof(pc), uint64_t(rows), kRowWg);
}

void Ops::rms_norm(const BufferView& x, const BufferView& w, const BufferView& out, int64_t rows, int64_t n,
                   float eps) {
  const char* op = "rms_norm";
  struct {
    uint32_t rows, n;
    float eps;
  } pc{u32(op, "rows", rows), u32(op, "n", n), eps};
  need(op, "x", x, uint64_t(rows) * n * 4);
  need(op, "w", w, uint64_t(n) * 4);
  need(op, "out", out, uint64_t(rows) * n * 4);
  dispatch(op, "rms_norm", {x, w, out}, &pc, sizeof(pc), uint64_t(rows), kRowWg);
}

void Ops::rope(const BufferView& x, int64_t n_tok, int n_heads, int head_dim, int rot_dim, const BufferView& cos_sin,
               Rope style) {
  const char* op = "rope";
  if (rot_dim <= 0 || rot_dim % 2 != 0 || rot_dim > head_dim)
    fail("Vulkan rope: rot_dim {} must be even and within head_dim {}", rot_dim, head_dim);
  struct {
    uint32_t n_tok, n_heads, head_dim, rot_dim, style;
  } pc{u32(op, "n_tok", n_tok), u32(op, "n_heads", n_heads), u32(op, "head_dim", head_dim),
       u32(op, "rot_dim", rot_dim), uint32_t(style)};
  need(op, "x", x, uint64_t(n_tok) * n_heads * head_dim * 4);
  need(op, "cos_sin", cos_sin, uint64_t(n_tok) * rot_dim * 4);
  const uint64_t pairs = uint64_t(n_tok) * n_heads * (rot_dim / 2);
  u32(op, "pairs", int64_t(pairs));
  dispatch(op, "rope", {x, cos_sin}, &pc, sizeof(pc), ceil_div(pairs, kElemWg), kElemWg);
}

void Ops::silu_mul(const BufferView& gate, const BufferView& up, int64_t n) {
  const char* op = "silu_mul";
  const uint32_t pc = u32(op, "n", n);
  need(op, "gate", gate, uint64_t(n) * 4);
  need(op, "up", up, uint64_t(n) * 4);
  dispatch(op, "silu_mul", {gate, up}, &pc, sizeof(pc), ceil_div(uint64_t(n), kElemWg), kElemWg);
}

void Ops::add(const BufferView& y, const BufferView& x, int64_t n) {
  const char* op = "add";
  const uint32_t pc = u32(op, "n", n);
  need(op, "y", y, uint64_t(n) * 4);
  need(op, "x", x, uint64_t(n) * 4);
  dispatch(op, "add", {y, x}, &pc, sizeof(pc), ceil_div(uint64_t(n), kElemWg), kElemWg);
}

void Ops::soft_max(const BufferView& x, const BufferView& lse, int64_t rows, int64_t n) {
  const char* op = "soft_max";
  struct {
    uint32_t rows, n;
  } pc{u32(op, "rows", rows), u32(op, "n", n)};
  if (n <= 0) fail("Vulkan soft_max: rows of {} elements", n);
  need(op, "x", x, uint64_t(rows) * n * 4);
  need(op, "lse", lse, uint64_t(rows) * 4);
  dispatch(op, "soft_max", {x, lse}, &pc, sizeof(pc), uint64_t(rows), kRowWg);
}

void Ops::argmax(const BufferView& x, int64_t n, const BufferView& out) {
  const char* op = "argmax";
  if (n <= 0 || n >= (int64_t{1} << 31)) fail("Vulkan argmax: n = {} out of range [1, 2^31)", n);
  const uint32_t pc = uint32_t(n);
  need(op, "x", x, uint64_t(n) * 4);
  need(op, "out", out, 4);
  dispatch(op, "argmax", {x, out}, &pc, sizeof(pc), 1, kElemWg);
}

}  // namespace kvs::vulkan
