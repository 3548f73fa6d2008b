/* Training under MPI: every MPI rank is one trainer of a libdlrm job, and MPI_Allgatherv is
 * the trainers' collective (the C ABI's dlrm_allgather_fn). Each rank also hosts one
 * embedding server, and rank 0 the job's coordinator, as threads (dlrm_run_role), so
 * `mpirun -np N mpi_train` is a whole job: N servers hold the tables, N trainers hold the
 * MLPs, each trainer trains its 1/N of every global batch. With --owners there are no
 * servers: the N trainers own the tables themselves and exchange pooled embeddings by
 * all-to-all (over the same MPI_Allgatherv), as TorchRec's trainers do.
 *
 *   mpirun -np 2 mpi_train [--steps S] [--part P] [--rows R] [--checkpoint DIR] [--check]
 *                          [--owners]
 *
 * The data is a synthetic click log made here (every rank makes the same global batches
 * and takes its own samples of each). --check: rank 0 first trains one in-process engine
 * on the whole global batches, and the job must give bitwise the same losses and
 * evaluation (sync mode promises that); the exit status says whether it did.
 *
 * Addresses: on one host every process binds on loopback and rank 0 picks the
 * coordinator's port. Across hosts, set DLRM_COORDINATOR (rank 0's host:port) and each
 * host's DLRM_BIND_ADDRESS in the environment mpirun passes on (-x); they are forwarded.
 *
 * The library calls the all-gather on the thread that called dlrm_trainer_train_step
 * (or evaluate, checkpoint, finish): here always the main thread, so MPI needs only
 * MPI_THREAD_FUNNELED; the callback checks that it holds. */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <mpi.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dlrm/dlrm.h"

#define NUM_DENSE 4
#define NUM_TABLES 3
#define MAX_BAG 3
#define EVAL_STEP 1000000 /* the evaluation batch's "step": never a training one */

typedef struct {
  int steps, part, check;
  int owners; /* the trainers own the tables: no servers */
  int64_t rows;
  const char* checkpoint;
} options;

typedef struct {
  int rank, size;
  options opt;
  char config[2048];
  char coordinator[128];
} job;

/* ---- the synthetic click log ----------------------------------------------------------- */
static uint64_t mix(uint64_t x) { /* splitmix64's finalizer */
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
static double unit(uint64_t x) { return (double)(mix(x) >> 11) / 9007199254740992.0; }
static uint64_t key(int64_t step, int64_t sample, int field, int k) {
  return mix(mix(mix((uint64_t)step) ^ (uint64_t)sample) ^ (uint64_t)(field * 8 + k));
}
/* Sample `sample`'s k-th id of table f at `step`: skewed toward small ids. */
static int64_t sample_id(const options* o, int64_t step, int64_t sample, int f, int k) {
  double u = unit(key(step, sample, f, k + 1));
  return (int64_t)(u * u * (double)o->rows);
}
static int bag_length(int64_t step, int64_t sample, int f) {
  return 1 + (int)(mix(key(step, sample, f, 0)) % MAX_BAG);
}

typedef struct {
  float dense[NUM_DENSE];
  float label;
} sample_row;

static void make_row(const options* o, int64_t step, int64_t sample, sample_row* out) {
  int i;
  double score = 0;
  for (i = 0; i < NUM_DENSE; ++i) out->dense[i] = (float)unit(key(step, sample, NUM_TABLES, i));
  score = out->dense[0] + (sample_id(o, step, sample, 0, 0) % 5 == 0 ? 0.8 : 0.0) +
          0.3 * unit(key(step, sample, NUM_TABLES + 1, 0));
  out->label = score > 0.9 ? 1.0f : 0.0f;
}

/* A batch in the C ABI's layout, owning its arrays. */
typedef struct {
  float* dense;
  float* labels;
  int32_t* lengths;
  int64_t* ids;
  dlrm_batch batch;
} owned_batch;

/* Samples [first, first + n) of step's global batch (feature-major lengths and ids). */
static void make_batch(const options* o, int64_t step, int64_t first, int64_t n, owned_batch* b) {
  int64_t s, num_ids = 0;
  int f, k;
  b->dense = (float*)malloc(sizeof(float) * (size_t)(n * NUM_DENSE));
  b->labels = (float*)malloc(sizeof(float) * (size_t)n);
  b->lengths = (int32_t*)malloc(sizeof(int32_t) * (size_t)(n * NUM_TABLES));
  b->ids = (int64_t*)malloc(sizeof(int64_t) * (size_t)(n * NUM_TABLES * MAX_BAG));
  for (s = 0; s < n; ++s) {
    sample_row row;
    make_row(o, step, first + s, &row);
    memcpy(b->dense + s * NUM_DENSE, row.dense, sizeof row.dense);
    b->labels[s] = row.label;
  }
  for (f = 0; f < NUM_TABLES; ++f)
    for (s = 0; s < n; ++s) {
      int len = bag_length(step, first + s, f);
      b->lengths[f * n + s] = len;
      for (k = 0; k < len; ++k) b->ids[num_ids++] = sample_id(o, step, first + s, f, k);
    }
  memset(&b->batch, 0, sizeof b->batch);
  b->batch.struct_size = sizeof(dlrm_batch);
  b->batch.batch_size = n;
  b->batch.num_dense = NUM_DENSE;
  b->batch.num_sparse = NUM_TABLES;
  b->batch.dense = b->dense;
  b->batch.labels = b->labels;
  b->batch.lengths = b->lengths;
  b->batch.ids = b->ids;
  b->batch.num_ids = num_ids;
}

static void free_batch(owned_batch* b) {
  free(b->dense);
  free(b->labels);
  free(b->lengths);
  free(b->ids);
}

/* ---- the model ------------------------------------------------------------------------- */
static void make_config(const options* o, char* out, size_t n) {
  size_t used = 0;
  int t;
  used += (size_t)snprintf(out + used, n - used, "model {\n  num_dense_features: %d\n", NUM_DENSE);
  for (t = 0; t < NUM_TABLES; ++t)
    used += (size_t)snprintf(out + used, n - used,
                             "  tables { name: 't%d' num_rows: %lld dim: 16 }\n"
                             "  sparse_features { name: 'f%d' table: 't%d' }\n",
                             t, (long long)o->rows, t, t);
  snprintf(out + used, n - used,
           "  bottom_mlp { layer_sizes: 32 layer_sizes: 16 }\n"
           "  top_mlp { layer_sizes: 32 layer_sizes: 1 }\n}\n"
           "dense_optimizer { learning_rate: 0.01 adam {} }\n"
           "sparse_optimizer { learning_rate: 0.05 rowwise_adagrad {} }\n"
           "seed: 7 num_threads: 1 reduction_chunk_rows: 64\n"
           "sharding { data_parallel_max_bytes: 0 }  # every table on the servers\n");
}

/* ---- MPI as the trainers' collective --------------------------------------------------- */
static pthread_t g_main_thread;

/* Every rank's bytes, in rank order, to result. Nonzero: an MPI error code, or -1 when
 * called off the main thread or with more bytes than MPI's int counts hold. */
static int32_t mpi_allgather(void* user_data, const void* data, int64_t num_bytes,
                             dlrm_gather* result) {
  const job* j = (const job*)user_data;
  long long mine = (long long)num_bytes, total = 0;
  long long* sizes = (long long*)malloc(sizeof(long long) * (size_t)j->size);
  int* counts = (int*)malloc(sizeof(int) * (size_t)j->size);
  int* displs = (int*)malloc(sizeof(int) * (size_t)j->size);
  char* all = NULL;
  int r, rc = pthread_equal(pthread_self(), g_main_thread) ? MPI_SUCCESS : -1;
  if (rc == MPI_SUCCESS)
    rc = MPI_Allgather(&mine, 1, MPI_LONG_LONG, sizes, 1, MPI_LONG_LONG, MPI_COMM_WORLD);
  for (r = 0; rc == MPI_SUCCESS && r < j->size; ++r) {
    if (sizes[r] > INT_MAX || total + sizes[r] > INT_MAX) rc = -1;
    counts[r] = (int)sizes[r];
    displs[r] = (int)total;
    total += sizes[r];
  }
  if (rc == MPI_SUCCESS) {
    all = (char*)malloc((size_t)total + 1);
    rc = MPI_Allgatherv(data, (int)num_bytes, MPI_BYTE, all, counts, displs, MPI_BYTE,
                        MPI_COMM_WORLD);
  }
  for (r = 0; rc == MPI_SUCCESS && r < j->size; ++r)
    if (dlrm_gather_put(result, r, all + displs[r], counts[r]) != DLRM_OK) rc = -1;
  free(all);
  free(displs);
  free(counts);
  free(sizes);
  return rc;
}

/* ---- the job's roles ------------------------------------------------------------------- */
/* DLRM_* lines for a role: servers are ranks [0, N), trainers [N, 2N); with --owners,
 * trainers [0, N). */
static void cluster_text(const job* j, const char* role, int rank, char* out, size_t n) {
  const char* bind = getenv("DLRM_BIND_ADDRESS");
  size_t used = (size_t)snprintf(out, n,
                                 "DLRM_ROLE=%s\nDLRM_WORLD_SIZE=%d\nDLRM_COORDINATOR=%s\n"
                                 "DLRM_TIMEOUT_MS=60000\n",
                                 role, j->opt.owners ? j->size : 2 * j->size, j->coordinator);
  if (rank >= 0) used += (size_t)snprintf(out + used, n - used, "DLRM_RANK=%d\n", rank);
  if (bind != NULL) snprintf(out + used, n - used, "DLRM_BIND_ADDRESS=%s\n", bind);
}

typedef struct {
  const job* j;
  const char* role;
  int rank;
  dlrm_status status;
} role_thread;

static void* run_role(void* arg) {
  role_thread* t = (role_thread*)arg;
  char cluster[512];
  cluster_text(t->j, t->role, t->rank, cluster, sizeof cluster);
  t->status = dlrm_run_role(t->j->config, cluster, NULL);
  if (t->status != DLRM_OK)
    fprintf(stderr, "rank %d: %s: %s\n", t->j->rank, t->role, dlrm_last_error());
  return NULL;
}

static int free_loopback_port(void) {
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

/* Rank 0 starts the coordinator (on DLRM_COORDINATOR, else a free loopback port) and
 * every rank learns its address. */
static void start_coordinator(job* j, role_thread* coordinator, pthread_t* thread) {
  const char* given = getenv("DLRM_COORDINATOR");
  if (j->rank == 0) {
    struct timespec wait = {0, 200 * 1000 * 1000};
    if (given != NULL)
      snprintf(j->coordinator, sizeof j->coordinator, "%s", given);
    else
      snprintf(j->coordinator, sizeof j->coordinator, "127.0.0.1:%d", free_loopback_port());
    coordinator->j = j;
    coordinator->role = "coordinator";
    coordinator->rank = -1;
    pthread_create(thread, NULL, run_role, coordinator);
    nanosleep(&wait, NULL); /* its port is bound before the peers pick theirs */
  }
  MPI_Bcast(j->coordinator, (int)sizeof j->coordinator, MPI_CHAR, 0, MPI_COMM_WORLD);
}

/* ---- training -------------------------------------------------------------------------- */
typedef struct {
  float* losses; /* [steps] */
  dlrm_eval_result eval;
} outcome;

static int fail(const job* j, const char* what) {
  fprintf(stderr, "rank %d: %s: %s\n", j->rank, what, dlrm_last_error());
  return 1;
}

/* Steps with the next part queued ahead (its lookups travel while a step computes), an
 * evaluation on a held-out global batch, the optional checkpoint, and the goodbye. */
static int train(const job* j, dlrm_trainer* trainer, outcome* out) {
  const options* o = &j->opt;
  const int64_t first = (int64_t)j->rank * o->part, global = (int64_t)o->part * j->size;
  owned_batch part, eval;
  int step;
  for (step = 0; step <= o->steps; ++step) {
    if (step < o->steps) {
      make_batch(o, step, first, o->part, &part);
      dlrm_status st = dlrm_trainer_enqueue(trainer, &part.batch);
      free_batch(&part);
      if (st != DLRM_OK) return fail(j, "enqueue");
    }
    if (step >= 1 && dlrm_trainer_train_step(trainer, &out->losses[step - 1]) != DLRM_OK)
      return fail(j, "train_step");
  }
  make_batch(o, EVAL_STEP, 0, global, &eval);
  out->eval.struct_size = sizeof out->eval;
  step = dlrm_trainer_evaluate(trainer, &eval.batch, 1, &out->eval) == DLRM_OK;
  free_batch(&eval);
  if (!step) return fail(j, "evaluate");
  if (o->checkpoint != NULL && dlrm_trainer_checkpoint(trainer, o->checkpoint) != DLRM_OK)
    return fail(j, "checkpoint");
  return dlrm_trainer_finish(trainer) == DLRM_OK ? 0 : fail(j, "finish");
}

/* This rank's server unless --owners (and on rank 0 the coordinator) as threads, its
 * trainer here. */
static int run_job(job* j, outcome* out) {
  role_thread server = {j, "server", j->rank, DLRM_OK}, coordinator;
  pthread_t server_thread, coordinator_thread;
  char cluster[512];
  dlrm_trainer* trainer = NULL;
  int failed;
  memset(&coordinator, 0, sizeof coordinator);
  start_coordinator(j, &coordinator, &coordinator_thread);
  if (!j->opt.owners) pthread_create(&server_thread, NULL, run_role, &server);
  cluster_text(j, "trainer", j->opt.owners ? j->rank : j->size + j->rank, cluster, sizeof cluster);
  failed = dlrm_trainer_create(j->config, cluster, NULL, mpi_allgather, j, &trainer) != DLRM_OK
               ? fail(j, "trainer_create")
               : train(j, trainer, out);
  dlrm_trainer_destroy(trainer);
  if (!j->opt.owners) pthread_join(server_thread, NULL);
  if (j->rank == 0) pthread_join(coordinator_thread, NULL);
  return failed || server.status != DLRM_OK || (j->rank == 0 && coordinator.status != DLRM_OK);
}

/* --check's reference: one in-process engine on the whole global batches. */
static int train_reference(const job* j, outcome* out) {
  const options* o = &j->opt;
  const int64_t global = (int64_t)o->part * j->size;
  dlrm_engine* engine = NULL;
  owned_batch b;
  int step, ok;
  if (dlrm_engine_create(j->config, &engine) != DLRM_OK) return fail(j, "engine_create");
  for (step = 0, ok = 1; ok && step < o->steps; ++step) {
    make_batch(o, step, 0, global, &b);
    ok = dlrm_engine_train_step(engine, &b.batch, &out->losses[step]) == DLRM_OK;
    free_batch(&b);
  }
  make_batch(o, EVAL_STEP, 0, global, &b);
  out->eval.struct_size = sizeof out->eval;
  ok = ok && dlrm_engine_evaluate(engine, &b.batch, 1, &out->eval) == DLRM_OK;
  free_batch(&b);
  dlrm_engine_destroy(engine);
  return ok ? 0 : fail(j, "reference engine");
}

/* Whether the job's outcome is bitwise the reference's (rank 0 reports). */
static int same_outcome(const job* j, const outcome* got, const outcome* want) {
  int step, same = 1;
  for (step = 0; step < j->opt.steps; ++step)
    if (memcmp(&got->losses[step], &want->losses[step], sizeof(float)) != 0) {
      fprintf(stderr, "step %d: loss %.9g, one process %.9g\n", step, got->losses[step],
              want->losses[step]);
      same = 0;
    }
  if (memcmp(&got->eval.auc, &want->eval.auc, sizeof(double)) != 0 ||
      memcmp(&got->eval.log_loss, &want->eval.log_loss, sizeof(double)) != 0) {
    fprintf(stderr, "eval: auc %.17g log loss %.17g, one process %.17g %.17g\n", got->eval.auc,
            got->eval.log_loss, want->eval.auc, want->eval.log_loss);
    same = 0;
  }
  return same;
}

/* ---- main ------------------------------------------------------------------------------ */
static int parse_options(int argc, char** argv, options* o) {
  int i;
  o->steps = 20;
  o->part = 256;
  o->rows = 10000;
  o->check = 0;
  o->checkpoint = NULL;
  o->owners = 0;
  for (i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--check") == 0)
      o->check = 1;
    else if (strcmp(argv[i], "--owners") == 0)
      o->owners = 1;
    else if (i + 1 < argc && strcmp(argv[i], "--steps") == 0)
      o->steps = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--part") == 0)
      o->part = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--rows") == 0)
      o->rows = atoll(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--checkpoint") == 0)
      o->checkpoint = argv[++i];
    else
      return 0;
  }
  /* A part is reduction_chunk_rows (64) times a power of two; the engine checks that. */
  return o->steps > 0 && o->part > 0 && o->rows > 0;
}

static int report(const job* j, int failed, const outcome* got, const outcome* want) {
  int any_failed = 0;
  if (!failed && j->opt.check && j->rank == 0 && !same_outcome(j, got, want)) failed = 1;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (j->rank == 0 && !any_failed)
    printf(
        "mpi_train: %d trainers (%s), %d steps of %d samples: last loss %.6f, eval auc %.4f "
        "log loss %.4f%s\n",
        j->size, j->opt.owners ? "owning the tables" : "and servers", j->opt.steps,
        j->opt.part * j->size, got->losses[j->opt.steps - 1], got->eval.auc, got->eval.log_loss,
        j->opt.check ? "; bitwise equal to one process" : "");
  return any_failed;
}

int main(int argc, char** argv) {
  job j;
  outcome got, want;
  int provided = 0, failed = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  g_main_thread = pthread_self();
  memset(&j, 0, sizeof j);
  MPI_Comm_rank(MPI_COMM_WORLD, &j.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &j.size);
  if (provided < MPI_THREAD_FUNNELED || !parse_options(argc, argv, &j.opt)) {
    if (j.rank == 0)
      fprintf(stderr,
              "usage: mpirun -np N mpi_train [--steps S] [--part P] [--rows R] "
              "[--checkpoint DIR] [--check] [--owners] (needs MPI_THREAD_FUNNELED)\n");
    MPI_Finalize();
    return 2;
  }
  make_config(&j.opt, j.config, sizeof j.config);
  got.losses = (float*)calloc((size_t)j.opt.steps, sizeof(float));
  want.losses = (float*)calloc((size_t)j.opt.steps, sizeof(float));
  if (j.opt.check && j.rank == 0) failed = train_reference(&j, &want);
  MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!failed) failed = run_job(&j, &got);
  failed = report(&j, failed, &got, &want);
  free(got.losses);
  free(want.losses);
  MPI_Finalize();
  return failed ? 1 : 0;
}
