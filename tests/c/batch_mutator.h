/* Mutations of a valid test_batch.h batch, as an adversarial C client makes them (issue
 * 17), shared by the deterministic capi_fuzz_test (a fixed-seed generator) and the
 * libFuzzer harness tests/fuzz/fuzz_batch.c (the fuzzer's input bytes): every field can be
 * mutated (batch_size, num_dense, num_sparse, NULL pointers, negative or huge lengths, ids
 * outside their tables or at the int64 extremes, num_ids off by some, NaN/Inf dense, labels
 * outside [0, 1], NaN weights) within the buffers' real sizes, and sent to train_step,
 * predict, evaluate or train_submit. The includer defines
 *   static uint64_t mutator_next(void);
 * the source of every choice. C99, header-only. */
#ifndef DLRM_TESTS_C_BATCH_MUTATOR_H_
#define DLRM_TESTS_C_BATCH_MUTATOR_H_

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dlrm/dlrm.h"
#include "test_batch.h"

static uint64_t mutator_next(void);
static int64_t any(int64_t n) { return (int64_t)(mutator_next() % (uint64_t)n); }

#define CAP 64 /* every buffer holds this many entries more than the batch uses */

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

/* A refusal as the contract wants it: a status that names bad input, a message, and the
 * engine as before (the step, and the reference batch predicted bitwise as `want`). */
static int refused_cleanly(dlrm_engine* e, dlrm_status s, int64_t step_before,
                           const test_batch* ref, const float* want) {
  int64_t after = -1;
  dlrm_engine_get_step(e, &after);
  return names_bad_input(s) && strlen(dlrm_last_error()) > 0 && after == step_before &&
         same_predictions(e, ref, want);
}

#endif /* DLRM_TESTS_C_BATCH_MUTATOR_H_ */
