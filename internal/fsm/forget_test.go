package fsm

import (
	"errors"
	"testing"
)

// One entry forgets many people with all their connections; each person's
// part is their own: one unknown, moving or at another epoch is refused and
// the others go.
func TestForgetUsersInOneEntry(t *testing.T) {
	f := New()
	idx := uint64(0)
	next := func() uint64 { idx++; return idx }
	for _, c := range []struct{ conn, user string }{{"a1", "ann"}, {"a2", "ann"}, {"b1", "bob"}, {"c1", "cy"}, {"d1", "dee"}} {
		apply(t, f, next(), ConnectRequestType, ConnectRequest{Conn: c.conn, User: c.user, Worker: "w1"})
	}
	cy, _ := f.User("cy")
	apply(t, f, next(), MoveBatchRequestType, MoveBatchRequest{Begin: []MoveBeginRequest{{User: "cy", From: "w1", To: "w2", Epoch: cy.Epoch}}})
	dee, _ := f.User("dee")
	ann, _ := f.User("ann")
	bob, _ := f.User("bob")
	out := apply(t, f, next(), ForgetUsersRequestType, ForgetUsersRequest{Users: []ForgetUser{
		{User: "ann", Epoch: ann.Epoch}, {User: "nobody"}, {User: "cy", Epoch: cy.Epoch + 1}, {User: "dee", Epoch: dee.Epoch + 7}, {User: "bob", Epoch: bob.Epoch},
	}}).(ForgetUsersResult)
	want := []error{nil, ErrNoUser, ErrBusy, ErrBusy, nil}
	for i, w := range want {
		err := out.Users[i].Err()
		if (w == nil) != (err == nil) || w != nil && !errors.Is(err, w) {
			t.Fatalf("part %d: %v, want %v", i, err, w)
		}
	}
	if out.Users[0].User.Conns != 2 || out.Users[0].User.Worker != "w1" {
		t.Fatalf("ann as she was: %+v", out.Users[0].User)
	}
	for _, u := range []string{"ann", "bob"} {
		if _, ok := f.User(u); ok {
			t.Fatalf("%s is still in the maps", u)
		}
	}
	for _, u := range []string{"cy", "dee"} {
		if _, ok := f.User(u); !ok {
			t.Fatalf("%s was forgotten though refused", u)
		}
	}
	if conns, users := f.Counts(); conns != 2 || users != 2 {
		t.Fatalf("after the entry: %d conns, %d users; want cy's and dee's", conns, users)
	}
	if got := f.UsersOn(); got["w1"] != 2 {
		t.Fatalf("load on w1: %v", got)
	}
}
