package dlrm_test

import (
	"errors"
	"math"
	"testing"

	"libdlrm.dev/dlrm"
)

// Submitted steps give bitwise the losses and predictions of synchronous steps.
func TestSubmitWaitMatchesTrainStep(t *testing.T) {
	sync, async := newTestEngine(t), newTestEngine(t)
	var tickets []int64
	var want []float32
	for i := 0; i < 5; i++ {
		loss, err := sync.TrainStep(makeBatch(i))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, loss)
		b := makeBatch(i)
		ticket, err := async.SubmitTrainStep(b)
		if err != nil {
			t.Fatal(err)
		}
		for j := range b.Dense { // the engine copied the batch
			b.Dense[j] = 0
		}
		tickets = append(tickets, ticket)
	}
	for i, ticket := range tickets {
		loss, err := async.WaitTrainStep(ticket)
		if err != nil {
			t.Fatal(err)
		}
		if math.Float32bits(loss) != math.Float32bits(want[i]) {
			t.Fatalf("step %d: async loss %v, sync loss %v", i, loss, want[i])
		}
	}
	probe := makeBatch(1)
	p1, _ := sync.Predict(probe)
	p2, _ := async.Predict(probe)
	for i := range p1 {
		if math.Float32bits(p1[i]) != math.Float32bits(p2[i]) {
			t.Fatalf("prediction %d differs: %v vs %v", i, p1[i], p2[i])
		}
	}
	if _, err := async.WaitTrainStep(tickets[0]); !errors.Is(err, dlrm.ErrInvalidArgument) {
		t.Fatalf("second wait: got %v, want InvalidArgument", err)
	}
	bad := makeBatch(2)
	bad.IDs[0] = -1
	if _, err := async.SubmitTrainStep(bad); !errors.Is(err, dlrm.ErrOutOfRange) {
		t.Fatalf("bad submit: got %v, want OutOfRange", err)
	}
}
