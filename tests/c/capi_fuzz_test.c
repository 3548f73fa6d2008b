/* Deterministic fuzzing of batch validation through the C ABI (issue 17), as an
 * adversarial C client: batch_mutator.h's mutations of valid batches, drawn from a fixed
 * seed, sent to train_step, predict, evaluate or train_submit. Every call returns DLRM_OK or a
 * status that names bad input; after every refusal the engine predicts the reference batch bitwise
 * as before and its step is unchanged (ASan/UBSan in the sanitizer build). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "batch_mutator.h"
#include "dlrm/dlrm.h"

#define INPUTS 20000

static uint64_t g_rng = 0x9E3779B97F4A7C15ULL;
static uint64_t mutator_next(void) { /* xorshift64* */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 2685821657736338717ULL;
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
    if (!refused_cleanly(e, s, step, &ref, want)) {
      dlrm_engine_get_step(e, &after);
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
