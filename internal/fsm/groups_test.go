package fsm

import (
	"errors"
	"io"
	"reflect"
	"testing"
)

func TestCatalog(t *testing.T) {
	f := New()
	changed := f.WatchCatalog()
	apply(t, f, 1, GroupPutRequestType, GroupEntry{Name: "v2", Runtime: "go-plugin", Bundle: "sha256:ab", Workers: 2})
	select {
	case <-changed:
	default:
		t.Fatal("catalog watchers not woken by a new group")
	}
	apply(t, f, 2, GroupPutRequestType, GroupEntry{Name: "v2", Runtime: "go-plugin", Bundle: "sha256:cd", Workers: 3})
	if g := f.Catalog().Groups["v2"]; g.Created != 1 || g.Bundle != "sha256:cd" || g.Workers != 3 {
		t.Fatalf("replaced group %+v: created must stay 1", g)
	}
	apply(t, f, 3, SetDefaultRequestType, SetDefaultRequest{Group: "v1"})
	apply(t, f, 4, SetDefaultRequestType, SetDefaultRequest{Group: "v2"})
	if c := f.Catalog(); c.Default != "v2" || c.Previous != "v1" {
		t.Fatalf("default %q previous %q", c.Default, c.Previous)
	}
	// Rules: the first match wins; attributes come with the login.
	apply(t, f, 5, RulePutRequestType, Rule{ID: "r1", Group: "canary", User: "maria"})
	apply(t, f, 6, RulePutRequestType, Rule{ID: "r2", Group: "qa", Attr: "team", Value: "qa"})
	apply(t, f, 7, ConnectRequestType, ConnectRequest{Conn: "c1", Worker: "w1"})
	apply(t, f, 8, LoginRequestType, LoginRequest{Conn: "c1", User: "ana", Attrs: map[string]string{"team": "qa"}})
	if g, r, ok := f.Assigned("ana"); !ok || g != "qa" || r.ID != "r2" {
		t.Fatalf("ana assigned %q by %+v (%v)", g, r, ok)
	}
	if g, _, ok := f.Assigned("maria"); !ok || g != "canary" {
		t.Fatalf("maria assigned %q", g)
	}
	if _, _, ok := f.Assigned("ben"); ok {
		t.Fatal("ben matched a rule")
	}
	if res := apply(t, f, 9, RulePutRequestType, Rule{ID: "bad", Group: "x"}); res == nil {
		t.Fatal("a rule matching nothing was accepted")
	}
	// A group in use cannot be removed.
	if err, _ := apply(t, f, 10, GroupDeleteRequestType, GroupDeleteRequest{Name: "v2"}).(error); !errors.Is(err, ErrGroupInUse) {
		t.Fatalf("removing the default: %v", err)
	}
	apply(t, f, 11, GroupPutRequestType, GroupEntry{Name: "qa", Runtime: "builtin", Builtin: "demo", Workers: 1})
	if err, _ := apply(t, f, 12, GroupDeleteRequestType, GroupDeleteRequest{Name: "qa"}).(error); !errors.Is(err, ErrGroupInUse) {
		t.Fatalf("removing a group a rule uses: %v", err)
	}
	apply(t, f, 13, RuleDeleteRequestType, RuleDeleteRequest{ID: "r2"})
	if res := apply(t, f, 14, GroupDeleteRequestType, GroupDeleteRequest{Name: "qa"}); res != nil {
		t.Fatalf("removing an unused group: %v", res)
	}
	// The catalog and the attributes survive a snapshot.
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var s sink
	if err := snap.Persist(&s); err != nil {
		t.Fatal(err)
	}
	g := New()
	restored := g.WatchCatalog()
	if err := g.Restore(io.NopCloser(&s.Buffer)); err != nil {
		t.Fatal(err)
	}
	<-restored
	if !reflect.DeepEqual(g.Catalog(), f.Catalog()) || g.Attrs("ana")["team"] != "qa" {
		t.Fatalf("restored catalog %+v, want %+v", g.Catalog(), f.Catalog())
	}
}

func TestTableSubscriptions(t *testing.T) {
	f := New()
	apply(t, f, 1, TableSubsRequestType, TableSubsRequest{Worker: "w1", Tables: []string{"orders", "stock", "orders"}})
	apply(t, f, 2, TableSubsRequestType, TableSubsRequest{Worker: "w2", Tables: []string{"stock"}})
	if got := f.Subscribers("stock"); !reflect.DeepEqual(got, []string{"w1", "w2"}) {
		t.Fatalf("stock subscribers %v", got)
	}
	if got := f.Subscribers("orders"); !reflect.DeepEqual(got, []string{"w1"}) {
		t.Fatalf("orders subscribers %v", got)
	}
	if got := f.Subscribers("nobody"); len(got) != 0 {
		t.Fatalf("an unwatched table has subscribers %v", got)
	}
	apply(t, f, 3, TableSubsRequestType, TableSubsRequest{Worker: "w1"})
	if got := f.Subscribers("orders"); len(got) != 0 || len(f.TablesOf("w1")) != 0 {
		t.Fatalf("w1 emptied but orders has %v", got)
	}
	if res := apply(t, f, 4, TableSubsRequestType, TableSubsRequest{}); res == nil {
		t.Fatal("subscriptions without a worker accepted")
	}
}
