package dlrm_test

import (
	"path/filepath"
	"sync"
	"testing"

	"libdlrm.dev/dlrm"
)

// trainedCheckpoint trains an engine a little, saves it into a temporary directory and
// returns the engine and the checkpoint's path.
func trainedCheckpoint(t testing.TB) (*dlrm.Engine, string) {
	t.Helper()
	e := newTestEngine(t)
	train(t, e, 12)
	path := filepath.Join(t.TempDir(), "model.ckpt")
	if err := e.Save(path); err != nil {
		t.Fatal(err)
	}
	return e, path
}

func openPredictor(t testing.TB, path string) *dlrm.Predictor {
	t.Helper()
	p, err := dlrm.OpenPredictor(path)
	if err != nil {
		t.Fatalf("OpenPredictor: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestPredictorMatchesEngine(t *testing.T) {
	e, path := trainedCheckpoint(t)
	p := openPredictor(t, path)
	for salt := 0; salt < 5; salt++ {
		b := makeBatch(salt)
		b.Labels = nil
		want := predict(t, e, b)
		if got := predict(t, p, b); !sameBits(got, want) {
			t.Errorf("salt %d: Predictor %v, Engine %v", salt, got, want)
		}
		out := make([]float32, testB)
		if err := p.PredictInto(b, out); err != nil || !sameBits(out, want) {
			t.Errorf("salt %d: PredictInto %v, %v; want %v", salt, out, err, want)
		}
	}
}

// TestPredictorStepConfig reads the step and the config the checkpoint holds.
func TestPredictorStepConfig(t *testing.T) {
	e, path := trainedCheckpoint(t)
	p := openPredictor(t, path)
	if n, err := p.Step(); err != nil || n != 12 {
		t.Errorf("Step() = %d, %v; want 12", n, err)
	}
	want, err := e.Config()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := p.Config(); err != nil || got != want {
		t.Errorf("Config() = %q, %v; want the engine's %q", got, err, want)
	}
	p.Close()
	_, err = p.Step()
	wantError(t, err, dlrm.ErrClosed)
	_, err = p.Config()
	wantError(t, err, dlrm.ErrClosed)
}

// TestPredictorOnDevice serves a checkpoint on a named device: "cpu" predicts bitwise as
// the engine that wrote it, and an unknown name is refused naming it.
func TestPredictorOnDevice(t *testing.T) {
	e, path := trainedCheckpoint(t)
	p, err := dlrm.OpenPredictorOn(path, "cpu")
	if err != nil {
		t.Fatalf("OpenPredictorOn: %v", err)
	}
	defer p.Close()
	for salt := 0; salt < 3; salt++ {
		b := makeBatch(salt)
		b.Labels = nil
		if got, want := predict(t, p, b), predict(t, e, b); !sameBits(got, want) {
			t.Errorf("salt %d: Predictor on cpu %v, Engine %v", salt, got, want)
		}
	}

	_, err = dlrm.OpenPredictorOn(path, "gpu")
	wantError(t, err, dlrm.ErrInvalidArgument, "'gpu'")
	_, err = dlrm.OpenPredictorOn("/nonexistent/model.ckpt", "cpu")
	wantError(t, err, dlrm.ErrIO, "/nonexistent/model.ckpt")
}

func TestPredictorErrors(t *testing.T) {
	_, err := dlrm.OpenPredictor("/nonexistent/model.ckpt")
	wantError(t, err, dlrm.ErrIO, "/nonexistent/model.ckpt")

	_, path := trainedCheckpoint(t)
	p := openPredictor(t, path)
	ref := makeBatch(1)
	before := predict(t, p, ref)

	bad := makeBatch(2)
	bad.IDs[0] = 50
	_, err = p.Predict(bad)
	wantError(t, err, dlrm.ErrOutOfRange, "batch.ids[0]")
	bad = makeBatch(2)
	bad.Lengths = bad.Lengths[1:]
	_, err = p.Predict(bad)
	wantError(t, err, dlrm.ErrInvalidArgument, "batch.Lengths")
	wantError(t, p.PredictInto(ref, nil), dlrm.ErrInvalidArgument, "out")
	if got := predict(t, p, ref); !sameBits(got, before) {
		t.Errorf("failed calls changed the predictions")
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, err = p.Predict(ref)
	wantError(t, err, dlrm.ErrClosed, "closed")
	wantError(t, p.PredictInto(ref, make([]float32, testB)), dlrm.ErrClosed)
}

// TestPredictorConcurrent predicts from 16 goroutines on one Predictor (run it with
// -race) and requires the serial results bitwise.
func TestPredictorConcurrent(t *testing.T) {
	_, path := trainedCheckpoint(t)
	p := openPredictor(t, path)
	const salts = 6
	batches := make([]*dlrm.Batch, salts)
	want := make([][]float32, salts)
	for s := range batches {
		batches[s] = makeBatch(s)
		batches[s].Labels = nil
		want[s] = predict(t, p, batches[s])
	}

	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			out := make([]float32, testB)
			for i := 0; i < 50; i++ {
				s := (g + i) % salts
				if err := p.PredictInto(batches[s], out); err != nil {
					errs <- err.Error()
					return
				}
				if !sameBits(out, want[s]) {
					errs <- "concurrent prediction differs from the serial one"
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Error(msg)
	}
}
