/* The writer and the checker of tests/tools/save_kill_test.sh (issue 17, "checkpoint
 * under kill"), against the C ABI only.
 *   save_loop write CONFIG PATH   resumes from PATH if it exists (else starts from the
 *                                 config), then trains a step and saves to PATH, over and
 *                                 over, printing "saved step N" after each save returned,
 *                                 until killed (or 100000 steps)
 *   save_loop check PATH          loads PATH whole (every CRC checked) and prints
 *                                 "step N"; exit 1 naming the error if it does not load
 * C99. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrm/dlrm.h"
#include "test_batch.h"

static int fail(const char* what) {
  fprintf(stderr, "save_loop: %s: %s\n", what, dlrm_last_error());
  return 1;
}

static char* read_file(const char* path) {
  FILE* f = fopen(path, "rb");
  long size;
  char* text;
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  size = ftell(f);
  fseek(f, 0, SEEK_SET);
  text = (char*)malloc((size_t)size + 1);
  if (text != NULL && fread(text, 1, (size_t)size, f) != (size_t)size) {
    free(text);
    text = NULL;
  }
  if (text != NULL) text[size] = '\0';
  fclose(f);
  return text;
}

static int check(const char* path) {
  dlrm_engine* engine = NULL;
  int64_t step = 0;
  if (dlrm_engine_create_from_checkpoint(path, &engine) != DLRM_OK) return fail("load");
  if (dlrm_engine_get_step(engine, &step) != DLRM_OK) return fail("get_step");
  printf("step %lld\n", (long long)step);
  dlrm_engine_destroy(engine);
  return 0;
}

static int write_loop(const char* config_path, const char* path) {
  dlrm_engine* engine = NULL;
  test_batch t;
  int64_t step = 0;
  int i;
  FILE* existing = fopen(path, "rb");
  if (existing != NULL) {
    fclose(existing);
    if (dlrm_engine_create_from_checkpoint(path, &engine) != DLRM_OK) return fail("resume");
  } else {
    char* config = read_file(config_path);
    dlrm_status s;
    if (config == NULL) {
      fprintf(stderr, "save_loop: cannot read %s\n", config_path);
      return 1;
    }
    s = dlrm_engine_create(config, &engine);
    free(config);
    if (s != DLRM_OK) return fail("create");
  }
  for (i = 0; i < 100000; ++i) {
    float loss = 0;
    make_batch(&t, i);
    if (dlrm_engine_train_step(engine, &t.batch, &loss) != DLRM_OK) return fail("train_step");
    if (dlrm_engine_save(engine, path) != DLRM_OK) return fail("save");
    if (dlrm_engine_get_step(engine, &step) != DLRM_OK) return fail("get_step");
    printf("saved step %lld\n", (long long)step);
    fflush(stdout);
  }
  dlrm_engine_destroy(engine);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[1], "write") == 0) return write_loop(argv[2], argv[3]);
  if (argc == 3 && strcmp(argv[1], "check") == 0) return check(argv[2]);
  fprintf(stderr, "usage: save_loop write CONFIG PATH | save_loop check PATH\n");
  return 2;
}
