// The feature map of the CPU Performer kernels (cpu/performer_cpu.hpp): strided reads and writes
// of a head's rows in any dtype, the constants and packed random features, and the element-wise
// loops (exp, relu, maxima, row and column sums). The loops are branch-free so GCC vectorises
// them; SKETCHCORE_CLONES compiles the float32 ones for AVX-512, AVX2 and baseline x86-64.
// Compiled with -O3 and fused multiply-adds (results within float rounding, not bit-identical
// to another library's).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cpu/half.hpp"
#include "cpu/performer_cpu.hpp"
#include "cpu/target_clones.hpp"
#include "cpu/vector_math.hpp"

namespace sketchcore::detail::performer {

Rows slice(const TensorView& v, std::int64_t b, std::int64_t h) {
  Rows r;
  r.dtype = v.dtype();
  std::int64_t offset = b * v.stride(0);
  if (v.ndim() == 4) {
    offset += h * v.stride(1);
    r.row_stride = v.stride(2);
    r.col_stride = v.stride(3);
  } else if (v.ndim() == 3) {
    offset += h * v.stride(1);
    r.row_stride = v.stride(2);
  } else {
    r.row_stride = v.stride(1);
  }
  r.base = static_cast<const char*>(v.data()) + offset * static_cast<std::int64_t>(dtype_size(v.dtype()));
  return r;
}

namespace {

template <class S, class T>
void read_typed(const Rows& src, std::int64_t row0, std::int64_t n, std::int64_t cols, T scale, T* __restrict dst,
                std::int64_t ld) {
  const S* base = static_cast<const S*>(src.base);
  for (std::int64_t i = 0; i < n; ++i) {
    const S* __restrict row = base + (row0 + i) * src.row_stride;
    T* __restrict out = dst + i * ld;
    if (src.col_stride == 1) {
      for (std::int64_t c = 0; c < cols; ++c) out[c] = static_cast<T>(row[c]) * scale;
    } else {
      for (std::int64_t c = 0; c < cols; ++c) out[c] = static_cast<T>(row[c * src.col_stride]) * scale;
    }
  }
}

template <class T>
void read_half(const Rows& src, std::int64_t row0, std::int64_t n, std::int64_t cols, T scale, T* dst,
               std::int64_t ld) {
  const auto* base = static_cast<const std::uint16_t*>(src.base);
  const bool bf16 = src.dtype == DType::bfloat16;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint16_t* row = base + (row0 + i) * src.row_stride;
    T* out = dst + i * ld;
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::uint16_t h = row[c * src.col_stride];
      out[c] = static_cast<T>(bf16 ? bfloat16_to_float(h) : float16_to_float(h)) * scale;
    }
  }
}

template <class S, class T>
void write_typed(const T* src, std::int64_t ld, std::int64_t n, std::int64_t cols, T scale, const Rows& dst,
                 std::int64_t row0, bool add) {
  S* base = static_cast<S*>(const_cast<void*>(dst.base));
  for (std::int64_t i = 0; i < n; ++i) {
    S* row = base + (row0 + i) * dst.row_stride;
    const T* in = src + i * ld;
    for (std::int64_t c = 0; c < cols; ++c) {
      S& out = row[c * dst.col_stride];
      const T value = in[c] * scale;
      out = static_cast<S>(add ? static_cast<T>(out) + value : value);
    }
  }
}

template <class T>
void write_half(const T* src, std::int64_t ld, std::int64_t n, std::int64_t cols, T scale, const Rows& dst,
                std::int64_t row0, bool add) {
  auto* base = static_cast<std::uint16_t*>(const_cast<void*>(dst.base));
  const bool bf16 = dst.dtype == DType::bfloat16;
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint16_t* row = base + (row0 + i) * dst.row_stride;
    const T* in = src + i * ld;
    for (std::int64_t c = 0; c < cols; ++c) {
      std::uint16_t& out = row[c * dst.col_stride];
      float value = static_cast<float>(in[c] * scale);
      if (add) value += bf16 ? bfloat16_to_float(out) : float16_to_float(out);
      out = bf16 ? float_to_bfloat16(value) : float_to_float16(value);
    }
  }
}

/// e^x for x ≤ 88 in float: vmath's exp_parts (|error| ≤ 1 ulp), 0 below e^−104 with subnormal
/// results rounded once.
inline float exp_float(float x) noexcept {
  x = x < -120.0f ? -120.0f : x;
  x = x > 88.0f ? 88.0f : x;
  float n;
  const float p = vmath::exp_parts(x, n);
  return vmath::scale_pow2(p, n);
}
inline double exp_of(double x) noexcept { return std::exp(x); }  // float64: libm's accuracy
inline float exp_of(float x) noexcept { return exp_float(x); }

/// Lanes of the partial sums of a reduction: GCC vectorises a fixed-width inner loop over them,
/// which it may not do for one running sum (that would reassociate it).
constexpr int kLanes = 16;

template <class T>
__attribute__((always_inline)) inline T dot(const T* __restrict a, const T* __restrict b, std::int64_t m) {
  T acc[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= m; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += a[j + l] * b[j + l];
  }
  for (int l = 0; j < m; ++j, ++l) acc[l] += a[j] * b[j];
  T s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

template <class T>
__attribute__((always_inline)) inline T max_of(const T* __restrict a, std::int64_t m) {
  T acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = -std::numeric_limits<T>::infinity();
  std::int64_t j = 0;
  for (; j + kLanes <= m; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] = a[j + l] > acc[l] ? a[j + l] : acc[l];
  }
  for (int l = 0; j < m; ++j, ++l) acc[l] = a[j] > acc[l] ? a[j] : acc[l];
  T best = acc[0];
  for (int l = 1; l < kLanes; ++l) best = acc[l] > best ? acc[l] : best;
  return best;
}

// Element-wise bodies, inlined into the cloned float32 entry points and the plain float64 ones.
// In place (out == f) and out of place are separate loops: GCC's runtime alias check sends equal
// pointers to its scalar fallback.
template <class T>
__attribute__((always_inline)) inline void exp_body(std::int64_t n, std::int64_t m, const T* f, const T* diag,
                                                    const T* row_shift, T c, T* out) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T di = diag[i], shift = row_shift ? row_shift[i] : c;
    if (f == out) {
      T* oi = out + i * m;
      for (std::int64_t j = 0; j < m; ++j) oi[j] = exp_of((oi[j] - di) - shift);
    } else {
      const T* __restrict fi = f + i * m;
      T* __restrict oi = out + i * m;
      for (std::int64_t j = 0; j < m; ++j) oi[j] = exp_of((fi[j] - di) - shift);
    }
  }
}

template <class T>
__attribute__((always_inline)) inline void softmax_grad_body(std::int64_t n, std::int64_t m, const T* g, T scale,
                                                             T* df, T* sums) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T* __restrict gi = g + i * m;
    T* __restrict di = df + i * m;
    for (std::int64_t j = 0; j < m; ++j) di[j] = di[j] * scale * gi[j];
    T acc[kLanes] = {};
    std::int64_t j = 0;
    for (; j + kLanes <= m; j += kLanes) {
      for (int l = 0; l < kLanes; ++l) acc[l] += di[j + l];
    }
    for (int l = 0; j < m; ++j, ++l) acc[l] += di[j];
    T s = 0;
    for (int l = 0; l < kLanes; ++l) s += acc[l];
    sums[i] = s;
  }
}

}  // namespace

template <class T>
void read_rows(const Rows& src, std::int64_t row0, std::int64_t n, std::int64_t cols, T scale, T* dst,
               std::int64_t ld) {
  switch (src.dtype) {
    case DType::float32: return read_typed<float>(src, row0, n, cols, scale, dst, ld);
    case DType::float64: return read_typed<double>(src, row0, n, cols, scale, dst, ld);
    case DType::float16:
    case DType::bfloat16: return read_half(src, row0, n, cols, scale, dst, ld);
  }
}

template <class T>
void write_rows(const T* src, std::int64_t ld, std::int64_t n, std::int64_t cols, T scale, const Rows& dst,
                std::int64_t row0, bool add) {
  switch (dst.dtype) {
    case DType::float32: return write_typed<float>(src, ld, n, cols, scale, dst, row0, add);
    case DType::float64: return write_typed<double>(src, ld, n, cols, scale, dst, row0, add);
    case DType::float16:
    case DType::bfloat16: return write_half(src, ld, n, cols, scale, dst, row0, add);
  }
}

template <class T>
FeatureMap<T>::FeatureMap(const PerformerProblem& p, pgemm::Isa isa)
    : softmax(p.options.kernel == PerformerKernel::softmax), causal(p.options.causal), d(p.dim), m(p.num_features),
      wt(isa), w(isa), w_rows(static_cast<std::size_t>(p.dim * p.num_features)) {
  // The constants as the reference computes them: Python floats rounded to T.
  x_scale = softmax ? static_cast<T>(std::pow(static_cast<double>(d), -0.25)) : T(1);
  inv_sqrt_m = static_cast<T>(1.0 / std::sqrt(static_cast<double>(m)));
  alpha_q = softmax ? inv_sqrt_m : T(1);
  beta_q = static_cast<T>(1e-5);
  alpha_k = alpha_q;
  beta_k = softmax && causal ? T(0) : static_cast<T>(1e-5);
  const Rows features{p.features.data(), p.features.dtype(), p.features.stride(0), p.features.stride(1)};
  read_rows<T>(features, 0, m, d, T(1), w_rows.data(), d);
  wt.pack(d, m, {w_rows.data(), d, true});
  w.pack(m, d, {w_rows.data(), d, false});
}

template <class T>
void dash_of_rows(const FeatureMap<T>& map, const Rows& src, std::int64_t row0, std::int64_t n, T* x, T* f,
                  pgemm::Workspace<T>& ws) {
  read_rows<T>(src, row0, n, map.d, map.x_scale, x, map.d);
  pgemm::multiply<T>(n, {x, map.d}, map.wt, f, map.m, false, ws);
}

// --- element-wise ---------------------------------------------------------------------------

template <class T>
void half_square_norms(std::int64_t n, std::int64_t d, const T* x, T* diag) {
  for (std::int64_t i = 0; i < n; ++i) diag[i] = dot(x + i * d, x + i * d, d) / 2;
}

template <class T>
void row_max(std::int64_t n, std::int64_t m, const T* f, T* top) {
  for (std::int64_t i = 0; i < n; ++i) top[i] = max_of(f + i * m, m);
}

template <class T>
T block_max(std::int64_t n, std::int64_t m, const T* f) {
  return max_of(f, n * m);
}

SKETCHCORE_CLONES void exp_shifted_float(std::int64_t n, std::int64_t m, const float* f, const float* diag,
                                         const float* row_shift, float c, float* out) {
  exp_body<float>(n, m, f, diag, row_shift, c, out);
}

template <>
void exp_shifted<float>(std::int64_t n, std::int64_t m, const float* f, const float* diag, const float* row_shift,
                        float c, float* out) {
  exp_shifted_float(n, m, f, diag, row_shift, c, out);
}
template <>
void exp_shifted<double>(std::int64_t n, std::int64_t m, const double* f, const double* diag,
                         const double* row_shift, double c, double* out) {
  exp_body<double>(n, m, f, diag, row_shift, c, out);
}

template <class T>
void relu_scaled(std::int64_t n, std::int64_t m, const T* f, T scale, T* out) {
  const auto relu = [scale](T x) {
    const T u = x * scale;
    return u > T(0) ? u : T(0);
  };
  if (f == out) {
    for (std::int64_t i = 0; i < n * m; ++i) out[i] = relu(out[i]);
  } else {
    const T* __restrict src = f;
    T* __restrict dst = out;
    for (std::int64_t i = 0; i < n * m; ++i) dst[i] = relu(src[i]);
  }
}

template <class T>
void affine(std::int64_t n, std::int64_t m, const T* g, T alpha, T beta, const T* w, T* out) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T wi = w ? w[i] : T(1);
    if (g == out) {
      T* oi = out + i * m;
      for (std::int64_t j = 0; j < m; ++j) oi[j] = wi * ((oi[j] + beta) * alpha);
    } else {
      const T* __restrict gi = g + i * m;
      T* __restrict oi = out + i * m;
      for (std::int64_t j = 0; j < m; ++j) oi[j] = wi * ((gi[j] + beta) * alpha);
    }
  }
}

template <class T>
void row_dots(std::int64_t n, std::int64_t m, const T* a, const T* b, T* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = dot(a + i * m, b, m);
}

template <class T>
void col_sums(std::int64_t n, std::int64_t m, const T* a, const T* w, T* out, bool accumulate) {
  if (!accumulate) std::fill(out, out + m, T(0));
  for (std::int64_t i = 0; i < n; ++i) {
    const T wi = w ? w[i] : T(1);
    for (std::int64_t j = 0; j < m; ++j) out[j] += wi * a[i * m + j];
  }
}

template <class T>
void add_outer(std::int64_t n, std::int64_t m, const T* u, const T* b, T* a) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T ui = u ? u[i] : T(1);
    for (std::int64_t j = 0; j < m; ++j) a[i * m + j] += ui * b[j];
  }
}

SKETCHCORE_CLONES void softmax_grad_float(std::int64_t n, std::int64_t m, const float* g, float scale, float* df,
                                          float* sums) {
  softmax_grad_body<float>(n, m, g, scale, df, sums);
}

template <>
void softmax_grad<float>(std::int64_t n, std::int64_t m, const float* g, float scale, float* df, float* sums) {
  softmax_grad_float(n, m, g, scale, df, sums);
}
template <>
void softmax_grad<double>(std::int64_t n, std::int64_t m, const double* g, double scale, double* df, double* sums) {
  softmax_grad_body<double>(n, m, g, scale, df, sums);
}

template <class T>
void relu_grad(std::int64_t n, std::int64_t m, const T* g, T scale, T* df) {
  for (std::int64_t i = 0; i < n * m; ++i) df[i] = g[i] > T(0) ? df[i] * scale : T(0);
}

template <class T>
void sub_scaled_rows(std::int64_t n, std::int64_t d, const T* s, const T* x, T* dx) {
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t c = 0; c < d; ++c) dx[i * d + c] -= s[i] * x[i * d + c];
  }
}

template <class T>
void find_equal(std::int64_t n, std::int64_t m, const T* f, const T* row_value, T value,
                std::vector<std::int64_t>& hits) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T target = row_value ? row_value[i] : value;
    for (std::int64_t j = 0; j < m; ++j) {
      if (f[i * m + j] == target) hits.push_back(i * m + j);
    }
  }
}

#define SKETCHCORE_PERFORMER_INSTANTIATE(T)                                                                     \
  template void read_rows<T>(const Rows&, std::int64_t, std::int64_t, std::int64_t, T, T*, std::int64_t);      \
  template void write_rows<T>(const T*, std::int64_t, std::int64_t, std::int64_t, T, const Rows&, std::int64_t, \
                              bool);                                                                           \
  template struct FeatureMap<T>;                                                                               \
  template void dash_of_rows<T>(const FeatureMap<T>&, const Rows&, std::int64_t, std::int64_t, T*, T*,         \
                                pgemm::Workspace<T>&);                                                         \
  template void half_square_norms<T>(std::int64_t, std::int64_t, const T*, T*);                                \
  template void row_max<T>(std::int64_t, std::int64_t, const T*, T*);                                          \
  template T block_max<T>(std::int64_t, std::int64_t, const T*);                                               \
  template void relu_scaled<T>(std::int64_t, std::int64_t, const T*, T, T*);                                   \
  template void affine<T>(std::int64_t, std::int64_t, const T*, T, T, const T*, T*);                           \
  template void row_dots<T>(std::int64_t, std::int64_t, const T*, const T*, T*);                               \
  template void col_sums<T>(std::int64_t, std::int64_t, const T*, const T*, T*, bool);                         \
  template void add_outer<T>(std::int64_t, std::int64_t, const T*, const T*, T*);                              \
  template void relu_grad<T>(std::int64_t, std::int64_t, const T*, T, T*);                                     \
  template void sub_scaled_rows<T>(std::int64_t, std::int64_t, const T*, const T*, T*);                        \
  template void find_equal<T>(std::int64_t, std::int64_t, const T*, const T*, T, std::vector<std::int64_t>&);

SKETCHCORE_PERFORMER_INSTANTIATE(float)
SKETCHCORE_PERFORMER_INSTANTIATE(double)

}  // namespace sketchcore::detail::performer
