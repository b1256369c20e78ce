// The register-tiled products of cpu/performer_gemm.hpp. One body, written with GCC vector
// extensions over a vector of W elements (NR = 2·W columns, MR = 6 rows: 12 accumulator
// registers), compiled three times through target attributes (AVX-512: W = 64 bytes, AVX2 + FMA:
// 32, baseline: 16) and picked once per process. Compiled with -O3 and fused multiply-adds.
#include "cpu/performer_gemm.hpp"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(SKETCHCORE_NO_CLONES)
#define SKETCHCORE_PGEMM_X86 1
#define SKETCHCORE_PGEMM_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx2,fma")))
#define SKETCHCORE_PGEMM_AVX2 __attribute__((target("avx2,fma")))
#else
#define SKETCHCORE_PGEMM_X86 0
#endif

namespace sketchcore::detail::pgemm {

namespace {

constexpr int kMR = 6;

/// Tile width of each instruction set: NR = vectors per row × vector bytes / sizeof(T) (AVX-512:
/// 4 × 64 bytes, 24 of its 32 registers accumulating; AVX2: 2 × 32, 12 of 16; baseline: 2 × 16).
template <class T>
constexpr std::int64_t nr_of(Isa isa) {
  const int bytes = isa == Isa::avx512 ? 4 * 64 : isa == Isa::avx2 ? 2 * 32 : 2 * 16;
  return bytes / static_cast<int>(sizeof(T));
}

template <class T>
inline T element(const Operand<T>& a, std::int64_t i, std::int64_t p) {
  return a.transposed ? a.data[p * a.ld + i] : a.data[i * a.ld + p];
}

/// One MR × NR tile: C[rows × cols] (=|+=) Σ_{p in [kb, ke)} A(i0 + ·, p) B_panel(p, ·), A read
/// in place (row i of the tile from rows[i]: A(i, p) at rows[i][p·step]; rows past `rows`
/// repeat a valid row and their results are dropped).
template <class T, int W, int NV>
__attribute__((always_inline)) inline void tile(std::int64_t kb, std::int64_t ke, const T* const* rows_of_a,
                                                std::int64_t step, const T* __restrict bp, T* __restrict c,
                                                std::int64_t ldc, int rows, int cols, bool accumulate) {
  typedef T V __attribute__((vector_size(W * sizeof(T))));
  constexpr int NR = NV * W;
  V acc[kMR][NV];
  const T* r[kMR];
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = V{};
    r[i] = rows_of_a[i] + kb * step;
  }
  const T* b = bp + kb * NR;
  if (step == 1) {
    for (std::int64_t p = kb; p < ke; ++p, b += NR) {
      V bv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) std::memcpy(&bv[v], b + v * W, sizeof(V));
#pragma GCC unroll 6
      for (int i = 0; i < kMR; ++i) {
        const T ai = *r[i]++;
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] += ai * bv[v];
      }
    }
  } else {  // A stored transposed: the tile's rows are adjacent, one step per p
    const T* a = r[0];
    for (std::int64_t p = kb; p < ke; ++p, b += NR, a += step) {
      V bv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) std::memcpy(&bv[v], b + v * W, sizeof(V));
#pragma GCC unroll 6
      for (int i = 0; i < kMR; ++i) {
        const T ai = a[i];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] += ai * bv[v];
      }
    }
  }
  if (rows == kMR && cols == NR) {
#pragma GCC unroll 6
    for (int i = 0; i < kMR; ++i) {
      T* row = c + i * ldc;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        if (accumulate) {
          V old;
          std::memcpy(&old, row + v * W, sizeof(V));
          acc[i][v] += old;
        }
        std::memcpy(row + v * W, &acc[i][v], sizeof(V));
      }
    }
    return;
  }
  alignas(64) T out[kMR][NR];
  for (int i = 0; i < kMR; ++i) {
    for (int v = 0; v < NV; ++v) std::memcpy(out[i] + v * W, &acc[i][v], sizeof(V));
  }
  for (int i = 0; i < rows; ++i) {
    T* row = c + i * ldc;
    if (accumulate) {
      for (int j = 0; j < cols; ++j) row[j] += out[i][j];
    } else {
      for (int j = 0; j < cols; ++j) row[j] = out[i][j];
    }
  }
}

template <class T, int W, int NV>
__attribute__((always_inline)) inline void multiply_body(std::int64_t m, const Operand<T>& a, const T* bpanels,
                                                         std::int64_t n, std::int64_t k, T* c, std::int64_t ldc,
                                                         bool accumulate, Band band) {
  constexpr int NR = NV * W;
  // A transposed: rows of the tile are adjacent (step ld per p); else each row is contiguous.
  // A transposed with rows < kMR at the edge: the tile reads kMR adjacent values, so the last
  // tile starts early enough to stay inside A (it recomputes some rows, the same values).
  const std::int64_t step = a.transposed ? a.ld : 1;
  for (std::int64_t i0 = 0; i0 < m; i0 += kMR) {
    const int rows = static_cast<int>(std::min<std::int64_t>(kMR, m - i0));
    std::int64_t kb = 0, ke = k;
    if (band == Band::k_upto_row) ke = std::min(k, i0 + rows);
    if (band == Band::k_from_row) kb = std::min(k, i0);
    const T* row_ptr[kMR];
    for (int i = 0; i < kMR; ++i) {
      const std::int64_t ri = i0 + std::min(i, rows - 1);
      row_ptr[i] = a.transposed ? a.data + ri : a.data + ri * a.ld;
    }
    if (a.transposed && rows < kMR) {  // adjacent reads: use a local copy of the edge columns
      alignas(64) T edge[kMR * 64];
      std::int64_t p0 = kb;
      while (p0 < ke) {
        const std::int64_t p1 = std::min(ke, p0 + 64);
        for (std::int64_t p = p0; p < p1; ++p) {
          for (int i = 0; i < kMR; ++i) edge[(p - p0) * kMR + i] = i < rows ? a.data[p * a.ld + i0 + i] : T(0);
        }
        const T* edge_rows[kMR];
        for (int i = 0; i < kMR; ++i) edge_rows[i] = edge + i - p0 * kMR;
        for (std::int64_t j0 = 0; j0 < n; j0 += NR) {
          if (band == Band::lower_tiles && j0 > i0 + rows - 1) break;
          const int cols = static_cast<int>(std::min<std::int64_t>(NR, n - j0));
          tile<T, W, NV>(p0, p1, edge_rows, kMR, bpanels + (j0 / NR) * k * NR, c + i0 * ldc + j0, ldc, rows, cols,
                     accumulate || p0 > kb);
        }
        p0 = p1;
      }
      if (kb < ke) continue;
    }
    for (std::int64_t j0 = 0; j0 < n; j0 += NR) {
      if (band == Band::lower_tiles && j0 > i0 + rows - 1) break;
      const int cols = static_cast<int>(std::min<std::int64_t>(NR, n - j0));
      tile<T, W, NV>(kb, ke, row_ptr, step, bpanels + (j0 / NR) * k * NR, c + i0 * ldc + j0, ldc, rows, cols,
                 accumulate);
    }
  }
}

template <class T>
using MultiplyFn = void (*)(std::int64_t, const Operand<T>&, const T*, std::int64_t, std::int64_t, T*, std::int64_t,
                            bool, Band);

template <class T>
void multiply_portable(std::int64_t m, const Operand<T>& a, const T* b, std::int64_t n, std::int64_t k, T* c,
                       std::int64_t ldc, bool acc, Band band) {
  multiply_body<T, 16 / static_cast<int>(sizeof(T)), 2>(m, a, b, n, k, c, ldc, acc, band);
}

#if SKETCHCORE_PGEMM_X86
template <class T>
SKETCHCORE_PGEMM_AVX2 void multiply_avx2(std::int64_t m, const Operand<T>& a, const T* b, std::int64_t n,
                                         std::int64_t k, T* c, std::int64_t ldc, bool acc, Band band) {
  multiply_body<T, 32 / static_cast<int>(sizeof(T)), 2>(m, a, b, n, k, c, ldc, acc, band);
}
template <class T>
SKETCHCORE_PGEMM_AVX512 void multiply_avx512(std::int64_t m, const Operand<T>& a, const T* b, std::int64_t n,
                                             std::int64_t k, T* c, std::int64_t ldc, bool acc, Band band) {
  multiply_body<T, 64 / static_cast<int>(sizeof(T)), 4>(m, a, b, n, k, c, ldc, acc, band);
}
#endif

template <class T>
MultiplyFn<T> kernel_for(Isa isa) {
#if SKETCHCORE_PGEMM_X86
  if (isa == Isa::avx512) return &multiply_avx512<T>;
  if (isa == Isa::avx2) return &multiply_avx2<T>;
#endif
  (void)isa;
  return &multiply_portable<T>;
}

}  // namespace

Isa best_isa() noexcept {
  static const Isa isa = [] {
#if SKETCHCORE_PGEMM_X86
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl")) {
      return Isa::avx512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::avx2;
#endif
    return Isa::portable;
  }();
  return isa;
}

template <class T>
void PackedB<T>::pack(std::int64_t k, std::int64_t n, Operand<T> b) {
  const std::int64_t nr = nr_of<T>(isa_);
  const std::int64_t panels = (n + nr - 1) / nr;
  const std::int64_t needed = std::max<std::int64_t>(1, panels * nr * k);
  if (needed > capacity_) {
    storage_.allocate(needed);
    capacity_ = needed;
  }
  k_ = k;
  n_ = n;
  T* dst = storage_.data();
  for (std::int64_t panel = 0; panel < panels; ++panel) {
    const std::int64_t j0 = panel * nr, cols = std::min(nr, n - j0);
    T* d = dst + panel * k * nr;
    for (std::int64_t p = 0; p < k; ++p, d += nr) {
      if (!b.transposed) {
        std::memcpy(d, b.data + p * b.ld + j0, static_cast<std::size_t>(cols) * sizeof(T));
      } else {
        for (std::int64_t j = 0; j < cols; ++j) d[j] = b.data[(j0 + j) * b.ld + p];
      }
      for (std::int64_t j = cols; j < nr; ++j) d[j] = T(0);
    }
  }
}

template <class T>
void multiply(std::int64_t m, Operand<T> a, const PackedB<T>& b, T* c, std::int64_t ldc, bool accumulate,
              Workspace<T>& ws, Band band) {
  if (m <= 0 || b.n() <= 0) return;
  const std::int64_t k = b.k();
  if (k == 0) {  // the empty sum
    if (!accumulate) {
      for (std::int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + b.n(), T(0));
    }
    return;
  }
  (void)ws;
  kernel_for<T>(b.isa())(m, a, b.data(), b.n(), k, c, ldc, accumulate, band);
}

template <class T>
void multiply(std::int64_t m, std::int64_t n, std::int64_t k, Operand<T> a, Operand<T> b, T* c, std::int64_t ldc,
              bool accumulate, Workspace<T>& ws, Band band) {
  if (m <= 0 || n <= 0) return;
  ws.b.pack(k, n, b);
  multiply(m, a, ws.b, c, ldc, accumulate, ws, band);
}

template class PackedB<float>;
template class PackedB<double>;
template void multiply<float>(std::int64_t, Operand<float>, const PackedB<float>&, float*, std::int64_t, bool,
                              Workspace<float>&, Band);
template void multiply<double>(std::int64_t, Operand<double>, const PackedB<double>&, double*, std::int64_t, bool,
                               Workspace<double>&, Band);
template void multiply<float>(std::int64_t, std::int64_t, std::int64_t, Operand<float>, Operand<float>, float*,
                              std::int64_t, bool, Workspace<float>&, Band);
template void multiply<double>(std::int64_t, std::int64_t, std::int64_t, Operand<double>, Operand<double>, double*,
                               std::int64_t, bool, Workspace<double>&, Band);

}  // namespace sketchcore::detail::pgemm
