package host

import (
	"context"
	"sync"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/stickyd/stickyd/internal/fsm"
)

// memLog applies entries to a replica of the maps in order, as the leader's
// log would (host.Log without raft).
type memLog struct {
	mu    sync.Mutex // guards index and applies
	f     *fsm.FSM
	index uint64
}

var _ Log = (*memLog)(nil)

func newMemLog() *memLog { return &memLog{f: fsm.New()} }

func (l *memLog) Apply(_ context.Context, entry []byte) (any, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.index++
	res := l.f.Apply(&raft.Log{Index: l.index, Data: entry})
	if err, ok := res.(error); ok {
		return nil, err
	}
	return res, nil
}

// apply writes one entry of typ with body, failing the test on an error.
func (l *memLog) apply(t *testing.T, typ fsm.MessageType, body any) {
	t.Helper()
	b, err := fsm.Encode(typ, body)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Apply(context.Background(), b); err != nil {
		t.Fatalf("applying %d: %v", typ, err)
	}
}
