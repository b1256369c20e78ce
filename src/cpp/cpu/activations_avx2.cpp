// The erf-GELU z·Φ(z), GELU-tanh z·σ(v), v = 2c·(z + a·z³), SiLU z·σ(z) and their derivatives in
// float32 on AVX2 with FMA (kAvx2ActivationKernels, cpu/activation_isa.hpp), for CPUs without AVX-512.
// As in cpu/activations_avx512.cpp, each is z·F(h) for z < 0 and z·(1 − F(h)) for z ≥ 0 with
// h = |z|, each derivative D(h) or 1 − D(h), and near zero F and D come from tables: here 8
// intervals (of width ½ for the GELUs, |z| < 3.75; 1 for SiLU, |z| < 7.5), one 8-lane register
// per coefficient read by one VPERMPS, a degree-7 polynomial (degree 6 leaves up to 4.4·2^-24 of
// fit error before the evaluation's roundings; degree 7 is as good as float32 coefficients allow). For unit-scale activations all but about one vector in
// 700 lies in that range; the others take the far path of cpu/activation_far_path.hpp, as on
// AVX-512 (the same bits there), with its table lookups in four permutes and its scaling by 2^n in
// two multiplications, the first exact. Tables by activation_tables_fit.py avx2, fit errors:
// kGeluNear 0.44, kGeluSlopeNear 0.52, kGeluTanhNear 0.76, kGeluTanhSlopeNear 0.42, kSiluNear 0.68, kSiluSlopeNear 0.20 (· 2^-24).

#include "cpu/activation_isa.hpp"

#if SKETCHCORE_ACTIVATIONS_X86
#include <cstring>

#include "cpu/x86_intrinsics.hpp"

#define SKETCHCORE_AVX2 __attribute__((target("avx2,fma")))
#define SKETCHCORE_FAR_PATH_TARGET SKETCHCORE_AVX2
#include "cpu/activation_far_path.hpp"
#endif

namespace sketchcore::detail {

#if SKETCHCORE_ACTIVATIONS_X86

namespace {

alignas(32) constexpr float kGeluNear[8][8] = {
    {0x1.000000p-1f, 0x1.3bf144p-2f, 0x1.44ed0cp-3f, 0x1.11a46ep-4f, 0x1.74bcf8p-6f, 0x1.96f4e6p-8f, 0x1.61de20p-10f, 0x1.e7dbcap-13f},
    {-0x1.988454p-2f, -0x1.6883d0p-2f, -0x1.ef8e5ap-3f, -0x1.094086p-3f, -0x1.ba4b44p-5f, -0x1.1f2f06p-6f, -0x1.227214p-8f, -0x1.c9897ep-11f},
    {0x1.cf5e98p-21f, 0x1.688296p-4f, 0x1.ef8db6p-4f, 0x1.8de046p-4f, 0x1.ba4b60p-5f, 0x1.66faa0p-6f, 0x1.b3aaf8p-8f, 0x1.905828p-10f},
    {0x1.104128p-4f, 0x1.688524p-5f, 0x1.80edc6p-20f, -0x1.ba11e0p-6f, -0x1.ba4b18p-6f, -0x1.f6913ep-7f, -0x1.834286p-8f, -0x1.acf066p-10f},
    {0x1.0f20fcp-12f, -0x1.49a420p-6f, -0x1.49f0acp-6f, -0x1.8c8bb8p-8f, 0x1.26b0d0p-8f, 0x1.850088p-8f, 0x1.b3bbecp-9f, 0x1.34a190p-10f},
    {-0x1.7952d0p-7f, -0x1.2ede10p-8f, 0x1.04cfaap-8f, 0x1.7dd63ap-8f, 0x1.26f4a4p-9f, -0x1.5ff126p-11f, -0x1.22a6bep-10f, -0x1.2f87e4p-11f},
    {0x1.291272p-8f, 0x1.484c52p-9f, 0x1.c491fep-10f, -0x1.c421c0p-11f, -0x1.5822c2p-10f, -0x1.17960cp-11f, 0x1.ac4b40p-14f, 0x1.764ffap-13f},
    {-0x1.0917b8p-8f, 0x1.932556p-11f, -0x1.e6d4e2p-13f, -0x1.d26974p-14f, 0x1.94c3e8p-14f, 0x1.461a48p-12f, 0x1.89feb8p-14f, -0x1.23d3b6p-16f},
};
alignas(32) constexpr float kGeluSlopeNear[8][8] = {
    {0x1.000000p-1f, 0x1.0f5eb8p-3f, -0x1.55429ap-4f, -0x1.050e92p-3f, -0x1.5d1c06p-4f, -0x1.341c2ap-5f, -0x1.876f5ap-7f, -0x1.71da90p-9f},
    {-0x1.988454p-1f, -0x1.3b7356p-1f, -0x1.ef8e58p-3f, 0x1.094088p-5f, 0x1.ba4b44p-4f, 0x1.3121f6p-4f, 0x1.fc47a4p-6f, 0x1.251c14p-7f},
    {0x1.da80f2p-20f, 0x1.51fb2ap-2f, 0x1.73aaaap-2f, 0x1.5c256ap-3f, 0x1.644f14p-21f, -0x1.93da2cp-5f, -0x1.104af8p-5f, -0x1.9cdb48p-7f},
    {0x1.104c2ep-2f, 0x1.15e580p-3f, -0x1.4a5f6cp-4f, -0x1.27a5fcp-3f, -0x1.26ddcap-4f, -0x1.0745dap-9f, 0x1.0a3d72p-6f, 0x1.459496p-7f},
    {0x1.1fde3ep-11f, -0x1.cbb9b4p-4f, -0x1.4a4db4p-4f, 0x1.bd82fcp-7f, 0x1.705684p-5f, 0x1.5dac4ap-6f, 0x1.e2a678p-21f, -0x1.15c8dap-8f},
    {-0x1.02bc74p-4f, -0x1.2ba730p-6f, 0x1.296496p-5f, 0x1.e0ed42p-6f, -0x1.5c5500p-9f, -0x1.7f4286p-7f, -0x1.30c61ap-8f, 0x1.4c02dep-12f},
    {0x1.465138p-7f, 0x1.61fe48p-6f, 0x1.17e03ap-7f, -0x1.3bb1e8p-7f, -0x1.e8b5b8p-8f, 0x1.e6d6c6p-11f, 0x1.4aa654p-9f, 0x1.8271acp-11f},
    {-0x1.2b5f5ap-9f, 0x1.42f314p-10f, -0x1.ceca92p-8f, -0x1.8a186ep-9f, 0x1.2cc67cp-9f, 0x1.8bbee4p-10f, -0x1.94144ep-12f, -0x1.ae4386p-12f},
};
alignas(32) constexpr float kGeluTanhNear[8][8] = {
    {0x1.000000p-1f, 0x1.3bfa4cp-2f, 0x1.453d22p-3f, 0x1.123c8ep-4f, 0x1.73ef8ap-6f, 0x1.8b6cccp-8f, 0x1.3dd716p-10f, 0x1.71379ap-13f},
    {-0x1.988454p-2f, -0x1.685438p-2f, -0x1.ef2634p-3f, -0x1.09c7acp-3f, -0x1.bda580p-5f, -0x1.204310p-6f, -0x1.178bf2p-8f, -0x1.8546c2p-11f},
    {0x1.cf6138p-21f, 0x1.697fdap-4f, 0x1.ee617cp-4f, 0x1.8c0adcp-4f, 0x1.bbc004p-5f, 0x1.6d253cp-6f, 0x1.b82b40p-8f, 0x1.77c7cap-10f},
    {0x1.119a3cp-4f, 0x1.678714p-5f, -0x1.b08668p-12f, -0x1.b5de4ap-6f, -0x1.b3eb14p-6f, -0x1.fa6b72p-7f, -0x1.906d52p-8f, -0x1.b212a6p-10f},
    {0x1.0f3f50p-12f, -0x1.4d49c0p-6f, -0x1.4824bap-6f, -0x1.793872p-8f, 0x1.1a443ap-8f, 0x1.7882c0p-8f, 0x1.bd9c40p-9f, 0x1.46c152p-10f},
    {-0x1.80d398p-7f, -0x1.3409cap-8f, 0x1.1c05f0p-8f, 0x1.79c426p-8f, 0x1.111feap-9f, -0x1.21ba56p-11f, -0x1.14f524p-10f, -0x1.419264p-11f},
    {0x1.2950fcp-8f, 0x1.6c48c0p-10f, 0x1.1a3494p-9f, -0x1.30ce9cp-11f, -0x1.58546ep-10f, -0x1.00ffe6p-11f, 0x1.c28ed6p-15f, 0x1.6b9200p-13f},
    {-0x1.05cca2p-8f, 0x1.07e6d6p-9f, -0x1.4ca9aap-10f, -0x1.f9a30ap-11f, 0x1.408240p-12f, 0x1.124144p-12f, 0x1.a6a588p-14f, -0x1.ff61b0p-18f},
};
alignas(32) constexpr float kGeluTanhSlopeNear[8][8] = {
    {0x1.000000p-1f, 0x1.0fa05ep-3f, -0x1.53d226p-4f, -0x1.058d3cp-3f, -0x1.60a99ep-4f, -0x1.36e63ap-5f, -0x1.7b9708p-7f, -0x1.3d8a70p-9f},
    {-0x1.988454p-1f, -0x1.3b23b8p-1f, -0x1.efeb64p-3f, 0x1.f40294p-6f, 0x1.b9db3ap-4f, 0x1.384d18p-4f, 0x1.043d9cp-5f, 0x1.182610p-7f},
    {0x1.da8d12p-20f, 0x1.528b38p-2f, 0x1.71856cp-2f, 0x1.5bc54ap-3f, 0x1.77d6ccp-9f, -0x1.91d2dep-5f, -0x1.1d6b3ep-5f, -0x1.accdcap-7f},
    {0x1.11a542p-2f, 0x1.137d0ap-3f, -0x1.4e9426p-4f, -0x1.216feap-3f, -0x1.270580p-4f, -0x1.1ecdccp-8f, 0x1.0bdcb6p-6f, 0x1.62bdfcp-7f},
    {0x1.20189ep-11f, -0x1.d2aebep-4f, -0x1.41fbb4p-4f, 0x1.d1d3d2p-7f, 0x1.5bc3bap-5f, 0x1.661b0ep-6f, 0x1.328026p-10f, -0x1.26e4c8p-8f},
    {-0x1.085af8p-4f, -0x1.2107a2p-6f, 0x1.3375ecp-5f, 0x1.bdd332p-6f, -0x1.2d0762p-9f, -0x1.56d190p-7f, -0x1.54c6a8p-8f, 0x1.914736p-19f},
    {0x1.46d674p-7f, 0x1.7fcc26p-6f, 0x1.02877ap-7f, -0x1.66640ep-7f, -0x1.9c76d6p-8f, 0x1.339408p-11f, 0x1.214f3cp-9f, 0x1.08da68p-10f},
    {-0x1.e8c2a0p-10f, 0x1.f9a370p-11f, -0x1.ff5aa6p-8f, -0x1.15f67ap-10f, 0x1.dd891cp-10f, 0x1.c40062p-11f, -0x1.0564bap-15f, -0x1.f45b0ap-12f},
};
alignas(32) constexpr float kSiluNear[8][8] = {
    {0x1.000000p-1f, 0x1.136562p-2f, 0x1.e84152p-4f, 0x1.848344p-5f, 0x1.26afa2p-6f, 0x1.b69f68p-8f, 0x1.441778p-9f, 0x1.dda738p-11f},
    {-0x1.000000p-2f, -0x1.92a948p-3f, -0x1.ae0dc0p-4f, -0x1.721652p-5f, -0x1.2162c2p-6f, -0x1.b3afe2p-8f, -0x1.434a52p-9f, -0x1.dd37d0p-11f},
    {0x1.2100b8p-26f, 0x1.74258cp-5f, 0x1.47873ep-5f, 0x1.4efbb4p-6f, 0x1.16f9bep-7f, 0x1.addaccp-9f, 0x1.41b096p-10f, 0x1.dc599ep-12f},
    {0x1.555384p-6f, 0x1.81e340p-8f, -0x1.a860c0p-8f, -0x1.67b220p-8f, -0x1.58f530p-9f, -0x1.16df24p-10f, -0x1.a8ab22p-12f, -0x1.3c6990p-13f},
    {0x1.15e78cp-18f, -0x1.50a482p-8f, -0x1.c7a022p-11f, 0x1.9941e6p-11f, 0x1.2533aep-11f, 0x1.07bedap-12f, 0x1.a086dap-14f, 0x1.39f49ap-15f},
    {-0x1.13910ep-9f, 0x1.b6f09ap-12f, 0x1.7c8fbap-11f, 0x1.5c6c56p-15f, -0x1.394f4ep-14f, -0x1.76b820p-15f, -0x1.40ab4ap-16f, -0x1.edd31cp-18f},
    {0x1.725a5cp-15f, 0x1.7d8f68p-12f, -0x1.1c884ap-13f, -0x1.e00a5ap-15f, 0x1.47f5d2p-21f, 0x1.714d74p-18f, 0x1.6e0916p-19f, 0x1.4dedc0p-20f},
    {0x1.5df240p-13f, -0x1.78efe6p-14f, -0x1.147952p-16f, 0x1.0691cep-16f, 0x1.623eccp-19f, -0x1.ef25acp-23f, -0x1.61722ep-23f, -0x1.c62eecp-23f},
};
alignas(32) constexpr float kSiluSlopeNear[8][8] = {
    {0x1.000000p-1f, 0x1.2842f8p-4f, -0x1.73da30p-4f, -0x1.68dfdap-4f, -0x1.af6db4p-5f, -0x1.b2f400p-6f, -0x1.93e99cp-7f, -0x1.65dbf0p-8f},
    {-0x1.000000p-1f, -0x1.359f76p-2f, -0x1.9a1bfap-5f, 0x1.08c6e6p-5f, 0x1.0c90e4p-5f, 0x1.3f79aep-6f, 0x1.40e466p-7f, 0x1.29801cp-8f},
    {0x1.45b164p-23f, 0x1.3b49b0p-3f, 0x1.4c2790p-4f, 0x1.8745ecp-7f, -0x1.8be2bcp-8f, -0x1.90fd76p-8f, -0x1.d8fb70p-9f, -0x1.d94f84p-10f},
    {0x1.555126p-4f, 0x1.84bebcp-9f, -0x1.0ceff6p-5f, -0x1.9ca07ep-7f, -0x1.9ea478p-10f, 0x1.961dc2p-11f, 0x1.8f55c0p-11f, 0x1.d28704p-12f},
    {0x1.455028p-15f, -0x1.82a92ap-6f, 0x1.7c091ap-9f, 0x1.28940ap-8f, 0x1.551caap-10f, 0x1.2912dcp-13f, -0x1.3b24ecp-14f, -0x1.29c10ap-14f},
    {-0x1.9f8914p-7f, 0x1.41af92p-8f, 0x1.50da58p-9f, -0x1.881eb4p-11f, -0x1.b660ccp-12f, -0x1.a131e2p-14f, -0x1.40c0a4p-17f, 0x1.85befep-18f},
    {0x1.bd20bep-12f, 0x1.003b26p-9f, -0x1.28ef6ep-10f, -0x1.3237f4p-14f, 0x1.4f98fep-14f, 0x1.d2ecfcp-16f, 0x1.80f658p-18f, 0x1.a259a0p-22f},
    {0x1.4a0978p-10f, -0x1.fb48aap-11f, 0x1.fef038p-14f, 0x1.3fbcb6p-14f, -0x1.d12f90p-18f, -0x1.433d5ep-18f, -0x1.5927fap-20f, -0x1.a20a5cp-23f},
};

/// The operations of cpu/activation_far_path.hpp on 8 float lanes (4 double); masks are lanes of
/// all ones.
struct Avx2 {
  using F = __m256;
  using D = __m256d;
  using M = __m256;
  using I = __m256i;
  SKETCHCORE_AVX2 static F set1(float v) { return _mm256_set1_ps(v); }
  SKETCHCORE_AVX2 static D set1(double v) { return _mm256_set1_pd(v); }
  SKETCHCORE_AVX2 static F zero() { return _mm256_setzero_ps(); }
  SKETCHCORE_AVX2 static F add(F a, F b) { return _mm256_add_ps(a, b); }
  SKETCHCORE_AVX2 static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  SKETCHCORE_AVX2 static D sub(D a, D b) { return _mm256_sub_pd(a, b); }
  SKETCHCORE_AVX2 static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  SKETCHCORE_AVX2 static D mul(D a, D b) { return _mm256_mul_pd(a, b); }
  SKETCHCORE_AVX2 static F div(F a, F b) { return _mm256_div_ps(a, b); }
  SKETCHCORE_AVX2 static F min(F a, F b) { return _mm256_min_ps(a, b); }  // b where a is NaN
  SKETCHCORE_AVX2 static F abs(F a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  SKETCHCORE_AVX2 static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }   // a·b + c
  SKETCHCORE_AVX2 static D fma(D a, D b, D c) { return _mm256_fmadd_pd(a, b, c); }
  SKETCHCORE_AVX2 static F fms(F a, F b, F c) { return _mm256_fmsub_ps(a, b, c); }   // a·b − c
  SKETCHCORE_AVX2 static F fnma(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); } // c − a·b
  SKETCHCORE_AVX2 static M less(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  SKETCHCORE_AVX2 static M greater_or_nan(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_NLE_UQ); }
  SKETCHCORE_AVX2 static M both(M a, M b) { return _mm256_and_ps(a, b); }
  SKETCHCORE_AVX2 static M first_not_second(M a, M b) { return _mm256_andnot_ps(b, a); }
  SKETCHCORE_AVX2 static F select(M m, F yes, F no) { return _mm256_blendv_ps(no, yes, m); }
  /// q·2^n rounded once, also into the subnormals, for n an integer in [−217, 0]: q·2^min(0, n + 126)
  /// first, exact wherever the far path calls it (there |q| ≥ 2^-30 where n < −126), then
  /// ·2^max(n, −126), the one rounding.
  SKETCHCORE_AVX2 static F scale(F q, F n) {
    const __m256i whole = _mm256_cvtps_epi32(n), low = _mm256_max_epi32(whole, _mm256_set1_epi32(-126));
    return mul(mul(q, power_of_two(_mm256_sub_epi32(whole, low))), power_of_two(low));
  }
  SKETCHCORE_AVX2 static F power_of_two(__m256i k) {  // k in [−126, 127]
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
  }
  SKETCHCORE_AVX2 static I truncate(F a) { return _mm256_cvttps_epi32(a); }
  SKETCHCORE_AVX2 static F to_float(I a) { return _mm256_cvtepi32_ps(a); }
  /// column[index] for a 32-entry column: four permutes and three blends (VGATHERDPS costs more,
  /// on AMD's Zen several times more); the masks' shifts are shared by a polynomial's lookups.
  SKETCHCORE_AVX2 static F lookup32(const float* column, I index) {
    const __m256 bit3 = _mm256_castsi256_ps(_mm256_slli_epi32(index, 28));  // sign bits select
    const __m256 bit4 = _mm256_castsi256_ps(_mm256_slli_epi32(index, 27));
    const __m256 low = _mm256_blendv_ps(_mm256_permutevar8x32_ps(_mm256_load_ps(column), index),
                                        _mm256_permutevar8x32_ps(_mm256_load_ps(column + 8), index), bit3);
    const __m256 high = _mm256_blendv_ps(_mm256_permutevar8x32_ps(_mm256_load_ps(column + 16), index),
                                         _mm256_permutevar8x32_ps(_mm256_load_ps(column + 24), index), bit3);
    return _mm256_blendv_ps(low, high, bit4);
  }
  SKETCHCORE_AVX2 static D low_half(F v) { return _mm256_cvtps_pd(_mm256_castps256_ps128(v)); }
  SKETCHCORE_AVX2 static D high_half(F v) { return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)); }
  SKETCHCORE_AVX2 static F join(D low, D high) {  // each rounded to float once
    return _mm256_set_m128(_mm256_cvtpd_ps(high), _mm256_cvtpd_ps(low));
  }
};

/// Avx2 for vectors whose every |z| lies below 8, where the far path reads only the first 16
/// entries of its 32-entry tables: two permutes and one blend per lookup instead of four and three.
struct Avx2Below8 : Avx2 {
  SKETCHCORE_AVX2 static F lookup32(const float* column, I index) {
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(_mm256_load_ps(column), index),
                            _mm256_permutevar8x32_ps(_mm256_load_ps(column + 8), index),
                            _mm256_castsi256_ps(_mm256_slli_epi32(index, 28)));
  }
};

using NearTable = float[8][8];
using Activation8 = __m256 (*)(__m256);

/// The erf-GELU's (or its derivative's) far path kFar, as kFarBelow8 where every |z| < 8 (NaN is not).
template <Activation8 kFar, Activation8 kFarBelow8>
SKETCHCORE_AVX2 inline __m256 gelu_far(__m256 z) {
  const __m256 below = _mm256_cmp_ps(Avx2::abs(z), _mm256_set1_ps(8.0f), _CMP_LT_OQ);
  return _mm256_movemask_ps(below) == 0xFF ? kFarBelow8(z) : kFar(z);
}

/// F(h) or D(h) for h in [0, 7.5·step), step = 1/kPerUnit: the polynomial of the interval
/// k = round(h/step) in u = h − k·step (exact). The magic-number rounding leaves k in the low bits
/// of `rounded`, which VPERMPS reads as its index.
template <const NearTable& kTable, int kPerUnit>
SKETCHCORE_AVX2 inline __m256 near_zero(__m256 h) {
  const __m256 magic = _mm256_set1_ps(0x1.8p23f);
  const __m256 rounded = _mm256_fmadd_ps(h, _mm256_set1_ps(float(kPerUnit)), magic);
  const __m256i index = _mm256_castps_si256(rounded);
  const __m256 u = _mm256_fmadd_ps(_mm256_sub_ps(rounded, magic), _mm256_set1_ps(-1.0f / kPerUnit), h);
  __m256 r = _mm256_permutevar8x32_ps(_mm256_load_ps(kTable[7]), index);
  for (int j = 6; j >= 0; --j) r = _mm256_fmadd_ps(r, u, _mm256_permutevar8x32_ps(_mm256_load_ps(kTable[j]), index));
  return r;
}

/// Whether every lane of h = |z| lies in the tables' range (a NaN does not).
template <int kPerUnit>
SKETCHCORE_AVX2 inline bool all_near(__m256 h) {
  return _mm256_movemask_ps(_mm256_cmp_ps(h, _mm256_set1_ps(7.5f / kPerUnit), _CMP_LT_OQ)) == 0xFF;
}

/// F for z < 0, 1 − F for z ≥ 0.
SKETCHCORE_AVX2 inline __m256 reflect(__m256 z, __m256 f) {
  const __m256 positive = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_GE_OQ);
  return _mm256_blendv_ps(f, _mm256_sub_ps(_mm256_set1_ps(1.0f), f), positive);
}

SKETCHCORE_AVX2 inline __m256 argument(const float* y, const float* bias) {
  const __m256 v = _mm256_loadu_ps(y);
  return bias ? _mm256_add_ps(v, _mm256_loadu_ps(bias)) : v;
}

/// An activation (kSlope false) or its derivative (true) by the near-zero table when every lane
/// of the vector lies within it, else by the far path kFar.
template <const NearTable& kTable, int kPerUnit, bool kSlope, Activation8 kFar>
SKETCHCORE_AVX2 inline __m256 near_or_far(__m256 z) {
  const __m256 h = Avx2::abs(z);
  if (!all_near<kPerUnit>(h)) return kFar(z);
  const __m256 f = reflect(z, near_zero<kTable, kPerUnit>(h));
  return kSlope ? f : _mm256_mul_ps(z, f);
}

/// y[0..8) = act(y + bias).
template <Activation8 kAct>
SKETCHCORE_AVX2 inline void forward8(float* y, const float* bias) {
  _mm256_storeu_ps(y, kAct(argument(y, bias)));
}

/// g[0..8) = dy·act′(g + bias).
template <Activation8 kDerivative>
SKETCHCORE_AVX2 inline void backward8(const float* dy, float* g, const float* bias) {
  _mm256_storeu_ps(g, _mm256_mul_ps(_mm256_loadu_ps(dy), kDerivative(argument(g, bias))));
}

/// Copies `count` (< 8) floats of `from` into a zero-padded vector's worth (null stays null).
struct Tail {
  float values[8] = {};
  const float* of(const float* from, std::size_t count) {
    if (from == nullptr) return nullptr;
    std::memcpy(values, from, count * sizeof(float));
    return values;
  }
};

/// Whole vectors in place; the last n mod 8 elements through zero-padded copies (no masked
/// stores: VMASKMOVPS stores are slow on AMD's Zen 1–3).
template <Activation8 kAct>
SKETCHCORE_AVX2 void forward(float* y, const float* bias, std::int64_t n) {
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8) forward8<kAct>(y + j, bias ? bias + j : nullptr);
  if (j == n) return;
  const auto count = static_cast<std::size_t>(n - j);
  Tail out, b;
  out.of(y + j, count);
  forward8<kAct>(out.values, b.of(bias ? bias + j : nullptr, count));
  std::memcpy(y + j, out.values, count * sizeof(float));
}

template <Activation8 kDerivative>
SKETCHCORE_AVX2 void backward(const float* dy, float* g, const float* bias, std::int64_t n) {
  std::int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    _mm_prefetch(reinterpret_cast<const char*>(g + j + 512), _MM_HINT_T0);  // as the AVX-512 backward (noisy here: no clear gain, no loss)
    _mm_prefetch(reinterpret_cast<const char*>(dy + j + 512), _MM_HINT_T0);
    backward8<kDerivative>(dy + j, g + j, bias ? bias + j : nullptr);
  }
  if (j == n) return;
  const auto count = static_cast<std::size_t>(n - j);
  Tail out, d, b;
  out.of(g + j, count);
  backward8<kDerivative>(d.of(dy + j, count), out.values, b.of(bias ? bias + j : nullptr, count));
  std::memcpy(g + j, out.values, count * sizeof(float));
}

constexpr Activation8 kGeluFar = gelu_far<far_path::gelu<Avx2>, far_path::gelu<Avx2Below8>>;
constexpr Activation8 kGeluSlopeFar = gelu_far<far_path::gelu_derivative<Avx2>, far_path::gelu_derivative<Avx2Below8>>;

}  // namespace

const ActivationKernels kAvx2ActivationKernels = {
    forward<near_or_far<kGeluNear, 2, false, kGeluFar>>,
    backward<near_or_far<kGeluSlopeNear, 2, true, kGeluSlopeFar>>,
    forward<near_or_far<kGeluTanhNear, 2, false, far_path::gelu_tanh<Avx2>>>,
    backward<near_or_far<kGeluTanhSlopeNear, 2, true, far_path::gelu_tanh_derivative<Avx2>>>,
    forward<near_or_far<kSiluNear, 1, false, far_path::silu<Avx2>>>,
    backward<near_or_far<kSiluSlopeNear, 1, true, far_path::silu_derivative<Avx2>>>,
};

#endif

}  // namespace sketchcore::detail
