/* Helpers shared by the C ABI's tests (test_c_api*.c): a seeded generator, tensor descriptions,
 * checks that count failures, and the check of a status with the message it leaves. C99. */
#ifndef SKETCHCORE_TEST_C_API_H
#define SKETCHCORE_TEST_C_API_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <sketchcore/sketchcore.h>

static int failures = 0;

#define CHECK(cond)                                                     \
  do {                                                                  \
    if (!(cond)) {                                                      \
      ++failures;                                                       \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                   \
  } while (0)

/* The call returned `expected` and left a message containing `needle` (and "" after success). */
#define EXPECT_STATUS(call, expected, needle) expect_status((call), (expected), (needle), __FILE__, __LINE__)

static void expect_status(sketchcore_status got, sketchcore_status expected, const char* needle, const char* file,
                          int line) {
  const char* message = sketchcore_last_error();
  if (got != expected) {
    ++failures;
    fprintf(stderr, "%s:%d: status %d, expected %d (message: %s)\n", file, line, (int)got, (int)expected, message);
  } else if (expected == SKETCHCORE_OK && message[0] != '\0') {
    ++failures;
    fprintf(stderr, "%s:%d: a successful call left the message '%s'\n", file, line, message);
  } else if (needle != NULL && strstr(message, needle) == NULL) {
    ++failures;
    fprintf(stderr, "%s:%d: message '%s' does not contain '%s'\n", file, line, message, needle);
  }
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

/* Uniform in [-1, 1) from a 64-bit LCG (the top 53 bits). */
static double uniform(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng_state >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

static void fill_f32(float* v, int64_t n) {
  int64_t i;
  for (i = 0; i < n; ++i) v[i] = (float)uniform();
}

static void fill_f64(double* v, int64_t n) {
  int64_t i;
  for (i = 0; i < n; ++i) v[i] = uniform();
}

/* A compact row-major CPU tensor of `ndim` extents (`shape` must outlive it). */
static sketchcore_tensor tensor(void* data, int32_t dtype, int32_t ndim, const int64_t* shape) {
  sketchcore_tensor t;
  t.data = data;
  t.dtype = dtype;
  t.ndim = ndim;
  t.shape = shape;
  t.strides = NULL;
  t.device_type = SKETCHCORE_CPU;
  t.device_index = 0;
  return t;
}

static double act(int32_t code, double z) {
  switch (code) {
    case SKETCHCORE_ACT_RELU: return z > 0 ? z : 0.0;
    case SKETCHCORE_ACT_GELU: return 0.5 * z * (1.0 + erf(z / sqrt(2.0)));
    case SKETCHCORE_ACT_GELU_TANH:
      return 0.5 * z * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (z + 0.044715 * z * z * z)));
    case SKETCHCORE_ACT_SILU: return z / (1.0 + exp(-z));
    default: return z;
  }
}

static int finish(const char* name) {
  if (failures == 0) {
    printf("%s: all checks passed\n", name);
    return 0;
  }
  printf("%s: %d checks failed\n", name, failures);
  return 1;
}

#endif
