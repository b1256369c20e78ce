// The erf-GELU z·Φ(z), GELU-tanh z·σ(v), v = 2c·(z + a·z³), SiLU z·σ(z) and their derivatives in
// float32 on AVX-512 (kAvx512ActivationKernels, cpu/activation_isa.hpp), where the CPU has AVX-512F. Each is z·F(h) for z < 0 and
// z·(1 − F(h)) for z ≥ 0 with h = |z| and F(h) = Φ(−h), σ(−v(h)) or σ(−h), so nothing cancels
// on the negative side; each derivative is D(h) for z < 0 and 1 − D(h) for z ≥ 0.
//
// Near zero (|z| < 3.94 for the GELUs, 7.88 for SiLU; for activations of unit scale, all but one
// 16-lane vector in a thousand): F and D from tables, a degree-5 polynomial per interval of
// width 1/8 (1/4), its coefficients fetched by one two-register permute each: no exp, no
// division: 0.16–0.20 ns per element on one Zen 5 core, torch's own ops 0.23–1.24
// (bench/test_bench_epilogue.py::test_per_element_cost_on_one_thread). Tables by
// activation_tables_fit.py.
//
// Elsewhere (whole vectors with some |z| beyond): cpu/activation_far_path.hpp, its scaling by 2^n
// one VSCALEFPS and its table lookups two-register permutes.
//
// Accuracy against float64, every 37th float of [−200, 200] (61M points): forward within 2.8
// (GELU), 2.6 (GELU-tanh), 2.7 (SiLU) ulp; derivatives within 2.7, 2.3, 3.0 ulp of their larger
// term. tests/cpp/test_epilogue_kernels.cpp checks 4 ulp over its own set; ±inf and NaN give what
// detail/activations.hpp's formulas give.
#include "cpu/activation_isa.hpp"

#if SKETCHCORE_ACTIVATIONS_X86
#include "cpu/x86_intrinsics.hpp"

#define SKETCHCORE_AVX512 __attribute__((target("avx512f")))
#define SKETCHCORE_FAR_PATH_TARGET SKETCHCORE_AVX512
#include "cpu/activation_far_path.hpp"
#endif

namespace sketchcore::detail {

#if SKETCHCORE_ACTIVATIONS_X86

namespace {

// Tables by activation_tables_fit.py. Near zero, F(h) (Φ(−h), σ(−h)) and the slope's D(h) on
// h = k·step + u, |u| ≤ step/2, as Σ_j table[j][k]·u^j (step 1/8 for GELU, 1/4 for SiLU).
alignas(64) constexpr float kGeluNear[6][32] = {
    {0x1.000000p-1f, 0x1.cd116cp-2f, 0x1.9aecbap-2f, 0x1.6a527ap-2f, 0x1.3bf144p-2f, 0x1.105e82p-2f, 0x1.d02200p-3f, 0x1.86bb50p-3f, 0x1.44ed0cp-3f, 0x1.0ad7dap-3f, 0x1.b0bdd2p-4f, 0x1.5a6196p-4f, 0x1.11a46ep-4f, 0x1.aaa65cp-5f, 0x1.482a24p-5f, 0x1.f20394p-6f, 0x1.74bcf8p-6f, 0x1.13243cp-6f, 0x1.909250p-7f, 0x1.1f85a2p-7f, 0x1.96f4e6p-8f, 0x1.1bee6cp-8f, 0x1.869044p-9f, 0x1.08c890p-9f, 0x1.61de20p-10f, 0x1.d21af4p-11f, 0x1.2e86fep-11f, 0x1.8301bep-12f, 0x1.e7dbcap-13f, 0x1.2eff80p-13f, 0x1.72d956p-14f, 0x1.bf3766p-15f},
    {-0x1.988454p-2f, -0x1.95567ap-2f, -0x1.8bf2bap-2f, -0x1.7cc796p-2f, -0x1.6883d0p-2f, -0x1.50096cp-2f, -0x1.345d5ep-2f, -0x1.169596p-2f, -0x1.ef8e5ap-3f, -0x1.b1ec62p-3f, -0x1.7610bap-3f, -0x1.3d7712p-3f, -0x1.094086p-3f, -0x1.b46178p-4f, -0x1.616454p-4f, -0x1.19bfa2p-4f, -0x1.ba4b44p-5f, -0x1.55c740p-5f, -0x1.0402e0p-5f, -0x1.857a94p-6f, -0x1.1f2f06p-6f, -0x1.a0f22cp-7f, -0x1.29fa56p-7f, -0x1.a34ea4p-8f, -0x1.227214p-8f, -0x1.8c2226p-9f, -0x1.09f38ep-9f, -0x1.5f90f6p-10f, -0x1.c9897ep-11f, -0x1.251bf8p-11f, -0x1.71b92ep-12f, -0x1.cb2206p-13f},
    {0x1.d5abbap-20f, 0x1.9573a2p-6f, 0x1.8c18e2p-5f, 0x1.1d76ccp-4f, 0x1.687b3cp-4f, 0x1.a42164p-4f, 0x1.ce9152p-4f, 0x1.e77b8ap-4f, 0x1.ef89f0p-4f, 0x1.e82adep-4f, 0x1.d38e72p-4f, 0x1.b4859ap-4f, 0x1.8ddd2ep-4f, 0x1.628f1ap-4f, 0x1.35381ep-4f, 0x1.08257ap-4f, 0x1.ba4bf8p-5f, 0x1.6b21c2p-5f, 0x1.24818ep-5f, 0x1.ce80c2p-6f, 0x1.66f9cep-6f, 0x1.119efep-6f, 0x1.99b6d2p-7f, 0x1.2d624cp-7f, 0x1.b3aa50p-8f, 0x1.357b54p-8f, 0x1.b02ab8p-9f, 0x1.28a284p-9f, 0x1.905766p-10f, 0x1.09a10ap-10f, 0x1.5a9dc0p-11f, 0x1.bcc8f6p-12f},
    {0x1.100004p-4f, 0x1.0a02c6p-4f, 0x1.eed73ap-5f, 0x1.b49106p-5f, 0x1.688ca2p-5f, 0x1.10bb94p-5f, 0x1.678216p-6f, 0x1.5c8d82p-7f, 0x1.59372cp-17f, -0x1.3364e2p-7f, -0x1.185f72p-6f, -0x1.7907ccp-6f, -0x1.b9f748p-6f, -0x1.dd511ep-6f, -0x1.e5e4a6p-6f, -0x1.d89de8p-6f, -0x1.ba49d2p-6f, -0x1.907bf4p-6f, -0x1.6012cap-6f, -0x1.2d3be4p-6f, -0x1.f68af8p-7f, -0x1.99585cp-7f, -0x1.45e388p-7f, -0x1.fbcc96p-8f, -0x1.83412cp-8f, -0x1.215f9cp-8f, -0x1.a7da4cp-9f, -0x1.306c44p-9f, -0x1.aced9ep-10f, -0x1.288a22p-10f, -0x1.927768p-11f, -0x1.0c2180p-11f},
    {0x1.a23818p-10f, -0x1.037a40p-7f, -0x1.0d979ep-6f, -0x1.2a64d4p-7f, -0x1.28272cp-6f, -0x1.c313aep-6f, -0x1.8c93e4p-6f, -0x1.423818p-6f, -0x1.38b282p-6f, -0x1.1ddc0cp-6f, -0x1.8ca2dep-7f, -0x1.51ce2cp-7f, -0x1.54b880p-8f, -0x1.513462p-9f, 0x1.418f3ap-12f, 0x1.30a1bep-9f, 0x1.20e428p-8f, 0x1.7e1544p-8f, 0x1.9f52c4p-8f, 0x1.9a1cfcp-8f, 0x1.88a174p-8f, 0x1.628282p-8f, 0x1.3a498ap-8f, 0x1.04f7d0p-8f, 0x1.b553f8p-9f, 0x1.5bc3b6p-9f, 0x1.118332p-9f, 0x1.9e9df2p-10f, 0x1.35af96p-10f, 0x1.c1e0cap-11f, 0x1.3faa9ep-11f, 0x1.bdcc7ep-12f},
    {-0x1.4e5c64p-6f, -0x1.33e462p-7f, -0x1.496c1ap-8f, -0x1.e0e49ep-7f, -0x1.8e92b0p-8f, 0x1.905b84p-8f, 0x1.b2d14ap-9f, -0x1.26b326p-11f, 0x1.c7b7d4p-10f, 0x1.6cd6d8p-8f, 0x1.ab01c0p-9f, 0x1.c14e56p-8f, 0x1.096e8cp-8f, 0x1.65a476p-8f, 0x1.0ff194p-8f, 0x1.31bab8p-8f, 0x1.27acb2p-9f, 0x1.7203a2p-11f, 0x1.a63998p-16f, -0x1.1f4c36p-12f, -0x1.c7e02cp-11f, -0x1.fa79dap-11f, -0x1.52a9b8p-10f, -0x1.029a8cp-10f, -0x1.29fc2ep-10f, -0x1.f8ee42p-11f, -0x1.cf654ep-11f, -0x1.738ef6p-11f, -0x1.35c92ap-11f, -0x1.dd8428p-12f, -0x1.638ab4p-12f, -0x1.070900p-12f},
};
alignas(64) constexpr float kGeluSlopeNear[6][32] = {
    {0x1.000000p-1f, 0x1.9a669ep-2f, 0x1.37f00cp-2f, 0x1.b70f42p-3f, 0x1.0f5eb8p-3f, 0x1.f2c4f0p-5f, 0x1.95f1e0p-11f, -0x1.8329dcp-5f, -0x1.55429ap-4f, -0x1.baa428p-4f, -0x1.f66bfep-4f, -0x1.0752eep-3f, -0x1.050e92p-3f, -0x1.efcb36p-4f, -0x1.c65a80p-4f, -0x1.93c66cp-4f, -0x1.5d1c06p-4f, -0x1.265aa4p-4f, -0x1.e4e1e4p-5f, -0x1.86a028p-5f, -0x1.341c2ap-5f, -0x1.dc423ep-6f, -0x1.68e62cp-6f, -0x1.0c4774p-6f, -0x1.876f5ap-7f, -0x1.185900p-7f, -0x1.8a5ae8p-8f, -0x1.107234p-8f, -0x1.71da90p-9f, -0x1.ed62c0p-10f, -0x1.437006p-10f, -0x1.a0d580p-11f},
    {-0x1.988454p-1f, -0x1.922bccp-1f, -0x1.7f9324p-1f, -0x1.62018cp-1f, -0x1.3b7356p-1f, -0x1.0e6796p-1f, -0x1.bb4638p-2f, -0x1.57e0a6p-2f, -0x1.ef8e58p-3f, -0x1.3ea998p-3f, -0x1.474ea2p-4f, -0x1.15c82ep-6f, 0x1.094088p-5f, 0x1.178e72p-4f, 0x1.777a98p-4f, 0x1.ab0672p-4f, 0x1.ba4b44p-4f, 0x1.ade49cp-4f, 0x1.8e2466p-4f, 0x1.627c92p-4f, 0x1.3121f6p-4f, 0x1.fdc816p-5f, 0x1.9e601ep-5f, 0x1.486718p-5f, 0x1.fc47a2p-6f, 0x1.808728p-6f, 0x1.1ca6aep-6f, 0x1.9cadaap-7f, 0x1.251c14p-7f, 0x1.982d72p-8f, 0x1.16bc9cp-8f, 0x1.757e6ep-9f},
    {0x1.d81848p-19f, 0x1.93a36ep-4f, 0x1.85c466p-3f, 0x1.138ca6p-2f, 0x1.51f8e0p-2f, 0x1.7b071ap-2f, 0x1.8d8052p-2f, 0x1.8a3554p-2f, 0x1.73aa14p-2f, 0x1.4db3dep-2f, 0x1.1ceec6p-2f, 0x1.cc64f6p-3f, 0x1.5c299ep-3f, 0x1.e1fb04p-4f, 0x1.21e4ccp-4f, 0x1.ffa69ap-6f, 0x1.34cf5cp-18f, -0x1.768c00p-6f, -0x1.36ca0ap-5f, -0x1.7b624ap-5f, -0x1.93da12p-5f, -0x1.8b7a30p-5f, -0x1.6ce8b4p-5f, -0x1.41673cp-5f, -0x1.104b0ep-5f, -0x1.be1234p-6f, -0x1.628270p-6f, -0x1.120aaep-6f, -0x1.9cdcd2p-7f, -0x1.2f81bap-7f, -0x1.b3fb30p-8f, -0x1.3239e8p-8f},
    {0x1.102bc0p-2f, 0x1.06d70cp-2f, 0x1.d6b134p-3f, 0x1.814054p-3f, 0x1.15e4ccp-3f, 0x1.3dae22p-4f, 0x1.3774f2p-6f, -0x1.1f1c36p-5f, -0x1.4a6336p-4f, -0x1.d72c0cp-4f, -0x1.184e60p-3f, -0x1.2b7a66p-3f, -0x1.27aa84p-3f, -0x1.11291ep-3f, -0x1.daa236p-4f, -0x1.8358d4p-4f, -0x1.26e364p-4f, -0x1.9b1d52p-5f, -0x1.f76948p-6f, -0x1.dc5aaap-7f, -0x1.076292p-9f, 0x1.c37352p-8f, 0x1.99ec1ap-7f, 0x1.f96a76p-7f, 0x1.0a41e0p-6f, 0x1.ffb97ap-7f, 0x1.cd4868p-7f, 0x1.8b9b4ap-7f, 0x1.4597d2p-7f, 0x1.029764p-7f, 0x1.8de97ep-8f, 0x1.2963e2p-8f},
    {0x1.a654f4p-9f, -0x1.e39056p-6f, -0x1.205a6ap-4f, -0x1.8c965cp-4f, -0x1.c0eef0p-4f, -0x1.e68250p-4f, -0x1.d31560p-4f, -0x1.9d5e00p-4f, -0x1.478326p-4f, -0x1.c7b424p-5f, -0x1.fbe7a6p-6f, -0x1.039fa4p-7f, 0x1.6fcd2ep-7f, 0x1.df4d26p-6f, 0x1.43c258p-5f, 0x1.7cc534p-5f, 0x1.66bb2cp-5f, 0x1.5cc3b8p-5f, 0x1.247500p-5f, 0x1.cf646ep-6f, 0x1.5d94c8p-6f, 0x1.e0a45ep-7f, 0x1.13ecacp-7f, 0x1.0216bcp-8f, 0x1.8295aap-16f, -0x1.4e7d00p-9f, -0x1.ecb96ep-9f, -0x1.1241c6p-8f, -0x1.1225d0p-8f, -0x1.fadb80p-9f, -0x1.b7048cp-9f, -0x1.69b17ep-9f},
    {-0x1.4b6022p-4f, -0x1.bf996ap-5f, -0x1.804b72p-5f, -0x1.0bae0ep-5f, -0x1.29cce4p-6f, 0x1.8e44a4p-13f, 0x1.048b8ep-6f, 0x1.a3f1bcp-6f, 0x1.2dc944p-5f, 0x1.47f6d4p-5f, 0x1.4a0182p-5f, 0x1.2f9daap-5f, 0x1.0511f4p-5f, 0x1.5e3f70p-6f, 0x1.851704p-7f, 0x1.3420f8p-10f, -0x1.04635cp-10f, -0x1.3cf9aap-7f, -0x1.5f8216p-7f, -0x1.5a0ae0p-7f, -0x1.792e42p-7f, -0x1.768b1ap-7f, -0x1.2096a6p-7f, -0x1.efb618p-8f, -0x1.3d6c06p-8f, -0x1.27914ap-9f, -0x1.4a7e34p-10f, -0x1.f0f108p-12f, 0x1.83c67cp-13f, 0x1.5a7ceep-11f, 0x1.ce9036p-11f, 0x1.e80408p-11f},
};
alignas(64) constexpr float kGeluTanhNear[6][32] = {
    {0x1.000000p-1f, 0x1.cd1196p-2f, 0x1.9aee04p-2f, 0x1.6a5698p-2f, 0x1.3bfa4cp-2f, 0x1.106e68p-2f, 0x1.d05230p-3f, 0x1.86fc76p-3f, 0x1.453d22p-3f, 0x1.0b3234p-3f, 0x1.b1795ep-4f, 0x1.5b13b6p-4f, 0x1.123c8ep-4f, 0x1.ab8590p-5f, 0x1.48a34ap-5f, 0x1.f21500p-6f, 0x1.73ef8ap-6f, 0x1.118edep-6f, 0x1.8c25e8p-7f, 0x1.1a396ep-7f, 0x1.8b6cccp-8f, 0x1.103a64p-8f, 0x1.701acep-9f, 0x1.e87a7ep-10f, 0x1.3dd716p-10f, 0x1.95510ap-11f, 0x1.fa1996p-12f, 0x1.352504p-12f, 0x1.71379ap-13f, 0x1.aebd2cp-14f, 0x1.ea7566p-15f, 0x1.104e78p-15f},
    {-0x1.988454p-2f, -0x1.955280p-2f, -0x1.8be3b0p-2f, -0x1.7ca8d0p-2f, -0x1.685438p-2f, -0x1.4fcc06p-2f, -0x1.341904p-2f, -0x1.1653f8p-2f, -0x1.ef2634p-3f, -0x1.b1b338p-3f, -0x1.7614e2p-3f, -0x1.3dbe84p-3f, -0x1.09c7acp-3f, -0x1.b5d624p-4f, -0x1.6318e4p-4f, -0x1.1b86dep-4f, -0x1.bda580p-5f, -0x1.58a19ap-5f, -0x1.06289ap-5f, -0x1.882992p-6f, -0x1.204310p-6f, -0x1.a03e64p-7f, -0x1.26ffdap-7f, -0x1.9a2f3ep-8f, -0x1.178bf2p-8f, -0x1.753c28p-9f, -0x1.e7bfcap-10f, -0x1.37b01ap-10f, -0x1.8546c2p-11f, -0x1.dab3b6p-12f, -0x1.1a5e3cp-12f, -0x1.477186p-13f},
    {0x1.d5aa24p-20f, 0x1.97ba0cp-6f, 0x1.8ded1ap-5f, 0x1.1ea6ecp-4f, 0x1.6966d4p-4f, 0x1.a4addap-4f, 0x1.ceb248p-4f, 0x1.e70baep-4f, 0x1.ee6442p-4f, 0x1.e6794ep-4f, 0x1.d18ab4p-4f, 0x1.b271b6p-4f, 0x1.8c0d36p-4f, 0x1.61393ap-4f, 0x1.348fb6p-4f, 0x1.0834a4p-4f, 0x1.bbbdf8p-5f, 0x1.6d9ac0p-5f, 0x1.279c64p-5f, 0x1.d5107ep-6f, 0x1.6d24f0p-6f, 0x1.16d140p-6f, 0x1.a178e0p-7f, 0x1.324a78p-7f, 0x1.b82a3cp-8f, 0x1.358f00p-8f, 0x1.a9d796p-9f, 0x1.1e3ffcp-9f, 0x1.77c736p-10f, 0x1.e152fep-11f, 0x1.2c8186p-11f, 0x1.6d7f4ap-12f},
    {0x1.11591ap-4f, 0x1.0b1bdcp-4f, 0x1.f03d76p-5f, 0x1.b4a2e8p-5f, 0x1.67abc2p-5f, 0x1.0ed8dep-5f, 0x1.61156cp-6f, 0x1.4d6a36p-7f, -0x1.b88bcep-12f, -0x1.3da7f6p-7f, -0x1.1a9f4ep-6f, -0x1.7803bap-6f, -0x1.b60092p-6f, -0x1.d6aed2p-6f, -0x1.de43a6p-6f, -0x1.d0e64ep-6f, -0x1.b3e2bcp-6f, -0x1.8c02bcp-6f, -0x1.5e01f4p-6f, -0x1.2d54c2p-6f, -0x1.fa657cp-7f, -0x1.9fb41ap-7f, -0x1.4d6a8cp-7f, -0x1.055f2ep-7f, -0x1.906b40p-8f, -0x1.2ba434p-8f, -0x1.b5dc16p-9f, -0x1.382f8cp-9f, -0x1.b2102ep-10f, -0x1.261064p-10f, -0x1.83e9e8p-11f, -0x1.f1d7fap-12f},
    {0x1.a23244p-10f, -0x1.ada3aep-7f, -0x1.3f54f4p-6f, -0x1.1dc816p-6f, -0x1.b7c0f6p-7f, -0x1.3cfe62p-6f, -0x1.767a68p-6f, -0x1.89f7f2p-6f, -0x1.549850p-6f, -0x1.3de10ap-6f, -0x1.d89c68p-7f, -0x1.6c023cp-7f, -0x1.a43e92p-8f, -0x1.cf621ep-10f, 0x1.5b4f30p-11f, 0x1.723cccp-9f, 0x1.2c8744p-8f, 0x1.779a86p-8f, 0x1.773bd2p-8f, 0x1.89ca50p-8f, 0x1.79c6b2p-8f, 0x1.56a0c0p-8f, 0x1.357b3ep-8f, 0x1.0932a4p-8f, 0x1.c0011ap-9f, 0x1.6af522p-9f, 0x1.1e7888p-9f, 0x1.b5ed06p-10f, 0x1.47978cp-10f, 0x1.d95d22p-11f, 0x1.4df112p-11f, 0x1.c850acp-12f},
    {-0x1.521438p-6f, -0x1.e8aa28p-9f, -0x1.51888ep-12f, -0x1.6a2c70p-8f, -0x1.5e95b8p-7f, -0x1.978b68p-8f, 0x1.a1001ep-10f, 0x1.1ba47ep-8f, 0x1.96114cp-8f, 0x1.40e5d2p-7f, 0x1.d7f0a8p-8f, 0x1.3a4df6p-7f, 0x1.fcd202p-8f, 0x1.c800b2p-9f, 0x1.f927e8p-9f, 0x1.2da88ep-9f, 0x1.8208b0p-10f, -0x1.1d638cp-15f, 0x1.017ef2p-10f, -0x1.98a644p-13f, -0x1.75dacap-11f, -0x1.342adcp-11f, -0x1.f6fe4ap-11f, -0x1.06a1f6p-10f, -0x1.20a62cp-10f, -0x1.080506p-10f, -0x1.d54ad4p-11f, -0x1.83bbc4p-11f, -0x1.46e92ep-11f, -0x1.f67204p-12f, -0x1.85872cp-12f, -0x1.201862p-12f},
};
alignas(64) constexpr float kGeluTanhSlopeNear[6][32] = {
    {0x1.000000p-1f, 0x1.9a6746p-2f, 0x1.37f518p-2f, 0x1.b72e94p-3f, 0x1.0fa05ep-3f, 0x1.f47722p-5f, 0x1.16546ep-10f, -0x1.8059eep-5f, -0x1.53d226p-4f, -0x1.b96ed8p-4f, -0x1.f5bad6p-4f, -0x1.075c1cp-3f, -0x1.058d3cp-3f, -0x1.f1b930p-4f, -0x1.c919eap-4f, -0x1.97179ep-4f, -0x1.60a99ep-4f, -0x1.29c7fap-4f, -0x1.ead1e2p-5f, -0x1.8b2302p-5f, -0x1.36e63ap-5f, -0x1.de434cp-6f, -0x1.679c74p-6f, -0x1.084a4ep-6f, -0x1.7b9708p-7f, -0x1.0a41eep-7f, -0x1.6caa3ap-8f, -0x1.e7548cp-9f, -0x1.3d8a70p-9f, -0x1.93470cp-10f, -0x1.f2c95cp-11f, -0x1.2c3112p-11f},
    {-0x1.988454p-1f, -0x1.9223eep-1f, -0x1.7f7632p-1f, -0x1.61c95cp-1f, -0x1.3b23b8p-1f, -0x1.0e0ec8p-1f, -0x1.baaed0p-2f, -0x1.579638p-2f, -0x1.efeb64p-3f, -0x1.402976p-3f, -0x1.4c846cp-4f, -0x1.315042p-6f, 0x1.f40294p-6f, 0x1.1055f6p-4f, 0x1.71c83cp-4f, 0x1.a7b9dap-4f, 0x1.b9db3ap-4f, 0x1.b04e52p-4f, 0x1.92f4f8p-4f, 0x1.68efd2p-4f, 0x1.384d18p-4f, 0x1.05e170p-4f, 0x1.aa865cp-5f, 0x1.51be48p-5f, 0x1.043d9cp-5f, 0x1.866150p-6f, 0x1.1d07f0p-6f, 0x1.951faep-7f, 0x1.182610p-7f, 0x1.78dc38p-8f, 0x1.ecdbc0p-9f, 0x1.39254cp-9f},
    {0x1.d81208p-19f, 0x1.95c3e2p-4f, 0x1.876678p-3f, 0x1.146394p-2f, 0x1.528beep-2f, 0x1.7afea6p-2f, 0x1.8cb1eep-2f, 0x1.88a0fcp-2f, 0x1.7185f2p-2f, 0x1.4b6292p-2f, 0x1.1aead2p-2f, 0x1.c9df64p-3f, 0x1.5bc1f6p-3f, 0x1.e5e66ep-4f, 0x1.29f28ep-4f, 0x1.158538p-5f, 0x1.78807ep-9f, -0x1.4b71f4p-6f, -0x1.2659a4p-5f, -0x1.71e878p-5f, -0x1.91ce64p-5f, -0x1.90210cp-5f, -0x1.7688b6p-5f, -0x1.4dd56ap-5f, -0x1.1d6bf4p-5f, -0x1.d622d6p-6f, -0x1.75f742p-6f, -0x1.1fc2f0p-6f, -0x1.accceep-7f, -0x1.357b7ep-7f, -0x1.b0ce6ap-8f, -0x1.252ecep-8f},
    {0x1.1184d6p-2f, 0x1.07fe28p-2f, 0x1.d7cd3ep-3f, 0x1.809a40p-3f, 0x1.137a30p-3f, 0x1.362898p-4f, 0x1.14d708p-6f, -0x1.2e2bc6p-5f, -0x1.4e99f0p-4f, -0x1.d69314p-4f, -0x1.15680ep-3f, -0x1.266b76p-3f, -0x1.216c5ep-3f, -0x1.0b0f28p-3f, -0x1.d1268cp-4f, -0x1.7e5fe4p-4f, -0x1.270f46p-4f, -0x1.a4f7a6p-5f, -0x1.0c5308p-5f, -0x1.15c9acp-6f, -0x1.1f3914p-8f, 0x1.44158ap-8f, 0x1.6fe0e0p-7f, 0x1.e6ff08p-7f, 0x1.0bdf22p-6f, 0x1.0993a8p-6f, 0x1.e9ee6ep-7f, 0x1.ab0b44p-7f, 0x1.62bb40p-7f, 0x1.1a2cf6p-7f, 0x1.af2f18p-8f, 0x1.3cfa00p-8f},
    {0x1.a64a74p-9f, -0x1.64f78ap-5f, -0x1.35c530p-4f, -0x1.8b885cp-4f, -0x1.d56320p-4f, -0x1.e7502ap-4f, -0x1.d2f8e6p-4f, -0x1.9b0df2p-4f, -0x1.443aaap-4f, -0x1.bc65e2p-5f, -0x1.e06e90p-6f, -0x1.870586p-8f, 0x1.061622p-6f, 0x1.f09d04p-6f, 0x1.3ec43ep-5f, 0x1.5e64ecp-5f, 0x1.4f8e16p-5f, 0x1.46e960p-5f, 0x1.21a99cp-5f, 0x1.d55fb4p-6f, 0x1.5c06fcp-6f, 0x1.fa9064p-7f, 0x1.327e56p-7f, 0x1.2809cep-8f, 0x1.4f0d68p-10f, -0x1.6fb3a6p-10f, -0x1.a81ff0p-9f, -0x1.160084p-8f, -0x1.28a2cap-8f, -0x1.1aa762p-8f, -0x1.f35498p-9f, -0x1.9e00fap-9f},
    {-0x1.50f56ep-4f, -0x1.e4150ep-5f, -0x1.a2278cp-5f, -0x1.fc4858p-6f, -0x1.0f71dep-6f, -0x1.68057ap-11f, 0x1.2859c8p-6f, 0x1.cdb848p-6f, 0x1.3ccd40p-5f, 0x1.536dbap-5f, 0x1.4cb94ep-5f, 0x1.1fecaap-5f, 0x1.9d426ap-6f, 0x1.17a57ep-6f, 0x1.2f2f84p-7f, 0x1.6b27b0p-9f, 0x1.43ed08p-12f, -0x1.d05954p-8f, -0x1.5b8fb8p-7f, -0x1.6cc11ap-7f, -0x1.1f4680p-7f, -0x1.30721ep-7f, -0x1.f36812p-8f, -0x1.80e61cp-8f, -0x1.6228f6p-8f, -0x1.0b82a6p-8f, -0x1.309688p-9f, -0x1.bffbdap-11f, 0x1.b0545cp-14f, 0x1.751ffap-11f, 0x1.04b2dep-10f, 0x1.1aef02p-10f},
};
alignas(64) constexpr float kSiluNear[6][32] = {
    {0x1.000000p-1f, 0x1.c054cep-2f, 0x1.829a06p-2f, 0x1.488562p-2f, 0x1.136562p-2f, 0x1.c81702p-3f, 0x1.759b84p-3f, 0x1.2f335ep-3f, 0x1.e84152p-4f, 0x1.868d2ap-4f, 0x1.36b712p-4f, 0x1.ec3ad6p-5f, 0x1.848344p-5f, 0x1.31c828p-5f, 0x1.e04068p-6f, 0x1.787614p-6f, 0x1.26afa2p-6f, 0x1.ccd642p-7f, 0x1.680528p-7f, 0x1.19112ap-7f, 0x1.b69f68p-8f, 0x1.561b2ep-8f, 0x1.0abd94p-8f, 0x1.9fd992p-9f, 0x1.441778p-9f, 0x1.f914fap-10f, 0x1.8986a2p-10f, 0x1.329482p-10f, 0x1.dda738p-11f, 0x1.74125ap-11f, 0x1.21d0b2p-11f, 0x1.c378cap-12f},
    {-0x1.000000p-2f, -0x1.f81526p-3f, -0x1.e149a2p-3f, -0x1.be3fbcp-3f, -0x1.92a948p-3f, -0x1.6284c2p-3f, -0x1.3173b2p-3f, -0x1.02500ap-3f, -0x1.ae0dc0p-4f, -0x1.615004p-4f, -0x1.1f2514p-4f, -0x1.cea744p-5f, -0x1.721652p-5f, -0x1.265e34p-5f, -0x1.d22ca2p-6f, -0x1.6fcfa8p-6f, -0x1.2162c2p-6f, -0x1.c65b1cp-7f, -0x1.64108ap-7f, -0x1.16a7fcp-7f, -0x1.b3afe2p-8f, -0x1.545202p-8f, -0x1.09a7a6p-8f, -0x1.9e87d0p-9f, -0x1.434a52p-9f, -0x1.f81bdap-10f, -0x1.88ef66p-10f, -0x1.3238b8p-10f, -0x1.dd37d0p-11f, -0x1.73cec2p-11f, -0x1.21a7aep-11f, -0x1.c34706p-12f},
    {-0x1.7f5edcp-29f, 0x1.f56396p-7f, 0x1.d76e4cp-6f, 0x1.3fc650p-5f, 0x1.741bcep-5f, 0x1.89406ep-5f, 0x1.83fea4p-5f, 0x1.6bac28p-5f, 0x1.4789a4p-5f, 0x1.1dec2ap-5f, 0x1.e7227ep-6f, 0x1.9710b8p-6f, 0x1.4efb08p-6f, 0x1.1064a6p-6f, 0x1.b6d8cep-7f, 0x1.5ee4fcp-7f, 0x1.16f964p-7f, 0x1.b98ffep-8f, 0x1.5c3c26p-8f, 0x1.11dee8p-8f, 0x1.adda3cp-9f, 0x1.50c108p-9f, 0x1.077f84p-9f, 0x1.9be6cep-10f, 0x1.41add8p-10f, 0x1.f6286ep-11f, 0x1.87c472p-11f, 0x1.317ed8p-11f, 0x1.dc5bd4p-12f, 0x1.7344aap-12f, 0x1.21531ap-12f, 0x1.c2e0e8p-13f},
    {0x1.5555f6p-6f, 0x1.407e74p-6f, 0x1.072f78p-6f, 0x1.6de9b6p-7f, 0x1.821af6p-8f, 0x1.236526p-10f, -0x1.56533cp-9f, -0x1.4f2828p-8f, -0x1.a8751ep-8f, -0x1.c66d12p-8f, -0x1.bb8a6ap-8f, -0x1.97e2f0p-8f, -0x1.67b304p-8f, -0x1.33dd00p-8f, -0x1.01b9d2p-8f, -0x1.a84c1ap-9f, -0x1.58f646p-9f, -0x1.15af3ap-9f, -0x1.bbcd4ap-10f, -0x1.609438p-10f, -0x1.16de70p-10f, -0x1.b78e30p-11f, -0x1.599a4cp-11f, -0x1.0f1e20p-11f, -0x1.a8a1d2p-12f, -0x1.4c2ae4p-12f, -0x1.03a0f8p-12f, -0x1.956610p-13f, -0x1.3c7074p-13f, -0x1.ed9280p-14f, -0x1.80e83ep-14f, -0x1.2c106cp-14f},
    {-0x1.5e8f48p-19f, -0x1.305cb2p-9f, -0x1.0a8e2cp-8f, -0x1.39ed02p-8f, -0x1.3a1570p-8f, -0x1.2451bep-8f, -0x1.83edb8p-9f, -0x1.0a92a8p-9f, -0x1.f51bf6p-11f, 0x1.1c77d2p-19f, 0x1.01c7fep-11f, 0x1.47bd6cp-11f, 0x1.9f13b6p-11f, 0x1.9b20acp-11f, 0x1.7f69ccp-11f, 0x1.640f44p-11f, 0x1.26de32p-11f, 0x1.f8c616p-12f, 0x1.99849ep-12f, 0x1.4d3a56p-12f, 0x1.091ebep-12f, 0x1.b2b896p-13f, 0x1.48860ep-13f, 0x1.0793e8p-13f, 0x1.ad218ap-14f, 0x1.4b6d44p-14f, 0x1.f509acp-15f, 0x1.9bd328p-15f, 0x1.350e2ap-15f, 0x1.f6fb38p-16f, 0x1.89c4d8p-16f, 0x1.307054p-16f},
    {-0x1.0ef730p-9f, -0x1.f702f4p-10f, -0x1.6534fap-10f, -0x1.3019bap-11f, 0x1.6ce840p-13f, 0x1.0bfdb0p-10f, 0x1.d77c78p-11f, 0x1.072c32p-10f, 0x1.a85a4ep-11f, 0x1.95726cp-12f, 0x1.ac8608p-13f, 0x1.8dfabcp-13f, 0x1.52e596p-15f, -0x1.ae6484p-16f, -0x1.de96fcp-15f, -0x1.a6850cp-14f, -0x1.36d338p-14f, -0x1.528754p-14f, -0x1.0b77c4p-14f, -0x1.d4add2p-15f, -0x1.7e4e98p-15f, -0x1.731006p-15f, -0x1.d466fap-16f, -0x1.83f952p-16f, -0x1.6d33dap-16f, -0x1.15af32p-16f, -0x1.5a4d82p-17f, -0x1.604b46p-17f, -0x1.b6acdep-18f, -0x1.be0d68p-18f, -0x1.4a9cbap-18f, -0x1.f76b56p-19f},
};
alignas(64) constexpr float kSiluSlopeNear[6][32] = {
    {0x1.000000p-1f, 0x1.81522ap-2f, 0x1.0a479ep-2f, 0x1.425af6p-3f, 0x1.2842f8p-4f, 0x1.9e21d4p-8f, -0x1.52481ep-5f, -0x1.29b166p-4f, -0x1.73da30p-4f, -0x1.9466dcp-4f, -0x1.97259ep-4f, -0x1.860894p-4f, -0x1.68dfdap-4f, -0x1.457500p-4f, -0x1.1fd6f4p-4f, -0x1.f56a50p-5f, -0x1.af6db4p-5f, -0x1.6f8b3ep-5f, -0x1.369152p-5f, -0x1.04a332p-5f, -0x1.b2f400p-6f, -0x1.6924d6p-6f, -0x1.2a971ep-6f, -0x1.ebecd8p-7f, -0x1.93e99cp-7f, -0x1.4ab322p-7f, -0x1.0e11b0p-7f, -0x1.b81a96p-8f, -0x1.65dbf0p-8f, -0x1.227114p-8f, -0x1.d6a63ap-9f, -0x1.7cbdb4p-9f},
    {-0x1.000000p-1f, -0x1.f03f40p-2f, -0x1.c3d18ap-2f, -0x1.8247bcp-2f, -0x1.359f76p-2f, -0x1.cf446ep-3f, -0x1.3fe484p-3f, -0x1.8cda84p-4f, -0x1.9a1bfap-5f, -0x1.fa2618p-7f, 0x1.1549b4p-7f, 0x1.84301ap-6f, 0x1.08c6e6p-5f, 0x1.2889fcp-5f, 0x1.2dcdfcp-5f, 0x1.22246cp-5f, 0x1.0c90e4p-5f, 0x1.e3fe4cp-6f, 0x1.ab79fcp-6f, 0x1.73cc8ap-6f, 0x1.3f79aep-6f, 0x1.0fd8d0p-6f, 0x1.caf2fap-7f, 0x1.80d75cp-7f, 0x1.40e466p-7f, 0x1.0a4a48p-7f, 0x1.b82290p-8f, 0x1.6a6deep-8f, 0x1.29801cp-8f, 0x1.e70a80p-9f, 0x1.8dacdap-9f, 0x1.43faacp-9f},
    {-0x1.7901c0p-26f, 0x1.f03722p-5f, 0x1.c4468ap-4f, 0x1.234f2ap-3f, 0x1.3b48dap-3f, 0x1.2f7baap-3f, 0x1.0aedc2p-3f, 0x1.b388dap-4f, 0x1.4c28e0p-4f, 0x1.da44ecp-5f, 0x1.3ad172p-5f, 0x1.7c02c2p-6f, 0x1.874848p-7f, 0x1.0afd76p-8f, -0x1.23ffdep-10f, -0x1.198510p-8f, -0x1.8be07ap-8f, -0x1.bd9608p-8f, -0x1.c51bc6p-8f, -0x1.b267b0p-8f, -0x1.910104p-8f, -0x1.685660p-8f, -0x1.3d92e2p-8f, -0x1.13a4c8p-8f, -0x1.d8fe5ap-9f, -0x1.91f4dap-9f, -0x1.52f190p-9f, -0x1.1bfd00p-9f, -0x1.d951acp-10f, -0x1.888dfcp-10f, -0x1.444ea0p-10f, -0x1.0af998p-10f},
    {0x1.555690p-4f, 0x1.3640e8p-4f, 0x1.c6b4b0p-5f, 0x1.d94ba8p-6f, 0x1.847eacp-9f, -0x1.17fa36p-6f, -0x1.ddb502p-6f, -0x1.147b6ap-5f, -0x1.0cf0c0p-5f, -0x1.d596a8p-6f, -0x1.7b2e34p-6f, -0x1.1f9856p-6f, -0x1.9ca142p-7f, -0x1.180a3ep-7f, -0x1.649692p-8f, -0x1.9fa8aep-9f, -0x1.9ebbd2p-10f, -0x1.0fac7ep-11f, 0x1.4e2872p-13f, 0x1.261886p-11f, 0x1.962a84p-11f, 0x1.c3d096p-11f, 0x1.c8183ep-11f, 0x1.b286d4p-11f, 0x1.8f5b2ap-11f, 0x1.65a040p-11f, 0x1.3a4666p-11f, 0x1.1048cep-11f, 0x1.d28c96p-12f, 0x1.8bf1e6p-12f, 0x1.4d9e8cp-12f, 0x1.175cf4p-12f},
    {-0x1.580572p-16f, -0x1.d0eb52p-7f, -0x1.8d0d76p-6f, -0x1.be5a3ap-6f, -0x1.804578p-6f, -0x1.08bc88p-6f, -0x1.08e4b0p-7f, -0x1.838e48p-10f, 0x1.6d382ap-9f, 0x1.543fd2p-8f, 0x1.7ad1d8p-8f, 0x1.5a79eep-8f, 0x1.276aacp-8f, 0x1.d2b7bcp-9f, 0x1.55e152p-9f, 0x1.e88712p-10f, 0x1.52ea96p-10f, 0x1.a5d6f0p-11f, 0x1.14fb32p-11f, 0x1.0490dap-12f, 0x1.4a0388p-13f, 0x1.8b9936p-16f, 0x1.08ea18p-17f, -0x1.1c8cccp-14f, -0x1.208202p-14f, -0x1.59faacp-14f, -0x1.7a8668p-14f, -0x1.59beaep-14f, -0x1.1ffeecp-14f, -0x1.1d9ccap-14f, -0x1.c7538ep-15f, -0x1.7a70d2p-15f},
    {-0x1.95749ep-7f, -0x1.5182fcp-7f, -0x1.4c0102p-8f, 0x1.85ecdcp-11f, 0x1.45f43cp-8f, 0x1.ae8002p-8f, 0x1.9062c4p-8f, 0x1.220e78p-8f, 0x1.558860p-9f, 0x1.023032p-10f, -0x1.5da236p-16f, -0x1.00f126p-11f, -0x1.82dceep-11f, -0x1.903132p-11f, -0x1.4d7a82p-11f, -0x1.05f00ap-11f, -0x1.a26d9ep-12f, -0x1.21d36ep-12f, -0x1.c51fd6p-13f, -0x1.d42c38p-14f, -0x1.c6246cp-14f, -0x1.75e1aep-15f, -0x1.f8181ap-15f, -0x1.a8a456p-17f, -0x1.be28fap-17f, -0x1.98672ep-22f, 0x1.375572p-17f, 0x1.2337f2p-17f, 0x1.152864p-18f, 0x1.3d29b4p-17f, 0x1.79863ap-18f, 0x1.951cd6p-19f},
};
SKETCHCORE_AVX512 inline __m512 lookup(const float* column, __m512i index) {
  return _mm512_permutex2var_ps(_mm512_load_ps(column), index, _mm512_load_ps(column + 16));
}

/// The operations of cpu/activation_far_path.hpp on 16 float lanes (8 double).
struct Avx512 {
  using F = __m512;
  using D = __m512d;
  using M = __mmask16;
  using I = __m512i;
  SKETCHCORE_AVX512 static F set1(float v) { return _mm512_set1_ps(v); }
  SKETCHCORE_AVX512 static D set1(double v) { return _mm512_set1_pd(v); }
  SKETCHCORE_AVX512 static F zero() { return _mm512_setzero_ps(); }
  SKETCHCORE_AVX512 static F add(F a, F b) { return _mm512_add_ps(a, b); }
  SKETCHCORE_AVX512 static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  SKETCHCORE_AVX512 static D sub(D a, D b) { return _mm512_sub_pd(a, b); }
  SKETCHCORE_AVX512 static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  SKETCHCORE_AVX512 static D mul(D a, D b) { return _mm512_mul_pd(a, b); }
  SKETCHCORE_AVX512 static F div(F a, F b) { return _mm512_div_ps(a, b); }
  SKETCHCORE_AVX512 static F min(F a, F b) { return _mm512_min_ps(a, b); }  // b where a is NaN
  SKETCHCORE_AVX512 static F abs(F a) { return _mm512_abs_ps(a); }
  SKETCHCORE_AVX512 static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }   // a·b + c
  SKETCHCORE_AVX512 static D fma(D a, D b, D c) { return _mm512_fmadd_pd(a, b, c); }
  SKETCHCORE_AVX512 static F fms(F a, F b, F c) { return _mm512_fmsub_ps(a, b, c); }   // a·b − c
  SKETCHCORE_AVX512 static F fnma(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); } // c − a·b
  SKETCHCORE_AVX512 static M less(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  SKETCHCORE_AVX512 static M greater_or_nan(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_NLE_UQ); }
  static M both(M a, M b) { return a & b; }
  static M first_not_second(M a, M b) { return a & static_cast<M>(~b); }
  SKETCHCORE_AVX512 static F select(M m, F yes, F no) { return _mm512_mask_blend_ps(m, no, yes); }
  SKETCHCORE_AVX512 static F scale(F q, F n) { return _mm512_scalef_ps(q, n); }  // q·2^n, one rounding
  SKETCHCORE_AVX512 static I truncate(F a) { return _mm512_cvttps_epi32(a); }
  SKETCHCORE_AVX512 static F to_float(I a) { return _mm512_cvtepi32_ps(a); }
  SKETCHCORE_AVX512 static F lookup32(const float* column, I index) { return lookup(column, index); }
  SKETCHCORE_AVX512 static D low_half(F v) { return _mm512_cvtps_pd(_mm512_castps512_ps256(v)); }
  SKETCHCORE_AVX512 static D high_half(F v) {
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  }
  SKETCHCORE_AVX512 static F join(D low, D high) {  // each rounded to float once
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(low))),
                                               _mm256_castps_pd(_mm512_cvtpd_ps(high)), 1));
  }
};

using NearTable = float[6][32];

/// F(h) or D(h) for h in [0, 31.5·step): the polynomial of h's interval k = round(h/step) in
/// u = h − k·step (exact). The magic-number rounding leaves k in the low bits of `rounded`, which
/// the permutes read as their index.
template <const NearTable& kTable, int kPerUnit>
SKETCHCORE_AVX512 inline __m512 near_zero(__m512 h) {
  const __m512 magic = _mm512_set1_ps(0x1.8p23f);
  const __m512 rounded = _mm512_fmadd_ps(h, _mm512_set1_ps(float(kPerUnit)), magic);
  const __m512i index = _mm512_castps_si512(rounded);
  const __m512 u = _mm512_fmadd_ps(_mm512_sub_ps(rounded, magic), _mm512_set1_ps(-1.0f / kPerUnit), h);
  __m512 r = lookup(kTable[5], index);
  for (int j = 4; j >= 0; --j) r = _mm512_fmadd_ps(r, u, lookup(kTable[j], index));
  return r;
}

/// z·F(h) for z < 0, z·(1 − F(h)) for z ≥ 0 (GELU: F = Φ(−h); SiLU: σ(−h)).
SKETCHCORE_AVX512 inline __m512 times_near(__m512 z, __m512 f) {
  const __mmask16 positive = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_GE_OQ);
  return _mm512_mul_ps(z, _mm512_mask_sub_ps(f, positive, _mm512_set1_ps(1.0f), f));
}

/// D(h) for z < 0, 1 − D(h) for z ≥ 0.
SKETCHCORE_AVX512 inline __m512 slope_near(__m512 z, __m512 d) {
  const __mmask16 positive = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_GE_OQ);
  return _mm512_mask_sub_ps(d, positive, _mm512_set1_ps(1.0f), d);
}

/// An activation (kSlope false) or its derivative (true) by the near-zero table when every lane
/// of the vector lies within it (below 31.5 steps, where round(h/step) ≤ 31; NaN does not),
/// else by the far path.
template <const NearTable& kTable, int kPerUnit, bool kSlope, __m512 (*kFull)(__m512)>
SKETCHCORE_AVX512 inline __m512 near_or_full(__m512 z) {
  const __m512 h = _mm512_abs_ps(z);
  if (_mm512_cmp_ps_mask(h, _mm512_set1_ps(31.5f / kPerUnit), _CMP_LT_OQ) != __mmask16(0xFFFF)) return kFull(z);
  const __m512 f = near_zero<kTable, kPerUnit>(h);
  return kSlope ? slope_near(z, f) : times_near(z, f);
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

/// g[j] = dy[j]·act′(g[j] + bias[j]). The backward's G and dL/dy come from beyond L2 (each chunk's
/// G is 4 MiB), and each vector's derivative is long enough that the out-of-order window holds few
/// loads: a prefetch 2 KiB ahead took the fused GELU backward from 1.03–1.05× to 1.06–1.07× its
/// unfused counterpart (bench/test_bench_epilogue.py; it did nothing measurable for the forward).
template <__m512 (*kDerivative)(__m512)>
SKETCHCORE_AVX512 void backward(const float* dy, float* g, const float* bias, std::int64_t n) {
  for (std::int64_t j = 0; j < n; j += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(g + j + 512), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(dy + j + 512), _MM_HINT_T0);
    const __mmask16 k = lanes(n - j);
    const __m512 d = kDerivative(argument(g, bias, j, k));
    _mm512_mask_storeu_ps(g + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, dy + j), d));
  }
}

}  // namespace

const ActivationKernels kAvx512ActivationKernels = {
    forward<near_or_full<kGeluNear, 8, false, far_path::gelu<Avx512>>>,
    backward<near_or_full<kGeluSlopeNear, 8, true, far_path::gelu_derivative<Avx512>>>,
    forward<near_or_full<kGeluTanhNear, 8, false, far_path::gelu_tanh<Avx512>>>,
    backward<near_or_full<kGeluTanhSlopeNear, 8, true, far_path::gelu_tanh_derivative<Avx512>>>,
    forward<near_or_full<kSiluNear, 4, false, far_path::silu<Avx512>>>,
    backward<near_or_full<kSiluSlopeNear, 4, true, far_path::silu_derivative<Avx512>>>,
};

#endif

}  // namespace sketchcore::detail
