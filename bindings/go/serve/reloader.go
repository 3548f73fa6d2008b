package serve

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"libdlrm.dev/dlrm"
)

// ErrNoModel is the error of a Reloader that serves no model: it has been closed. It
// matches dlrm.ErrFailedPrecondition, and a Handler answers it with 503.
var ErrNoModel = &dlrm.Error{Code: dlrm.FailedPrecondition, Msg: "no model is loaded"}

// ModelInfo describes the model a Reloader serves.
type ModelInfo struct {
	Path     string    `json:"path"`      // the checkpoint file
	Step     int64     `json:"step"`      // the training steps the checkpoint was saved after
	LoadedAt time.Time `json:"loaded_at"` // when it was loaded
}

// ReloadStats counts a Reloader's reloads (the first load not included).
type ReloadStats struct {
	Succeeded uint64
	Failed    uint64
}

// loaded is one loaded checkpoint.
type loaded struct {
	p     *dlrm.Predictor
	info  ModelInfo
	model string // the config's model block: a reload must not change it
}

// Reloader is a Scorer over the checkpoint at a path that can be replaced while it
// serves: Reload opens the file anew and, once the new model has loaded, swaps it in for
// the requests that follow; the old one is closed after the requests still using it have
// returned. A reload that fails (a missing, truncated or corrupt file, a checkpoint of
// another model) changes nothing: the old model keeps serving. No request fails because
// of a reload.
//
// Its methods may be called from any number of goroutines; reloads run one at a time.
type Reloader struct {
	path, device string

	// Logf logs each reload's outcome (log.Printf when nil). Set it before serving.
	Logf func(format string, args ...interface{})

	current   atomic.Pointer[loaded]
	succeeded atomic.Uint64
	failed    atomic.Uint64

	mu     sync.Mutex  // serializes Reload and Close, and guards seen and closed
	seen   os.FileInfo // the file as it was when last opened; nil if it was missing
	closed bool
}

// NewReloader loads the checkpoint at path, on device as dlrm.OpenPredictorOn does (""
// for the device it was trained on), and returns a Reloader serving it.
func NewReloader(path, device string) (*Reloader, error) {
	r := &Reloader{path: path, device: device}
	r.seen, _ = os.Stat(path)
	m, err := r.open()
	if err != nil {
		return nil, err
	}
	r.current.Store(m)
	return r, nil
}

// Predict scores b with the current model. A call that reaches a model just as a
// reload closes it is retried on the model that replaced it.
func (r *Reloader) Predict(b *dlrm.Batch) ([]float32, error) {
	for {
		m := r.current.Load()
		if m == nil {
			return nil, ErrNoModel
		}
		out, err := m.p.Predict(b)
		if err == nil || !errors.Is(err, dlrm.ErrClosed) || r.current.Load() == m {
			return out, err
		}
	}
}

// Model returns the model being served, and false when none is (after Close).
func (r *Reloader) Model() (ModelInfo, bool) {
	if m := r.current.Load(); m != nil {
		return m.info, true
	}
	return ModelInfo{}, false
}

// Stats returns the number of reloads that succeeded and failed so far.
func (r *Reloader) Stats() ReloadStats {
	return ReloadStats{Succeeded: r.succeeded.Load(), Failed: r.failed.Load()}
}

// Reload loads the checkpoint file again and serves it from then on, or leaves the
// model being served as it is and returns why not: the error of opening the file (a
// *dlrm.Error: IO, DataLoss, ...), one matching dlrm.ErrFailedPrecondition for a
// checkpoint of another model (its config's model block differs), or ErrNoModel after
// Close. Either way the outcome is logged and counted (Stats).
func (r *Reloader) Reload() (ModelInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ModelInfo{}, ErrNoModel
	}
	r.seen, _ = os.Stat(r.path) // before opening: a change during the open is seen later
	old := r.current.Load()
	next, err := r.open()
	if err == nil && next.model != old.model {
		next.p.Close()
		err = &dlrm.Error{Code: dlrm.FailedPrecondition, Msg: fmt.Sprintf(
			"%s holds another model (its model config differs from the one served); "+
				"restart the server to serve it", r.path)}
	}
	if err != nil {
		r.failed.Add(1)
		r.logf("reload of %s failed, still serving step %d: %v", r.path, old.info.Step, err)
		return ModelInfo{}, err
	}
	r.current.Store(next)
	r.succeeded.Add(1)
	old.p.Close() // waits for the calls still running on it
	r.logf("reloaded %s: step %d (was step %d)", r.path, next.info.Step, old.info.Step)
	return next.info, nil
}

// Close stops serving: later calls of Predict return ErrNoModel. It waits for the calls
// in flight, is idempotent and returns nil.
func (r *Reloader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if m := r.current.Swap(nil); m != nil {
		m.p.Close()
	}
	return nil
}

// Watch checks the checkpoint file every interval until ctx is done and reloads it when
// it has changed since it was last opened: renamed over (another file), or modified
// (its time or size). A file that fails to load is tried again once it changes again.
func (r *Reloader) Watch(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if r.changed() {
				r.Reload() // logged and counted; the old model keeps serving on failure
			}
		}
	}
}

// changed reports whether the file differs from the one last opened. A missing file
// has not changed: the model keeps serving until a new file appears.
func (r *Reloader) changed() bool {
	now, err := os.Stat(r.path)
	if err != nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := r.seen
	return !r.closed && (seen == nil || !os.SameFile(seen, now) ||
		!seen.ModTime().Equal(now.ModTime()) || seen.Size() != now.Size())
}

// open loads the checkpoint and reads what ModelInfo and the model check need.
func (r *Reloader) open() (*loaded, error) {
	p, err := dlrm.OpenPredictorOn(r.path, r.device)
	if err != nil {
		return nil, err
	}
	step, err := p.Step()
	var config string
	if err == nil {
		config, err = p.Config()
	}
	if err != nil {
		p.Close()
		return nil, err
	}
	info := ModelInfo{Path: r.path, Step: step, LoadedAt: time.Now()}
	return &loaded{p: p, info: info, model: modelBlock(config)}, nil
}

// modelBlock returns the "model { ... }" block of a config as the engine prints it (the
// block starts a line and ends at the next "}" in the first column), or the whole config
// if it has none.
func modelBlock(config string) string {
	start := strings.Index(config, "model {\n")
	for start > 0 && config[start-1] != '\n' {
		next := strings.Index(config[start+1:], "model {\n")
		if next < 0 {
			return config
		}
		start += 1 + next
	}
	if start < 0 {
		return config
	}
	end := strings.Index(config[start:], "\n}\n")
	if end < 0 {
		return config[start:]
	}
	return config[start : start+end+3]
}

func (r *Reloader) logf(format string, args ...interface{}) {
	if r.Logf != nil {
		r.Logf(format, args...)
		return
	}
	log.Printf("dlrm serve: "+format, args...)
}
