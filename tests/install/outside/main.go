// A Go program in a module of its own, outside the libdlrm repository (outside_test.sh):
// it trains one step of the model in os.Args[1] and predicts.
package main

import (
	"fmt"
	"os"

	"libdlrm.dev/dlrm"
)

func main() {
	config, err := os.ReadFile(os.Args[1])
	if err != nil {
		panic(err)
	}
	engine, err := dlrm.NewEngine(string(config))
	if err != nil {
		panic(err)
	}
	defer engine.Close()
	batch := &dlrm.Batch{BatchSize: 2, NumDense: 3, Dense: []float32{0.1, 0.2, 0.3, 0.4, 0.5, 0.6},
		NumSparse: 2, Lengths: []int32{1, 1, 1, 0}, IDs: []int64{4, 9, 2}, Labels: []float32{1, 0}}
	if _, err := engine.TrainStep(batch); err != nil {
		panic(err)
	}
	p, err := engine.Predict(batch)
	if err != nil {
		panic(err)
	}
	fmt.Printf("go app: libdlrm %s predicts %d probabilities\n", dlrm.Version(), len(p))
}
