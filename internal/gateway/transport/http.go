package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/gateway"
)

// HTTPOptions configures HTTPHandler.
type HTTPOptions struct {
	// Auth, if set, authenticates every request: it returns the caller's
	// name (an API key's name, say), which becomes the session that pays
	// when neither the request nor the X-Stickyd-Session header names one;
	// an error is answered 401 with the error's text, which the caller
	// reads. Nil means no authentication.
	Auth func(r *http.Request) (session string, err error)
	// MaxBodyBytes bounds a request body; a larger one is answered 413.
	// Zero means 4 MiB.
	MaxBodyBytes int64
	// PollInterval is how often a long poll reads the job again when the
	// Service is not a JobWaiter. Zero means 100ms.
	PollInterval time.Duration
	// Now is the clock of OpenAI's "created" field. Nil means time.Now.
	Now func() time.Time
	// Logger logs failed calls. Nil means no logs.
	Logger hclog.Logger
}

// The bounds of HTTPHandler.
const (
	defaultMaxBodyBytes = 4 << 20
	defaultPollInterval = 100 * time.Millisecond
	// maxWait bounds a long poll (?wait=).
	maxWait = 60 * time.Second
)

// The HTTP routes, and the headers HTTPHandler reads and sets besides
// SessionHeader.
const (
	requestsPath     = "/v1/gateway/requests"
	completionsPath  = "/v1/chat/completions"
	messagesPath     = "/v1/messages"
	responsesPath    = "/v1/responses"
	embeddingsPath   = "/v1/embeddings"
	modelsPath       = "/v1/models"
	idempotencyKey   = "Idempotency-Key"
	providerHeader   = "X-Stickyd-Provider"
	deploymentHeader = "X-Stickyd-Deployment"
	// costTrailer is a stream's cost in micro-dollars, a trailer of its
	// answer (a whole answer carries it in its body).
	costTrailer = "X-Stickyd-Cost-Micros"
)

// HTTPHandler serves svc over HTTP:
//
//	POST   /v1/gateway/requests       submit a call (202, Location: its URL)
//	GET    /v1/gateway/requests/{id}  the job; ?wait=10s long-polls until it ends (at most 60s)
//	DELETE /v1/gateway/requests/{id}  cancel it (409 when it already ended)
//	POST   /v1/chat/completions       OpenAI's chat completions, JSON or SSE (stream: true)
//	POST   /v1/messages               Anthropic's Messages API, JSON or SSE (errors in Anthropic's shape)
//	POST   /v1/responses              OpenAI's Responses API (text and function tools), JSON or SSE
//	POST   /v1/embeddings             OpenAI's embeddings
//	GET    /v1/models                 the configured models
//
// Every error answer has OpenAI's shape, {"error": {"message", "type",
// "param", "code"}}. The session that pays is the REST body's "session",
// else the X-Stickyd-Session header, else the body's "user", else the name
// opts.Auth returns.
func HTTPHandler(svc gateway.Service, opts HTTPOptions) http.Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = defaultMaxBodyBytes
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = defaultPollInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	h := &httpServer{svc: svc, opts: opts, log: opts.Logger}
	mux := http.NewServeMux()
	// Routes without a method, so that a wrong method gets a 405 in the
	// error shape rather than the mux's plain text.
	mux.Handle(requestsPath, h.handle(map[string]handlerFunc{http.MethodPost: h.submit}))
	mux.Handle(requestsPath+"/{id}", h.handle(map[string]handlerFunc{http.MethodGet: h.getJob, http.MethodDelete: h.cancelJob}))
	mux.Handle(completionsPath, h.handle(map[string]handlerFunc{http.MethodPost: h.chatCompletions}))
	mux.Handle(messagesPath, h.handleAs(map[string]handlerFunc{http.MethodPost: h.messages}, writeAnthropicError))
	mux.Handle(responsesPath, h.handle(map[string]handlerFunc{http.MethodPost: h.responses}))
	mux.Handle(embeddingsPath, h.handle(map[string]handlerFunc{http.MethodPost: h.embeddings}))
	mux.Handle(modelsPath, h.handle(map[string]handlerFunc{http.MethodGet: h.models}))
	mux.Handle("/", h.handle(nil))
	return mux
}

type httpServer struct {
	svc  gateway.Service
	opts HTTPOptions
	log  hclog.Logger
}

// handlerFunc serves one route; caller is the name opts.Auth returned ("" without
// Auth). An error it returns is answered in the error shape, unless the
// handler already wrote its answer's first byte.
type handlerFunc func(w http.ResponseWriter, r *http.Request, caller string) error

// handle authenticates, dispatches on the method and answers errors in
// OpenAI's shape.
func (h *httpServer) handle(methods map[string]handlerFunc) http.Handler {
	return h.handleAs(methods, writeError)
}

// handleAs is handle with errors written by writeErr.
func (h *httpServer) handleAs(methods map[string]handlerFunc, writeErr func(http.ResponseWriter, *apiError)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := h.serve(w, r, methods)
		if err == nil {
			return
		}
		ae := toAPIError(err)
		switch {
		case ae.Status >= 500 && ae.Status != statusClientClosed:
			h.log.Warn("gateway call failed", "method", r.Method, "path", r.URL.Path, "status", ae.Status, "error", err)
		default:
			h.log.Debug("gateway call refused", "method", r.Method, "path", r.URL.Path, "status", ae.Status, "error", err)
		}
		if ae.Status == statusClientClosed {
			return
		}
		writeErr(w, ae)
	})
}

func (h *httpServer) serve(w http.ResponseWriter, r *http.Request, methods map[string]handlerFunc) error {
	if methods == nil {
		return &apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, ErrCode: "unknown_route",
			Message: fmt.Sprintf("no gateway route %s %s", r.Method, r.URL.Path)}
	}
	serve, ok := methods[r.Method]
	if !ok {
		allow := ""
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
			if methods[m] != nil {
				if allow != "" {
					allow += ", "
				}
				allow += m
			}
		}
		w.Header().Set("Allow", allow)
		return &apiError{Status: http.StatusMethodNotAllowed, Type: typeInvalidRequest, ErrCode: "method_not_allowed",
			Message: fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow)}
	}
	var caller string
	if h.opts.Auth != nil {
		var err error
		if caller, err = h.opts.Auth(r); err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="stickyd gateway"`)
			return &apiError{Status: http.StatusUnauthorized, Type: typeAuthentication, ErrCode: "invalid_api_key",
				Message: err.Error()}
		}
	}
	return serve(w, r, caller)
}

// errorBody is OpenAI's error answer.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

func newErrorBody(ae *apiError) errorBody {
	d := errorDetail{Message: ae.Message, Type: ae.Type, Code: ae.ErrCode}
	if ae.Param != "" {
		d.Param = &ae.Param
	}
	return errorBody{Error: d}
}

func writeError(w http.ResponseWriter, ae *apiError) {
	if ae.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64((ae.RetryAfter+time.Second-1)/time.Second), 10))
	}
	writeJSON(w, ae.Status, newErrorBody(ae))
}

// writeAnthropicError answers an error in Anthropic's shape.
func writeAnthropicError(w http.ResponseWriter, ae *apiError) {
	if ae.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64((ae.RetryAfter+time.Second-1)/time.Second), 10))
	}
	writeJSON(w, ae.Status, anthropicError(ae))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decodeBody reads r's JSON body into v, within opts.MaxBodyBytes, and
// returns its bytes as they came.
func (h *httpServer) decodeBody(w http.ResponseWriter, r *http.Request, v any) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &apiError{Status: http.StatusRequestEntityTooLarge, Type: typeInvalidRequest, ErrCode: "request_too_large",
				Message: fmt.Sprintf("the request body is larger than %d bytes", mbe.Limit)}
		}
		return nil, &apiError{Status: http.StatusBadRequest, Type: typeInvalidRequest, ErrCode: "invalid_request",
			Message: "the request body could not be read", Err: err}
	}
	if err := json.Unmarshal(b, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			// The path names embedded structs by their Go names.
			field := strings.TrimPrefix(te.Field, "completionBody.")
			return nil, badRequest(field, "invalid JSON body: %s must be %s, not %s", field, jsonKind(te.Type), te.Value)
		}
		return nil, badRequest("", "invalid JSON body: %v", err)
	}
	if len(bytes.TrimSpace(b)) == 0 || bytes.TrimSpace(b)[0] != '{' {
		return nil, badRequest("", "the request body must be a JSON object")
	}
	return b, nil
}

// jsonKind words a Go type as the JSON type a caller sends.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int32, reflect.Int64, reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return t.String()
}
