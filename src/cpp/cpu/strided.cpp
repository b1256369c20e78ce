#include "detail/strided.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu/half.hpp"
#include "cpu/target_clones.hpp"
#include "detail/parallel.hpp"

namespace sketchcore::detail {

namespace {

/// Calls fn(row_index, pointer_to_row) for rows [begin, end) of `view` in row-major order.
template <class T, class Fn>
void for_each_row(const TensorView& view, std::int64_t begin, std::int64_t end, Fn&& fn) {
  if (begin >= end) return;
  const int lead = view.ndim() - 1;
  // Multi-index and address of row `begin`.
  std::vector<std::int64_t> index(static_cast<std::size_t>(lead), 0);
  T* row = static_cast<T*>(view.data());
  for (std::int64_t rest = begin, d = lead - 1; d >= 0; --d) {
    const std::int64_t extent = view.size(static_cast<int>(d));
    index[static_cast<std::size_t>(d)] = rest % extent;
    row += (rest % extent) * view.stride(static_cast<int>(d));
    rest /= extent;
  }
  for (std::int64_t r = begin; r < end; ++r) {
    fn(r, row);
    // Advance the multi-index like an odometer, moving the row pointer along.
    for (int d = lead - 1; d >= 0; --d) {
      auto& i = index[static_cast<std::size_t>(d)];
      row += view.stride(d);
      if (++i < view.size(d)) break;
      row -= view.stride(d) * view.size(d);
      i = 0;
    }
  }
}

std::int64_t count_rows(const TensorView& view) {
  std::int64_t rows = 1;
  for (int d = 0; d + 1 < view.ndim(); ++d) rows *= view.size(d);
  return rows;
}

/// Rows per parallel chunk so that each chunk moves at least ~256 KiB.
std::int64_t row_grain(std::int64_t cols) {
  return std::max<std::int64_t>(1, (std::int64_t{1} << 16) / std::max<std::int64_t>(cols, 1));
}

/// One block of `count` elements at j if it fits before n (count 0: nothing).
template <std::int64_t count, class E>
inline __attribute__((always_inline)) void copy_block_if(const E* __restrict src, E* __restrict dst, std::int64_t& j,
                                                         std::int64_t n) {
  if constexpr (count > 0) {
    if (j + count <= n) {
      E block[count];
      __builtin_memcpy(block, src + j, sizeof(block));
      __builtin_memcpy(dst + j, block, sizeof(block));
      j += count;
    }
  }
}

/// dst[0, n) = src[0, n) in 64-byte blocks of register moves. A plain loop here becomes a
/// call to memmove per segment (GCC's loop distribution), which cost a 256 × 1024 → 1024 call
/// with T = 8, k = 16 up to 80 µs of its 600 (issue 26).
template <class E>
inline __attribute__((always_inline)) void copy_segment(const E* __restrict src, E* __restrict dst, std::int64_t n) {
  constexpr std::int64_t kBlock = 64 / sizeof(E);
  std::int64_t j = 0;
  while (j + kBlock <= n) copy_block_if<kBlock>(src, dst, j, n);
  // The tail (< 64 bytes) by halving blocks, each one or no move: no loop to distribute.
  copy_block_if<32 / sizeof(E)>(src, dst, j, n);
  copy_block_if<16 / sizeof(E)>(src, dst, j, n);
  copy_block_if<8 / sizeof(E)>(src, dst, j, n);
  copy_block_if<4 / sizeof(E)>(src, dst, j, n);
  copy_block_if<2 / sizeof(E)>(src, dst, j, n);
}

/// Rows [begin, end) of Sp = [S_1 … S_T] (row length r = terms·rank) from the terms of S at
/// `base` (term, row and column strides in elements). E holds the elements' bits. Each row of
/// a term is a short segment (k elements, often 16 to 128): compiled for AVX-512/AVX2 so that a
/// 64-byte block is one vector move.
template <class E>
inline __attribute__((always_inline)) void pack_term_rows(const E* __restrict base, std::int64_t term_stride,
                                                          std::int64_t row_stride, std::int64_t col_stride,
                                                          std::int64_t terms, std::int64_t rank, E* __restrict dst,
                                                          std::int64_t begin, std::int64_t end) {
  const std::int64_t r = terms * rank;
  for (std::int64_t i = begin; i < end; ++i) {
    E* out = dst + i * r;
    for (std::int64_t t = 0; t < terms; ++t) {
      const E* src = base + t * term_stride + i * row_stride;
      if (col_stride == 1) {
        copy_segment(src, out + t * rank, rank);
      } else {
        for (std::int64_t j = 0; j < rank; ++j) out[t * rank + j] = src[j * col_stride];
      }
    }
  }
}

// One cloned (AVX-512/AVX2/baseline) entry per element size.
#define SKETCHCORE_PACK_TERM_ROWS(E)                                                                          \
  SKETCHCORE_CLONES void pack_term_rows_cloned(const E* base, std::int64_t ts, std::int64_t rs, std::int64_t cs, \
                                               std::int64_t terms, std::int64_t rank, E* dst, std::int64_t begin, \
                                               std::int64_t end) {                                                \
    pack_term_rows<E>(base, ts, rs, cs, terms, rank, dst, begin, end);                                          \
  }
SKETCHCORE_PACK_TERM_ROWS(std::uint16_t)
SKETCHCORE_PACK_TERM_ROWS(std::uint32_t)
SKETCHCORE_PACK_TERM_ROWS(std::uint64_t)
#undef SKETCHCORE_PACK_TERM_ROWS

template <class E>
void pack_terms_bits(const TensorView& S, std::int64_t terms, std::int64_t rank, E* dst) {
  const auto* base = static_cast<const E*>(S.data());
  const std::int64_t d_in = S.size(-2), ts = S.ndim() == 3 ? S.stride(0) : 0, rs = S.stride(-2), cs = S.stride(-1);
  // One thread up to 2^18 elements (1 MiB of float32): a second worker only competes with the
  // BLAS threads still spinning from the call's previous GEMM (measured slower at 512 KiB).
  const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 18) / std::max<std::int64_t>(terms * rank, 1));
  parallel_for(d_in, grain, [&](std::int64_t b, std::int64_t e) {
    pack_term_rows_cloned(base, ts, rs, cs, terms, rank, dst, b, e);
  });
}

template <class T>
using Bits = std::conditional_t<sizeof(T) == 2, std::uint16_t, std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>;

}  // namespace

template <class T>
void pack_terms(const TensorView& S, std::int64_t terms, std::int64_t rank, T* dst) {
  pack_terms_bits<Bits<T>>(S, terms, rank, reinterpret_cast<Bits<T>*>(dst));
}

template <class T>
void gather_rows(const TensorView& view, std::int64_t begin, std::int64_t end, T* dst) {
  const std::int64_t cols = view.size(-1), cs = view.stride(-1);
  if constexpr (std::is_same_v<T, float>) {
    if (is_half(view.dtype())) {  // a 16-bit view widened row by row (vectorised when contiguous)
      const bool f16 = view.dtype() == DType::float16;
      for_each_row<std::uint16_t>(view, begin, end, [&](std::int64_t r, const std::uint16_t* row) {
        float* out = dst + (r - begin) * cols;
        if (cs == 1) {
          widen_half(view.dtype(), row, out, cols);
        } else {
          for (std::int64_t j = 0; j < cols; ++j) out[j] = f16 ? float16_to_float(row[j * cs]) : bfloat16_to_float(row[j * cs]);
        }
      });
      return;
    }
  }
  for_each_row<T>(view, begin, end, [&](std::int64_t r, const T* row) {
    T* out = dst + (r - begin) * cols;
    if (cs == 1) {
      std::memcpy(out, row, static_cast<std::size_t>(cols) * sizeof(T));
    } else {
      for (std::int64_t j = 0; j < cols; ++j) out[j] = row[j * cs];
    }
  });
}

template <class T>
void scatter_rows(const T* src, std::int64_t ld, const TensorView& view, std::int64_t begin, std::int64_t end) {
  const std::int64_t cols = view.size(-1), cs = view.stride(-1);
  if constexpr (std::is_same_v<T, float>) {
    if (is_half(view.dtype())) {  // rounded into a 16-bit view row by row
      const bool f16 = view.dtype() == DType::float16;
      for_each_row<std::uint16_t>(view, begin, end, [&](std::int64_t r, std::uint16_t* row) {
        const float* in = src + (r - begin) * ld;
        if (cs == 1) {
          narrow_half(view.dtype(), in, row, cols);
        } else {
          for (std::int64_t j = 0; j < cols; ++j) row[j * cs] = f16 ? float_to_float16(in[j]) : float_to_bfloat16(in[j]);
        }
      });
      return;
    }
  }
  for_each_row<T>(view, begin, end, [&](std::int64_t r, T* row) {
    const T* in = src + (r - begin) * ld;
    for (std::int64_t j = 0; j < cols; ++j) row[j * cs] = in[j];
  });
}

template <class T>
void gather_rows_parallel(const TensorView& view, std::int64_t begin, std::int64_t end, T* dst) {
  const std::int64_t cols = view.size(-1);
  parallel_for(end - begin, row_grain(cols), [&](std::int64_t b, std::int64_t e) {
    gather_rows<T>(view, begin + b, begin + e, dst + b * cols);
  });
}

template <class T>
void pack_rows(const TensorView& view, T* dst) {
  gather_rows_parallel<T>(view, 0, count_rows(view), dst);
}

template void gather_rows<float>(const TensorView&, std::int64_t, std::int64_t, float*);
template void gather_rows<double>(const TensorView&, std::int64_t, std::int64_t, double*);
template void scatter_rows<float>(const float*, std::int64_t, const TensorView&, std::int64_t, std::int64_t);
template void scatter_rows<double>(const double*, std::int64_t, const TensorView&, std::int64_t, std::int64_t);
template void gather_rows_parallel<float>(const TensorView&, std::int64_t, std::int64_t, float*);
template void gather_rows_parallel<double>(const TensorView&, std::int64_t, std::int64_t, double*);
template void pack_rows<float>(const TensorView&, float*);
template void pack_rows<double>(const TensorView&, double*);
template void pack_terms<float>(const TensorView&, std::int64_t, std::int64_t, float*);
template void pack_terms<double>(const TensorView&, std::int64_t, std::int64_t, double*);
template void pack_terms<std::uint16_t>(const TensorView&, std::int64_t, std::int64_t, std::uint16_t*);

}  // namespace sketchcore::detail
