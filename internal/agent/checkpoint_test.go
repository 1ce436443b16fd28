package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/stickyd/stickyd/internal/fsm"
)

func TestCheckpointInterval(t *testing.T) {
	tests := []struct {
		name, setting string
		want          time.Duration
		err           bool
	}{
		{"default", "", DefaultCheckpointInterval, false},
		{"off", "off", 0, false},
		{"zero", "0s", 0, false},
		{"bare zero", "0", 0, false},
		{"set", "1500ms", 1500 * time.Millisecond, false},
		{"too often", "10ms", 0, true},
		{"negative", "-1s", 0, true},
		{"not a duration", "often", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "group \"web\" {\n  builtin = \"demo\"\n"
			if tt.setting != "" {
				src += "  checkpoint_interval = \"" + tt.setting + "\"\n"
			}
			src += "}\n"
			c, err := ParseConfig("test.hcl", []byte(src))
			if tt.err {
				if err == nil || !strings.Contains(err.Error(), "checkpoint_interval") {
					t.Fatalf("%q accepted, or refused without saying why: %v", tt.setting, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			a := &Agent{cfg: c}
			if got := a.checkpointInterval("web"); got != tt.want {
				t.Fatalf("interval %v, want %v", got, tt.want)
			}
		})
	}
	// A catalog group (no block here) checkpoints at the default.
	if got := (&Agent{cfg: &Config{}}).checkpointInterval("catalog"); got != DefaultCheckpointInterval {
		t.Fatalf("a catalog group's interval: %v", got)
	}
}

// The journal keeps one whole record per worker; a removed one is gone, and
// a write a crash cut short is neither read nor left behind.
func TestCheckpointFileJournal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "checkpoints")
	j := &fileJournal{dir: dir}
	if got, err := j.Load(); err != nil || len(got) != 0 {
		t.Fatalf("an empty journal: %v %v", got, err)
	}
	if err := j.Save("s1.web-1", []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := j.Save("s1.web-2", []byte(`{"b":2}`)); err != nil {
		t.Fatal(err)
	}
	if err := j.Save("s1.web-1", []byte(`{"a":3}`)); err != nil {
		t.Fatal(err)
	}
	if err := j.Save("s1.web-2", nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".tmp-cut"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := j.Load()
	if err != nil || len(got) != 1 || string(got["s1.web-1"]) != `{"a":3}` {
		t.Fatalf("loaded %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-cut")); !os.IsNotExist(err) {
		t.Fatalf("a cut write was left behind: %v", err)
	}
}

// A person's crash checkpoint stands for them from the epoch they arrived
// at their worker on: a move that rolls back (a park that failed on the
// way down) raises the epoch and keeps it; a move away and back disowns
// what was kept before they left.
func TestKeepCheckpointAcrossARollback(t *testing.T) {
	f := fsm.New()
	a := &Agent{fsm: f}
	index := uint64(0)
	apply := func(typ fsm.MessageType, body any) {
		t.Helper()
		b, err := fsm.Encode(typ, body)
		if err != nil {
			t.Fatal(err)
		}
		index++
		if err, ok := f.Apply(&raft.Log{Index: index, Data: b}).(error); ok && err != nil {
			t.Fatalf("applying %d: %v", typ, err)
		}
	}
	apply(fsm.ConnectRequestType, fsm.ConnectRequest{Conn: "c1", User: "ana", Worker: "w1"})
	u, _ := f.User("ana")
	e0 := u.Epoch
	check := func(worker string, epoch uint64, want bool) {
		t.Helper()
		if got := a.keepCheckpoint(worker, "ana", epoch); got != want {
			u, _ := f.User("ana")
			t.Fatalf("keep %s at epoch %d = %v, want %v (maps: %+v)", worker, epoch, got, want, u)
		}
	}
	check("w1", e0, true)
	apply(fsm.MoveBeginRequestType, fsm.MoveBeginRequest{User: "ana", From: "w1", To: "w1", Epoch: e0})
	check("w1", e0, true) // moving from there
	apply(fsm.MoveAbortRequestType, fsm.MoveAbortRequest{User: "ana", Epoch: e0 + 1})
	check("w1", e0, true) // rolled back: still hers
	check("w1", e0+1, true)
	check("w2", e0, false)

	// Away to w2 and back: w1's pieces from before are not hers any more.
	apply(fsm.MoveBeginRequestType, fsm.MoveBeginRequest{User: "ana", From: "w1", To: "w2", Epoch: e0 + 1})
	apply(fsm.MoveCommitRequestType, fsm.MoveCommitRequest{User: "ana", To: "w2", Epoch: e0 + 2, Package: "sha256:aa"})
	apply(fsm.WokenRequestType, fsm.WokenRequest{User: "ana", Package: "sha256:aa"})
	check("w2", e0+2, true)
	check("w1", e0+1, false)
	apply(fsm.MoveBeginRequestType, fsm.MoveBeginRequest{User: "ana", From: "w2", To: "w1", Epoch: e0 + 2})
	apply(fsm.MoveCommitRequestType, fsm.MoveCommitRequest{User: "ana", To: "w1", Epoch: e0 + 3, Package: "sha256:bb"})
	apply(fsm.WokenRequestType, fsm.WokenRequest{User: "ana", Package: "sha256:bb"})
	check("w1", e0+1, false)
	check("w1", e0+3, true)
}
