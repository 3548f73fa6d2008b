/* libFuzzer harness (issue 17) of batch validation through the C ABI, as an adversarial C
 * client: the input's bytes choose batch_mutator.h's mutations of a valid batch (4 bytes a
 * choice, zeros once it is used up) and which call gets it (train_step, predict,
 * evaluate, train_submit + wait). Every call returns DLRM_OK or a status that names bad
 * input with a message, and a refusal leaves the engine's step and its predictions of a
 * reference batch bitwise as they were; anything else aborts (a finding). The engine is
 * the C tests' small model (tests/data/small_model.pbtxt), created once. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch_mutator.h"
#include "dlrm/dlrm.h"

static const uint8_t* g_data;
static size_t g_size, g_at;

static uint64_t mutator_next(void) {
  uint64_t v = 0;
  int i;
  for (i = 0; i < 4; ++i) v = v << 8 | (g_at < g_size ? g_data[g_at++] : 0u);
  return v;
}

static dlrm_engine* g_engine;

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  int i, j;
  for (i = 1; i < *argc; ++i) /* no run-time seeds: an empty input is a valid batch */
    if (strncmp((*argv)[i], "-dlrm_seeds=", 12) == 0) {
      for (j = i; j + 1 < *argc; ++j) (*argv)[j] = (*argv)[j + 1];
      --*argc;
      --i;
    }
  if (dlrm_engine_create_from_file(DLRM_SMALL_MODEL, &g_engine) != DLRM_OK) {
    fprintf(stderr, "fuzz_batch: cannot create the engine: %s\n", dlrm_last_error());
    abort();
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  test_batch ref;
  roomy_batch r;
  float want[B];
  int64_t step = 0;
  int k, which;
  dlrm_status s;
  g_data = data;
  g_size = size;
  g_at = 0;
  make_batch(&ref, 7);
  dlrm_engine_predict(g_engine, &ref.batch, want, B);
  dlrm_engine_get_step(g_engine, &step);
  fill(&r, (int)any(16));
  for (k = 1 + (int)any(3); k > 0; --k) mutate_once(&r);
  which = (int)any(4);
  s = call(g_engine, &r.batch, which);
  if (s != DLRM_OK && !refused_cleanly(g_engine, s, step, &ref, want)) {
    fprintf(stderr, "FINDING: call %d: %s: %s\n", which, dlrm_status_name(s), dlrm_last_error());
    abort();
  }
  return 0;
}
