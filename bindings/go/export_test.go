package dlrm_test

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"libdlrm.dev/dlrm"
)

// exportedModels trains the test engine a little and exports it into a temporary
// directory as FP32 and as INT8; it returns the engine and the two paths.
func exportedModels(t testing.TB) (e *dlrm.Engine, fp32Path, int8Path string) {
	t.Helper()
	e = newTestEngine(t)
	train(t, e, 10)
	dir := t.TempDir()
	fp32Path = filepath.Join(dir, "model.serving")
	int8Path = filepath.Join(dir, "model.int8.serving")
	if err := e.Export(fp32Path, dlrm.ExportFP32); err != nil {
		t.Fatalf("Export FP32: %v", err)
	}
	if err := e.Export(int8Path, dlrm.ExportINT8); err != nil {
		t.Fatalf("Export INT8: %v", err)
	}
	return e, fp32Path, int8Path
}

// loadExport creates an engine from an exported file, closed when the test ends.
func loadExport(t testing.TB, path string) *dlrm.Engine {
	t.Helper()
	e, err := dlrm.NewEngineFromCheckpoint(path)
	if err != nil {
		t.Fatalf("NewEngineFromCheckpoint(%s): %v", path, err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// unlabeled is makeBatch(salt) without labels, as a serving request.
func unlabeled(salt int) *dlrm.Batch {
	b := makeBatch(salt)
	b.Labels = nil
	return b
}

func TestExportFP32PredictsBitwiseAsTheEngine(t *testing.T) {
	e, fp32Path, _ := exportedModels(t)
	served := loadExport(t, fp32Path)
	for salt := 0; salt < 5; salt++ {
		b := unlabeled(salt)
		if got, want := predict(t, served, b), predict(t, e, b); !sameBits(got, want) {
			t.Errorf("salt %d: FP32 export predicts %v, engine %v", salt, got, want)
		}
	}
	if n, err := served.Step(); err != nil || n != 10 {
		t.Errorf("FP32 export Step() = %d, %v; want 10", n, err)
	}
}

func TestExportWith16BitDenseParametersPredictsCloseFromASmallerFile(t *testing.T) {
	e, fp32Path, _ := exportedModels(t)
	dense16 := filepath.Join(filepath.Dir(fp32Path), "model.dense16.serving")
	if err := e.Export(dense16, dlrm.ExportINT8|dlrm.ExportDenseFP16); err != nil {
		t.Fatalf("Export INT8 | DenseFP16: %v", err)
	}
	small, err1 := os.Stat(dense16)
	full, err2 := os.Stat(fp32Path)
	if err1 != nil || err2 != nil || small.Size() >= full.Size() {
		t.Fatalf("dense16 file %v (%v) not smaller than FP32's %v (%v)", small, err1, full, err2)
	}
	p := openPredictor(t, dense16)
	for salt := 0; salt < 3; salt++ {
		b := unlabeled(salt)
		want, got := predict(t, e, b), predict(t, p, b)
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); !(d < 0.005) {
				t.Errorf("salt %d, sample %d: predicts %v, engine %v", salt, i, got[i], want[i])
			}
		}
	}
	err := e.Export(dense16, dlrm.ExportDenseBF16|dlrm.ExportDenseFP16)
	wantError(t, err, dlrm.ErrInvalidArgument, "DLRM_EXPORT_DENSE_FP16 (0x200), got 768")
}

func TestExportINT8PredictsWithinToleranceInEngineAndPredictor(t *testing.T) {
	e, _, int8Path := exportedModels(t)
	served := loadExport(t, int8Path)
	p := openPredictor(t, int8Path)
	allEqual := true
	for salt := 0; salt < 5; salt++ {
		b := unlabeled(salt)
		want := predict(t, e, b)
		got := predict(t, served, b)
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); !(d < 0.005) {
				t.Errorf("salt %d, sample %d: INT8 export predicts %v, engine %v (|d| %g)",
					salt, i, got[i], want[i], d)
			}
		}
		allEqual = allEqual && sameBits(got, want)
		if fromPredictor := predict(t, p, b); !sameBits(fromPredictor, got) {
			t.Errorf("salt %d: INT8 Predictor %v, INT8 engine %v", salt, fromPredictor, got)
		}
	}
	if allEqual {
		t.Error("INT8 export predicts bitwise as the FP32 engine: the tables were not quantized")
	}
	if n, err := p.Step(); err != nil || n != 10 {
		t.Errorf("INT8 Predictor Step() = %d, %v; want 10", n, err)
	}
}

func TestExportINT8EngineRefusesTrainingSaveLoadAndTableWrites(t *testing.T) {
	_, fp32Path, int8Path := exportedModels(t)
	served := loadExport(t, int8Path)
	ref := unlabeled(1)
	before := predict(t, served, ref)

	_, err := served.TrainStep(makeBatch(2))
	wantError(t, err, dlrm.ErrFailedPrecondition, "has precision INT8")
	_, err = served.SubmitTrainStep(makeBatch(2))
	wantError(t, err, dlrm.ErrFailedPrecondition, "has precision INT8")
	saved := filepath.Join(t.TempDir(), "int8.ckpt")
	wantError(t, served.Save(saved), dlrm.ErrFailedPrecondition, "has precision INT8")
	if _, err := os.Stat(saved); !os.IsNotExist(err) {
		t.Errorf("a refused Save left %s: %v", saved, err)
	}
	wantError(t, served.Load(fp32Path), dlrm.ErrFailedPrecondition, "has precision INT8")
	rows, err := served.ReadParameter("embedding.t0.weight")
	if err != nil {
		t.Fatalf("ReadParameter of an INT8 table: %v", err)
	}
	wantError(t, served.WriteParameter("embedding.t0.weight", rows),
		dlrm.ErrFailedPrecondition, "embedding.t0.weight", "precision INT8")

	if got := predict(t, served, ref); !sameBits(got, before) {
		t.Errorf("refused calls changed the INT8 predictions: %v, want %v", got, before)
	}
	if n, err := served.Step(); err != nil || n != 10 {
		t.Errorf("INT8 Step() = %d, %v after refused calls; want 10", n, err)
	}
}

func TestExportRejectsAnUnknownPrecision(t *testing.T) {
	e := newTestEngine(t)
	path := filepath.Join(t.TempDir(), "model.serving")
	for _, q := range []dlrm.ExportPrecision{7, -1} {
		wantError(t, e.Export(path, q), dlrm.ErrInvalidArgument, "quantize")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a refused Export left %s: %v", path, err)
	}
	wantError(t, e.Export("model\x00.serving", dlrm.ExportFP32), dlrm.ErrInvalidArgument,
		"path", "NUL")
}

func TestExportINT8FileIsSmallerThanFP32(t *testing.T) {
	_, fp32Path, int8Path := exportedModels(t)
	fp32, err := os.Stat(fp32Path)
	if err != nil {
		t.Fatal(err)
	}
	int8, err := os.Stat(int8Path)
	if err != nil {
		t.Fatal(err)
	}
	if int8.Size() >= fp32.Size() {
		t.Errorf("INT8 export is %d bytes, FP32 %d: want it smaller", int8.Size(), fp32.Size())
	}
}
