// Load-time repacking of Q4_0 / Q8_0 matrices for the active kernel table (kernels/packed_weights.h).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

#include "kernels/packed_weights.h"
#include "model/gguf/gguf.h"
#include "model/model.h"

namespace kvs::detail {
namespace {

// Drops the whole pages of [p, p + n) from the process (file-backed, never written, so a later
// read faults them back from the file). Only inside the GGUF file mapping.
void release_mapped(const Model& m, const void* p, size_t n) {
  if (!m.gguf_file) return;
  const uint8_t* base = m.gguf_file->mapped_data();
  const auto* b = static_cast<const uint8_t*>(p);
  if (base == nullptr || b < base || b + n > base + m.gguf_file->file_size()) return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(b) + page - 1) & ~(page - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(b) + n) & ~(page - 1);
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

void repack(Model& m, const TensorView& t) {
  // (A row length off the block size is left to matmul's error message.)
  if (!kernels::packing_active(t.type) || !t.valid() || t.cols() % kernels::QK8_0 != 0) return;
  for (const Model::Packed& p : m.packed)
    if (p.key == t.data) return;  // tied output = token embedding, packed once
  auto packed = kernels::pack_weights(t.type, t.data, t.rows(), t.cols());
  m.packed.push_back({t.data, packed->bytes()});
  kernels::register_packed(t.data, std::move(packed));
  release_mapped(m, t.data, t.nbytes);
}

}  // namespace

void repack_weights(Model& m) {
  for (const LayerWeights& l : m.layers)
    for (const TensorView* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down}) repack(m, *t);
  // The output projection also when tied to the token embedding: the embedding reads a few rows
  // of the original bytes per token, the output matmul every row.
  repack(m, m.output);
}

}  // namespace kvs::detail
