package worker

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

func pullNow(c *collector, after uint64) ([]*protocol.Delta, uint64) {
	var ds []*protocol.Delta
	var last uint64
	c.pull(after, 0, func(d []*protocol.Delta, l uint64) { ds, last = d, l }, nil)
	return ds, last
}

func TestCollectorPullAckResume(t *testing.T) {
	c := &collector{fold: func() []byte { return []byte(`{}`) }}
	for i := 0; i < 5; i++ {
		c.add(protocol.Delta_SET, "k", []byte("1"))
	}
	ds, last := pullNow(c, 0)
	if len(ds) != 5 || last != 5 || ds[0].Seq != 1 {
		t.Fatalf("first pull: %d deltas, last %d", len(ds), last)
	}
	// The page acknowledged 3 (it only applied that many): 4 and 5 again.
	ds, _ = pullNow(c, 3)
	if len(ds) != 2 || ds[0].Seq != 4 {
		t.Fatalf("pull after 3: %v", ds)
	}
	if c.floor != 3 || len(c.pending) != 2 {
		t.Fatalf("ack did not trim: floor %d pending %d", c.floor, len(c.pending))
	}
	// A page asking for what was already acknowledged must resync.
	base := c.resync()
	ds, _ = pullNow(c, base)
	if len(ds) != 1 || ds[0].Op != protocol.Delta_RESET || ds[0].Seq != base+1 {
		t.Fatalf("after resync: %v", ds)
	}
}

func TestCollectorWaitingPull(t *testing.T) {
	c := &collector{}
	got := make(chan []*protocol.Delta, 1)
	c.pull(0, 5*time.Second, func(d []*protocol.Delta, _ uint64) { got <- d }, nil)
	select {
	case <-got:
		t.Fatal("a pull with nothing to give answered at once")
	case <-time.After(20 * time.Millisecond):
	}
	c.add(protocol.Delta_SET, "k", []byte("1"))
	select {
	case d := <-got:
		if len(d) != 1 {
			t.Fatalf("woken pull got %v", d)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("waiting pull not woken by a delta")
	}
	// A pull that times out answers empty, once.
	c.pull(1, 10*time.Millisecond, func(d []*protocol.Delta, _ uint64) { got <- d }, nil)
	if d := <-got; len(d) != 0 {
		t.Fatalf("timed-out pull got %v", d)
	}
	c.add(protocol.Delta_SET, "k", []byte("2"))
	select {
	case d := <-got:
		t.Fatalf("a finished pull answered twice: %v", d)
	case <-time.After(20 * time.Millisecond):
	}
}

// A page that never pulls keeps bounded memory: superseded deltas are
// dropped, and distinct ones fold into one RESET of the whole tree; either
// way replaying what the page receives gives the worker's tree.
func TestCollectorSilentPageCoalesces(t *testing.T) {
	p := NewTestPage("k")
	for i := 0; i < 3*maxPending; i++ {
		if err := p.Tree().Set("n", i); err != nil {
			t.Fatal(err)
		}
		if err := p.Tree().Set("m", -i); err != nil {
			t.Fatal(err)
		}
	}
	ds := p.TestDeltas()
	if len(ds) > maxPending {
		t.Fatalf("%d pending deltas, bound %d", len(ds), maxPending)
	}
	for _, d := range ds {
		if d.Op == "reset" {
			t.Fatal("superseded writes were folded instead of coalesced")
		}
	}
	got := map[string]string{}
	for _, d := range ds {
		got[d.Path] = d.Value
	}
	if got["n"] != "12287" || got["m"] != "-12287" {
		t.Fatalf("replayed %v", got)
	}
}

func TestCollectorFoldsASilentPage(t *testing.T) {
	p := NewTestPage("k")
	for i := 0; i < maxPending+10; i++ {
		if err := p.Tree().Set("n/"+strconv.Itoa(i), i); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.PendingDeltas(); n > maxPending {
		t.Fatalf("%d pending deltas, bound %d", n, maxPending)
	}
	ds, _ := pullNow(p.coll, 0)
	if ds[0].Op != protocol.Delta_RESET {
		t.Fatalf("first delta after folding is %v", ds[0].Op)
	}
	// Replaying what the page receives yields the tree.
	tree := map[string]any{}
	for _, d := range ds {
		if d.Op == protocol.Delta_RESET {
			tree = map[string]any{}
			if err := json.Unmarshal(d.Value, &tree); err != nil {
				t.Fatal(err)
			}
			continue
		}
		var v any
		_ = json.Unmarshal(d.Value, &v)
		parent, key := splitLast(d.Path)
		m, _ := tree[parent].(map[string]any)
		if m == nil {
			m = map[string]any{}
			tree[parent] = m
		}
		m[key] = v
	}
	n, _ := tree["n"].(map[string]any)
	if len(n) != maxPending+10 || n["4105"] != float64(4105) {
		t.Fatalf("replayed tree has %d entries under n", len(n))
	}
}

// Two readers of one page (a duplicated tab): when one acknowledged
// deltas the other has not applied, the other's pull gets a RESET of the
// whole tree (it got only {"last":31} and applied later deltas to a stale
// tree); then both go on from there.
func TestCollectorSecondReaderGetsAReset(t *testing.T) {
	tree := map[string]int{}
	c := &collector{fold: func() []byte { b, _ := json.Marshal(tree); return b }}
	write := func(k string, v int) {
		tree[k] = v
		c.add(protocol.Delta_SET, k, []byte(strconv.Itoa(v)))
	}
	for i := range 5 {
		write("n"+strconv.Itoa(i), i)
	}
	a, _ := pullNow(c, 0)     // tab A reads 1..5
	_, lastA := pullNow(c, 5) // and acknowledges them
	if len(a) != 5 || lastA != 5 {
		t.Fatalf("tab A: %d deltas, last %d", len(a), lastA)
	}
	write("n5", 5)
	ds, _ := pullNow(c, 2) // tab B had applied up to 2
	if len(ds) != 1 || ds[0].Op != protocol.Delta_RESET || ds[0].Seq <= 6 {
		t.Fatalf("tab B's pull after 2: %v, want one RESET", ds)
	}
	var got map[string]int
	if err := json.Unmarshal(ds[0].Value, &got); err != nil || len(got) != 6 {
		t.Fatalf("the RESET holds %s (%v), want the whole tree of 6", ds[0].Value, err)
	}
	// Tab A, at 5, gets the RESET too (the whole tree, never a gap).
	if ds, _ := pullNow(c, 5); len(ds) == 0 || ds[0].Op != protocol.Delta_RESET {
		t.Fatalf("tab A after 5: %v", ds)
	}
	// A reader that has every delta held gets no RESET.
	last := c.last()
	write("n6", 6)
	if ds, _ := pullNow(c, last); len(ds) != 1 || ds[0].Op != protocol.Delta_SET {
		t.Fatalf("an up-to-date reader: %v", ds)
	}
}

// A message's writes reach a waiting pull together when the message ends
// (one pull per message, the deltas before the reply), and a long message
// still streams: its deltas go out holdMax after its first write.
func TestCollectorHoldsAMessagesDeltas(t *testing.T) {
	c := &collector{fold: func() []byte { return []byte(`{}`) }}
	got := make(chan []*protocol.Delta, 4)
	c.pull(0, 10*time.Second, func(ds []*protocol.Delta, _ uint64) { got <- ds }, nil)
	c.hold()
	for range 3 {
		c.add(protocol.Delta_SET, "k", []byte("1"))
	}
	select {
	case ds := <-got:
		t.Fatalf("the pull was answered in the middle of the message with %d deltas", len(ds))
	default:
	}
	c.release()
	if ds := <-got; len(ds) != 3 {
		t.Fatalf("the pull got %d deltas, want the message's 3", len(ds))
	}

	// A long message: its first write's delta goes out within holdMax.
	c.pull(3, 10*time.Second, func(ds []*protocol.Delta, _ uint64) { got <- ds }, nil)
	c.hold()
	c.add(protocol.Delta_SET, "k", []byte("2"))
	select {
	case ds := <-got:
		if len(ds) != 1 {
			t.Fatalf("a long message's first delta: %v", ds)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a long message's delta was held past holdMax")
	}
	c.release()
}
