// Load-time repacking of Q4_0 / Q8_0 matrices for the active kernel table (kernels/packed_weights.h).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <vector>

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

// Whether t is packed: the active kernels have its type's tile, and its rows are whole blocks
// (a row length off the block size is left to matmul's error message).
bool packable(const TensorView& t) {
  return t.valid() && kernels::packing_active(t.type) && t.cols() % kernels::QK8_0 == 0;
}

}  // namespace

void repack_weights(Model& m) {
  // The matrices in the order a decode step reads them, each once (the output projection also
  // when tied to the token embedding: the embedding reads a few rows of the original bytes per
  // token, the output matmul every row; it is then the same tensor, packed once).
  std::vector<const TensorView*> todo;
  auto add = [&](const TensorView& t) {
    if (!packable(t)) return;
    for (const TensorView* u : todo)
      if (u->data == t.data) return;
    todo.push_back(&t);
  };
  for (const LayerWeights& l : m.layers)
    for (const TensorView* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down}) add(*t);
  add(m.output);
  // One block for all of them (kernels::alloc_packed_storage: huge pages, which the per-layer
  // matrices, each under 2 MiB, would not get alone), in that order; each one's mapped file pages
  // released as soon as it is packed.
  std::vector<kernels::PackSource> sources;
  for (const TensorView* t : todo) sources.push_back({t->type, t->data, t->rows(), t->cols()});
  kernels::pack_weights_in_one_block(sources, [&](size_t i, std::shared_ptr<kernels::PackedWeights> packed) {
    const TensorView& t = *todo[i];
    m.packed.push_back({t.data, packed->bytes()});
    kernels::register_packed(t.data, std::move(packed));
    release_mapped(m, t.data, t.nbytes);
  });
}

}  // namespace kvs::detail
