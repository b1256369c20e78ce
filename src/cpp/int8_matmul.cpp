// The choice of the CPU's int8 kernel family (cpu/int8_gemm.hpp): SKETCHCORE_INT8_ISA, the public
// ISA functions of include/sketchcore/int8_matmul.hpp, and the GEMM benchmark hook. The int8
// products themselves run through the quantized core (quantized_matmul.cpp).
#include "sketchcore/int8_matmul.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "cpu/int8_gemm.hpp"
#include "detail/check.hpp"
#include "sketchcore/errors.hpp"

namespace sketchcore {

namespace detail {

/// SKETCHCORE_INT8_ISA, when set, must name a family: a misspelt cap would silently run
/// another kernel than the one asked for. Read once; refused at every int8 call.
void check_int8_isa_environment(const char* op) {
  static const std::string bad = [] {
    const char* env = std::getenv("SKETCHCORE_INT8_ISA");
    if (env == nullptr) return std::string();
    for (auto isa : {Int8Isa::portable, Int8Isa::avx2, Int8Isa::avx_vnni,
                     Int8Isa::avx512_vnni, Int8Isa::amx}) {
      if (std::string_view(env) == int8_isa_name(isa)) return std::string();
    }
    return "'" + std::string(env) + "'";
  }();
  if (!bad.empty()) {
    fail<std::invalid_argument>(op, "SKETCHCORE_INT8_ISA (environment variable)",
                                        "one of 'amx', 'avx512_vnni', 'avx_vnni', 'avx2', 'portable' or unset", bad);
  }
}

}  // namespace detail

namespace {

detail::Int8Isa parse_isa(const std::string& name) {
  for (auto isa : {detail::Int8Isa::portable, detail::Int8Isa::avx2, detail::Int8Isa::avx_vnni,
                   detail::Int8Isa::avx512_vnni, detail::Int8Isa::amx}) {
    if (name == detail::int8_isa_name(isa)) return isa;
  }
  detail::fail<std::invalid_argument>("set_int8_gemm_isa", "name", "one of 'amx', 'avx512_vnni', 'avx_vnni', 'avx2', 'portable'",
                                      "'" + name + "'");
}

}  // namespace

std::string int8_gemm_isa() {
  detail::check_int8_isa_environment("int8_gemm_isa");
  return detail::int8_isa_name(detail::active_int8_isa());
}

void set_int8_gemm_isa(const std::string& name) {
  const detail::Int8Isa isa = parse_isa(name);
  if (!detail::int8_isa_supported(isa)) {
    detail::fail<std::invalid_argument>("set_int8_gemm_isa", "name", "a family this CPU runs",
                                        "'" + name + "' (not supported here)");
  }
  detail::set_active_int8_isa(isa);
}

bool int8_gemm_isa_supported(const std::string& name) { return detail::int8_isa_supported(parse_isa(name)); }

double int8_peak_macs_per_second(const std::string& name, std::int64_t iterations) {
  const detail::Int8Isa isa = parse_isa(name);
  if (iterations < 1) {
    detail::fail<std::invalid_argument>("int8_peak_macs_per_second", "iterations", "a positive count",
                                        std::to_string(iterations));
  }
  if (!detail::int8_isa_supported(isa)) {
    detail::fail<std::invalid_argument>("int8_peak_macs_per_second", "name", "a family this CPU runs",
                                        "'" + name + "' (not supported here)");
  }
#if SKETCHCORE_INT8_X86
  if (isa == detail::Int8Isa::amx) return detail::int8_peak_amx(iterations);
  if (isa == detail::Int8Isa::avx512_vnni) return detail::int8_peak_avx512_vnni(iterations);
  if (isa == detail::Int8Isa::avx_vnni) return detail::int8_peak_avx_vnni(iterations);
#endif
  (void)iterations;
  return 0.0;
}

}  // namespace sketchcore

namespace sketchcore {

std::vector<double> int8_gemm_seconds_for_bench(const float* x, std::int64_t rows, const Int8Factor& factor,
                                                float* out, std::int64_t repeats) {
  constexpr const char* kBench = "int8_gemm_seconds_for_bench";
  if (!factor.valid()) detail::fail<std::invalid_argument>(kBench, "factor", "a factor holding values", "a moved-from Int8Factor");
  if (rows < 0) detail::fail<std::invalid_argument>(kBench, "rows", "rows >= 0", std::to_string(rows));
  if (repeats < 1) detail::fail<std::invalid_argument>(kBench, "repeats", "repeats >= 1", std::to_string(repeats));
  const detail::Int8Isa isa = detail::active_int8_isa();
  const Int8Factor::Packed& b = factor.packed();
  const std::int64_t stride = detail::int8_rows_stride(b.groups);
  std::vector<std::uint8_t> xq(static_cast<std::size_t>(std::max<std::int64_t>(rows * stride, 1)));
  std::vector<float> scale(static_cast<std::size_t>(std::max<std::int64_t>(rows, 1)));
  detail::quantize_rows_int8(x, nullptr, b.rows, 1, rows, b.rows, isa, xq.data(), stride, scale.data());
  const detail::Int8Rows a{xq.data(), stride, scale.data(), detail::int8_isa_offsets_activations(isa)};
  std::vector<double> seconds;
  for (std::int64_t r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    detail::int8_gemm(a, rows, b, out, b.cols, nullptr, Activation::none, isa);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return seconds;
}

}  // namespace sketchcore
