// Package serve is an HTTP scoring service over a dlrm.Predictor, or over a Reloader
// that swaps in a new checkpoint while it serves.
//
// Routes:
//
//	POST /predict  {"batch_size": B, "num_dense": Nd, "dense": [...], "num_sparse": F,
//	                "lengths": [...], "ids": [...], "weights": [...]}  ("weights" optional)
//	               -> 200 {"probabilities": [...]}
//	GET  /healthz  -> 200 {"status": "ok"} (with a Reloader, also "model": ModelInfo)
//	GET  /metrics  -> 200, the Prometheus text format (version 0.0.4)
//	POST /reload   -> 200 {"status": "reloaded", "model": ModelInfo} (a Reloader only)
//
// A request is one batch in libdlrm's layout (dlrm.Batch): dense is B x Nd, row-major;
// lengths is F x B, feature-major (the B bags of feature 0 first); ids holds the bags'
// ids in the order of lengths. The values are used as sent: the server applies no
// preprocessing (no log(1+x) of the dense values, no hashing of the ids), so a client
// sends what the model was trained on.
//
// Failures answer {"error": message, "code": CODE} (ErrorResponse): 400 for bad input
// (malformed JSON, inconsistent sizes, ids out of range), the message naming the
// request's JSON fields and the code being the engine's; 401 for POST /reload without
// the ReloadToken; 404 for an unknown route; 405 for a wrong method, with Allow; 413 for
// a body over MaxBodyBytes; 503 while no model can score (a closed predictor or
// Reloader); 500 otherwise, and for a failed reload (the old model keeps serving).
package serve

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"libdlrm.dev/dlrm"
)

// Scorer predicts click probabilities; *dlrm.Predictor, *dlrm.Engine and *Reloader
// implement it. Its Predict must be safe for concurrent use.
type Scorer interface {
	Predict(*dlrm.Batch) ([]float32, error)
}

// DefaultMaxBodyBytes is the largest request body a Handler accepts unless told otherwise.
const DefaultMaxBodyBytes = 64 << 20

// Handler serves /predict, /healthz, /metrics and, over a Reloader, /reload.
type Handler struct {
	scorer  Scorer
	models  *Reloader // the scorer when it is a Reloader, else nil
	mux     *http.ServeMux
	metrics metrics

	// MaxBodyBytes bounds a request body; larger requests get 413.
	MaxBodyBytes int64
	// ReloadToken, when not empty, must come with POST /reload as the header
	// "Authorization: Bearer <ReloadToken>"; without it the request gets 401.
	ReloadToken string
}

// routes are the request counters' route labels; any other path counts as "other".
var routes = map[string]bool{"/predict": true, "/healthz": true, "/metrics": true, "/reload": true}

// NewHandler returns a Handler scoring with s. If s is a *Reloader, the Handler also
// serves POST /reload, and /healthz and /metrics describe its model.
func NewHandler(s Scorer) *Handler {
	h := &Handler{scorer: s, mux: http.NewServeMux(), MaxBodyBytes: DefaultMaxBodyBytes}
	h.models, _ = s.(*Reloader)
	h.mux.HandleFunc("/predict", h.predict)
	h.mux.HandleFunc("/healthz", h.healthz)
	h.mux.HandleFunc("/metrics", h.serveMetrics)
	if h.models != nil {
		h.mux.HandleFunc("/reload", h.reload)
	}
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "NOT_FOUND", "no route "+r.URL.Path)
	})
	return h
}

// ServeHTTP implements http.Handler, counting the request and timing /predict.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
	h.mux.ServeHTTP(sw, r)
	route := r.URL.Path
	if !routes[route] {
		route = "other"
	}
	if route == "/predict" {
		h.metrics.latency.observe(time.Since(start).Seconds())
	}
	h.metrics.countRequest(route, sw.code)
}

// statusWriter remembers the status code of a response.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// PredictRequest is the JSON body of POST /predict: one batch in libdlrm's layout.
type PredictRequest struct {
	BatchSize int       `json:"batch_size"`
	NumDense  int       `json:"num_dense"`
	Dense     []float32 `json:"dense"`
	NumSparse int       `json:"num_sparse"`
	Lengths   []int32   `json:"lengths"`
	IDs       []int64   `json:"ids"`
	Weights   []float32 `json:"weights,omitempty"`
}

// PredictResponse is the JSON body of a successful POST /predict.
type PredictResponse struct {
	Probabilities []float32 `json:"probabilities"`
}

// HealthResponse is the JSON body of a successful GET /healthz.
type HealthResponse struct {
	Status string     `json:"status"`          // "ok"
	Model  *ModelInfo `json:"model,omitempty"` // the model served by a Reloader
}

// ReloadResponse is the JSON body of a successful POST /reload.
type ReloadResponse struct {
	Status string    `json:"status"` // "reloaded"
	Model  ModelInfo `json:"model"`  // the model now served
}

func (h *Handler) predict(w http.ResponseWriter, r *http.Request) {
	if !allowMethods(w, r, http.MethodPost) {
		return
	}
	var req PredictRequest
	if status, msg := decodeJSON(w, r, h.MaxBodyBytes, &req); status != http.StatusOK {
		writeError(w, status, dlrm.InvalidArgument.String(), msg)
		return
	}
	probs, err := h.scorer.Predict(&dlrm.Batch{
		BatchSize: req.BatchSize,
		NumDense:  req.NumDense,
		Dense:     req.Dense,
		NumSparse: req.NumSparse,
		Lengths:   req.Lengths,
		IDs:       req.IDs,
		Weights:   req.Weights,
	})
	if err != nil {
		writeScoreError(w, err)
		return
	}
	h.metrics.samples.Add(uint64(len(probs)))
	writeJSON(w, http.StatusOK, PredictResponse{Probabilities: probs})
}

func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) {
	if !allowMethods(w, r, http.MethodGet, http.MethodHead) {
		return
	}
	resp := HealthResponse{Status: "ok"}
	if h.models != nil {
		info, ok := h.models.Model()
		if !ok {
			writeScoreError(w, ErrNoModel)
			return
		}
		resp.Model = &info
	}
	writeJSON(w, http.StatusOK, resp)
}

func (h *Handler) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if !allowMethods(w, r, http.MethodGet, http.MethodHead) {
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	h.writeMetrics(w)
}

// reload reloads the Reloader's checkpoint: 200 with the new model, or the error with
// 500 (the old model still serving), 503 after Close.
func (h *Handler) reload(w http.ResponseWriter, r *http.Request) {
	if !allowMethods(w, r, http.MethodPost) {
		return
	}
	if h.ReloadToken != "" {
		got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if subtle.ConstantTimeCompare([]byte(got), []byte(h.ReloadToken)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dlrm-serve reload"`)
			writeError(w, http.StatusUnauthorized, "UNAUTHENTICATED", "POST /reload needs the reload token")
			return
		}
	}
	old, _ := h.models.Model()
	info, err := h.models.Reload()
	if err != nil {
		writeReloadError(w, err, old)
		return
	}
	writeJSON(w, http.StatusOK, ReloadResponse{Status: "reloaded", Model: info})
}

// writeReloadError answers a failed reload: 503 after Close, else 500 with the engine's
// code (IO, DATA_LOSS, FAILED_PRECONDITION for another model, ...), naming the step that
// still serves.
func writeReloadError(w http.ResponseWriter, err error, old ModelInfo) {
	if errors.Is(err, ErrNoModel) {
		writeScoreError(w, err)
		return
	}
	code, msg := dlrm.Internal.String(), err.Error()
	var de *dlrm.Error
	if errors.As(err, &de) {
		code, msg = de.Code.String(), de.Msg
	}
	writeError(w, http.StatusInternalServerError, code,
		fmt.Sprintf("reload failed, still serving step %d: %s", old.Step, msg))
}

// allowMethods answers 405 with an Allow header and returns false unless r's method is
// one of methods.
func allowMethods(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	allow := strings.Join(methods, ", ")
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, dlrm.InvalidArgument.String(),
		r.URL.Path+" takes "+allow+", not "+r.Method)
	return false
}

// decodeJSON reads exactly one JSON object into v, rejecting unknown fields so that a
// misspelt key is reported instead of ignored. It returns 200 or the error status and
// message.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v interface{}) (int, string) {
	if sw, ok := w.(*statusWriter); ok {
		w = sw.ResponseWriter // so that MaxBytesReader can tell the server to close
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return http.StatusBadRequest, "malformed JSON request: data after the object"
	}
	return http.StatusOK, ""
}
