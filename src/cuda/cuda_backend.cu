// The CUDA backend: sketched_matmul and its backward on a CUDA device, on the calling
// thread's stream (ExecutionOptions). The two products are cuBLASLt GEMMs, the second with
// bias and relu / tanh-GELU fused where cuBLASLt offers them; erf-GELU, SiLU, dropout (the
// CPU's Philox mask), strided outputs and the backward's epilogue are own kernels.
// Temporaries come from the stream-ordered pool. Operands whose layout cuBLASLt can read
// (unit stride along rows or columns, collapsing leading dimensions) are used in place,
// others are packed by one strided-copy kernel.
//
// Padded inner width: a rank k whose rows are not a multiple of 16 bytes (k = 375 in bf16)
// puts every GEMM that sees it on cuBLASLt's legacy kernels (measured on an H200: 4.4× slower
// than k = 376). Such a call runs with each term padded to kp (the next multiple of 16 bytes):
// [S_1 … S_T] and [U_1; …; U_T] are packed with zero columns/rows, the intermediate and G·Upᵀ
// live in kp-wide scratch, and results are copied out term by term. The padding is zeros on
// both sides of every inner product, so the sums are the unpadded ones. Padding has not yet run
// on a GPU: it is the gated path cuda_padded_inner_width (gated_paths.hpp), and while that is
// closed cuda_inner_width() answers k itself, the unpadded call that last passed on a device.
// The fused Performer kernels are gated likewise (cuda_performer_kernels), and so is the int8
// sketched GEMM (cuda_int8_factors) and the fp8 one (cuda_fp8_factors), both in quantized_cuda.cu.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "cuda_common.cuh"
#include "detail/backend.hpp"
#include "cuda_ops.cuh"
#include "detail/layout.hpp"
#include "device_pool.cuh"
#include "inner_activation.cuh"
#include "kernels.cuh"
#include "lt_gemm.cuh"
#include "sketchcore/errors.hpp"
#include "sketchcore/gated_paths.hpp"

namespace sketchcore::cuda {

namespace {

using detail::SketchedMatmulProblem;

template <class T>
class CudaExecution {
 public:
  explicit CudaExecution(const SketchedMatmulProblem& p)
      : p_(p), device_(p.x.device().index), stream_(current_stream()), r_(p.terms * p.rank),
        kp_(cuda_inner_width(p.rank, p.x.dtype())), rp_(p.terms * kp_), tf32_(current_execution().allow_tf32) {}

  void forward() {
    const std::int64_t rows = p_.rows, d_out = p_.d_out;
    if (rows == 0 || d_out == 0) return;
    std::optional<DeviceMatrix> out_direct = in_place(p_.out);
    if (out_direct && out_direct->transposed) out_direct.reset();
    DeviceBuffer y_buffer;
    T* y = nullptr;
    std::int64_t ldy = d_out;
    if (out_direct) {
      y = static_cast<T*>(const_cast<void*>(out_direct->data));
      ldy = out_direct->ld;
    } else {
      y_buffer = buffer(rows * d_out);
      y = y_buffer.as<T>();
    }
    EpilogueArgs<T> rest = own_epilogue();
    LtEpilogue fused;
    if (r_ == 0 || p_.d_in == 0) {
      fill_rows(y, ldy, rows, d_out);  // the empty sum
      if (p_.intermediate && r_ > 0) fill_rows(intermediate_data(), intermediate_ld(), rows, r_);
    } else {
      DeviceBuffer x_buffer, s_buffer, u_buffer, z_buffer;
      DeviceMatrix z_for_second;
      const DeviceMatrix x = operand(p_.x, x_buffer);
      const DeviceMatrix sp = sketch_matrix(s_buffer);
      const DeviceMatrix up = factor_matrix(u_buffer);  // (T, k, d_out) is r × d_out
      const bool z_direct = p_.intermediate && !padded();
      T* z = z_direct ? intermediate_data() : (z_buffer = buffer(rows * rp_)).template as<T>();
      const std::int64_t ldz = z_direct ? intermediate_ld() : rp_;
      lt_gemm(device_, dtype(), rows, rp_, p_.d_in, 1.0, x, sp, 0.0, z, ldz, {}, tf32_, stream_);
      if (p_.intermediate && padded()) {  // the caller's Z (rows × T·k) from the padded one
        copy_strided<T>(z, padded_intermediate_layout(), intermediate_data(), intermediate_layout(), stream_);
      }
      // Inner activation σ (UNVERIFIED on a GPU: behind the unverified-CUDA gate): the second
      // product reads σ(Z); the caller's saved Z stays the pre-activation (σ(0) = 0 keeps the
      // padding zero).
      DeviceBuffer a_buffer;
      if (p_.epilogue.inner_activation != Activation::none) {
        T* a = z_direct ? (a_buffer = buffer(rows * rp_)).template as<T>() : z;
        const std::int64_t lda = z_direct ? rp_ : ldz;
        inner_activation_forward<T>(p_.epilogue.inner_activation, z, ldz, a, lda, rows, rp_, stream_);
        z_for_second = {a, false, lda};
      } else {
        z_for_second = {z, false, ldz};
      }
      // Bias and activation inside the second GEMM where cuBLASLt has them (bias must be contiguous).
      // float64 keeps everything in the own kernel: cuBLASLt offers no epilogues for it.
      const bool bias_fusable = p_.epilogue.bias && p_.epilogue.bias->stride(0) == 1 && dtype() != DType::float64;
      if (lt_supports(dtype(), p_.epilogue.activation) && (bias_fusable || !p_.epilogue.bias)) {
        fused.bias = bias_fusable ? p_.epilogue.bias->data() : nullptr;
        fused.activation = p_.epilogue.activation;
        rest.bias = nullptr;
        rest.activation = Activation::none;
      } else if (bias_fusable) {
        fused.bias = p_.epilogue.bias->data();
        rest.bias = nullptr;
      }
      lt_gemm(device_, dtype(), rows, d_out, rp_, p_.epilogue.scale, z_for_second, up, 0.0, y, ldy, fused, tf32_,
              stream_);
    }
    const bool own_pass = rest.bias || rest.activation != Activation::none || rest.dropout.enabled;
    if (own_pass || !out_direct) {
      epilogue_forward<T>(y, row_layout_compact(ldy), static_cast<T*>(p_.out.data()),
                          out_direct ? row_layout_compact(ldy) : row_layout_of(p_.out), rows, d_out, rest, stream_);
    }
  }

  void backward(const SketchedMatmulGradients& g) {
    const std::int64_t rows = p_.rows, d_out = p_.d_out, d_in = p_.d_in;
    if (rows == 0 || d_out == 0 || r_ == 0 || d_in == 0) {
      zero_gradients(g);
      if (g.bias && rows > 0 && d_out > 0) bias_gradient_of_empty_product(g);
      return;
    }
    DeviceBuffer x_buffer, s_buffer, u_buffer, z_buffer, g_buffer, gu_buffer;
    const DeviceMatrix x = operand(p_.x, x_buffer);
    const DeviceMatrix sp = sketch_matrix(s_buffer);
    const DeviceMatrix up = factor_matrix(u_buffer);
    DeviceMatrix z{intermediate_data(), false, intermediate_ld()};
    if (padded()) {  // the saved Z into kp-wide rows, zero between the terms
      z_buffer = buffer(rows * rp_);
      fill_zero<T>(z_buffer.as<T>(), rows * rp_, stream_);
      copy_strided<T>(intermediate_data(), intermediate_layout(), z_buffer.as<T>(), padded_intermediate_layout(),
                      stream_);
      z = {z_buffer.as<T>(), false, rp_};
    }
    // A = σ(Z) recomputed from the saved pre-activation for an inner activation (UNVERIFIED on a
    // GPU: behind the unverified-CUDA gate); A = Z otherwise.
    const Activation sigma = p_.epilogue.inner_activation;
    DeviceBuffer a_buffer;
    DeviceMatrix a = z;
    if (sigma != Activation::none) {
      a_buffer = buffer(rows * rp_);
      inner_activation_forward<T>(sigma, static_cast<const T*>(z.data), z.ld, a_buffer.as<T>(), rp_, rows, rp_, stream_);
      a = {a_buffer.as<T>(), false, rp_};
    }
    const EpilogueArgs<T> e = own_epilogue();
    const bool transform = p_.epilogue.activation != Activation::none || e.dropout.enabled;
    // G = dL/dy ⊙ keep/(1 − p) ⊙ act′(H), H = scale·Z·Up + bias recomputed when needed.
    DeviceMatrix gm;
    std::optional<DeviceMatrix> dy_direct = in_place(p_.out);
    if (transform || !dy_direct || dy_direct->transposed) {
      g_buffer = buffer(rows * d_out);
      T* gp = g_buffer.as<T>();
      if (p_.epilogue.activation != Activation::none) {
        lt_gemm(device_, dtype(), rows, d_out, rp_, p_.epilogue.scale, a, up, 0.0, gp, d_out, {}, tf32_, stream_);
      }
      EpilogueArgs<T> be = e;
      if (!transform) be.dropout = {};
      epilogue_backward<T>(static_cast<const T*>(p_.out.data()), row_layout_of(p_.out), gp, gp, rows, d_out, be,
                           stream_);
      gm = {gp, false, d_out};
    } else {
      gm = *dy_direct;
    }
    if (g.bias) bias_gradient(gm, *g.bias);
    const std::int64_t k = kp_;  // column offsets and widths in the (possibly padded) inner dimension
    const std::int64_t s_first = g.S_terms.begin * k, s_width = (g.S_terms.end - g.S_terms.begin) * k;
    const std::int64_t u_first = g.U_terms.begin * k, u_width = (g.U_terms.end - g.U_terms.begin) * k;
    const double scale = p_.epilogue.scale;
    if (g.U && u_width > 0) {  // dUp = scale·Aᵀ·G, rows [u_first, u_first + u_width)
      write_matrix(*g.U, u_width, d_out, [&](void* dst, std::int64_t ld) {
        lt_gemm(device_, dtype(), u_width, d_out, rows, scale, transposed(DeviceMatrix{static_cast<const T*>(a.data) + u_first, false, a.ld}),
                gm, 0.0, dst, ld, {}, tf32_, stream_);
      }, Destination::factor);
    }
    if (!g.x && !(g.S && s_width > 0)) return;
    // GU = G·Upᵀ: all r columns for dx, else only those dS needs.
    const std::int64_t gu_first = g.x ? 0 : s_first, gu_width = g.x ? rp_ : s_width;
    gu_buffer = buffer(rows * gu_width);
    T* gu = gu_buffer.as<T>();
    lt_gemm(device_, dtype(), rows, gu_width, d_out, 1.0, gm, transposed(rows_from<T>(up, gu_first)), 0.0, gu,
            gu_width, {}, tf32_, stream_);
    // D = GU ⊙ σ′(Z) on the kept columns; dS and dx then follow as without σ.
    inner_activation_backward<T>(sigma, static_cast<const T*>(z.data) + gu_first, z.ld, gu, gu_width, rows, gu_width,
                                 stream_);
    if (g.S && s_width > 0) {  // dSp = scale·Xᵀ·GU[:, s]
      write_matrix(*g.S, d_in, s_width, [&](void* dst, std::int64_t ld) {
        lt_gemm(device_, dtype(), d_in, s_width, rows, scale, transposed(x),
                DeviceMatrix{gu + (s_first - gu_first), false, gu_width}, 0.0, dst, ld, {}, tf32_, stream_);
      }, Destination::sketch);
    }
    if (g.x) {  // dx = scale·GU·Spᵀ
      write_matrix(*g.x, rows, d_in, [&](void* dst, std::int64_t ld) {
        lt_gemm(device_, dtype(), rows, d_in, rp_, scale, DeviceMatrix{gu, false, gu_width}, transposed(sp), 0.0, dst,
                ld, {}, tf32_, stream_);
      }, Destination::plain);
    }
  }

 private:
  DType dtype() const { return p_.x.dtype(); }

  bool padded() const { return kp_ != p_.rank; }

  /// The caller's intermediate as (rows, T, k) and the padded scratch's (rows, T, kp) view of it.
  Strided intermediate_layout() const {
    Strided v = compact({p_.rows, p_.terms, p_.rank});
    v.stride[0] = intermediate_ld();
    return v;
  }
  Strided padded_intermediate_layout() const {
    Strided v = compact({p_.rows, p_.terms, p_.rank});
    v.stride[0] = rp_;
    v.stride[1] = kp_;
    return v;
  }

  DeviceBuffer buffer(std::int64_t elements) const {
    return DeviceBuffer(device_, static_cast<std::size_t>(elements) * sizeof(T), stream_);
  }

  T* intermediate_data() const { return static_cast<T*>(p_.intermediate->data()); }
  std::int64_t intermediate_ld() const {
    const detail::RowMatrix m = detail::as_row_matrix(*p_.intermediate);
    return p_.rows > 1 ? *m.row_stride : std::max<std::int64_t>(r_, 1);
  }

  EpilogueArgs<T> own_epilogue() const { return detail::resolve_epilogue<T>(p_.epilogue); }

  /// A matrix-of-rows operand in place, or packed into `storage`.
  DeviceMatrix operand(const TensorView& v, DeviceBuffer& storage) const {
    if (auto m = in_place(v)) return *m;
    const detail::RowMatrix m = detail::as_row_matrix(v);
    storage = buffer(m.rows * m.cols);
    copy_strided<T>(static_cast<const T*>(v.data()), strided_of(v), storage.as<T>(), compact_like(v), stream_);
    return {storage.as<T>(), false, std::max<std::int64_t>(m.cols, 1)};
  }

  /// Sp = [S_1 … S_T] (d_in × r): in place when the (T, k) columns collapse, else packed.
  /// Sp = [S_1 … S_T] (d_in × r): in place when the (T, k) columns collapse, else packed;
  /// padded: d_in × T·kp with zero columns after each term.
  DeviceMatrix sketch_matrix(DeviceBuffer& storage) const {
    const TensorView& S = p_.S;
    if (!padded()) {
      if (const auto column_stride = detail::sketch_column_stride(S, p_.rank)) {
        if (auto op = detail::operand_in_place<void>(S.data(), p_.d_in, r_, S.stride(-2), *column_stride)) return *op;
      }
    }
    storage = buffer(p_.d_in * rp_);
    if (padded()) fill_zero<T>(storage.as<T>(), p_.d_in * rp_, stream_);
    // Source (T, d_in, k) → destination element (t, i, j) at i·rp + t·kp + j.
    copy_strided<T>(static_cast<const T*>(S.data()), strided_of(S), storage.as<T>(), term_layout(S, rp_, kp_),
                    stream_);
    return {storage.as<T>(), false, std::max<std::int64_t>(rp_, 1)};
  }

  /// Up = [U_1; …; U_T] (r × d_out) in place or packed; padded: T·kp × d_out with zero rows
  /// after each term.
  DeviceMatrix factor_matrix(DeviceBuffer& storage) const {
    if (!padded()) return operand(p_.U, storage);
    const TensorView& U = p_.U;
    storage = buffer(rp_ * p_.d_out);
    fill_zero<T>(storage.as<T>(), rp_ * p_.d_out, stream_);
    copy_strided<T>(static_cast<const T*>(U.data()), strided_of(U), storage.as<T>(),
                    term_layout(U, p_.d_out, kp_ * p_.d_out), stream_);
    return {storage.as<T>(), false, std::max<std::int64_t>(p_.d_out, 1)};
  }

  /// Where the elements of a term-shaped `view` — (T, a, b) or (a, b) — lie in a row-major matrix
  /// of leading dimension `cols` that holds term t from element t·term_stride: a sketch (T, rows,
  /// k) in rows × (T·kp) has term_stride kp, a factor (T, k, cols) in (T·kp) × cols has kp·cols.
  Strided term_layout(const TensorView& view, std::int64_t cols, std::int64_t term_stride) const {
    Strided v = strided_of(view);
    const int first = view.ndim() == 3 ? 1 : 0;
    if (first) v.stride[0] = term_stride;
    v.stride[first] = cols;
    v.stride[first + 1] = 1;
    return v;
  }

  /// What a gradient destination is: a plain row matrix (dx), a sketch (dS: (terms, d_in, k)
  /// or (d_in, k), the result's columns run over terms), or a factor (dU: (terms, k, d_out) or
  /// (k, d_out), the result's rows run over terms).
  enum class Destination { plain, sketch, factor };

  /// Runs `gemm(dst, ld)` for a rows × cols result (cols or rows T·kp wide for a sketch or a
  /// factor) into `dest` directly when it is that row-major matrix (a sketch when its (terms,
  /// k) columns collapse; never when padded), else into a buffer copied out after.
  template <class Gemm>
  void write_matrix(const TensorView& dest, std::int64_t rows, std::int64_t cols, Gemm&& gemm, Destination kind) {
    std::optional<std::int64_t> ld;
    if (kind == Destination::sketch) {
      if (!padded() && detail::sketch_column_stride(dest, p_.rank) == std::optional<std::int64_t>(1)) {
        ld = dest.stride(-2);
      }
    } else if (auto m = in_place(dest); m && !m->transposed && (kind == Destination::plain || !padded())) {
      ld = m->ld;
    }
    if (ld && (*ld >= cols || rows <= 1)) {
      gemm(dest.data(), std::max<std::int64_t>(*ld, std::max<std::int64_t>(cols, 1)));
      return;
    }
    DeviceBuffer staged = buffer(rows * cols);
    gemm(staged.as<void>(), std::max<std::int64_t>(cols, 1));
    const Strided src = kind == Destination::sketch   ? term_layout(dest, cols, kp_)
                        : kind == Destination::factor ? term_layout(dest, cols, kp_ * cols)
                                                      : compact_like(dest);
    copy_strided<T>(staged.as<T>(), src, static_cast<T*>(dest.data()), strided_of(dest), stream_);
  }

  void fill_rows(T* data, std::int64_t ld, std::int64_t rows, std::int64_t cols) const {
    if (ld == cols) {
      fill_zero<T>(data, rows * cols, stream_);
    } else {
      check(cudaMemset2DAsync(data, static_cast<std::size_t>(ld) * sizeof(T), 0, static_cast<std::size_t>(cols) * sizeof(T),
                              static_cast<std::size_t>(rows), stream_),
            "cudaMemset2DAsync");
    }
  }

  void zero_gradients(const SketchedMatmulGradients& g) const {
    for (const auto* v : {g.x ? &*g.x : nullptr, g.S ? &*g.S : nullptr, g.U ? &*g.U : nullptr}) {
      if (v) zero(*v);
    }
    if (g.bias && (p_.rows == 0 || p_.d_out == 0)) zero(*g.bias);
  }

  /// Writes zeros into every element of `v` (any layout).
  void zero(const TensorView& v) const {
    if (v.numel() == 0) return;
    DeviceBuffer zeros = buffer(v.numel());
    fill_zero<T>(zeros.as<T>(), v.numel(), stream_);
    copy_strided<T>(zeros.as<T>(), compact_like(v), static_cast<T*>(v.data()), strided_of(v), stream_);
  }

  /// d_in = 0 or r = 0: H = bias, so dbias = Σ_rows dy ⊙ keep/(1 − p) ⊙ act′(bias).
  void bias_gradient_of_empty_product(const SketchedMatmulGradients& g) {
    DeviceBuffer gbuf = buffer(p_.rows * p_.d_out);
    fill_zero<T>(gbuf.as<T>(), p_.rows * p_.d_out, stream_);  // H without bias = 0
    epilogue_backward<T>(static_cast<const T*>(p_.out.data()), row_layout_of(p_.out), gbuf.as<T>(), gbuf.as<T>(),
                         p_.rows, p_.d_out, own_epilogue(), stream_);
    bias_gradient({gbuf.as<T>(), false, p_.d_out}, *g.bias);
  }

  /// dbias = Σ_rows G (G row-major, or packed first).
  void bias_gradient(const DeviceMatrix& gm, const TensorView& dest) {
    DeviceBuffer packed;
    const T* g = static_cast<const T*>(gm.data);
    if (gm.transposed || gm.ld != p_.d_out) {
      packed = buffer(p_.rows * p_.d_out);
      Strided src = compact({p_.rows, p_.d_out});
      if (gm.transposed) {
        src.stride[0] = 1;
        src.stride[1] = gm.ld;
      } else {
        src.stride[0] = gm.ld;
      }
      copy_strided<T>(g, src, packed.as<T>(), compact({p_.rows, p_.d_out}), stream_);
      g = packed.as<T>();
    }
    using Acc = typename Element<T>::Compute;
    DeviceBuffer partial(device_, static_cast<std::size_t>(column_sum_slabs(p_.rows) * p_.d_out) * sizeof(Acc),
                         stream_);
    column_sums<T>(g, p_.rows, p_.d_out, partial.as<void>(), static_cast<T*>(dest.data()), dest.stride(0), stream_);
  }

  const SketchedMatmulProblem& p_;
  const int device_;
  const cudaStream_t stream_;
  const std::int64_t r_;   // T·k, the inner width the caller sees
  const std::int64_t kp_;  // k, or k padded to 16 bytes (padded())
  const std::int64_t rp_;  // T·kp, the inner width the GEMMs see
  const bool tf32_;
};

class CudaBackend final : public detail::Backend {
 public:
  void sketched_matmul(const SketchedMatmulProblem& p) const override {
    if (p.epilogue.inner_activation != Activation::none) {
      require_gated_path(GatedPath::cuda_inner_activation, "sketched_matmul with an inner_activation on a CUDA device");
    }
    DeviceGuard guard(p.x.device().index);
    dispatch_dtype(p.x.dtype(), [&](auto tag) { CudaExecution<decltype(tag)>(p).forward(); });
  }
  void sketched_matmul_backward(const SketchedMatmulProblem& p, const SketchedMatmulGradients& g) const override {
    if (p.epilogue.inner_activation != Activation::none) {
      require_gated_path(GatedPath::cuda_inner_activation,
                         "sketched_matmul_backward with an inner_activation on a CUDA device");
    }
    DeviceGuard guard(p.x.device().index);
    dispatch_dtype(p.x.dtype(), [&](auto tag) { CudaExecution<decltype(tag)>(p).backward(g); });
  }
  void sketch_to_dense(const SketchOperator& op, const TensorView& out, std::int64_t row0,
                       std::int64_t col0) const override {
    sketch_to_dense_on_device(op, out, row0, col0);
  }
  void sketch_apply(const detail::SketchApplyProblem& p) const override { sketch_apply_on_device(p); }
  void performer_attention(const detail::PerformerProblem& p) const override {
    require_gated_path(GatedPath::cuda_performer_kernels, "performer_attention on a CUDA device");
    performer_attention_on_device(p);
  }
  void performer_attention_backward(const detail::PerformerProblem& p, const TensorView& grad_out,
                                    const PerformerGradients& g) const override {
    require_gated_path(GatedPath::cuda_performer_kernels, "performer_attention_backward on a CUDA device");
    performer_attention_backward_on_device(p, grad_out, g);
  }
  // Each quantized format's CUDA kernels are behind their own gated path.
  static void require_quantized_gate(QuantFormat format, const char* op) {
    require_gated_path(format == QuantFormat::int8 ? GatedPath::cuda_int8_factors : GatedPath::cuda_fp8_factors,
                       std::string(op) + " on a CUDA device");
  }
  void quantized_sketched_matmul(const detail::QuantizedMatmulProblem& p) const override {
    require_quantized_gate(p.S.format(), quant_format_info(p.S.format()).sketched_op);
    quantized_sketched_matmul_on_device(p);
  }
  void quantized_matmul(const detail::QuantizedDenseProblem& p) const override {
    require_quantized_gate(p.W.format(), quant_format_info(p.W.format()).dense_op);
    quantized_matmul_on_device(p);
  }
  bool supports(DType) const noexcept override { return true; }  // every DType, in float32 or float64 arithmetic
  int device_count() const noexcept override {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();  // no driver or no device: not an error of later calls
      return 0;
    }
    return count;
  }
  int runtime_version() const noexcept override {
    int version = 0;
    if (cudaRuntimeGetVersion(&version) != cudaSuccess) return 0;
    return version;
  }
  MemoryStats memory_stats(int device) const override { return pool_stats(device); }
  void reset_peak(int device) const override { pool_reset_peak(device); }
  void empty_cache(int device) const override { pool_empty_cache(device); }
};

}  // namespace

}  // namespace sketchcore::cuda

namespace sketchcore::detail {

const Backend* cuda_backend() noexcept {
  static const cuda::CudaBackend backend;
  return &backend;
}

}  // namespace sketchcore::detail
