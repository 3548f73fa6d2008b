/* Exercises every function of include/dlrm/dlrm.h from C99, including each bad-input
 * case: the call must return the right status, name the problem in dlrm_last_error(), and
 * leave the engine's predictions bitwise unchanged. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrm/dlrm.h"
#include "test_batch.h"

static int g_passed = 0, g_failed = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (cond) {                                                                \
      ++g_passed;                                                              \
    } else {                                                                   \
      ++g_failed;                                                              \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                          \
  } while (0)

/* The call returns `status` and the error message contains `needle`. */
#define CHECK_FAILS(call, status, needle)                                                     \
  do {                                                                                        \
    dlrm_status s_ = (call);                                                                  \
    CHECK(s_ == (status));                                                                    \
    if (strstr(dlrm_last_error(), (needle)) == NULL) {                                        \
      ++g_failed;                                                                             \
      fprintf(stderr, "%s:%d: message \"%s\" lacks \"%s\" (status %s)\n", __FILE__, __LINE__, \
              dlrm_last_error(), (needle), dlrm_status_name(s_));                             \
    } else {                                                                                  \
      ++g_passed;                                                                             \
    }                                                                                         \
  } while (0)

/* The shared small model (tests/data/small_model.pbtxt), read in main(). */
static char* kConfig = NULL;
static const char* kConfigPath = NULL;

static int same_floats(const float* a, const float* b, size_t n) {
  return memcmp(a, b, n * sizeof(float)) == 0;
}

/* Predictions of the reference batch: the engine's observable state. */
static void predict_ref(dlrm_engine* e, const test_batch* ref, float* out) {
  CHECK(dlrm_engine_predict(e, &ref->batch, out, B) == DLRM_OK);
}

static void write_file(const char* path, const char* bytes, size_t n) {
  FILE* f = fopen(path, "wb");
  CHECK(f != NULL);
  if (f) {
    fwrite(bytes, 1, n, f);
    fclose(f);
  }
}

static char* read_file(const char* path, size_t* n) {
  FILE* f = fopen(path, "rb");
  char* buf;
  long size;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  size = ftell(f);
  fseek(f, 0, SEEK_SET);
  buf = (char*)malloc((size_t)size);
  if (buf && fread(buf, 1, (size_t)size, f) != (size_t)size) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  *n = (size_t)size;
  return buf;
}

static void test_version(void) {
  CHECK(dlrm_abi_version() == DLRM_ABI_VERSION);
  CHECK(strlen(dlrm_version()) > 0);
  CHECK(strcmp(dlrm_status_name(DLRM_INVALID_ARGUMENT), "INVALID_ARGUMENT") == 0);
  CHECK(strcmp(dlrm_status_name(12345), "UNKNOWN") == 0);
  CHECK(dlrm_last_error() != NULL);
  dlrm_engine_destroy(NULL);
  dlrm_free(NULL);
}

static void test_create_errors(void) {
  dlrm_engine* e = NULL;
  CHECK_FAILS(dlrm_engine_create(NULL, &e), DLRM_INVALID_ARGUMENT, "config_text");
  CHECK_FAILS(dlrm_engine_create(kConfig, NULL), DLRM_INVALID_ARGUMENT, "out");
  CHECK_FAILS(dlrm_engine_create("model { bogus_field: 1 }", &e), DLRM_INVALID_ARGUMENT,
              "bogus_field");
  CHECK_FAILS(dlrm_engine_create("model { num_dense_features: 0 }", &e), DLRM_INVALID_ARGUMENT,
              "model.num_dense_features");
  CHECK(e == NULL);
  {
    /* A GPU asked for where none can be used: the cause, never a crash (this library
       also loads and trains with no GPU driver on the machine at all). */
    static const char kCuda[] = "\ndevice { kind: CUDA }\n";
    char* cuda_config = (char*)malloc(strlen(kConfig) + sizeof kCuda);
    CHECK(cuda_config != NULL);
    strcpy(cuda_config, kConfig);
    strcat(cuda_config, kCuda);
    if (dlrm_engine_create(cuda_config, &e) == DLRM_OK) {
      /* A usable GPU: the engine trains there. */
      test_batch t;
      float loss = -1;
      make_batch(&t, 0);
      CHECK(dlrm_engine_train_step(e, &t.batch, &loss) == DLRM_OK && isfinite(loss));
      dlrm_engine_destroy(e);
      e = NULL;
    } else {
      CHECK(e == NULL);
      CHECK(strstr(dlrm_last_error(), "CUDA") != NULL || strstr(dlrm_last_error(), "cuBLASLt"));
    }
    free(cuda_config);
  }
  {
    /* Tables past the memory limit: refused before anything is allocated. */
    static const char kLimit[] = "\nmemory_limit_bytes: 1\n";
    char* limited = (char*)malloc(strlen(kConfig) + sizeof kLimit);
    CHECK(limited != NULL);
    strcpy(limited, kConfig);
    strcat(limited, kLimit);
    CHECK_FAILS(dlrm_engine_create(limited, &e), DLRM_RESOURCE_EXHAUSTED,
                "memory_limit_bytes is 1 bytes");
    CHECK(e == NULL);
    free(limited);
  }
  CHECK_FAILS(dlrm_engine_create_from_file("/nonexistent/dir/cfg.txt", &e), DLRM_IO,
              "/nonexistent/dir/cfg.txt");
  CHECK(dlrm_engine_create_from_file(kConfigPath, &e) == DLRM_OK);
  CHECK(e != NULL);
  dlrm_engine_destroy(e);
}

static void test_train_predict_eval(dlrm_engine* e) {
  test_batch t, ref;
  float before[B], after[B], loss = -1, first_loss = 0;
  int step;
  int64_t steps = -1;
  dlrm_eval_result result;
  dlrm_batch both[2];
  char* config = NULL;

  make_batch(&ref, 1);
  predict_ref(e, &ref, before);
  for (step = 0; step < 30; ++step) {
    make_batch(&t, step % 3);
    CHECK(dlrm_engine_train_step(e, &t.batch, &loss) == DLRM_OK);
    if (step == 0) first_loss = loss;
    CHECK(isfinite(loss) && loss > 0);
  }
  CHECK(loss < first_loss); /* it learns the fixed batches */
  CHECK(dlrm_engine_get_step(e, &steps) == DLRM_OK && steps == 30);
  predict_ref(e, &ref, after);
  CHECK(!same_floats(before, after, B));
  for (step = 0; step < B; ++step) CHECK(after[step] >= 0.0f && after[step] <= 1.0f);

  make_batch(&t, 2);
  both[0] = ref.batch;
  both[1] = t.batch;
  memset(&result, 0, sizeof result);
  result.struct_size = sizeof result;
  CHECK(dlrm_engine_evaluate(e, both, 2, &result) == DLRM_OK);
  CHECK(result.num_samples == 2 * B);
  CHECK(result.auc >= 0 && result.auc <= 1 && result.log_loss > 0);

  CHECK(dlrm_engine_set_learning_rate(e, DLRM_LR_ALL, 0.01f) == DLRM_OK);
  CHECK(dlrm_engine_get_config(e, &config) == DLRM_OK);
  CHECK(config != NULL && strstr(config, "num_dense_features: 3") != NULL);
  dlrm_free(config);
}

/* Every bad input: right status, message names the problem, predictions unchanged. */
static void test_bad_inputs(dlrm_engine* e) {
  test_batch ref, t;
  float before[B], after[B], out[B], loss;
  dlrm_eval_result result;
  int64_t steps_before, steps_after;

  make_batch(&ref, 1);
  predict_ref(e, &ref, before);
  CHECK(dlrm_engine_get_step(e, &steps_before) == DLRM_OK);

  CHECK_FAILS(dlrm_engine_train_step(NULL, &ref.batch, &loss), DLRM_INVALID_ARGUMENT, "engine");
  CHECK_FAILS(dlrm_engine_train_step(e, NULL, &loss), DLRM_INVALID_ARGUMENT, "batch");
  CHECK_FAILS(dlrm_engine_predict(e, &ref.batch, NULL, B), DLRM_INVALID_ARGUMENT, "out");
  CHECK_FAILS(dlrm_engine_predict(e, &ref.batch, out, B - 1), DLRM_INVALID_ARGUMENT, "batch_size");

  make_batch(&t, 3);
  t.batch.struct_size = 0;
  CHECK_FAILS(dlrm_engine_train_step(e, &t.batch, &loss), DLRM_INVALID_ARGUMENT, "struct_size");

  make_batch(&t, 3);
  t.batch.num_dense = ND + 1;
  CHECK_FAILS(dlrm_engine_train_step(e, &t.batch, &loss), DLRM_INVALID_ARGUMENT, "num_dense");

  make_batch(&t, 3);
  t.batch.num_sparse = NF - 1;
  CHECK_FAILS(dlrm_engine_train_step(e, &t.batch, &loss), DLRM_INVALID_ARGUMENT, "num_sparse");

  make_batch(&t, 3);
  t.batch.num_ids += 1;
  CHECK_FAILS(dlrm_engine_train_step(e, &t.batch, &loss), DLRM_INVALID_ARGUMENT, "num_ids");

  make_batch(&t, 3);
  t.batch.batch_size = 0;
  CHECK_FAILS(dlrm_engine_train_step(e, &t.batch, &loss), DLRM_INVALID_ARGUMENT, "batch_size");

  /* Adversarial findings 1 and 4: a batch_size of 2^62 is refused naming it (no overflow);
   * an output capacity of SIZE_MAX means "large enough", not -1. */
  make_batch(&t, 3);
  t.batch.batch_size = (int64_t)1 << 62;
  CHECK_FAILS(dlrm_engine_train_step(e, &t.batch, &loss), DLRM_INVALID_ARGUMENT,
              "batch.batch_size must be in [1, 2^31 - 1], got 4611686018427387904");
  CHECK_FAILS(dlrm_engine_predict(e, &t.batch, out, SIZE_MAX), DLRM_INVALID_ARGUMENT,
              "batch.batch_size");
  CHECK(dlrm_engine_predict(e, &ref.batch, out, SIZE_MAX) == DLRM_OK);
  CHECK(same_floats(before, out, B));

  make_batch(&t, 3);
  t.batch.dense = NULL;
  CHECK_FAILS(dlrm_engine_train_step(e, &t.batch, &loss), DLRM_INVALID_ARGUMENT, "dense");

  make_batch(&t, 3);
  t.lengths[5] = -1;
  CHECK_FAILS(dlrm_engine_train_step(e, &t.batch, &loss), DLRM_INVALID_ARGUMENT, "negative");

  make_batch(&t, 3);
  t.ids[0] = 50; /* feature 0's table has 50 rows */
  CHECK_FAILS(dlrm_engine_train_step(e, &t.batch, &loss), DLRM_OUT_OF_RANGE, "batch.ids[0]");
  make_batch(&t, 3);
  t.ids[0] = -3;
  CHECK_FAILS(dlrm_engine_train_step(e, &t.batch, &loss), DLRM_OUT_OF_RANGE, "-3");
  CHECK_FAILS(dlrm_engine_predict(e, &t.batch, out, B), DLRM_OUT_OF_RANGE, "batch.ids[0]");

  make_batch(&t, 3);
  t.dense[4] = NAN;
  CHECK_FAILS(dlrm_engine_train_step(e, &t.batch, &loss), DLRM_INVALID_ARGUMENT,
              "batch.dense[1][1]");
  make_batch(&t, 3);
  t.dense[0] = INFINITY;
  CHECK_FAILS(dlrm_engine_predict(e, &t.batch, out, B), DLRM_INVALID_ARGUMENT, "batch.dense[0]");

  make_batch(&t, 3);
  t.labels[2] = NAN;
  CHECK_FAILS(dlrm_engine_train_step(e, &t.batch, &loss), DLRM_INVALID_ARGUMENT, "batch.labels[2]");
  make_batch(&t, 3);
  t.labels[2] = 2.0f;
  CHECK_FAILS(dlrm_engine_train_step(e, &t.batch, &loss), DLRM_INVALID_ARGUMENT, "batch.labels[2]");
  make_batch(&t, 3);
  t.batch.labels = NULL;
  CHECK_FAILS(dlrm_engine_train_step(e, &t.batch, &loss), DLRM_INVALID_ARGUMENT, "labels");
  CHECK(dlrm_engine_predict(e, &t.batch, out, B) == DLRM_OK); /* labels optional here */

  CHECK_FAILS(dlrm_engine_evaluate(e, NULL, 1, &result), DLRM_INVALID_ARGUMENT, "batches");
  memset(&result, 0, sizeof result);
  result.struct_size = sizeof result;
  CHECK_FAILS(dlrm_engine_evaluate(e, &t.batch, 1, &result), DLRM_INVALID_ARGUMENT, "batches[0]");
  CHECK_FAILS(dlrm_engine_evaluate(e, &ref.batch, 0, &result), DLRM_INVALID_ARGUMENT,
              "at least one batch");

  CHECK_FAILS(dlrm_engine_set_learning_rate(e, DLRM_LR_DENSE, -1.0f), DLRM_INVALID_ARGUMENT,
              "learning rate");
  CHECK_FAILS(dlrm_engine_set_learning_rate(e, DLRM_LR_DENSE, NAN), DLRM_INVALID_ARGUMENT,
              "learning rate");
  CHECK_FAILS(dlrm_engine_set_learning_rate(e, 9, 0.1f), DLRM_INVALID_ARGUMENT, "target");
  CHECK_FAILS(dlrm_engine_get_step(e, NULL), DLRM_INVALID_ARGUMENT, "out");
  CHECK_FAILS(dlrm_engine_save(e, NULL), DLRM_INVALID_ARGUMENT, "path");

  predict_ref(e, &ref, after);
  CHECK(same_floats(before, after, B));
  CHECK(dlrm_engine_get_step(e, &steps_after) == DLRM_OK && steps_after == steps_before);
}

static void test_checkpoints(dlrm_engine* e, const char* dir) {
  char path[512], bad[512];
  float before[B], after[B], fresh[B], loss_a, loss_b;
  test_batch ref, t;
  dlrm_engine* other = NULL;
  size_t n = 0;
  char* bytes;

  make_batch(&ref, 1);
  snprintf(path, sizeof path, "%s/engine.ckpt", dir);
  CHECK(dlrm_engine_save(e, path) == DLRM_OK);
  predict_ref(e, &ref, before);

  /* A fresh engine from the checkpoint predicts bitwise the same, and trains the same. */
  CHECK(dlrm_engine_create_from_checkpoint(path, &other) == DLRM_OK);
  predict_ref(other, &ref, fresh);
  CHECK(same_floats(before, fresh, B));
  make_batch(&t, 2);
  CHECK(dlrm_engine_train_step(e, &t.batch, &loss_a) == DLRM_OK);
  CHECK(dlrm_engine_train_step(other, &t.batch, &loss_b) == DLRM_OK);
  CHECK(memcmp(&loss_a, &loss_b, sizeof loss_a) == 0);
  predict_ref(e, &ref, after);
  predict_ref(other, &ref, fresh);
  CHECK(same_floats(after, fresh, B));
  CHECK(dlrm_engine_load(e, path) == DLRM_OK); /* roll back one step */
  predict_ref(e, &ref, after);
  CHECK(same_floats(before, after, B));

  /* Truncated and corrupted checkpoints are refused; the engine is unchanged. */
  bytes = read_file(path, &n);
  CHECK(bytes != NULL && n > 100);
  if (bytes) {
    snprintf(bad, sizeof bad, "%s/truncated.ckpt", dir);
    write_file(bad, bytes, n / 2);
    CHECK_FAILS(dlrm_engine_load(e, bad), DLRM_DATA_LOSS, "truncated.ckpt");
    bytes[n / 2] ^= 0x5a;
    snprintf(bad, sizeof bad, "%s/corrupted.ckpt", dir);
    write_file(bad, bytes, n);
    CHECK_FAILS(dlrm_engine_load(e, bad), DLRM_DATA_LOSS, "corrupted.ckpt");
    CHECK_FAILS(dlrm_engine_create_from_checkpoint(bad, &other), DLRM_DATA_LOSS, "checksum");
    free(bytes);
  }
  CHECK_FAILS(dlrm_engine_load(e, "/nonexistent/engine.ckpt"), DLRM_IO, "/nonexistent/engine.ckpt");
  CHECK_FAILS(dlrm_engine_save(e, "/nonexistent/dir/engine.ckpt"), DLRM_IO, "/nonexistent/dir");
  predict_ref(e, &ref, after);
  CHECK(same_floats(before, after, B));
  dlrm_engine_destroy(other);
  other = NULL;

  /* On a named device: the CPU restores the same state (a GPU-trained checkpoint serves
   * on a machine without a GPU this way); a name that is no device is refused. */
  CHECK(dlrm_engine_create_from_checkpoint_on(path, "cpu", &other) == DLRM_OK);
  if (other) {
    predict_ref(other, &ref, fresh);
    CHECK(same_floats(before, fresh, B));
    dlrm_engine_destroy(other);
    other = NULL;
  }
  CHECK(dlrm_engine_create_from_checkpoint_on(path, NULL, &other) == DLRM_OK);
  dlrm_engine_destroy(other);
  other = NULL;
  CHECK_FAILS(dlrm_engine_create_from_checkpoint_on(path, "gpu", &other), DLRM_INVALID_ARGUMENT,
              "device must be cpu, cuda or cuda:N, got 'gpu'");
  CHECK_FAILS(dlrm_engine_create_from_checkpoint_on(NULL, "cpu", &other), DLRM_INVALID_ARGUMENT,
              "checkpoint_path");
  CHECK(other == NULL);
}

/* Serving exports: FP32 predicts bitwise as the engine, INT8 (with fp16 dense parameters
 * too) within 0.005 of it; the INT8 model refuses what would write a row, naming the
 * table, and stays as it was. */
static void test_export(dlrm_engine* e, const char* dir) {
  char fp32_path[512], int8_path[512], dense_path[512];
  float before[B], served[B], after[B], loss;
  test_batch ref, t;
  dlrm_engine *fp32 = NULL, *int8 = NULL, *dense16 = NULL;
  int i, close = 1;
  make_batch(&ref, 1);
  make_batch(&t, 2);
  predict_ref(e, &ref, before);
  snprintf(fp32_path, sizeof fp32_path, "%s/model.serving", dir);
  snprintf(int8_path, sizeof int8_path, "%s/model.int8.serving", dir);
  CHECK(dlrm_engine_export(e, fp32_path, DLRM_EXPORT_FP32) == DLRM_OK);
  CHECK(dlrm_engine_export(e, int8_path, DLRM_EXPORT_INT8) == DLRM_OK);
  CHECK_FAILS(dlrm_engine_export(e, NULL, DLRM_EXPORT_INT8), DLRM_INVALID_ARGUMENT, "path");
  CHECK_FAILS(dlrm_engine_export(e, int8_path, 7), DLRM_INVALID_ARGUMENT, "quantize");
  CHECK_FAILS(dlrm_engine_export(NULL, int8_path, 0), DLRM_INVALID_ARGUMENT, "engine");
  snprintf(dense_path, sizeof dense_path, "%s/model.dense16.serving", dir);
  CHECK_FAILS(dlrm_engine_export(e, dense_path, DLRM_EXPORT_DENSE_BF16 | DLRM_EXPORT_DENSE_FP16),
              DLRM_INVALID_ARGUMENT, "got 768");
  CHECK_FAILS(dlrm_engine_export(e, dense_path, 0x400), DLRM_INVALID_ARGUMENT, "got 1024");
  CHECK(dlrm_engine_export(e, dense_path, DLRM_EXPORT_INT8 | DLRM_EXPORT_DENSE_FP16) == DLRM_OK);
  CHECK(dlrm_engine_create_from_checkpoint(dense_path, &dense16) == DLRM_OK);
  if (dense16) {
    predict_ref(dense16, &ref, served);
    for (i = 0; i < B; ++i) close = close && fabsf(served[i] - before[i]) < 0.005f;
    CHECK(close);
    dlrm_engine_destroy(dense16);
  }
  CHECK(dlrm_engine_create_from_checkpoint(fp32_path, &fp32) == DLRM_OK);
  CHECK(dlrm_engine_create_from_checkpoint(int8_path, &int8) == DLRM_OK);
  if (!fp32 || !int8) return;
  predict_ref(fp32, &ref, served);
  CHECK(same_floats(before, served, B));
  predict_ref(int8, &ref, served);
  for (i = 0; i < B; ++i) close = close && fabsf(served[i] - before[i]) < 0.005f;
  CHECK(close);
  CHECK_FAILS(dlrm_engine_train_step(int8, &t.batch, &loss), DLRM_FAILED_PRECONDITION,
              "has precision INT8");
  CHECK_FAILS(dlrm_engine_save(int8, fp32_path), DLRM_FAILED_PRECONDITION, "has precision INT8");
  predict_ref(int8, &ref, after);
  CHECK(same_floats(served, after, B));
  dlrm_engine_destroy(fp32);
  dlrm_engine_destroy(int8);
}

/* Submitted steps give bitwise the losses and predictions of synchronous steps. */
static void test_async(void) {
  dlrm_engine *sync_engine = NULL, *async_engine = NULL;
  test_batch t, ref;
  float sync_loss[4], async_loss[4], a[B], b[B];
  int64_t tickets[4], bad_ticket = 0;
  int i;
  CHECK(dlrm_engine_create(kConfig, &sync_engine) == DLRM_OK);
  CHECK(dlrm_engine_create(kConfig, &async_engine) == DLRM_OK);
  if (!sync_engine || !async_engine) return;
  for (i = 0; i < 4; ++i) {
    make_batch(&t, i);
    CHECK(dlrm_engine_train_step(sync_engine, &t.batch, &sync_loss[i]) == DLRM_OK);
    CHECK(dlrm_engine_train_submit(async_engine, &t.batch, &tickets[i]) == DLRM_OK);
    memset(t.dense, 0, sizeof t.dense); /* submit copied the batch */
  }
  for (i = 0; i < 4; ++i)
    CHECK(dlrm_engine_train_wait(async_engine, tickets[i], &async_loss[i]) == DLRM_OK);
  CHECK(same_floats(sync_loss, async_loss, 4));
  make_batch(&ref, 1);
  predict_ref(sync_engine, &ref, a);
  predict_ref(async_engine, &ref, b);
  CHECK(same_floats(a, b, B));

  make_batch(&t, 3);
  t.ids[0] = 50;
  CHECK_FAILS(dlrm_engine_train_submit(async_engine, &t.batch, &bad_ticket), DLRM_OUT_OF_RANGE,
              "batch.ids[0]");
  CHECK_FAILS(dlrm_engine_train_submit(async_engine, &ref.batch, NULL), DLRM_INVALID_ARGUMENT,
              "ticket_out");
  CHECK_FAILS(dlrm_engine_train_wait(async_engine, tickets[0], NULL), DLRM_INVALID_ARGUMENT,
              "already waited");
  CHECK_FAILS(dlrm_engine_train_wait(async_engine, 999, NULL), DLRM_INVALID_ARGUMENT,
              "never issued");
  CHECK_FAILS(dlrm_engine_train_wait(NULL, 1, NULL), DLRM_INVALID_ARGUMENT, "engine");
  dlrm_engine_destroy(sync_engine);
  dlrm_engine_destroy(async_engine);
}

static void test_parameters(dlrm_engine* e) {
  int64_t count = 0, shape[DLRM_MAX_PARAMETER_DIMS], i;
  int32_t ndim = 0;
  char* name = NULL;
  float* values;
  float before[B], after[B], bad[4] = {0, 0, 0, 0};
  test_batch ref;

  make_batch(&ref, 1);
  CHECK(dlrm_engine_parameter_count(e, &count) == DLRM_OK);
  CHECK(count == 2 * 2 + 2 * 2 + 2); /* two 2-layer MLPs, two tables */
  CHECK(dlrm_engine_parameter_name(e, 0, &name) == DLRM_OK);
  CHECK(name != NULL && strcmp(name, "bottom_mlp.0.weight") == 0);
  dlrm_free(name);
  CHECK(dlrm_engine_parameter_name(e, count - 1, &name) == DLRM_OK);
  CHECK(name != NULL && strcmp(name, "embedding.t1.weight") == 0);
  dlrm_free(name);
  CHECK_FAILS(dlrm_engine_parameter_name(e, count, &name), DLRM_OUT_OF_RANGE, "index");
  CHECK(dlrm_engine_parameter_shape(e, "bottom_mlp.0.weight", shape, 8, &ndim) == DLRM_OK);
  CHECK(ndim == 2 && shape[0] == 8 && shape[1] == ND);
  CHECK(dlrm_engine_parameter_shape(e, "embedding.t0.weight", shape, 8, &ndim) == DLRM_OK);
  CHECK(ndim == 2 && shape[0] == 50 && shape[1] == 4);
  CHECK_FAILS(dlrm_engine_parameter_shape(e, "embedding.t0.weight", shape, 1, &ndim),
              DLRM_INVALID_ARGUMENT, "shape_capacity");
  CHECK_FAILS(dlrm_engine_parameter_shape(e, "nope", shape, 8, &ndim), DLRM_NOT_FOUND, "nope");

  /* Read, write back modified, read again: bitwise what was written. */
  values = (float*)malloc(50 * 4 * sizeof(float));
  CHECK(values != NULL);
  if (!values) return;
  CHECK(dlrm_engine_read_parameter(e, "embedding.t0.weight", values, 200) == DLRM_OK);
  CHECK_FAILS(dlrm_engine_read_parameter(e, "embedding.t0.weight", values, 199),
              DLRM_INVALID_ARGUMENT, "199");
  predict_ref(e, &ref, before);
  for (i = 0; i < 200; ++i) values[i] = (float)i * 0.001f;
  CHECK(dlrm_engine_write_parameter(e, "embedding.t0.weight", values, 200) == DLRM_OK);
  memset(values, 0, 200 * sizeof(float));
  CHECK(dlrm_engine_read_parameter(e, "embedding.t0.weight", values, 200) == DLRM_OK);
  for (i = 0; i < 200; ++i) CHECK(values[i] == (float)i * 0.001f);
  predict_ref(e, &ref, after);
  CHECK(!same_floats(before, after, B));

  /* Bad writes change nothing. */
  predict_ref(e, &ref, before);
  CHECK_FAILS(dlrm_engine_write_parameter(e, "embedding.t0.weight", values, 199),
              DLRM_INVALID_ARGUMENT, "199 were given");
  values[17] = NAN;
  CHECK_FAILS(dlrm_engine_write_parameter(e, "embedding.t0.weight", values, 200),
              DLRM_INVALID_ARGUMENT, "values[17]");
  CHECK_FAILS(dlrm_engine_write_parameter(e, "no.such", bad, 4), DLRM_NOT_FOUND, "no.such");
  CHECK_FAILS(dlrm_engine_write_parameter(e, "embedding.t0.weight", NULL, 200),
              DLRM_INVALID_ARGUMENT, "values");
  predict_ref(e, &ref, after);
  CHECK(same_floats(before, after, B));
  free(values);
}

/* kConfig with table t0 made DYNAMIC with 6 rows (LFU): malloc'ed, or NULL. */
static char* dynamic_config(void) {
  const char* fixed = "tables { name: 't0' num_rows: 50 dim: 4 }";
  const char* dynamic =
      "tables { name: 't0' num_rows: 6 dim: 4 kind: DYNAMIC dynamic { eviction: LFU } }";
  const char* at = strstr(kConfig, fixed);
  size_t head, size;
  char* text;
  if (at == NULL) return NULL;
  head = (size_t)(at - kConfig);
  size = strlen(kConfig) - strlen(fixed) + strlen(dynamic) + 1;
  text = (char*)malloc(size);
  if (text == NULL) return NULL;
  memcpy(text, kConfig, head);
  strcpy(text + head, dynamic);
  strcat(text, at + strlen(fixed));
  return text;
}

static void test_table_stats(void) {
  dlrm_engine* e = NULL;
  dlrm_table_stats s, before;
  test_batch ref;
  float out[B];
  int step, i, first_ids;
  char* config = dynamic_config();
  CHECK(config != NULL);
  if (config == NULL) return;
  CHECK(dlrm_engine_create(config, &e) == DLRM_OK);
  free(config);
  if (e == NULL) return;
  for (step = 0; step < 4; ++step) {
    make_batch(&ref, step);
    /* Feature 'a' (table t0) gets raw ids spread over the int64 range (unsigned: wraps). */
    for (i = 0, first_ids = 0; i < B; ++i) first_ids += ref.lengths[i];
    for (i = 0; i < first_ids; ++i)
      ref.ids[i] = (int64_t)((uint64_t)(ref.ids[i] + 1) * 0x9E3779B97F4A7C1ULL);
    CHECK(dlrm_engine_train_step(e, &ref.batch, NULL) == DLRM_OK);
  }
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  CHECK(dlrm_engine_table_stats(e, "t0", &s) == DLRM_OK);
  CHECK(s.dynamic == 1 && s.capacity == 6 && s.size > 0 && s.size <= 6);
  CHECK(s.lookups > 0 && s.hits <= s.lookups && s.admitted > 6 && s.evicted > 0);
  CHECK(s.admitted - s.evicted == s.size && s.memory_bytes > 6 * 4 * 4);
  before = s;
  predict_ref(e, &ref, out); /* prediction admits nothing */
  CHECK(dlrm_engine_table_stats(e, "t0", &s) == DLRM_OK);
  CHECK(s.lookups == before.lookups && s.admitted == before.admitted && s.size == before.size);
  CHECK(dlrm_engine_table_stats(e, "t1", &s) == DLRM_OK);
  CHECK(s.dynamic == 0 && s.capacity == 20 && s.size == 20 && s.lookups == 0);
  CHECK_FAILS(dlrm_engine_table_stats(e, "nope", &s), DLRM_NOT_FOUND, "nope");
  CHECK_FAILS(dlrm_engine_table_stats(e, NULL, &s), DLRM_INVALID_ARGUMENT, "table");
  CHECK_FAILS(dlrm_engine_table_stats(e, "t0", NULL), DLRM_INVALID_ARGUMENT, "out");
  s.struct_size = 8;
  CHECK_FAILS(dlrm_engine_table_stats(e, "t0", &s), DLRM_INVALID_ARGUMENT, "struct_size");
  CHECK_FAILS(dlrm_engine_table_stats(NULL, "t0", &s), DLRM_INVALID_ARGUMENT, "engine");
  dlrm_engine_destroy(e);
}

/* ---- Arrow input: test_batch.h's batch as a C Data Interface struct array --------------- */
static void arrow_noop_schema(struct ArrowSchema* s) { (void)s; }
static void arrow_noop_array(struct ArrowArray* a) { (void)a; }

typedef struct {
  float dense[ND][B], labels[B];
  int32_t offsets[NF][B + 1];
  const void* buffers[1 + ND + 1 + 2 * NF][2];
  struct ArrowSchema schemas[1 + ND + 1 + 2 * NF];
  struct ArrowArray arrays[1 + ND + 1 + 2 * NF];
  struct ArrowSchema* schema_children[ND + 1 + NF];
  struct ArrowArray* array_children[ND + 1 + NF];
  struct ArrowSchema* list_schema_child[NF];
  struct ArrowArray* list_array_child[NF];
} arrow_record;

/* Slot i: a column named name of format with n values over buffer data (offsets for a
 * list, whose child is slot child). */
static void arrow_slot(arrow_record* r, int i, const char* format, const char* name, int64_t n,
                       const void* data, int n_buffers) {
  struct ArrowSchema* s = &r->schemas[i];
  struct ArrowArray* a = &r->arrays[i];
  memset(s, 0, sizeof *s);
  memset(a, 0, sizeof *a);
  s->format = format;
  s->name = name;
  s->release = arrow_noop_schema;
  r->buffers[i][0] = NULL;
  r->buffers[i][1] = data;
  a->length = n;
  a->n_buffers = n_buffers;
  a->buffers = r->buffers[i];
  a->release = arrow_noop_array;
}

/* Columns d0 d1 d2 (float32), click (float32), a and b (list<int64>) of ref. */
static void arrow_of(const test_batch* ref, arrow_record* r) {
  static const char* const dense_names[ND] = {"d0", "d1", "d2"};
  static const char* const sparse_names[NF] = {"a", "b"};
  int f, s, j, pos = 0;
  arrow_slot(r, 0, "+s", "", B, NULL, 1);
  for (j = 0; j < ND; ++j) {
    for (s = 0; s < B; ++s) r->dense[j][s] = ref->dense[s * ND + j];
    arrow_slot(r, 1 + j, "f", dense_names[j], B, r->dense[j], 2);
  }
  memcpy(r->labels, ref->labels, sizeof r->labels);
  arrow_slot(r, 1 + ND, "f", "click", B, r->labels, 2);
  for (f = 0; f < NF; ++f) {
    int list = 2 + ND + 2 * f, values = list + 1, first = pos;
    for (s = 0; s <= B; ++s) {
      r->offsets[f][s] = pos - first;
      if (s < B) pos += ref->lengths[f * B + s];
    }
    arrow_slot(r, values, "l", "item", pos - first, ref->ids + first, 2);
    arrow_slot(r, list, "+l", sparse_names[f], B, r->offsets[f], 2);
    r->list_schema_child[f] = &r->schemas[values];
    r->list_array_child[f] = &r->arrays[values];
    r->schemas[list].n_children = r->arrays[list].n_children = 1;
    r->schemas[list].children = &r->list_schema_child[f];
    r->arrays[list].children = &r->list_array_child[f];
  }
  for (j = 0; j < ND + 1 + NF; ++j) {
    int slot = j <= ND ? 1 + j : 2 + ND + 2 * (j - ND - 1);
    r->schema_children[j] = &r->schemas[slot];
    r->array_children[j] = &r->arrays[slot];
  }
  r->schemas[0].n_children = r->arrays[0].n_children = ND + 1 + NF;
  r->schemas[0].children = r->schema_children;
  r->arrays[0].children = r->array_children;
}

static dlrm_arrow_columns arrow_columns(void) {
  static const char* const dense[ND] = {"d0", "d1", "d2"};
  static const char* const sparse[NF] = {"a", "b"};
  dlrm_arrow_columns c;
  memset(&c, 0, sizeof c);
  c.struct_size = sizeof c;
  c.label = "click";
  c.dense = dense;
  c.num_dense = ND;
  c.sparse = sparse;
  c.num_sparse = NF;
  return c;
}

/* The converted batch is the hand-built one, field by field, and predicts the same. */
static void test_arrow_equals_hand_built(dlrm_engine* e) {
  test_batch ref;
  arrow_record r;
  dlrm_arrow_columns cols = arrow_columns();
  dlrm_arrow_batch* h = NULL;
  dlrm_batch view;
  float want[B], got[B];
  make_batch(&ref, 3);
  arrow_of(&ref, &r);
  CHECK(dlrm_arrow_batch_create(&r.schemas[0], &r.arrays[0], &cols, &h) == DLRM_OK);
  memset(&view, 0, sizeof view);
  view.struct_size = sizeof view;
  CHECK(dlrm_arrow_batch_view(h, &view) == DLRM_OK);
  CHECK(view.batch_size == B && view.num_dense == ND && view.num_sparse == NF);
  CHECK(view.num_ids == ref.batch.num_ids && view.weights == NULL);
  CHECK(same_floats(view.dense, ref.dense, B * ND) && same_floats(view.labels, ref.labels, B));
  CHECK(memcmp(view.lengths, ref.lengths, sizeof ref.lengths) == 0);
  CHECK(memcmp(view.ids, ref.ids, sizeof(int64_t) * (size_t)view.num_ids) == 0);
  predict_ref(e, &ref, want);
  CHECK(dlrm_engine_predict(e, &view, got, B) == DLRM_OK && same_floats(want, got, B));
  view.struct_size = 4;
  CHECK_FAILS(dlrm_arrow_batch_view(h, &view), DLRM_INVALID_ARGUMENT, "out->struct_size");
  CHECK_FAILS(dlrm_arrow_batch_view(h, NULL), DLRM_INVALID_ARGUMENT, "out is NULL");
  CHECK_FAILS(dlrm_arrow_batch_view(NULL, &view), DLRM_INVALID_ARGUMENT, "batch is NULL");
  dlrm_arrow_batch_destroy(h);
  dlrm_arrow_batch_destroy(NULL);
}

/* Each bad argument is named, and *out is left NULL. */
static void test_arrow_refusals(void) {
  static const char* const holes[ND] = {"d0", NULL, "d2"};
  test_batch ref;
  arrow_record r;
  dlrm_arrow_columns cols = arrow_columns();
  dlrm_arrow_batch* h = NULL;
  const struct ArrowSchema* schema = &r.schemas[0];
  const struct ArrowArray* array = &r.arrays[0];
  make_batch(&ref, 1);
  arrow_of(&ref, &r);
  CHECK_FAILS(dlrm_arrow_batch_create(NULL, array, &cols, &h), DLRM_INVALID_ARGUMENT, "schema");
  CHECK_FAILS(dlrm_arrow_batch_create(schema, NULL, &cols, &h), DLRM_INVALID_ARGUMENT, "array");
  CHECK_FAILS(dlrm_arrow_batch_create(schema, array, NULL, &h), DLRM_INVALID_ARGUMENT, "columns");
  CHECK_FAILS(dlrm_arrow_batch_create(schema, array, &cols, NULL), DLRM_INVALID_ARGUMENT, "out");
  cols.struct_size = 8;
  CHECK_FAILS(dlrm_arrow_batch_create(schema, array, &cols, &h), DLRM_INVALID_ARGUMENT,
              "columns->struct_size");
  cols = arrow_columns();
  cols.dense = holes;
  CHECK_FAILS(dlrm_arrow_batch_create(schema, array, &cols, &h), DLRM_INVALID_ARGUMENT,
              "columns->dense[1] is NULL");
  cols = arrow_columns();
  cols.num_sparse = -1;
  CHECK_FAILS(dlrm_arrow_batch_create(schema, array, &cols, &h), DLRM_INVALID_ARGUMENT,
              "columns->num_sparse is -1");
  cols = arrow_columns();
  cols.label = "";
  CHECK_FAILS(dlrm_arrow_batch_create(schema, array, &cols, &h), DLRM_INVALID_ARGUMENT,
              "columns->label is empty");
  cols.label = "clicks";
  CHECK_FAILS(dlrm_arrow_batch_create(schema, array, &cols, &h), DLRM_INVALID_ARGUMENT,
              "\"clicks\": is not a column");
  r.offsets[1][4] = 99; /* b's row 3 ends past its values */
  cols = arrow_columns();
  CHECK_FAILS(dlrm_arrow_batch_create(schema, array, &cols, &h), DLRM_INVALID_ARGUMENT,
              "\"b\": row 3 has offsets");
  CHECK(h == NULL);
}

int main(int argc, char** argv) {
  const char* dir;
  dlrm_engine* e = NULL;
  size_t config_len = 0;
  char* config_bytes;
  if (argc != 3) {
    fprintf(stderr, "usage: %s TMPDIR MODEL_CONFIG\n", argv[0]);
    return 2;
  }
  dir = argv[1];
  kConfigPath = argv[2];
  config_bytes = read_file(kConfigPath, &config_len);
  if (config_bytes == NULL) {
    fprintf(stderr, "cannot read %s\n", kConfigPath);
    return 2;
  }
  kConfig = (char*)malloc(config_len + 1);
  if (kConfig == NULL) return 2;
  memcpy(kConfig, config_bytes, config_len);
  kConfig[config_len] = '\0';
  free(config_bytes);
  test_version();
  test_create_errors();
  if (dlrm_engine_create(kConfig, &e) != DLRM_OK) {
    fprintf(stderr, "create failed: %s\n", dlrm_last_error());
    return 1;
  }
  test_train_predict_eval(e);
  test_bad_inputs(e);
  test_checkpoints(e, dir);
  test_export(e, dir);
  test_parameters(e);
  test_table_stats();
  test_async();
  test_arrow_equals_hand_built(e);
  test_arrow_refusals();
  dlrm_engine_destroy(e);
  free(kConfig);
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
