// Package dlrm is the Go binding of libdlrm, a training engine for deep learning
// recommendation models (DLRM: embedding tables + MLPs).
//
// It calls libdlrm.so through its stable C ABI (include/dlrm/dlrm.h) with cgo and
// nothing else. Build with the header and the library on the cgo search paths, e.g.
//
//	CGO_LDFLAGS="-L/path/to/lib -Wl,-rpath,/path/to/lib" go build ./...
//
// An Engine trains, evaluates, predicts and checkpoints a model. A Predictor is a
// read-only view of a checkpoint for serving: it has no training methods and its Predict
// may be called from many goroutines at once. Engine.Export writes a serving model
// without optimizer state, its tables FP32 or row-wise quantized to INT8 or INT4, that
// both load; a quantized one predicts but cannot be trained, saved or loaded into.
//
// A multi-process job (a coordinator, embedding servers and data-parallel trainers, told
// their parts by the DLRM_* settings) is run with RunRole, for the coordinator and the
// servers, and a Trainer per trainer: Enqueue its part of each global batch, then the
// collective TrainStep, Evaluate, Checkpoint and Finish. WithAllGather plugs in the
// host's own collective (an AllGather) instead of the built-in one.
//
// The library's log goes to stderr unless SetLogFunc routes it to a Go function
// (LoggerFunc adapts a *log.Logger).
//
// Batches are borrowed, column-oriented memory (see Batch); the engine reads the slices
// in place during a call and keeps no reference to them afterwards.
// BatchFromArrow makes a Batch from an Arrow record batch exported through the Arrow C
// Data Interface (arrow-go's cdata package), copying the columns that ArrowColumns names.
//
// Every failure is a *Error carrying the engine's status Code and its message, which
// names the argument or field that was wrong. Test for a kind of failure with errors.Is
// and the sentinel values:
//
//	if errors.Is(err, dlrm.ErrOutOfRange) { ... }
//
// Engines, Predictors and Trainers hold native memory: Close them when done. Close waits for
// calls in flight, is idempotent, and any later call returns an error matching
// ErrClosed. A finalizer closes a forgotten handle as a backstop only.
package dlrm
