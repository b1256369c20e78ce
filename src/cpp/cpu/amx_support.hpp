// Whether this process may run Intel AMX tile instructions: the CPU reports the tile
// architecture and Linux has granted the process its tile state (ARCH_REQ_XCOMP_PERM). Shared
// by the AMX kernels (cpu/gemm_bf16_amx.cpp, cpu/int8_kernels_amx.cpp), so that the permission
// is requested once.
#pragma once

#include <cstdint>

namespace sketchcore::detail {

/// The 64-byte operand of LDTILECFG (palette 1): per tile its bytes per row and rows. GCC 12's
/// _tile_loadconfig declares that it reads only the first bytes of it: put a compiler barrier
/// between filling it and loading it.
struct alignas(64) AmxTileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};
static_assert(sizeof(AmxTileConfig) == 64);

/// True when the CPU has AMX-TILE (CPUID leaf 7, EDX bit 24) and the operating system granted
/// this process the tile state; requested once per process (Linux: arch_prctl
/// ARCH_REQ_XCOMP_PERM for XTILEDATA; other systems: false). Without the grant the first tile
/// instruction faults.
bool amx_tiles_permitted() noexcept;

/// True when amx_tiles_permitted() and the CPU has AMX-BF16 (CPUID leaf 7, EDX bit 22:
/// TDPBF16PS), AVX512F, AVX512BW and AVX512_BF16 (which the kernels' edges use).
bool amx_bf16_supported() noexcept;

}  // namespace sketchcore::detail
