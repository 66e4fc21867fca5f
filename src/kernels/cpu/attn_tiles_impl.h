// Internal: the prefill attention's tile kernels (semantics in ops.h: qk_panels, pv_tile), written
// once over a vector ISA `S` and included by attn_avx2.cpp and attn_avx512.cpp inside the ISA's
// namespace (as attn_rows_impl.h). They replace two sgemm calls per key block: the products are
// small (a few hundred rows x 512 keys x D 64-128), where OpenBLAS spends a third of its time
// packing both operands for every call; here nothing is packed per call —
//  - qk: keys come transposed in panels of 16 (pack_key_panels, once per layer and KV head), so a
//    micro-tile of RB query rows x KV key vectors is RB x KV accumulators, each step over d one
//    load per key vector and one broadcast of Q[r][d] per row (no horizontal sums);
//  - pv: V rows are already the right operand: a micro-tile of RB rows x NC vectors of dims holds
//    its accumulators across all n keys, each step one load per dim vector and one broadcast of
//    P[r][j] per row. (pv_tile has pv_rows_f32's contract; the decode's pv_block blocks at most
//    4 queries and skips masked rows, which on the prefill's hundreds of rows runs slower, on both
//    tables.)
// (Against OpenBLAS's sgemm on these shapes, single thread, 256 rows x 512 keys:
// docs/benchmarks/prefill-attention.md.)
//
// S provides: vec, kLanes (W), zero(), load(const float*), set1, fmadd, store, and the tile
// shapes kQkRows (RB) x kQkVecs (key vectors, kQkVecs * W a multiple of 16), kPvRows x kPvVecs.
//
// Dimension legend: rows = query rows, D = head dim, Q [rows][D], Kt [n_panels][D][16],
// S rows of stride lds, P rows of stride ldp, V [n][D], O [rows][D].
// (No include guard on purpose: each ISA file includes it once, inside its own namespace.)

// S[r][j0 + v W + l] for RB rows and KV key vectors from panel base kt (key j0 = first of a panel).
template <class S, int RB, int KV>
inline void qk_micro(const float* Q, int D, const float* kt, float* out, int64_t lds) {
  using vec = typename S::vec;
  constexpr int W = S::kLanes;
  vec a[RB][KV];
#pragma GCC unroll 16
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < KV; ++v) a[r][v] = S::zero();
  for (int d = 0; d < D; ++d) {
    vec k[KV];
#pragma GCC unroll 4
    for (int v = 0; v < KV; ++v) k[v] = S::load(kt + static_cast<int64_t>(v * W / 16) * D * 16 + d * 16 + v * W % 16);
#pragma GCC unroll 16
    for (int r = 0; r < RB; ++r) {
      const vec b = S::set1(Q[static_cast<int64_t>(r) * D + d]);
#pragma GCC unroll 4
      for (int v = 0; v < KV; ++v) a[r][v] = S::fmadd(b, k[v], a[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < KV; ++v) S::store(out + r * lds + v * W, a[r][v]);
}

// Rows in blocks of RB, the rest one by one, against the KV key vectors at kt.
template <class S, int KV>
inline void qk_rows_of(const float* Q, int rows, int D, const float* kt, float* out, int64_t lds) {
  constexpr int RB = S::kQkRows;
  int r = 0;
  for (; r + RB <= rows; r += RB) qk_micro<S, RB, KV>(Q + static_cast<int64_t>(r) * D, D, kt, out + r * lds, lds);
  for (; r < rows; ++r) qk_micro<S, 1, KV>(Q + static_cast<int64_t>(r) * D, D, kt, out + r * lds, lds);
}

template <class S>
void qk_panels_impl(const float* Q, int rows, int D, const float* Kt, int n_panels, float* out, int64_t lds) {
  constexpr int W = S::kLanes, KV = S::kQkVecs, KB = KV * W;  // keys per micro-tile
  static_assert(KB % 16 == 0 && 16 % W == 0);
  const int nkeys = n_panels * 16;
  int j = 0;
  for (; j + KB <= nkeys; j += KB) qk_rows_of<S, KV>(Q, rows, D, Kt + static_cast<int64_t>(j) * D, out + j, lds);
  for (; j < nkeys; j += 16) qk_rows_of<S, 16 / W>(Q, rows, D, Kt + static_cast<int64_t>(j) * D, out + j, lds);
}

// O[r][d0 + c W + l] += P[r][j] V[j][d0 + c W + l] over j < n, for RB rows and NC dim vectors
// (P, V and O already point at row 0 / dim d0).
template <class S, int RB, int NC>
inline void pv_micro(const float* P, int64_t ldp, const float* V, int n, int D, float* O) {
  using vec = typename S::vec;
  constexpr int W = S::kLanes;
  vec a[RB][NC];
#pragma GCC unroll 16
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) a[r][c] = S::load(O + static_cast<int64_t>(r) * D + c * W);
  for (int j = 0; j < n; ++j) {
    vec v[NC];
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) v[c] = S::load(V + static_cast<int64_t>(j) * D + c * W);
#pragma GCC unroll 16
    for (int r = 0; r < RB; ++r) {
      const vec b = S::set1(P[r * ldp + j]);
#pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) a[r][c] = S::fmadd(b, v[c], a[r][c]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) S::store(O + static_cast<int64_t>(r) * D + c * W, a[r][c]);
}

template <class S, int NC>
inline void pv_rows_of(const float* P, int rows, int64_t ldp, const float* V, int n, int D, float* O) {
  constexpr int RB = S::kPvRows;
  int r = 0;
  for (; r + RB <= rows; r += RB) pv_micro<S, RB, NC>(P + r * ldp, ldp, V, n, D, O + static_cast<int64_t>(r) * D);
  for (; r < rows; ++r) pv_micro<S, 1, NC>(P + r * ldp, ldp, V, n, D, O + static_cast<int64_t>(r) * D);
}

template <class S>
void pv_tile_impl(const float* P, int rows, int64_t ldp, const float* V, int n, int D, float* O) {
  constexpr int W = S::kLanes, NC = S::kPvVecs;
  int d0 = 0;
  for (; d0 + NC * W <= D; d0 += NC * W) pv_rows_of<S, NC>(P, rows, ldp, V + d0, n, D, O + d0);
  for (; d0 + W <= D; d0 += W) pv_rows_of<S, 1>(P, rows, ldp, V + d0, n, D, O + d0);
  if (d0 < D)  // the dims past the last whole vector (no supported model has any)
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < n; ++j) {
        const float p = P[r * ldp + j];
        for (int d = d0; d < D; ++d) O[static_cast<int64_t>(r) * D + d] += p * V[static_cast<int64_t>(j) * D + d];
      }
}
