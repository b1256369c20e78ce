/* The C ABI (include/sketchcore/sketchcore.h), compiled as C99: build facts, threads, names, and the
 * sketched GEMM in float32 and float64 (one and several terms, bias, scale, inner and outer
 * activations, dropout, strided operands) against a naive float64 loop, with every error path of
 * the tensor descriptions (NULL pointers, ranks, extents, dtype and device codes). */
#include <stdlib.h>

#include "test_c_api.h"

/* y = act(scale · Σ_t σ(x·S_t)·U_t + b) in float64 from operands read as double. */
static void reference(const double* x, const double* S, const double* U, const double* b, int64_t n, int64_t d,
                      int64_t T, int64_t k, int64_t o, double scale, int32_t outer, int32_t inner, double* y) {
  int64_t i, t, j, c, q;
  for (i = 0; i < n; ++i) {
    for (q = 0; q < o; ++q) y[i * o + q] = 0.0;
    for (t = 0; t < T; ++t) {
      for (j = 0; j < k; ++j) {
        double z = 0.0;
        for (c = 0; c < d; ++c) z += x[i * d + c] * S[(t * d + c) * k + j];
        z = act(inner, z);
        for (q = 0; q < o; ++q) y[i * o + q] += z * U[(t * k + j) * o + q];
      }
    }
    for (q = 0; q < o; ++q) y[i * o + q] = act(outer, scale * y[i * o + q] + (b ? b[q] : 0.0));
  }
}

/* Stores v (n values) into p as double or float; v becomes the values stored. */
static void store(void* p, int f64, double* v, int64_t n) {
  int64_t i;
  for (i = 0; i < n; ++i) {
    if (f64) {
      ((double*)p)[i] = v[i];
    } else {
      ((float*)p)[i] = (float)v[i];
      v[i] = ((float*)p)[i];
    }
  }
}

static void test_runtime(void) {
  sketchcore_build_info info;
  int32_t threads = 0, count = -1, code = -1;
  sketchcore_epilogue e;
  EXPECT_STATUS(sketchcore_get_build_info(&info), SKETCHCORE_OK, NULL);
  CHECK(info.version != NULL && info.version[0] != '\0' && info.blas != NULL && info.blas[0] != '\0');
  CHECK(info.c_abi_version == SKETCHCORE_C_ABI_VERSION);
  CHECK(info.version_major >= 0 && info.version_minor >= 0 && info.version_patch >= 0);
  CHECK(info.cpu_activation_kernels != NULL && info.int8_gemm_isa != NULL && info.int8_gemm_isa[0] != '\0');
  CHECK(info.cuda == 0 || info.cuda == 1);
  EXPECT_STATUS(sketchcore_get_build_info(NULL), SKETCHCORE_ERROR_NULL_POINTER, "info: expected a non-null pointer");
  EXPECT_STATUS(sketchcore_set_num_threads(2), SKETCHCORE_OK, NULL);
  EXPECT_STATUS(sketchcore_get_num_threads(&threads), SKETCHCORE_OK, NULL);
  CHECK(threads == 2);
  EXPECT_STATUS(sketchcore_set_num_threads(0), SKETCHCORE_ERROR_INVALID_ARGUMENT, "0");
  EXPECT_STATUS(sketchcore_get_num_threads(NULL), SKETCHCORE_ERROR_NULL_POINTER, "num_threads");
  EXPECT_STATUS(sketchcore_cuda_device_count(&count), SKETCHCORE_OK, NULL);
  CHECK(count >= 0 && (info.cuda == 1 || count == 0));
  EXPECT_STATUS(sketchcore_cuda_device_count(NULL), SKETCHCORE_ERROR_NULL_POINTER, "count");
  EXPECT_STATUS(sketchcore_activation_from_name("gelu_tanh", &code), SKETCHCORE_OK, NULL);
  CHECK(code == SKETCHCORE_ACT_GELU_TANH);
  EXPECT_STATUS(sketchcore_activation_from_name("swish", &code), SKETCHCORE_ERROR_INVALID_ARGUMENT, "'swish'");
  EXPECT_STATUS(sketchcore_activation_from_name(NULL, &code), SKETCHCORE_ERROR_NULL_POINTER, "name");
  EXPECT_STATUS(sketchcore_activation_from_name("relu", NULL), SKETCHCORE_ERROR_NULL_POINTER, "activation");
  EXPECT_STATUS(sketchcore_epilogue_init(&e), SKETCHCORE_OK, NULL);
  CHECK(e.scale == 1.0 && e.bias == NULL && e.activation == 0 && e.inner_activation == 0 && e.dropout_p == 0.0);
  EXPECT_STATUS(sketchcore_epilogue_init(NULL), SKETCHCORE_ERROR_NULL_POINTER, "epilogue");
}

/* One sketched GEMM of T terms (3-D factors when T > 1) in dtype, against the float64 reference. */
static void check_matmul(int32_t dtype, int64_t n, int64_t d, int64_t T, int64_t k, int64_t o, int32_t outer,
                         int32_t inner, int with_bias) {
  const int f64 = dtype == SKETCHCORE_FLOAT64;
  const size_t size = f64 ? sizeof(double) : sizeof(float);
  double *xd = malloc(sizeof(double) * n * d), *Sd = malloc(sizeof(double) * T * d * k);
  double *Ud = malloc(sizeof(double) * T * k * o), *bd = malloc(sizeof(double) * o), *ref = malloc(sizeof(double) * n * o);
  void *x = malloc(size * n * d), *S = malloc(size * T * d * k), *U = malloc(size * T * k * o);
  void *b = malloc(size * o), *y = malloc(size * n * o);
  int64_t xs[2], Ss[3], Us[3], bs[1], ys[2], i, out_shape[4];
  int32_t out_ndim = 0;
  double max_err = 0.0, max_ref = 0.0;
  sketchcore_tensor tx, tS, tU, tb, ty;
  sketchcore_epilogue e;
  xs[0] = n, xs[1] = d, ys[0] = n, ys[1] = o, bs[0] = o;
  Ss[0] = T, Ss[1] = d, Ss[2] = k, Us[0] = T, Us[1] = k, Us[2] = o;
  fill_f64(xd, n * d), fill_f64(Sd, T * d * k), fill_f64(Ud, T * k * o), fill_f64(bd, o);
  store(x, f64, xd, n * d);
  store(S, f64, Sd, T * d * k);
  store(U, f64, Ud, T * k * o);
  store(b, f64, bd, o);
  tx = tensor(x, dtype, 2, xs), ty = tensor(y, dtype, 2, ys), tb = tensor(b, dtype, 1, bs);
  tS = T > 1 ? tensor(S, dtype, 3, Ss) : tensor(S, dtype, 2, Ss + 1);
  tU = T > 1 ? tensor(U, dtype, 3, Us) : tensor(U, dtype, 2, Us + 1);
  sketchcore_epilogue_init(&e);
  e.scale = 0.75, e.activation = outer, e.inner_activation = inner, e.bias = with_bias ? &tb : NULL;
  EXPECT_STATUS(sketchcore_sketched_matmul_output_shape(&tx, &tS, &tU, out_shape, 4, &out_ndim), SKETCHCORE_OK, NULL);
  CHECK(out_ndim == 2 && out_shape[0] == n && out_shape[1] == o);
  EXPECT_STATUS(sketchcore_sketched_matmul(&tx, &tS, &tU, &ty, &e), SKETCHCORE_OK, NULL);
  reference(xd, Sd, Ud, with_bias ? bd : NULL, n, d, T, k, o, 0.75, outer, inner, ref);
  for (i = 0; i < n * o; ++i) {
    const double got = f64 ? ((double*)y)[i] : ((float*)y)[i];
    max_err = fmax(max_err, fabs(got - ref[i]));
    max_ref = fmax(max_ref, fabs(ref[i]));
  }
  if (!(max_err <= (f64 ? 1e-12 : 2e-5) * (1.0 + max_ref))) {
    fprintf(stderr, "dtype %d T %lld outer %d inner %d: max error %g (max |ref| %g)\n", dtype, (long long)T, outer,
            inner, max_err, max_ref);
    ++failures;
  }
  free(xd), free(Sd), free(Ud), free(bd), free(ref), free(x), free(S), free(U), free(b), free(y);
}

static void test_sketched_matmul(void) {
  int32_t dtype;
  for (dtype = SKETCHCORE_FLOAT32; dtype <= SKETCHCORE_FLOAT64; ++dtype) {
    check_matmul(dtype, 7, 33, 1, 5, 11, SKETCHCORE_ACT_NONE, SKETCHCORE_ACT_NONE, 0);
    check_matmul(dtype, 9, 40, 3, 4, 17, SKETCHCORE_ACT_RELU, SKETCHCORE_ACT_NONE, 1);
    check_matmul(dtype, 5, 24, 2, 6, 8, SKETCHCORE_ACT_GELU, SKETCHCORE_ACT_SILU, 1);
    check_matmul(dtype, 4, 16, 2, 3, 9, SKETCHCORE_ACT_SILU, SKETCHCORE_ACT_GELU_TANH, 1);
  }
}

/* x given as the transpose of a (d, n) array through strides; a 3-D batch; dropout p = 1. */
static void test_layouts_and_dropout(void) {
  float xt[6 * 4], S[6 * 3], U[3 * 5], y[4 * 5], ybatch[2 * 2 * 5];
  const int64_t xshape[2] = {4, 6}, xstrides[2] = {1, 4}, Sshape[2] = {6, 3}, Ushape[2] = {3, 5}, yshape[2] = {4, 5};
  const int64_t bshape[3] = {2, 2, 6}, byshape[3] = {2, 2, 5};
  int64_t i, j, c, q, shape[3];
  int32_t ndim = 0;
  float xc[4 * 6];
  sketchcore_tensor tx, tS, tU, ty, txb, tyb;
  sketchcore_epilogue e;
  fill_f32(xt, 24), fill_f32(S, 18), fill_f32(U, 15);
  tx = tensor(xt, SKETCHCORE_FLOAT32, 2, xshape), tx.strides = xstrides;
  tS = tensor(S, SKETCHCORE_FLOAT32, 2, Sshape), tU = tensor(U, SKETCHCORE_FLOAT32, 2, Ushape);
  ty = tensor(y, SKETCHCORE_FLOAT32, 2, yshape);
  EXPECT_STATUS(sketchcore_sketched_matmul(&tx, &tS, &tU, &ty, NULL), SKETCHCORE_OK, NULL);
  for (i = 0; i < 4; ++i) {
    for (q = 0; q < 5; ++q) {
      double acc = 0.0;
      for (j = 0; j < 3; ++j) {
        double z = 0.0;
        for (c = 0; c < 6; ++c) z += (double)xt[c * 4 + i] * S[c * 3 + j];
        acc += z * U[j * 5 + q];
      }
      CHECK(fabs(acc - y[i * 5 + q]) < 1e-5);
    }
  }
  for (i = 0; i < 4; ++i) for (c = 0; c < 6; ++c) xc[i * 6 + c] = xt[c * 4 + i];
  txb = tensor(xc, SKETCHCORE_FLOAT32, 3, bshape), tyb = tensor(ybatch, SKETCHCORE_FLOAT32, 3, byshape);
  EXPECT_STATUS(sketchcore_sketched_matmul_output_shape(&txb, &tS, &tU, shape, 3, &ndim), SKETCHCORE_OK, NULL);
  CHECK(ndim == 3 && shape[0] == 2 && shape[1] == 2 && shape[2] == 5);
  EXPECT_STATUS(sketchcore_sketched_matmul(&txb, &tS, &tU, &tyb, NULL), SKETCHCORE_OK, NULL);
  for (i = 0; i < 20; ++i) CHECK(fabs(ybatch[i] - y[i]) < 1e-6);
  sketchcore_epilogue_init(&e);
  e.dropout_p = 1.0, e.seed = 7;
  EXPECT_STATUS(sketchcore_sketched_matmul(&tx, &tS, &tU, &ty, &e), SKETCHCORE_OK, NULL);
  for (i = 0; i < 20; ++i) CHECK(y[i] == 0.0f);
  e.dropout_p = 1.5;
  EXPECT_STATUS(sketchcore_sketched_matmul(&tx, &tS, &tU, &ty, &e), SKETCHCORE_ERROR_INVALID_ARGUMENT, "1.5");
}

/* Every way a description or an epilogue can be wrong: status and the argument named. */
static void test_errors(void) {
  float x[4 * 6], S[6 * 3], U[3 * 5], y[4 * 5], b[5];
  double Sd[6 * 3];
  const int64_t xshape[2] = {4, 6}, Sshape[2] = {6, 3}, Ushape[2] = {3, 5}, yshape[2] = {4, 5}, bshape[1] = {5};
  const int64_t bad_S[2] = {7, 3}, negative[2] = {4, -6}, one_d[1] = {18}, b4[1] = {4}, y_wide[2] = {4, 6};
  int64_t shape[2];
  int32_t ndim;
  sketchcore_tensor tx, tS, tU, ty, t, tb;
  sketchcore_epilogue e;
  fill_f32(x, 24), fill_f32(S, 18), fill_f32(U, 15), fill_f32(b, 5), fill_f64(Sd, 18);
  tx = tensor(x, SKETCHCORE_FLOAT32, 2, xshape), tS = tensor(S, SKETCHCORE_FLOAT32, 2, Sshape);
  tU = tensor(U, SKETCHCORE_FLOAT32, 2, Ushape), ty = tensor(y, SKETCHCORE_FLOAT32, 2, yshape);
  EXPECT_STATUS(sketchcore_sketched_matmul(NULL, &tS, &tU, &ty, NULL), SKETCHCORE_ERROR_NULL_POINTER, "x: expected a non-null");
  EXPECT_STATUS(sketchcore_sketched_matmul(&tx, NULL, &tU, &ty, NULL), SKETCHCORE_ERROR_NULL_POINTER, "S: expected");
  EXPECT_STATUS(sketchcore_sketched_matmul(&tx, &tS, NULL, &ty, NULL), SKETCHCORE_ERROR_NULL_POINTER, "U: expected");
  EXPECT_STATUS(sketchcore_sketched_matmul(&tx, &tS, &tU, NULL, NULL), SKETCHCORE_ERROR_NULL_POINTER, "out: expected");
  t = tx, t.data = NULL;
  EXPECT_STATUS(sketchcore_sketched_matmul(&t, &tS, &tU, &ty, NULL), SKETCHCORE_ERROR_NULL_POINTER, "x.data");
  t = tx, t.shape = NULL;
  EXPECT_STATUS(sketchcore_sketched_matmul(&t, &tS, &tU, &ty, NULL), SKETCHCORE_ERROR_NULL_POINTER, "x.shape");
  t = tx, t.dtype = 9;
  EXPECT_STATUS(sketchcore_sketched_matmul(&t, &tS, &tU, &ty, NULL), SKETCHCORE_ERROR_DTYPE, "x.dtype: expected a sketchcore_dtype code 0 to 4, got 9");
  t = tx, t.dtype = -1;
  EXPECT_STATUS(sketchcore_sketched_matmul(&t, &tS, &tU, &ty, NULL), SKETCHCORE_ERROR_DTYPE, "got -1");
  t = tx, t.dtype = SKETCHCORE_INT8;
  EXPECT_STATUS(sketchcore_sketched_matmul(&t, &tS, &tU, &ty, NULL), SKETCHCORE_ERROR_DTYPE, "SKETCHCORE_INT8");
  t = tensor(Sd, SKETCHCORE_FLOAT64, 2, Sshape);
  EXPECT_STATUS(sketchcore_sketched_matmul(&tx, &t, &tU, &ty, NULL), SKETCHCORE_ERROR_DTYPE, "float64");
  t = tS, t.shape = bad_S;
  EXPECT_STATUS(sketchcore_sketched_matmul(&tx, &t, &tU, &ty, NULL), SKETCHCORE_ERROR_SHAPE, "S");
  t = tS, t.ndim = 1, t.shape = one_d;
  EXPECT_STATUS(sketchcore_sketched_matmul(&tx, &t, &tU, &ty, NULL), SKETCHCORE_ERROR_SHAPE, "S");
  t = tx, t.shape = negative;
  EXPECT_STATUS(sketchcore_sketched_matmul(&t, &tS, &tU, &ty, NULL), SKETCHCORE_ERROR_SHAPE, "x.shape[1]: expected an extent >= 0, got -6");
  t = tx, t.ndim = -1;
  EXPECT_STATUS(sketchcore_sketched_matmul(&t, &tS, &tU, &ty, NULL), SKETCHCORE_ERROR_SHAPE, "x.ndim: expected a rank from 0 to 32, got -1");
  t = tx, t.ndim = 33;
  EXPECT_STATUS(sketchcore_sketched_matmul(&t, &tS, &tU, &ty, NULL), SKETCHCORE_ERROR_SHAPE, "got 33");
  t = ty, t.shape = y_wide;
  EXPECT_STATUS(sketchcore_sketched_matmul(&tx, &tS, &tU, &t, NULL), SKETCHCORE_ERROR_SHAPE, "out");
  t = tx, t.device_type = 5;
  EXPECT_STATUS(sketchcore_sketched_matmul(&t, &tS, &tU, &ty, NULL), SKETCHCORE_ERROR_DEVICE, "x.device_type: expected SKETCHCORE_CPU (0) or SKETCHCORE_CUDA (1), got 5");
  t = tx, t.device_index = 1;
  EXPECT_STATUS(sketchcore_sketched_matmul(&t, &tS, &tU, &ty, NULL), SKETCHCORE_ERROR_DEVICE, "x.device_index");
  t = tx, t.device_type = SKETCHCORE_CUDA;  /* operands on different devices */
  CHECK(sketchcore_sketched_matmul(&t, &tS, &tU, &ty, NULL) == SKETCHCORE_ERROR_DEVICE);
  sketchcore_epilogue_init(&e);
  e.activation = 5;
  EXPECT_STATUS(sketchcore_sketched_matmul(&tx, &tS, &tU, &ty, &e), SKETCHCORE_ERROR_INVALID_ARGUMENT, "epilogue.activation: expected a sketchcore_activation code 0 to 4, got 5");
  e.activation = 0, e.inner_activation = -2;
  EXPECT_STATUS(sketchcore_sketched_matmul(&tx, &tS, &tU, &ty, &e), SKETCHCORE_ERROR_INVALID_ARGUMENT, "epilogue.inner_activation");
  e.inner_activation = 0, e.scale = NAN;
  CHECK(sketchcore_sketched_matmul(&tx, &tS, &tU, &ty, &e) == SKETCHCORE_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(sketchcore_last_error(), "scale") != NULL);
  e.scale = 1.0, tb = tensor(b, SKETCHCORE_FLOAT32, 1, b4), e.bias = &tb;
  EXPECT_STATUS(sketchcore_sketched_matmul(&tx, &tS, &tU, &ty, &e), SKETCHCORE_ERROR_SHAPE, "bias");
  tb.shape = bshape, tb.dtype = 12;
  EXPECT_STATUS(sketchcore_sketched_matmul(&tx, &tS, &tU, &ty, &e), SKETCHCORE_ERROR_DTYPE, "epilogue.bias.dtype");
  EXPECT_STATUS(sketchcore_sketched_matmul_output_shape(&tx, &tS, &tU, shape, 1, &ndim), SKETCHCORE_ERROR_SHAPE, "capacity: expected at least 2");
  EXPECT_STATUS(sketchcore_sketched_matmul_output_shape(&tx, &tS, &tU, NULL, 2, &ndim), SKETCHCORE_ERROR_NULL_POINTER, "shape");
  EXPECT_STATUS(sketchcore_sketched_matmul_output_shape(&tx, &tS, &tU, shape, 2, NULL), SKETCHCORE_ERROR_NULL_POINTER, "ndim");
  EXPECT_STATUS(sketchcore_sketched_matmul_output_shape(&tx, &tS, NULL, shape, 2, &ndim), SKETCHCORE_ERROR_NULL_POINTER, "U");
  /* A failure's message stays until the next call; a successful call clears it. */
  CHECK(sketchcore_last_error()[0] != '\0');
  EXPECT_STATUS(sketchcore_sketched_matmul(&tx, &tS, &tU, &ty, NULL), SKETCHCORE_OK, NULL);
}

int main(void) {
  test_runtime();
  test_sketched_matmul();
  test_layouts_and_dropout();
  test_errors();
  return finish("test_c_api");
}
