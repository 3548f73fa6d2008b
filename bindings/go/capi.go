package dlrm

/*
#cgo pkg-config: dlrm
#include <stdlib.h>

#include "capi_helpers.h"

static dlrm_status go_create(const char* config_text, dlrm_engine** out, char** msg) {
	return go_check(dlrm_engine_create(config_text, out), msg);
}

static dlrm_status go_create_from_file(const char* path, dlrm_engine** out, char** msg) {
	return go_check(dlrm_engine_create_from_file(path, out), msg);
}

static dlrm_status go_create_from_checkpoint(const char* path, dlrm_engine** out, char** msg) {
	return go_check(dlrm_engine_create_from_checkpoint(path, out), msg);
}

static dlrm_status go_create_from_checkpoint_on(const char* path, const char* device,
                                                dlrm_engine** out, char** msg) {
	return go_check(dlrm_engine_create_from_checkpoint_on(path, device, out), msg);
}

static dlrm_status go_train_step(dlrm_engine* e, GO_BATCH_PARAMS, float* loss, char** msg) {
	dlrm_batch b = GO_BATCH;
	return go_check(dlrm_engine_train_step(e, &b, loss), msg);
}

static dlrm_status go_train_submit(dlrm_engine* e, GO_BATCH_PARAMS, int64_t* ticket, char** msg) {
	dlrm_batch b = GO_BATCH;
	return go_check(dlrm_engine_train_submit(e, &b, ticket), msg);
}

static dlrm_status go_train_wait(dlrm_engine* e, int64_t ticket, float* loss, char** msg) {
	return go_check(dlrm_engine_train_wait(e, ticket, loss), msg);
}

static dlrm_status go_predict(dlrm_engine* e, GO_BATCH_PARAMS, float* out, size_t out_len,
                              char** msg) {
	// An empty Go slice has no address; let the engine report the empty batch.
	float empty;
	dlrm_batch b = GO_BATCH;
	if (out == NULL && out_len == 0) out = &empty;
	return go_check(dlrm_engine_predict(e, &b, out, out_len), msg);
}

static dlrm_status go_evaluate1(dlrm_engine* e, GO_BATCH_PARAMS, dlrm_eval_result* out,
                                char** msg) {
	dlrm_batch b = GO_BATCH;
	return go_check(dlrm_engine_evaluate(e, &b, 1, out), msg);
}

// batches lives in C memory and points only at C memory.
static dlrm_status go_evaluate(dlrm_engine* e, const dlrm_batch* batches, size_t n,
                               dlrm_eval_result* out, char** msg) {
	return go_check(dlrm_engine_evaluate(e, batches, n, out), msg);
}

static dlrm_status go_set_learning_rate(dlrm_engine* e, int32_t target, float lr, char** msg) {
	return go_check(dlrm_engine_set_learning_rate(e, target, lr), msg);
}

static dlrm_status go_get_step(dlrm_engine* e, int64_t* out, char** msg) {
	return go_check(dlrm_engine_get_step(e, out), msg);
}

static dlrm_status go_get_config(dlrm_engine* e, char** out, char** msg) {
	return go_check(dlrm_engine_get_config(e, out), msg);
}

static dlrm_status go_save(dlrm_engine* e, const char* path, char** msg) {
	return go_check(dlrm_engine_save(e, path), msg);
}

static dlrm_status go_export(dlrm_engine* e, const char* path, int32_t quantize, char** msg) {
	return go_check(dlrm_engine_export(e, path, quantize), msg);
}

static dlrm_status go_load(dlrm_engine* e, const char* path, char** msg) {
	return go_check(dlrm_engine_load(e, path), msg);
}

static dlrm_status go_parameter_count(dlrm_engine* e, int64_t* out, char** msg) {
	return go_check(dlrm_engine_parameter_count(e, out), msg);
}

static dlrm_status go_parameter_name(dlrm_engine* e, int64_t index, char** out, char** msg) {
	return go_check(dlrm_engine_parameter_name(e, index, out), msg);
}

static dlrm_status go_parameter_shape(dlrm_engine* e, const char* name, int64_t* shape,
                                      int32_t capacity, int32_t* ndim, char** msg) {
	return go_check(dlrm_engine_parameter_shape(e, name, shape, capacity, ndim), msg);
}

static dlrm_status go_read_parameter(dlrm_engine* e, const char* name, float* out,
                                     size_t out_len, char** msg) {
	return go_check(dlrm_engine_read_parameter(e, name, out, out_len), msg);
}

static dlrm_status go_write_parameter(dlrm_engine* e, const char* name, const float* values,
                                      size_t len, char** msg) {
	// An empty Go slice has no address; let the engine report the size mismatch.
	static const float empty = 0;
	if (values == NULL && len == 0) values = &empty;
	return go_check(dlrm_engine_write_parameter(e, name, values, len), msg);
}

static dlrm_status go_table_stats(dlrm_engine* e, const char* table, dlrm_table_stats* out,
                                  char** msg) {
	return go_check(dlrm_engine_table_stats(e, table, out), msg);
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// ABIVersion is the libdlrm C ABI version this binding is written against. Constructors
// fail if the loaded library reports another.
const ABIVersion = 1

// These fail to compile if the Go constants drift from the header's.
var (
	_ = [1]struct{}{}[C.DLRM_ABI_VERSION-ABIVersion]
	_ = [1]struct{}{}[C.DLRM_INVALID_ARGUMENT-InvalidArgument]
	_ = [1]struct{}{}[C.DLRM_OUT_OF_RANGE-OutOfRange]
	_ = [1]struct{}{}[C.DLRM_IO-IO]
	_ = [1]struct{}{}[C.DLRM_INTERNAL-Internal]
	_ = [1]struct{}{}[C.DLRM_FAILED_PRECONDITION-FailedPrecondition]
	_ = [1]struct{}{}[C.DLRM_RESOURCE_EXHAUSTED-ResourceExhausted]
	_ = [1]struct{}{}[C.DLRM_LR_ALL-LRAll]
	_ = [1]struct{}{}[C.DLRM_EXPORT_FP32-ExportFP32]
	_ = [1]struct{}{}[C.DLRM_EXPORT_INT8-ExportINT8]
	_ = [1]struct{}{}[C.DLRM_EXPORT_INT4-ExportINT4]
	_ = [1]struct{}{}[C.DLRM_EXPORT_DENSE_BF16-ExportDenseBF16]
	_ = [1]struct{}{}[C.DLRM_EXPORT_DENSE_FP16-ExportDenseFP16]
)

// abiErr is non-nil when the loaded library's ABI differs from ABIVersion.
var abiErr = checkABI()

func checkABI() error {
	if got := int32(C.dlrm_abi_version()); got != ABIVersion {
		return &Error{Code: FailedPrecondition, Msg: fmt.Sprintf(
			"libdlrm.so has C ABI version %d but this Go binding needs version %d", got, ABIVersion)}
	}
	return nil
}

// Version returns the version string of the loaded libdlrm, e.g. "0.1.0".
func Version() string { return C.GoString(C.dlrm_version()) }

// statusError turns a helper's status and message copy into an error, freeing msg.
func statusError(status C.dlrm_status, msg *C.char) error {
	if status == C.DLRM_OK {
		return nil
	}
	text := "(libdlrm's error message could not be copied: out of memory)"
	if msg != nil {
		text = C.GoString(msg)
		C.free(unsafe.Pointer(msg))
	}
	return &Error{Code: Code(status), Msg: text}
}

// cString converts s for C, refusing embedded NUL bytes that C would silently cut at.
// The caller frees the result.
func cString(s, what string) (*C.char, error) {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return nil, invalidf("%s contains a NUL byte at offset %d", what, i)
	}
	return C.CString(s), nil
}

func f32(s []float32) *C.float {
	if len(s) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(&s[0]))
}

func i32(s []int32) *C.int32_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.int32_t)(unsafe.Pointer(&s[0]))
}

func i64(s []int64) *C.int64_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.int64_t)(unsafe.Pointer(&s[0]))
}

// handle owns a dlrm_engine. Every call holds the read lock, so calls run concurrently
// (the engine locks internally) while close waits for them with the write lock.
type handle struct {
	mu  sync.RWMutex
	ptr *C.dlrm_engine
}

type createFunc func(arg *C.char, out **C.dlrm_engine, msg **C.char) C.dlrm_status

// open creates the engine with fn(arg) where arg is config text or a path.
func (h *handle) open(fn createFunc, arg, what string) error {
	if abiErr != nil {
		return abiErr
	}
	carg, err := cString(arg, what)
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(carg))
	var ptr *C.dlrm_engine
	var msg *C.char
	if err := statusError(fn(carg, &ptr, &msg), msg); err != nil {
		return err
	}
	h.ptr = ptr
	return nil
}

func createFromText(arg *C.char, out **C.dlrm_engine, msg **C.char) C.dlrm_status {
	return C.go_create(arg, out, msg)
}

func createFromFile(arg *C.char, out **C.dlrm_engine, msg **C.char) C.dlrm_status {
	return C.go_create_from_file(arg, out, msg)
}

func createFromCheckpoint(arg *C.char, out **C.dlrm_engine, msg **C.char) C.dlrm_status {
	return C.go_create_from_checkpoint(arg, out, msg)
}

// createFromCheckpointOn returns the createFunc that restores a checkpoint on device
// ("cpu", "cuda", "cuda:N"; "": the checkpoint's own), and the function that frees its C
// copy of device once the engine is open.
func createFromCheckpointOn(device string) (createFunc, func(), error) {
	cdevice, err := cString(device, "device")
	if err != nil {
		return nil, nil, err
	}
	create := func(arg *C.char, out **C.dlrm_engine, msg **C.char) C.dlrm_status {
		return C.go_create_from_checkpoint_on(arg, cdevice, out, msg)
	}
	return create, func() { C.free(unsafe.Pointer(cdevice)) }, nil
}

// acquire read-locks h and returns the engine, or ErrClosed. Pair with h.mu.RUnlock.
func (h *handle) acquire() (*C.dlrm_engine, error) {
	h.mu.RLock()
	if h.ptr == nil {
		h.mu.RUnlock()
		return nil, &Error{Code: ErrClosed.Code, Msg: ErrClosed.Msg}
	}
	return h.ptr, nil
}

// close destroys the engine once calls in flight have returned. Idempotent.
func (h *handle) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ptr != nil {
		C.dlrm_engine_destroy(h.ptr)
		h.ptr = nil
	}
}

func (h *handle) trainStep(b *Batch) (float32, error) {
	e, err := h.acquire()
	if err != nil {
		return 0, err
	}
	defer h.mu.RUnlock()
	if err := b.validate("batch"); err != nil {
		return 0, err
	}
	var loss C.float
	var msg *C.char
	status := C.go_train_step(e, C.int64_t(b.BatchSize), C.int32_t(b.NumDense),
		C.int32_t(b.NumSparse), f32(b.Dense), f32(b.Labels), i32(b.Lengths), i64(b.IDs),
		C.int64_t(len(b.IDs)), f32(b.Weights), &loss, &msg)
	runtime.KeepAlive(b)
	return float32(loss), statusError(status, msg)
}

func (h *handle) trainSubmit(b *Batch) (int64, error) {
	e, err := h.acquire()
	if err != nil {
		return 0, err
	}
	defer h.mu.RUnlock()
	if err := b.validate("batch"); err != nil {
		return 0, err
	}
	var ticket C.int64_t
	var msg *C.char
	status := C.go_train_submit(e, C.int64_t(b.BatchSize), C.int32_t(b.NumDense),
		C.int32_t(b.NumSparse), f32(b.Dense), f32(b.Labels), i32(b.Lengths), i64(b.IDs),
		C.int64_t(len(b.IDs)), f32(b.Weights), &ticket, &msg)
	runtime.KeepAlive(b)
	return int64(ticket), statusError(status, msg)
}

func (h *handle) trainWait(ticket int64) (float32, error) {
	e, err := h.acquire()
	if err != nil {
		return 0, err
	}
	defer h.mu.RUnlock()
	var loss C.float
	var msg *C.char
	status := C.go_train_wait(e, C.int64_t(ticket), &loss, &msg)
	return float32(loss), statusError(status, msg)
}

func (h *handle) predict(b *Batch, out []float32) error {
	e, err := h.acquire()
	if err != nil {
		return err
	}
	defer h.mu.RUnlock()
	if err := b.validate("batch"); err != nil {
		return err
	}
	if len(out) < b.BatchSize {
		return invalidf("out has length %d but BatchSize is %d", len(out), b.BatchSize)
	}
	var msg *C.char
	status := C.go_predict(e, C.int64_t(b.BatchSize), C.int32_t(b.NumDense),
		C.int32_t(b.NumSparse), f32(b.Dense), f32(b.Labels), i32(b.Lengths), i64(b.IDs),
		C.int64_t(len(b.IDs)), f32(b.Weights), f32(out), C.size_t(len(out)), &msg)
	runtime.KeepAlive(b)
	runtime.KeepAlive(out)
	return statusError(status, msg)
}

func (h *handle) evaluate(batches []*Batch) (EvalResult, error) {
	e, err := h.acquire()
	if err != nil {
		return EvalResult{}, err
	}
	defer h.mu.RUnlock()
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
	var msg *C.char
	var status C.dlrm_status
	if len(batches) == 1 {
		b := batches[0]
		status = C.go_evaluate1(e, C.int64_t(b.BatchSize), C.int32_t(b.NumDense),
			C.int32_t(b.NumSparse), f32(b.Dense), f32(b.Labels), i32(b.Lengths), i64(b.IDs),
			C.int64_t(len(b.IDs)), f32(b.Weights), &r, &msg)
		runtime.KeepAlive(b)
	} else {
		cb, free, err := copyBatches(batches)
		if err != nil {
			return EvalResult{}, err
		}
		status = C.go_evaluate(e, cb, C.size_t(len(batches)), &r, &msg)
		free()
	}
	if err := statusError(status, msg); err != nil {
		return EvalResult{}, err
	}
	return EvalResult{LogLoss: float64(r.log_loss), AUC: float64(r.auc),
		NumSamples: int64(r.num_samples)}, nil
}

func (h *handle) setLearningRate(target LRTarget, lr float32) error {
	e, err := h.acquire()
	if err != nil {
		return err
	}
	defer h.mu.RUnlock()
	var msg *C.char
	return statusError(C.go_set_learning_rate(e, C.int32_t(target), C.float(lr), &msg), msg)
}

func (h *handle) step() (int64, error) {
	e, err := h.acquire()
	if err != nil {
		return 0, err
	}
	defer h.mu.RUnlock()
	var n C.int64_t
	var msg *C.char
	return int64(n), statusError(C.go_get_step(e, &n, &msg), msg)
}

func (h *handle) config() (string, error) {
	e, err := h.acquire()
	if err != nil {
		return "", err
	}
	defer h.mu.RUnlock()
	var out, msg *C.char
	if err := statusError(C.go_get_config(e, &out, &msg), msg); err != nil {
		return "", err
	}
	defer C.dlrm_free(unsafe.Pointer(out))
	return C.GoString(out), nil
}

// withPath runs a save, export or load on path.
func (h *handle) withPath(path string,
	fn func(*C.dlrm_engine, *C.char, **C.char) C.dlrm_status) error {
	e, err := h.acquire()
	if err != nil {
		return err
	}
	defer h.mu.RUnlock()
	cpath, err := cString(path, "path")
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(cpath))
	var msg *C.char
	return statusError(fn(e, cpath, &msg), msg)
}

func (h *handle) save(path string) error {
	return h.withPath(path, func(e *C.dlrm_engine, p *C.char, msg **C.char) C.dlrm_status {
		return C.go_save(e, p, msg)
	})
}

func (h *handle) export(path string, quantize ExportPrecision) error {
	return h.withPath(path, func(e *C.dlrm_engine, p *C.char, msg **C.char) C.dlrm_status {
		return C.go_export(e, p, C.int32_t(quantize), msg)
	})
}

func (h *handle) load(path string) error {
	return h.withPath(path, func(e *C.dlrm_engine, p *C.char, msg **C.char) C.dlrm_status {
		return C.go_load(e, p, msg)
	})
}

func (h *handle) parameterNames() ([]string, error) {
	e, err := h.acquire()
	if err != nil {
		return nil, err
	}
	defer h.mu.RUnlock()
	var count C.int64_t
	var msg *C.char
	if err := statusError(C.go_parameter_count(e, &count, &msg), msg); err != nil {
		return nil, err
	}
	names := make([]string, 0, int(count))
	for i := C.int64_t(0); i < count; i++ {
		var name *C.char
		if err := statusError(C.go_parameter_name(e, i, &name, &msg), msg); err != nil {
			return nil, err
		}
		names = append(names, C.GoString(name))
		C.dlrm_free(unsafe.Pointer(name))
	}
	return names, nil
}

// shapeLocked returns the named parameter's shape; the caller holds the read lock.
func shapeLocked(e *C.dlrm_engine, cname *C.char) ([]int64, error) {
	var shape [C.DLRM_MAX_PARAMETER_DIMS]C.int64_t
	var ndim C.int32_t
	var msg *C.char
	status := C.go_parameter_shape(e, cname, &shape[0], C.DLRM_MAX_PARAMETER_DIMS, &ndim, &msg)
	if err := statusError(status, msg); err != nil {
		return nil, err
	}
	out := make([]int64, int(ndim))
	for i := range out {
		out[i] = int64(shape[i])
	}
	return out, nil
}

// withName runs fn on the engine and name converted for C, under the read lock.
func (h *handle) withName(name string, fn func(*C.dlrm_engine, *C.char) error) error {
	e, err := h.acquire()
	if err != nil {
		return err
	}
	defer h.mu.RUnlock()
	cname, err := cString(name, "parameter name")
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(cname))
	return fn(e, cname)
}

func (h *handle) parameterShape(name string) (shape []int64, err error) {
	err = h.withName(name, func(e *C.dlrm_engine, cname *C.char) error {
		shape, err = shapeLocked(e, cname)
		return err
	})
	return shape, err
}

func (h *handle) readParameter(name string) (values []float32, err error) {
	err = h.withName(name, func(e *C.dlrm_engine, cname *C.char) error {
		shape, err := shapeLocked(e, cname)
		if err != nil {
			return err
		}
		n := 1
		for _, d := range shape {
			n *= int(d)
		}
		values = make([]float32, n)
		var msg *C.char
		status := C.go_read_parameter(e, cname, f32(values), C.size_t(n), &msg)
		runtime.KeepAlive(values)
		return statusError(status, msg)
	})
	if err != nil {
		return nil, err
	}
	return values, nil
}

func (h *handle) writeParameter(name string, values []float32) error {
	return h.withName(name, func(e *C.dlrm_engine, cname *C.char) error {
		var msg *C.char
		status := C.go_write_parameter(e, cname, f32(values), C.size_t(len(values)), &msg)
		runtime.KeepAlive(values)
		return statusError(status, msg)
	})
}

func (h *handle) tableStats(table string) (TableStats, error) {
	e, err := h.acquire()
	if err != nil {
		return TableStats{}, err
	}
	defer h.mu.RUnlock()
	ctable, err := cString(table, "table name")
	if err != nil {
		return TableStats{}, err
	}
	defer C.free(unsafe.Pointer(ctable))
	var s C.dlrm_table_stats
	s.struct_size = C.sizeof_dlrm_table_stats
	var msg *C.char
	if err := statusError(C.go_table_stats(e, ctable, &s, &msg), msg); err != nil {
		return TableStats{}, err
	}
	return TableStats{Dynamic: s.dynamic != 0, Capacity: int64(s.capacity), Size: int64(s.size),
		Lookups: int64(s.lookups), Hits: int64(s.hits), Admitted: int64(s.admitted),
		Evicted: int64(s.evicted), Rejected: int64(s.rejected),
		MemoryBytes: int64(s.memory_bytes)}, nil
}
