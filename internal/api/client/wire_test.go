package client_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/api/client"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/governor"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/monitor"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/raftnode"
	"github.com/stickyd/stickyd/internal/supervisor"
)

// The client's wire types are copies of the server's, so that a client of
// the API does not link the agent. These tests keep the copies true: for
// every type, a value of the server's with every field set (and a zero one)
// is encoded as the server encodes it, decoded into the client's type
// refusing unknown keys, encoded again, and must give the same JSON: no
// key the server sends is missing, none is added, no value is read as
// another type, and omitempty/omitzero agree.

// wirePairs are the server's answer types and the client's copies.
var wirePairs = []struct {
	name           string
	server, client any // pointers to zero values
}{
	{"status", &agent.Status{}, &client.Status{}},
	{"raft peer", &raftnode.Peer{}, &client.Peer{}},
	{"worker", &host.WorkerInfo{}, &client.Worker{}},
	{"worker end", &host.End{}, &client.WorkerEnd{}},
	{"user", &placement.UserInfo{}, &client.User{}},
	{"users page", &monitor.Page{}, &client.UsersPage{}},
	{"user tally", &fsm.UserTally{}, &client.UserTally{}},
	{"move", &move.Result{}, &client.Move{}},
	{"forgotten", &move.Forgotten{}, &client.Forgotten{}},
	{"drain progress", &api.DrainProgress{}, &client.DrainProgress{}},
	{"drain result", &supervisor.DrainResult{}, &client.DrainResult{}},
	{"group recipe", &fsm.GroupEntry{}, &client.GroupRecipe{}},
	{"group limits", &fsm.GroupLimits{}, &client.GroupLimits{}},
	{"group", &api.GroupInfo{}, &client.Group{}},
	{"groups view", &api.GroupsView{}, &client.GroupsView{}},
	{"rule", &fsm.Rule{}, &client.Rule{}},
	{"job", &api.Job{}, &client.Job{}},
	{"job progress", &api.JobProgress{}, &client.JobProgress{}},
	{"maintenance window", &monitor.Window{}, &client.MaintenanceWindow{}},
	{"monitor view", &monitor.View{}, &client.MonitorView{}},
	{"monitor worker", &monitor.Worker{}, &client.MonitorWorker{}},
	{"monitor person", &monitor.Person{}, &client.MonitorPerson{}},
	{"monitor tenant", &monitor.TenantCost{}, &client.MonitorTenant{}},
	{"sample", &monitor.Sample{}, &client.Sample{}},
	{"event", &governor.Event{}, &client.Event{}},
	{"gateway usage", &gateway.UsageAnswer{}, &client.GatewayUsage{}},
	{"gateway counters", &gateway.Counters{}, &client.GatewayCounters{}},
	{"gateway tally", &gateway.Tally{}, &client.GatewayTally{}},
	{"gateway account", &gateway.Account{}, &client.GatewayAccount{}},
	{"gateway key", &gateway.APIKey{}, &client.GatewayKey{}},
	{"gateway new key", &gateway.NewKey{}, &client.GatewayNewKey{}},
	{"gateway keys", &gateway.KeyList{}, &client.GatewayKeyList{}},
	{"gateway tenant", &gateway.Tenant{}, &client.GatewayTenant{}},
	{"gateway tenants", &gateway.TenantList{}, &client.GatewayTenantList{}},
	{"token usage", &gateway.Usage{}, &client.TokenUsage{}},
	{"model health", &gateway.ModelHealth{}, &client.ModelHealth{}},
	{"slot stats", &gateway.SlotStats{}, &client.SlotStats{}},
	{"deployment health", &gateway.HealthState{}, &client.DeploymentHealth{}},
	{"keyring", &agent.Keyring{}, &client.Keyring{}},
	{"keyring key", &agent.KeyringKey{}, &client.KeyringKey{}},
	{"teardown step", &agent.TeardownStep{}, &client.TeardownStep{}},
}

func TestAnswersMatchTheServer(t *testing.T) {
	for _, p := range wirePairs {
		t.Run(p.name, func(t *testing.T) {
			for _, full := range []bool{true, false} {
				server := reflect.New(reflect.TypeOf(p.server).Elem())
				if full {
					fill(server.Elem(), p.name, 0)
				}
				sameJSON(t, full, server.Interface(), reflect.TypeOf(p.client).Elem())
			}
		})
	}
}

// requestPairs are the bodies the client sends and the server's types for
// them: the same check, the other way.
var requestPairs = []struct {
	name           string
	client, server any
}{
	{"move", &client.MoveRequest{}, &api.MoveRequest{}},
	{"group", &client.GroupRequest{}, &api.GroupRequest{}},
	{"rule", &client.RuleRequest{}, &api.RuleRequest{}},
	{"maintenance", &client.MaintenanceRequest{}, &api.MaintenanceRequest{}},
	{"gateway key", &client.GatewayKeyRequest{}, &gateway.KeyRequest{}},
	{"gateway tenant", &client.GatewayTenant{}, &gateway.Tenant{}},
	{"gateway tenant patch", &client.GatewayAllowancePatch{}, &gateway.AllowancePatch{}},
}

func TestRequestsMatchTheServer(t *testing.T) {
	for _, p := range requestPairs {
		t.Run(p.name, func(t *testing.T) {
			for _, full := range []bool{true, false} {
				c := reflect.New(reflect.TypeOf(p.client).Elem())
				if full {
					fill(c.Elem(), p.name, 0)
				}
				sameJSON(t, full, c.Interface(), reflect.TypeOf(p.server).Elem())
			}
		})
	}
}

// The words the API answers with, which the client names again.
func TestConstantsMatchTheServer(t *testing.T) {
	pairs := []struct{ client, server any }{
		{client.WorkerStarting, host.StateStarting},
		{client.WorkerReady, host.StateReady},
		{client.WorkerDead, host.StateDead},
		{client.WorkerRefused, host.StateRefused},
		{client.WorkerStopped, host.StateStopped},
		{client.WorkerRetired, host.StateRetired},
		{client.WorkerUnreachable, monitor.StateUnreachable},
		{client.UserLive, placement.StateLive},
		{client.UserMoving, placement.StateMoving},
		{client.UserParked, placement.StateParked},
		{client.MoveMoved, move.Moved},
		{client.MoveRolledBack, move.RolledBack},
		{client.MoveStateLost, move.StateLost},
		{client.MoveFailed, move.Failed},
		{client.DefaultPageLimit, monitor.DefaultLimit},
		{client.MaxPageLimit, monitor.MaxLimit},
	}
	for _, p := range pairs {
		if fmt.Sprint(p.client) != fmt.Sprint(p.server) {
			t.Errorf("the client says %v where the server says %v", p.client, p.server)
		}
	}
}

// sameJSON encodes from, decodes it into a new value of to (refusing keys
// to lacks), encodes that again and compares the two encodings.
func sameJSON(t *testing.T, full bool, from any, to reflect.Type) {
	t.Helper()
	what := "a zero value"
	if full {
		what = "a value with every field set"
	}
	sent, err := json.Marshal(from)
	if err != nil {
		t.Fatalf("%s: encoding %T: %v", what, from, err)
	}
	got := reflect.New(to)
	dec := json.NewDecoder(bytes.NewReader(sent))
	dec.DisallowUnknownFields()
	if err := dec.Decode(got.Interface()); err != nil {
		t.Fatalf("%s: %T does not take %T's JSON: %v\n%s", what, got.Interface(), from, err, sent)
	}
	again, err := json.Marshal(got.Interface())
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if err := json.Unmarshal(sent, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(again, &b); err != nil {
		t.Fatal(err)
	}
	if diffs := jsonDiff("", a, b); len(diffs) > 0 {
		t.Errorf("%s: %T and %T disagree:\n  %s\n%T: %s\n%T: %s", what, from, got.Interface(), strings.Join(diffs, "\n  "), from, sent, got.Interface(), again)
	}
}

// jsonDiff lists where two decoded JSON values differ, by path.
func jsonDiff(path string, a, b any) []string {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		var out []string
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		slices.Sort(sorted)
		for _, k := range sorted {
			av, ain := am[k]
			bv, bin := bm[k]
			switch {
			case !bin:
				out = append(out, fmt.Sprintf("%s.%s: sent, not read back", path, k))
			case !ain:
				out = append(out, fmt.Sprintf("%s.%s: not sent, but written by the copy", path, k))
			default:
				out = append(out, jsonDiff(path+"."+k, av, bv)...)
			}
		}
		return out
	}
	as, aok := a.([]any)
	bs, bok := b.([]any)
	if aok && bok && len(as) == len(bs) {
		var out []string
		for i := range as {
			out = append(out, jsonDiff(fmt.Sprintf("%s[%d]", path, i), as[i], bs[i])...)
		}
		return out
	}
	if !reflect.DeepEqual(a, b) {
		return []string{fmt.Sprintf("%s: sent %v, read back as %v", path, a, b)}
	}
	return nil
}

// at is the time every time field is set to: nanoseconds and a zone, so
// that a copy that drops either shows.
var at = time.Date(2026, 5, 4, 3, 2, 1, 123456789, time.FixedZone("x", 3600))

// fill sets every exported field of v to a value that is not its zero:
// one element in a slice, one key in a map, seed in strings, so that every
// key is sent whatever its omitempty.
func fill(v reflect.Value, seed string, depth int) {
	if depth > 8 {
		return
	}
	switch v.Type() {
	case reflect.TypeOf(time.Time{}):
		v.Set(reflect.ValueOf(at))
		return
	case reflect.TypeOf(json.RawMessage(nil)):
		v.Set(reflect.ValueOf(json.RawMessage(`{"k":"` + seed + `"}`)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(seed)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), seed, depth+1)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), seed, depth+1)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k := reflect.New(v.Type().Key()).Elem()
		fill(k, "key", depth+1)
		e := reflect.New(v.Type().Elem()).Elem()
		fill(e, seed, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Interface:
		if v.NumMethod() == 0 {
			v.Set(reflect.ValueOf(seed))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				fill(v.Field(i), seed, depth+1)
			}
		}
	}
}
