package dlrm

import "runtime"

// Engine is a DLRM model with its optimizers: it trains, evaluates, predicts and
// checkpoints. All methods may be called from several goroutines; the engine serializes
// training steps and mutations against everything else and runs reads (Predict,
// Evaluate, Save, getters) concurrently.
type Engine struct {
	h handle
}

// NewEngine creates an engine from a config in protobuf text format (schema:
// engine/config/dlrm.proto).
func NewEngine(configText string) (*Engine, error) {
	return newEngine(createFromText, configText, "config text")
}

// NewEngineFromFile creates an engine from a protobuf text config file.
func NewEngineFromFile(path string) (*Engine, error) {
	return newEngine(createFromFile, path, "config path")
}

// NewEngineFromCheckpoint creates an engine from a checkpoint written by Save (it holds
// the config) and restores its parameters, optimizer state, step and learning rates.
func NewEngineFromCheckpoint(path string) (*Engine, error) {
	return newEngine(createFromCheckpoint, path, "checkpoint path")
}

// NewEngineFromCheckpointOn is NewEngineFromCheckpoint on device instead of the device
// the checkpoint was trained on: "cpu", "cuda" or "cuda:N" ("": the checkpoint's own).
// The state is the same on every device, so a checkpoint trained on a GPU serves on a
// machine without one. Any other name is an error matching ErrInvalidArgument that names
// it; a CUDA device this machine cannot use, one matching ErrFailedPrecondition.
func NewEngineFromCheckpointOn(path, device string) (*Engine, error) {
	create, release, err := createFromCheckpointOn(device)
	if err != nil {
		return nil, err
	}
	defer release()
	return newEngine(create, path, "checkpoint path")
}

func newEngine(fn createFunc, arg, what string) (*Engine, error) {
	e := &Engine{}
	if err := e.h.open(fn, arg, what); err != nil {
		return nil, err
	}
	runtime.SetFinalizer(e, (*Engine).Close)
	return e, nil
}

// Close frees the engine once the calls in flight have returned. It is idempotent and
// always returns nil; later calls on e return an error matching ErrClosed.
func (e *Engine) Close() error {
	e.h.close()
	runtime.SetFinalizer(e, nil)
	return nil
}

// TrainStep takes one optimizer step on b (Labels required) and returns the batch's mean
// binary cross-entropy loss before the update. A failing step changes nothing.
func (e *Engine) TrainStep(b *Batch) (float32, error) {
	loss, err := e.h.trainStep(b)
	runtime.KeepAlive(e)
	return loss, err
}

// SubmitTrainStep queues a training step and returns its ticket without waiting: the
// engine validates and copies b during the call (a bad batch is reported here and nothing
// is queued), so b may be reused at once while the step trains. Steps run in submission
// order and give bitwise the results of TrainStep in that order.
func (e *Engine) SubmitTrainStep(b *Batch) (int64, error) {
	ticket, err := e.h.trainSubmit(b)
	runtime.KeepAlive(e)
	return ticket, err
}

// WaitTrainStep waits for a submitted step and returns its loss or its error (Cancelled
// for a step queued behind a failed one). Each ticket can be waited for once.
func (e *Engine) WaitTrainStep(ticket int64) (float32, error) {
	loss, err := e.h.trainWait(ticket)
	runtime.KeepAlive(e)
	return loss, err
}

// Predict returns the click probability of each of b's samples. Labels are ignored.
func (e *Engine) Predict(b *Batch) ([]float32, error) {
	if err := b.validate("batch"); err != nil {
		return nil, err // before allocating: BatchSize may be garbage
	}
	out := make([]float32, b.BatchSize)
	if err := e.PredictInto(b, out); err != nil {
		return nil, err
	}
	return out, nil
}

// PredictInto writes the click probabilities of b's samples into out[:b.BatchSize].
func (e *Engine) PredictInto(b *Batch, out []float32) error {
	err := e.h.predict(b, out)
	runtime.KeepAlive(e)
	return err
}

// Evaluate returns the log loss and ROC AUC over all samples of batches (Labels
// required). A single batch is passed zero-copy; several are copied into C memory first.
func (e *Engine) Evaluate(batches []*Batch) (EvalResult, error) {
	r, err := e.h.evaluate(batches)
	runtime.KeepAlive(e)
	return r, err
}

// SetLearningRate overrides the base learning rate of the target optimizer(s); the
// config's schedule still multiplies it. Checkpoints save it.
func (e *Engine) SetLearningRate(target LRTarget, lr float32) error {
	err := e.h.setLearningRate(target, lr)
	runtime.KeepAlive(e)
	return err
}

// Step returns the number of training steps taken (restored by Load).
func (e *Engine) Step() (int64, error) {
	n, err := e.h.step()
	runtime.KeepAlive(e)
	return n, err
}

// Config returns the engine's config in protobuf text format.
func (e *Engine) Config() (string, error) {
	s, err := e.h.config()
	runtime.KeepAlive(e)
	return s, err
}

// Save writes parameters, optimizer state, step and learning rates to path atomically,
// with a checksum.
func (e *Engine) Save(path string) error {
	err := e.h.save(path)
	runtime.KeepAlive(e)
	return err
}

// Export writes a compact read-only model for serving to path atomically: the config,
// step, dense parameters, every table's rows (quantized as quantize says) and each
// DYNAMIC table's ids, without optimizer state. NewEngineFromCheckpoint and
// OpenPredictor load it. An engine loaded from an ExportINT8 or ExportINT4 file predicts
// and evaluates from the codes directly but refuses TrainStep, SubmitTrainStep, Save,
// Load and WriteParameter of a table with an error matching ErrFailedPrecondition that
// names the table. Another quantize value is an error matching ErrInvalidArgument. It
// runs concurrently with Predict (reader lock).
func (e *Engine) Export(path string, quantize ExportPrecision) error {
	err := e.h.export(path, quantize)
	runtime.KeepAlive(e)
	return err
}

// Load restores a checkpoint written by an engine with the same model and optimizer
// kinds. On failure (e.g. DataLoss for a corrupted file) the engine is unchanged.
func (e *Engine) Load(path string) error {
	err := e.h.load(path)
	runtime.KeepAlive(e)
	return err
}

// ParameterNames returns the names of the model's parameters, e.g.
// "bottom_mlp.0.weight", "top_mlp.1.bias", "embedding.<table>.weight".
func (e *Engine) ParameterNames() ([]string, error) {
	names, err := e.h.parameterNames()
	runtime.KeepAlive(e)
	return names, err
}

// ParameterShape returns the named parameter's shape, e.g. [out, in] for a weight.
func (e *Engine) ParameterShape(name string) ([]int64, error) {
	shape, err := e.h.parameterShape(name)
	runtime.KeepAlive(e)
	return shape, err
}

// ReadParameter returns a copy of the named parameter's values, row-major.
func (e *Engine) ReadParameter(name string) ([]float32, error) {
	values, err := e.h.readParameter(name)
	runtime.KeepAlive(e)
	return values, err
}

// WriteParameter replaces the named parameter's values (row-major). len(values) must be
// its size and every value finite, else nothing changes. Optimizer state is kept.
func (e *Engine) WriteParameter(name string, values []float32) error {
	err := e.h.writeParameter(name, values)
	runtime.KeepAlive(e)
	return err
}

// TableStats says how an embedding table is used. A DYNAMIC table gives rows to the raw
// int64 ids it admits and evicts ids when full; a FIXED table reports its rows as Capacity
// and Size and counts nothing. The counters run from the engine's creation and are saved
// in checkpoints.
type TableStats struct {
	Dynamic     bool  // true for a DYNAMIC table, false for a FIXED one
	Capacity    int64 // rows ids may hold (a DYNAMIC table's rows less its default row)
	Size        int64 // rows held by ids now
	Lookups     int64 // id occurrences trained on
	Hits        int64 // of those, occurrences of ids that held a row
	Admitted    int64 // ids given a row
	Evicted     int64 // ids that lost their row (to make room, or past their TTL)
	Rejected    int64 // new ids that qualified for a row at a step and found none
	MemoryBytes int64 // weights, sparse optimizer state and the id index
}

// HitRate returns Hits / Lookups, or 0 before any lookup.
func (s TableStats) HitRate() float64 {
	if s.Lookups == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Lookups)
}

// TableStats returns the statistics of the embedding table named table (a model.tables
// name); an unknown name is an error matching ErrNotFound that names it. It may run
// concurrently with Predict.
func (e *Engine) TableStats(table string) (TableStats, error) {
	s, err := e.h.tableStats(table)
	runtime.KeepAlive(e)
	return s, err
}
