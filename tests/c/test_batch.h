/* The batches of the C ABI tests: 8 samples of the shared small model
 * (tests/data/small_model.pbtxt: 3 dense features, 2 sparse ones over tables of 50 and 20
 * rows), with empty bags included. C99, header-only (each test is one translation unit). */
#ifndef DLRM_TESTS_C_TEST_BATCH_H_
#define DLRM_TESTS_C_TEST_BATCH_H_

#include <string.h>

#include "dlrm/dlrm.h"

#define B 8
#define ND 3
#define NF 2

typedef struct {
  float dense[B * ND];
  float labels[B];
  int32_t lengths[NF * B];
  int64_t ids[NF * B * 3];
  dlrm_batch batch;
} test_batch;

/* Points t->batch at t's arrays: batch_size samples, num_ids ids, no weights. */
static inline void finish_batch(test_batch* t, int64_t batch_size, int64_t num_ids) {
  memset(&t->batch, 0, sizeof t->batch);
  t->batch.struct_size = sizeof(dlrm_batch);
  t->batch.batch_size = batch_size;
  t->batch.num_dense = ND;
  t->batch.num_sparse = NF;
  t->batch.dense = t->dense;
  t->batch.labels = t->labels;
  t->batch.lengths = t->lengths;
  t->batch.ids = t->ids;
  t->batch.num_ids = num_ids;
  t->batch.weights = NULL;
}

/* A full batch of B samples; `salt` varies the values. */
static inline void make_batch(test_batch* t, int salt) {
  int i, n = 0;
  for (i = 0; i < B * ND; ++i) t->dense[i] = (float)((i * 7 + salt) % 11) / 11.0f;
  for (i = 0; i < B; ++i) t->labels[i] = (float)((i + salt) % 2);
  for (i = 0; i < NF * B; ++i) {
    int len = (i + salt) % 3; /* 0, 1 or 2 ids: empty bags included */
    int k;
    t->lengths[i] = len;
    for (k = 0; k < len; ++k) t->ids[n++] = (int64_t)((i * 5 + k * 3 + salt) % 20);
  }
  finish_batch(t, B, n);
}

#endif /* DLRM_TESTS_C_TEST_BATCH_H_ */
