// Internal: the attention row kernels (semantics in ops.h: qk_rows_*, pv_rows_*), the decode
// attention's inner loops, written once over a vector ISA `S` and included by attn_avx2.cpp
// (S = 8 lanes, blocks of 2 queries) and attn_avx512.cpp (16 lanes, blocks of 4; after
// avx512_begin.h). Include it inside the ISA's namespace: everything here then has internal
// linkage, compiled for that ISA (see avx512_begin.h).
//
// What makes them fast: every K or V row is loaded (and, for F16 pages, converted) once per block
// of up to S::kQueries queries of the GQA group, not once per query.
//  - qk: a block of QB queries x 4 rows, one accumulator per pair (QB x 4 registers), the rows'
//    W-value pieces loaded once for the QB queries; the 4 sums of each query reduced together.
//  - pv: per piece of 4 W dims of the head, a block of QB queries' accumulators (QB x NC
//    registers) held across all rows; each row's piece loaded once for the QB queries.
//
// Row types KT: float (F32 pages), uint16_t (F16), block_q8_0 (Q8_0: a row is D / 32 blocks, each
// an F16 scale and 32 int8 values, converted in registers — d * q — as F16 rows are, so a Q8_0
// page is read once and never written out as F32).
//
// S provides: vec, kLanes (W), kQueries (the largest block), zero(), load(const float*),
// at(row, d) (W values of a row of any KT from element d on, converted to F32; d a multiple of W),
// for Q8_0 / Q4_0 rows also raw(row, d) (the same values before the block's scale) and
// scale(row, d) (that block's scale in every lane), set1, mul, fmadd, store, sum(vec) -> float,
// sum4(a, b, c, d) -> __m128 {sum a, sum b, sum c, sum d}.
//
// Dimension legend: nq = queries, n = rows in the block, D = head dim (a multiple of W); Q [nq][D],
// K/V [n][D], out/P rows of stride ldo/ldp, acc [nq][D]; QB = queries per block, NC = W-value
// pieces held.
// (No include guard on purpose: each ISA file includes it once, inside its own namespace.)

// Rows are stepped with row_of (impl.h).

// Values per scale block of a row type: 0 for F32 / F16 rows.
template <typename T>
inline constexpr int kBlockValues = 0;
template <>
inline constexpr int kBlockValues<block_q8_0> = QK8_0;
template <>
inline constexpr int kBlockValues<block_q4_0> = QK4_0;

// Scores of QB queries (rows of Q, stride D) against rows [0, n) of K: out rows of stride ldo.
// DC: the head dim when it is known at compile time (0: D at run time). With DC the d loops have a
// constant trip count, and each query's DC / W vectors are loaded once into registers for all rows
// instead of once per 4 rows; qk_rows uses it for D = 64 with up to 3 queries on 16 lanes (QB x 4
// query vectors + QB x 4 accumulators + 4 rows <= 28 of the 32 registers; measured in
// docs/benchmarks/issue25-server-step-4-intel-2026-11-29.md).
template <class S, int QB, int DC, typename KT>
void qk_block(const float* Q, const KT* K, int n, int D_run, float scale, float* out, int64_t ldo) {
  using vec = typename S::vec;
  constexpr int W = S::kLanes;
  const int D = DC > 0 ? DC : D_run;
  vec qv[QB][DC > 0 ? DC / W : 1];  // [q][d / W] (DC > 0 only)
  if constexpr (DC > 0) {
#pragma GCC unroll 4
    for (int q = 0; q < QB; ++q)
#pragma GCC unroll 16
      for (int c = 0; c < DC / W; ++c) qv[q][c] = S::load(Q + static_cast<int64_t>(q) * DC + c * W);
  }
  // Query q's vector of dims [d, d + W).
  auto query = [&](int q, int d) {
    if constexpr (DC > 0)
      return qv[q][d / W];
    else
      return S::load(Q + static_cast<int64_t>(q) * D + d);
  };
  const __m128 vs = _mm_set1_ps(scale);
  int r = 0;
  for (; r + 4 <= n; r += 4) {
    const KT *k0 = row_of(K, r, D), *k1 = row_of(K, r + 1, D), *k2 = row_of(K, r + 2, D), *k3 = row_of(K, r + 3, D);
    vec acc[QB][4];
#pragma GCC unroll 4
    for (int q = 0; q < QB; ++q)
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) acc[q][i] = S::zero();
    auto piece = [&](int d, vec x0, vec x1, vec x2, vec x3) {
#pragma GCC unroll 4
      for (int q = 0; q < QB; ++q) {
        const vec qd = query(q, d);
        acc[q][0] = S::fmadd(qd, x0, acc[q][0]);
        acc[q][1] = S::fmadd(qd, x1, acc[q][1]);
        acc[q][2] = S::fmadd(qd, x2, acc[q][2]);
        acc[q][3] = S::fmadd(qd, x3, acc[q][3]);
      }
    };
    if constexpr (kBlockValues<KT> > 0) {
      // Q8_0 / Q4_0 rows (D a multiple of the block): each row's block scale converted once per
      // block, not once per piece (see pv_block).
      constexpr int PB = kBlockValues<KT> / W;  // pieces per block
      for (int d = 0; d < D; d += PB * W) {
        const vec s0 = S::scale(k0, d), s1 = S::scale(k1, d), s2 = S::scale(k2, d), s3 = S::scale(k3, d);
#pragma GCC unroll 4
        for (int p = 0; p < PB; ++p) {
          const int dp = d + p * W;
          piece(dp, S::mul(S::raw(k0, dp), s0), S::mul(S::raw(k1, dp), s1), S::mul(S::raw(k2, dp), s2),
                S::mul(S::raw(k3, dp), s3));
        }
      }
    } else {
      for (int d = 0; d < D; d += W) piece(d, S::at(k0, d), S::at(k1, d), S::at(k2, d), S::at(k3, d));
    }
#pragma GCC unroll 4
    for (int q = 0; q < QB; ++q)
      _mm_storeu_ps(out + q * ldo + r, _mm_mul_ps(S::sum4(acc[q][0], acc[q][1], acc[q][2], acc[q][3]), vs));
  }
  for (; r < n; ++r) {
    const KT* k0 = row_of(K, r, D);
    vec acc[QB];
#pragma GCC unroll 4
    for (int q = 0; q < QB; ++q) acc[q] = S::zero();
    for (int d = 0; d < D; d += W) {
      const vec x = S::at(k0, d);
#pragma GCC unroll 4
      for (int q = 0; q < QB; ++q) acc[q] = S::fmadd(query(q, d), x, acc[q]);
    }
#pragma GCC unroll 4
    for (int q = 0; q < QB; ++q) out[q * ldo + r] = S::sum(acc[q]) * scale;
  }
}

// Calls fn.template operator()<QB>(q0) for blocks of S::kQueries queries, then one block of the
// remainder (1 .. kQueries - 1).
template <int QMAX, typename Fn>
inline void for_query_blocks(int nq, Fn&& fn) {
  int q = 0;
  for (; q + QMAX <= nq; q += QMAX) fn.template operator()<QMAX>(q);
  const int rest = nq - q;
  if constexpr (QMAX > 1) {
    if (rest == 1) fn.template operator()<1>(q);
  }
  if constexpr (QMAX > 2) {
    if (rest == 2) fn.template operator()<2>(q);
  }
  if constexpr (QMAX > 3) {
    if (rest == 3) fn.template operator()<3>(q);
  }
  static_assert(QMAX >= 1 && QMAX <= 4);
}

template <class S, typename KT>
void qk_rows(const float* Q, int nq, const KT* K, int n, int D, float scale, float* out, int64_t ldo) {
  for_query_blocks<S::kQueries>(nq, [&]<int QB>(int q) {
    if constexpr (S::kLanes == 16 && QB <= 3) {
      if (D == 64) {
        qk_block<S, QB, 64>(Q + static_cast<int64_t>(q) * D, K, n, D, scale, out + q * ldo, ldo);
        return;
      }
    }
    qk_block<S, QB, 0>(Q + static_cast<int64_t>(q) * D, K, n, D, scale, out + q * ldo, ldo);
  });
}

// acc rows (stride D) of QB queries, dims [d0, d0 + W NC) of the rows of V (acc points at dim d0),
// += P rows (stride ldp) times those rows, the accumulators held in registers across all rows.
// Masked rows (probability 0) are multiplied like the others: skipping them took a test and a
// branch per row for rows that decode almost never has (+4% without it, BM_DecodeAttention F16).
template <class S, int QB, int NC, typename VT>
void pv_block(const float* P, int64_t ldp, const VT* V, int d0, int n, int D, float* acc) {
  using vec = typename S::vec;
  constexpr int W = S::kLanes;
  vec a[QB][NC];
#pragma GCC unroll 4
  for (int q = 0; q < QB; ++q)
#pragma GCC unroll 4
    for (int i = 0; i < NC; ++i) a[q][i] = S::load(acc + static_cast<int64_t>(q) * D + W * i);
  for (int j = 0; j < n; ++j) {
    const VT* v = row_of(V, j, D);
    vec x[NC];
    if constexpr (kBlockValues<VT> > 0 && NC % (kBlockValues<VT> / W) == 0) {
      // Q8_0 / Q4_0 rows: each block's scale converted once for its kBlockValues / W pieces (d0 is
      // a multiple of 4 W, so the pieces of one block are adjacent here). Through S::at, which
      // scales each piece on its own, the compiler cannot see that pieces share a block (d0 is
      // known only at run time) and converted the F16 scale once per piece: 4 conversions a row
      // instead of 2 at head dim 64 on 16 lanes, 8 instead of 2 on 8.
      constexpr int PB = kBlockValues<VT> / W;  // pieces per block
#pragma GCC unroll 4
      for (int i = 0; i < NC; i += PB) {
        const vec sc = S::scale(v, d0 + W * i);
#pragma GCC unroll 4
        for (int p = 0; p < PB; ++p) x[i + p] = S::mul(S::raw(v, d0 + W * (i + p)), sc);
      }
    } else {
#pragma GCC unroll 4
      for (int i = 0; i < NC; ++i) x[i] = S::at(v, d0 + W * i);
    }
#pragma GCC unroll 4
    for (int q = 0; q < QB; ++q) {
      const vec w = S::set1(P[q * ldp + j]);
#pragma GCC unroll 4
      for (int i = 0; i < NC; ++i) a[q][i] = S::fmadd(w, x[i], a[q][i]);
    }
  }
#pragma GCC unroll 4
  for (int q = 0; q < QB; ++q)
#pragma GCC unroll 4
    for (int i = 0; i < NC; ++i) S::store(acc + static_cast<int64_t>(q) * D + W * i, a[q][i]);
}

template <class S, int NC, typename VT>
void pv_piece(const float* P, int nq, int64_t ldp, const VT* V, int d0, int n, int D, float* acc) {
  for_query_blocks<S::kQueries>(nq, [&]<int QB>(int q) {
    pv_block<S, QB, NC>(P + q * ldp, ldp, V, d0, n, D, acc + static_cast<int64_t>(q) * D);
  });
}

template <class S, typename VT>
void pv_rows(const float* P, int nq, int64_t ldp, const VT* V, int n, int D, float* acc) {
  constexpr int W = S::kLanes;
  int d0 = 0;
  for (; d0 + 4 * W <= D; d0 += 4 * W) pv_piece<S, 4>(P, nq, ldp, V, d0, n, D, acc + d0);
  switch ((D - d0) / W) {
    case 1: pv_piece<S, 1>(P, nq, ldp, V, d0, n, D, acc + d0); break;
    case 2: pv_piece<S, 2>(P, nq, ldp, V, d0, n, D, acc + d0); break;
    case 3: pv_piece<S, 3>(P, nq, ldp, V, d0, n, D, acc + d0); break;
    default: break;
  }
}
