/* Multi-process training through the C ABI with a host-supplied all-gather (how an MPI or
 * Spark host plugs in): a coordinator, 2 embedding servers and 2 trainers run as threads
 * of this program, talking over loopback TCP, and the trainers' collective is this file's
 * all-gather over shared memory. Sync training then equals a single-process engine on the
 * same global batches, bitwise; a bad part fails the step on both trainers; bad settings
 * and bad calls are refused by name. The library's log lines (the coordinator's and the
 * servers') reach this program's log callback instead of stderr. */
#define _POSIX_C_SOURCE 200809L
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dlrm/dlrm.h"
#include "test_batch.h"

static int g_passed = 0, g_failed = 0;
static pthread_mutex_t g_check_mu = PTHREAD_MUTEX_INITIALIZER;

/* cond is evaluated before the lock: it may be a collective call. */
#define CHECK(cond)                                                                            \
  do {                                                                                         \
    int ok_ = (cond) ? 1 : 0;                                                                  \
    pthread_mutex_lock(&g_check_mu);                                                           \
    if (ok_) {                                                                                 \
      ++g_passed;                                                                              \
    } else {                                                                                   \
      ++g_failed;                                                                              \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              dlrm_last_error());                                                              \
    }                                                                                          \
    pthread_mutex_unlock(&g_check_mu);                                                         \
  } while (0)

#define CHECK_MESSAGE(needle) CHECK(strstr(dlrm_last_error(), (needle)) != NULL)

/* The global batch is test_batch.h's 8 samples: each of the 2 trainers gets 4, one
 * reduction chunk of the small model. */
#define STEPS 4
#define TRAINERS 2

/* What the log callback saw. */
typedef struct {
  pthread_mutex_t mu;
  int coordinator; /* "rendezvous complete" lines */
  int servers;     /* "server N (rank R) serves ..." lines */
  int malformed;   /* a level, file or line out of the contract */
} log_capture;
static log_capture g_log = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0};

static void capture_log(void* user_data, int32_t level, const char* file, int32_t line,
                        const char* message) {
  log_capture* c = (log_capture*)user_data;
  pthread_mutex_lock(&c->mu);
  if (strstr(message, "rendezvous complete") != NULL) ++c->coordinator;
  if (strncmp(message, "server ", 7) == 0 && strstr(message, ") serves ") != NULL) ++c->servers;
  if (level < DLRM_LOG_DEBUG || level >= DLRM_LOG_OFF || strncmp(file, "engine/", 7) != 0 ||
      line <= 0 || strchr(message, '\n') != NULL)
    ++c->malformed;
  pthread_mutex_unlock(&c->mu);
}

static char* g_config = NULL;
static char g_coordinator[64];
static const char* g_tmp = NULL;

/* Samples [s0, s1) of a global batch: one trainer's part. */
static void slice_batch(const test_batch* g, int s0, int s1, test_batch* p) {
  int f, s, n = 0, pos = 0, out = 0;
  memcpy(p->dense, g->dense + s0 * ND, sizeof(float) * (size_t)((s1 - s0) * ND));
  memcpy(p->labels, g->labels + s0, sizeof(float) * (size_t)(s1 - s0));
  for (f = 0; f < NF; ++f)
    for (s = 0; s < B; ++s) {
      int len = g->lengths[f * B + s], k;
      if (s >= s0 && s < s1) {
        p->lengths[out++] = len;
        for (k = 0; k < len; ++k) p->ids[n++] = g->ids[pos + k];
      }
      pos += len;
    }
  finish_batch(p, s1 - s0, n);
}

/* ---- the host's all-gather: shared memory and a barrier ------------------------------ */
typedef struct {
  pthread_barrier_t barrier;
  char* data[TRAINERS];
  int64_t size[TRAINERS];
  int fail; /* the next all-gather returns this code on every trainer */
} host_group;

typedef struct {
  host_group* group;
  int rank;
  int bad_put_checked;
} host_member;

static int32_t host_allgather(void* user_data, const void* data, int64_t num_bytes,
                              dlrm_gather* result) {
  host_member* me = (host_member*)user_data;
  host_group* g = me->group;
  int r, fail;
  if (!me->bad_put_checked) { /* bad puts are refused by name */
    me->bad_put_checked = 1;
    CHECK(dlrm_gather_put(result, TRAINERS, data, num_bytes) == DLRM_INVALID_ARGUMENT);
    CHECK_MESSAGE("outside [0, 2)");
    CHECK(dlrm_gather_put(result, 0, NULL, 5) == DLRM_INVALID_ARGUMENT);
  }
  g->data[me->rank] = (char*)malloc((size_t)num_bytes + 1);
  memcpy(g->data[me->rank], data, (size_t)num_bytes);
  g->size[me->rank] = num_bytes;
  pthread_barrier_wait(&g->barrier);
  fail = g->fail;
  if (!fail)
    for (r = 0; r < TRAINERS; ++r)
      CHECK(dlrm_gather_put(result, r, g->data[r], g->size[r]) == DLRM_OK);
  pthread_barrier_wait(&g->barrier);
  free(g->data[me->rank]);
  if (me->rank == 0) g->fail = 0;
  pthread_barrier_wait(&g->barrier);
  return fail;
}

/* ---- the job's processes as threads ---------------------------------------------------- */
static void cluster_text(char* out, size_t n, const char* role, int rank) {
  if (rank < 0)
    snprintf(out, n,
             "DLRM_ROLE=%s\nDLRM_WORLD_SIZE=4\nDLRM_COORDINATOR=%s\nDLRM_TIMEOUT_MS=20000\n", role,
             g_coordinator);
  else
    snprintf(out, n,
             "# a peer\nDLRM_ROLE=%s\nDLRM_RANK=%d\nDLRM_WORLD_SIZE=4\nDLRM_COORDINATOR=%s\n"
             "DLRM_TIMEOUT_MS=20000\n",
             role, rank, g_coordinator);
}

typedef struct {
  const char* role;
  int rank;
  dlrm_status status;
} role_thread;

static void* run_role(void* arg) {
  role_thread* t = (role_thread*)arg;
  char cluster[256];
  cluster_text(cluster, sizeof cluster, t->role, t->rank);
  t->status = dlrm_run_role(g_config, cluster, NULL);
  if (t->status != DLRM_OK) fprintf(stderr, "%s %d: %s\n", t->role, t->rank, dlrm_last_error());
  return NULL;
}

typedef struct {
  host_member member;
  float losses[STEPS];
  dlrm_eval_result eval;
  int ok;
} trainer_thread;

static void* run_trainer(void* arg) {
  trainer_thread* t = (trainer_thread*)arg;
  char cluster[256];
  dlrm_trainer* trainer = NULL;
  test_batch global, part, bad;
  int32_t rank = -1, count = 0;
  int64_t step = -1;
  int i, s0;
  float loss = 0;
  char dir[512];
  cluster_text(cluster, sizeof cluster, "trainer", 2 + t->member.rank);
  if (dlrm_trainer_create(g_config, cluster, NULL, host_allgather, &t->member, &trainer) !=
      DLRM_OK) {
    fprintf(stderr, "trainer %d: %s\n", t->member.rank, dlrm_last_error());
    return NULL;
  }
  CHECK(dlrm_trainer_info(trainer, &rank, &count, &step) == DLRM_OK);
  CHECK(rank == t->member.rank && count == TRAINERS && step == 0);
  s0 = rank * (B / TRAINERS);

  /* A bad part on trainer 1 fails the step on both, and nothing changes. */
  make_batch(&global, 0);
  slice_batch(&global, s0, s0 + B / TRAINERS, &bad);
  if (rank == 1) bad.ids[0] = 1000;
  CHECK(dlrm_trainer_enqueue(trainer, &bad.batch) == DLRM_OK);
  CHECK(dlrm_trainer_train_step(trainer, &loss) == DLRM_OUT_OF_RANGE);
  CHECK_MESSAGE("trainer 1's part: batch.ids[0] = 1000");
  CHECK(dlrm_trainer_enqueue(trainer, NULL) == DLRM_INVALID_ARGUMENT);
  CHECK_MESSAGE("part is NULL");
  CHECK(dlrm_trainer_train_step(trainer, &loss) == DLRM_FAILED_PRECONDITION);

  /* A failing host all-gather fails the step, naming the code. */
  slice_batch(&global, s0, s0 + B / TRAINERS, &part);
  CHECK(dlrm_trainer_enqueue(trainer, &part.batch) == DLRM_OK);
  if (rank == 0) t->member.group->fail = 7;
  CHECK(dlrm_trainer_train_step(trainer, &loss) == DLRM_NETWORK);
  CHECK_MESSAGE("returned 7");

  /* Two parts queued ahead (their lookups in flight), then step by step. */
  for (i = 0; i < STEPS; ++i) {
    make_batch(&global, i);
    slice_batch(&global, s0, s0 + B / TRAINERS, &part);
    CHECK(dlrm_trainer_enqueue(trainer, &part.batch) == DLRM_OK);
    if (i >= 1) CHECK(dlrm_trainer_train_step(trainer, &t->losses[i - 1]) == DLRM_OK);
  }
  CHECK(dlrm_trainer_train_step(trainer, &t->losses[STEPS - 1]) == DLRM_OK);
  snprintf(dir, sizeof dir, "%s/dist_ckpt", g_tmp);
  CHECK(dlrm_trainer_checkpoint(trainer, dir) == DLRM_OK);
  make_batch(&global, 9);
  t->eval.struct_size = sizeof t->eval;
  CHECK(dlrm_trainer_evaluate(trainer, &global.batch, 1, &t->eval) == DLRM_OK);
  CHECK(dlrm_trainer_info(trainer, NULL, NULL, &step) == DLRM_OK);
  CHECK(step == STEPS);
  CHECK(dlrm_trainer_finish(trainer) == DLRM_OK);
  dlrm_trainer_destroy(trainer);
  t->ok = 1;
  return NULL;
}

static char* read_config(const char* path) {
  static const char extra[] = "\nsharding { data_parallel_max_bytes: 0 }\n";
  FILE* f = fopen(path, "rb");
  char* buf;
  long size;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  size = ftell(f);
  fseek(f, 0, SEEK_SET);
  buf = (char*)malloc((size_t)size + sizeof extra);
  if (fread(buf, 1, (size_t)size, f) != (size_t)size) size = 0;
  fclose(f);
  memcpy(buf + size, extra, sizeof extra); /* every table on the servers */
  return buf;
}

static int free_port(void) {
  struct sockaddr_in addr;
  socklen_t len = sizeof addr;
  int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, (struct sockaddr*)&addr, sizeof addr) == 0 &&
      getsockname(fd, (struct sockaddr*)&addr, &len) == 0)
    port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

static void test_bad_settings(void) {
  dlrm_trainer* t = NULL;
  char cluster[256];
  CHECK(dlrm_trainer_create(g_config, "DLRM_ROLE trainer", NULL, NULL, NULL, &t) ==
        DLRM_INVALID_ARGUMENT);
  CHECK_MESSAGE("line 1 is not KEY=VALUE");
  CHECK(dlrm_trainer_create(g_config, "HOME=/root", NULL, NULL, NULL, &t) == DLRM_INVALID_ARGUMENT);
  CHECK_MESSAGE("not a DLRM_* setting");
  cluster_text(cluster, sizeof cluster, "server", 0);
  CHECK(dlrm_trainer_create(g_config, cluster, NULL, NULL, NULL, &t) == DLRM_INVALID_ARGUMENT);
  CHECK_MESSAGE("DLRM_ROLE=server");
  cluster_text(cluster, sizeof cluster, "trainer", 9);
  CHECK(dlrm_trainer_create(g_config, cluster, NULL, NULL, NULL, &t) == DLRM_INVALID_ARGUMENT);
  CHECK_MESSAGE("DLRM_RANK");
  CHECK(dlrm_trainer_create(NULL, cluster, NULL, NULL, NULL, &t) == DLRM_INVALID_ARGUMENT);
  CHECK_MESSAGE("config_text is NULL");
  cluster_text(cluster, sizeof cluster, "trainer", 2);
  CHECK(dlrm_run_role(g_config, cluster, NULL) == DLRM_INVALID_ARGUMENT);
  CHECK_MESSAGE("dlrm_trainer_create");
  CHECK(t == NULL);
  CHECK(dlrm_trainer_train_step(NULL, NULL) == DLRM_INVALID_ARGUMENT);
  CHECK_MESSAGE("trainer is NULL");
  dlrm_trainer_destroy(NULL);
}

int main(int argc, char** argv) {
  dlrm_engine* engine = NULL;
  float want[STEPS];
  dlrm_eval_result want_eval;
  role_thread roles[3] = {{"coordinator", -1, 0}, {"server", 0, 0}, {"server", 1, 0}};
  trainer_thread trainers[TRAINERS];
  pthread_t role_ids[3], trainer_ids[TRAINERS];
  host_group group;
  test_batch global;
  int i;
  if (argc != 3) {
    fprintf(stderr, "usage: capi_dist_test TMPDIR CONFIG\n");
    return 2;
  }
  g_tmp = argv[1];
  g_config = read_config(argv[2]);
  if (!g_config) return 2;
  snprintf(g_coordinator, sizeof g_coordinator, "127.0.0.1:%d", free_port());
  test_bad_settings();

  /* The single-process reference on the same global batches. */
  CHECK(dlrm_engine_create(g_config, &engine) == DLRM_OK);
  for (i = 0; i < STEPS; ++i) {
    make_batch(&global, i);
    CHECK(dlrm_engine_train_step(engine, &global.batch, &want[i]) == DLRM_OK);
  }
  make_batch(&global, 9);
  want_eval.struct_size = sizeof want_eval;
  CHECK(dlrm_engine_evaluate(engine, &global.batch, 1, &want_eval) == DLRM_OK);
  dlrm_engine_destroy(engine);

  CHECK(dlrm_set_log_callback(capture_log, &g_log, DLRM_LOG_OFF + 1) == DLRM_INVALID_ARGUMENT);
  CHECK_MESSAGE("min_level");
  CHECK(dlrm_set_log_callback(capture_log, &g_log, DLRM_LOG_INFO) == DLRM_OK);

  memset(&group, 0, sizeof group);
  pthread_barrier_init(&group.barrier, NULL, TRAINERS);
  pthread_create(&role_ids[0], NULL, run_role, &roles[0]);
  {
    struct timespec wait = {0, 200 * 1000 * 1000};
    nanosleep(&wait, NULL); /* the coordinator binds its port before the peers bind theirs */
  }
  for (i = 1; i < 3; ++i) pthread_create(&role_ids[i], NULL, run_role, &roles[i]);
  for (i = 0; i < TRAINERS; ++i) {
    memset(&trainers[i], 0, sizeof trainers[i]);
    trainers[i].member.group = &group;
    trainers[i].member.rank = i;
    pthread_create(&trainer_ids[i], NULL, run_trainer, &trainers[i]);
  }
  for (i = 0; i < TRAINERS; ++i) pthread_join(trainer_ids[i], NULL);
  for (i = 0; i < 3; ++i) pthread_join(role_ids[i], NULL);
  for (i = 0; i < 3; ++i) CHECK(roles[i].status == DLRM_OK);
  for (i = 0; i < TRAINERS; ++i) {
    int s;
    CHECK(trainers[i].ok);
    for (s = 0; s < STEPS; ++s) CHECK(memcmp(&trainers[i].losses[s], &want[s], sizeof(float)) == 0);
    CHECK(trainers[i].eval.auc == want_eval.auc);
    CHECK(trainers[i].eval.log_loss == want_eval.log_loss);
    CHECK(trainers[i].eval.num_samples == B);
  }
  CHECK(dlrm_set_log_callback(NULL, NULL, DLRM_LOG_INFO) == DLRM_OK); /* back to stderr */
  CHECK(g_log.coordinator == 1);
  CHECK(g_log.servers == 2);
  CHECK(g_log.malformed == 0);
  pthread_barrier_destroy(&group.barrier);
  free(g_config);
  printf("capi_dist_test: %d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
