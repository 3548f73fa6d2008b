package dlrm_test

import (
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"libdlrm.dev/dlrm"
)

// Train a small model, checkpoint it, and serve it with a Predictor.
func Example() {
	engine, err := dlrm.NewEngine(`
		model {
		  num_dense_features: 2
		  tables { name: 'items' num_rows: 100 dim: 4 }
		  sparse_features { name: 'item' table: 'items' }
		  bottom_mlp { layer_sizes: 8 layer_sizes: 4 }
		  top_mlp { layer_sizes: 8 layer_sizes: 1 }
		}
		dense_optimizer { learning_rate: 0.01 adam {} }
		sparse_optimizer { learning_rate: 0.1 rowwise_adagrad {} }
		seed: 1`)
	if err != nil {
		log.Fatal(err)
	}
	defer engine.Close()

	batch := &dlrm.Batch{
		BatchSize: 2,
		NumDense:  2,
		Dense:     []float32{0.1, 0.2, 0.3, 0.4}, // 2 samples x 2 features
		Labels:    []float32{1, 0},
		NumSparse: 1,
		Lengths:   []int32{2, 1}, // sample 0 has 2 items, sample 1 has 1
		IDs:       []int64{7, 42, 99},
	}
	for i := 0; i < 10; i++ {
		if _, err := engine.TrainStep(batch); err != nil {
			log.Fatal(err)
		}
	}

	dir, err := os.MkdirTemp("", "dlrm-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ckpt := filepath.Join(dir, "model.ckpt")
	if err := engine.Save(ckpt); err != nil {
		log.Fatal(err)
	}

	predictor, err := dlrm.OpenPredictor(ckpt)
	if err != nil {
		log.Fatal(err)
	}
	defer predictor.Close()
	batch.Labels = nil
	probs, err := predictor.Predict(batch)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(probs), "probabilities")

	batch.IDs[0] = 1000 // outside the table
	_, err = predictor.Predict(batch)
	var e *dlrm.Error
	if errors.Is(err, dlrm.ErrOutOfRange) && errors.As(err, &e) {
		fmt.Println(e.Code)
	}
	// Output:
	// 2 probabilities
	// OUT_OF_RANGE
}
