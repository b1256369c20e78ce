// The C ABI's sketching operators (include/sketchcore/sketchcore.h): a SketchOperator behind an
// opaque handle, materialised (sketch_to_dense) or applied without being formed (sketch_apply).
#include <string>

#include "c_api/c_api_common.hpp"
#include "detail/check.hpp"
#include "sketchcore/sketch.hpp"

/// The opaque sketching operator: the validated C++ SketchOperator.
struct sketchcore_sketch {
  sketchcore::SketchOperator op;
};

using sketchcore::c_api::guarded;
using sketchcore::c_api::require;
using sketchcore::c_api::to_view;

namespace {

const sketchcore::SketchOperator& op_of(const sketchcore_sketch* s, const char* op) {
  require(s, op, "sketch");
  return s->op;
}

}  // namespace

extern "C" {

sketchcore_status sketchcore_sketch_create(int32_t kind, int64_t rows, int64_t cols, uint64_t seed, int64_t nnz,
                                           int32_t scaled, sketchcore_sketch** sketch) {
  if (sketch != nullptr) *sketch = nullptr;
  return guarded([&] {
    const char* op = "sketchcore_sketch_create";
    require(sketch, op, "sketch");
    if (kind < SKETCHCORE_SKETCH_GAUSSIAN || kind > SKETCHCORE_SKETCH_SRHT) {
      sketchcore::detail::fail<std::invalid_argument>(op, "kind", "a sketchcore_sketch_kind code 0 to 5",
                                                      std::to_string(kind));
    }
    sketchcore::SketchOperator s;
    s.kind = static_cast<sketchcore::SketchKind>(kind);
    s.rows = rows;
    s.cols = cols;
    s.seed = seed;
    s.nnz = nnz;
    s.scaled = scaled != 0;
    sketchcore::validate_sketch(s);
    *sketch = new sketchcore_sketch{s};
  });
}

sketchcore_status sketchcore_sketch_destroy(sketchcore_sketch* sketch) {
  return guarded([&] { delete sketch; });
}

sketchcore_status sketchcore_sketch_to_dense(const sketchcore_sketch* sketch, const sketchcore_tensor* out,
                                             int64_t row0, int64_t col0) {
  return guarded([&] {
    const char* op = "sketchcore_sketch_to_dense";
    sketchcore::sketch_to_dense(op_of(sketch, op), to_view(out, op, "out"), row0, col0);
  });
}

sketchcore_status sketchcore_sketch_apply_output_shape(const sketchcore_sketch* sketch, const sketchcore_tensor* a,
                                                       int32_t right, int32_t transpose, int64_t* shape,
                                                       int32_t capacity, int32_t* ndim) {
  return guarded([&] {
    const char* op = "sketchcore_sketch_apply_output_shape";
    const auto result = sketchcore::sketch_apply_output_shape(
        op_of(sketch, op), to_view(a, op, "a"), right ? sketchcore::Side::right : sketchcore::Side::left,
        transpose != 0);
    sketchcore::c_api::write_shape(result, shape, capacity, ndim, op);
  });
}

sketchcore_status sketchcore_sketch_apply(const sketchcore_sketch* sketch, const sketchcore_tensor* a,
                                          const sketchcore_tensor* out, int32_t right, int32_t transpose) {
  return guarded([&] {
    const char* op = "sketchcore_sketch_apply";
    sketchcore::sketch_apply(op_of(sketch, op), to_view(a, op, "a"), to_view(out, op, "out"),
                             right ? sketchcore::Side::right : sketchcore::Side::left, transpose != 0);
  });
}

}  // extern "C"
