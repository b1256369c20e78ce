// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11),
// usable from host code and, compiled by nvcc, from device code: the CPU and CUDA
// backends draw identical bits from identical (counter, key).
//
// Counter mapping (each user documents its own: dropout in sketchcore/epilogue.hpp, the
// sketch operators in sketchcore/sketch.hpp):
//   key     = (seed low 32 bits, seed high 32 bits)
//   counter = (c0, c1, c2, stream): `stream` names the operator that draws (kDropoutStream,
//             one stream per sketch kind: sketch/entries.hpp), (c0, c1, c2) locate the draw.
// Every output is a pure function of (seed, stream, c0, c1, c2): any sub-block of a
// random matrix can be generated on its own, by any thread, in any order.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SKETCHCORE_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define SKETCHCORE_HOST_DEVICE inline
#endif

namespace sketchcore::detail {

struct Philox4x32 {
  std::uint32_t v[4];
};

/// Stream id of dropout masks: ASCII "DROP".
constexpr std::uint32_t kDropoutStream = 0x44524F50u;

SKETCHCORE_HOST_DEVICE void philox_mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  const std::uint64_t product = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(product >> 32);
  lo = static_cast<std::uint32_t>(product);
}

/// The 10-round Philox4x32 bijection of `counter` under `key`.
SKETCHCORE_HOST_DEVICE Philox4x32 philox4x32_10(Philox4x32 counter, std::uint32_t key0, std::uint32_t key1) {
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  std::uint32_t* c = counter.v;
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kMul0, c[0], hi0, lo0);
    philox_mulhilo(kMul1, c[2], hi1, lo1);
    const std::uint32_t n0 = hi1 ^ c[1] ^ key0, n2 = hi0 ^ c[3] ^ key1;
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return counter;
}

/// Dropout keep decision for output element (row, col): the mask of a whole output is
/// one Philox block per 4 consecutive columns of a row,
///   counter = (col / 4, row low 32, row high 32, kDropoutStream), lane = col % 4,
/// and the element is dropped when that 32-bit word < `drop_threshold` (= p · 2^32).
SKETCHCORE_HOST_DEVICE Philox4x32 dropout_block(std::uint64_t seed, std::uint64_t row, std::uint64_t col_group) {
  return philox4x32_10({{static_cast<std::uint32_t>(col_group), static_cast<std::uint32_t>(row),
                         static_cast<std::uint32_t>(row >> 32), kDropoutStream}},
                       static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

}  // namespace sketchcore::detail
