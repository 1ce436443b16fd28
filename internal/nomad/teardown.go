package nomad

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/fsm"
)

// The tear-down (stickyd operator teardown, docs/deploy-nomad.md) takes a
// deployment apart in the order that leaves nothing behind: it is
// recorded in the log first (no leader registers a group job or publishes
// the registry again), then every group job is stopped and purged with its
// Nomad variable and its allocations waited for, then the Consul prefix
// is emptied. The servers' own job is stopped last, by the CLI.

// teardownWait bounds waiting for the group jobs' allocations to stop:
// each host parks its people within its kill timeout first.
const teardownWait = 3 * time.Minute

// TeardownStep is one line of a tear-down's progress (NDJSON).
type TeardownStep struct {
	Step   string `json:"step"`
	Detail string `json:"detail,omitempty"`
	Error  string `json:"error,omitempty"`
	Done   bool   `json:"done,omitempty"`
}

// Routes serves POST /v1/operator/teardown on mux, the handler wrapped by
// wrap (the admin API's errors and token). A follower forwards it to the
// leader; the leader answers with its progress, one TeardownStep a line.
func (k *Keeper) Routes(mux *http.ServeMux, wrap func(func(http.ResponseWriter, *http.Request) error) http.HandlerFunc) {
	mux.HandleFunc("POST /v1/operator/teardown", wrap(k.teardownHandler))
}

func (k *Keeper) teardownHandler(w http.ResponseWriter, r *http.Request) error {
	if !k.cfg.Log.IsLeader() {
		return k.forwardStream(w, r, "/v1/operator/teardown")
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	say := func(s TeardownStep) {
		_ = enc.Encode(s)
		if flusher != nil {
			flusher.Flush()
		}
	}
	err := k.Teardown(r.Context(), func(step, detail string) { say(TeardownStep{Step: step, Detail: detail}) })
	if err != nil {
		say(TeardownStep{Step: "failed", Error: err.Error()})
		return nil
	}
	say(TeardownStep{Step: "done", Done: true})
	return nil
}

// Teardown runs the leader's part of a tear-down, telling progress each
// step. It may be run again after a failure: every step is idempotent.
func (k *Keeper) Teardown(ctx context.Context, progress func(step, detail string)) error {
	entry, err := fsm.Encode(fsm.TeardownRequestType, fsm.TeardownRequest{Since: time.Now().UTC()})
	if err != nil {
		return err
	}
	if _, err := k.cfg.Log.Apply(ctx, entry); err != nil {
		return fmt.Errorf("recording the tear-down: %w", err)
	}
	progress("recorded", "no leader registers a group job or writes the registry from now on")
	if k.cfg.API != nil {
		client, err := k.client()
		if err != nil {
			return fmt.Errorf("connecting to Nomad: %w", err)
		}
		groups, err := Jobs(ctx, client)
		if err != nil {
			return err
		}
		for _, g := range groups {
			if err := Deregister(ctx, client, g, true); err != nil {
				return err
			}
			if err := DeleteSecrets(ctx, client, g); err != nil {
				return err
			}
			progress("stopped", JobID(g)+" (purged, with its variable)")
		}
		if err := waitGroupAllocs(ctx, client, progress); err != nil {
			return err
		}
	}
	if c := k.cfg.Consul(); c != nil {
		if err := c.DeleteAll(ctx); err != nil {
			return err
		}
		progress("emptied", "consul kv "+c.Prefix())
	}
	return nil
}

// waitGroupAllocs waits until no allocation of a group job is pending or
// running, telling how many are left every few seconds.
func waitGroupAllocs(ctx context.Context, client *nomadapi.Client, progress func(step, detail string)) error {
	deadline := time.Now().Add(teardownWait)
	told := time.Time{}
	for {
		q := (&nomadapi.QueryOptions{Prefix: ""}).WithContext(ctx)
		allocs, _, err := client.Allocations().List(q)
		if err != nil {
			return fmt.Errorf("listing allocations: %w", err)
		}
		var live []string
		for _, al := range allocs {
			if strings.HasPrefix(al.JobID, JobPrefix) && (al.ClientStatus == "pending" || al.ClientStatus == "running") {
				live = append(live, al.Name)
			}
		}
		if len(live) == 0 {
			progress("stopped", "every group host")
			return nil
		}
		if time.Since(told) > 5*time.Second {
			progress("waiting", fmt.Sprintf("%d group hosts still stopping: %s", len(live), strings.Join(live, ", ")))
			told = time.Now()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d group hosts still running after %s: %s", len(live), teardownWait, strings.Join(live, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// forwardStream sends an operator call to the leader and copies its
// answer as it comes.
func (k *Keeper) forwardStream(w http.ResponseWriter, r *http.Request, path string) error {
	admin := k.cfg.LeaderAdmin(r.Context())
	if admin == "" {
		return &api.Error{Status: http.StatusServiceUnavailable, Message: "no leader known yet; retry"}
	}
	req, err := k.cfg.Remote.AdminRequest(r.Context(), http.MethodPost, admin, path, nil)
	if err != nil {
		return err
	}
	// No client timeout: the leader's answer streams until it is done.
	resp, err := k.cfg.Remote.StreamClient().Do(req)
	if err != nil {
		return &api.Error{Status: http.StatusBadGateway, Message: "asking the leader: " + err.Error()}
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
			if flusher != nil {
				flusher.Flush()
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return nil // the answer was cut; the caller sees no "done"
		}
	}
}
