// The registry of gated (device-unverified) paths: the environment's setting, read once, and
// the program's overrides, one atomic per path (queried on every CUDA call: no lock).
#include "sketchcore/gated_paths.hpp"

#include <array>
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "detail/check.hpp"
#include "sketchcore/errors.hpp"

namespace sketchcore {

namespace {

struct Entry {
  GatedPath path;
  const char* name;
  const char* description;
};

constexpr std::array<Entry, 6> kPaths{{
    {GatedPath::cuda_padded_inner_width, "cuda_padded_inner_width",
     "CUDA sketched GEMMs with a rank whose rows are not a multiple of 16 bytes run each term padded to "
     "the next such width (cuBLASLt's fast kernels); closed: the unpadded cuBLASLt call"},
    {GatedPath::cuda_performer_kernels, "cuda_performer_kernels",
     "the fused Performer attention kernels on CUDA devices; closed: sketchcore.torch runs its "
     "composite torch formula, other CUDA arrays are refused"},
    {GatedPath::jax_cuda_handlers, "jax_cuda_handlers",
     "sketchcore.jax's XLA FFI handlers on CUDA devices; closed: JAX calls on a GPU are refused"},
    {GatedPath::cuda_inner_activation, "cuda_inner_activation",
     "sketched_matmul's inner (bottleneck) activation on CUDA devices; closed: sketchcore.torch runs its "
     "composite torch formula, other CUDA arrays are refused"},
    {GatedPath::cuda_int8_factors, "cuda_int8_factors",
     "int8_sketched_matmul and int8_matmul on CUDA devices (cuBLASLt int8 GEMMs, own quantization and epilogue "
     "kernels); closed: int8_sketched_matmul and int8_matmul on a CUDA array are refused"},
    {GatedPath::cuda_fp8_factors, "cuda_fp8_factors",
     "fp8_sketched_matmul on CUDA devices of compute capability 8.9+ (cuBLASLt e4m3 GEMMs, own quantization "
     "and epilogue kernels); closed: fp8_sketched_matmul is refused"},
}};

std::size_t index_of(GatedPath path) noexcept { return static_cast<std::size_t>(path); }

std::string accepted_names() {
  std::string names;
  for (const Entry& e : kPaths) names += (names.empty() ? "" : ", ") + std::string(e.name);
  return names;
}

/// The environment's setting: a bit per path, or the reason the variable could not be read.
struct EnvironmentSetting {
  std::uint32_t open = 0;
  std::string error;
};

std::string trimmed(const std::string& s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

EnvironmentSetting parse_environment(const char* raw) {
  EnvironmentSetting setting;
  const std::string value = trimmed(raw ? raw : "");
  if (value.empty() || value == "0" || value == "none") return setting;
  if (value == "1" || value == "all") {
    setting.open = (1u << kPaths.size()) - 1;
    return setting;
  }
  std::size_t start = 0;
  while (start <= value.size()) {
    const auto comma = value.find(',', start);
    const std::string name = trimmed(value.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    bool known = false;
    for (const Entry& e : kPaths) {
      if (name == e.name) {
        setting.open |= 1u << index_of(e.path);
        known = true;
      }
    }
    if (!known) {
      setting.error = detail::argument_message(
          unverified_paths_variable, "environment variable",
          "0, 1, all, none or a comma-separated list of " + accepted_names(), "'" + value + "'");
      return setting;
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return setting;
}

const EnvironmentSetting& environment() {
  static const EnvironmentSetting setting = parse_environment(std::getenv(unverified_paths_variable));
  return setting;
}

// 0: no override (the environment decides), 1: closed, 2: open. Zero is "none" so that every entry
// starts without an override whatever the number of paths (value-initialised).
std::array<std::atomic<int>, kPaths.size()>& overrides() noexcept {
  static std::array<std::atomic<int>, kPaths.size()> state{};
  return state;
}

}  // namespace

std::vector<GatedPathInfo> gated_paths() {
  std::vector<GatedPathInfo> all;
  for (const Entry& e : kPaths) {
    const std::optional<bool> forced = gated_path_override(e.path);
    all.push_back({e.path, e.name, e.description, gated_path_enabled(e.path), forced.has_value()});
  }
  return all;
}

bool gated_path_enabled(GatedPath path) {
  if (const std::optional<bool> forced = gated_path_override(path)) return *forced;
  const EnvironmentSetting& env = environment();
  if (!env.error.empty()) throw std::invalid_argument(env.error);
  return (env.open >> index_of(path)) & 1u;
}

GatedPath gated_path_from_name(std::string_view name) {
  for (const Entry& e : kPaths) {
    if (name == e.name) return e.path;
  }
  detail::fail<std::invalid_argument>("gated path", "name", "one of " + accepted_names(),
                                      "'" + std::string(name) + "'");
}

const char* gated_path_name(GatedPath path) noexcept {
  const std::size_t i = index_of(path);
  return i < kPaths.size() ? kPaths[i].name : "unknown";
}

void set_gated_path_enabled(GatedPath path, std::optional<bool> enabled) noexcept {
  const std::size_t i = index_of(path);
  if (i < kPaths.size()) overrides()[i].store(enabled ? (*enabled ? 2 : 1) : 0);
}

std::optional<bool> gated_path_override(GatedPath path) noexcept {
  const std::size_t i = index_of(path);
  if (i >= kPaths.size()) return std::nullopt;
  const int state = overrides()[i].load();
  if (state == 0) return std::nullopt;
  return state == 2;
}

void require_gated_path(GatedPath path, std::string_view operation) {
  if (gated_path_enabled(path)) return;
  const Entry& e = kPaths[index_of(path)];
  throw unverified_path_error(std::string(operation) + ": this runs the gated path '" + e.name + "' (" +
                              e.description + "), which has not yet passed its tests on a GPU; set " +
                              unverified_paths_variable + "=1 (or =" + e.name +
                              ") in the environment, or open it in the program (C++ set_gated_path_enabled, "
                              "Python sketchcore.set_gated_path), to run it anyway");
}

std::int64_t cuda_inner_width(std::int64_t rank, DType dtype) {
  if (rank < 0) {
    detail::fail<std::invalid_argument>("cuda_inner_width", "rank", "an integer ≥ 0", std::to_string(rank));
  }
  const auto size = static_cast<std::int64_t>(dtype_size(dtype));
  if (size >= 8 || size <= 0 || 16 % size != 0 || !gated_path_enabled(GatedPath::cuda_padded_inner_width)) {
    return rank;
  }
  const std::int64_t per_16_bytes = 16 / size;
  return (rank + per_16_bytes - 1) / per_16_bytes * per_16_bytes;
}

ScopedGatedPath::ScopedGatedPath(GatedPath path, bool enabled) noexcept
    : path_(path), previous_(gated_path_override(path)) {
  set_gated_path_enabled(path, enabled);
}

ScopedGatedPath::~ScopedGatedPath() { set_gated_path_enabled(path_, previous_); }

}  // namespace sketchcore
