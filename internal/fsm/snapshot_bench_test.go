package fsm

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

// bigMaps is n people with two connections each on 1,000 workers.
func bigMaps(b testing.TB, n int) *FSM {
	f := New()
	idx := uint64(0)
	for i := range n {
		for c := range 2 {
			idx++
			e, _ := Encode(ConnectRequestType, ConnectRequest{Conn: fmt.Sprintf("conn-%07d-%d", i, c), User: fmt.Sprintf("person-%07d", i), Worker: fmt.Sprintf("h%03d-w%d", i%100, i/100%10)})
			f.Apply(&raft.Log{Index: idx, Data: e})
		}
	}
	return f
}

func BenchmarkSnapshotPersist(b *testing.B) {
	f := bigMaps(b, 200_000)
	b.ResetTimer()
	for b.Loop() {
		var w countingWriter
		if err := f.EncodeSnapshot(&w); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(w))
	}
}

func BenchmarkSnapshotRestore(b *testing.B) {
	var buf bytes.Buffer
	if err := bigMaps(b, 200_000).EncodeSnapshot(&buf); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := DecodeSnapshot(buf.Bytes()); err != nil {
			b.Fatal(err)
		}
	}
}

type countingWriter int

func (w *countingWriter) Write(p []byte) (int, error) {
	*w += countingWriter(len(p))
	return len(p), nil
}
