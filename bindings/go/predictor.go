package dlrm

import "runtime"

// Predictor serves a trained model read-only: it loads a checkpoint and predicts, with
// no way to train or change it. Predict and PredictInto may be called from any number
// of goroutines at once; they run concurrently in the engine.
type Predictor struct {
	h handle
}

// OpenPredictor loads the checkpoint at path (written by Engine.Save).
func OpenPredictor(checkpointPath string) (*Predictor, error) {
	return openPredictor(createFromCheckpoint, checkpointPath)
}

// OpenPredictorOn is OpenPredictor serving on device instead of the device the
// checkpoint was trained on: "cpu", "cuda" or "cuda:N" ("": the checkpoint's own). The
// state is the same on every device, so a checkpoint trained on a GPU serves on a machine
// without one (device "cpu"). Any other name is an error matching ErrInvalidArgument that
// names it; a CUDA device this machine cannot use, one matching ErrFailedPrecondition.
func OpenPredictorOn(checkpointPath, device string) (*Predictor, error) {
	create, release, err := createFromCheckpointOn(device)
	if err != nil {
		return nil, err
	}
	defer release()
	return openPredictor(create, checkpointPath)
}

func openPredictor(fn createFunc, checkpointPath string) (*Predictor, error) {
	p := &Predictor{}
	if err := p.h.open(fn, checkpointPath, "checkpoint path"); err != nil {
		return nil, err
	}
	runtime.SetFinalizer(p, (*Predictor).Close)
	return p, nil
}

// Predict returns the click probability of each of b's samples. Labels are ignored.
func (p *Predictor) Predict(b *Batch) ([]float32, error) {
	if err := b.validate("batch"); err != nil {
		return nil, err // before allocating: BatchSize may be garbage
	}
	out := make([]float32, b.BatchSize)
	if err := p.PredictInto(b, out); err != nil {
		return nil, err
	}
	return out, nil
}

// PredictInto writes the click probabilities of b's samples into out[:b.BatchSize].
func (p *Predictor) PredictInto(b *Batch, out []float32) error {
	err := p.h.predict(b, out)
	runtime.KeepAlive(p)
	return err
}

// Step returns the number of training steps the checkpoint was saved after.
func (p *Predictor) Step() (int64, error) {
	n, err := p.h.step()
	runtime.KeepAlive(p)
	return n, err
}

// Config returns the served model's config in protobuf text format, as the checkpoint
// holds it.
func (p *Predictor) Config() (string, error) {
	s, err := p.h.config()
	runtime.KeepAlive(p)
	return s, err
}

// Close frees the model once the calls in flight have returned. It is idempotent and
// always returns nil; later calls on p return an error matching ErrClosed.
func (p *Predictor) Close() error {
	p.h.close()
	runtime.SetFinalizer(p, nil)
	return nil
}
