package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"libdlrm.dev/dlrm/internal/ckpttest"
	"libdlrm.dev/dlrm/internal/testmodel"
	"libdlrm.dev/dlrm/serve"
)

// server runs serveUntil on a free port over a checkpoint trained for 1 step, and
// returns its URL, the served path and checkpoints trained for 2 and 3 steps.
func server(t *testing.T, every time.Duration) (url, served string, next []string) {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for k := 0; k < 3; k++ {
		paths = append(paths, filepath.Join(dir, fmt.Sprintf("ckpt-%d", k)))
		ckpttest.Save(t, testmodel.Config(), k+1, paths[k])
	}
	served = filepath.Join(dir, "model.ckpt")
	ckpttest.PublishFile(t, paths[0], served)
	models, err := serve.NewReloader(served, "")
	if err != nil {
		t.Fatal(err)
	}
	models.Logf = t.Logf
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveUntil(ctx, ln, serve.NewHandler(models), models, every) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serveUntil: %v", err)
		}
		models.Close()
	})
	url = "http://" + ln.Addr().String()
	waitStep(t, url, 1) // serving: SIGHUP is being watched for
	return url, served, paths[1:]
}

// step returns the step /healthz reports, or -1.
func step(url string) int64 {
	resp, err := http.Get(url + "/healthz")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var h serve.HealthResponse
	if json.NewDecoder(resp.Body).Decode(&h) != nil || h.Model == nil {
		return -1
	}
	return h.Model.Step
}

func waitStep(t *testing.T, url string, want int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for step(url) != want {
		if time.Now().After(deadline) {
			t.Fatalf("/healthz reports step %d, want %d", step(url), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSIGHUPReloads: SIGHUP reloads the checkpoint after it has been replaced.
func TestSIGHUPReloads(t *testing.T) {
	url, served, next := server(t, 0)
	for i, path := range next {
		ckpttest.PublishFile(t, path, served)
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitStep(t, url, int64(i+2))
	}
}

// TestReloadEvery: with -reload_every, a replaced checkpoint is noticed and reloaded.
func TestReloadEvery(t *testing.T) {
	url, served, next := server(t, 5*time.Millisecond)
	for i, path := range next {
		ckpttest.PublishFile(t, path, served)
		waitStep(t, url, int64(i+2))
	}
}

func TestReadToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	os.WriteFile(path, []byte("  s3cret\n"), 0o600)
	if token, err := readToken(path); err != nil || token != "s3cret" {
		t.Errorf("readToken = %q, %v", token, err)
	}
	os.WriteFile(path, []byte("\n"), 0o600)
	if _, err := readToken(path); err == nil {
		t.Error("an empty token file was accepted")
	}
}
