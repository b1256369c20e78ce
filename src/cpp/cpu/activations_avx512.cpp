// The erf-GELU z·Φ(z), SiLU z·σ(z) and their derivatives in float32 on AVX-512 (declared in
// cpu/activations_avx512.hpp).
//
// SiLU: with e = e^−|z| = p·2^n, z/(1 + e) for z ≥ 0 and (z/(1 + e)·p)·2^n for z < 0 (as
// cpu/vector_math.hpp), one division, the scaling by 2^n last.
//
// GELU:
// With h = |z|: Φ(−h) = e^(−h²/2)·m(h), m(h) = ½·erfcx(h/√2) smooth and slowly varying, so
//   gelu(z)  = z·Φ(−h)           for z < 0,   z·(1 − Φ(−h))        for z ≥ 0,
//   gelu′(z) = e^(−h²/2)·(m(h) − h/√(2π)) = D for z < 0,   1 − D for z ≥ 0,
// and nothing cancels on the negative side. m comes from a table: a degree-6 polynomial in
// u = h − i/2 on each of 32 intervals [i/2, i/2 + ½) (coefficients by gelu_table_fit.py), looked
// up with one two-register permute per coefficient, no division. e^(−h²/2) = p·2^n takes h²
// as an exact head and tail (FMA), so its argument, up to 128, carries no rounding error;
// the final scaling by 2^n (VSCALEFPS) rounds once, also into the subnormals.
//
// Accuracy against float64: within 2.9 ulp forward and 2.7 ulp of its larger term for the
// derivative, over every 37th float of [−15.5, 15.5] (tests/cpp/test_epilogue_kernels.cpp
// checks 4 ulp over its own set). ±inf and NaN give what detail/activations.hpp's formulas give.
#include "cpu/activations_avx512.hpp"

#if SKETCHCORE_ACTIVATIONS_AVX512
// GCC 12's avx512fintrin.h leaves the pass-through operand of unmasked operations undefined on
// purpose, which -W(maybe-)uninitialized reports at every use.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#endif

namespace sketchcore::detail {

#if SKETCHCORE_ACTIVATIONS_AVX512

namespace {

#define SKETCHCORE_AVX512 __attribute__((target("avx512f")))

// m(i/2 + u) ≈ kMills[0][i] + kMillsTail[0][i] + Σ_{k≥1} kMills[k][i]·u^k (gelu_table_fit.py).
alignas(64) constexpr float kMillsTail[1][32] = {
    {0x0.0p+0f, 0x1.a98496p-27f, 0x1.cef990p-33f, -0x1.a5db52p-29f, 0x1.5a54aap-28f, 0x1.8b805cp-30f, 0x1.18f4dcp-31f, -0x1.870ed0p-31f, -0x1.cdac8cp-30f, -0x1.89d408p-29f, 0x1.698ef8p-29f, -0x1.b4c90ap-29f, 0x1.8f62bep-29f, 0x1.6c52cap-31f, 0x1.c91126p-30f, 0x1.7b77fcp-30f, 0x1.7a8670p-32f, -0x1.df6f06p-30f, -0x1.18fceap-31f, -0x1.a112a0p-30f, 0x1.c8dda8p-30f, -0x1.65c104p-32f, -0x1.999ac8p-32f, 0x1.c1f41cp-31f, -0x1.c4d9cep-30f, -0x1.f87c00p-30f, 0x1.7a2c42p-32f, -0x1.e0dc40p-32f, -0x1.23e682p-31f, -0x1.818422p-34f, 0x1.a21c28p-31f, 0x1.537a82p-31f},
};
alignas(64) constexpr float kMills[7][32] = {
    {0x1.000000p-1f, 0x1.66027ap-2f, 0x1.0bdb2ep-2f, 0x1.a57056p-3f, 0x1.5845dcp-3f, 0x1.217252p-3f, 0x1.f1b89cp-4f, 0x1.b396fap-4f, 0x1.82b4bcp-4f, 0x1.5b5acep-4f, 0x1.3b0fbcp-4f, 0x1.201faap-4f, 0x1.095608p-4f, 0x1.eba5fep-5f, 0x1.c9e120p-5f, 0x1.ac6292p-5f, 0x1.926972p-5f, 0x1.7b5f34p-5f, 0x1.66ccb8p-5f, 0x1.545298p-5f, 0x1.43a38ap-5f, 0x1.34805ap-5f, 0x1.26b4d0p-5f, 0x1.1a1574p-5f, 0x1.0e7dcep-5f, 0x1.03cf06p-5f, 0x1.f3ddc2p-6f, 0x1.e18ddcp-6f, 0x1.d087aep-6f, 0x1.c0a9c4p-6f, 0x1.b1d706p-6f, 0x1.a3f60ap-6f},
    {-0x1.988440p-2f, -0x1.cb0620p-3f, -0x1.195248p-3f, -0x1.71c04ap-4f, -0x1.00f9dap-4f, -0x1.75ab64p-5f, -0x1.19cef0p-5f, -0x1.b6038ap-6f, -0x1.5cf97ap-6f, -0x1.1be2c6p-6f, -0x1.d614ecp-7f, -0x1.8b1956p-7f, -0x1.5068c2p-7f, -0x1.21ae92p-7f, -0x1.f7d59ep-8f, -0x1.b9fa6ap-8f, -0x1.86b844p-8f, -0x1.5bcb3ep-8f, -0x1.378124p-8f, -0x1.188feep-8f, -0x1.fbf2d0p-9f, -0x1.cdeeacp-9f, -0x1.a5dac2p-9f, -0x1.82bdeep-9f, -0x1.63cfc8p-9f, -0x1.486db4p-9f, -0x1.3012a8p-9f, -0x1.1a5102p-9f, -0x1.06cdbep-9f, -0x1.ea79b4p-10f, -0x1.cabcdap-10f, -0x1.adf8e8p-10f},
    {0x1.fffa1cp-3f, 0x1.e67e6ap-4f, 0x1.fcc666p-5f, 0x1.203f8ap-5f, 0x1.5d2fbap-6f, 0x1.bf3974p-7f, 0x1.2c083ep-7f, 0x1.a29ebep-8f, 0x1.2dd988p-8f, 0x1.bfbb2ep-9f, 0x1.542ad6p-9f, 0x1.07e442p-9f, 0x1.a0eeb0p-10f, 0x1.4ea4aap-10f, 0x1.1063bep-10f, 0x1.c0f912p-11f, 0x1.76264ap-11f, 0x1.3ae724p-11f, 0x1.0b6edap-11f, 0x1.c9ecbcp-12f, 0x1.8af25ep-12f, 0x1.56ee42p-12f, 0x1.2b9ac8p-12f, 0x1.073c94p-12f, 0x1.d0fa98p-13f, 0x1.9ca8dap-13f, 0x1.6fdbdcp-13f, 0x1.494b76p-13f, 0x1.27e72ap-13f, 0x1.0adf32p-13f, 0x1.e2fed8p-14f, 0x1.b67318p-14f},
    {-0x1.100afep-3f, -0x1.c183cap-5f, -0x1.9acfcap-6f, -0x1.995c24p-7f, -0x1.b74a5ap-8f, -0x1.f619a8p-9f, -0x1.2ebfd8p-9f, -0x1.7e750cp-10f, -0x1.f67ea8p-11f, -0x1.55c3a0p-11f, -0x1.deb6bep-12f, -0x1.581814p-12f, -0x1.f9bcaep-13f, -0x1.7b4484p-13f, -0x1.21badcp-13f, -0x1.c12240p-14f, -0x1.61aa0ap-14f, -0x1.1979acp-14f, -0x1.c6b176p-15f, -0x1.726b64p-15f, -0x1.305e5ep-15f, -0x1.f9014ap-16f, -0x1.a67044p-16f, -0x1.63f756p-16f, -0x1.2da53ep-16f, -0x1.01db00p-16f, -0x1.ba57d6p-17f, -0x1.7ec1d2p-17f, -0x1.4b157cp-17f, -0x1.218e9ap-17f, -0x1.fb1d60p-18f, -0x1.bc7e64p-18f},
    {0x1.f8a158p-5f, 0x1.71d7aep-6f, 0x1.2cdb1cp-7f, 0x1.0ba420p-8f, 0x1.01e2e2p-9f, 0x1.09f2a8p-10f, 0x1.21d2bcp-11f, 0x1.4e96aap-12f, 0x1.918da0p-13f, 0x1.fae0fep-14f, 0x1.48df64p-14f, 0x1.b9296ep-15f, 0x1.2b91bep-15f, 0x1.a2efccp-16f, 0x1.31a466p-16f, 0x1.b44f6ep-17f, 0x1.4dde58p-17f, 0x1.e20a58p-18f, 0x1.8cac22p-18f, 0x1.349f90p-18f, 0x1.d31e24p-19f, 0x1.71106ep-19f, 0x1.2a2164p-19f, 0x1.e4ec8cp-20f, 0x1.76d8fcp-20f, 0x1.49de3ap-20f, 0x1.019426p-20f, 0x1.e3238ap-21f, 0x1.523d6ap-21f, 0x1.55190ep-21f, 0x1.1ff536p-21f, 0x1.8cc232p-22f},
    {-0x1.850590p-6f, -0x1.02c6cap-7f, -0x1.7fa0b2p-9f, -0x1.360ec4p-10f, -0x1.117c58p-11f, -0x1.026d14p-12f, -0x1.f6a6a8p-14f, -0x1.0f8504p-14f, -0x1.232a40p-15f, -0x1.6d008cp-16f, -0x1.bde690p-17f, -0x1.23c3b6p-17f, -0x1.4bc382p-18f, -0x1.97f758p-19f, -0x1.5ac774p-19f, -0x1.467470p-20f, -0x1.698c68p-20f, -0x1.8a9724p-22f, -0x1.0afcd8p-20f, -0x1.9f527cp-21f, -0x1.7ebd00p-22f, -0x1.0d4308p-22f, -0x1.e57932p-23f, -0x1.a5bc8ep-23f, -0x1.1ed79ep-26f, -0x1.550ba8p-23f, -0x1.a45fd2p-26f, -0x1.b00014p-23f, 0x1.fd27b6p-25f, -0x1.290058p-23f, -0x1.e135fcp-24f, 0x1.164fcep-24f},
    {0x1.7476aep-8f, 0x1.cf70e4p-10f, 0x1.43d5fap-11f, 0x1.e81cf2p-13f, 0x1.977312p-14f, 0x1.6b0fb4p-15f, 0x1.2a2254p-16f, 0x1.4154e8p-17f, 0x1.13524ep-18f, 0x1.b84796p-19f, 0x1.0b1b5cp-19f, 0x1.87bba6p-20f, 0x1.f59b50p-22f, 0x1.2503d6p-23f, 0x1.d4870ep-22f, -0x1.89b484p-24f, 0x1.1919b6p-22f, -0x1.daec8ap-23f, 0x1.60b982p-22f, 0x1.1e9376p-22f, 0x1.98e940p-25f, 0x1.74e3ccp-26f, 0x1.4d8368p-25f, 0x1.797dc8p-25f, -0x1.f958c0p-25f, 0x1.bd83d4p-25f, -0x1.e15afep-26f, 0x1.ae5304p-24f, -0x1.2a344ap-24f, 0x1.2b9576p-24f, 0x1.e2a878p-25f, -0x1.02b52ap-24f},
};

/// Beyond this |z| every result is 0, z or NaN (clamped so that 2^n stays in range).
constexpr float kClamp = 15.99f;

SKETCHCORE_AVX512 inline __m512 lookup(const float* column, __m512i index) {
  return _mm512_permutex2var_ps(_mm512_load_ps(column), index, _mm512_load_ps(column + 16));
}

/// e^(x + xl) = p·2^n for x in [−150, 0] and a tail |xl| ≤ 2^-20·|x| (or 0): returns p, sets n
/// (an integer in a float). x − n·ln2 with ln2 = 0x1.62e4p-1 + lo, the head short enough that
/// n·head and the subtraction are exact; e^r, |r| ≤ ln2/2 + 2^-12, by a relative minimax
/// polynomial of degree 6 (error 0.3·2^-24), as cpu/vector_math.hpp.
SKETCHCORE_AVX512 inline __m512 exp_parts(__m512 x, __m512 xl, __m512& n) {
  const __m512 magic = _mm512_set1_ps(0x1.8p23f);  // adding it rounds to an integer
  n = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p0f), magic), magic);
  const __m512 head = _mm512_fmadd_ps(n, _mm512_set1_ps(-0x1.62e4p-1f), x);
  const __m512 r = _mm512_add_ps(head, _mm512_fmadd_ps(n, _mm512_set1_ps(-0x1.7f7d1cp-20f), xl));
  __m512 e = _mm512_set1_ps(0x1.6ab976p-10f);
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(0x1.126d0cp-7f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(0x1.55589ap-5f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(0x1.55540ap-3f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(0x1.fffffap-2f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f));
  return _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f));
}

/// For h in [0, kClamp]: Φ(−h) = p·m·2^n. Returns m, sets p and n (an integer in a float).
SKETCHCORE_AVX512 inline __m512 normal_tail(__m512 h, __m512& p, __m512& n) {
  // m(h) on h's interval.
  const __m512i index = _mm512_cvttps_epi32(_mm512_add_ps(h, h));  // floor(2h), h ≥ 0
  const __m512 u = _mm512_fmadd_ps(_mm512_cvtepi32_ps(index), _mm512_set1_ps(-0.5f), h);  // exact
  __m512 m = lookup(kMills[6], index);
  for (int k = 5; k >= 1; --k) m = _mm512_fmadd_ps(m, u, lookup(kMills[k], index));
  m = _mm512_add_ps(_mm512_fmadd_ps(m, u, lookup(kMillsTail[0], index)), lookup(kMills[0], index));
  // e^(−h²/2) = e^r·2^n with −h²/2 = −(hh + hl)/2 exactly (FMA), so that the argument, up to
  // 128, carries no rounding error.
  const __m512 hh = _mm512_mul_ps(h, h);
  const __m512 hl = _mm512_fmsub_ps(h, h, hh);
  p = exp_parts(_mm512_mul_ps(hh, _mm512_set1_ps(-0.5f)), _mm512_mul_ps(hl, _mm512_set1_ps(-0.5f)), n);
  return m;
}

SKETCHCORE_AVX512 inline __m512 gelu16(__m512 z) {
  const __m512 a = _mm512_abs_ps(z), zero = _mm512_setzero_ps(), clamp = _mm512_set1_ps(kClamp);
  __m512 p, n;
  const __m512 m = normal_tail(_mm512_min_ps(a, clamp), p, n);
  const __mmask16 negative = _mm512_cmp_ps_mask(z, zero, _CMP_LT_OQ);
  const __mmask16 beyond = _mm512_cmp_ps_mask(a, clamp, _CMP_NLE_UQ);  // or NaN
  __m512 q = _mm512_mul_ps(p, m);
  q = _mm512_mask_mul_ps(q, negative, q, z);              // z·Φ(−h) before its scaling
  q = _mm512_mask_mul_ps(q, negative & beyond, z, zero);  // −0, or NaN for −inf (as z·Φ(z))
  const __m512 s = _mm512_scalef_ps(q, n);
  const __m512 positive = _mm512_mul_ps(z, _mm512_sub_ps(_mm512_set1_ps(1.0f), s));  // inf stays inf
  return _mm512_mask_blend_ps(negative, positive, s);
}

SKETCHCORE_AVX512 inline __m512 gelu_derivative16(__m512 z) {
  const __m512 a = _mm512_abs_ps(z), zero = _mm512_setzero_ps(), clamp = _mm512_set1_ps(kClamp);
  const __m512 h = _mm512_min_ps(a, clamp);
  __m512 p, n;
  const __m512 m = normal_tail(h, p, n);
  const __mmask16 negative = _mm512_cmp_ps_mask(z, zero, _CMP_LT_OQ);
  const __mmask16 beyond = _mm512_cmp_ps_mask(a, clamp, _CMP_NLE_UQ);
  __m512 q = _mm512_mul_ps(p, _mm512_fnmadd_ps(_mm512_set1_ps(0x1.988454p-2f), h, m));  // p·(m − h/√(2π))
  q = _mm512_mask_mul_ps(q, beyond, a, zero);  // 0, or NaN for ±inf and NaN (as the formula)
  const __m512 d = _mm512_scalef_ps(q, n);
  return _mm512_mask_blend_ps(negative, _mm512_sub_ps(_mm512_set1_ps(1.0f), d), d);
}

/// Beyond this |v| the logistic's e^−|v| is below 2^-216: every result is 0, z, 1 or NaN.
constexpr float kLogisticClamp = 150.0f;

/// σ(v)'s pieces for v = vh + vl (vl a small tail, or 0): e^−|v| = p·2^n (returned),
/// inv = 1/(1 + e^−|v|), `negative` (v < 0) and `beyond` (|v| > kLogisticClamp, or NaN).
template <bool kTail, bool kExactInverse>
SKETCHCORE_AVX512 inline __m512 logistic(__m512 vh, __m512 vl, __m512& n, __m512& inv, __mmask16& negative,
                                         __mmask16& beyond) {
  const __m512 a = _mm512_abs_ps(vh), clamp = _mm512_set1_ps(kLogisticClamp), zero = _mm512_setzero_ps();
  negative = _mm512_cmp_ps_mask(vh, zero, _CMP_LT_OQ);
  beyond = _mm512_cmp_ps_mask(a, clamp, _CMP_NLE_UQ);
  __m512 tail = zero;
  if constexpr (kTail) {  // −|v| = −|vh| − sign(vh)·vl, and no tail beyond the clamp (it can exceed it)
    const __m512 minus_vl = _mm512_sub_ps(zero, vl);
    tail = _mm512_mask_mov_ps(_mm512_mask_sub_ps(minus_vl, negative, zero, minus_vl), beyond, zero);
  }
  const __m512 p = exp_parts(_mm512_sub_ps(zero, _mm512_min_ps(a, clamp)), tail, n);
  const __m512 one = _mm512_set1_ps(1.0f), e = _mm512_scalef_ps(p, n);
  const __m512 sum = _mm512_add_ps(one, e);
  inv = _mm512_div_ps(one, sum);
  if constexpr (kExactInverse) {  // to within half an ulp, for the derivatives, where inv enters twice:
    // the rounding error of 1 + e (exact, e ≤ 1) and the division's residual (exact, FMA) fed back.
    const __m512 sum_error = _mm512_sub_ps(e, _mm512_sub_ps(sum, one));
    const __m512 residual = _mm512_fnmadd_ps(inv, sum, one);
    inv = _mm512_fmadd_ps(inv, _mm512_fnmadd_ps(sum_error, inv, residual), inv);
  }
  return p;
}

/// z·σ(v), v with the sign of z: z/(1 + e) for v ≥ 0, (z/(1 + e)·p)·2^n for v < 0.
template <bool kTail>
SKETCHCORE_AVX512 inline __m512 times_logistic(__m512 z, __m512 vh, __m512 vl) {
  __m512 n, inv;
  __mmask16 negative, beyond;
  const __m512 p = logistic<kTail, false>(vh, vl, n, inv, negative, beyond);
  const __m512 y = _mm512_mul_ps(z, inv);  // inf stays inf
  __m512 q = _mm512_mul_ps(y, p);
  q = _mm512_mask_mul_ps(q, negative & beyond, z, _mm512_setzero_ps());  // −0, or NaN for −inf
  return _mm512_mask_blend_ps(negative, y, _mm512_scalef_ps(q, n));
}

SKETCHCORE_AVX512 inline __m512 silu16(__m512 z) { return times_logistic<false>(z, z, _mm512_setzero_ps()); }

SKETCHCORE_AVX512 inline __m512 silu_derivative16(__m512 z) {
  __m512 n, inv;
  __mmask16 negative, beyond;
  const __m512 p = logistic<false, true>(z, _mm512_setzero_ps(), n, inv, negative, beyond);
  const __m512 one = _mm512_set1_ps(1.0f);
  // z ≥ 0: inv·(1 + z·e·inv); z < 0: (p·inv·(1 + z·inv))·2^n.
  const __m512 e_inv = _mm512_mul_ps(_mm512_scalef_ps(p, n), inv);
  const __m512 positive = _mm512_mul_ps(inv, _mm512_fmadd_ps(z, e_inv, one));
  __m512 q = _mm512_mul_ps(_mm512_mul_ps(p, inv), _mm512_fmadd_ps(z, inv, one));
  q = _mm512_mask_mul_ps(q, negative & beyond, z, _mm512_setzero_ps());  // −0·…, NaN for −inf
  return _mm512_mask_blend_ps(negative, positive, _mm512_scalef_ps(q, n));
}

// GELU-tanh: z·σ(v), v = 2c·(z + a·z³), c = √(2/π), a = 0.044715. v reaches 150 where the result
// is still representable, so it is formed in double and carried as a float head and tail.
constexpr double kTwoC = 0x1.9884533d43651p+0, kTwoCA = 0x1.2444f2a4d8b4bp-4, kThreeA = 0x1.12ba9d1f60179p-3;

SKETCHCORE_AVX512 inline __m512d low_half(__m512 v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
SKETCHCORE_AVX512 inline __m512d high_half(__m512 v) {
  return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
SKETCHCORE_AVX512 inline __m512 join(__m512d low, __m512d high) {  // each rounded to float once
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(low))),
                                             _mm256_castps_pd(_mm512_cvtpd_ps(high)), 1));
}

/// v = 2c·(z + a·z³) of the double halves of z, as float head vh and tail vl.
SKETCHCORE_AVX512 inline void gelu_tanh_argument(__m512d z0, __m512d z1, __m512& vh, __m512& vl) {
  const __m512d two_c = _mm512_set1_pd(kTwoC), two_ca = _mm512_set1_pd(kTwoCA);
  const __m512d v0 = _mm512_mul_pd(z0, _mm512_fmadd_pd(two_ca, _mm512_mul_pd(z0, z0), two_c));
  const __m512d v1 = _mm512_mul_pd(z1, _mm512_fmadd_pd(two_ca, _mm512_mul_pd(z1, z1), two_c));
  vh = join(v0, v1);
  vl = join(_mm512_sub_pd(v0, low_half(vh)), _mm512_sub_pd(v1, high_half(vh)));
}

SKETCHCORE_AVX512 inline __m512 gelu_tanh16(__m512 z) {
  __m512 vh, vl;
  gelu_tanh_argument(low_half(z), high_half(z), vh, vl);
  return times_logistic<true>(z, vh, vl);
}

/// p·inv·(1 + z·inv·v′) in double, v′ = 2c·(1 + 3a·z²).
SKETCHCORE_AVX512 inline __m512d tanh_bracket(__m512d z, __m512d p, __m512d inv) {
  const __m512d one = _mm512_set1_pd(1.0);
  const __m512d dv = _mm512_mul_pd(_mm512_set1_pd(kTwoC), _mm512_fmadd_pd(_mm512_mul_pd(z, z), _mm512_set1_pd(kThreeA), one));
  return _mm512_mul_pd(_mm512_mul_pd(p, inv), _mm512_fmadd_pd(_mm512_mul_pd(z, inv), dv, one));
}

/// σ + z·σ·(1 − σ)·v′, v′ = 2c·(1 + 3a·z²): for v ≥ 0 inv·(1 + z·e·inv·v′) in float; for v < 0
/// (p·inv·(1 + z·inv·v′))·2^n with the product in double (v′ and the bracket lose bits in float).
SKETCHCORE_AVX512 inline __m512 gelu_tanh_derivative16(__m512 z) {
  const __m512d z0 = low_half(z), z1 = high_half(z);
  __m512 vh, vl, n, inv;
  gelu_tanh_argument(z0, z1, vh, vl);
  __mmask16 negative, beyond;
  const __m512 p = logistic<true, true>(vh, vl, n, inv, negative, beyond);
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 dv = _mm512_mul_ps(_mm512_set1_ps(static_cast<float>(kTwoC)),
                                  _mm512_fmadd_ps(_mm512_mul_ps(z, z), _mm512_set1_ps(static_cast<float>(kThreeA)), one));
  const __m512 e_inv = _mm512_mul_ps(_mm512_scalef_ps(p, n), inv);
  __m512 positive = _mm512_mul_ps(inv, _mm512_fmadd_ps(_mm512_mul_ps(z, e_inv), dv, one));
  // Beyond the clamp (v′ may overflow there): 1, or NaN for +inf (as the formula).
  positive = _mm512_mask_mov_ps(positive, beyond & ~negative, _mm512_fmadd_ps(z, _mm512_setzero_ps(), one));
  __m512 q = join(tanh_bracket(z0, low_half(p), low_half(inv)), tanh_bracket(z1, high_half(p), high_half(inv)));
  q = _mm512_mask_mul_ps(q, negative & beyond, z, _mm512_setzero_ps());  // −0·…, NaN for −inf
  return _mm512_mask_blend_ps(negative, positive, _mm512_scalef_ps(q, n));  // +inf: inf·0 = NaN, as the formula
}

/// The first `count` (< 16) lanes, or all 16.
inline __mmask16 lanes(std::int64_t count) {
  return count >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << count) - 1u);
}

SKETCHCORE_AVX512 inline __m512 argument(const float* y, const float* bias, std::int64_t j, __mmask16 k) {
  const __m512 v = _mm512_maskz_loadu_ps(k, y + j);
  return bias ? _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, bias + j)) : v;
}

/// y[j] = act(y[j] + bias[j]), 16 lanes at a time, the last vector masked.
template <__m512 (*kAct)(__m512)>
SKETCHCORE_AVX512 void forward(float* y, const float* bias, std::int64_t n) {
  for (std::int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = lanes(n - j);
    _mm512_mask_storeu_ps(y + j, k, kAct(argument(y, bias, j, k)));
  }
}

/// g[j] = dy[j]·act′(g[j] + bias[j]).
template <__m512 (*kDerivative)(__m512)>
SKETCHCORE_AVX512 void backward(const float* dy, float* g, const float* bias, std::int64_t n) {
  for (std::int64_t j = 0; j < n; j += 16) {
    const __mmask16 k = lanes(n - j);
    const __m512 d = kDerivative(argument(g, bias, j, k));
    _mm512_mask_storeu_ps(g + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, dy + j), d));
  }
}

}  // namespace

bool activations_avx512_available() noexcept {
  static const bool available = __builtin_cpu_supports("avx512f");
  return available;
}

void gelu_forward_avx512(float* y, const float* bias, std::int64_t n) noexcept { forward<gelu16>(y, bias, n); }
void gelu_backward_avx512(const float* dy, float* g, const float* bias, std::int64_t n) noexcept {
  backward<gelu_derivative16>(dy, g, bias, n);
}
void silu_forward_avx512(float* y, const float* bias, std::int64_t n) noexcept { forward<silu16>(y, bias, n); }
void silu_backward_avx512(const float* dy, float* g, const float* bias, std::int64_t n) noexcept {
  backward<silu_derivative16>(dy, g, bias, n);
}
void gelu_tanh_forward_avx512(float* y, const float* bias, std::int64_t n) noexcept {
  forward<gelu_tanh16>(y, bias, n);
}
void gelu_tanh_backward_avx512(const float* dy, float* g, const float* bias, std::int64_t n) noexcept {
  backward<gelu_tanh_derivative16>(dy, g, bias, n);
}

#else

bool activations_avx512_available() noexcept { return false; }

#endif

}  // namespace sketchcore::detail
