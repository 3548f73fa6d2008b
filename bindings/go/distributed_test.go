package dlrm_test

// A job of a coordinator, 1 embedding server and 2 trainers as goroutines of this process
// over loopback TCP. Sync training equals the single-process Engine on the same global
// batches, bitwise, with the built-in collective and with a Go all-gather; bad settings
// are refused by name; a failing Go all-gather fails the step with its error.

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"libdlrm.dev/dlrm"
)

// jobConfig puts the tables on the server (none is replicated on the trainers).
var jobConfig = testConfig + "\nsharding { data_parallel_max_bytes: 0 }\n"

const (
	jobTrainers = 2
	jobSteps    = 4
	jobGlobal   = testB // samples per global batch
	jobWorld    = 1 + jobTrainers
)

// part returns trainer r's samples of a global batch of jobGlobal.
func part(b *dlrm.Batch, r int) *dlrm.Batch {
	lo, hi := r*jobGlobal/jobTrainers, (r+1)*jobGlobal/jobTrainers
	p := &dlrm.Batch{BatchSize: hi - lo, NumDense: b.NumDense, NumSparse: b.NumSparse,
		Dense:  append([]float32(nil), b.Dense[lo*b.NumDense:hi*b.NumDense]...),
		Labels: append([]float32(nil), b.Labels[lo:hi]...)}
	offset := 0 // of the current bag's first id in b.IDs
	for f := 0; f < b.NumSparse; f++ {
		for s := 0; s < b.BatchSize; s++ {
			n := int(b.Lengths[f*b.BatchSize+s])
			if s >= lo && s < hi {
				p.Lengths = append(p.Lengths, int32(n))
				p.IDs = append(p.IDs, b.IDs[offset:offset+n]...)
				if b.Weights != nil {
					p.Weights = append(p.Weights, b.Weights[offset:offset+n]...)
				}
			}
			offset += n
		}
	}
	return p
}

// jobCluster returns a process's settings; rank < 0 leaves DLRM_RANK out.
func jobCluster(role string, rank, port, timeoutMS int) map[string]string {
	c := map[string]string{
		"DLRM_ROLE":        role,
		"DLRM_WORLD_SIZE":  strconv.Itoa(jobWorld),
		"DLRM_COORDINATOR": fmt.Sprintf("127.0.0.1:%d", port),
		"DLRM_TIMEOUT_MS":  strconv.Itoa(timeoutMS),
	}
	if rank >= 0 {
		c["DLRM_RANK"] = strconv.Itoa(rank)
	}
	return c
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startRoles runs the coordinator and the server (rank 0) in goroutines. The returned
// function waits for both to return, at most limit, and gives their errors.
func startRoles(t *testing.T, port, timeoutMS int) func(limit time.Duration) []error {
	t.Helper()
	errs := make(chan error, 2)
	run := func(role string, rank int) {
		err := dlrm.RunRole(jobConfig, jobCluster(role, rank, port, timeoutMS), "")
		if err != nil {
			err = fmt.Errorf("%s: %w", role, err)
		}
		errs <- err
	}
	go run("coordinator", -1)
	time.Sleep(200 * time.Millisecond) // the coordinator binds its port before the server binds one
	go run("server", 0)
	return func(limit time.Duration) []error {
		var out []error
		deadline := time.After(limit)
		for i := 0; i < 2; i++ {
			select {
			case err := <-errs:
				if err != nil {
					out = append(out, err)
				}
			case <-deadline:
				t.Fatalf("the coordinator or the server still runs after %v", limit)
			}
		}
		return out
	}
}

// chanGather is a Go all-gather between the trainers' goroutines: a channel per ordered
// pair of ranks (a stand-in for MPI).
type chanGather struct {
	ch [jobTrainers][jobTrainers]chan []byte // [from][to]
}

func newChanGather() *chanGather {
	g := &chanGather{}
	for from := range g.ch {
		for to := range g.ch[from] {
			g.ch[from][to] = make(chan []byte, 4)
		}
	}
	return g
}

// member is trainer r's AllGather. fail, if not nil, may replace call n's (from 1) result.
func (g *chanGather) member(r int, fail func(n int64) error) dlrm.AllGather {
	var calls int64 // atomic: successive calls may come from different threads
	return func(mine []byte) ([][]byte, error) {
		if fail != nil {
			if err := fail(atomic.AddInt64(&calls, 1)); err != nil {
				return nil, err
			}
		}
		for to := range g.ch[r] {
			if to != r {
				g.ch[r][to] <- mine
			}
		}
		all := make([][]byte, jobTrainers)
		all[r] = mine
		for from := range g.ch {
			if from == r {
				continue
			}
			select {
			case all[from] = <-g.ch[from][r]:
			case <-time.After(20 * time.Second):
				return nil, fmt.Errorf("trainer %d: no bytes from trainer %d", r, from)
			}
		}
		return all, nil
	}
}

// jobResult is what one trainer of the sync job saw.
type jobResult struct {
	losses []float32
	eval   dlrm.EvalResult // on the held-out batch
	eval2  dlrm.EvalResult // on two batches
}

// runTrainer trains the global batches as trainer r and evaluates; it closes tr.
func runTrainer(tr *dlrm.Trainer, r int, batches []*dlrm.Batch, heldOut []*dlrm.Batch,
	ckpt string) (res jobResult, err error) {
	defer tr.Close()
	if rank, err := tr.Rank(); err != nil || rank != r {
		return res, fmt.Errorf("Rank() = %d, %v; want %d", rank, err, r)
	}
	if n, err := tr.NumTrainers(); err != nil || n != jobTrainers {
		return res, fmt.Errorf("NumTrainers() = %d, %v; want %d", n, err, jobTrainers)
	}
	if s, err := tr.Step(); err != nil || s != 0 {
		return res, fmt.Errorf("Step() = %d, %v; want 0", s, err)
	}
	if err := tr.Enqueue(part(batches[0], r)); err != nil {
		return res, err
	}
	for i := range batches {
		if i+1 < len(batches) { // the next part's lookups travel while this step trains
			if err := tr.Enqueue(part(batches[i+1], r)); err != nil {
				return res, err
			}
		}
		loss, err := tr.TrainStep()
		if err != nil {
			return res, fmt.Errorf("step %d: %w", i, err)
		}
		res.losses = append(res.losses, loss)
	}
	if s, err := tr.Step(); err != nil || s != int64(len(batches)) {
		return res, fmt.Errorf("Step() = %d, %v after training; want %d", s, err, len(batches))
	}
	if res.eval, err = tr.Evaluate(heldOut[0]); err != nil {
		return res, err
	}
	if res.eval2, err = tr.Evaluate(heldOut...); err != nil {
		return res, err
	}
	if err := tr.Checkpoint(ckpt); err != nil {
		return res, err
	}
	return res, tr.Finish()
}

// runJob trains batches on the job and returns each trainer's result.
func runJob(t *testing.T, batches, heldOut []*dlrm.Batch, goGather bool,
	ckpt string) [jobTrainers]jobResult {
	port := freePort(t)
	waitRoles := startRoles(t, port, 20000)
	gather := newChanGather()
	var results [jobTrainers]jobResult
	errs := make([]error, jobTrainers)
	var wg sync.WaitGroup
	for r := 0; r < jobTrainers; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			var opts []dlrm.TrainerOption
			if goGather {
				opts = append(opts, dlrm.WithAllGather(gather.member(r, nil)))
			}
			tr, err := dlrm.NewTrainer(jobConfig, jobCluster("trainer", 1+r, port, 20000), opts...)
			if err == nil {
				results[r], err = runTrainer(tr, r, batches, heldOut, ckpt)
			}
			errs[r] = err
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("trainer %d: %v", r, err)
		}
	}
	for _, err := range waitRoles(30 * time.Second) {
		t.Errorf("%v", err)
	}
	if t.Failed() {
		t.FailNow()
	}
	return results
}

func TestSyncJobEqualsOneEngineBitwise(t *testing.T) {
	batches := make([]*dlrm.Batch, jobSteps)
	for i := range batches {
		batches[i] = makeBatch(i)
	}
	heldOut := []*dlrm.Batch{makeBatch(10), makeBatch(11)}
	engine, err := dlrm.NewEngine(jobConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	var want []float32
	for _, b := range batches {
		loss, err := engine.TrainStep(b)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, loss)
	}
	wantEval, err := engine.Evaluate(heldOut[:1])
	if err != nil {
		t.Fatal(err)
	}
	wantEval2, err := engine.Evaluate(heldOut)
	if err != nil {
		t.Fatal(err)
	}

	for _, goGather := range []bool{false, true} {
		name := map[bool]string{false: "transport", true: "go_allgather"}[goGather]
		t.Run(name, func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "ckpt")
			results := runJob(t, batches, heldOut, goGather, ckpt)
			for r, res := range results {
				if !sameBits(res.losses, want) {
					t.Errorf("trainer %d: losses %v, want the engine's %v", r, res.losses, want)
				}
				// One batch is evaluated by trainer 0 alone, in the engine's order: the
				// same parameters give bitwise the engine's result.
				if math.Float64bits(res.eval.LogLoss) != math.Float64bits(wantEval.LogLoss) ||
					math.Float64bits(res.eval.AUC) != math.Float64bits(wantEval.AUC) ||
					res.eval.NumSamples != wantEval.NumSamples {
					t.Errorf("trainer %d: Evaluate = %+v, want the engine's %+v", r, res.eval, wantEval)
				}
				// Two batches are split between the trainers: the same predictions, summed
				// in another order.
				if res.eval2.NumSamples != wantEval2.NumSamples ||
					math.Abs(res.eval2.LogLoss-wantEval2.LogLoss) > 1e-12 ||
					math.Abs(res.eval2.AUC-wantEval2.AUC) > 1e-12 {
					t.Errorf("trainer %d: Evaluate of 2 batches = %+v, want the engine's %+v",
						r, res.eval2, wantEval2)
				}
			}
			if _, err := os.Stat(filepath.Join(ckpt, "MANIFEST")); err != nil {
				t.Errorf("the checkpoint has no MANIFEST: %v", err)
			}
		})
	}
}

// portFree reports whether nothing listens on the loopback port.
func portFree(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func TestBadSettingsAreRefusedByName(t *testing.T) {
	port := freePort(t)
	goroutines := runtime.NumGoroutine()
	without := func(key string) map[string]string {
		c := jobCluster("trainer", 1, port, 1000)
		delete(c, key)
		return c
	}
	with := func(key, value string) map[string]string {
		c := jobCluster("trainer", 1, port, 1000)
		c[key] = value
		return c
	}
	gather := dlrm.WithAllGather(func([]byte) ([][]byte, error) {
		return nil, errors.New("the all-gather of a refused trainer was called")
	})
	newTrainer := func(cluster map[string]string, opts ...dlrm.TrainerOption) error {
		tr, err := dlrm.NewTrainer(jobConfig, cluster, opts...)
		if tr != nil || err == nil {
			t.Errorf("NewTrainer(%q) = %v, %v; want an error", cluster, tr, err)
			if tr != nil {
				tr.Close()
			}
		}
		return err
	}

	wantError(t, newTrainer(with("DLRM_ROLE", "bogus")), dlrm.ErrInvalidArgument,
		"DLRM_ROLE='bogus'")
	wantError(t, newTrainer(jobCluster("server", 0, port, 1000), gather),
		dlrm.ErrInvalidArgument, "DLRM_ROLE=server")
	wantError(t, newTrainer(without("DLRM_COORDINATOR")), dlrm.ErrInvalidArgument,
		"DLRM_COORDINATOR is not set")
	wantError(t, newTrainer(with("DLRM_COORDINATOR", "127.0.0.1")), dlrm.ErrInvalidArgument,
		"DLRM_COORDINATOR='127.0.0.1' is not host:port")
	wantError(t, newTrainer(map[string]string{"HOME": "/root"}), dlrm.ErrInvalidArgument,
		`"HOME" is not a DLRM_* setting`)
	// Caught by the binding: a line break or '=' would make other settings of the text.
	wantError(t, newTrainer(with("DLRM_ROLE", "trainer\nDLRM_RANK=2"), gather),
		dlrm.ErrInvalidArgument, `"DLRM_ROLE"`, "not a single line")
	wantError(t, newTrainer(with("DLRM_RANK=1\nDLRM_ROLE", "trainer")),
		dlrm.ErrInvalidArgument, "is not a KEY")
	wantError(t, newTrainer(with("DLRM_SECRET", "a\x00b")), dlrm.ErrInvalidArgument, "NUL")

	wantError(t, dlrm.RunRole(jobConfig, jobCluster("trainer", 1, port, 1000), ""),
		dlrm.ErrInvalidArgument, "dlrm_trainer_create")
	wantError(t, dlrm.RunRole(jobConfig, map[string]string{"DLRM_ROLE": "coordinator"}, ""),
		dlrm.ErrInvalidArgument, "DLRM_WORLD_SIZE is not set")
	c := jobCluster("coordinator", -1, port, 1000)
	c["DLRM_TIMEOUT_MS"] = "1000\nDLRM_TIMEOUT_MS=2000"
	wantError(t, dlrm.RunRole(jobConfig, c, ""), dlrm.ErrInvalidArgument,
		`"DLRM_TIMEOUT_MS"`, "not a single line")

	// nil reads the process environment; an empty map is no settings at all.
	for k, v := range jobCluster("trainer", 1, port, 1000) {
		t.Setenv(k, v)
	}
	wantError(t, dlrm.RunRole(jobConfig, nil, ""), dlrm.ErrInvalidArgument,
		"dlrm_trainer_create")
	wantError(t, dlrm.RunRole(jobConfig, map[string]string{}, ""), dlrm.ErrInvalidArgument,
		"DLRM_ROLE is not set")

	// Nothing was left running: no listener on the coordinator's port, no goroutine.
	if !portFree(port) {
		t.Errorf("port %d is in use after the refusals", port)
	}
	for i := 0; i < 50 && runtime.NumGoroutine() > goroutines; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		t.Errorf("%d goroutines after the refusals, %d before", n, goroutines)
	}
}

var errInjected = errors.New("injected all-gather failure")

// A Go all-gather that fails (trainer 0: an error, trainer 1: a panic) fails the step on
// that trainer with an error naming the failure. Nothing crashes, and as both failed the
// same exchange, the trainers still leave the job together (Finish's exchange works).
func TestGoAllGatherErrorFailsTheStep(t *testing.T) {
	port := freePort(t)
	waitRoles := startRoles(t, port, 5000)
	gather := newChanGather()
	failures := [jobTrainers]func(n int64) error{
		func(n int64) error {
			if n == 1 {
				return errInjected
			}
			return nil
		},
		func(n int64) error {
			if n == 1 {
				panic("gather exploded")
			}
			return nil
		},
	}
	stepErrs := make([]error, jobTrainers)
	var wg sync.WaitGroup
	for r := 0; r < jobTrainers; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			tr, err := dlrm.NewTrainer(jobConfig, jobCluster("trainer", 1+r, port, 5000),
				dlrm.WithAllGather(gather.member(r, failures[r])))
			if err != nil {
				t.Errorf("trainer %d: NewTrainer: %v", r, err)
				return
			}
			defer tr.Close()
			if err := tr.Enqueue(part(makeBatch(0), r)); err != nil {
				t.Errorf("trainer %d: Enqueue: %v", r, err)
				return
			}
			_, stepErrs[r] = tr.TrainStep()
			if s, err := tr.Step(); err != nil || s != 0 {
				t.Errorf("trainer %d: Step() = %d, %v after the failed step; want 0", r, s, err)
			}
			if err := tr.Finish(); err != nil {
				t.Errorf("trainer %d: Finish: %v", r, err)
			}
			tr.Close()
			if _, err := tr.TrainStep(); !errors.Is(err, dlrm.ErrClosed) {
				t.Errorf("trainer %d: TrainStep after Close: %v; want ErrClosed", r, err)
			}
			if err := tr.Close(); err != nil {
				t.Errorf("trainer %d: second Close: %v", r, err)
			}
		}(r)
	}
	wg.Wait()
	wantError(t, stepErrs[0], dlrm.ErrNetwork, "host's all-gather", "on trainer 0",
		errInjected.Error())
	if !errors.Is(stepErrs[0], errInjected) {
		t.Errorf("errors.Is(%v, errInjected) = false", stepErrs[0])
	}
	wantError(t, stepErrs[1], dlrm.ErrNetwork, "host's all-gather", "on trainer 1",
		"panicked: gather exploded")
	for _, err := range waitRoles(10 * time.Second) {
		t.Errorf("%v", err)
	}
}

// Trainers that their host drops without Finish leave nothing waiting: the server notices
// their silence within the timeout and ends with an error naming one, and the
// coordinator, whom every peer told it was leaving, returns.
func TestAbandonedTrainersDoNotHangTheJob(t *testing.T) {
	const timeoutMS = 1000
	port := freePort(t)
	waitRoles := startRoles(t, port, timeoutMS)
	var wg sync.WaitGroup
	for r := 0; r < jobTrainers; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			tr, err := dlrm.NewTrainer(jobConfig, jobCluster("trainer", 1+r, port, timeoutMS))
			if err != nil {
				t.Errorf("trainer %d: NewTrainer: %v", r, err)
				return
			}
			if err := tr.Enqueue(part(makeBatch(0), r)); err != nil {
				t.Errorf("trainer %d: Enqueue: %v", r, err)
			} else if _, err := tr.TrainStep(); err != nil {
				t.Errorf("trainer %d: TrainStep: %v", r, err)
			}
			if err := tr.Close(); err != nil { // abandoned: no Finish
				t.Errorf("trainer %d: Close: %v", r, err)
			}
		}(r)
	}
	wg.Wait()
	// Abandoned trainers leave as failed: the coordinator and the server end at once, each
	// naming the first trainer that left (before, the server waited out its timeout).
	errs := waitRoles(4 * time.Duration(timeoutMS) * time.Millisecond)
	if len(errs) != 2 {
		t.Fatalf("errors of the coordinator and the server: %v; want both", errs)
	}
	for _, err := range errs {
		wantError(t, err, dlrm.ErrCancelled, "(rank ", "failed: it ended without finishing")
	}
}
