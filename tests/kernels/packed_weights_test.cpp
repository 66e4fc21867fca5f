// Repacked Q4_0 and Q8_0 (kernels/packed_weights.h): pack/unpack round trip, the scalar packed
// tile against the types' scalar reference (ref::vec_dot), the AVX-512 packed tiles against the
// scalar packed tile, and matmul through the registry on every table (the tables without a packed
// tile must ignore it) for row counts that are not multiples of 16, block counts that are odd and
// not multiples of 8 (K not a multiple of 256), n_tok = 1 and > 1. Every test runs for both types.
//
// Tolerance: every path computes the same exact integer block sums; only the float summation of
// d_w * d_a * sum over the blocks differs (order, FMA), so 1e-5 of the sum of |terms|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/matmul.h"
#include "kernels/matmul_internal.h"
#include "kernels/q4_0_packed.h"
#include "kernels/q8_0_packed.h"
#include "kernels/ref/ref.h"
#include "scoped_env.h"

namespace kvs::kernels {
namespace {

using test::Path;

const DType kTypes[] = {DType::Q4_0, DType::Q8_0};

std::vector<uint8_t> random_rows(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::vector<uint8_t> w;  // [rows][cols / 32 blocks]
  for (int64_t r = 0; r < rows; ++r) {
    const auto row = test::random_row(t, cols, seed + static_cast<uint32_t>(r));
    w.insert(w.end(), row.begin(), row.end());
  }
  return w;
}

// Packed activations (for weights of type t) of nt random rows: [nt][stride bytes].
std::vector<uint8_t> make_act(DType t, int64_t nt, int64_t cols, size_t stride, uint32_t seed) {
  std::vector<uint8_t> a(stride * nt);
  const auto x = test::randn(nt * cols, seed);
  for (int64_t i = 0; i < nt; ++i) {
    ref::prepare_act(t, x.data() + i * cols, a.data() + i * stride, cols);
    finish_act_packed(a.data() + i * stride, cols, packed_layout(t).offset);
  }
  return a;
}

// Row r of p back in the GGUF blocks of p.type.
std::vector<uint8_t> unpacked(const PackedWeights& p, int64_t r) {
  std::vector<uint8_t> out(dtype_row_bytes(p.type, p.cols));
  unpack_row(p, r, out.data());
  return out;
}

// Sum of |d_w * d_a * block dot| bound, from the dequantised row and the activation's scales.
double tol(DType t, const uint8_t* wrow, const uint8_t* act, int64_t cols) {
  std::vector<float> w(cols);
  ref::dequantize_row(t, wrow, w.data(), cols);
  const auto* ab = reinterpret_cast<const block_q8_0*>(act);
  const float* sa = act_q8_0_scales(act, cols);
  double s = 0;
  for (int64_t c = 0; c < cols; ++c) s += std::fabs(double(w[c]) * sa[c / 32] * ab[c / 32].qs[c % 32]);
  return 1e-5 * s + 1e-7;
}

const int64_t kRows[] = {1, 7, 16, 17, 37, 100};
const int64_t kCols[] = {32, 96, 160, 288, 800};  // nb = 1, 3, 5, 9, 25

TEST(PackedWeights, PackUnpackRoundTrip) {
  for (DType t : kTypes)
    for (int64_t rows : kRows)
      for (int64_t cols : kCols) {
        const auto w = random_rows(t, rows, cols, 11);
        const auto p = pack_weights(t, w.data(), rows, cols);
        EXPECT_EQ(p->type, t);
        EXPECT_EQ(p->ngroups, (rows + 15) / 16);
        EXPECT_EQ(p->group_stride % 64, 0u);
        const size_t rb = dtype_row_bytes(t, cols);
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_EQ(std::memcmp(unpacked(*p, r).data(), w.data() + r * rb, rb), 0)
              << dtype_name(t) << " " << rows << "x" << cols << " row " << r;
      }
}

// The Q8_0 layout by hand: row r's element e of block b sits at byte 64 * (e / 4) + 4r + e % 4 of
// the block's 512 bytes, stored as q + 128; the scales follow the pair's two blocks.
TEST(PackedWeights, Q8_0LayoutByHand) {
  const int64_t rows = 17, cols = 96;  // two groups, three blocks (the second pair half empty)
  std::vector<block_q8_0> w(rows * 3);
  for (int64_t r = 0; r < rows; ++r)
    for (int b = 0; b < 3; ++b) {
      w[r * 3 + b].d = fp32_to_fp16(0.5f + r + 100 * b);
      for (int e = 0; e < 32; ++e) w[r * 3 + b].qs[e] = static_cast<int8_t>((r * 7 + b * 13 + e * 3) % 256 - 128);
    }
  const auto p = pack_weights(DType::Q8_0, w.data(), rows, cols);
  ASSERT_EQ(p->group_stride, 2 * kQ8PackPairBytes);
  for (int64_t r = 0; r < rows; ++r)
    for (int b = 0; b < 3; ++b) {
      const uint8_t* pair = p->group(r / 16) + (b / 2) * 1088;
      for (int e = 0; e < 32; ++e)
        ASSERT_EQ(pair[(b % 2) * 512 + 64 * (e / 4) + 4 * (r % 16) + e % 4],
                  static_cast<uint8_t>(w[r * 3 + b].qs[e] + 128))
            << "r=" << r << " b=" << b << " e=" << e;
      uint16_t d;
      std::memcpy(&d, pair + 1024 + 32 * (b % 2) + 2 * (r % 16), 2);
      ASSERT_EQ(d, w[r * 3 + b].d);
    }
  // Padding: rows 17..31 of the second group and the fourth block are zero (u = 0, scale 0).
  const uint8_t* g1 = p->group(1);
  for (size_t i = 0; i < p->group_stride; ++i) {
    const size_t in_pair = i % 1088, blk = (i / 1088) * 2 + (in_pair < 1024 ? in_pair / 512 : (in_pair - 1024) / 32);
    const size_t row = in_pair < 1024 ? (in_pair % 64) / 4 : (in_pair % 32) / 2;
    if (row >= 1 || blk >= 3) {
      ASSERT_EQ(g1[i], 0) << "padding byte " << i;
    }
  }
}

// Tensors of 8 MiB and more are packed on several threads: the same bytes.
TEST(PackedWeights, LargeTensorRoundTrip) {
  for (DType t : kTypes) {
    const int64_t rows = 2001, cols = 8192;
    const auto w = random_rows(t, rows, cols, 3);
    const auto p = pack_weights(t, w.data(), rows, cols);
    ASSERT_GE(p->bytes(), size_t{8} << 20);
    const size_t rb = dtype_row_bytes(t, cols);
    for (int64_t r = 0; r < rows; ++r)
      ASSERT_EQ(std::memcmp(unpacked(*p, r).data(), w.data() + r * rb, rb), 0) << dtype_name(t) << " row " << r;
    // The padding rows of the last group are zero.
    const uint8_t* last = p->group(p->ngroups - 1);
    for (int k = 0; k < 4; ++k)
      for (int r = 1; r < 16; ++r)
        for (int j = 0; j < 4; ++j) ASSERT_EQ(last[64 * k + 4 * r + j], 0) << "padding row " << r;
  }
}

// Several tensors packed into one storage block at consecutive offsets (as model/repack.cpp does):
// each one's bytes are those of packing it alone, the block is 2 MiB-aligned from 2 MiB on, and
// packed_bytes tells the size before packing.
TEST(PackedWeights, SharedStorageHoldsEachTensorAsPackedAlone) {
  for (DType t : kTypes) {
    const int64_t shapes[][2] = {{37, 160}, {16, 800}, {2001, 2048}, {7, 32}};
    size_t total = 0;
    for (const auto& sh : shapes) total += packed_bytes(t, sh[0], sh[1]);
    ASSERT_GE(total, size_t{2} << 20);
    const auto storage = alloc_packed_storage(total);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(storage.get()) % (size_t{2} << 20), 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(alloc_packed_storage(1000).get()) % 64, 0u);
    size_t off = 0;
    std::vector<std::shared_ptr<PackedWeights>> held;
    for (const auto& sh : shapes) {
      const auto w = random_rows(t, sh[0], sh[1], 5);
      const auto alone = pack_weights(t, w.data(), sh[0], sh[1]);
      auto p = pack_weights_into(t, w.data(), sh[0], sh[1], storage, off);
      EXPECT_EQ(p->bytes(), packed_bytes(t, sh[0], sh[1]));
      EXPECT_EQ(p->data, storage.get() + off);
      ASSERT_EQ(std::memcmp(p->data, alone->data, alone->bytes()), 0) << dtype_name(t) << " " << sh[0] << "x" << sh[1];
      off += p->bytes();
      held.push_back(std::move(p));
    }
    // Each packed tensor keeps the block alive.
    EXPECT_EQ(storage.use_count(), 1 + static_cast<long>(held.size()));
    // Packing a later tensor left the earlier ones' bytes as they were.
    const auto w0 = random_rows(t, 37, 160, 5);
    const size_t rb = dtype_row_bytes(t, 160);
    for (int64_t r = 0; r < 37; ++r) ASSERT_EQ(std::memcmp(unpacked(*held[0], r).data(), w0.data() + r * rb, rb), 0);
  }
}

TEST(PackedWeights, ScalarTileMatchesTypeReference) {
  for (DType t : kTypes)
    for (int64_t rows : kRows)
      for (int64_t cols : kCols) {
        const auto w = random_rows(t, rows, cols, 5);
        const auto p = pack_weights(t, w.data(), rows, cols);
        const int nt = 3;
        const size_t as = act_packed_bytes(cols);
        const auto a = make_act(t, nt, cols, as, 9);
        std::vector<float> out(nt * rows, 1e30f);
        tile_packed_ref(*p, 0, p->ngroups, a.data(), as, nt, out.data(), rows);
        const size_t rb = dtype_row_bytes(t, cols);
        for (int i = 0; i < nt; ++i)
          for (int64_t r = 0; r < rows; ++r) {
            const float want = ref::vec_dot(t, w.data() + r * rb, a.data() + i * as, cols);
            ASSERT_NEAR(out[i * rows + r], want, tol(t, w.data() + r * rb, a.data() + i * as, cols))
                << dtype_name(t) << " " << rows << "x" << cols << " t=" << i << " r=" << r;
          }
      }
}

TEST(PackedWeights, Avx512TileMatchesScalarTile) {
  if (!test::avx512_available()) GTEST_SKIP() << "CPU or OS lacks AVX-512 F/BW/DQ/VL/VNNI";
  for (DType t : kTypes) {
    const PackedTileFn tile = packed_tile_fn(avx512_kernels(), t);
    ASSERT_NE(tile, nullptr) << dtype_name(t);
    for (int64_t rows : kRows)
      for (int64_t cols : kCols)
        for (int nt : {1, 2, 5, 8, 11, 16}) {
          const auto w = random_rows(t, rows, cols, 21);
          const auto p = pack_weights(t, w.data(), rows, cols);
          const size_t as = act_packed_bytes(cols) + 8;  // an odd stride too
          const auto a = make_act(t, nt, cols, as, 23);
          const int64_t ldo = rows + 3;
          std::vector<float> want(nt * ldo, -7.0f), got(nt * ldo, -7.0f);
          tile_packed_ref(*p, 0, p->ngroups, a.data(), as, nt, want.data(), ldo);
          // pf_after: a group past the tile's (prefetched only; the result must not change).
          tile(p->group(0), p->group_stride, static_cast<int>(p->ngroups), rows, a.data(), as, nt, cols, got.data(),
               ldo, p->group(0));
          const size_t rb = dtype_row_bytes(t, cols);
          for (int i = 0; i < nt; ++i)
            for (int64_t r = 0; r < ldo; ++r) {
              if (r >= rows) {
                ASSERT_EQ(got[i * ldo + r], -7.0f) << "wrote past the rows";
                continue;
              }
              ASSERT_NEAR(got[i * ldo + r], want[i * ldo + r], tol(t, w.data() + r * rb, a.data() + i * as, cols))
                  << dtype_name(t) << " " << rows << "x" << cols << " nt=" << nt << " t=" << i << " r=" << r;
            }
        }
  }
}

class PackedMatmul : public testing::TestWithParam<Path> {
 protected:
  void SetUp() override { KVS_SKIP_IF_NO_AVX2(GetParam()); }
};

// matmul on a registered weight: the packed tile where the table has one, the type's tiles
// otherwise; both must match the type's scalar reference on the quantised activations.
TEST_P(PackedMatmul, RegisteredWeightMatchesReference) {
  const KernelTable& k = test::table(GetParam());
  ThreadPool pool(2);
  for (DType t : kTypes)
    for (int64_t rows : {37, 100})
      for (int64_t cols : {160, 800}) {
        const auto w = random_rows(t, rows, cols, 31);
        TensorView v;
        v.name = "test.packed";
        v.type = t;
        v.n_dims = 2;
        v.ne = {cols, rows, 1, 1};
        v.data = w.data();
        v.nbytes = w.size();
        register_packed(v.data, pack_weights(t, w.data(), rows, cols));
        // Unregistered however the block is left (an ASSERT returns early): the key is w's storage.
        struct Unregister {
          const void* key;
          ~Unregister() { unregister_packed(key); }
        } unregister_at_exit{v.data};
        ASSERT_NE(find_packed(v.data, rows, cols), nullptr);
        EXPECT_EQ(find_packed(v.data, rows + 1, cols), nullptr) << "shape must match";
        const int64_t max_tok = 20;
        const auto x = test::randn(max_tok * cols, 41);
        const size_t abytes = ref::act_row_bytes(t, cols), rb = v.row_bytes();
        std::vector<uint8_t> act(abytes * max_tok);
        for (int64_t i = 0; i < max_tok; ++i) ref::prepare_act(t, x.data() + i * cols, act.data() + i * abytes, cols);
        MatmulConfig cfg;
        cfg.min_parallel_macs = 0;
        MatmulScratch scratch;
        for (int64_t n_tok : {1, 2, 9, 16, 20}) {
          std::vector<float> y(n_tok * rows);
          matmul_with(k, cfg, v, x.data(), n_tok, y.data(), pool, scratch);
          for (int64_t i = 0; i < n_tok; ++i)
            for (int64_t r = 0; r < rows; ++r) {
              const uint8_t* at = act.data() + i * abytes;
              const float want = ref::vec_dot(t, w.data() + r * rb, at, cols);
              ASSERT_NEAR(y[i * rows + r], want, tol(t, w.data() + r * rb, at, cols))
                  << k.name << " " << dtype_name(t) << " " << rows << "x" << cols << " n_tok=" << n_tok << " t=" << i
                  << " r=" << r;
            }
        }
        unregister_packed(v.data);
        EXPECT_EQ(find_packed(v.data, rows, cols), nullptr);
      }
}

// matmul_shared (a layer's Q, K, V over the same activations): three registered weights of one
// type share one activation conversion and one section on the tables with a packed tile. Each
// output must match the type's scalar reference and be bit for bit what a separate matmul gives;
// outputs with a row stride wider than the weight keep their padding; a set that cannot be fused
// (types mixed, one weight not registered) runs one by one with the same results.
TEST_P(PackedMatmul, SharedInputMatchesReferenceAndSeparateCalls) {
  const KernelTable& k = test::table(GetParam());
  ThreadPool pool(2);
  const int64_t cols = 160, max_tok = 20;
  const auto x = test::randn(max_tok * cols, 43);
  struct Case {
    DType types[3];
    bool registered[3];
  };
  const Case cases[] = {{{DType::Q8_0, DType::Q8_0, DType::Q8_0}, {true, true, true}},
                        {{DType::Q4_0, DType::Q4_0, DType::Q4_0}, {true, true, true}},
                        {{DType::Q8_0, DType::Q4_0, DType::Q8_0}, {true, true, true}},
                        {{DType::Q4_0, DType::Q4_0, DType::Q4_0}, {true, false, true}}};
  const int64_t rows[3] = {100, 16, 37};
  const int64_t ldy[3] = {100, 19, 37};  // the second output strided wider than its weight
  for (const Case& c : cases) {
    std::vector<uint8_t> w[3];
    TensorView v[3];
    for (int i = 0; i < 3; ++i) {
      w[i] = random_rows(c.types[i], rows[i], cols, 50 + 10 * i);
      v[i].name = "test.shared";
      v[i].type = c.types[i];
      v[i].n_dims = 2;
      v[i].ne = {cols, rows[i], 1, 1};
      v[i].data = w[i].data();
      v[i].nbytes = w[i].size();
      if (c.registered[i]) register_packed(v[i].data, pack_weights(c.types[i], w[i].data(), rows[i], cols));
    }
    struct Unregister {
      const void* keys[3];
      ~Unregister() {
        for (const void* key : keys) unregister_packed(key);
      }
    } unregister_at_exit{{v[0].data, v[1].data, v[2].data}};
    MatmulConfig cfg;
    cfg.min_parallel_macs = 0;
    MatmulScratch scratch;
    for (int64_t n_tok : {1, 9, 20}) {
      std::vector<float> fused[3], apart[3];
      MatmulTarget targets[3];
      for (int i = 0; i < 3; ++i) {
        fused[i].assign(static_cast<size_t>(n_tok * ldy[i]), -3.0f);
        apart[i].assign(fused[i].size(), -3.0f);
        targets[i] = {&v[i], fused[i].data(), ldy[i]};
      }
      matmul_shared_with(k, cfg, targets, x.data(), n_tok, pool, scratch);
      for (int i = 0; i < 3; ++i) matmul_with(k, cfg, v[i], x.data(), n_tok, apart[i].data(), pool, scratch, ldy[i]);
      for (int i = 0; i < 3; ++i) {
        const DType t = c.types[i];
        const size_t abytes = ref::act_row_bytes(t, cols), rb = v[i].row_bytes();
        std::vector<uint8_t> act(abytes);
        for (int64_t tok = 0; tok < n_tok; ++tok) {
          ref::prepare_act(t, x.data() + tok * cols, act.data(), cols);
          for (int64_t r = 0; r < ldy[i]; ++r) {
            const float got = fused[i][tok * ldy[i] + r];
            ASSERT_EQ(got, apart[i][tok * ldy[i] + r]) << k.name << " weight " << i << " n_tok=" << n_tok << " t=" << tok
                                                      << " r=" << r;
            if (r >= rows[i]) {
              ASSERT_EQ(got, -3.0f) << "padding written, weight " << i;
              continue;
            }
            ASSERT_NEAR(got, ref::vec_dot(t, w[i].data() + r * rb, act.data(), cols), tol(t, w[i].data() + r * rb, act.data(), cols))
                << k.name << " " << dtype_name(t) << " weight " << i << " n_tok=" << n_tok << " t=" << tok << " r=" << r;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, PackedMatmul, test::all_paths(), test::path_name);

TEST(PackedWeights, PackingFollowsTableAndEnv) {
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::F16}) {
    const bool has = packed_tile_fn(active_kernels(), t) != nullptr;
    EXPECT_EQ(has, active_kernels().wide_tiles && t != DType::F16) << dtype_name(t);
    {
      const kvs::test::ScopedEnv e("KVS_NO_REPACK", nullptr);
      EXPECT_EQ(packing_active(t), has);
    }
    {
      const kvs::test::ScopedEnv e("KVS_NO_REPACK", "1");
      EXPECT_FALSE(packing_active(t));
    }
    {
      const kvs::test::ScopedEnv e("KVS_NO_REPACK", "0");
      EXPECT_EQ(packing_active(t), has);
    }
  }
}

}  // namespace
}  // namespace kvs::kernels
