/* Deterministic fuzzing of batch validation through the C ABI (issue 17), as an
 * adversarial C client: from valid test_batch.h batches, every field is mutated from a
 * fixed seed (batch_size, num_dense, num_sparse, NULL pointers, negative or huge lengths,
 * ids outside their tables or at the int64 extremes, num_ids off by some, NaN/Inf dense,
 * labels outside [0, 1], NaN weights) within the buffers' real sizes, and sent to
 * train_step, predict, evaluate or train_submit. Every call returns DLRM_OK or a status
 * that names bad input; after every refusal the engine predicts the reference batch
 * bitwise as before and its step is unchanged (ASan/UBSan in the sanitizer build). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrm/dlrm.h"
#include "test_batch.h"

#define INPUTS 20000
#define CAP 64 /* every buffer holds this many entries more than the batch uses */

static uint64_t g_rng = 0x9E3779B97F4A7C15ULL;
static uint64_t next_random(void) { /* xorshift64* */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 2685821657736338717ULL;
}
static int64_t any(int64_t n) { return (int64_t)(next_random() % (uint64_t)n); }

/* A batch with room: its arrays larger than any mutation reads. */
typedef struct {
  float dense[B * ND + CAP];
  float labels[B + CAP];
  int32_t lengths[NF * B + CAP];
  int64_t ids[NF * B * 3 + CAP];
  float weights[NF * B * 3 + CAP];
  dlrm_batch batch;
} roomy_batch;

static void fill(roomy_batch* r, int salt) {
  test_batch t;
  int i;
  make_batch(&t, salt);
  memset(r, 0, sizeof *r);
  memcpy(r->dense, t.dense, sizeof t.dense);
  memcpy(r->labels, t.labels, sizeof t.labels);
  memcpy(r->lengths, t.lengths, sizeof t.lengths);
  memcpy(r->ids, t.ids, sizeof t.ids);
  for (i = 0; i < NF * B * 3 + CAP; ++i) r->weights[i] = 1.0f;
  r->batch = t.batch;
  r->batch.dense = r->dense;
  r->batch.labels = r->labels;
  r->batch.lengths = r->lengths;
  r->batch.ids = r->ids;
}

static int64_t extreme_id(void) {
  static const int64_t kIds[] = {-1, 0, 19, 20, 49, 50, INT64_MAX, INT64_MIN, 1LL << 40};
  return kIds[any(sizeof kIds / sizeof kIds[0])];
}
static float extreme_float(void) {
  const float kValues[] = {NAN, INFINITY, -INFINITY, -0.0f, 2.0f, -1.0f, 1e38f, 1e-45f};
  return kValues[any(sizeof kValues / sizeof kValues[0])];
}

/* One mutation; every read the batch then asks for stays inside r's arrays. */
static void mutate_once(roomy_batch* r) {
  dlrm_batch* b = &r->batch;
  switch (any(12)) {
    case 0: b->batch_size = any(2) ? -any(3) : B - 1 - any(B); break;
    case 1: b->num_dense = (int32_t)(ND + any(3) - 1); break;
    case 2: b->num_sparse = (int32_t)(NF + any(3) - 1); break;
    case 3: r->lengths[any(NF * B)] = any(2) ? -1 - (int32_t)any(3) : INT32_MAX; break;
    case 4: { /* one more or two more ids in a bag (an INT32_MAX bag stays as it is) */
      int32_t* len = &r->lengths[any(NF * B)];
      if (*len < INT32_MAX - 2) *len += (int32_t)any(3);
      break;
    }
    case 5: r->ids[any(NF * B * 3)] = extreme_id(); break;
    case 6: b->num_ids += any(5) - 2; break;
    case 7: r->dense[any(B * ND)] = extreme_float(); break;
    case 8: r->labels[any(B)] = extreme_float(); break;
    case 9:
      b->weights = r->weights;
      r->weights[any(NF * B * 3)] = extreme_float();
      break;
    case 10: {
      const void** fields[] = {(const void**)&b->dense, (const void**)&b->lengths,
                               (const void**)&b->ids, (const void**)&b->labels};
      *fields[any(4)] = NULL;
      break;
    }
    default: b->struct_size = (size_t)any((int64_t)sizeof *b);
  }
}

static int same_predictions(dlrm_engine* e, const test_batch* ref, const float* want) {
  float got[B];
  return dlrm_engine_predict(e, &ref->batch, got, B) == DLRM_OK &&
         memcmp(got, want, sizeof got) == 0;
}

/* A status a bad batch may get (never INTERNAL, IO, ...). */
static int names_bad_input(dlrm_status s) {
  return s == DLRM_INVALID_ARGUMENT || s == DLRM_OUT_OF_RANGE || s == DLRM_FAILED_PRECONDITION;
}

static dlrm_status call(dlrm_engine* e, const dlrm_batch* b, int which) {
  float out[B + CAP], loss;
  int64_t ticket;
  dlrm_eval_result result;
  dlrm_status s;
  switch (which) {
    case 0: return dlrm_engine_train_step(e, b, &loss);
    case 1: return dlrm_engine_predict(e, b, out, B + CAP);
    case 2: result.struct_size = sizeof result; return dlrm_engine_evaluate(e, b, 1, &result);
    default:
      s = dlrm_engine_train_submit(e, b, &ticket);
      return s != DLRM_OK ? s : dlrm_engine_train_wait(e, ticket, &loss);
  }
}

int main(int argc, char** argv) {
  dlrm_engine* e = NULL;
  test_batch ref;
  float want[B];
  int64_t step = 0, after = 0;
  int i, failures = 0, accepted = 0;
  if (argc != 2 || dlrm_engine_create_from_file(argv[1], &e) != DLRM_OK) {
    fprintf(stderr, "usage: capi_fuzz_test CONFIG (%s)\n", dlrm_last_error());
    return 2;
  }
  make_batch(&ref, 7);
  dlrm_engine_predict(e, &ref.batch, want, B);
  for (i = 0; i < INPUTS && failures < 10; ++i) {
    roomy_batch r;
    int k, which = (int)any(4);
    dlrm_status s;
    fill(&r, (int)any(16));
    for (k = 1 + (int)any(3); k > 0; --k) mutate_once(&r);
    dlrm_engine_get_step(e, &step);
    s = call(e, &r.batch, which);
    if (s == DLRM_OK) {
      ++accepted;
      dlrm_engine_predict(e, &ref.batch, want, B); /* training legitimately moved it */
      continue;
    }
    dlrm_engine_get_step(e, &after);
    if (!names_bad_input(s) || strlen(dlrm_last_error()) == 0 || after != step ||
        !same_predictions(e, &ref, want)) {
      fprintf(stderr, "input %d (call %d): %s: %s; step %lld -> %lld\n", i, which,
              dlrm_status_name(s), dlrm_last_error(), (long long)step, (long long)after);
      ++failures;
    }
  }
  dlrm_engine_destroy(e);
  printf("capi_fuzz_test: %d inputs, %d accepted, %d refused, %d failures\n", i, accepted,
         i - accepted, failures);
  return failures == 0 && accepted > 0 && accepted < i ? 0 : 1;
}
