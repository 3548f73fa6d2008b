package dlrm

import "math"

// Batch is one batch of samples in libdlrm's column-oriented layout (TorchRec's
// KeyedJaggedTensor). The engine borrows the slices for the duration of a call only.
//
// The binding checks that the slice lengths agree with the sizes; the engine checks the
// values (sizes against the model, negative lengths, ids outside their table, NaN/Inf).
type Batch struct {
	// BatchSize is the number of samples B.
	BatchSize int
	// Dense holds the dense features, B x NumDense, row-major.
	Dense    []float32
	NumDense int
	// Labels holds one click label in [0, 1] per sample; nil for Predict.
	Labels []float32
	// Lengths holds the bag sizes, NumSparse x B, feature-major: the B bags of feature
	// 0, then those of feature 1, and so on.
	Lengths   []int32
	NumSparse int
	// IDs holds the ids of all bags in the order of Lengths; len(IDs) = sum(Lengths).
	IDs []int64
	// Weights is nil (every id weighs 1) or holds one weight per id.
	Weights []float32
}

// validate checks the slice lengths; name is how the batch is called in messages.
func (b *Batch) validate(name string) error {
	if b == nil {
		return invalidf("%s is nil", name)
	}
	if b.BatchSize < 0 {
		return invalidf("%s.BatchSize must be >= 0, got %d", name, b.BatchSize)
	}
	if b.NumDense < 0 || b.NumDense > math.MaxInt32 {
		return invalidf("%s.NumDense is %d, outside [0, %d]", name, b.NumDense, math.MaxInt32)
	}
	if b.NumSparse < 0 || b.NumSparse > math.MaxInt32 {
		return invalidf("%s.NumSparse is %d, outside [0, %d]", name, b.NumSparse, math.MaxInt32)
	}
	if want, ok := mulInt(b.BatchSize, b.NumDense); !ok || len(b.Dense) != want {
		return invalidf("%s.Dense has length %d but BatchSize*NumDense = %d*%d",
			name, len(b.Dense), b.BatchSize, b.NumDense)
	}
	if b.Labels != nil && len(b.Labels) != b.BatchSize {
		return invalidf("%s.Labels has length %d but BatchSize = %d (use nil for no labels)",
			name, len(b.Labels), b.BatchSize)
	}
	if want, ok := mulInt(b.BatchSize, b.NumSparse); !ok || len(b.Lengths) != want {
		return invalidf("%s.Lengths has length %d but NumSparse*BatchSize = %d*%d",
			name, len(b.Lengths), b.NumSparse, b.BatchSize)
	}
	if b.Weights != nil && len(b.Weights) != len(b.IDs) {
		return invalidf("%s.Weights has length %d but IDs has length %d (use nil for unit weights)",
			name, len(b.Weights), len(b.IDs))
	}
	return nil
}

// mulInt returns a*b for non-negative a, b and whether it did not overflow.
func mulInt(a, b int) (int, bool) {
	if a != 0 && b > math.MaxInt/a {
		return 0, false
	}
	return a * b, true
}

// EvalResult is the outcome of Engine.Evaluate.
type EvalResult struct {
	LogLoss    float64 // mean binary cross-entropy
	AUC        float64 // ROC AUC; NaN when the labels hold one class only
	NumSamples int64
}

// LRTarget selects the optimizer(s) whose learning rate SetLearningRate overrides.
type LRTarget int32

// Learning-rate targets; the values are those of the C ABI.
const (
	LRDense  LRTarget = 1 // the dense (MLP) optimizer
	LRSparse LRTarget = 2 // the sparse (embedding) optimizer
	LRAll    LRTarget = 3 // both
)

// ExportPrecision is what Engine.Export writes: a table precision, OR'ed with at most one
// dense precision (ExportINT8 | ExportDenseFP16).
type ExportPrecision int32

// Export precisions; the values are those of the C ABI.
const (
	ExportFP32 ExportPrecision = 0 // every table as it is
	ExportINT8 ExportPrecision = 1 // FP32 tables row-wise INT8: a byte per value, fp16 scale, bias
	ExportINT4 ExportPrecision = 2 // FP32 tables row-wise INT4: half a byte per value
	// The dense parameters (MLPs, cross network) rounded to nearest bf16 / fp16: half their
	// bytes; the loading engine predicts with those values. Without either they stay fp32.
	ExportDenseBF16 ExportPrecision = 0x100
	ExportDenseFP16 ExportPrecision = 0x200
)
