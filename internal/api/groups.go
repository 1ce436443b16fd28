package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/supervisor"
)

// Groups is what the group, rule and job routes call.
type Groups interface {
	PutGroup(ctx context.Context, g fsm.GroupEntry) error
	DeleteGroup(ctx context.Context, group string) error
	PutRule(ctx context.Context, r fsm.Rule) error
	DeleteRule(ctx context.Context, id string) error
	Promote(ctx context.Context, group, from string, parallel int, progress func(move.Result, error)) (supervisor.ReconcileResult, error)
	Rollback(ctx context.Context, parallel int, progress func(move.Result, error)) (string, supervisor.ReconcileResult, error)
	Misplaced(only func(u placement.UserInfo, group string) bool) []placement.UserInfo
	Reconcile(ctx context.Context, users []placement.UserInfo, parallel int, reason string, progress func(move.Result, error)) (supervisor.ReconcileResult, error)
	DefaultGroup() string
}

// GroupInfo is a group as GET /v1/groups shows it.
type GroupInfo struct {
	fsm.GroupEntry
	// Source is "catalog" (created through the API, run by every agent) or
	// "config" (an agent's configuration file).
	Source string `json:"source"`
	// Workers lists the group's workers known to this agent.
	WorkerIDs []string `json:"worker_ids"`
	// Ready counts those that can take people now: this agent's ready
	// workers and those other agents registered (not on their way down).
	Ready   int  `json:"ready"`
	Users   int  `json:"users"`
	Default bool `json:"default,omitempty"`
	// Previous marks the group a rollback returns to.
	Previous bool `json:"previous,omitempty"`
}

// GroupsView is GET /v1/groups: the groups, the rules and the jobs.
type GroupsView struct {
	Default string      `json:"default"`
	Groups  []GroupInfo `json:"groups"`
	Rules   []fsm.Rule  `json:"rules"`
	Jobs    []Job       `json:"jobs"`
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

func (a *server) groupRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/groups", a.handle(func(w http.ResponseWriter, r *http.Request) error {
		v := a.cfg.GroupsView()
		v.Jobs = a.jobs.list()
		writeJSON(w, http.StatusOK, v)
		return nil
	}))
	mux.HandleFunc("GET /v1/groups/{group}", a.handle(func(w http.ResponseWriter, r *http.Request) error {
		name := r.PathValue("group")
		v := a.cfg.GroupsView()
		for _, g := range v.Groups {
			if g.Name == name {
				var jobs []Job
				for _, j := range a.jobs.list() {
					if j.Group == name || j.From == name {
						jobs = append(jobs, j)
					}
				}
				writeJSON(w, http.StatusOK, map[string]any{"group": g, "jobs": jobs})
				return nil
			}
		}
		return &Error{Status: http.StatusNotFound, Message: fmt.Sprintf("no group %q", name)}
	}))
	mux.HandleFunc("PUT /v1/groups/{group}", a.handle(a.putGroup))
	mux.HandleFunc("DELETE /v1/groups/{group}", a.handle(func(w http.ResponseWriter, r *http.Request) error {
		if err := a.cfg.Groups.DeleteGroup(r.Context(), r.PathValue("group")); err != nil {
			return groupErr(err)
		}
		writeJSON(w, http.StatusOK, map[string]string{"retired": r.PathValue("group")})
		return nil
	}))
	mux.HandleFunc("POST /v1/groups/{group}/promote", a.handle(func(w http.ResponseWriter, r *http.Request) error {
		parallel, err := parallelParam(r)
		if err != nil {
			return err
		}
		group, from := r.PathValue("group"), r.URL.Query().Get("from")
		j := a.jobs.start("promote", group, from, func(ctx context.Context, progress func(move.Result, error)) (supervisor.ReconcileResult, error) {
			return a.cfg.Groups.Promote(ctx, group, from, parallel, progress)
		})
		return a.answerJob(w, r, j)
	}))
	mux.HandleFunc("POST /v1/rollback", a.handle(func(w http.ResponseWriter, r *http.Request) error {
		parallel, err := parallelParam(r)
		if err != nil {
			return err
		}
		from := a.cfg.Groups.DefaultGroup()
		j := a.jobs.start("rollback", "", from, func(ctx context.Context, progress func(move.Result, error)) (supervisor.ReconcileResult, error) {
			_, res, err := a.cfg.Groups.Rollback(ctx, parallel, progress)
			return res, err
		})
		return a.answerJob(w, r, j)
	}))
	mux.HandleFunc("GET /v1/rules", a.handle(func(w http.ResponseWriter, r *http.Request) error {
		writeJSON(w, http.StatusOK, a.cfg.GroupsView().Rules)
		return nil
	}))
	mux.HandleFunc("PUT /v1/rules/{id}", a.handle(a.putRule))
	mux.HandleFunc("DELETE /v1/rules/{id}", a.handle(func(w http.ResponseWriter, r *http.Request) error {
		parallel, err := parallelParam(r)
		if err != nil {
			return err
		}
		if err := a.cfg.Groups.DeleteRule(r.Context(), r.PathValue("id")); err != nil {
			return &Error{Status: http.StatusNotFound, Message: err.Error()}
		}
		return a.answerJob(w, r, a.assignJob(parallel))
	}))
	mux.HandleFunc("GET /v1/jobs", a.handle(func(w http.ResponseWriter, r *http.Request) error {
		writeJSON(w, http.StatusOK, a.jobs.list())
		return nil
	}))
	mux.HandleFunc("GET /v1/jobs/{id}", a.handle(func(w http.ResponseWriter, r *http.Request) error {
		j := a.jobs.get(r.PathValue("id"))
		if j == nil && a.jobs.rec != nil {
			// Another server runs it: its recorded state.
			if rec, ok := a.jobs.rec.Job(r.PathValue("id")); ok {
				if r.URL.Query().Get("follow") != "" {
					a.jobs.followRecorded(w, r, rec.ID)
					return nil
				}
				writeJSON(w, http.StatusOK, rec)
				return nil
			}
		}
		if j == nil {
			return &Error{Status: http.StatusNotFound, Message: fmt.Sprintf("no job %q", r.PathValue("id"))}
		}
		if r.URL.Query().Get("follow") != "" {
			j.follow(w, r)
			return nil
		}
		writeJSON(w, http.StatusOK, j.snapshot())
		return nil
	}))
}

// answerJob answers a call that started a job: with ?detach=true at once
// (202 and the job), else by following it (an NDJSON stream of its moves,
// then the job when done).
func (a *server) answerJob(w http.ResponseWriter, r *http.Request, j *job) error {
	if d := r.URL.Query().Get("detach"); d != "" && d != "false" && d != "0" {
		writeJSON(w, http.StatusAccepted, j.snapshot())
		return nil
	}
	j.follow(w, r)
	return nil
}

// assignJob moves everyone whose group is not the one the rules (or the
// default) give them.
func (a *server) assignJob(parallel int) *job {
	return a.jobs.start("assign", "", "", func(ctx context.Context, progress func(move.Result, error)) (supervisor.ReconcileResult, error) {
		return a.cfg.Groups.Reconcile(ctx, a.cfg.Groups.Misplaced(nil), parallel, "assign", progress)
	})
}

func parallelParam(r *http.Request) (int, error) {
	p := r.URL.Query().Get("parallel")
	if p == "" {
		return 8, nil
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 256 {
		return 0, &Error{Status: http.StatusBadRequest, Message: "parallel must be 1..256"}
	}
	return n, nil
}

// GroupRequest is the body of PUT /v1/groups/{group}: exactly one of Bundle,
// Command and Builtin. With Runtime "python3", Command is a WSGI application
// as MODULE:CALLABLE, run by stickyd's Python worker.
type GroupRequest struct {
	Runtime string `json:"runtime,omitempty"`
	// Interpreter is the Python of a "python3" group: a path or a name on
	// each agent's PATH ("": /usr/bin/python3).
	Interpreter string            `json:"interpreter,omitempty"`
	Bundle      string            `json:"bundle,omitempty"`
	Command     string            `json:"command,omitempty"`
	Args        []string          `json:"args,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Builtin     string            `json:"builtin,omitempty"`
	Workers     int               `json:"workers,omitempty"`
	MemoryMaxMB int               `json:"memory_max_mb,omitempty"`
	Governance  map[string]any    `json:"governance,omitempty"`
	// Limits bound the group's people's pages (0s: the SDK's defaults).
	Limits *fsm.GroupLimits `json:"limits,omitempty"`
}

func (a *server) putGroup(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("group")
	if !nameRE.MatchString(name) {
		return &Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("group name %q: use 1-63 of a-z 0-9 _ -, starting with a letter or digit", name)}
	}
	var req GroupRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	explicit := req.Runtime // as asked, before the defaults
	set := 0
	for _, s := range []string{req.Bundle, req.Command, req.Builtin} {
		if s != "" {
			set++
		}
	}
	if set != 1 {
		return &Error{Status: http.StatusBadRequest, Message: "give exactly one of \"bundle\", \"command\" and \"builtin\""}
	}
	switch {
	case req.Runtime == "" && req.Builtin != "":
		req.Runtime = "builtin"
	case req.Runtime == "":
		req.Runtime = "go-plugin"
	case req.Runtime == "python3" && req.Command == "" && req.Bundle == "":
		// The Python worker hosts a WSGI app: command (or a bundle's
		// manifest) names it.
		return &Error{Status: http.StatusBadRequest, Message: "runtime \"python3\": give \"command\", the WSGI application as MODULE:CALLABLE, or a python3 bundle"}
	case req.Runtime != "go-plugin" && req.Runtime != "builtin" && req.Runtime != "python3":
		return &Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("runtime %q: this agent runs \"go-plugin\", \"builtin\" and \"python3\"", req.Runtime)}
	}
	if req.Interpreter != "" && req.Runtime != "python3" && req.Bundle == "" {
		return &Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("interpreter %q is for runtime \"python3\" (a %s worker is its own binary)", req.Interpreter, req.Runtime)}
	}
	if req.Workers == 0 {
		req.Workers = 1
	}
	if req.Workers < 1 || req.Workers > 64 || req.MemoryMaxMB < 0 {
		return &Error{Status: http.StatusBadRequest, Message: "workers must be 1..64 and memory_max_mb not negative"}
	}
	if l := req.Limits; l != nil {
		if l.MaxPageBytes < 0 || l.MaxPersonBytes < 0 || l.MaxPagesPerConn < 0 || l.MaxPagesPerPerson < 0 {
			return &Error{Status: http.StatusBadRequest, Message: "limits must not be negative (0 for the SDK's defaults)"}
		}
		if *l == (fsm.GroupLimits{}) {
			req.Limits = nil
		}
	}
	for _, g := range a.cfg.GroupsView().Groups {
		if g.Name == name {
			return &Error{Status: http.StatusConflict, Message: fmt.Sprintf("group %q exists (%s); retire it first", name, g.Source)}
		}
	}
	if req.Bundle != "" && a.cfg.CheckBundle != nil {
		// The bundle's manifest says what runs it.
		rt, err := a.cfg.CheckBundle(r.Context(), req.Bundle, req.Interpreter)
		if err != nil {
			return &Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("bundle %s: %v", req.Bundle, err)}
		}
		if explicit != "" && explicit != rt {
			return &Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("bundle %s is a %s bundle, not %s", req.Bundle, rt, explicit)}
		}
		req.Runtime = rt
	}
	e := fsm.GroupEntry{Name: name, Runtime: req.Runtime, Interpreter: req.Interpreter, Bundle: req.Bundle, Command: req.Command, Args: req.Args,
		Env: req.Env, Builtin: req.Builtin, Workers: req.Workers, MemoryMaxMB: req.MemoryMaxMB, Limits: req.Limits}
	if req.Governance != nil {
		b, err := jsonMarshal(req.Governance)
		if err != nil {
			return &Error{Status: http.StatusBadRequest, Message: "governance: " + err.Error()}
		}
		if a.cfg.CheckGovernance != nil {
			if err := a.cfg.CheckGovernance(b); err != nil {
				return &Error{Status: http.StatusBadRequest, Message: "governance: " + err.Error()}
			}
		}
		e.Governance = b
	}
	if err := a.cfg.Groups.PutGroup(r.Context(), e); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, e)
	return nil
}

// RuleRequest is the body of PUT /v1/rules/{id}: a group, and a user or an
// attribute with its value.
type RuleRequest struct {
	Group string `json:"group"`
	User  string `json:"user,omitempty"`
	Attr  string `json:"attr,omitempty"`
	Value string `json:"value,omitempty"`
}

// RuleAnswer is what PUT /v1/rules/{id} answers: the rule, and the job
// moving the people it concerns (with ?detach=true; else the job's stream).
type RuleAnswer struct {
	Rule fsm.Rule `json:"rule"`
	Job  Job      `json:"job"`
}

func (a *server) putRule(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if !nameRE.MatchString(id) {
		return &Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("rule id %q: use 1-63 of a-z 0-9 _ -", id)}
	}
	parallel, err := parallelParam(r)
	if err != nil {
		return err
	}
	var req RuleRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.Group == "" || (req.User == "") == (req.Attr == "") {
		return &Error{Status: http.StatusBadRequest, Message: "a rule needs a group, and exactly one of \"user\" and \"attr\" (with \"value\")"}
	}
	rule := fsm.Rule{ID: id, Group: req.Group, User: req.User, Attr: req.Attr, Value: req.Value}
	if err := a.cfg.Groups.PutRule(r.Context(), rule); err != nil {
		return groupErr(err)
	}
	return a.answerJob(w, r, a.assignJob(parallel))
}

func groupErr(err error) error {
	switch {
	case errors.Is(err, supervisor.ErrNoGroup):
		return &Error{Status: http.StatusNotFound, Message: err.Error()}
	case errors.Is(err, fsm.ErrGroupInUse):
		return &Error{Status: http.StatusConflict, Message: err.Error()}
	case errors.Is(err, supervisor.ErrNothingToRollBack):
		return &Error{Status: http.StatusConflict, Message: err.Error()}
	}
	return err
}
