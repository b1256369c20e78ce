// The passes the CPU Performer forward and backward share (cpu/performer_forward_cpu.cpp defines
// them): the per-thread block buffers, the non-causal reduction of the keys to one state per head,
// and the block-wise feature steps.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/performer_cpu.hpp"

namespace sketchcore::detail::performer {

/// Per-thread buffers for blocks of up to `rows` rows.
template <class T>
struct BlockBuffers {
  explicit BlockBuffers(pgemm::Isa isa) : ws(isa) {}
  void reserve(std::int64_t rows, std::int64_t d, std::int64_t m, std::int64_t e);
  T* x() const { return x_.data(); }    ///< rows × d: x'
  T* dx() const { return dx_.data(); }  ///< rows × d
  T* f() const { return f_.data(); }    ///< rows × m
  T* f2() const { return f2_.data(); }  ///< rows × m
  T* g() const { return g_.data(); }    ///< rows × m
  T* g2() const { return g2_.data(); }  ///< rows × m
  T* h() const { return h_.data(); }    ///< rows × m
  T* v() const { return v_.data(); }    ///< rows × e: w·v
  T* o() const { return o_.data(); }    ///< rows × e
  T* o2() const { return o2_.data(); }  ///< rows × e
  T* rows_a() const { return ra_.data(); }  ///< rows: |x'|²/2
  T* rows_b() const { return rb_.data(); }  ///< rows: row maxima, key weights
  T* rows_c() const { return rc_.data(); }  ///< rows: normalisers
  T* rows_d() const { return rd_.data(); }  ///< rows: value weights
  T* rows_e() const { return re_.data(); }  ///< rows
  T* rows_f() const { return rf_.data(); }  ///< rows
  T* p() const { return p_.data(); }    ///< rows × rows
  T* dp() const { return dp_.data(); }  ///< rows × rows
  pgemm::Workspace<T> ws;

 private:
  Scratch<T> x_, dx_, f_, f2_, g_, g2_, h_, v_, o_, o2_, ra_, rb_, rc_, rd_, re_, rf_, p_, dp_;
  std::int64_t capacity_[4] = {0, 0, 0, 0};
};

/// The non-causal reduction of every head's keys: per head S = Σ_j φ(k_j)' ⊗ w_j·v_j (m × e)
/// and S_den = Σ_j φ(k_j)' (m), φ' = a·φ, with the softmax keys' constant c (the head's largest
/// dash), in parts of consecutive key blocks that depend only on S.
template <class T>
class KeyPasses {
 public:
  static constexpr std::int64_t kKeysPerPart = 1024;
  static constexpr std::int64_t kMaxParts = 16;

  KeyPasses(const PerformerProblem& p, const FeatureMap<T>& map);
  /// Fills the states (parallel over heads and parts).
  void reduce();
  /// Head bh's state: S (m × e, row-major) followed by S_den (m).
  const T* state(std::int64_t bh) const { return state_.data() + bh * (m_ * e_ + m_); }
  /// Head bh's softmax key constant c.
  T constant(std::int64_t bh) const { return c_[static_cast<std::size_t>(bh)]; }
  std::int64_t parts() const { return parts_; }
  std::int64_t part_length() const { return part_len_; }
  static std::int64_t key_parts(std::int64_t keys);

 private:
  void reduce_part(std::int64_t bh, std::int64_t part, BlockBuffers<T>& buf);
  void merge(std::int64_t bh);

  const PerformerProblem& p_;
  const FeatureMap<T>& map_;
  std::int64_t heads_, parts_, part_len_, m_, e_, partial_size_;
  Scratch<T> partial_, state_;
  std::vector<T> c_;
};

/// Causal attention's parts: consecutive chunks of a head processed by separate threads, each from
/// the sums over the parts before it (forward) or after it (the backward's reverse pass). From the
/// shapes only (results do not depend on the thread count): enough parts that B·H·parts ≥ 8, one
/// part (no extra pass) when there are 8 heads or more.
struct CausalParts {
  std::int64_t count = 1;   ///< parts per head
  std::int64_t length = 0;  ///< tokens per part, whole chunks
  static CausalParts of(const PerformerProblem& p);
};

// --- causal softmax keys' constants (cpu/performer_causal_cpu.cpp) --------------------------------
//
// Causal softmax keys are φ(k_j) = α·exp(dash_j − diag_j − c): no β, so any c common to the keys of a
// query cancels in its ratio. c is data-dependent and never looks ahead: tokens are processed in
// spans of consecutive tokens whose keys share one constant, the running maximum of the keys'
// exponents r_j = max_f dash_jf − diag_j up to and including the span's *first* key (keys of weight
// a_j = 0 excluded: they add nothing). Every query's keys then include one with r_j ≥ c, so its
// normaliser is ≥ α²·β = 1e-5/m (no underflow), and no output depends on a later token, to the bit.
// A span ends before the first key whose r_j exceeds c by more than kSpanSpread (so no exponential
// exceeds e^kSpanSpread); where it ends depends on that key, but no earlier row's arithmetic does.
// When a span's constant is larger than the state's, the state of the earlier keys is rescaled by
// exp(c_old − c_new) (the online-softmax step). Spans before the first key of nonzero weight are
// "keyless": their outputs and gradients are 0, their constant a placeholder. (A fixed bound such as
// max_f |W_f|²/2 underflowed every key in float32 from head dimension 128 on.)

/// The largest exponent of a causal key above its span's constant.
constexpr double kSpanSpread = 40;

/// A causal span: tokens [t0, t0 + n) whose keys share the constant c.
template <class T>
struct CausalSpan {
  std::int64_t t0 = 0, n = 0;
  T c = 0;
  bool keyless = false;  ///< no key of nonzero weight up to its end (c is a placeholder 0)
};

/// The first span among n consecutive keys with `dash` (n × m), diag = |k'|²/2 and weights `a` (null:
/// 1), after keys whose exponents' running maximum is `running` (−inf for none): returns it (t0 = 0,
/// 1 ≤ n' ≤ n) and adds its keys to `running`. relu keys: n and 0.
template <class T>
CausalSpan<T> causal_span(const FeatureMap<T>& map, std::int64_t n, const T* dash, const T* diag, const T* a,
                          T& running);

/// The starting constant of the causal spans (−inf for softmax, 0 for relu).
template <class T>
T causal_start_constant(const FeatureMap<T>& map);

/// Rescales a causal state (`size` entries, and its compensation `comp` when not null) kept with the
/// constant c_old to the constant c_new ≥ c_old.
template <class T>
void rescale_state(const FeatureMap<T>& map, std::int64_t size, T c_old, T c_new, T* S, T* comp);

/// sum += block with Kahan's compensation in `comp`: the rounding error of a sum of many blocks stays
/// about 2u·Σ|blocks| whatever their number (a plain float32 running sum grows with it, and a count of
/// 2²⁴ ones stops there).
template <class T>
void compensated_add(std::int64_t n, const T* block, T* sum, T* comp) {
  for (std::int64_t i = 0; i < n; ++i) {
    const T y = block[i] - comp[i];
    const T t = sum[i] + y;
    comp[i] = (t - sum[i]) - y;
    sum[i] = t;
  }
}

/// Into before[(bh·parts + part)·(m·e + m + 1) …]: the state S, S_den before each part, the sums over
/// the earlier parts' keys of φ'(k) ⊗ w·v and φ'(k) (zero for the first part), then their constant
/// (the keys' running maximum before the part; the start constant for the first part).
template <class T>
void causal_states_before(const PerformerProblem& p, const FeatureMap<T>& map, CausalParts parts, T* before);

/// The causal forward (cpu/performer_causal_cpu.cpp).
template <class T>
void causal_forward(const PerformerProblem& p);

/// Weights of rows [row0, row0 + n) of head (b, h) into dst, or null without weights.
template <class T>
const T* read_weights(const TensorView* weights, std::int64_t b, std::int64_t h, std::int64_t row0, std::int64_t n,
                      T* dst);

/// w·v of rows [j0, j0 + n) into buf.v() (w = value_weights, through buf.rows_d()).
template <class T>
void read_values(const PerformerProblem& p, std::int64_t b, std::int64_t h, std::int64_t j0, std::int64_t n,
                 BlockBuffers<T>& buf);

/// Query features from `dash` (n × m): g (the exponentials, or the relu values; kept for the
/// backward) into `g` and φ into `phi`; `diag` and `top` get |x'|²/2 and the row maxima
/// (softmax). Any of dash, g, phi may be the same array.
template <class T>
void query_features(const FeatureMap<T>& map, std::int64_t n, const T* dash, T* g, T* phi, const T* x, T* diag,
                    T* top);

/// Causal key features from `dash` and diag = |k'|²/2 (softmax; as causal_span's): g into `g`,
/// φ' = a·α·(g + β) into `phi` (a null: 1), g = exp(dash − diag − c) (softmax; 0 where a = 0, and
/// c = −inf stands for 0) or relu(dash·m^(−1/2)).
template <class T>
void causal_key_features(const FeatureMap<T>& map, std::int64_t n, const T* dash, T* g, T* phi, const T* diag,
                         const T* a, T c);

/// `count` empty packed operands for `isa` (one per head).
template <class T>
std::vector<pgemm::PackedB<T>> packed_operands(std::int64_t count, pgemm::Isa isa) {
  std::vector<pgemm::PackedB<T>> packed;
  packed.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) packed.emplace_back(isa);
  return packed;
}

// --- the backward's pieces (cpu/performer_backward_cpu.cpp) ---------------------------------------

/// dz = −(dout·out)/z into dz and dn = dout/z into `go` (in place), both 0 where z < tiny.
template <class T>
void output_gradients(std::int64_t n, std::int64_t e, const T* z, const T* out, T* go, T* dz);

/// Rows of a row-major block scaled by per-row weights (in place); w null: nothing.
template <class T>
void scale_rows(std::int64_t n, std::int64_t cols, const T* w, T* a);

/// The gradient of a block's rows x from dφ in `dphi` (consumed) into buf.dx() (dx' before the
/// x_scale); see cpu/performer_backward_cpu.cpp. Returns the gradient of the softmax shift.
template <class T>
T features_backward(const FeatureMap<T>& map, std::int64_t n, const T* x, const T* g, T alpha, T* dphi,
                    const T* dash, const T* top, BlockBuffers<T>& buf, std::vector<std::int64_t>& hits);

/// The causal backward (cpu/performer_causal_backward_cpu.cpp).
template <class T>
void causal_backward(const PerformerProblem& p, const TensorView& grad_out, const PerformerGradients& grads);

/// o[i, ·] /= max(z[i], tiny).
template <class T>
void divide_rows(std::int64_t n, std::int64_t e, T* o, const T* z);

/// P[i, j] = 0 for j > i (n × n).
template <class T>
void mask_upper(std::int64_t n, T* P);

}  // namespace sketchcore::detail::performer
