/* The C ABI's int8 path and sketch operators (include/sketchcore/sketchcore.h), compiled as C99:
 * quantization (float32 and float64 weights, strided), the factor's round trip, the int8 sketched
 * and full-rank GEMMs against float64 loops of their documented math, sketch operators materialised
 * and applied (both sides, transposed) against float64 products with the dense operator, and every
 * error path (NULL handles and pointers, extents, dtype codes, values out of range). */
#include <stdlib.h>

#include "test_c_api.h"

/* Per-row quantization as documented, in float32: q = clip(rint(x·(127/max|x|)), ±127), s = max|x|/127. */
static float quantize_row(const float* x, int64_t n, double* q) {
  float max_abs = 0.0f, inverse;
  int64_t j;
  for (j = 0; j < n; ++j) max_abs = fmaxf(max_abs, fabsf(x[j]));
  inverse = 127.0f / max_abs;
  for (j = 0; j < n; ++j) q[j] = max_abs > 0.0f ? fminf(127.0f, fmaxf(-127.0f, nearbyintf(x[j] * inverse))) : 0.0;
  return max_abs / 127.0f;
}

static void test_quantize_and_factor(void) {
  enum { K = 13, N = 70 };
  static float w[K * N], scale[N], scale_back[N];
  static double wd[K * N];
  static int8_t q[K * N], qt[N * K], back[K * N];
  const int64_t wshape[2] = {K, N}, sshape[1] = {N}, qtshape[2] = {K, N}, qtstrides[2] = {1, K}, short_s[1] = {N - 1};
  int64_t i, j, rows = 0, cols = 0, nbytes = 0;
  sketchcore_tensor tw, tq, ts, t;
  sketchcore_int8_factor* f = NULL;
  fill_f32(w, K * N);
  for (i = 0; i < K; ++i) w[i * N + 5] = 0.0f; /* an all-zero column: scale 1, zeros */
  tw = tensor(w, SKETCHCORE_FLOAT32, 2, wshape), tq = tensor(q, SKETCHCORE_INT8, 2, wshape);
  ts = tensor(scale, SKETCHCORE_FLOAT32, 1, sshape);
  EXPECT_STATUS(sketchcore_int8_quantize(&tw, &tq, &ts), SKETCHCORE_OK, NULL);
  for (j = 0; j < N; ++j) {
    double max_abs = 0.0;
    int max_q = 0;
    for (i = 0; i < K; ++i) max_abs = fmax(max_abs, fabs(w[i * N + j]));
    CHECK(j == 5 ? scale[j] == 1.0f : fabs(scale[j] - max_abs / 127.0) <= 1e-7 * max_abs);
    for (i = 0; i < K; ++i) {
      CHECK(fabs((double)q[i * N + j] * scale[j] - w[i * N + j]) <= 0.5 * scale[j] * (1.0 + 1e-5));
      max_q = abs(q[i * N + j]) > max_q ? abs(q[i * N + j]) : max_q;
    }
    CHECK(max_q == (j == 5 ? 0 : 127));
  }
  /* float64 weights (rounded to float32 first) and a transposed q give the same values. */
  for (i = 0; i < K * N; ++i) wd[i] = w[i];
  t = tensor(wd, SKETCHCORE_FLOAT64, 2, wshape), tq = tensor(qt, SKETCHCORE_INT8, 2, qtshape), tq.strides = qtstrides;
  EXPECT_STATUS(sketchcore_int8_quantize(&t, &tq, &ts), SKETCHCORE_OK, NULL);
  for (i = 0; i < K; ++i) for (j = 0; j < N; ++j) CHECK(qt[j * K + i] == q[i * N + j]);
  tq = tensor(q, SKETCHCORE_INT8, 2, wshape);
  EXPECT_STATUS(sketchcore_int8_quantize(NULL, &tq, &ts), SKETCHCORE_ERROR_NULL_POINTER, "w: expected a non-null");
  EXPECT_STATUS(sketchcore_int8_quantize(&tw, NULL, &ts), SKETCHCORE_ERROR_NULL_POINTER, "q: expected");
  EXPECT_STATUS(sketchcore_int8_quantize(&tw, &tq, NULL), SKETCHCORE_ERROR_NULL_POINTER, "scale: expected");
  t = tw, t.dtype = SKETCHCORE_INT8;
  EXPECT_STATUS(sketchcore_int8_quantize(&t, &tq, &ts), SKETCHCORE_ERROR_DTYPE, "w.dtype: expected SKETCHCORE_FLOAT32 (2) or SKETCHCORE_FLOAT64 (3), got 4");
  t = tq, t.dtype = SKETCHCORE_FLOAT32;
  EXPECT_STATUS(sketchcore_int8_quantize(&tw, &t, &ts), SKETCHCORE_ERROR_DTYPE, "q.dtype: expected SKETCHCORE_INT8 (4), got 2");
  t = tq, t.ndim = 1;
  EXPECT_STATUS(sketchcore_int8_quantize(&tw, &t, &ts), SKETCHCORE_ERROR_SHAPE, "q.ndim: expected 2, got 1");
  t = tq, t.shape = qtshape + 1;
  CHECK(sketchcore_int8_quantize(&tw, &t, &ts) == SKETCHCORE_ERROR_SHAPE);
  t = ts, t.shape = short_s;
  EXPECT_STATUS(sketchcore_int8_quantize(&tw, &tq, &t), SKETCHCORE_ERROR_SHAPE, "scale.shape[0]: expected 70");
  {
    const int64_t huge[2] = {(int64_t)1 << 40, (int64_t)1 << 40};  /* 2^80 elements: refused, never read */
    t = tw, t.shape = huge;
    EXPECT_STATUS(sketchcore_int8_quantize(&t, &tq, &ts), SKETCHCORE_ERROR_SHAPE, "sketchcore_int8_quantize: w:");
  }
  t = tw, t.device_type = SKETCHCORE_CUDA;
  EXPECT_STATUS(sketchcore_int8_quantize(&t, &tq, &ts), SKETCHCORE_ERROR_DEVICE, "w.device_type");
  w[3] = INFINITY;
  EXPECT_STATUS(sketchcore_int8_quantize(&tw, &tq, &ts), SKETCHCORE_ERROR_INVALID_ARGUMENT, "w: expected finite values");
  w[3] = 0.5f;

  /* The factor: packed from q, read back unchanged. */
  EXPECT_STATUS(sketchcore_int8_factor_create(&tq, &ts, &f), SKETCHCORE_OK, NULL);
  EXPECT_STATUS(sketchcore_int8_factor_info(f, &rows, &cols, &nbytes), SKETCHCORE_OK, NULL);
  CHECK(rows == K && cols == N && nbytes >= K * N);
  EXPECT_STATUS(sketchcore_int8_factor_info(f, NULL, NULL, NULL), SKETCHCORE_OK, NULL);
  t = tensor(back, SKETCHCORE_INT8, 2, wshape);
  {
    sketchcore_tensor tsb = tensor(scale_back, SKETCHCORE_FLOAT32, 1, sshape);
    EXPECT_STATUS(sketchcore_int8_factor_unpack(f, &t, &tsb), SKETCHCORE_OK, NULL);
    CHECK(memcmp(back, q, sizeof q) == 0 && memcmp(scale_back, scale, sizeof scale) == 0);
    EXPECT_STATUS(sketchcore_int8_factor_unpack(f, NULL, NULL), SKETCHCORE_OK, NULL);
    tsb.shape = short_s;
    EXPECT_STATUS(sketchcore_int8_factor_unpack(f, NULL, &tsb), SKETCHCORE_ERROR_SHAPE, "scale.shape[0]");
  }
  t.shape = qtshape + 1, t.ndim = 1;
  EXPECT_STATUS(sketchcore_int8_factor_unpack(f, &t, NULL), SKETCHCORE_ERROR_SHAPE, "q.ndim");
  EXPECT_STATUS(sketchcore_int8_factor_unpack(NULL, NULL, NULL), SKETCHCORE_ERROR_NULL_POINTER, "factor");
  EXPECT_STATUS(sketchcore_int8_factor_info(NULL, &rows, NULL, NULL), SKETCHCORE_ERROR_NULL_POINTER, "factor");
  EXPECT_STATUS(sketchcore_int8_factor_destroy(f), SKETCHCORE_OK, NULL);
  EXPECT_STATUS(sketchcore_int8_factor_destroy(NULL), SKETCHCORE_OK, NULL);
  EXPECT_STATUS(sketchcore_int8_factor_create(&tq, &ts, NULL), SKETCHCORE_ERROR_NULL_POINTER, "factor");
  q[7] = -128;
  f = (sketchcore_int8_factor*)&rows; /* set to NULL on failure */
  EXPECT_STATUS(sketchcore_int8_factor_create(&tq, &ts, &f), SKETCHCORE_ERROR_INVALID_ARGUMENT, "-128");
  CHECK(f == NULL);
  q[7] = 1, scale[2] = -1.0f;
  EXPECT_STATUS(sketchcore_int8_factor_create(&tq, &ts, &f), SKETCHCORE_ERROR_INVALID_ARGUMENT, "scale");
  scale[2] = 1.0f, t = ts, t.dtype = SKETCHCORE_FLOAT64;
  EXPECT_STATUS(sketchcore_int8_factor_create(&tq, &t, &f), SKETCHCORE_ERROR_DTYPE, "scale.dtype");
  t = ts, t.shape = short_s;
  EXPECT_STATUS(sketchcore_int8_factor_create(&tq, &t, &f), SKETCHCORE_ERROR_SHAPE, "scale.shape[0]: expected 70");
}

/* A random int8 factor (rows, cols) with scales in [0.002, 0.02]. */
static sketchcore_int8_factor* random_factor(int64_t rows, int64_t cols, int8_t* q, float* scale) {
  const int64_t qshape[2] = {rows, cols}, sshape[1] = {cols};
  sketchcore_tensor tq = tensor(q, SKETCHCORE_INT8, 2, qshape), ts = tensor(scale, SKETCHCORE_FLOAT32, 1, sshape);
  sketchcore_int8_factor* f = NULL;
  int64_t i;
  for (i = 0; i < rows * cols; ++i) q[i] = (int8_t)lround(uniform() * 127.0);
  for (i = 0; i < cols; ++i) scale[i] = (float)(0.011 + 0.009 * uniform());
  EXPECT_STATUS(sketchcore_int8_factor_create(&tq, &ts, &f), SKETCHCORE_OK, NULL);
  return f;
}

static void test_int8_matmuls(void) {
  enum { B = 10, D = 37, R = 9, O = 21 };
  static float x[B * D], y[B * O], bias[O], Ss[R], Us[O], z[R];
  static int8_t Sq[D * R], Uq[R * O];
  static double qx[D], qz[R];
  const int64_t xshape[2] = {B, D}, yshape[2] = {B, O}, bshape[1] = {O}, bad_y[2] = {B, O + 1};
  sketchcore_int8_factor *S = random_factor(D, R, Sq, Ss), *U = random_factor(R, O, Uq, Us);
  sketchcore_tensor tx = tensor(x, SKETCHCORE_FLOAT32, 2, xshape), ty = tensor(y, SKETCHCORE_FLOAT32, 2, yshape);
  sketchcore_tensor tb = tensor(bias, SKETCHCORE_FLOAT32, 1, bshape), t;
  sketchcore_epilogue e;
  int64_t i, j, c, moved = 0;
  fill_f32(x, B * D), fill_f32(bias, O);
  sketchcore_epilogue_init(&e);
  e.scale = 0.5, e.bias = &tb, e.activation = SKETCHCORE_ACT_RELU, e.inner_activation = SKETCHCORE_ACT_SILU;
  EXPECT_STATUS(sketchcore_int8_sketched_matmul(&tx, S, U, &ty, &e), SKETCHCORE_OK, NULL);
  for (i = 0; i < B; ++i) {
    const float sx = quantize_row(x + i * D, D, qx);
    float sz;
    for (j = 0; j < R; ++j) {
      double acc = 0.0;
      for (c = 0; c < D; ++c) acc += qx[c] * Sq[c * R + j];
      z[j] = (float)act(SKETCHCORE_ACT_SILU, (double)sx * acc * Ss[j]);
    }
    sz = quantize_row(z, R, qz);
    for (j = 0; j < O; ++j) {
      double acc = 0.0, ref;
      for (c = 0; c < R; ++c) acc += qz[c] * Uq[c * O + j];
      ref = act(SKETCHCORE_ACT_RELU, 0.5 * sz * acc * Us[j] + bias[j]);
      /* exact int32 sums and float32 rounding; z's last bits (its σ, in the library's float32 kernels)
       * may move one element of q8(z) by one step, changing y by at most 0.5·s_z·127·U.scale: rare */
      if (fabs(y[i * O + j] - ref) > 1e-5 * (1.0 + fabs(ref))) {
        ++moved;
        CHECK(fabs(y[i * O + j] - ref) <= 1.01 * 0.5 * sz * 127.0 * Us[j]);
      }
    }
  }
  CHECK(moved <= 2);
  /* The full-rank product with W = S (d_in × r): exact sums, float32 rounding only. */
  e.inner_activation = SKETCHCORE_ACT_NONE, e.bias = NULL, e.activation = SKETCHCORE_ACT_GELU;
  {
    const int64_t wyshape[2] = {B, R};
    sketchcore_tensor twy = tensor(y, SKETCHCORE_FLOAT32, 2, wyshape);
    EXPECT_STATUS(sketchcore_int8_matmul(&tx, S, &twy, &e), SKETCHCORE_OK, NULL);
    for (i = 0; i < B; ++i) {
      const float sx = quantize_row(x + i * D, D, qx);
      for (j = 0; j < R; ++j) {
        double acc = 0.0, ref;
        for (c = 0; c < D; ++c) acc += qx[c] * Sq[c * R + j];
        ref = act(SKETCHCORE_ACT_GELU, 0.5 * sx * acc * Ss[j]);
        CHECK(fabs(y[i * R + j] - ref) <= 2e-5 * (1.0 + fabs(ref)));
      }
    }
    e.inner_activation = SKETCHCORE_ACT_RELU;
    EXPECT_STATUS(sketchcore_int8_matmul(&tx, S, &twy, &e), SKETCHCORE_ERROR_INVALID_ARGUMENT, "inner");
    e.inner_activation = SKETCHCORE_ACT_NONE;
    EXPECT_STATUS(sketchcore_int8_matmul(&tx, NULL, &twy, &e), SKETCHCORE_ERROR_NULL_POINTER, "W: expected");
    EXPECT_STATUS(sketchcore_int8_matmul(NULL, S, &twy, &e), SKETCHCORE_ERROR_NULL_POINTER, "x: expected");
    EXPECT_STATUS(sketchcore_int8_matmul(&tx, S, &ty, &e), SKETCHCORE_ERROR_SHAPE, "out");
  }
  EXPECT_STATUS(sketchcore_int8_sketched_matmul(&tx, NULL, U, &ty, NULL), SKETCHCORE_ERROR_NULL_POINTER, "S: expected");
  EXPECT_STATUS(sketchcore_int8_sketched_matmul(&tx, S, NULL, &ty, NULL), SKETCHCORE_ERROR_NULL_POINTER, "U: expected");
  EXPECT_STATUS(sketchcore_int8_sketched_matmul(&tx, S, U, NULL, NULL), SKETCHCORE_ERROR_NULL_POINTER, "out: expected");
  EXPECT_STATUS(sketchcore_int8_sketched_matmul(&tx, U, S, &ty, NULL), SKETCHCORE_ERROR_SHAPE, NULL);
  t = ty, t.shape = bad_y;
  EXPECT_STATUS(sketchcore_int8_sketched_matmul(&tx, S, U, &t, NULL), SKETCHCORE_ERROR_SHAPE, "out");
  t = tx, t.dtype = SKETCHCORE_FLOAT64;
  EXPECT_STATUS(sketchcore_int8_sketched_matmul(&t, S, U, &ty, NULL), SKETCHCORE_ERROR_DTYPE, "x");
  t = tx, t.dtype = 77;
  EXPECT_STATUS(sketchcore_int8_sketched_matmul(&t, S, U, &ty, NULL), SKETCHCORE_ERROR_DTYPE, "x.dtype: expected a sketchcore_dtype code 0 to 4, got 77");
  sketchcore_epilogue_init(&e);
  e.dropout_p = 0.1;
  EXPECT_STATUS(sketchcore_int8_sketched_matmul(&tx, S, U, &ty, &e), SKETCHCORE_ERROR_INVALID_ARGUMENT, "dropout");
  sketchcore_int8_factor_destroy(S), sketchcore_int8_factor_destroy(U);
}

static void test_sketch(void) {
  enum { M = 8, N = 20, P = 5 };
  static double dense[M * N], block[3 * 4], a[N * P], out[M * P], ar[P * M], outr[P * N], at[M * P], outt[N * P];
  const int64_t dshape[2] = {M, N}, bshape[2] = {3, 4}, ashape[2] = {N, P}, oshape[2] = {M, P};
  const int64_t arshape[2] = {P, M}, orshape[2] = {P, N}, atshape[2] = {M, P}, otshape[2] = {N, P};
  const int64_t big[2] = {M + 1, N};
  int64_t i, j, c, shape[2];
  int32_t ndim = 0, kind;
  sketchcore_sketch* s = NULL;
  sketchcore_tensor t;
  fill_f64(a, N * P), fill_f64(ar, P * M), fill_f64(at, M * P);
  for (kind = SKETCHCORE_SKETCH_GAUSSIAN; kind <= SKETCHCORE_SKETCH_SRHT; ++kind) {
    EXPECT_STATUS(sketchcore_sketch_create(kind, M, N, 1234, 3, 1, &s), SKETCHCORE_OK, NULL);
    t = tensor(dense, SKETCHCORE_FLOAT64, 2, dshape);
    EXPECT_STATUS(sketchcore_sketch_to_dense(s, &t, 0, 0), SKETCHCORE_OK, NULL);
    t = tensor(block, SKETCHCORE_FLOAT64, 2, bshape);
    EXPECT_STATUS(sketchcore_sketch_to_dense(s, &t, 2, 3), SKETCHCORE_OK, NULL);
    for (i = 0; i < 3; ++i) for (j = 0; j < 4; ++j) CHECK(block[i * 4 + j] == dense[(i + 2) * N + j + 3]);
    if (kind == SKETCHCORE_SKETCH_SPARSE_SIGN) {
      for (j = 0; j < N; ++j) {
        int nonzero = 0;
        for (i = 0; i < M; ++i) nonzero += dense[i * N + j] != 0.0;
        CHECK(nonzero == 3);
      }
    }
    t = tensor(a, SKETCHCORE_FLOAT64, 2, ashape);
    EXPECT_STATUS(sketchcore_sketch_apply_output_shape(s, &t, 0, 0, shape, 2, &ndim), SKETCHCORE_OK, NULL);
    CHECK(ndim == 2 && shape[0] == M && shape[1] == P);
    {
      sketchcore_tensor to = tensor(out, SKETCHCORE_FLOAT64, 2, oshape);
      sketchcore_tensor tar = tensor(ar, SKETCHCORE_FLOAT64, 2, arshape), tor = tensor(outr, SKETCHCORE_FLOAT64, 2, orshape);
      sketchcore_tensor tat = tensor(at, SKETCHCORE_FLOAT64, 2, atshape), tot = tensor(outt, SKETCHCORE_FLOAT64, 2, otshape);
      EXPECT_STATUS(sketchcore_sketch_apply(s, &t, &to, 0, 0), SKETCHCORE_OK, NULL);
      EXPECT_STATUS(sketchcore_sketch_apply(s, &tar, &tor, 1, 0), SKETCHCORE_OK, NULL);
      EXPECT_STATUS(sketchcore_sketch_apply(s, &tat, &tot, 0, 1), SKETCHCORE_OK, NULL);
      EXPECT_STATUS(sketchcore_sketch_apply(s, &t, &tor, 0, 0), SKETCHCORE_ERROR_SHAPE, "out");
    }
    for (i = 0; i < M; ++i) {
      for (j = 0; j < P; ++j) {
        double ref = 0.0;
        for (c = 0; c < N; ++c) ref += dense[i * N + c] * a[c * P + j];
        CHECK(fabs(out[i * P + j] - ref) <= 1e-12 * (1.0 + fabs(ref)));
      }
    }
    for (i = 0; i < P; ++i) {
      for (j = 0; j < N; ++j) {
        double ref = 0.0;
        for (c = 0; c < M; ++c) ref += ar[i * M + c] * dense[c * N + j];
        CHECK(fabs(outr[i * N + j] - ref) <= 1e-12 * (1.0 + fabs(ref)));
      }
    }
    for (i = 0; i < N; ++i) {
      for (j = 0; j < P; ++j) {
        double ref = 0.0;
        for (c = 0; c < M; ++c) ref += dense[c * N + i] * at[c * P + j];
        CHECK(fabs(outt[i * P + j] - ref) <= 1e-12 * (1.0 + fabs(ref)));
      }
    }
    t = tensor(dense, SKETCHCORE_FLOAT64, 2, big);
    EXPECT_STATUS(sketchcore_sketch_to_dense(s, &t, 0, 0), SKETCHCORE_ERROR_SHAPE, "out");
    t = tensor(dense, 42, 2, dshape);
    EXPECT_STATUS(sketchcore_sketch_to_dense(s, &t, 0, 0), SKETCHCORE_ERROR_DTYPE, "out.dtype");
    t = tensor(a, SKETCHCORE_FLOAT64, 2, ashape);
    EXPECT_STATUS(sketchcore_sketch_apply_output_shape(s, &t, 0, 0, shape, 1, &ndim), SKETCHCORE_ERROR_SHAPE, "capacity");
    EXPECT_STATUS(sketchcore_sketch_apply(s, NULL, &t, 0, 0), SKETCHCORE_ERROR_NULL_POINTER, "a: expected");
    EXPECT_STATUS(sketchcore_sketch_destroy(s), SKETCHCORE_OK, NULL);
  }
  t = tensor(dense, SKETCHCORE_FLOAT64, 2, dshape);
  EXPECT_STATUS(sketchcore_sketch_to_dense(NULL, &t, 0, 0), SKETCHCORE_ERROR_NULL_POINTER, "sketch");
  EXPECT_STATUS(sketchcore_sketch_apply(NULL, &t, &t, 0, 0), SKETCHCORE_ERROR_NULL_POINTER, "sketch");
  EXPECT_STATUS(sketchcore_sketch_apply_output_shape(NULL, &t, 0, 0, shape, 2, &ndim), SKETCHCORE_ERROR_NULL_POINTER, "sketch");
  EXPECT_STATUS(sketchcore_sketch_destroy(NULL), SKETCHCORE_OK, NULL);
  EXPECT_STATUS(sketchcore_sketch_create(6, M, N, 0, 1, 1, &s), SKETCHCORE_ERROR_INVALID_ARGUMENT, "kind: expected a sketchcore_sketch_kind code 0 to 5, got 6");
  CHECK(s == NULL);
  EXPECT_STATUS(sketchcore_sketch_create(0, 0, N, 0, 1, 1, &s), SKETCHCORE_ERROR_INVALID_ARGUMENT, "m: expected");
  EXPECT_STATUS(sketchcore_sketch_create(0, M, -4, 0, 1, 1, &s), SKETCHCORE_ERROR_INVALID_ARGUMENT, "n: expected");
  EXPECT_STATUS(sketchcore_sketch_create(SKETCHCORE_SKETCH_SPARSE_SIGN, M, N, 0, M + 1, 1, &s),
                SKETCHCORE_ERROR_INVALID_ARGUMENT, "nnz");
  EXPECT_STATUS(sketchcore_sketch_create(0, M, N, 0, 1, 1, NULL), SKETCHCORE_ERROR_NULL_POINTER, "sketch");
}

int main(void) {
  sketchcore_set_num_threads(2);
  test_quantize_and_factor();
  test_int8_matmuls();
  test_sketch();
  return finish("test_c_api_int8_sketch");
}
