// Package api is the agent's admin HTTP API (/v1/...), the surface the CLI
// and operators' tools use. Every call needs the admin token (header
// X-Stickyd-Token or Authorization: Bearer): missing → 401, wrong → 403.
// A read token (admin.read_token) opens the calls that only read, except
// those that hand out secrets (a raft snapshot holds the cookie keys).
// It holds no logic of its own: it decodes, calls the supervisor, encodes.
package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/monitor"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/supervisor"
	"github.com/stickyd/stickyd/plugins/worker/channel"
)

// Supervisor is what the API calls.
type Supervisor interface {
	// UsersPage is one page of the people q selects, by name
	// (fsm.FSM.UsersPage's contract).
	UsersPage(q fsm.UserQuery) fsm.UserPage
	// Tally counts the people by state, worker and group, without
	// listing them.
	Tally() fsm.UserTally
	User(user string) (placement.UserInfo, bool)
	Move(ctx context.Context, user, to, reason string) (move.Result, error)
	MoveToGroup(ctx context.Context, user, group, reason string) (move.Result, error)
	Drain(ctx context.Context, worker string, parallel int, progress func(move.Result, error)) (supervisor.DrainResult, error)
	ForgetUser(ctx context.Context, user string) (move.Forgotten, error)
}

// Config configures the API.
type Config struct {
	Token string
	// ReadToken, if set, is a token that may only read (GET and HEAD,
	// except readTokenRefused): for the monitor, dashboards, list
	// commands.
	ReadToken  string
	Supervisor Supervisor
	// Workers lists the workers for GET /v1/workers: the whole cluster's,
	// or (local, ?local=true) this agent's only.
	Workers func(ctx context.Context, local bool) any
	// Status describes the cluster for GET /v1/status (the CLI's status,
	// server members and operator raft list-peers read it).
	Status func() any
	// Events lists governance's recent decisions (GET /v1/events).
	Events   func() any
	Gatherer prometheus.Gatherer
	Logger   hclog.Logger
	// Groups, GroupsView and CheckGovernance serve the group, rule and job
	// routes (all three set, or none).
	Groups          Groups
	GroupsView      func() GroupsView
	CheckGovernance func(governance []byte) error
	// CheckBundle, if set, checks that a new group's bundle is in the
	// archive and verifies, and that interpreter ("": the bundle's own)
	// suits it; it returns the bundle's runtime (go-plugin or python3).
	CheckBundle func(ctx context.Context, digest, interpreter string) (string, error)
	// Monitor composes the whole pool's reading with the page of people q
	// selects (GET /v1/monitor); MonitorLocal this agent's part of it
	// (GET /v1/monitor/local), with the usage of the people q names.
	Monitor      func(ctx context.Context, q fsm.UserQuery) (any, error)
	MonitorLocal func(q LocalQuery) any
	// JobLog, if set, records jobs for every server (see JobLog);
	// AgentName names this agent in them.
	JobLog    JobLog
	AgentName string
	// Maintenance, if set, serves /v1/maintenance.
	Maintenance Maintenance
	// Extra, if set, adds routes; wrap gives a handler the API's token
	// check and error answers (an *Error sets the status).
	Extra func(mux *http.ServeMux, wrap func(func(http.ResponseWriter, *http.Request) error) http.HandlerFunc)
}

// Handler returns the API's handler.
func Handler(cfg Config) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	a := &server{cfg: cfg, jobs: &jobs{log: cfg.Logger.Named("jobs"), rec: cfg.JobLog, agent: cfg.AgentName}}
	mux := http.NewServeMux()
	if cfg.Maintenance != nil {
		a.maintenanceRoutes(mux)
	}
	if cfg.Extra != nil {
		cfg.Extra(mux, a.handle)
	}
	if cfg.Groups != nil && cfg.GroupsView != nil {
		a.groupRoutes(mux)
	}
	mux.HandleFunc("GET /v1/users", a.handle(a.listUsers))
	mux.HandleFunc("GET /v1/tally", a.handle(a.tally))
	mux.HandleFunc("GET /v1/users/{user}", a.handle(a.getUser))
	mux.HandleFunc("POST /v1/users/{user}/move", a.handle(a.moveUser))
	mux.HandleFunc("POST /v1/users/{user}/forget", a.handle(a.forgetUser))
	mux.HandleFunc("GET /v1/workers", a.handle(a.listWorkers))
	mux.HandleFunc("POST /v1/workers/{worker}/drain", a.handle(a.drain))
	if cfg.Events != nil {
		mux.HandleFunc("GET /v1/events", a.handle(func(w http.ResponseWriter, r *http.Request) error {
			writeJSON(w, http.StatusOK, cfg.Events())
			return nil
		}))
	}
	if cfg.Status != nil {
		mux.HandleFunc("GET /v1/status", a.handle(func(w http.ResponseWriter, r *http.Request) error {
			writeJSON(w, http.StatusOK, cfg.Status())
			return nil
		}))
	}
	if cfg.Gatherer != nil {
		metrics := promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{})
		mux.Handle("GET /v1/metrics", a.auth(metrics))
		// Prometheus scrapes /metrics without the admin token, by
		// convention; it shows counts, never a person's data.
		mux.Handle("GET /metrics", metrics)
	}
	if cfg.Monitor != nil {
		mux.HandleFunc("GET /v1/monitor", a.handle(func(w http.ResponseWriter, r *http.Request) error {
			q, err := userQuery(r)
			if err != nil {
				return err
			}
			v, err := cfg.Monitor(r.Context(), q)
			if err != nil {
				return err
			}
			writeJSON(w, http.StatusOK, v)
			return nil
		}))
	}
	if cfg.MonitorLocal != nil {
		mux.HandleFunc("GET /v1/monitor/local", a.handle(func(w http.ResponseWriter, r *http.Request) error {
			var q LocalQuery
			query := r.URL.Query()
			if names, ok := query["user"]; ok {
				q.Users = make(map[string]bool, len(names))
				for _, u := range names {
					if u != "" {
						q.Users[u] = true
					}
				}
			}
			if query.Has("changes") {
				q.Changes, q.Since = true, query.Get("changes")
			}
			writeJSON(w, http.StatusOK, cfg.MonitorLocal(q))
			return nil
		}))
	}
	mux.HandleFunc("/", a.handle(func(w http.ResponseWriter, r *http.Request) error {
		return &Error{Status: http.StatusNotFound, Message: fmt.Sprintf("no API route %s %s", r.Method, r.URL.Path)}
	}))
	return mux
}

// LocalQuery is what GET /v1/monitor/local asks for (the monitor's).
type LocalQuery = monitor.LocalQuery

type server struct {
	cfg  Config
	jobs *jobs
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// Error is an API failure: status and a message the caller may read.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string { return e.Message }

func (a *server) checkToken(r *http.Request) error {
	tok := r.Header.Get("X-Stickyd-Token")
	if tok == "" {
		tok, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	if tok == "" {
		return &Error{Status: http.StatusUnauthorized, Message: "missing admin token: set STICKYD_TOKEN or pass -token"}
	}
	if tokenEqual(tok, a.cfg.Token) {
		return nil
	}
	if tokenEqual(tok, a.cfg.ReadToken) {
		if (r.Method == http.MethodGet || r.Method == http.MethodHead) && !readTokenRefused(r.URL.Path) {
			return nil
		}
		return &Error{Status: http.StatusForbidden, Message: fmt.Sprintf("the read token may only read: %s %s needs the admin token", r.Method, r.URL.Path)}
	}
	return &Error{Status: http.StatusForbidden, Message: "wrong admin token"}
}

// readTokenRefused says a path the read token may not GET: what hands out
// secrets (a raft snapshot holds the cookie key ring) or serves agents.
func readTokenRefused(path string) bool {
	return strings.HasPrefix(path, "/v1/operator/snapshot") || strings.HasPrefix(path, "/v1/internal/")
}

// tokenEqual compares a candidate with the admin token in constant time,
// both hashed first so that not even the token's length leaks. An empty
// token matches nothing.
func tokenEqual(candidate, token string) bool {
	if token == "" {
		return false
	}
	a, b := sha256.Sum256([]byte(candidate)), sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

func (a *server) auth(h http.Handler) http.Handler {
	return a.handle(func(w http.ResponseWriter, r *http.Request) error {
		if err := a.checkToken(r); err != nil {
			return err
		}
		h.ServeHTTP(w, r)
		return nil
	})
}

func (a *server) handle(h func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := a.checkToken(r)
		if err == nil {
			err = h(w, r)
		}
		if err == nil {
			return
		}
		var ae *Error
		if !errors.As(err, &ae) {
			ae = &Error{Status: http.StatusInternalServerError, Message: err.Error()}
			a.cfg.Logger.Warn("admin call failed", "path", r.URL.Path, "error", err)
		}
		writeJSON(w, ae.Status, map[string]string{"error": ae.Message})
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// listUsers answers one page of people (monitor.ParseQuery's parameters)
// as a monitor.Page: {"users": [...], "next": cursor}, "next" absent after
// the last page. Bad parameters get 400 and what is wrong.
func (a *server) listUsers(w http.ResponseWriter, r *http.Request) error {
	q, err := userQuery(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, monitor.PageOf(a.cfg.Supervisor.UsersPage(q)))
	return nil
}

// tally answers the people's counts by state, worker and group.
func (a *server) tally(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, a.cfg.Supervisor.Tally())
	return nil
}

// userQuery reads a page query from r's parameters: a bad one is a 400.
func userQuery(r *http.Request) (fsm.UserQuery, error) {
	q, err := monitor.ParseQuery(r.URL.Query())
	if err != nil {
		return q, &Error{Status: http.StatusBadRequest, Message: err.Error()}
	}
	return q, nil
}

func (a *server) getUser(w http.ResponseWriter, r *http.Request) error {
	u, ok := a.cfg.Supervisor.User(r.PathValue("user"))
	if !ok {
		return &Error{Status: http.StatusNotFound, Message: fmt.Sprintf("no user %q", r.PathValue("user"))}
	}
	writeJSON(w, http.StatusOK, u)
	return nil
}

func (a *server) listWorkers(w http.ResponseWriter, r *http.Request) error {
	local := r.URL.Query().Get("local")
	writeJSON(w, http.StatusOK, a.cfg.Workers(r.Context(), local != "" && local != "false" && local != "0"))
	return nil
}

// MoveRequest is the body of POST /v1/users/{user}/move: exactly one of To
// (a worker) and Group.
type MoveRequest struct {
	To    string `json:"to,omitempty"`
	Group string `json:"group,omitempty"`
}

func (a *server) moveUser(w http.ResponseWriter, r *http.Request) error {
	var req MoveRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if (req.To == "") == (req.Group == "") {
		return &Error{Status: http.StatusBadRequest, Message: "give exactly one of \"to\" (a worker) and \"group\""}
	}
	user := r.PathValue("user")
	var (
		res move.Result
		err error
	)
	if req.To != "" {
		res, err = a.cfg.Supervisor.Move(r.Context(), user, req.To, "admin")
	} else {
		res, err = a.cfg.Supervisor.MoveToGroup(r.Context(), user, req.Group, "admin")
	}
	if err != nil {
		return moveErr(err)
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// forgetUser forgets a person at once: 404 for one the maps do not hold,
// 409 for one who is moving (try again when the move has settled).
func (a *server) forgetUser(w http.ResponseWriter, r *http.Request) error {
	res, err := a.cfg.Supervisor.ForgetUser(r.Context(), r.PathValue("user"))
	if err != nil {
		return moveErr(err)
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

func moveErr(err error) error {
	switch {
	case errors.Is(err, fsm.ErrNoUser), errors.Is(err, supervisor.ErrNoWorker), errors.Is(err, supervisor.ErrNoGroup):
		return &Error{Status: http.StatusNotFound, Message: err.Error()}
	case errors.Is(err, move.ErrBadDestination), errors.Is(err, supervisor.ErrNoDestination):
		return &Error{Status: http.StatusBadRequest, Message: err.Error()}
	case errors.Is(err, fsm.ErrBusy):
		return &Error{Status: http.StatusConflict, Message: err.Error()}
	case errors.Is(err, move.ErrRolledBack), errors.Is(err, move.ErrStateLost):
		return &Error{Status: http.StatusConflict, Message: err.Error()}
	}
	return err
}

// DrainProgress is one line of the NDJSON stream POST /v1/workers/{w}/drain
// answers with: one per move, then one with Done set.
type DrainProgress struct {
	Move  *move.Result            `json:"move,omitempty"`
	Error string                  `json:"error,omitempty"`
	Done  *supervisor.DrainResult `json:"done,omitempty"`
}

func (a *server) drain(w http.ResponseWriter, r *http.Request) error {
	parallel := 64 // people on the road at once; their entries are shared
	if p := r.URL.Query().Get("parallel"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 1024 {
			return &Error{Status: http.StatusBadRequest, Message: "parallel must be 1..1024"}
		}
		parallel = n
	}
	worker := r.PathValue("worker")
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	started := false
	res, err := a.cfg.Supervisor.Drain(r.Context(), worker, parallel, func(m move.Result, err error) {
		if !started {
			w.WriteHeader(http.StatusOK)
			started = true
		}
		p := DrainProgress{Move: &m}
		if err != nil {
			p.Error = err.Error()
		}
		_ = enc.Encode(p)
		if flusher != nil {
			flusher.Flush()
		}
	})
	if err != nil && !started {
		return moveErr(err)
	}
	if !started {
		w.WriteHeader(http.StatusOK)
	}
	done := DrainProgress{Done: &res}
	if err != nil {
		done.Error = err.Error()
	}
	_ = enc.Encode(done)
	return nil
}

func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &Error{Status: http.StatusBadRequest, Message: "decoding request: " + err.Error()}
	}
	return nil
}

// ClusterConfig configures the part of the API that serves before the agent
// is fully up: servers find each other and forward writes through it.
type ClusterConfig struct {
	Token string
	// Self describes this agent (GET /v1/agent/self).
	Self func() any
	// Apply applies a forwarded raft entry on the leader
	// (POST /v1/internal/apply); it returns the result, an HTTP status and
	// the error.
	Apply func(ctx context.Context, entry []byte) (result any, index uint64, status int, err error)
	// Park returns a parked package (GET /v1/internal/park/{digest}), for
	// an agent waking its owner elsewhere.
	Park func(digest string) ([]byte, error)
	// PutPark stores a package another agent hands over ahead of a wake
	// here (PUT /v1/internal/park/{digest}); it refuses one whose bytes
	// do not match digest.
	PutPark func(digest string, pkg []byte) error
	// Member adds a host to the raft configuration as a non-voter, or
	// removes a member (POST /v1/internal/members); it returns an HTTP
	// status and the error.
	Member func(ctx context.Context, req MemberRequest) (status int, err error)
	// Health answers GET /v1/agent/health, without the token (Consul and
	// Nomad checks call it): 200 when the agent is a working member of its
	// cluster, 503 and the reason otherwise.
	Health func() (ok bool, body any)
	// Rest returns the full API once the agent is ready, nil before: calls
	// then get 503.
	Rest   func() http.Handler
	Logger hclog.Logger
}

// MemberRequest asks the leader to add a host to the raft configuration as a
// non-voting member (Op "join") or to remove a member (Op "leave").
type MemberRequest struct {
	Op       string `json:"op"`
	Name     string `json:"name"`
	RaftAddr string `json:"raft_addr,omitempty"`
	// Voter asks for a voting member (a server) instead of a host.
	Voter bool `json:"voter,omitempty"`
}

// Cluster returns the admin API's handler for an agent that may still be
// starting.
func Cluster(cfg ClusterConfig) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	a := &server{cfg: Config{Token: cfg.Token, Logger: cfg.Logger}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/agent/self", a.handle(func(w http.ResponseWriter, r *http.Request) error {
		writeJSON(w, http.StatusOK, cfg.Self())
		return nil
	}))
	mux.HandleFunc("GET /v1/agent/health", func(w http.ResponseWriter, r *http.Request) {
		if cfg.Health == nil {
			writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
			return
		}
		ok, body := cfg.Health()
		status := http.StatusOK
		if !ok {
			status = http.StatusServiceUnavailable
		}
		writeJSON(w, status, body)
	})
	mux.HandleFunc("POST /v1/internal/apply", a.handle(func(w http.ResponseWriter, r *http.Request) error {
		entry, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<20))
		if err != nil {
			return &Error{Status: http.StatusBadRequest, Message: "reading entry: " + err.Error()}
		}
		res, index, status, err := cfg.Apply(r.Context(), entry)
		if err != nil {
			writeJSON(w, status, map[string]string{"error": err.Error(), "kind": fsm.ErrorKind(err)})
			return nil
		}
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]any{"result": json.RawMessage(b), "index": index})
		return nil
	}))
	mux.HandleFunc("POST /v1/internal/members", a.handle(func(w http.ResponseWriter, r *http.Request) error {
		var req MemberRequest
		if err := decode(r, &req); err != nil {
			return err
		}
		if req.Name == "" || (req.Op == "join" && req.RaftAddr == "") || (req.Op != "join" && req.Op != "leave") {
			return &Error{Status: http.StatusBadRequest, Message: `want {"op": "join"|"leave", "name": ..., "raft_addr": ... (join)}`}
		}
		if cfg.Member == nil {
			return &Error{Status: http.StatusNotImplemented, Message: "this agent does not manage members"}
		}
		if status, err := cfg.Member(r.Context(), req); err != nil {
			return &Error{Status: status, Message: err.Error()}
		}
		writeJSON(w, http.StatusOK, map[string]string{"result": req.Op + "ed"})
		return nil
	}))
	mux.HandleFunc("PUT /v1/internal/park/{digest}", a.handle(func(w http.ResponseWriter, r *http.Request) error {
		if cfg.PutPark == nil {
			return &Error{Status: http.StatusNotImplemented, Message: "this agent takes no packages"}
		}
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, channel.MaxEnvelopeBytes))
		if err != nil {
			return &Error{Status: http.StatusRequestEntityTooLarge, Message: "reading the package: " + err.Error()}
		}
		if err := cfg.PutPark(r.PathValue("digest"), b); err != nil {
			return &Error{Status: http.StatusBadRequest, Message: err.Error()}
		}
		writeJSON(w, http.StatusOK, map[string]string{"result": "stored"})
		return nil
	}))
	mux.HandleFunc("GET /v1/internal/park/{digest}", a.handle(func(w http.ResponseWriter, r *http.Request) error {
		b, err := cfg.Park(r.PathValue("digest"))
		if err != nil {
			return &Error{Status: http.StatusNotFound, Message: err.Error()}
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(b)
		return nil
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if h := cfg.Rest(); h != nil {
			h.ServeHTTP(w, r)
			return
		}
		a.handle(func(http.ResponseWriter, *http.Request) error {
			return &Error{Status: http.StatusServiceUnavailable, Message: "the agent is starting"}
		})(w, r)
	})
	return mux
}
