// The small dense products of the CPU Performer kernels (cpu/performer_*.cpp): blocks of a head
// (64-256 rows) times the random features, the state or another block. Own register-tiled
// kernels instead of BLAS, because they run inside parallel_for on every worker at once: a BLAS
// call there would either start its own threads (oversubscribing the cores) or depend on which
// BLAS the calling thread's framework set (results that differ with the thread a block lands on).
// These give the same bits whatever the thread, and can skip the masked half of causal blocks.
//
// Layout: B is packed once into panels of NR columns (K × NR each, zero-padded), A is packed MR
// rows at a time; a tile of MR × NR results lives in registers (GCC vector extensions, compiled
// for AVX-512, AVX2 + FMA or baseline x86-64 and chosen once per process).
#pragma once

#include <cstdint>

#include "detail/scratch.hpp"

namespace sketchcore::detail::pgemm {

/// The instruction sets the kernels are compiled for, in order of preference.
enum class Isa : std::uint8_t { portable, avx2, avx512 };

/// The best set this CPU runs (read once).
Isa best_isa() noexcept;

/// A read-only matrix in row-major terms: element (i, p) at data[i·ld + p], or at
/// data[p·ld + i] when `transposed`.
template <class T>
struct Operand {
  const T* data;
  std::int64_t ld;
  bool transposed = false;
};

/// Which results a product needs, for the masked blocks of causal attention (rows i, columns j,
/// inner index p of the m × k by k × n product):
///   all: everything;
///   lower_tiles: only results with j ≤ i are read (tiles wholly above the diagonal are skipped
///     and left unwritten; the caller masks the rest);
///   k_upto_row: A is lower triangular (A(i, p) = 0 for p > i): the sum stops at the row;
///   k_from_row: A is upper triangular (A(i, p) = 0 for p < i): the sum starts at the row.
enum class Band : std::uint8_t { all, lower_tiles, k_upto_row, k_from_row };

/// B (k × n) packed into NR-column panels for `isa`, reusable by many products.
template <class T>
class PackedB {
 public:
  PackedB() = default;
  explicit PackedB(Isa isa) : isa_(isa) {}
  /// Packs B (k × n); the storage grows as needed and is reused.
  void pack(std::int64_t k, std::int64_t n, Operand<T> b);
  std::int64_t k() const noexcept { return k_; }
  std::int64_t n() const noexcept { return n_; }
  Isa isa() const noexcept { return isa_; }
  const T* data() const noexcept { return storage_.data(); }

 private:
  Isa isa_ = Isa::portable;
  std::int64_t k_ = 0, n_ = 0, capacity_ = 0;
  Scratch<T> storage_;
};

/// Room for packing A (MR rows at a time) and a B that is not packed ahead.
template <class T>
struct Workspace {
  explicit Workspace(Isa isa) : b(isa) {}
  PackedB<T> b;
  Scratch<T> a;
  std::int64_t a_capacity = 0;
};

/// C (m × n, leading dimension ldc) = A (m × k) · B, or C += A · B when `accumulate`; n and k
/// are b's. Results the band does not need may be left unwritten (lower_tiles).
template <class T>
void multiply(std::int64_t m, Operand<T> a, const PackedB<T>& b, T* c, std::int64_t ldc, bool accumulate,
              Workspace<T>& ws, Band band = Band::all);

/// As above, B (k × n) packed into the workspace first.
template <class T>
void multiply(std::int64_t m, std::int64_t n, std::int64_t k, Operand<T> a, Operand<T> b, T* c, std::int64_t ldc,
              bool accumulate, Workspace<T>& ws, Band band = Band::all);

}  // namespace sketchcore::detail::pgemm
