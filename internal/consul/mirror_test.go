package consul

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/stickyd/stickyd/internal/testagents"
)

var update = flag.Bool("update", false, "rewrite golden files")

// bigPlacement returns n users spread over 3 groups. Some names need
// escaping.
func bigPlacement(n int) Placement {
	p := Placement{Index: 100, Users: map[string]User{}, Groups: map[string]json.RawMessage{}}
	groups := []string{"alpha", "beta", "team/gamma"}
	for _, g := range groups {
		p.Groups[g] = json.RawMessage(fmt.Sprintf(`{"name":%q,"workers":3}`, g))
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("user-%04d", i)
		switch i % 100 {
		case 7:
			name = fmt.Sprintf("org/user %d", i) // "/" and " "
		case 8:
			name = fmt.Sprintf("ü%d?x=1#y", i)
		}
		p.Users[name] = User{
			Group:  groups[i%3],
			Worker: fmt.Sprintf("w%d", i%7),
			Host:   fmt.Sprintf("10.0.0.%d:7000", i%5),
			Epoch:  uint64(i),
			State:  "active",
		}
	}
	return p
}

// clone copies p so tests can change it.
func clone(p Placement) Placement {
	q := Placement{Index: p.Index, Users: map[string]User{}, Groups: map[string]json.RawMessage{}}
	for k, v := range p.Users {
		q.Users[k] = v
	}
	for k, v := range p.Groups {
		q.Groups[k] = v
	}
	return q
}

// expected returns the KV layout of p under "stickyd/", written out by
// hand rather than through the mirror's code.
func expected(t *testing.T, p Placement) map[string]string {
	t.Helper()
	want := map[string]string{"stickyd/placement/index": strconv.FormatUint(p.Index, 10)}
	for name, u := range p.Users {
		v := fmt.Sprintf(`{"group":%q,"worker":%q,"host":%q,"epoch":%d,"state":%q}`, u.Group, u.Worker, u.Host, u.Epoch, u.State)
		want["stickyd/placement/users/"+url.PathEscape(name)] = v
	}
	for name, g := range p.Groups {
		want["stickyd/groups/"+url.PathEscape(name)] = string(g)
	}
	return want
}

// readAll lists every key under "stickyd/" with its value and ModifyIndex.
func readAll(t *testing.T, agent *testagents.Consul) (map[string]string, map[string]uint64) {
	t.Helper()
	pairs, _, err := agent.Client().KV().List("stickyd/", nil)
	if err != nil {
		t.Fatalf("listing stickyd/: %v", err)
	}
	kv := map[string]string{}
	idx := map[string]uint64{}
	for _, p := range pairs {
		kv[p.Key] = string(p.Value)
		idx[p.Key] = p.ModifyIndex
	}
	return kv, idx
}

// compare fails the test unless got equals want exactly.
func compare(t *testing.T, got, want map[string]string) {
	t.Helper()
	var diffs []string
	for k, w := range want {
		if g, ok := got[k]; !ok {
			diffs = append(diffs, "missing "+k)
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("%s = %s; want %s", k, g, w))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, "unexpected "+k)
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 10 {
		diffs = append(diffs[:10], fmt.Sprintf("... and %d more", len(diffs)-10))
	}
	if len(diffs) > 0 {
		t.Fatalf("KV differs from the placement (%d keys, want %d):\n%s", len(got), len(want), strings.Join(diffs, "\n"))
	}
}

// withOperatorKeys adds the keys an operator owns to want.
func withOperatorKeys(want map[string]string) map[string]string {
	want["stickyd/maintenance/drain"] = "host-3"
	want["stickyd/placement/notes"] = "kept"
	return want
}

func putOperatorKeys(t *testing.T, agent *testagents.Consul) {
	t.Helper()
	for k, v := range withOperatorKeys(map[string]string{}) {
		if _, err := agent.Client().KV().Put(&api.KVPair{Key: k, Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMirrorPublish(t *testing.T) {
	agent := testagents.StartConsul(t)
	putOperatorKeys(t, agent)
	m := NewMirror(newClient(t, agent, ""))
	ctx := context.Background()

	p1 := bigPlacement(1000)
	if err := m.Publish(ctx, p1); err != nil {
		t.Fatalf("first publish: %v", err)
	}
	got, idx1 := readAll(t, agent)
	compare(t, got, withOperatorKeys(expected(t, p1)))

	// Change 10 users, remove 5 and a group.
	p2 := clone(p1)
	p2.Index = 250
	changed := map[string]bool{}
	var names []string
	for name := range p2.Users {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names[:10] {
		u := p2.Users[name]
		u.Host, u.Epoch, u.State = "10.9.9.9:7000", u.Epoch+1, "moving"
		p2.Users[name] = u
		changed["stickyd/placement/users/"+url.PathEscape(name)] = true
	}
	for _, name := range names[500:505] {
		delete(p2.Users, name)
	}
	delete(p2.Groups, "beta")
	if err := m.Publish(ctx, p2); err != nil {
		t.Fatalf("second publish: %v", err)
	}
	got, idx2 := readAll(t, agent)
	compare(t, got, withOperatorKeys(expected(t, p2)))

	// Only the changes were written, and the index after them.
	var rewritten []string
	var maxOther uint64
	for k, i := range idx2 {
		if k == "stickyd/placement/index" {
			continue
		}
		maxOther = max(maxOther, i)
		if i != idx1[k] && !changed[k] {
			rewritten = append(rewritten, k)
		}
	}
	if len(rewritten) > 0 {
		t.Errorf("unchanged keys rewritten: %v", rewritten)
	}
	if idx2["stickyd/placement/index"] < maxOther {
		t.Errorf("index key written at %d, before other keys (up to %d)", idx2["stickyd/placement/index"], maxOther)
	}

	// Publishing the same state again writes nothing.
	if err := m.Publish(ctx, p2); err != nil {
		t.Fatal(err)
	}
	if _, idx3 := readAll(t, agent); !equalIndexes(idx2, idx3) {
		t.Error("republishing the same placement wrote keys")
	}
}

func equalIndexes(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestMirrorCleansStale(t *testing.T) {
	agent := testagents.StartConsul(t)
	putOperatorKeys(t, agent)
	ctx := context.Background()

	// An earlier leader published a bigger placement.
	old := bigPlacement(300)
	if err := NewMirror(newClient(t, agent, "")).Publish(ctx, old); err != nil {
		t.Fatal(err)
	}
	// And left keys no placement has.
	for _, k := range []string{"stickyd/placement/users/ghost", "stickyd/placement/users/a/b", "stickyd/groups/gone"} {
		if _, err := agent.Client().KV().Put(&api.KVPair{Key: k, Value: []byte("{}")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	_, before := readAll(t, agent)

	// A new leader's fresh mirror publishes a smaller one.
	p := bigPlacement(100)
	p.Index = 900
	if err := NewMirror(newClient(t, agent, "")).Publish(ctx, p); err != nil {
		t.Fatal(err)
	}
	got, after := readAll(t, agent)
	compare(t, got, withOperatorKeys(expected(t, p)))

	// Keys whose value was already right were not rewritten.
	for k, i := range after {
		if strings.HasPrefix(k, "stickyd/placement/users/") && i != before[k] {
			t.Errorf("%s rewritten though its value was current", k)
		}
	}
}

func TestMirrorACL(t *testing.T) {
	const mgmt = "8c0e6c1a-51b4-4a8f-9b68-3d4b7fb1d0f2"
	agent := testagents.StartConsulACL(t, mgmt)
	ctx := context.Background()
	p := bigPlacement(1000)

	t.Run("no token", func(t *testing.T) {
		err := NewMirror(newClient(t, agent, "")).Publish(ctx, p)
		if err == nil || !strings.Contains(err.Error(), "Permission denied") {
			t.Fatalf("Publish without a token: %v; want permission denied", err)
		}
		t.Logf("error: %v", err)
	})

	t.Run("partial", func(t *testing.T) {
		// A token that may write users and groups but not the index: every
		// transaction but the last (which carries the index) applies.
		acl := agent.Client().ACL()
		policy, _, err := acl.PolicyCreate(&api.ACLPolicy{
			Name: "no-index",
			Rules: `key_prefix "stickyd/" { policy = "read" }
key_prefix "stickyd/placement/users/" { policy = "write" }
key_prefix "stickyd/groups/" { policy = "write" }`,
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		tok, _, err := acl.TokenCreate(&api.ACLToken{Policies: []*api.ACLTokenPolicyLink{{ID: policy.ID}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		m := NewMirror(newClient(t, agent, tok.SecretID))
		err = m.Publish(ctx, p)
		// 1000 users + 3 groups + the index = 1004 operations in 16
		// transactions of 64 (the last 44).
		want := "transaction 16 of 16"
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "960 of 1004 operations applied") {
			t.Fatalf("Publish with a token that cannot write the index: %v; want %q and 960 of 1004 applied", err, want)
		}
		t.Logf("error: %v", err)
	})

	t.Run("token", func(t *testing.T) {
		if err := NewMirror(newClient(t, agent, mgmt)).Publish(ctx, p); err != nil {
			t.Fatalf("Publish with the management token: %v", err)
		}
		got, _ := readAll(t, agent)
		compare(t, got, expected(t, p))
	})
}

// TestMirrorFailedPublishRecovers checks a Publish after a failed one
// converges: the mirror must not trust its record of what it wrote.
func TestMirrorFailedPublishRecovers(t *testing.T) {
	agent := testagents.StartConsul(t)
	ctx := context.Background()
	m := NewMirror(newClient(t, agent, ""))
	p1 := bigPlacement(200)
	if err := m.Publish(ctx, p1); err != nil {
		t.Fatal(err)
	}

	// Someone changes keys behind the mirror's back, then a Publish fails.
	if _, err := agent.Client().KV().DeleteTree("stickyd/placement/users/user-01", nil); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	p2 := clone(p1)
	p2.Index++
	delete(p2.Users, "user-0000")
	if err := m.Publish(cctx, p2); err == nil {
		t.Fatal("Publish with a canceled context succeeded")
	}

	// The next Publish lists Consul again and restores the deleted keys.
	if err := m.Publish(ctx, p2); err != nil {
		t.Fatal(err)
	}
	got, _ := readAll(t, agent)
	compare(t, got, expected(t, p2))
}

func TestMirrorRejectsBadInput(t *testing.T) {
	c, err := New(Config{Address: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]Placement{
		"empty user":  {Users: map[string]User{"": {}}},
		"empty group": {Groups: map[string]json.RawMessage{"": json.RawMessage(`{}`)}},
		"bad json":    {Groups: map[string]json.RawMessage{"g": json.RawMessage(`{`)}},
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			if err := NewMirror(c).Publish(context.Background(), p); err == nil {
				t.Fatal("Publish succeeded; want an error")
			}
		})
	}
}

func TestBatches(t *testing.T) {
	op := func(n int) *api.TxnOp {
		return &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: "k", Value: make([]byte, n)}}
	}
	cases := []struct {
		name  string
		ops   api.TxnOps
		sizes []int
	}{
		{"empty", nil, nil},
		{"one", api.TxnOps{op(1)}, []int{1}},
		{"64", repeat(op(1), 64), []int{64}},
		{"65", repeat(op(1), 65), []int{64, 1}},
		{"1004", repeat(op(1), 1004), []int{64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 44}},
		{"big values", repeat(op(100<<10), 5), []int{2, 2, 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var sizes []int
			for _, b := range batches(tc.ops) {
				sizes = append(sizes, len(b))
			}
			if fmt.Sprint(sizes) != fmt.Sprint(tc.sizes) {
				t.Errorf("batch sizes %v; want %v", sizes, tc.sizes)
			}
		})
	}
}

func repeat(op *api.TxnOp, n int) api.TxnOps {
	ops := make(api.TxnOps, n)
	for i := range ops {
		ops[i] = op
	}
	return ops
}

// TestOperatorView runs the real consul CLI an operator would use and
// compares its output with a golden file (-update rewrites it).
func TestOperatorView(t *testing.T) {
	agent := testagents.StartConsul(t)
	p := Placement{
		Index: 42,
		Users: map[string]User{
			"alice":       {Group: "chat", Worker: "w1", Host: "10.0.0.1:7000", Epoch: 3, State: "active"},
			"team/bob":    {Group: "chat", Worker: "w2", Host: "10.0.0.2:7000", Epoch: 1, State: "parked"},
			"carol smith": {Group: "docs", Worker: "w1", Host: "10.0.0.1:7000", Epoch: 7, State: "moving"},
		},
		Groups: map[string]json.RawMessage{
			"chat": json.RawMessage(`{"workers":2}`),
			"docs": json.RawMessage(`{"workers":1}`),
		},
	}
	if err := NewMirror(newClient(t, agent, "")).Publish(context.Background(), p); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	for _, prefix := range []string{"stickyd/placement", "stickyd/groups"} {
		cmd := exec.Command(testagents.Require(t, "consul"), "kv", "get", "-recurse", prefix)
		cmd.Env = agent.Env()
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("consul kv get -recurse %s: %v\n%s", prefix, err, b)
		}
		fmt.Fprintf(&out, "$ consul kv get -recurse %s\n%s", prefix, b)
	}

	golden := filepath.Join("testdata", "kv_get_recurse.golden")
	if *update {
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("reading golden file (run with -update to create it): %v", err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("consul kv get output differs from %s:\n--- got\n%s--- want\n%s", golden, out.Bytes(), want)
	}
}
