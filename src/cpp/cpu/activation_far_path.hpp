// The far path of the float32 erf-GELU, GELU-tanh and SiLU and their derivatives: whole vectors
// with some argument beyond the near-zero tables of cpu/activations_avx512.cpp and
// cpu/activations_avx2.cpp, written once over a vector type V (an ISA's operations: those
// files' Avx512 and Avx2), for every float32 argument:
// - GELU: Φ(−h) = e^(−h²/2)·m(h), h = |z|, m(h) = ½·erfcx(h/√2) smooth, from a table of degree-6
//   polynomials on 32 intervals of width ½; e^(−h²/2) = p·2^n with h² an exact head and tail
//   (FMA), so that its argument, up to 128, carries no rounding error; the scaling by 2^n last
//   (one rounding, also into the subnormals).
// - GELU-tanh and SiLU: e = e^−|v| = p·2^n, z/(1 + e) for z ≥ 0 and (z/(1 + e)·p)·2^n for z < 0;
//   v formed in double and carried as a float head and tail (it reaches 150 where results are
//   still representable); the derivatives with 1/(1 + e) to within half an ulp.
// Each is z·F(h) for z < 0 and z·(1 − F(h)) for z ≥ 0 (nothing cancels on the negative side);
// each derivative D(h) for z < 0 and 1 − D(h) for z ≥ 0. Tables by activation_tables_fit.py.
//
// Included by each of those files inside its own anonymous namespace use, after defining
// SKETCHCORE_FAR_PATH_TARGET as its target attribute, so that every function here is compiled
// for that ISA (and inlines its intrinsics) in that file alone.
#pragma once

#include <cstdint>
#include <initializer_list>

#ifndef SKETCHCORE_FAR_PATH_TARGET
#error "define SKETCHCORE_FAR_PATH_TARGET (the including file's target attribute) first"
#endif

namespace sketchcore::detail {
namespace {
namespace far_path {

// m(i/2 + u) ≈ kMills[0][i] + kMillsTail[0][i] + Σ_{j≥1} kMills[j][i]·u^j, u in [0, ½).
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

/// Beyond this |z| every GELU result is 0, z or NaN (clamped so that 2^n stays in range).
constexpr float kClamp = 15.99f;

/// Beyond this |v| the logistic's e^−|v| is below 2^-216: every result is 0, z, 1 or NaN.
constexpr float kLogisticClamp = 150.0f;

/// e^(x + xl) = p·2^n for x in [−150, 0] and a tail |xl| ≤ 2^-20·|x| (or 0): returns p, sets n
/// (an integer in a float, ≥ −217). x − n·ln2 with ln2 = 0x1.62e4p-1 + lo, the head short enough
/// that n·head and the subtraction are exact; e^r, |r| ≤ ln2/2 + 2^-12, by a relative minimax
/// polynomial of degree 6 (error 0.3·2^-24), as cpu/vector_math.hpp.
template <class V>
SKETCHCORE_FAR_PATH_TARGET inline typename V::F exp_parts(typename V::F x, typename V::F xl, typename V::F& n) {
  const typename V::F magic = V::set1(0x1.8p23f);  // adding it rounds to an integer
  n = V::sub(V::fma(x, V::set1(0x1.715476p0f), magic), magic);
  const typename V::F head = V::fma(n, V::set1(-0x1.62e4p-1f), x);
  const typename V::F r = V::add(head, V::fma(n, V::set1(-0x1.7f7d1cp-20f), xl));
  typename V::F e = V::set1(0x1.6ab976p-10f);
  for (float c : {0x1.126d0cp-7f, 0x1.55589ap-5f, 0x1.55540ap-3f, 0x1.fffffap-2f, 1.0f, 1.0f}) {
    e = V::fma(e, r, V::set1(c));
  }
  return e;
}

/// For h in [0, kClamp]: Φ(−h) = p·m·2^n. Returns m, sets p and n (an integer in a float).
template <class V>
SKETCHCORE_FAR_PATH_TARGET inline typename V::F normal_tail(typename V::F h, typename V::F& p, typename V::F& n) {
  // m(h) on h's interval.
  const typename V::I index = V::truncate(V::add(h, h));  // floor(2h), h ≥ 0
  const typename V::F u = V::fma(V::to_float(index), V::set1(-0.5f), h);  // exact
  typename V::F m = V::lookup32(kMills[6], index);
  for (int k = 5; k >= 1; --k) m = V::fma(m, u, V::lookup32(kMills[k], index));
  m = V::add(V::fma(m, u, V::lookup32(kMillsTail[0], index)), V::lookup32(kMills[0], index));
  // e^(−h²/2) = e^r·2^n with −h²/2 = −(hh + hl)/2 exactly (FMA), so that the argument, up to
  // 128, carries no rounding error.
  const typename V::F hh = V::mul(h, h), hl = V::fms(h, h, hh), minus_half = V::set1(-0.5f);
  p = exp_parts<V>(V::mul(hh, minus_half), V::mul(hl, minus_half), n);
  return m;
}

template <class V>
SKETCHCORE_FAR_PATH_TARGET inline typename V::F gelu(typename V::F z) {
  const typename V::F a = V::abs(z), zero = V::zero(), clamp = V::set1(kClamp);
  typename V::F p, n;
  const typename V::F m = normal_tail<V>(V::min(a, clamp), p, n);
  const typename V::M negative = V::less(z, zero);
  const typename V::M beyond = V::greater_or_nan(a, clamp);
  typename V::F q = V::mul(p, m);
  q = V::select(negative, V::mul(q, z), q);                        // z·Φ(−h) before its scaling
  q = V::select(V::both(negative, beyond), V::mul(z, zero), q);   // −0, or NaN for −inf (as z·Φ(z))
  const typename V::F s = V::scale(q, n);
  const typename V::F positive = V::mul(z, V::sub(V::set1(1.0f), s));  // inf stays inf
  return V::select(negative, s, positive);
}

template <class V>
SKETCHCORE_FAR_PATH_TARGET inline typename V::F gelu_derivative(typename V::F z) {
  const typename V::F a = V::abs(z), zero = V::zero(), clamp = V::set1(kClamp);
  const typename V::F h = V::min(a, clamp);
  typename V::F p, n;
  const typename V::F m = normal_tail<V>(h, p, n);
  const typename V::M negative = V::less(z, zero);
  const typename V::M beyond = V::greater_or_nan(a, clamp);
  typename V::F q = V::mul(p, V::fnma(V::set1(0x1.988454p-2f), h, m));  // p·(m − h/√(2π))
  q = V::select(beyond, V::mul(a, zero), q);  // 0, or NaN for ±inf and NaN (as the formula)
  const typename V::F d = V::scale(q, n);
  return V::select(negative, d, V::sub(V::set1(1.0f), d));
}

/// σ(v)'s pieces for v = vh + vl (vl a small tail, or 0): e^−|v| = p·2^n (returned),
/// inv = 1/(1 + e^−|v|), `negative` (v < 0) and `beyond` (|v| > kLogisticClamp, or NaN).
template <class V, bool kTail, bool kExactInverse>
SKETCHCORE_FAR_PATH_TARGET inline typename V::F logistic(typename V::F vh, typename V::F vl, typename V::F& n,
                                                         typename V::F& inv, typename V::M& negative,
                                                         typename V::M& beyond) {
  const typename V::F a = V::abs(vh), clamp = V::set1(kLogisticClamp), zero = V::zero(), one = V::set1(1.0f);
  negative = V::less(vh, zero);
  beyond = V::greater_or_nan(a, clamp);
  typename V::F tail = zero;
  if constexpr (kTail) {  // −|v| = −|vh| − sign(vh)·vl, and no tail beyond the clamp (it can exceed it)
    const typename V::F minus_vl = V::sub(zero, vl);
    tail = V::select(beyond, zero, V::select(negative, vl, minus_vl));
  }
  const typename V::F p = exp_parts<V>(V::sub(zero, V::min(a, clamp)), tail, n);
  const typename V::F e = V::scale(p, n), sum = V::add(one, e);
  inv = V::div(one, sum);
  if constexpr (kExactInverse) {  // to within half an ulp, for the derivatives, where inv enters twice:
    // the rounding error of 1 + e (exact, e ≤ 1) and the division's residual (exact, FMA) fed back.
    const typename V::F sum_error = V::sub(e, V::sub(sum, one));
    const typename V::F residual = V::fnma(inv, sum, one);
    inv = V::fma(inv, V::fnma(sum_error, inv, residual), inv);
  }
  return p;
}

/// z·σ(v), v with the sign of z: z/(1 + e) for v ≥ 0, (z/(1 + e)·p)·2^n for v < 0.
template <class V, bool kTail>
SKETCHCORE_FAR_PATH_TARGET inline typename V::F times_logistic(typename V::F z, typename V::F vh, typename V::F vl) {
  typename V::F n, inv;
  typename V::M negative, beyond;
  const typename V::F p = logistic<V, kTail, false>(vh, vl, n, inv, negative, beyond);
  const typename V::F y = V::mul(z, inv);  // inf stays inf
  typename V::F q = V::mul(y, p);
  q = V::select(V::both(negative, beyond), V::mul(z, V::zero()), q);  // −0, or NaN for −inf
  return V::select(negative, V::scale(q, n), y);
}

template <class V>
SKETCHCORE_FAR_PATH_TARGET inline typename V::F silu(typename V::F z) {
  return times_logistic<V, false>(z, z, V::zero());
}

template <class V>
SKETCHCORE_FAR_PATH_TARGET inline typename V::F silu_derivative(typename V::F z) {
  typename V::F n, inv;
  typename V::M negative, beyond;
  const typename V::F p = logistic<V, false, true>(z, V::zero(), n, inv, negative, beyond);
  const typename V::F one = V::set1(1.0f);
  // z ≥ 0: inv·(1 + z·e·inv); z < 0: (p·inv·(1 + z·inv))·2^n.
  const typename V::F e_inv = V::mul(V::scale(p, n), inv);
  const typename V::F positive = V::mul(inv, V::fma(z, e_inv, one));
  typename V::F q = V::mul(V::mul(p, inv), V::fma(z, inv, one));
  q = V::select(V::both(negative, beyond), V::mul(z, V::zero()), q);  // −0·…, NaN for −inf
  return V::select(negative, V::scale(q, n), positive);
}

// GELU-tanh: z·σ(v), v = 2c·(z + a·z³), c = √(2/π), a = 0.044715. v reaches 150 where the result
// is still representable, so it is formed in double and carried as a float head and tail.
constexpr double kTwoC = 0x1.9884533d43651p+0, kTwoCA = 0x1.2444f2a4d8b4bp-4, kThreeA = 0x1.12ba9d1f60179p-3;

/// v = 2c·(z + a·z³) of the double halves of z, as float head vh and tail vl.
template <class V>
SKETCHCORE_FAR_PATH_TARGET inline void gelu_tanh_argument(typename V::D z0, typename V::D z1, typename V::F& vh,
                                                          typename V::F& vl) {
  const typename V::D two_c = V::set1(kTwoC), two_ca = V::set1(kTwoCA);
  const typename V::D v0 = V::mul(z0, V::fma(two_ca, V::mul(z0, z0), two_c));
  const typename V::D v1 = V::mul(z1, V::fma(two_ca, V::mul(z1, z1), two_c));
  vh = V::join(v0, v1);
  vl = V::join(V::sub(v0, V::low_half(vh)), V::sub(v1, V::high_half(vh)));
}

template <class V>
SKETCHCORE_FAR_PATH_TARGET inline typename V::F gelu_tanh(typename V::F z) {
  typename V::F vh, vl;
  gelu_tanh_argument<V>(V::low_half(z), V::high_half(z), vh, vl);
  return times_logistic<V, true>(z, vh, vl);
}

/// p·inv·(1 + z·inv·v′) in double, v′ = 2c·(1 + 3a·z²).
template <class V>
SKETCHCORE_FAR_PATH_TARGET inline typename V::D tanh_bracket(typename V::D z, typename V::D p, typename V::D inv) {
  const typename V::D one = V::set1(1.0);
  const typename V::D dv = V::mul(V::set1(kTwoC), V::fma(V::mul(z, z), V::set1(kThreeA), one));
  return V::mul(V::mul(p, inv), V::fma(V::mul(z, inv), dv, one));
}

/// σ + z·σ·(1 − σ)·v′, v′ = 2c·(1 + 3a·z²): for v ≥ 0 inv·(1 + z·e·inv·v′) in float; for v < 0
/// (p·inv·(1 + z·inv·v′))·2^n with the product in double (v′ and the bracket lose bits in float).
template <class V>
SKETCHCORE_FAR_PATH_TARGET inline typename V::F gelu_tanh_derivative(typename V::F z) {
  const typename V::D z0 = V::low_half(z), z1 = V::high_half(z);
  typename V::F vh, vl, n, inv;
  gelu_tanh_argument<V>(z0, z1, vh, vl);
  typename V::M negative, beyond;
  const typename V::F p = logistic<V, true, true>(vh, vl, n, inv, negative, beyond);
  const typename V::F one = V::set1(1.0f), zero = V::zero();
  const typename V::F dv = V::mul(V::set1(static_cast<float>(kTwoC)),
                                  V::fma(V::mul(z, z), V::set1(static_cast<float>(kThreeA)), one));
  const typename V::F e_inv = V::mul(V::scale(p, n), inv);
  typename V::F positive = V::mul(inv, V::fma(V::mul(z, e_inv), dv, one));
  // Beyond the clamp (v′ may overflow there): 1, or NaN for +inf (as the formula).
  positive = V::select(V::first_not_second(beyond, negative), V::fma(z, zero, one), positive);
  typename V::F q = V::join(tanh_bracket<V>(z0, V::low_half(p), V::low_half(inv)),
                            tanh_bracket<V>(z1, V::high_half(p), V::high_half(inv)));
  q = V::select(V::both(negative, beyond), V::mul(z, zero), q);  // −0·…, NaN for −inf
  return V::select(negative, V::scale(q, n), positive);          // +inf: inf·0 = NaN, as the formula
}

}  // namespace far_path
}  // namespace
}  // namespace sketchcore::detail
