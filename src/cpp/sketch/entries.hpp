// Entry generators of the sketching operators (the mapping documented in
// include/sketchcore/sketch.hpp), SKETCHCORE_HOST_DEVICE: the CPU backend and the CUDA
// kernels (src/cuda/sketch_kernels.cu) generate the same bits from them.
#pragma once

#include <cmath>
#include <cstdint>

#include "detail/philox.hpp"
#include "detail/portable_math.hpp"
#include "sketchcore/sketch.hpp"

namespace sketchcore::detail {

constexpr std::uint32_t kGaussianStream = 0x47415553u;    // "GAUS"
constexpr std::uint32_t kRademacherStream = 0x52414445u;  // "RADE"
constexpr std::uint32_t kUniformStream = 0x554E4946u;     // "UNIF"
constexpr std::uint32_t kSparseStream = 0x53504152u;      // "SPAR"
constexpr std::uint32_t kSrhtSignStream = 0x53524853u;    // "SRHS"
constexpr std::uint32_t kSrhtRowStream = 0x53524852u;     // "SRHR"

SKETCHCORE_HOST_DEVICE Philox4x32 sketch_block(std::uint64_t seed, std::uint32_t c0, std::uint32_t c1,
                                               std::uint32_t stream) {
  return philox4x32_10({{c0, c1, 0u, stream}}, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

/// (word + ½) / 2^32: a uniform number in (0, 1), never 0 or 1.
SKETCHCORE_HOST_DEVICE double open_unit(std::uint32_t word) {
  return mul_rn(add_rn(static_cast<double>(word), 0.5), 0x1p-32);
}

/// Box–Muller on two words: returns the radius √(−2 log u₁) and sets sin/cos of the angle
/// 2π·u₂, with the portable functions (same bits on every CPU and device).
SKETCHCORE_HOST_DEVICE double box_muller(std::uint32_t radius_word, std::uint32_t angle_word, double& sine,
                                         double& cosine) {
  portable_sincos_turns(open_unit(angle_word), sine, cosine);
  return sqrt_rn(mul_rn(-2.0, portable_log(open_unit(radius_word))));
}

/// Stream id of a dense kind.
SKETCHCORE_HOST_DEVICE std::uint32_t dense_stream(SketchKind kind) {
  return kind == SketchKind::gaussian ? kGaussianStream
                                      : (kind == SketchKind::rademacher ? kRademacherStream : kUniformStream);
}

/// The Philox block holding rows 4·(i/4) … 4·(i/4)+3 of column j of a dense kind.
SKETCHCORE_HOST_DEVICE Philox4x32 dense_block(SketchKind kind, std::uint64_t seed, std::int64_t i, std::int64_t j) {
  return sketch_block(seed, static_cast<std::uint32_t>(i >> 2), static_cast<std::uint32_t>(j), dense_stream(kind));
}

/// The four unscaled entries of a block (rows 4·(i/4) … +3 in lanes 0–3): N(0, 1), ±1 or
/// U(−√3, √3). Gaussian: Box–Muller on words (0, 1) for lanes 0–1 and (2, 3) for lanes
/// 2–3, cosine in the even lane, sine in the odd one.
SKETCHCORE_HOST_DEVICE void dense_block_values(SketchKind kind, const Philox4x32& w, double values[4]) {
  if (kind == SketchKind::gaussian) {
    for (int lane = 0; lane < 4; lane += 2) {
      double sine, cosine;
      const double radius = box_muller(w.v[lane], w.v[lane + 1], sine, cosine);
      values[lane] = mul_rn(radius, cosine);
      values[lane + 1] = mul_rn(radius, sine);
    }
    return;
  }
  for (int lane = 0; lane < 4; ++lane) {
    values[lane] = kind == SketchKind::rademacher
                       ? ((w.v[lane] >> 31) ? -1.0 : 1.0)
                       : mul_rn(1.7320508075688772, add_rn(mul_rn(2.0, open_unit(w.v[lane])), -1.0));  // uniform
  }
}

/// Sequential 32-bit words of one Philox stream: word t is lane t%4 of block t/4.
class WordStream {
 public:
  SKETCHCORE_HOST_DEVICE WordStream(std::uint64_t seed, std::uint32_t c1, std::uint32_t stream)
      : seed_(seed), c1_(c1), stream_(stream) {}
  SKETCHCORE_HOST_DEVICE std::uint32_t next() {
    if ((t_ & 3) == 0) block_ = sketch_block(seed_, static_cast<std::uint32_t>(t_ >> 2), c1_, stream_);
    return block_.v[t_++ & 3];
  }
  /// Unbiased integer in [0, range) (Lemire's multiply-and-reject), 1 ≤ range ≤ 2^32.
  SKETCHCORE_HOST_DEVICE std::uint32_t below(std::uint64_t range) {
    std::uint64_t product = static_cast<std::uint64_t>(next()) * range;
    auto low = static_cast<std::uint32_t>(product);
    if (low < range) {
      const auto threshold = static_cast<std::uint32_t>((std::uint64_t{1} << 32) % range);
      while (low < threshold) {
        product = static_cast<std::uint64_t>(next()) * range;
        low = static_cast<std::uint32_t>(product);
      }
    }
    return static_cast<std::uint32_t>(product >> 32);
  }

 private:
  std::uint64_t seed_;
  std::uint32_t c1_, stream_;
  std::uint64_t t_ = 0;
  Philox4x32 block_{};
};

}  // namespace sketchcore::detail
