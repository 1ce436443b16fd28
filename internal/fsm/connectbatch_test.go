package fsm

import (
	"errors"
	"testing"
)

// A batch binds each connection as a connect entry would, refusing a part
// on its own; the same batch written again (a retry) finds them bound.
func TestConnectBatch(t *testing.T) {
	f := New()
	apply(t, f, 1, ConnectRequestType, ConnectRequest{Conn: "taken", User: "ann", Worker: "w1"})
	req := ConnectBatchRequest{Conns: []ConnectRequest{
		{Conn: "a1", User: "ann", Worker: "w2"}, // ann lives on w1: joins her home
		{Conn: "b1", User: "bob", Worker: "w2"},
		{Conn: "taken", User: "cat", Worker: "w2"},
		{Conn: "x1", Worker: "w3"}, // anonymous
	}}
	out := apply(t, f, 2, ConnectBatchRequestType, req).(ConnectBatchResult)
	if len(out.Conns) != 4 {
		t.Fatalf("%d parts, want 4", len(out.Conns))
	}
	if r := out.Conns[0].Route; out.Conns[0].Err() != nil || r.User != "ann" || r.Worker != "w1" {
		t.Fatalf("a1: %+v", out.Conns[0])
	}
	if r := out.Conns[1].Route; r.User != "bob" || r.Worker != "w2" || r.Epoch != 1 {
		t.Fatalf("b1: %+v", out.Conns[1])
	}
	if err := out.Conns[2].Err(); !errors.Is(err, ErrConnTaken) {
		t.Fatalf("taken: %v, want ErrConnTaken", err)
	}
	if r := out.Conns[3].Route; r.User != "~x1" || r.Worker != "w3" {
		t.Fatalf("x1: %+v", out.Conns[3])
	}
	if u, _ := f.User("ann"); u.Conns != 2 {
		t.Fatalf("ann has %d connections, want 2", u.Conns)
	}
	// Written again: the bound ones are found as they are, the taken one
	// still refused, nobody counted twice.
	again := apply(t, f, 3, ConnectBatchRequestType, req).(ConnectBatchResult)
	for i := range again.Conns {
		if (again.Conns[i].Err() == nil) != (out.Conns[i].Err() == nil) || again.Conns[i].Route != out.Conns[i].Route {
			t.Fatalf("part %d again: %+v, first %+v", i, again.Conns[i], out.Conns[i])
		}
	}
	if conns, users := f.Counts(); conns != 4 || users != 3 {
		t.Fatalf("%d connections, %d people; want 4 and 3", conns, users)
	}
	// The result crosses a forwarded write.
	b, _ := Encode(ConnectBatchRequestType, out) // any JSON encoder of the result
	res, err := DecodeResult(ConnectBatchRequestType, b[1:])
	if err != nil || len(res.(ConnectBatchResult).Conns) != 4 || !errors.Is(res.(ConnectBatchResult).Conns[2].Err(), ErrConnTaken) {
		t.Fatalf("decoded result: %+v, %v", res, err)
	}
}
