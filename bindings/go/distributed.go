package dlrm

/*
#include <stdint.h>
#include <stdlib.h>

#include "capi_helpers.h"

// Exported by distributed_callback.go (_cgo_export.h does not exist yet when cgo reads
// this preamble, so it is declared here).
extern int32_t dlrmGoAllGather(uintptr_t user, void* data, int64_t num_bytes,
                               dlrm_gather* result);

// A Go all-gather seen from C: user_data is the runtime/cgo.Handle of the trainer's
// gatherer.
static int32_t go_allgather(void* user_data, const void* data, int64_t num_bytes,
                            dlrm_gather* result) {
	return dlrmGoAllGather((uintptr_t)user_data, (void*)data, num_bytes, result);
}

static dlrm_status go_run_role(const char* config, const char* cluster, const char* restore,
                               char** msg) {
	return go_check(dlrm_run_role(config, cluster, restore), msg);
}

// gather: 0 for the built-in collective, else the cgo.Handle of a Go all-gather.
static dlrm_status go_trainer_create(const char* config, const char* cluster,
                                     const char* restore, uintptr_t gather, dlrm_trainer** out,
                                     char** msg) {
	return go_check(dlrm_trainer_create(config, cluster, restore,
	                                    gather != 0 ? go_allgather : NULL, (void*)gather, out),
	                msg);
}

static dlrm_status go_trainer_info(dlrm_trainer* t, int32_t* rank, int32_t* num_trainers,
                                   int64_t* step, char** msg) {
	return go_check(dlrm_trainer_info(t, rank, num_trainers, step), msg);
}

static dlrm_status go_trainer_enqueue(dlrm_trainer* t, GO_BATCH_PARAMS, char** msg) {
	dlrm_batch b = GO_BATCH;
	return go_check(dlrm_trainer_enqueue(t, &b), msg);
}

static dlrm_status go_trainer_train_step(dlrm_trainer* t, float* loss, char** msg) {
	return go_check(dlrm_trainer_train_step(t, loss), msg);
}

static dlrm_status go_trainer_evaluate1(dlrm_trainer* t, GO_BATCH_PARAMS, dlrm_eval_result* out,
                                        char** msg) {
	dlrm_batch b = GO_BATCH;
	return go_check(dlrm_trainer_evaluate(t, &b, 1, out), msg);
}

// batches lives in C memory and points only at C memory.
static dlrm_status go_trainer_evaluate(dlrm_trainer* t, const dlrm_batch* batches, size_t n,
                                       dlrm_eval_result* out, char** msg) {
	return go_check(dlrm_trainer_evaluate(t, batches, n, out), msg);
}

static dlrm_status go_trainer_checkpoint(dlrm_trainer* t, const char* dir, char** msg) {
	return go_check(dlrm_trainer_checkpoint(t, dir), msg);
}

static dlrm_status go_trainer_finish(dlrm_trainer* t, char** msg) {
	return go_check(dlrm_trainer_finish(t), msg);
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"runtime/cgo"
	"sort"
	"strings"
	"sync"
	"unsafe"
)

// AllGather is a host's collective (MPI_Allgatherv, a barrier over channels, ...). Every
// trainer calls it with its bytes, collectively; it returns every trainer's bytes in rank
// order 0 .. NumTrainers()-1, its own included. An error (or a panic) fails the step,
// and the step's error carries it. It runs on a thread of libdlrm while a collective
// Trainer method is in progress, so it must not call the Trainer's methods.
type AllGather func(mine []byte) ([][]byte, error)

// clusterText turns cluster settings into the C ABI's "KEY=VALUE\n" lines (sorted by key),
// or NULL for nil (the process environment). The caller frees the result.
func clusterText(cluster map[string]string) (*C.char, error) {
	if cluster == nil {
		return nil, nil
	}
	keys := make([]string, 0, len(cluster))
	for k := range cluster {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var text strings.Builder
	for _, k := range keys {
		v := cluster[k]
		if k == "" || strings.ContainsAny(k, "=\n\r") || strings.HasPrefix(k, "#") {
			return nil, invalidf("cluster setting %q is not a KEY (no '=', newline or leading '#')", k)
		}
		if strings.ContainsAny(v, "\n\r") {
			return nil, invalidf("cluster setting %q = %q is not a single line", k, v)
		}
		text.WriteString(k)
		text.WriteByte('=')
		text.WriteString(v)
		text.WriteByte('\n')
	}
	return cString(text.String(), "cluster settings")
}

// cArgs converts config text, cluster settings and an optional path ("" = NULL) for C;
// free releases them.
func cArgs(config string, cluster map[string]string, path, what string) (
	cconfig, ccluster, cpath *C.char, free func(), err error) {
	free = func() {
		C.free(unsafe.Pointer(cconfig))
		C.free(unsafe.Pointer(ccluster))
		C.free(unsafe.Pointer(cpath))
	}
	if cconfig, err = cString(config, "config text"); err == nil {
		if ccluster, err = clusterText(cluster); err == nil && path != "" {
			cpath, err = cString(path, what)
		}
	}
	if err != nil {
		free()
		return nil, nil, nil, nil, err
	}
	return cconfig, ccluster, cpath, free, nil
}

// RunRole runs this process's part of a multi-process job when it is the coordinator or
// an embedding server, and returns when the job has ended. cluster holds the DLRM_*
// settings (DLRM_ROLE, DLRM_RANK, DLRM_WORLD_SIZE, DLRM_COORDINATOR, DLRM_TIMEOUT_MS, ...);
// nil reads them from the process environment. restoreDir is "" or a sharded checkpoint
// directory to resume from (a server loads its shards).
func RunRole(config string, cluster map[string]string, restoreDir string) error {
	if abiErr != nil {
		return abiErr
	}
	cconfig, ccluster, crestore, free, err := cArgs(config, cluster, restoreDir, "restore dir")
	if err != nil {
		return err
	}
	defer free()
	var msg *C.char
	return statusError(C.go_run_role(cconfig, ccluster, crestore, &msg), msg)
}

// TrainerOption configures NewTrainer.
type TrainerOption func(*trainerOptions)

type trainerOptions struct {
	restoreDir string
	allGather  AllGather
}

// WithRestoreDir resumes the job from a sharded checkpoint directory written by
// Trainer.Checkpoint.
func WithRestoreDir(dir string) TrainerOption {
	return func(o *trainerOptions) { o.restoreDir = dir }
}

// WithAllGather makes the trainers exchange their step data through fn instead of the
// built-in collective over the transport. Every trainer of the job must use one.
func WithAllGather(fn AllGather) TrainerOption {
	return func(o *trainerOptions) { o.allGather = fn }
}

// gatherer is what a Go all-gather's cgo.Handle refers to: the function and its first
// failure since the last take, which the failed call's error then carries.
type gatherer struct {
	fn  AllGather
	mu  sync.Mutex
	err error
}

func (g *gatherer) fail(err error) {
	g.mu.Lock()
	if g.err == nil {
		g.err = err
	}
	g.mu.Unlock()
}

func (g *gatherer) take() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	err := g.err
	g.err = nil
	return err
}

// Trainer is one data-parallel trainer of a multi-process job of embedding servers and
// trainers. Collective methods (TrainStep, Evaluate, Checkpoint, Finish) must be called
// by every trainer, in the same order. Calls on one Trainer are serialized: a collective
// call blocks the others (and Close) until it returns, which DLRM_TIMEOUT_MS bounds.
type Trainer struct {
	mu     sync.Mutex
	ptr    *C.dlrm_trainer
	gather *gatherer  // nil: the built-in collective
	handle cgo.Handle // refers to gather; 0 when gather is nil
}

// NewTrainer joins the job as a trainer (cluster's DLRM_ROLE must be trainer; nil reads
// the settings from the process environment): rendezvous with the coordinator,
// connections to the servers and the other trainers, and the restore of WithRestoreDir.
func NewTrainer(config string, cluster map[string]string, opts ...TrainerOption) (*Trainer, error) {
	if abiErr != nil {
		return nil, abiErr
	}
	var o trainerOptions
	for _, opt := range opts {
		opt(&o)
	}
	cconfig, ccluster, crestore, free, err := cArgs(config, cluster, o.restoreDir, "restore dir")
	if err != nil {
		return nil, err
	}
	defer free()
	t := &Trainer{}
	if o.allGather != nil {
		t.gather = &gatherer{fn: o.allGather}
		t.handle = cgo.NewHandle(t.gather)
	}
	var ptr *C.dlrm_trainer
	var msg *C.char
	status := C.go_trainer_create(cconfig, ccluster, crestore, C.uintptr_t(t.handle), &ptr, &msg)
	if err := t.annotate(statusError(status, msg)); err != nil {
		if t.handle != 0 {
			t.handle.Delete()
		}
		return nil, err
	}
	t.ptr = ptr
	runtime.SetFinalizer(t, (*Trainer).Close)
	return t, nil
}

// Close releases the trainer; without Finish it leaves the job as failed, which ends it:
// the other processes fail at once, naming its last failed call's error.
// It waits for a call in flight, is idempotent and always returns nil; later calls
// return an error matching ErrClosed.
func (t *Trainer) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ptr != nil {
		C.dlrm_trainer_destroy(t.ptr)
		t.ptr = nil
	}
	if t.handle != 0 {
		t.handle.Delete()
		t.handle = 0
	}
	runtime.SetFinalizer(t, nil)
	return nil
}

// annotate adds the Go all-gather's failure, if any, to the error of the call it failed.
func (t *Trainer) annotate(err error) error {
	if t.gather == nil {
		return err
	}
	cause := t.gather.take()
	if err == nil || cause == nil {
		return err
	}
	e := err.(*Error)
	e.Msg += ": " + cause.Error()
	e.cause = cause
	return e
}

// call runs fn on the trainer under the lock, turning its status into an error.
func (t *Trainer) call(fn func(p *C.dlrm_trainer, msg **C.char) C.dlrm_status) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ptr == nil {
		return &Error{Code: ErrClosed.Code, Msg: ErrClosed.Msg}
	}
	if t.gather != nil {
		t.gather.take() // a failure already reported belongs to no later call
	}
	var msg *C.char
	return t.annotate(statusError(fn(t.ptr, &msg), msg))
}

func (t *Trainer) info() (rank, numTrainers C.int32_t, step C.int64_t, err error) {
	err = t.call(func(p *C.dlrm_trainer, msg **C.char) C.dlrm_status {
		return C.go_trainer_info(p, &rank, &numTrainers, &step, msg)
	})
	return rank, numTrainers, step, err
}

// Rank returns this trainer's rank among the trainers: the order of its DLRM_RANK among
// the trainers' ranks.
func (t *Trainer) Rank() (int, error) {
	rank, _, _, err := t.info()
	return int(rank), err
}

// NumTrainers returns the number of trainers in the job.
func (t *Trainer) NumTrainers() (int, error) {
	_, n, _, err := t.info()
	return int(n), err
}

// Step returns the number of global steps trained (a restored trainer starts at the
// checkpoint's).
func (t *Trainer) Step() (int64, error) {
	_, _, step, err := t.info()
	return int64(step), err
}

// Enqueue queues this trainer's part of the next global batch (copied, so part may be
// reused at once) and starts its embedding lookups. Parts must be equal in size on every
// trainer: reduction_chunk_rows times a power of two. A bad part fails its step.
func (t *Trainer) Enqueue(part *Batch) error {
	if err := part.validate("part"); err != nil {
		return err
	}
	b := part
	err := t.call(func(p *C.dlrm_trainer, msg **C.char) C.dlrm_status {
		return C.go_trainer_enqueue(p, C.int64_t(b.BatchSize), C.int32_t(b.NumDense),
			C.int32_t(b.NumSparse), f32(b.Dense), f32(b.Labels), i32(b.Lengths), i64(b.IDs),
			C.int64_t(len(b.IDs)), f32(b.Weights), msg)
	})
	runtime.KeepAlive(part)
	return err
}

// TrainStep trains the oldest queued part (collective) and returns the global batch's
// mean loss, the same on every trainer. A bad part on any trainer fails the step on all
// with the same message, and nothing changes.
func (t *Trainer) TrainStep() (float32, error) {
	var loss C.float
	err := t.call(func(p *C.dlrm_trainer, msg **C.char) C.dlrm_status {
		return C.go_trainer_train_step(p, &loss, msg)
	})
	return float32(loss), err
}

// Evaluate returns the log loss and ROC AUC over all samples of batches (collective: the
// same result on every trainer), with every update so far applied.
func (t *Trainer) Evaluate(batches ...*Batch) (EvalResult, error) {
	if len(batches) == 0 {
		return EvalResult{}, invalidf("Evaluate needs at least one batch")
	}
	for i, b := range batches {
		if err := b.validate(fmt.Sprintf("batches[%d]", i)); err != nil {
			return EvalResult{}, err
		}
	}
	var r C.dlrm_eval_result
	r.struct_size = C.sizeof_dlrm_eval_result
	var err error
	if len(batches) == 1 {
		b := batches[0]
		err = t.call(func(p *C.dlrm_trainer, msg **C.char) C.dlrm_status {
			return C.go_trainer_evaluate1(p, C.int64_t(b.BatchSize), C.int32_t(b.NumDense),
				C.int32_t(b.NumSparse), f32(b.Dense), f32(b.Labels), i32(b.Lengths),
				i64(b.IDs), C.int64_t(len(b.IDs)), f32(b.Weights), &r, msg)
		})
		runtime.KeepAlive(b)
	} else {
		cb, free, cerr := copyBatches(batches)
		if cerr != nil {
			return EvalResult{}, cerr
		}
		err = t.call(func(p *C.dlrm_trainer, msg **C.char) C.dlrm_status {
			return C.go_trainer_evaluate(p, cb, C.size_t(len(batches)), &r, msg)
		})
		free()
	}
	if err != nil {
		return EvalResult{}, err
	}
	return EvalResult{LogLoss: float64(r.log_loss), AUC: float64(r.auc),
		NumSamples: int64(r.num_samples)}, nil
}

// Checkpoint writes a sharded checkpoint of the current step into dir (collective):
// the servers write their shards, trainer 0 the dense state and, last, the MANIFEST.
func (t *Trainer) Checkpoint(dir string) error {
	cdir, err := cString(dir, "checkpoint dir")
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(cdir))
	return t.call(func(p *C.dlrm_trainer, msg **C.char) C.dlrm_status {
		return C.go_trainer_checkpoint(p, cdir, msg)
	})
}

// Finish waits for every update, tells the servers this trainer is done and leaves the
// job (collective). Close the trainer afterwards.
func (t *Trainer) Finish() error {
	return t.call(func(p *C.dlrm_trainer, msg **C.char) C.dlrm_status {
		return C.go_trainer_finish(p, msg)
	})
}
