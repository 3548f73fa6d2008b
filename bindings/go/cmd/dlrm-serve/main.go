// Command dlrm-serve scores batches over HTTP with a libdlrm checkpoint.
//
//	dlrm-serve -checkpoint model.ckpt [-addr 127.0.0.1:8080]
//
//	curl -d '{"batch_size":1,"num_dense":3,"dense":[0.1,0.2,0.3],
//	          "num_sparse":2,"lengths":[1,1],"ids":[4,2]}' localhost:8080/predict
//	{"probabilities":[0.53]}
//
// See package libdlrm.dev/dlrm/serve for the routes and the error responses.
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"libdlrm.dev/dlrm"
	"libdlrm.dev/dlrm/serve"
)

func main() {
	checkpoint := flag.String("checkpoint", "", "checkpoint to serve (written by Engine.Save or `dlrm train`)")
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	device := flag.String("device", "", "cpu, cuda or cuda:N to serve on instead of the device the checkpoint was trained on (a GPU-trained checkpoint serves on a machine without a GPU with -device cpu)")
	flag.Parse()
	if *checkpoint == "" {
		log.Fatal("dlrm-serve: -checkpoint is required")
	}

	predictor, err := dlrm.OpenPredictorOn(*checkpoint, *device)
	if err != nil {
		log.Fatalf("dlrm-serve: %v", err)
	}
	srv := &http.Server{
		Addr:              *addr,
		Handler:           serve.NewHandler(predictor),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdown); err != nil {
			log.Printf("dlrm-serve: shutdown: %v", err)
		}
	}()

	log.Printf("dlrm-serve: libdlrm %s serving %s on http://%s", dlrm.Version(), *checkpoint, *addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("dlrm-serve: %v", err)
	}
	<-drained // ListenAndServe returns as Shutdown starts; wait for the requests to end
	predictor.Close()
	log.Print("dlrm-serve: stopped")
}
