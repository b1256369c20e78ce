// Shared by the CPU Performer kernels (cpu/performer_forward_cpu.cpp,
// cpu/performer_backward_cpu.cpp): strided access to one head's rows in any dtype, the feature
// map's constants, and its element-wise pieces (cpu/performer_features.cpp).
//
// Every head is processed in blocks of rows (kBlock keys or queries, kChunk tokens when causal):
// a block's rows are read (widened, scaled) into a compact buffer, multiplied by the packed random
// features (cpu/performer_gemm.hpp), turned into features in place and used while in cache;
// nothing of size L × m exists beyond one block per thread.
//
// Notation (per head; d head dim, m features, e value dim): x' = x·x_scale, dash = x'·Wᵀ,
// diag = |x'|²/2. Features are φ = α·(g + β) with
//   softmax queries:          g = exp(dash − diag − max_f dash),     α = m^(−1/2), β = 1e-5
//   softmax keys, non-causal: g = exp(dash − diag − c), c the head's max, α = m^(−1/2), β = 1e-5
//   softmax keys, causal:     g = exp(dash − diag − c_span), c_span the keys' running maximum
//                             (cpu/performer_passes.hpp), α = m^(−1/2), β = 0
//   relu (both):              g = relu(dash·m^(−1/2)),                α = 1,        β = 1e-5
// (x_scale = d^(−1/4) for softmax, 1 for relu.)
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/performer_gemm.hpp"
#include "detail/backend.hpp"

namespace sketchcore::detail::performer {

/// Rows per block of the non-causal passes, and tokens per chunk of the causal ones.
constexpr std::int64_t kBlock = 128;
constexpr std::int64_t kChunk = 128;

/// Rows of one (batch, head) slice: element (i, c) at base + (i·row_stride + c·col_stride)
/// elements of `dtype`.
struct Rows {
  const void* base = nullptr;
  DType dtype = DType::float32;
  std::int64_t row_stride = 0, col_stride = 0;
};

/// The (b, h) slice of a 4-D view (B, H, rows, cols); of a 3-D view (B, H, rows) as one column;
/// of a 2-D view (B, rows) as one column (h ignored).
Rows slice(const TensorView& v, std::int64_t b, std::int64_t h);

/// dst[i·ld + c] = scale · src(row0 + i, c) for i < n, c < cols, widened to T.
template <class T>
void read_rows(const Rows& src, std::int64_t row0, std::int64_t n, std::int64_t cols, T scale, T* dst,
               std::int64_t ld);

/// dst(row0 + i, c) = scale · src[i·ld + c] (or += when `add`), rounded to dst's dtype.
template <class T>
void write_rows(const T* src, std::int64_t ld, std::int64_t n, std::int64_t cols, T scale, const Rows& dst,
                std::int64_t row0, bool add = false);

/// The feature map of a problem: its constants and the random features packed for x'·Wᵀ and
/// G·W, shared read-only by all threads.
template <class T>
struct FeatureMap {
  FeatureMap(const PerformerProblem& p, pgemm::Isa isa);

  bool softmax, causal;
  std::int64_t d, m;
  T x_scale, inv_sqrt_m;
  T alpha_q, beta_q, alpha_k, beta_k;
  pgemm::PackedB<T> wt;   ///< Wᵀ (d × m)
  pgemm::PackedB<T> w;    ///< W (m × d)
  std::vector<T> w_rows;  ///< W (m × d), compact
};

/// A growable scratch array (never shrinks; contents not kept when it grows).
template <class T>
class Buffer {
 public:
  T* get(std::int64_t count) {
    if (count > capacity_) {
      storage_.allocate(count);
      capacity_ = count;
    }
    return storage_.data();
  }

 private:
  Scratch<T> storage_;
  std::int64_t capacity_ = 0;
};

/// x' of rows [row0, row0 + n) of `src` into `x` (n × d) and dash = x'·Wᵀ into `f` (n × m).
template <class T>
void dash_of_rows(const FeatureMap<T>& map, const Rows& src, std::int64_t row0, std::int64_t n, T* x, T* f,
                  pgemm::Workspace<T>& ws);

// --- element-wise pieces (cpu/performer_features.cpp), n rows of m features -------------------

/// diag[i] = Σ_c x[i·d + c]² / 2.
template <class T>
void half_square_norms(std::int64_t n, std::int64_t d, const T* x, T* diag);
/// top[i] = max_f f[i·m + f].
template <class T>
void row_max(std::int64_t n, std::int64_t m, const T* f, T* top);
/// max over all of f (−inf for n = 0).
template <class T>
T block_max(std::int64_t n, std::int64_t m, const T* f);
/// out = exp((f − diag_i) − shift_i), shift_i = row_shift[i] or, when row_shift is null, c.
template <class T>
void exp_shifted(std::int64_t n, std::int64_t m, const T* f, const T* diag, const T* row_shift, T c, T* out);
/// out = relu(f·scale).
template <class T>
void relu_scaled(std::int64_t n, std::int64_t m, const T* f, T scale, T* out);
/// out = w_i·α·(g + β) (w null: 1).
template <class T>
void affine(std::int64_t n, std::int64_t m, const T* g, T alpha, T beta, const T* w, T* out);
/// out[i] = Σ_f a[i·m + f]·b[f].
template <class T>
void row_dots(std::int64_t n, std::int64_t m, const T* a, const T* b, T* out);
/// out[f] (+)= Σ_i w_i·a[i·m + f] (w null: 1).
template <class T>
void col_sums(std::int64_t n, std::int64_t m, const T* a, const T* w, T* out, bool accumulate);
/// a[i·m + f] += u[i]·b[f] (u null: 1).
template <class T>
void add_outer(std::int64_t n, std::int64_t m, const T* u, const T* b, T* a);
/// In place: t = df·scale·g, and sums[i] = Σ_f t[i·m + f].
template <class T>
void softmax_grad(std::int64_t n, std::int64_t m, const T* g, T scale, T* df, T* sums);
/// In place: t = df·scale where g = relu(·) > 0, else 0 (relu's derivative at 0 is 0, as torch's).
template <class T>
void relu_grad(std::int64_t n, std::int64_t m, const T* g, T scale, T* df);
/// dx[i·d + c] −= s[i]·x[i·d + c].
template <class T>
void sub_scaled_rows(std::int64_t n, std::int64_t d, const T* s, const T* x, T* dx);

/// The indices f with f[i·m + f] == value (in row i, or in any row when i < 0): appended to
/// `hits` as i·m + f.
template <class T>
void find_equal(std::int64_t n, std::int64_t m, const T* f, const T* row_value, T value,
                std::vector<std::int64_t>& hits);

}  // namespace sketchcore::detail::performer
