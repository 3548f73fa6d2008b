// Package serve is an HTTP scoring service over a dlrm.Predictor.
//
// Routes:
//
//	POST /predict  {"batch_size": B, "num_dense": Nd, "dense": [...], "num_sparse": F,
//	                "lengths": [...], "ids": [...], "weights": [...]}  ("weights" optional)
//	               -> 200 {"probabilities": [...]}
//	GET  /healthz  -> 200 {"status": "ok"}
//
// Bad input (malformed JSON, inconsistent sizes, ids out of range, NaN features) gets
// 400 with {"error": message, "code": "INVALID_ARGUMENT"}, the message being the
// engine's; a closed predictor gets 503 and any other failure 500.
package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"libdlrm.dev/dlrm"
)

// Scorer predicts click probabilities; *dlrm.Predictor and *dlrm.Engine implement it.
// Its Predict must be safe for concurrent use.
type Scorer interface {
	Predict(*dlrm.Batch) ([]float32, error)
}

// DefaultMaxBodyBytes is the largest request body a Handler accepts unless told otherwise.
const DefaultMaxBodyBytes = 64 << 20

// Handler serves /predict and /healthz.
type Handler struct {
	scorer Scorer
	mux    *http.ServeMux
	// MaxBodyBytes bounds a request body; larger requests get 413.
	MaxBodyBytes int64
}

// NewHandler returns a Handler scoring with s.
func NewHandler(s Scorer) *Handler {
	h := &Handler{scorer: s, mux: http.NewServeMux(), MaxBodyBytes: DefaultMaxBodyBytes}
	h.mux.HandleFunc("/predict", h.predict)
	h.mux.HandleFunc("/healthz", h.healthz)
	return h
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

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

// ErrorResponse is the JSON body of a failed request.
type ErrorResponse struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

func (h *Handler) predict(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, dlrm.InvalidArgument, "use POST")
		return
	}
	var req PredictRequest
	if status, msg := decodeJSON(w, r, h.MaxBodyBytes, &req); status != http.StatusOK {
		writeError(w, status, dlrm.InvalidArgument, msg)
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
		var de *dlrm.Error
		if !errors.As(err, &de) {
			writeError(w, http.StatusInternalServerError, dlrm.Internal, err.Error())
			return
		}
		writeError(w, httpStatus(de.Code), de.Code, de.Msg)
		return
	}
	writeJSON(w, http.StatusOK, PredictResponse{Probabilities: probs})
}

func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, dlrm.InvalidArgument, "use GET")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// decodeJSON reads exactly one JSON object into v, rejecting unknown fields so that a
// misspelt key is reported instead of ignored. It returns 200 or the error status and
// message.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v interface{}) (int, string) {
	body := http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return http.StatusRequestEntityTooLarge,
				fmt.Sprintf("request body is larger than %d bytes", tooLarge.Limit)
		}
		return http.StatusBadRequest, "malformed JSON request: " + err.Error()
	}
	if _, err := dec.Token(); err != io.EOF {
		return http.StatusBadRequest, "malformed JSON request: data after the object"
	}
	return http.StatusOK, ""
}

// httpStatus maps an engine status code to an HTTP status.
func httpStatus(c dlrm.Code) int {
	switch c {
	case dlrm.InvalidArgument, dlrm.OutOfRange:
		return http.StatusBadRequest
	case dlrm.FailedPrecondition, dlrm.ResourceExhausted, dlrm.Cancelled:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

func writeError(w http.ResponseWriter, status int, code dlrm.Code, msg string) {
	writeJSON(w, status, ErrorResponse{Error: msg, Code: code.String()})
}

func writeJSON(w http.ResponseWriter, status int, v interface{}) {
	data, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		data, _ = json.Marshal(ErrorResponse{Error: err.Error(), Code: dlrm.Internal.String()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(data, '\n'))
}
