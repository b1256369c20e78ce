/* A C application that embeds an installed sketchcore through its C ABI (sketchcore/sketchcore.h):
 * one sketched layer y = relu(0.5 · Σ_t (x·S_t)·U_t + b) of T = 2 terms, checked against a plain
 * loop. Prints "max abs error: <e>", the FNV-1a hash of the output's bytes (examples/sketched_layer.cpp
 * prints the hash of the same layer through the C++ API: the two must be equal) and "OK".
 *   cmake -S examples/c -B build/c-example -DCMAKE_PREFIX_PATH=<install prefix> */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <sketchcore/sketchcore.h>

enum { BATCH = 8, D_IN = 32, K = 4, TERMS = 2, D_OUT = 16 };

/* The inputs, from the generator the C++ example uses too: uniform in [-1, 1). */
static float next_value(uint64_t* state) {
  *state = *state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(*state >> 40) / 8388608.0 - 1.0);
}

int main(void) {
  static float x[BATCH * D_IN], S[TERMS * D_IN * K], U[TERMS * K * D_OUT], bias[D_OUT], y[BATCH * D_OUT];
  const int64_t x_shape[2] = {BATCH, D_IN}, S_shape[3] = {TERMS, D_IN, K}, U_shape[3] = {TERMS, K, D_OUT};
  const int64_t b_shape[1] = {D_OUT}, y_shape[2] = {BATCH, D_OUT};
  sketchcore_tensor tx = {0}, tS = {0}, tU = {0}, tb = {0}, ty = {0};
  sketchcore_epilogue epilogue;
  sketchcore_build_info info;
  uint64_t state = 42, hash = 14695981039346656037ull;
  double max_error = 0.0;
  int i, o, t, j, c;
  for (i = 0; i < BATCH * D_IN; ++i) x[i] = next_value(&state);
  for (i = 0; i < TERMS * D_IN * K; ++i) S[i] = next_value(&state);
  for (i = 0; i < TERMS * K * D_OUT; ++i) U[i] = next_value(&state);
  for (i = 0; i < D_OUT; ++i) bias[i] = next_value(&state);

  /* Arrays: pointer, dtype, rank, extents (strides NULL: compact row-major), CPU. */
  tx.data = x, tx.dtype = SKETCHCORE_FLOAT32, tx.ndim = 2, tx.shape = x_shape;
  tS.data = S, tS.dtype = SKETCHCORE_FLOAT32, tS.ndim = 3, tS.shape = S_shape;
  tU.data = U, tU.dtype = SKETCHCORE_FLOAT32, tU.ndim = 3, tU.shape = U_shape;
  tb.data = bias, tb.dtype = SKETCHCORE_FLOAT32, tb.ndim = 1, tb.shape = b_shape;
  ty.data = y, ty.dtype = SKETCHCORE_FLOAT32, ty.ndim = 2, ty.shape = y_shape;
  sketchcore_epilogue_init(&epilogue);
  epilogue.scale = 0.5;
  epilogue.activation = SKETCHCORE_ACT_RELU;
  epilogue.bias = &tb;
  if (sketchcore_set_num_threads(2) != SKETCHCORE_OK ||
      sketchcore_sketched_matmul(&tx, &tS, &tU, &ty, &epilogue) != SKETCHCORE_OK ||
      sketchcore_get_build_info(&info) != SKETCHCORE_OK) {
    printf("error: %s\n", sketchcore_last_error());
    return 1;
  }

  for (i = 0; i < BATCH; ++i) {
    for (o = 0; o < D_OUT; ++o) {
      double acc = 0.0, expected;
      for (t = 0; t < TERMS; ++t) {
        for (j = 0; j < K; ++j) {
          double xs = 0.0;
          for (c = 0; c < D_IN; ++c) xs += (double)x[i * D_IN + c] * S[(t * D_IN + c) * K + j];
          acc += xs * U[(t * K + j) * D_OUT + o];
        }
      }
      expected = fmax(0.0, 0.5 * acc + bias[o]);
      max_error = fmax(max_error, fabs(expected - y[i * D_OUT + o]));
    }
  }
  for (i = 0; i < (int)sizeof y; ++i) hash = (hash ^ ((const unsigned char*)y)[i]) * 1099511628211ull;
  printf("sketchcore %s (BLAS %s), C ABI %d\n", info.version, info.blas, (int)info.c_abi_version);
  printf("output fnv1a: %016llx\n", (unsigned long long)hash);
  printf("max abs error: %.3g\n", max_error);
  printf("%s\n", max_error < 1e-3 ? "OK" : "MISMATCH");
  return max_error < 1e-3 ? 0 : 1;
}
