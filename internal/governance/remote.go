package governance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/host"
)

// Governance is the leader's, but a worker is its host's: a decision about
// another host's worker (cordon it for a drain or a replacement, retire it,
// start a worker of its group there) is carried out by that host's agent,
// which the leader asks with POST /v1/internal/govern/{op}. The route is
// authenticated as every /v1/internal route is (the admin token; the read
// token is refused) and acts only on this host's own workers.

// call is the body of POST /v1/internal/govern/{op}: Worker for cordon,
// uncordon and retire (with Reason), Group for start.
type call struct {
	Worker string `json:"worker,omitempty"`
	Group  string `json:"group,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// answer names the worker acted on (the new one for start).
type answer struct {
	Worker string `json:"worker"`
}

// Routes serves the calls of the leader's governance on mux; wrap is the
// admin API's (authentication, and an *api.Error's status).
func (e *Executor) Routes(mux *http.ServeMux, wrap func(func(http.ResponseWriter, *http.Request) error) http.HandlerFunc) {
	mux.HandleFunc("POST /v1/internal/govern/{op}", wrap(e.handle))
}

func (e *Executor) handle(w http.ResponseWriter, r *http.Request) error {
	var c call
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&c); err != nil {
		return &api.Error{Status: http.StatusBadRequest, Message: `want {"worker": "<id>", "group": "<name>", "reason": "<why>"}`}
	}
	op := r.PathValue("op")
	var ans answer
	var err error
	switch op {
	case "cordon", "uncordon", "retire":
		if c.Worker == "" {
			return &api.Error{Status: http.StatusBadRequest, Message: op + " needs a worker"}
		}
		ans.Worker = c.Worker
		if op == "retire" {
			err = e.retire(r.Context(), c.Worker, c.Reason)
		} else {
			err = e.cfg.Pool.Cordon(c.Worker, op == "cordon")
		}
	case "start":
		if c.Group == "" {
			return &api.Error{Status: http.StatusBadRequest, Message: "start needs a group"}
		}
		if !e.cfg.Pool.HasGroup(c.Group) {
			err = fmt.Errorf("starting a worker of %s: %w %q on %s", c.Group, host.ErrUnknownGroup, c.Group, e.cfg.Agent)
			break
		}
		ans.Worker, err = e.add(r.Context(), c.Group)
	default:
		return &api.Error{Status: http.StatusNotFound, Message: fmt.Sprintf("no governance call %q (cordon, uncordon, retire, start)", op)}
	}
	switch {
	case errors.Is(err, host.ErrUnknownWorker), errors.Is(err, host.ErrUnknownGroup):
		return &api.Error{Status: http.StatusNotFound, Message: err.Error()}
	case errors.Is(err, host.ErrNotEmpty):
		return &api.Error{Status: http.StatusConflict, Message: err.Error()}
	case err != nil:
		return &api.Error{Status: http.StatusInternalServerError, Message: err.Error()}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ans)
	return nil
}

// hostOf returns the admin address of the agent whose host runs worker, as
// the maps say, and its name.
func (e *Executor) hostOf(worker string) (name, admin string, ok bool) {
	for _, ag := range e.cfg.Maps.Agents() {
		if _, runs := ag.Workers[worker]; runs {
			return ag.Name, ag.AdminAddr, ag.AdminAddr != ""
		}
	}
	return "", "", false
}

// hostForStart returns another agent that runs group, the one with the
// fewest of its workers (by name on a tie), or false.
func (e *Executor) hostForStart(group string) (name, admin string, ok bool) {
	best := -1
	agents := e.cfg.Maps.Agents()
	sort.Slice(agents, func(i, j int) bool { return agents[i].Name < agents[j].Name })
	for _, ag := range agents {
		if ag.Name == e.cfg.Agent || ag.Draining || ag.AdminAddr == "" {
			continue
		}
		n := 0
		for _, grp := range ag.Workers {
			if grp == group {
				n++
			}
		}
		if n > 0 && (best < 0 || n < best) {
			best, name, admin, ok = n, ag.Name, ag.AdminAddr, true
		}
	}
	return name, admin, ok
}

// ask has the agent at admin carry out op (POST /v1/internal/govern/{op}).
func (e *Executor) ask(ctx context.Context, name, admin, op string, c call) (string, error) {
	body, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	var ans answer
	if err := e.cfg.Post(ctx, admin, "/v1/internal/govern/"+op, body, &ans); err != nil {
		return "", fmt.Errorf("asking %s to %s %s%s: %w", name, op, c.Worker, c.Group, err)
	}
	return ans.Worker, nil
}

// cordon cordons (on) or uncordons worker on whichever host runs it.
func (e *Executor) cordon(ctx context.Context, worker string, on bool) error {
	if e.local(worker) {
		return e.cfg.Pool.Cordon(worker, on)
	}
	name, admin, ok := e.hostOf(worker)
	if !ok {
		return fmt.Errorf("cordoning %s: %w: no host runs it", worker, host.ErrUnknownWorker)
	}
	op := "cordon"
	if !on {
		op = "uncordon"
	}
	_, err := e.ask(ctx, name, admin, op, call{Worker: worker})
	return err
}

// retireAnywhere retires worker on whichever host runs it; the leader's
// maps are asked first (they are the freshest).
func (e *Executor) retireAnywhere(ctx context.Context, worker, reason string) error {
	if e.local(worker) {
		return e.retire(ctx, worker, reason)
	}
	if users := e.cfg.Maps.UsersOf(worker); len(users) > 0 {
		return fmt.Errorf("retiring %s: %w: the maps still place %d users there", worker, host.ErrNotEmpty, len(users))
	}
	name, admin, ok := e.hostOf(worker)
	if !ok {
		return fmt.Errorf("retiring %s: %w: no host runs it", worker, host.ErrUnknownWorker)
	}
	_, err := e.ask(ctx, name, admin, "retire", call{Worker: worker, Reason: reason})
	return err
}

// start starts a worker of group: on the host of near when it is set (a
// replacement takes its old worker's place), else on this host when it runs
// the group, else on the other host running the fewest of it.
func (e *Executor) start(ctx context.Context, group, near string) (string, error) {
	if near != "" && !e.local(near) {
		if name, admin, ok := e.hostOf(near); ok {
			return e.ask(ctx, name, admin, "start", call{Group: group})
		}
	}
	if e.cfg.Pool.HasGroup(group) {
		return e.add(ctx, group)
	}
	name, admin, ok := e.hostForStart(group)
	if !ok {
		return "", fmt.Errorf("starting a worker of %s: %w: no host runs the group", group, host.ErrUnknownGroup)
	}
	return e.ask(ctx, name, admin, "start", call{Group: group})
}
