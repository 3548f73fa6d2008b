package dlrm_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"libdlrm.dev/dlrm"
)

func TestCreateErrors(t *testing.T) {
	_, err := dlrm.NewEngine("model { bogus_field: 1 }")
	wantError(t, err, dlrm.ErrInvalidArgument, "bogus_field")
	_, err = dlrm.NewEngine("model { num_dense_features: 0 }")
	wantError(t, err, dlrm.ErrInvalidArgument, "model.num_dense_features")
	_, err = dlrm.NewEngine("this is { not protobuf")
	wantError(t, err, dlrm.ErrInvalidArgument)
	_, err = dlrm.NewEngine(testConfig + "\x00seed: 8")
	wantError(t, err, dlrm.ErrInvalidArgument, "NUL")
	_, err = dlrm.NewEngineFromFile("/nonexistent/dir/cfg.txt")
	wantError(t, err, dlrm.ErrIO, "/nonexistent/dir/cfg.txt")
	_, err = dlrm.NewEngineFromCheckpoint("/nonexistent/model.ckpt")
	wantError(t, err, dlrm.ErrIO, "/nonexistent/model.ckpt")
}

func TestNewEngineFromFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.pbtxt")
	if err := os.WriteFile(path, []byte(testConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := dlrm.NewEngineFromFile(path)
	if err != nil {
		t.Fatalf("NewEngineFromFile: %v", err)
	}
	defer e.Close()
	// Same config and seed: the same initial model as NewEngine's.
	if got, want := predict(t, e, makeBatch(1)), predict(t, newTestEngine(t), makeBatch(1)); !sameBits(got, want) {
		t.Errorf("predictions %v differ from NewEngine's %v", got, want)
	}
}

func TestTrainPredictEvaluate(t *testing.T) {
	e := newTestEngine(t)
	ref := makeBatch(1)
	before := predict(t, e, ref)

	first, err := e.TrainStep(makeBatch(0))
	if err != nil {
		t.Fatal(err)
	}
	last := train(t, e, 29)
	if !(first > 0) || math.IsInf(float64(first), 0) || !(last < first) {
		t.Errorf("loss went from %v to %v; want finite, positive, decreasing", first, last)
	}
	if n, err := e.Step(); err != nil || n != 30 {
		t.Errorf("Step() = %d, %v; want 30", n, err)
	}
	after := predict(t, e, ref)
	if sameBits(before, after) {
		t.Error("training did not change the predictions")
	}
	for i, p := range after {
		if !(p >= 0 && p <= 1) {
			t.Errorf("probability %d = %v outside [0, 1]", i, p)
		}
	}

	// PredictInto with a longer buffer writes the first BatchSize values only.
	out := make([]float32, testB+2)
	out[testB] = 42
	if err := e.PredictInto(ref, out); err != nil {
		t.Fatal(err)
	}
	if !sameBits(out[:testB], after) || out[testB] != 42 {
		t.Errorf("PredictInto wrote %v", out)
	}

	r, err := e.Evaluate([]*dlrm.Batch{ref, makeBatch(2)})
	if err != nil {
		t.Fatal(err)
	}
	if r.NumSamples != 2*testB || !(r.AUC >= 0 && r.AUC <= 1) || !(r.LogLoss > 0) {
		t.Errorf("Evaluate = %+v", r)
	}
	// The copying (several batches) and zero-copy (one batch) paths agree.
	one, err := e.Evaluate([]*dlrm.Batch{ref})
	if err != nil {
		t.Fatal(err)
	}
	same, err := e.Evaluate([]*dlrm.Batch{ref, ref})
	if err != nil {
		t.Fatal(err)
	}
	if one.NumSamples != testB || same.NumSamples != 2*testB ||
		math.Abs(one.LogLoss-same.LogLoss) > 1e-6 || math.Abs(one.AUC-same.AUC) > 1e-9 {
		t.Errorf("Evaluate([ref]) = %+v but Evaluate([ref, ref]) = %+v", one, same)
	}

	if err := e.SetLearningRate(dlrm.LRAll, 0.01); err != nil {
		t.Error(err)
	}
	if cfg, err := e.Config(); err != nil || !strings.Contains(cfg, "num_dense_features: 3") {
		t.Errorf("Config() = %q, %v", cfg, err)
	}
}

func TestWeights(t *testing.T) {
	e := newTestEngine(t)
	b := makeBatch(1)
	plain := predict(t, e, b)
	b.Weights = make([]float32, len(b.IDs))
	for i := range b.Weights {
		b.Weights[i] = 1
	}
	if got := predict(t, e, b); !sameBits(got, plain) {
		t.Errorf("unit weights give %v, no weights %v", got, plain)
	}
	for i := range b.Weights {
		b.Weights[i] = 3
	}
	if got := predict(t, e, b); sameBits(got, plain) {
		t.Error("weights of 3 did not change the predictions")
	}
}

// TestBadInputs checks that each bad input fails with the natural code and a message
// naming the problem, and that none of them changes the engine.
func TestBadInputs(t *testing.T) {
	e := newTestEngine(t)
	train(t, e, 3)
	ref := makeBatch(1)
	before := predict(t, e, ref)

	cases := []struct {
		name    string
		mutate  func(b *dlrm.Batch)
		predict bool // call Predict instead of TrainStep
		want    *dlrm.Error
		needles []string
	}{
		{"short dense", func(b *dlrm.Batch) { b.Dense = b.Dense[1:] }, false,
			dlrm.ErrInvalidArgument, []string{"batch.Dense", "23"}},
		{"short labels", func(b *dlrm.Batch) { b.Labels = b.Labels[:3] }, false,
			dlrm.ErrInvalidArgument, []string{"batch.Labels"}},
		{"short lengths", func(b *dlrm.Batch) { b.Lengths = b.Lengths[:5] }, true,
			dlrm.ErrInvalidArgument, []string{"batch.Lengths"}},
		{"short weights", func(b *dlrm.Batch) { b.Weights = []float32{1} }, true,
			dlrm.ErrInvalidArgument, []string{"batch.Weights"}},
		{"negative batch size", func(b *dlrm.Batch) { b.BatchSize = -1 }, true,
			dlrm.ErrInvalidArgument, []string{"BatchSize"}},
		{"zero batch size", func(b *dlrm.Batch) {
			b.BatchSize, b.Dense, b.Labels, b.Lengths, b.IDs = 0, nil, nil, nil, nil
		}, false, dlrm.ErrInvalidArgument, []string{"batch.batch_size"}},
		{"wrong num_dense", func(b *dlrm.Batch) {
			b.NumDense = 4
			b.Dense = make([]float32, 4*testB)
		}, false, dlrm.ErrInvalidArgument, []string{"num_dense"}},
		{"extra id", func(b *dlrm.Batch) { b.IDs = append(b.IDs, 1) }, false,
			dlrm.ErrInvalidArgument, []string{"num_ids"}},
		{"negative length", func(b *dlrm.Batch) { b.Lengths[5] = -1 }, false,
			dlrm.ErrInvalidArgument, []string{"negative"}},
		{"id past table", func(b *dlrm.Batch) { b.IDs[0] = 50 }, false,
			dlrm.ErrOutOfRange, []string{"batch.ids[0]"}},
		{"negative id", func(b *dlrm.Batch) { b.IDs[0] = -3 }, true,
			dlrm.ErrOutOfRange, []string{"batch.ids[0]", "-3"}},
		{"NaN dense", func(b *dlrm.Batch) { b.Dense[4] = float32(math.NaN()) }, false,
			dlrm.ErrInvalidArgument, []string{"batch.dense[1][1]"}},
		{"Inf dense", func(b *dlrm.Batch) { b.Dense[0] = float32(math.Inf(1)) }, true,
			dlrm.ErrInvalidArgument, []string{"batch.dense[0]"}},
		{"NaN label", func(b *dlrm.Batch) { b.Labels[2] = float32(math.NaN()) }, false,
			dlrm.ErrInvalidArgument, []string{"batch.labels[2]"}},
		{"label 2", func(b *dlrm.Batch) { b.Labels[2] = 2 }, false,
			dlrm.ErrInvalidArgument, []string{"batch.labels[2]"}},
		{"no labels", func(b *dlrm.Batch) { b.Labels = nil }, false,
			dlrm.ErrInvalidArgument, []string{"labels"}},
		{"NaN weight", func(b *dlrm.Batch) {
			b.Weights = make([]float32, len(b.IDs))
			b.Weights[1] = float32(math.NaN())
		}, true, dlrm.ErrInvalidArgument, []string{"batch.weights[1]"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := makeBatch(3)
			c.mutate(b)
			var err error
			if c.predict {
				_, err = e.Predict(b)
			} else {
				_, err = e.TrainStep(b)
			}
			wantError(t, err, c.want, c.needles...)
		})
	}

	t.Run("nil batch", func(t *testing.T) {
		_, err := e.TrainStep(nil)
		wantError(t, err, dlrm.ErrInvalidArgument, "batch is nil")
		_, err = e.Predict(nil)
		wantError(t, err, dlrm.ErrInvalidArgument, "batch is nil")
	})
	t.Run("short out", func(t *testing.T) {
		err := e.PredictInto(ref, make([]float32, testB-1))
		wantError(t, err, dlrm.ErrInvalidArgument, "out")
	})
	t.Run("evaluate", func(t *testing.T) {
		_, err := e.Evaluate(nil)
		wantError(t, err, dlrm.ErrInvalidArgument, "at least one batch")
		noLabels := makeBatch(2)
		noLabels.Labels = nil
		_, err = e.Evaluate([]*dlrm.Batch{ref, noLabels})
		wantError(t, err, dlrm.ErrInvalidArgument, "labels")
		short := makeBatch(2)
		short.Dense = short.Dense[:2]
		_, err = e.Evaluate([]*dlrm.Batch{ref, short})
		wantError(t, err, dlrm.ErrInvalidArgument, "batches[1].Dense")
		bad := makeBatch(2)
		bad.IDs[0] = 1000
		_, err = e.Evaluate([]*dlrm.Batch{ref, bad})
		wantError(t, err, dlrm.ErrOutOfRange, "batch.ids[0]")
	})
	t.Run("learning rate", func(t *testing.T) {
		wantError(t, e.SetLearningRate(dlrm.LRDense, -1), dlrm.ErrInvalidArgument, "learning rate")
		wantError(t, e.SetLearningRate(dlrm.LRDense, float32(math.NaN())), dlrm.ErrInvalidArgument,
			"learning rate")
		wantError(t, e.SetLearningRate(9, 0.1), dlrm.ErrInvalidArgument, "target")
	})
	t.Run("paths", func(t *testing.T) {
		wantError(t, e.Save("/nonexistent/dir/engine.ckpt"), dlrm.ErrIO, "/nonexistent/dir")
		wantError(t, e.Load("/nonexistent/engine.ckpt"), dlrm.ErrIO, "/nonexistent/engine.ckpt")
		wantError(t, e.Save("a\x00b"), dlrm.ErrInvalidArgument, "NUL")
	})

	if after := predict(t, e, ref); !sameBits(before, after) {
		t.Errorf("failed calls changed the predictions: %v -> %v", before, after)
	}
	if n, err := e.Step(); err != nil || n != 3 {
		t.Errorf("Step() = %d, %v; want 3", n, err)
	}
}

func TestCheckpoints(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "engine.ckpt")
	e := newTestEngine(t)
	train(t, e, 10)
	ref := makeBatch(1)
	if err := e.Save(path); err != nil {
		t.Fatal(err)
	}
	before := predict(t, e, ref)

	// A fresh engine from the checkpoint predicts and trains bitwise the same.
	other, err := dlrm.NewEngineFromCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if got := predict(t, other, ref); !sameBits(got, before) {
		t.Errorf("restored engine predicts %v, want %v", got, before)
	}
	if n, err := other.Step(); err != nil || n != 10 {
		t.Errorf("restored Step() = %d, %v; want 10", n, err)
	}
	la, err := e.TrainStep(makeBatch(2))
	if err != nil {
		t.Fatal(err)
	}
	lb, err := other.TrainStep(makeBatch(2))
	if err != nil {
		t.Fatal(err)
	}
	if math.Float32bits(la) != math.Float32bits(lb) {
		t.Errorf("losses differ after restore: %v vs %v", la, lb)
	}
	if a, b := predict(t, e, ref), predict(t, other, ref); !sameBits(a, b) {
		t.Errorf("predictions differ after a step: %v vs %v", a, b)
	}

	// Load rolls back the step.
	if err := e.Load(path); err != nil {
		t.Fatal(err)
	}
	if got := predict(t, e, ref); !sameBits(got, before) {
		t.Errorf("after Load: %v, want %v", got, before)
	}

	// Truncated and corrupted checkpoints are refused and change nothing.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "truncated.ckpt")
	if err := os.WriteFile(truncated, data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	wantError(t, e.Load(truncated), dlrm.ErrDataLoss, "truncated.ckpt")
	data[len(data)/2] ^= 0x5a
	corrupted := filepath.Join(dir, "corrupted.ckpt")
	if err := os.WriteFile(corrupted, data, 0o644); err != nil {
		t.Fatal(err)
	}
	wantError(t, e.Load(corrupted), dlrm.ErrDataLoss, "corrupted.ckpt")
	_, err = dlrm.NewEngineFromCheckpoint(corrupted)
	wantError(t, err, dlrm.ErrDataLoss, "checksum")
	if got := predict(t, e, ref); !sameBits(got, before) {
		t.Errorf("failed loads changed the predictions: %v, want %v", got, before)
	}
}

// TestCheckpointOnDevice restores a checkpoint on a named device: "cpu" gives the same
// state, bitwise, and an unknown name is refused naming it.
func TestCheckpointOnDevice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "engine.ckpt")
	e := newTestEngine(t)
	train(t, e, 10)
	if err := e.Save(path); err != nil {
		t.Fatal(err)
	}
	ref := makeBatch(1)
	want := predict(t, e, ref)
	for _, device := range []string{"cpu", ""} {
		other, err := dlrm.NewEngineFromCheckpointOn(path, device)
		if err != nil {
			t.Fatalf("device %q: %v", device, err)
		}
		if got := predict(t, other, ref); !sameBits(got, want) {
			t.Errorf("device %q: restored engine predicts %v, want %v", device, got, want)
		}
		if n, err := other.Step(); err != nil || n != 10 {
			t.Errorf("device %q: restored Step() = %d, %v; want 10", device, n, err)
		}
		other.Close()
	}

	_, err := dlrm.NewEngineFromCheckpointOn(path, "gpu")
	wantError(t, err, dlrm.ErrInvalidArgument, "'gpu'")
	_, err = dlrm.NewEngineFromCheckpointOn(path, "cpu\x00")
	wantError(t, err, dlrm.ErrInvalidArgument, "device", "NUL")
}

func TestParameters(t *testing.T) {
	e := newTestEngine(t)
	names, err := e.ParameterNames()
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 10 || names[0] != "bottom_mlp.0.weight" || names[9] != "embedding.t1.weight" {
		t.Fatalf("ParameterNames() = %q", names)
	}
	for _, c := range []struct {
		name  string
		shape []int64
	}{
		{"bottom_mlp.0.weight", []int64{8, testND}},
		{"bottom_mlp.0.bias", []int64{8}},
		{"embedding.t0.weight", []int64{50, 4}},
	} {
		shape, err := e.ParameterShape(c.name)
		if err != nil || len(shape) != len(c.shape) {
			t.Errorf("ParameterShape(%q) = %v, %v; want %v", c.name, shape, err, c.shape)
			continue
		}
		for i := range shape {
			if shape[i] != c.shape[i] {
				t.Errorf("ParameterShape(%q) = %v, want %v", c.name, shape, c.shape)
			}
		}
	}
	_, err = e.ParameterShape("nope")
	wantError(t, err, dlrm.ErrNotFound, "nope")
	_, err = e.ReadParameter("nope")
	wantError(t, err, dlrm.ErrNotFound, "nope")

	// Every parameter reads back bitwise what was written, odd values included.
	ref := makeBatch(1)
	before := predict(t, e, ref)
	special := []float32{float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32,
		math.MaxFloat32, -math.MaxFloat32, 1e-38}
	for _, name := range names {
		values, err := e.ReadParameter(name)
		if err != nil {
			t.Fatalf("ReadParameter(%q): %v", name, err)
		}
		for i := range values {
			values[i] = float32(i)*0.001 - 0.05
		}
		copy(values, special)
		if err := e.WriteParameter(name, values); err != nil {
			t.Fatalf("WriteParameter(%q): %v", name, err)
		}
		back, err := e.ReadParameter(name)
		if err != nil {
			t.Fatal(err)
		}
		if !sameBits(back, values) {
			t.Errorf("%s: wrote %v, read back %v", name, values, back)
		}
	}
	after := predict(t, e, ref)
	if sameBits(before, after) {
		t.Error("writing parameters did not change the predictions")
	}

	// Bad writes change nothing.
	values, err := e.ReadParameter("embedding.t0.weight")
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, e.WriteParameter("embedding.t0.weight", values[:199]), dlrm.ErrInvalidArgument,
		"199 were given")
	wantError(t, e.WriteParameter("embedding.t0.weight", nil), dlrm.ErrInvalidArgument, "0 were given")
	values[17] = float32(math.NaN())
	wantError(t, e.WriteParameter("embedding.t0.weight", values), dlrm.ErrInvalidArgument, "values[17]")
	wantError(t, e.WriteParameter("no.such", []float32{1}), dlrm.ErrNotFound, "no.such")
	if got := predict(t, e, ref); !sameBits(got, after) {
		t.Errorf("failed writes changed the predictions")
	}
}

func TestEngineClose(t *testing.T) {
	e, err := dlrm.NewEngine(testConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	b := makeBatch(1)
	_, err = e.Predict(b)
	wantError(t, err, dlrm.ErrClosed, "closed")
	_, err = e.TrainStep(b)
	wantError(t, err, dlrm.ErrClosed)
	wantError(t, e.PredictInto(b, make([]float32, testB)), dlrm.ErrClosed)
	_, err = e.Evaluate([]*dlrm.Batch{b})
	wantError(t, err, dlrm.ErrClosed)
	wantError(t, e.SetLearningRate(dlrm.LRAll, 0.1), dlrm.ErrClosed)
	_, err = e.Step()
	wantError(t, err, dlrm.ErrFailedPrecondition)
	_, err = e.Config()
	wantError(t, err, dlrm.ErrClosed)
	wantError(t, e.Save(filepath.Join(t.TempDir(), "x.ckpt")), dlrm.ErrClosed)
	wantError(t, e.Load("/nonexistent"), dlrm.ErrClosed)
	_, err = e.ParameterNames()
	wantError(t, err, dlrm.ErrClosed)
	_, err = e.ParameterShape("bottom_mlp.0.bias")
	wantError(t, err, dlrm.ErrClosed)
	_, err = e.ReadParameter("bottom_mlp.0.bias")
	wantError(t, err, dlrm.ErrClosed)
	wantError(t, e.WriteParameter("bottom_mlp.0.bias", make([]float32, 8)), dlrm.ErrClosed)
}

// TestCloseDuringCalls closes an engine while goroutines train and predict on it: each
// call either succeeds or reports ErrClosed, and nothing touches freed memory.
func TestCloseDuringCalls(t *testing.T) {
	e, err := dlrm.NewEngine(testConfig)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	done := make(chan error, 8)
	for g := 0; g < 8; g++ {
		go func(g int) {
			b := makeBatch(g % 3)
			for i := 0; ; i++ {
				if i == 5 && g == 0 {
					close(started)
				}
				var err error
				if g%2 == 0 {
					_, err = e.Predict(b)
				} else {
					_, err = e.TrainStep(b)
				}
				if err != nil {
					done <- err
					return
				}
			}
		}(g)
	}
	<-started
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for g := 0; g < 8; g++ {
		wantError(t, <-done, dlrm.ErrClosed)
	}
}
