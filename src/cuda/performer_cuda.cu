// CUDA Performer attention, host side: the weights converted to compact arrays of the compute type,
// the kernels' arguments, the partition of each head into parts (from the shapes only, so results
// do not depend on the device), rows per block chosen by the shared memory the device offers,
// temporaries from the stream-ordered pool, every launch on the caller's stream.
//
// Limits of this backend (shape_error beyond them): d and e ≤ 256, and m small enough that a block
// of 16 rows of features fits the device's shared memory (m ≲ 1500 for d = e = 64 on an H100).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "cuda_ops.cuh"
#include "detail/check.hpp"
#include "device_pool.cuh"
#include "performer_kernels.cuh"
#include "sketchcore/errors.hpp"

namespace sketchcore::cuda {

namespace {

using performer::Args;
using performer::Heads;
using performer::Parts;

/// Blocks the partitioned kernels aim for: two waves of a 132-SM H100 (a fixed number, so that
/// the partition, and with it the rounding, is the same on every device).
constexpr long long kTargetBlocks = 264;
/// Entries of a head's key maximum listed for the backward (more: found again by a scan).
constexpr int kTieCapacity = 64;

struct Layout3 {
  int ndim = 0;
  long long shape[3] = {1, 1, 1};
  long long stride[3] = {0, 0, 0};
};

template <class S, class C>
__global__ void convert_kernel(const S* src, Layout3 layout, C* dst, long long n) {
  for (long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<long long>(gridDim.x) * blockDim.x) {
    long long rest = idx, offset = 0;
    for (int dim = layout.ndim - 1; dim >= 0; --dim) {
      offset += (rest % layout.shape[dim]) * layout.stride[dim];
      rest /= layout.shape[dim];
    }
    dst[idx] = static_cast<C>(Element<S>::load(src[offset]));
  }
}

template <class S, class C>
void launch_convert(const void* src, const Layout3& layout, C* dst, long long n, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>(std::min<long long>((n + 255) / 256, 4096));
  convert_kernel<S, C><<<blocks, 256, 0, stream>>>(static_cast<const S*>(src), layout, dst, n);
  check(cudaGetLastError(), "convert_kernel");
}

/// A compact C copy of `view` (up to 3-D, any dtype) from the pool.
template <class C>
DeviceBuffer converted(const TensorView& view, int device, cudaStream_t stream) {
  const long long n = view.numel();
  DeviceBuffer buffer(device, static_cast<std::size_t>(std::max<long long>(n, 1)) * sizeof(C), stream);
  if (n == 0) return buffer;
  Layout3 layout;
  layout.ndim = view.ndim();
  for (int dim = 0; dim < view.ndim(); ++dim) {
    layout.shape[dim] = view.size(dim);
    layout.stride[dim] = view.stride(dim);
  }
  dispatch_dtype(view.dtype(), [&](auto tag) {
    launch_convert<decltype(tag), C>(view.data(), layout, buffer.as<C>(), n, stream);
  });
  return buffer;
}

__global__ void zero_kernel(Heads dst, performer::Storage storage, int heads, int H, long long rows, int cols) {
  const long long n = static_cast<long long>(heads) * rows * cols;
  for (long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long c = idx % cols, i = (idx / cols) % rows, bh = idx / (static_cast<long long>(cols) * rows);
    performer::store_element<float>(dst, storage, static_cast<int>(bh / H), static_cast<int>(bh % H), i,
                                    static_cast<int>(c), 0.0f);
  }
}

Heads heads_of(const TensorView& view) {
  return {view.data(), view.stride(0), view.stride(1), view.stride(2), view.stride(3)};
}

performer::Storage storage_of(DType dtype) {
  switch (dtype) {
    case DType::float16: return performer::Storage::f16;
    case DType::bfloat16: return performer::Storage::bf16;
    case DType::float32: return performer::Storage::f32;
    case DType::float64: break;
  }
  return performer::Storage::f64;
}

/// Parts of `length` tokens for `heads·groups` blocks: about kTargetBlocks blocks, whole blocks
/// of 64 tokens per part.
Parts parts_for(long long length, long long heads, long long groups) {
  Parts parts;
  const long long tiles = std::max<long long>(1, (length + performer::kTile - 1) / performer::kTile);
  const long long wanted = (kTargetBlocks + heads * groups - 1) / (heads * groups);
  parts.count = static_cast<int>(std::clamp<long long>(wanted, 1, tiles));
  parts.length = (tiles + parts.count - 1) / parts.count * performer::kTile;
  parts.count = static_cast<int>(std::max<long long>(1, (length + parts.length - 1) / parts.length));
  return parts;
}

/// The largest rows-per-block factor (4, 2, 1) whose shared memory (smem_bytes(16·rr)) fits the
/// device; its bytes into *bytes.
template <class Smem>
int rows_factor(int device, Smem smem_bytes, const char* op, std::size_t* bytes) {
  int limit = 0;
  check(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "cudaDeviceGetAttribute");
  for (int rr : {4, 2, 1}) {
    *bytes = smem_bytes(16 * rr);
    if (*bytes <= static_cast<std::size_t>(limit)) return rr;
  }
  detail::fail<shape_error>(op, "features",
                            "a number of features whose block of 16 rows fits the device's " + std::to_string(limit) +
                                " bytes of shared memory",
                            std::to_string(*bytes) + " bytes");
}

/// One call; C is the compute type (float for 16-bit and float32 problems, double for float64).
template <class C>
struct Problem {
  Problem(const detail::PerformerProblem& p, const char* op)
      : p_(p), op_(op), device_(p.q.device().index), stream_(current_stream()) {
    if (p.dim > 256 || p.value_dim > 256) {
      detail::fail<shape_error>(op, p.dim > 256 ? "q" : "v",
                                "a head dimension of at most 256 on a CUDA device (d and e)",
                                detail::describe_shape(p.dim > 256 ? p.q : p.v));
    }
    W_ = converted<C>(p.features, device_, stream_);
    if (p.key_weights) key_w_ = converted<C>(*p.key_weights, device_, stream_);
    if (p.value_weights) value_w_ = converted<C>(*p.value_weights, device_, stream_);
    const bool softmax = p.options.kernel == PerformerKernel::softmax;
    a.q = heads_of(p.q);
    a.k = heads_of(p.k);
    a.v = heads_of(p.v);
    a.out = heads_of(p.out);
    a.storage = storage_of(p.q.dtype());
    a.W = W_.as<C>();
    a.key_w = p.key_weights ? key_w_.as<C>() : nullptr;
    a.value_w = p.value_weights ? value_w_.as<C>() : nullptr;
    a.B = static_cast<int>(p.batch);
    a.H = static_cast<int>(p.heads);
    a.L = static_cast<int>(p.queries);
    a.S = static_cast<int>(p.keys);
    a.d = static_cast<int>(p.dim);
    a.e = static_cast<int>(p.value_dim);
    a.m = static_cast<int>(p.num_features);
    a.softmax = softmax;
    a.causal = p.options.causal;
    a.x_scale = softmax ? static_cast<C>(std::pow(static_cast<double>(p.dim), -0.25)) : C(1);
    a.inv_sqrt_m = static_cast<C>(1.0 / std::sqrt(static_cast<double>(p.num_features)));
    a.alpha_q = softmax ? a.inv_sqrt_m : C(1);
    a.beta_q = static_cast<C>(1e-5);
    a.alpha_k = a.alpha_q;
    a.beta_k = softmax && p.options.causal ? C(0) : static_cast<C>(1e-5);
    bound_ = buffer(1);
    performer::launch_key_bound(W_.as<C>(), a.m, a.d, bound_.as<C>(), stream_);
    a.key_bound = bound_.as<C>();
    heads_ = static_cast<long long>(p.batch) * p.heads;
  }

  DeviceBuffer buffer(long long elements) const {
    return DeviceBuffer(device_, static_cast<std::size_t>(std::max<long long>(elements, 1)) * sizeof(C), stream_);
  }

  /// The non-causal key states of every head (S, S_den) and the softmax constants.
  void key_states(DeviceBuffer& state, DeviceBuffer& constant) {
    const Parts parts = parts_for(a.S, heads_, (a.m + performer::kTile - 1) / performer::kTile);
    DeviceBuffer partial = buffer(heads_ * parts.count * performer::partial_elements(a.m, a.e));
    performer::launch_state_parts(a, parts, partial.as<C>(), performer::state_parts_smem(a.d, a.e) * sizeof(C),
                                  stream_);
    constant = buffer(heads_);
    if (a.softmax) performer::launch_key_constant(partial.as<C>(), static_cast<int>(heads_), parts.count, a.m, a.e,
                                                  constant.as<C>(), stream_);
    state = buffer(heads_ * (static_cast<long long>(a.m) * a.e + a.m));
    performer::launch_merge(partial.as<C>(), static_cast<int>(heads_), parts.count, a.m, a.e, a.softmax, false,
                            a.alpha_k, a.beta_k, constant.as<C>(), state.as<C>(), stream_);
  }

  /// Causal: the parts of the sequence and the states before each.
  Parts causal_states(DeviceBuffer& before) {
    const Parts parts = parts_for(a.L, heads_, 1);
    DeviceBuffer partial = buffer(heads_ * parts.count * performer::partial_elements(a.m, a.e));
    performer::launch_state_parts(a, parts, partial.as<C>(), performer::state_parts_smem(a.d, a.e) * sizeof(C),
                                  stream_);
    before = buffer(heads_ * parts.count * (static_cast<long long>(a.m) * a.e + a.m));
    performer::launch_merge(partial.as<C>(), static_cast<int>(heads_), parts.count, a.m, a.e, a.softmax, true,
                            a.alpha_k, a.beta_k, static_cast<const C*>(nullptr), before.as<C>(), stream_);
    return parts;
  }

  /// Rows per block for a kernel whose shared memory is `elements(rb)` elements of C, plus
  /// `flags(rb)` bytes.
  template <class Elements, class Flags>
  int rows(Elements elements, Flags flags, std::size_t* bytes) const {
    return rows_factor(device_, [&](int rb) { return elements(rb) * sizeof(C) + flags(rb); }, op_, bytes);
  }
  template <class Elements>
  int rows(Elements elements, std::size_t* bytes) const {
    return rows(elements, [](int) { return std::size_t(0); }, bytes);
  }

  void forward() {
    if (heads_ == 0 || a.L == 0 || a.e == 0) return;
    std::size_t bytes = 0;
    if (!a.causal) {
      DeviceBuffer state, constant;
      key_states(state, constant);
      const int rr = rows([&](int rb) { return performer::query_output_smem(rb, a.d, a.e, a.m); }, &bytes);
      performer::launch_query_output(a, state.as<C>(), rr, bytes, stream_);
      return;
    }
    DeviceBuffer before;
    const Parts parts = causal_states(before);
    DeviceBuffer running = buffer(heads_ * parts.count * (static_cast<long long>(a.m) * a.e + a.m));
    const int rr = rows([&](int rb) { return performer::causal_forward_smem(rb, a.d, a.e, a.m); }, &bytes);
    performer::launch_causal_forward(a, parts, before.as<C>(), running.as<C>(), rr, bytes, stream_);
  }

  void zero(const std::optional<TensorView>& t) const {
    if (!t || t->numel() == 0) return;
    const long long n = t->numel();
    zero_kernel<<<static_cast<unsigned>(std::min<long long>((n + 255) / 256, 4096)), 256, 0, stream_>>>(
        heads_of(*t), a.storage, static_cast<int>(heads_), static_cast<int>(p_.heads), t->size(2),
        static_cast<int>(t->size(3)));
    check(cudaGetLastError(), "zero_kernel");
  }

  void backward(const TensorView& grad_out, const PerformerGradients& grads) {
    if (heads_ == 0) return;
    if (a.L == 0 || a.S == 0 || a.e == 0) {  // nothing flows back
      zero(grads.q);
      zero(grads.k);
      zero(grads.v);
      return;
    }
    a.grad_out = heads_of(grad_out);
    if (grads.q) a.dq = heads_of(*grads.q);
    if (grads.k) a.dk = heads_of(*grads.k);
    if (grads.v) a.dv = heads_of(*grads.v);
    const bool key_side = grads.k || grads.v;
    const long long size = static_cast<long long>(a.m) * a.e + a.m;
    std::size_t bytes = 0;
    if (a.causal) {
      DeviceBuffer before;
      const Parts parts = causal_states(before);
      DeviceBuffer running = buffer(heads_ * parts.count * size), saved = buffer(heads_ * a.L * (a.e + 1LL));
      const int rr = rows([&](int rb) { return performer::causal_grad_smem(rb, a.d, a.e, a.m); },
                          [&](int rb) { return performer::flag_bytes(rb, a.m); }, &bytes);
      performer::launch_causal_grad_q(a, parts, before.as<C>(), running.as<C>(), saved.as<C>(), rr, bytes, stream_);
      if (!key_side) return;
      DeviceBuffer partial = buffer(heads_ * parts.count * size), after = buffer(heads_ * parts.count * size);
      performer::launch_causal_r_parts(a, parts, saved.as<C>(), partial.as<C>(), rr, bytes, stream_);
      performer::launch_suffix(partial.as<C>(), static_cast<int>(heads_), parts.count, size, after.as<C>(), stream_);
      performer::launch_causal_grad_kv(a, parts, after.as<C>(), running.as<C>(), saved.as<C>(), rr, bytes, stream_);
      return;
    }
    DeviceBuffer state, constant;
    key_states(state, constant);
    const Parts qparts = parts_for(a.L, heads_, 1);
    DeviceBuffer ds_partial;
    if (key_side) ds_partial = buffer(heads_ * qparts.count * size);
    const int rr = rows([&](int rb) { return performer::query_grad_smem(rb, a.d, a.e, a.m); },
                        [&](int rb) { return performer::flag_bytes(rb, a.m); }, &bytes);
    performer::launch_query_grad(a, qparts, state.as<C>(), key_side ? ds_partial.as<C>() : static_cast<C*>(nullptr),
                                 rr, bytes, stream_);
    if (!key_side) return;
    DeviceBuffer ds = buffer(heads_ * size);
    performer::launch_sum_parts(ds_partial.as<C>(), static_cast<int>(heads_), qparts.count, size, ds.as<C>(), stream_);
    const Parts kparts = parts_for(a.S, heads_, 1);
    DeviceBuffer dc = buffer(heads_ * kparts.count);
    DeviceBuffer ties(device_, static_cast<std::size_t>(heads_ * kTieCapacity) * sizeof(long long), stream_);
    DeviceBuffer tie_count(device_, static_cast<std::size_t>(heads_) * sizeof(int), stream_);
    check(cudaMemsetAsync(tie_count.as<int>(), 0, static_cast<std::size_t>(heads_) * sizeof(int), stream_),
          "cudaMemsetAsync");
    const int rk = rows([&](int rb) { return performer::key_grad_smem(rb, a.d, a.e); }, &bytes);
    performer::launch_key_grad(a, kparts, ds.as<C>(), constant.as<C>(), dc.as<C>(), ties.as<long long>(),
                               tie_count.as<int>(), kTieCapacity, rk, bytes, stream_);
    if (a.softmax && grads.k) {
      performer::launch_tie_fixup(a, kparts.count, constant.as<C>(), dc.as<C>(), ties.as<long long>(),
                                  tie_count.as<int>(),
                                  kTieCapacity, stream_);
    }
  }

  const detail::PerformerProblem& p_;
  const char* op_;
  const int device_;
  const cudaStream_t stream_;
  DeviceBuffer W_, key_w_, value_w_, bound_;
  Args<C> a;
  long long heads_ = 0;
};

/// The fused kernels' causal softmax keys still take the fixed constant max_f |W_f|²/2, which underflows
/// every key in float32 (and 16-bit, computed in float32) from head dimension 128 on (a silent zero); the
/// running constant of the CPU kernels (cpu/performer_passes.hpp) is not in them yet. Refused rather than
/// wrong; float64's range holds the bound at any practical head dimension.
void refuse_unstable_causal_softmax(const detail::PerformerProblem& p, const char* op) {
  if (p.options.causal && p.options.kernel == PerformerKernel::softmax && p.q.dtype() != DType::float64) {
    throw std::runtime_error(std::string(op) +
                             ": causal softmax attention below float64 is not in the fused CUDA kernels yet (their "
                             "fixed key constant underflows from head dimension 128 on); "
                             "sketchcore.torch.performer_attention runs the composite formula for it on CUDA");
  }
}

}  // namespace

void performer_attention_on_device(const detail::PerformerProblem& p) {
  refuse_unstable_causal_softmax(p, "performer_attention");
  DeviceGuard guard(p.q.device().index);
  if (p.q.dtype() == DType::float64) {
    Problem<double>(p, "performer_attention").forward();
  } else {
    Problem<float>(p, "performer_attention").forward();
  }
}

void performer_attention_backward_on_device(const detail::PerformerProblem& p, const TensorView& grad_out,
                                            const PerformerGradients& grads) {
  refuse_unstable_causal_softmax(p, "performer_attention_backward");
  DeviceGuard guard(p.q.device().index);
  if (p.q.dtype() == DType::float64) {
    Problem<double>(p, "performer_attention_backward").backward(grad_out, grads);
  } else {
    Problem<float>(p, "performer_attention_backward").backward(grad_out, grads);
  }
}

}  // namespace sketchcore::cuda
