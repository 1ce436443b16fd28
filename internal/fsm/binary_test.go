package fsm

import (
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// The same entries in the binary envelope build the same maps as in JSON,
// in fewer bytes.
func TestBinaryEntriesApplyAsJSON(t *testing.T) {
	want := dump(t, goldenMaps(t))
	if got := dump(t, goldenMapsWith(t, EncodeBinary)); got != want {
		t.Fatalf("binary entries built:\n%s\nwant\n%s", got, want)
	}
	req := ConnectBatchRequest{Conns: []ConnectRequest{{Conn: "conn-0000001-0", User: "person-0000001", Worker: "h001-w3"}, {Conn: "conn-0000001-1", User: "person-0000001", Worker: "h001-w3"}}}
	j, _ := Encode(ConnectBatchRequestType, req)
	b, err := EncodeBinary(ConnectBatchRequestType, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) >= len(j) {
		t.Fatalf("binary entry of %d bytes, JSON %d", len(b), len(j))
	}
	if EntryType(b) != ConnectBatchRequestType || EntryType(j) != ConnectBatchRequestType {
		t.Fatalf("entry types %d and %d", EntryType(b), EntryType(j))
	}
	t.Logf("a batch of two connections: %d bytes binary, %d JSON", len(b), len(j))
}

// The hot roads' entries are written binary only once every server
// applies the envelope.
func TestEncodeEntryFollowsTheGate(t *testing.T) {
	f := New()
	for _, tc := range []struct {
		allow bool
		typ   MessageType
		want  MessageType
	}{
		{false, ConnectBatchRequestType, ConnectBatchRequestType},
		{true, ConnectBatchRequestType, BinaryEntryType},
		{true, RegisterAgentRequestType, RegisterAgentRequestType},
	} {
		f.SetEntryGate(func(t MessageType) bool { return tc.allow || t < BinaryEntryType })
		e, err := f.EncodeEntry(tc.typ, struct{}{})
		if err != nil {
			t.Fatal(err)
		}
		if MessageType(e[0]) != tc.want {
			t.Errorf("type %d with the gate allowing=%v written as %d, want %d", tc.typ, tc.allow, e[0], tc.want)
		}
	}
}

// A damaged binary entry is refused with an error, never a panic.
func TestBinaryEntryDamage(t *testing.T) {
	f := New()
	good, _ := EncodeBinary(ConnectRequestType, ConnectRequest{Conn: "c1", User: "u1", Worker: "w1"})
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"no inner type", []byte{byte(BinaryEntryType)}, "without the type"},
		{"cut body", good[:len(good)-4], "decoding connect"},
		{"garbage", append([]byte{byte(BinaryEntryType), byte(ConnectRequestType)}, 0xc1, 0xff), "decoding connect"},
		{"empty", nil, "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := f.Apply(&raft.Log{Index: 1, Data: tc.data})
			err, ok := res.(error)
			if !ok || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", res, tc.want)
			}
		})
	}
	if r, ok := f.Apply(&raft.Log{Index: 2, Data: good}).(Route); !ok || r.User != "u1" {
		t.Fatalf("a good binary entry after damaged ones: %+v", r)
	}
}
