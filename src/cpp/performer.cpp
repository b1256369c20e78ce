// Public entry points of Performer attention: argument validation (once, for every backend)
// and dispatch to the backend of the operands' device.
#include "sketchcore/performer.hpp"

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "detail/backend.hpp"
#include "detail/check.hpp"
#include "detail/checked.hpp"
#include "detail/layout.hpp"
#include "sketchcore/errors.hpp"

namespace sketchcore {

namespace {

using Named = std::pair<const TensorView*, const char*>;

struct Checker {
  const char* op;

  void same_device(const TensorView& q, const TensorView& v, const char* name) const {
    if (v.device() != q.device()) {
      detail::fail<device_error>(op, name, "device " + device_name(q.device()) + " (the device of q)",
                                 device_name(v.device()));
    }
  }
  void same_dtype(const TensorView& q, const TensorView& v, const char* name) const {
    if (v.dtype() != q.dtype()) {
      detail::fail<dtype_error>(op, name, std::string("dtype ") + dtype_name(q.dtype()) + " (the dtype of q)",
                                dtype_name(v.dtype()));
    }
  }
  /// The weights (features, key and value weights): q's dtype or float32.
  void weight_dtype(const TensorView& q, const TensorView& v, const char* name) const {
    if (v.dtype() != q.dtype() && v.dtype() != DType::float32) {
      detail::fail<dtype_error>(op, name,
                                std::string("dtype ") + dtype_name(q.dtype()) + " (the dtype of q) or float32",
                                dtype_name(v.dtype()));
    }
  }
  void shape(const TensorView& v, const char* name, const std::vector<std::int64_t>& expected,
             const std::string& what) const {
    if (v.shape() != expected) {
      detail::fail<shape_error>(op, name, "shape " + shape_to_string(expected) + " " + what, detail::describe_shape(v));
    }
  }
  void rank(const TensorView& v, const char* name, int ndim, const char* what) const {
    if (v.ndim() != ndim) detail::fail<shape_error>(op, name, what, detail::describe_shape(v));
  }
  /// A view the call writes: no repeated elements, no overlap with anything it reads or writes.
  void destination(const TensorView& v, const char* name, std::initializer_list<Named> others) const {
    if (!detail::has_unique_elements(v)) {
      detail::fail<std::invalid_argument>(op, name, "an array whose elements do not share memory",
                                          "strides " + shape_to_string(v.strides()));
    }
    for (const auto& [other, other_name] : others) {
      if (other && v.numel() > 0 && other->numel() > 0 && detail::overlaps(v, *other)) {
        detail::fail<std::invalid_argument>(op, name, std::string("memory disjoint from ") + other_name,
                                  std::string("an array overlapping ") + other_name);
      }
    }
  }
};

const TensorView* pointer(const std::optional<TensorView>& v) { return v ? &*v : nullptr; }

const detail::Backend& backend_of(const Checker& c, const TensorView& q) {
  const detail::Backend* backend = detail::backend_for(q.device().type);
  if (!backend) {
    detail::fail<device_error>(c.op, "q", "an array in CPU memory (this build of sketchcore has no CUDA backend)",
                               device_name(q.device()));
  }
  if (!backend->supports(q.dtype())) {
    detail::fail<dtype_error>(c.op, "q", "a dtype this device computes", dtype_name(q.dtype()));
  }
  return *backend;
}

/// Checks the operands shared by the forward and the backward and returns the problem.
detail::PerformerProblem check_problem(const Checker& c, const TensorView& q, const TensorView& k,
                                       const TensorView& v, const TensorView& features, const TensorView& out,
                                       const PerformerOptions& options, const std::optional<TensorView>& key_weights,
                                       const std::optional<TensorView>& value_weights) {
  if (options.kernel != PerformerKernel::softmax && options.kernel != PerformerKernel::relu) {
    detail::fail<std::invalid_argument>(c.op, "options.kernel", "softmax or relu",
                                        std::to_string(static_cast<int>(options.kernel)));
  }
  c.rank(q, "q", 4, "a 4-D array (B, H, L, d)");
  c.rank(k, "k", 4, "a 4-D array (B, H, S, d)");
  c.rank(v, "v", 4, "a 4-D array (B, H, S, e)");
  c.rank(features, "features", 2, "a 2-D array (m, d)");
  for (const auto& [t, name] : {Named{&k, "k"}, {&v, "v"}, {&features, "features"}, {&out, "out"},
                                {pointer(key_weights), "key_weights"}, {pointer(value_weights), "value_weights"}}) {
    if (t) c.same_device(q, *t, name);
  }
  c.same_dtype(q, k, "k");
  c.same_dtype(q, v, "v");
  c.same_dtype(q, out, "out");
  c.weight_dtype(q, features, "features");
  if (key_weights) c.weight_dtype(q, *key_weights, "key_weights");
  if (value_weights) c.weight_dtype(q, *value_weights, "value_weights");
  const detail::Backend& backend = backend_of(c, q);
  (void)backend;
  const std::int64_t B = q.size(0), H = q.size(1), L = q.size(2), d = q.size(3);
  const std::int64_t S = k.size(2), e = v.size(3), m = features.size(0);
  if (d < 1) detail::fail<shape_error>(c.op, "q", "a head dimension d ≥ 1", detail::describe_shape(q));
  if (m < 1) {
    detail::fail<shape_error>(c.op, "features", "at least one feature (m ≥ 1)", detail::describe_shape(features));
  }
  const auto dims = [](std::initializer_list<std::int64_t> list) { return std::vector<std::int64_t>(list); };
  c.shape(k, "k", dims({B, H, S, d}), "(B, H of q, S, d = q.shape[3])");
  c.shape(v, "v", dims({B, H, S, e}), "(B, H of q, S of k, e)");
  c.shape(features, "features", dims({m, d}), "(m, d = q.shape[3])");
  c.shape(out, "out", dims({B, H, L, e}), "(B, H, L of q, e of v)");
  if (key_weights) c.shape(*key_weights, "key_weights", dims({B, S}), "(B, S) of k");
  if (value_weights) c.shape(*value_weights, "value_weights", dims({B, H, S}), "(B, H, S) of k");
  if (options.causal && S != L) {
    detail::fail<shape_error>(c.op, "k", "as many keys as queries (L = " + std::to_string(L) + ") for causal attention",
                              detail::describe_shape(k));
  }
  // Every size the backends derive (the arrays, one head's rows, states) must fit a signed
  // 64-bit byte count.
  for (const auto& [t, name] : {Named{&q, "q"}, {&k, "k"}, {&v, "v"}, {&features, "features"}, {&out, "out"},
                                {pointer(key_weights), "key_weights"}, {pointer(value_weights), "value_weights"}}) {
    if (t) detail::check_addressable(c.op, name, *t);
  }
  detail::checked_elements(c.op, "features", m, e + 1, DType::float64, "the state of a head");
  return detail::PerformerProblem{q, k, v, features, out, pointer(key_weights), pointer(value_weights), options,
                                  B, H, L, S, d, e, m};
}

}  // namespace

const char* performer_kernel_name(PerformerKernel kernel) noexcept {
  return kernel == PerformerKernel::relu ? "relu" : "softmax";
}

void performer_attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& features,
                         const TensorView& out, const PerformerOptions& options,
                         const std::optional<TensorView>& key_weights, const std::optional<TensorView>& value_weights) {
  const Checker c{"performer_attention"};
  const detail::PerformerProblem p = check_problem(c, q, k, v, features, out, options, key_weights, value_weights);
  c.destination(out, "out", {{&q, "q"}, {&k, "k"}, {&v, "v"}, {&features, "features"},
                             {pointer(key_weights), "key_weights"}, {pointer(value_weights), "value_weights"}});
  backend_of(c, q).performer_attention(p);
}

void performer_attention_backward(const TensorView& grad_out, const TensorView& q, const TensorView& k,
                                  const TensorView& v, const TensorView& features, const TensorView& out,
                                  const PerformerOptions& options, const std::optional<TensorView>& key_weights,
                                  const std::optional<TensorView>& value_weights, const PerformerGradients& grads) {
  const Checker c{"performer_attention_backward"};
  const detail::PerformerProblem p = check_problem(c, q, k, v, features, out, options, key_weights, value_weights);
  c.same_device(q, grad_out, "grad_out");
  c.same_dtype(q, grad_out, "grad_out");
  c.shape(grad_out, "grad_out", out.shape(), "(the shape of out)");
  detail::check_addressable(c.op, "grad_out", grad_out);
  const std::initializer_list<Named> read = {
      {&q, "q"}, {&k, "k"}, {&v, "v"}, {&features, "features"}, {&out, "out"}, {&grad_out, "grad_out"},
      {pointer(key_weights), "key_weights"}, {pointer(value_weights), "value_weights"}};
  const TensorView* written[] = {pointer(grads.q), pointer(grads.k), pointer(grads.v)};
  const TensorView* inputs[] = {&q, &k, &v};
  const char* names[] = {"grad q", "grad k", "grad v"};
  const char* shapes[] = {"(the shape of q)", "(the shape of k)", "(the shape of v)"};
  for (int i = 0; i < 3; ++i) {
    if (!written[i]) continue;
    c.same_device(q, *written[i], names[i]);
    c.same_dtype(q, *written[i], names[i]);
    c.shape(*written[i], names[i], inputs[i]->shape(), shapes[i]);
    c.destination(*written[i], names[i], read);
    for (int j = 0; j < i; ++j) {
      const bool both = written[j] && written[i]->numel() > 0 && written[j]->numel() > 0;
      if (both && detail::overlaps(*written[i], *written[j])) {
        detail::fail<std::invalid_argument>(c.op, names[i], std::string("memory disjoint from ") + names[j],
                                  std::string("an array overlapping ") + names[j]);
      }
    }
  }
  if (!grads.q && !grads.k && !grads.v) return;
  backend_of(c, q).performer_attention_backward(p, grad_out, grads);
}

}  // namespace sketchcore
