/*
 * libdlrm: a training engine for deep learning recommendation models.
 *
 * The stable C ABI. Conventions (see docs/DESIGN.md):
 *  - Every function that can fail returns a dlrm_status (0 = DLRM_OK). On failure,
 *    dlrm_last_error() returns a message naming the argument or field that was wrong.
 *    The message is thread-local and stays valid until the next failing call on the same
 *    thread; successful calls do not clear it.
 *  - Handles are opaque; every create has a destroy, and destroy(NULL) is a no-op.
 *  - Input memory is borrowed only for the duration of a call. Outputs go to caller
 *    buffers of declared size, or to library memory freed with dlrm_free().
 *  - Structs passed by pointer begin with `struct_size`: set it to sizeof(the struct), so
 *    later versions can add fields without breaking callers.
 *  - Configs are protobuf text (schema: engine/config/dlrm.proto in the source tree).
 *  - No exception, C++ type or STL object crosses this boundary.
 *  - Bad input never changes engine state: a call that fails leaves the engine as it was.
 *
 * Thread safety, per engine handle: dlrm_engine_predict, dlrm_engine_evaluate,
 * dlrm_engine_save and the getters may run concurrently with each other (reader lock).
 * dlrm_engine_train_step, dlrm_engine_set_learning_rate and dlrm_engine_load take the
 * writer lock and serialize with everything else; a waiting writer goes before readers
 * that arrive after it, so training makes progress under any prediction load.
 * dlrm_engine_destroy must not race with any other call on the same handle.
 * A dlrm_trainer takes one call at a time: calls on one trainer, its destroy included,
 * must not overlap (the bindings serialize them).
 */
#ifndef DLRM_DLRM_H_
#define DLRM_DLRM_H_

#include <stddef.h>
#include <stdint.h>

#if defined(DLRM_BUILDING_LIBRARY)
#define DLRM_API __attribute__((visibility("default")))
#else
#define DLRM_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped (with the library's soname) on any incompatible change to this header. */
#define DLRM_ABI_VERSION 1

typedef int32_t dlrm_status;
enum {
  DLRM_OK = 0,
  DLRM_INVALID_ARGUMENT = 1, /* a bad argument, batch field or config field */
  DLRM_OUT_OF_RANGE = 2,     /* e.g. an id outside its table's rows */
  DLRM_IO = 3,               /* a file could not be read or written */
  DLRM_NETWORK = 4,
  DLRM_TIMEOUT = 5,
  DLRM_CANCELLED = 6,
  DLRM_INTERNAL = 7,            /* a bug in libdlrm: please report it */
  DLRM_FAILED_PRECONDITION = 8, /* e.g. training diverged, checkpoint for another model */
  DLRM_NOT_FOUND = 9,
  DLRM_DATA_LOSS = 10,         /* a corrupted or truncated checkpoint */
  DLRM_RESOURCE_EXHAUSTED = 11 /* out of memory, or a model past its memory limit */
};

/* Library version string, e.g. "0.1.0". Never fails. */
DLRM_API const char* dlrm_version(void);
/* DLRM_ABI_VERSION the library was built with; bindings check it at load. */
DLRM_API int32_t dlrm_abi_version(void);
/* Message of the last failing call on this thread ("" if none). Never NULL. */
DLRM_API const char* dlrm_last_error(void);
/* Stable name of a status code, e.g. "INVALID_ARGUMENT". Never NULL. */
DLRM_API const char* dlrm_status_name(dlrm_status status);
/* Frees memory the library returned (e.g. dlrm_engine_get_config). NULL is a no-op. */
DLRM_API void dlrm_free(void* ptr);

/* Logging. Every line libdlrm writes (a server's progress, a rejected message, a peer
 * that went silent) goes to one process-wide sink: by default stderr, as
 * "[dlrm LEVEL file:line] message", for DLRM_LOG_INFO and above. */
enum {
  DLRM_LOG_DEBUG = 0,
  DLRM_LOG_INFO = 1,
  DLRM_LOG_WARNING = 2,
  DLRM_LOG_ERROR = 3,
  DLRM_LOG_OFF = 4 /* as a threshold: nothing is logged */
};
/* One message: level is a DLRM_LOG_* value below DLRM_LOG_OFF; file ("engine/ps/server.cc")
 * and line say where it was written; message is one line without a newline. The strings
 * are valid only during the call. */
typedef void (*dlrm_log_fn)(void* user_data, int32_t level, const char* file, int32_t line,
                            const char* message);
/* Sends every message of level >= min_level to fn(user_data, ...), or to stderr when fn is
 * NULL; min_level DLRM_LOG_OFF silences the library. Replaces the previous sink: once this
 * returns, the previous fn is not called again. fn may be called from any thread of the
 * library, one message at a time (calls are serialized); it must not call into libdlrm.
 * INVALID_ARGUMENT, changing nothing, when min_level is not a DLRM_LOG_* value. */
DLRM_API dlrm_status dlrm_set_log_callback(dlrm_log_fn fn, void* user_data, int32_t min_level);

typedef struct dlrm_engine dlrm_engine;

/* Creates an engine from a config in protobuf text format. *out is set only on success. */
DLRM_API dlrm_status dlrm_engine_create(const char* config_text, dlrm_engine** out);
/* Same, reading the config text from a file. */
DLRM_API dlrm_status dlrm_engine_create_from_file(const char* config_path, dlrm_engine** out);
/* Creates an engine from a checkpoint (it stores its config) and restores its state.
 * checkpoint_path may also be a sharded checkpoint's directory (dlrm_trainer_checkpoint,
 * any number of servers and trainers): the engine then holds the job's whole model at
 * that step, for prediction, evaluation, export or single-process training. */
DLRM_API dlrm_status dlrm_engine_create_from_checkpoint(const char* checkpoint_path,
                                                        dlrm_engine** out);
/* Same, on `device` instead of the device the checkpoint was trained on: "cpu", "cuda" or
 * "cuda:N" (NULL or "": the checkpoint's own). The state is the same on every device, so a
 * checkpoint trained on a GPU serves on a machine without one. INVALID_ARGUMENT naming
 * the device for any other name. */
DLRM_API dlrm_status dlrm_engine_create_from_checkpoint_on(const char* checkpoint_path,
                                                           const char* device,
                                                           dlrm_engine** out);
DLRM_API void dlrm_engine_destroy(dlrm_engine* engine);

/*
 * A batch: borrowed, column-oriented memory (TorchRec KeyedJaggedTensor layout).
 *   dense    float32 [batch_size x num_dense], row-major
 *   labels   float32 [batch_size] in [0, 1]; may be NULL for predict
 *   lengths  int32   [num_sparse x batch_size], feature-major (all bags of feature 0, ...)
 *   ids      int64   [num_ids], num_ids = sum(lengths), same order as lengths
 *   weights  float32 [num_ids] per-id weights, or NULL for all 1
 * Every field is validated (shapes, NULLs, negative lengths, ids outside their table,
 * NaN/Inf) before anything changes.
 */
typedef struct dlrm_batch {
  size_t struct_size; /* sizeof(dlrm_batch) */
  int64_t batch_size;
  int32_t num_dense;
  int32_t num_sparse;
  const float* dense;
  const float* labels;
  const int32_t* lengths;
  const int64_t* ids;
  int64_t num_ids;
  const float* weights;
} dlrm_batch;

/* One optimizer step. *loss_out (may be NULL) receives the batch's mean BCE loss before
 * the update. Writer lock. */
DLRM_API dlrm_status dlrm_engine_train_step(dlrm_engine* engine, const dlrm_batch* batch,
                                            float* loss_out);

/* Asynchronous training, so a host prepares batch N+1 while batch N trains.
 * submit validates the batch (errors are returned at once and nothing is queued), copies
 * it (the caller may reuse its memory as soon as submit returns) and queues the step; it
 * blocks while 2 steps are already waiting. *ticket_out identifies the step. Steps run
 * one at a time in submission order, so the results are bitwise those of calling
 * dlrm_engine_train_step in that order. submit and wait may be called from different
 * threads. dlrm_engine_train_step, set_learning_rate, save and load first wait for every
 * submitted step. */
DLRM_API dlrm_status dlrm_engine_train_submit(dlrm_engine* engine, const dlrm_batch* batch,
                                              int64_t* ticket_out);
/* Waits for a submitted step: *loss_out (may be NULL) receives its loss, or the call
 * returns the step's error. A step queued behind a failed one returns DLRM_CANCELLED.
 * Each ticket can be waited for once. */
DLRM_API dlrm_status dlrm_engine_train_wait(dlrm_engine* engine, int64_t ticket, float* loss_out);

/* Click probabilities for each sample into out[0 .. batch_size); out_len is out's
 * length in floats and must be >= batch_size. Reader lock. */
DLRM_API dlrm_status dlrm_engine_predict(dlrm_engine* engine, const dlrm_batch* batch, float* out,
                                         size_t out_len);

typedef struct dlrm_eval_result {
  size_t struct_size; /* sizeof(dlrm_eval_result) */
  double log_loss;
  double auc; /* NaN when the labels hold one class only */
  int64_t num_samples;
} dlrm_eval_result;

/* Log loss and ROC AUC over all samples of batches[0 .. num_batches). Reader lock. */
DLRM_API dlrm_status dlrm_engine_evaluate(dlrm_engine* engine, const dlrm_batch* batches,
                                          size_t num_batches, dlrm_eval_result* out);

/* ---- Arrow input ----------------------------------------------------------------------
 * A batch from Arrow columns through the Arrow C Data Interface, the stable C ABI that
 * pyarrow, Arrow Java, arrow-go, pandas (via pyarrow), Polars, DuckDB and Spark export
 * (its two structs below, declared under the spec's guard; no Arrow library is needed).
 * The array is a struct (a record batch exported as an array): each row is a sample;
 * `columns` names which child is which:
 *   dense    float32, float64, int32 or int64 columns (nulls refused)
 *   label    the same types or bool; NULL name for a batch to predict
 *   sparse   list<int64|int32> or large_list of them: a row's ids (a null list is empty)
 *   weights  list<float32|float64> with the same lengths as its sparse column
 * The result is a copy in dlrm_batch's layout (dense row-major, lengths and ids
 * feature-major), owned by the handle; values (id ranges, NaN, labels in [0, 1]) are
 * checked when it is used, as any batch's are. */
#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE
#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4
struct ArrowSchema {
  const char* format;
  const char* name;
  const char* metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema** children;
  struct ArrowSchema* dictionary;
  void (*release)(struct ArrowSchema*);
  void* private_data;
};
struct ArrowArray {
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void** buffers;
  struct ArrowArray** children;
  struct ArrowArray* dictionary;
  void (*release)(struct ArrowArray*);
  void* private_data;
};
#endif /* ARROW_C_DATA_INTERFACE */

typedef struct dlrm_arrow_columns {
  size_t struct_size;       /* sizeof(dlrm_arrow_columns) */
  const char* label;        /* the label column, or NULL */
  const char* const* dense; /* num_dense names: the model's dense features, in order */
  int32_t num_dense;
  const char* const* sparse; /* num_sparse names: the model's sparse features, in order */
  int32_t num_sparse;
  const char* const* weights; /* NULL, or num_sparse names (NULL entries: unweighted) */
} dlrm_arrow_columns;

typedef struct dlrm_arrow_batch dlrm_arrow_batch;
/* Converts `array` (borrowed: neither released nor kept) into a new batch. Errors name
 * the column, and the row where one is at fault: a missing column, an unsupported type,
 * a null, offsets or buffers out of the spec, weights whose lengths differ from the ids'. */
DLRM_API dlrm_status dlrm_arrow_batch_create(const struct ArrowSchema* schema,
                                             const struct ArrowArray* array,
                                             const dlrm_arrow_columns* columns,
                                             dlrm_arrow_batch** out);
DLRM_API void dlrm_arrow_batch_destroy(dlrm_arrow_batch* batch);
/* Points *out (its struct_size set by the caller) at the handle's arrays, valid until
 * the handle is destroyed: pass it to train, predict, evaluate or a trainer's enqueue. */
DLRM_API dlrm_status dlrm_arrow_batch_view(const dlrm_arrow_batch* batch, dlrm_batch* out);

enum { DLRM_LR_DENSE = 1, DLRM_LR_SPARSE = 2, DLRM_LR_ALL = 3 };
/* Overrides the base learning rate of the dense and/or sparse optimizer; the config's
 * schedule still multiplies it. Saved in checkpoints. Writer lock. */
DLRM_API dlrm_status dlrm_engine_set_learning_rate(dlrm_engine* engine, int32_t target,
                                                   float learning_rate);

/* Number of train steps taken (restored by load). */
DLRM_API dlrm_status dlrm_engine_get_step(dlrm_engine* engine, int64_t* out);

/* The engine's config as protobuf text; free *out with dlrm_free. */
DLRM_API dlrm_status dlrm_engine_get_config(dlrm_engine* engine, char** out);

/* Writes parameters, optimizer state, step and learning rates to path atomically
 * (temporary file, fsync, rename) with a checksum. Reader lock. */
DLRM_API dlrm_status dlrm_engine_save(dlrm_engine* engine, const char* path);

/* Restores a checkpoint written by an engine with the same model and optimizer kinds.
 * Verifies the checksum and reads everything before replacing any state: on failure the
 * engine is unchanged. Writer lock. */
DLRM_API dlrm_status dlrm_engine_load(dlrm_engine* engine, const char* path);

/* What a serving export writes (dlrm_engine_export's `quantize`): one table precision,
 * OR'ed with at most one dense precision (none: the dense parameters stay fp32). */
enum {
  DLRM_EXPORT_FP32 = 0, /* every table as it is */
  DLRM_EXPORT_INT8 = 1, /* FP32 tables row-wise INT8: a byte per value, fp16 scale and bias */
  DLRM_EXPORT_INT4 = 2, /* FP32 tables row-wise INT4: half a byte per value */
  /* The dense parameters (MLPs, cross network) rounded to nearest bf16 / fp16: half their
   * bytes; the loading engine widens them exactly and predicts with those values. */
  DLRM_EXPORT_DENSE_BF16 = 0x100,
  DLRM_EXPORT_DENSE_FP16 = 0x200
};

/* Writes a compact read-only model for serving to path atomically: the config, step, dense
 * parameters, every table's rows (quantized as `quantize` says) and each DYNAMIC table's
 * ids; no optimizer state (the dense parameters in 16 bits with a DLRM_EXPORT_DENSE_*;
 * any other bit set is DLRM_INVALID_ARGUMENT). dlrm_engine_create_from_checkpoint loads
 * it. An engine holding INT8 or INT4 tables predicts and evaluates from the codes
 * directly and refuses train_step, train_submit, save, load and write_parameter of a
 * table with DLRM_FAILED_PRECONDITION naming the table. Reader lock. */
DLRM_API dlrm_status dlrm_engine_export(dlrm_engine* engine, const char* path, int32_t quantize);

/* ---- Parameters as named arrays (float32, row-major) ----------------------------
 * Names: "bottom_mlp.<layer>.weight" [out x in], "bottom_mlp.<layer>.bias" [out], the same
 * for "top_mlp", and "embedding.<table>.weight" [rows x dim]. Reads take the reader lock,
 * writes the writer lock. */

/* Number of parameters. */
DLRM_API dlrm_status dlrm_engine_parameter_count(dlrm_engine* engine, int64_t* out);
/* Name of parameter `index` in [0, count); free *out with dlrm_free. */
DLRM_API dlrm_status dlrm_engine_parameter_name(dlrm_engine* engine, int64_t index, char** out);
/* Shape of the named parameter: *ndim dimensions into shape[0 .. *ndim). shape_capacity
 * is shape's length; 2 is always enough today (DLRM_MAX_PARAMETER_DIMS). */
#define DLRM_MAX_PARAMETER_DIMS 8
DLRM_API dlrm_status dlrm_engine_parameter_shape(dlrm_engine* engine, const char* name,
                                                 int64_t* shape, int32_t shape_capacity,
                                                 int32_t* ndim);
/* Copies the named parameter into out (out_len floats, >= its size). */
DLRM_API dlrm_status dlrm_engine_read_parameter(dlrm_engine* engine, const char* name, float* out,
                                                size_t out_len);
/* Replaces the named parameter's values: len must equal its size and every value must be
 * finite, else nothing changes. Optimizer state is kept. */
DLRM_API dlrm_status dlrm_engine_write_parameter(dlrm_engine* engine, const char* name,
                                                 const float* values, size_t len);

/* ---- Table statistics ------------------------------------------------------------
 * A DYNAMIC table (config kind: DYNAMIC) gives rows to the raw int64 ids it admits and
 * evicts ids when full; these counters say how that goes. A FIXED table reports its rows
 * as capacity and size and counts nothing; one on the SSD tier (config `ssd`) counts its
 * DRAM cache: lookups and hits of rows in the cache, rows brought in (admitted) and
 * written back or dropped (evicted), and the cache's memory. Counters run from the
 * engine's creation; a DYNAMIC table's are saved in checkpoints. */
typedef struct dlrm_table_stats {
  size_t struct_size; /* sizeof(dlrm_table_stats) */
  int32_t dynamic;    /* 1 for a DYNAMIC table, 0 for a FIXED one */
  int64_t capacity;   /* rows ids may hold (a DYNAMIC table's rows less its default row) */
  int64_t size;       /* rows held by ids now */
  int64_t lookups;    /* id occurrences trained on */
  int64_t hits;       /* of those, of ids that held a row (hit rate = hits / lookups) */
  int64_t admitted;   /* ids given a row */
  int64_t evicted;    /* ids that lost their row (to make room, or past their TTL) */
  int64_t rejected;   /* new ids that qualified for a row at a step and found none */
  int64_t memory_bytes; /* weights, sparse optimizer state and the id index */
} dlrm_table_stats;

/* Statistics of the table named `table` (a model.tables name); NOT_FOUND for another
 * name. Reader lock. */
DLRM_API dlrm_status dlrm_engine_table_stats(dlrm_engine* engine, const char* table,
                                             dlrm_table_stats* out);

/* ---- Multi-process training: embedding servers + data-parallel trainers --------------
 * A job is a coordinator, embedding servers and trainers (docs/DESIGN.md, "A multi-process
 * job"); `dlrm launch` starts one on a single host. Each process is told its part by the
 * DLRM_* settings (DLRM_ROLE, DLRM_RANK, DLRM_WORLD_SIZE, DLRM_COORDINATOR, and optionally
 * DLRM_BIND_ADDRESS, DLRM_SECRET, DLRM_TIMEOUT_MS, DLRM_NET_DELAY_MS, DLRM_COLLECTIVE,
 * DLRM_LOCAL_RANK, and DLRM_DEVICE: a trainer's device in place of the config's, "cpu",
 * "cuda", "cuda:N" or "cuda:local"; engine/cluster/cluster_env.h), given as "KEY=VALUE"
 * lines in `cluster` (hosts that cannot set environment variables, like a JVM, pass them
 * so), or read from the process environment when cluster is NULL.
 * Every wait is bounded by DLRM_TIMEOUT_MS; a dead peer is an error naming it. A job with
 * no embedding server has its trainers own the embedding shards (sync only): the same
 * calls, the same bits, checkpoints either layout restores. */

/* Runs this process's part when it is the coordinator or an embedding server: returns
 * when the job has ended. restore_dir: NULL, or a sharded checkpoint directory to resume
 * from (a server loads its shards). */
DLRM_API dlrm_status dlrm_run_role(const char* config_text, const char* cluster,
                                   const char* restore_dir);

/* A host's all-gather (MPI_Allgatherv, Spark's BarrierTaskContext.allGather, ...). Every
 * trainer calls it with its bytes, collectively; it must hand each rank's bytes, in rank
 * order 0 .. num_trainers-1 (its own included), to dlrm_gather_put, and return 0. A
 * nonzero return fails the step with DLRM_NETWORK naming the value. */
typedef struct dlrm_gather dlrm_gather;
typedef int32_t (*dlrm_allgather_fn)(void* user_data, const void* data, int64_t num_bytes,
                                     dlrm_gather* result);
/* Inside a dlrm_allgather_fn: rank `rank`'s contribution (copied). */
DLRM_API dlrm_status dlrm_gather_put(dlrm_gather* result, int32_t rank, const void* data,
                                     int64_t num_bytes);

typedef struct dlrm_trainer dlrm_trainer;
/* Joins the job as a trainer (the settings' DLRM_ROLE must be trainer): rendezvous,
 * connections to the servers and trainers, and the restore of restore_dir (NULL: a fresh
 * start). allgather: NULL uses the built-in collective over the transport; else the
 * host's (user_data is passed to it). A trainer's rank among the trainers is the order of
 * its DLRM_RANK among the trainers' ranks. With device { kind: CUDA ordinal: N } in its
 * config the trainer's dense forward and backward run on GPU N (DLRM_FAILED_PRECONDITION
 * naming why where no GPU can be used); allgather must then be NULL to use
 * DLRM_COLLECTIVE=nccl. */
DLRM_API dlrm_status dlrm_trainer_create(const char* config_text, const char* cluster,
                                         const char* restore_dir, dlrm_allgather_fn allgather,
                                         void* user_data, dlrm_trainer** out);
/* A trainer destroyed before dlrm_trainer_finish leaves the job as failed, ending it: the
 * other processes' calls fail naming this trainer and, when one of its calls failed, that
 * call's error (else "it ended without finishing"). */
DLRM_API void dlrm_trainer_destroy(dlrm_trainer* trainer);
/* This trainer's rank among the trainers, their number, and the global step done. Any
 * pointer may be NULL. */
DLRM_API dlrm_status dlrm_trainer_info(dlrm_trainer* trainer, int32_t* rank, int32_t* num_trainers,
                                       int64_t* step);
/* Queues this trainer's part of the next global batch (copied) and starts its embedding
 * lookups, so they travel while earlier steps compute. Parts must be equal in size on
 * every trainer: reduction_chunk_rows x a power of two. A bad part fails its step. */
DLRM_API dlrm_status dlrm_trainer_enqueue(dlrm_trainer* trainer, const dlrm_batch* part);
/* Collective: trains the oldest queued part; *loss_out (may be NULL) receives the global
 * batch's mean loss, the same on every trainer. A bad part on any trainer fails the step
 * on all with the same message, and nothing changes. */
DLRM_API dlrm_status dlrm_trainer_train_step(dlrm_trainer* trainer, float* loss_out);
/* Collective: log loss and AUC over batches (the same on every trainer), with every
 * update so far applied. */
DLRM_API dlrm_status dlrm_trainer_evaluate(dlrm_trainer* trainer, const dlrm_batch* batches,
                                           size_t num_batches, dlrm_eval_result* out);
/* Collective: a sharded checkpoint of the current step in dir (servers write their
 * shards, trainer 0 the dense state and, last, the MANIFEST). */
DLRM_API dlrm_status dlrm_trainer_checkpoint(dlrm_trainer* trainer, const char* dir);
/* Collective: waits for every update, tells the servers this trainer is done, leaves. */
DLRM_API dlrm_status dlrm_trainer_finish(dlrm_trainer* trainer);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DLRM_DLRM_H_ */
