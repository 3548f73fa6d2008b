// Command dlrm-serve scores batches over HTTP with a libdlrm checkpoint, and reloads the
// checkpoint while it serves when the file is replaced.
//
//	dlrm-serve -checkpoint model.ckpt [-addr 127.0.0.1:8080] [-device cpu]
//	           [-reload_every 30s] [-reload_token_file token.txt]
//
//	curl -d '{"batch_size":1,"num_dense":3,"dense":[0.1,0.2,0.3],
//	          "num_sparse":2,"lengths":[1,1],"ids":[4,2]}' localhost:8080/predict
//	{"probabilities":[0.53]}
//
// To publish a new model, write it under another name in the same directory and rename
// it over the checkpoint (Engine.Save does so), then send SIGHUP, POST /reload, or let
// -reload_every notice the change. Requests in flight finish on the old model; a new file
// that fails to load (truncated, corrupt, another model) is logged and counted in
// /metrics, and the old model keeps serving. SIGINT or SIGTERM stops the server once the
// requests in flight have been answered.
//
// See package libdlrm.dev/dlrm/serve for the routes and the error responses.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"libdlrm.dev/dlrm"
	"libdlrm.dev/dlrm/serve"
)

// options are the command-line flags.
type options struct {
	checkpoint, addr, device, tokenFile string
	reloadEvery                         time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.checkpoint, "checkpoint", "", "checkpoint to serve (written by Engine.Save or `dlrm train`)")
	flag.StringVar(&o.addr, "addr", "127.0.0.1:8080", "address to listen on")
	flag.StringVar(&o.device, "device", "", "cpu, cuda or cuda:N to serve on instead of the device the checkpoint was trained on (a GPU-trained checkpoint serves on a machine without a GPU with -device cpu)")
	flag.DurationVar(&o.reloadEvery, "reload_every", 0, "check the checkpoint file this often and reload it when it has been replaced or changed (0: only on SIGHUP or POST /reload)")
	flag.StringVar(&o.tokenFile, "reload_token_file", "", "file holding a token that POST /reload must send as \"Authorization: Bearer <token>\" (default: no token needed)")
	flag.Parse()
	if o.checkpoint == "" {
		log.Fatal("dlrm-serve: -checkpoint is required")
	}
	if err := run(o); err != nil {
		log.Fatalf("dlrm-serve: %v", err)
	}
	log.Print("dlrm-serve: stopped")
}

// run loads the checkpoint and serves it until SIGINT or SIGTERM.
func run(o options) error {
	models, err := serve.NewReloader(o.checkpoint, o.device)
	if err != nil {
		return err
	}
	defer models.Close()
	models.Logf = func(format string, args ...interface{}) { log.Printf("dlrm-serve: "+format, args...) }
	h := serve.NewHandler(models)
	if o.tokenFile != "" {
		if h.ReloadToken, err = readToken(o.tokenFile); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	info, _ := models.Model()
	log.Printf("dlrm-serve: libdlrm %s serving %s (step %d) on http://%s",
		dlrm.Version(), o.checkpoint, info.Step, ln.Addr())
	return serveUntil(ctx, ln, h, models, o.reloadEvery)
}

// readToken returns the reload token the file holds, without surrounding white space.
func readToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("-reload_token_file %s is empty", path)
	}
	return token, nil
}

// serveUntil serves h on ln until ctx is done, then waits for the requests in flight.
// Meanwhile SIGHUP reloads models, and so does a change of its file when every > 0.
func serveUntil(ctx context.Context, ln net.Listener, h http.Handler, models *serve.Reloader, every time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				models.Reload() // logged and counted; on failure the old model keeps serving
			}
		}
	}()
	if every > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			models.Watch(ctx, every)
		}()
	}
	return serveHTTP(ctx, ln, h)
}

// serveHTTP serves h on ln until ctx is done and the requests in flight are answered.
func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
	}
	drained := make(chan error, 1)
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		drained <- srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err // the deferred cancel of serveUntil ends the goroutine above
	}
	if err := <-drained; err != nil { // Serve returns as Shutdown starts
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
