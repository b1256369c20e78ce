/// @file gated_paths.hpp
/// @brief Code paths that have not yet passed their tests on a device, and the switch that
/// opts into them.
///
/// A CUDA path is verified where it ran: until a device run has passed its tests, it stays
/// behind an explicit opt-in and the last verified path is the default (DESIGN.md, "Verified
/// or gated"). The switch is the environment variable `SKETCHCORE_CUDA_UNVERIFIED`, read once,
/// on the first query: `1` (or `all`) opens every gated path, `0` or unset none, and a
/// comma-separated list of names (`cuda_padded_inner_width,cuda_performer_kernels`) those
/// paths only. A program (or a test) can override any path afterwards with
/// set_gated_path_enabled() or a ScopedGatedPath; overrides are process-wide.
///
/// When a path passes on a device, its entry is removed in the same commit as the committed
/// GPU test log that shows it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sketchcore/export.hpp"
#include "sketchcore/tensor.hpp"

namespace sketchcore {

/// The environment variable that opens gated paths (see the file's description).
inline constexpr const char* unverified_paths_variable = "SKETCHCORE_CUDA_UNVERIFIED";

/// A code path that has not yet passed its tests on a device.
enum class GatedPath : std::uint8_t {
  /// CUDA sketched GEMMs whose per-term rank is not a multiple of 16 bytes (rank 375 in
  /// bfloat16) run each term padded to the next such width, so that cuBLASLt keeps its fast
  /// kernels. Closed: the unpadded cuBLASLt call (correct, on its slower legacy kernels).
  cuda_padded_inner_width,
  /// The fused Performer attention kernels on CUDA devices. Closed: performer_attention on a
  /// CUDA array throws unverified_path_error (sketchcore.torch runs its composite torch
  /// formula, made of operations that passed on a GPU, instead).
  cuda_performer_kernels,
  /// sketchcore.jax's XLA FFI handlers on CUDA devices. Closed: a JAX call on a GPU raises
  /// (as it did before the handlers existed).
  jax_cuda_handlers,
  /// sketched_matmul's inner (bottleneck) activation on CUDA devices (own kernels for σ(Z) and
  /// σ'(Z)). Closed: sketched_matmul with an inner activation on a CUDA array throws
  /// unverified_path_error; sketchcore.torch runs its composite torch formula (matmul, σ, matmul:
  /// operations that passed on a GPU) on CUDA tensors instead.
  cuda_inner_activation,
  /// int8_sketched_matmul and the full-rank int8_matmul on CUDA devices (cuBLASLt int8 GEMMs with
  /// int32 accumulation and own kernels for the per-row quantization, σ with requantization, and
  /// the dequantizing epilogue). Closed: either on a CUDA array throws unverified_path_error.
  cuda_int8_factors,
  /// fp8_sketched_matmul on CUDA devices of compute capability 8.9 or newer (cuBLASLt e4m3 GEMMs
  /// with float32 accumulation and own kernels for the per-row e4m3 quantization, σ with
  /// requantization, and the dequantizing epilogue). Closed: fp8_sketched_matmul is refused
  /// (unverified_path_error); there is no other fp8 path.
  cuda_fp8_factors,
};

/// What gated_paths() reports about one path.
struct GatedPathInfo {
  GatedPath path = GatedPath::cuda_padded_inner_width;  ///< the path
  std::string name;         ///< its name in `SKETCHCORE_CUDA_UNVERIFIED` and the Python API
  std::string description;  ///< what the path is and what runs while it is closed
  bool enabled = false;     ///< whether calls take it now
  bool overridden = false;  ///< whether a program's override (not the environment) decides it
};

/// Every gated path, in declaration order, with its current state.
/// @throws std::invalid_argument if `SKETCHCORE_CUDA_UNVERIFIED` holds something other than
///         0, 1, all, none, empty, or a comma-separated list of path names
SKETCHCORE_API std::vector<GatedPathInfo> gated_paths();

/// Whether calls take `path` now: the program's override if any, else the environment.
/// @throws std::invalid_argument as gated_paths()
SKETCHCORE_API bool gated_path_enabled(GatedPath path);

/// The path named `name` (as in GatedPathInfo::name).
/// @throws std::invalid_argument naming the accepted names if there is none
SKETCHCORE_API GatedPath gated_path_from_name(std::string_view name);

/// The name of `path` (as in GatedPathInfo::name).
SKETCHCORE_API const char* gated_path_name(GatedPath path) noexcept;

/// Overrides the environment for `path`: true opens it, false closes it, std::nullopt
/// returns it to the environment's setting. Process-wide; takes effect for calls that start
/// afterwards.
SKETCHCORE_API void set_gated_path_enabled(GatedPath path, std::optional<bool> enabled) noexcept;

/// The program's override of `path` (std::nullopt: the environment decides).
SKETCHCORE_API std::optional<bool> gated_path_override(GatedPath path) noexcept;

/// Throws unverified_path_error for `operation` unless `path` is enabled. The message names
/// the path, what it is, and how to open it.
/// @throws unverified_path_error if `path` is closed
/// @throws std::invalid_argument as gated_paths()
SKETCHCORE_API void require_gated_path(GatedPath path, std::string_view operation);

/// The per-term inner width the CUDA backend's GEMMs use for a sketched GEMM of rank `rank`
/// in `dtype`: `rank` itself, unless GatedPath::cuda_padded_inner_width is enabled and a row of
/// `rank` elements is not a multiple of 16 bytes (float64 never pads), then the next width
/// that is. A pure function of its arguments and the gate, so it can be checked without a GPU.
/// @throws std::invalid_argument if `rank` < 0, or as gated_paths()
SKETCHCORE_API std::int64_t cuda_inner_width(std::int64_t rank, DType dtype);

/// Opens or closes a gated path for the lifetime of the object, then restores the override
/// that was there before (process-wide, not per thread: meant for tests and short scopes).
class SKETCHCORE_API ScopedGatedPath {
 public:
  /// Sets `path` to `enabled` until destruction.
  ScopedGatedPath(GatedPath path, bool enabled) noexcept;
  /// Restores the override in effect before construction.
  ~ScopedGatedPath();
  ScopedGatedPath(const ScopedGatedPath&) = delete;             ///< not copyable
  ScopedGatedPath& operator=(const ScopedGatedPath&) = delete;  ///< not assignable

 private:
  GatedPath path_;
  std::optional<bool> previous_;
};

}  // namespace sketchcore
