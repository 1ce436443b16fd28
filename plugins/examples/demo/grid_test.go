package demo

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/stickyd/stickyd/plugins/worker"
)

var (
	smallOnce  sync.Once
	smallTable *dataset
)

// smallApp is an App on a 20,000-row table, so that tests can check every
// step against the slow reference quickly.
func smallApp() *App {
	smallOnce.Do(func() { smallTable = generate(20_000) })
	a := New()
	a.table = func() *dataset { return smallTable }
	return a
}

func openPage(t *testing.T, a *App, kind string) *worker.Page {
	t.Helper()
	p := worker.NewTestPage(kind)
	if err := a.OpenPage(context.Background(), p); err != nil {
		t.Fatalf("opening a %s page: %v", kind, err)
	}
	return p
}

func send(t *testing.T, a *App, p *worker.Page, msg string) any {
	t.Helper()
	ans, err := a.Message(context.Background(), p, json.RawMessage(msg))
	if err != nil {
		t.Fatalf("message %s: %v", msg, err)
	}
	return ans
}

// checkWindow compares the tree's window with the reference's rows for the
// state the tree holds.
func checkWindow(t *testing.T, a *App, p *worker.Page) {
	t.Helper()
	tr := p.Tree()
	st := readGrid(tr)
	d := a.table()
	want := reference(d, st)
	if got := int(tr.Number("total")); got != len(want) {
		t.Fatalf("total = %d, want %d", got, len(want))
	}
	rows, _ := tr.Get("rows").([]any)
	end := min(st.Offset+st.PageSize, len(want))
	if len(rows) != end-st.Offset {
		t.Fatalf("window has %d rows, want %d (offset %d, page size %d, total %d)", len(rows), end-st.Offset, st.Offset, st.PageSize, len(want))
	}
	for i, r := range rows {
		if w := d.row(want[st.Offset+i]); !reflect.DeepEqual(r, w) {
			t.Fatalf("window row %d = %v, want %v", i, r, w)
		}
	}
}

func snapshot(t *testing.T, p *worker.Page) string {
	t.Helper()
	b, err := json.Marshal(p.Tree().Get(""))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestGridOpen(t *testing.T) {
	a := New()
	p := openPage(t, a, "grid")
	tr := p.Tree()
	for path, want := range map[string]any{
		"filter/text":       "",
		"filter/status":     "",
		"filter/min_amount": 0.0,
		"sort/column":       "id",
		"sort/dir":          "asc",
		"offset":            0.0,
		"page_size":         50.0,
		"total":             float64(rowCount),
		"cache":             "miss",
		"meta/row_count":    float64(rowCount),
		"rows/0/id":         1.0,
		"rows/49/id":        50.0,
	} {
		if got := tr.Get(path); !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %#v, want %#v", path, got, want)
		}
	}
	if cols, _ := tr.Get("meta/columns").([]any); len(cols) != len(columns) {
		t.Errorf("meta/columns = %v", tr.Get("meta/columns"))
	}
	checkWindow(t, a, p)
}

func TestGridOps(t *testing.T) {
	a := smallApp()
	n := float64(a.table().len())
	p := openPage(t, a, "grid")
	steps := []struct {
		msg  string
		want map[string]any // tree values after the message
	}{
		{`{"op":"scroll","offset":1000}`, map[string]any{"offset": 1000.0, "rows/0/id": 1001.0, "cache": "hit"}},
		{`{"op":"filter","text":"an"}`, map[string]any{"filter/text": "an", "offset": 0.0, "cache": "miss"}},
		{`{"op":"scroll","offset":70}`, map[string]any{"offset": 70.0, "filter/text": "an"}},
		{`{"op":"filter","text":"an"}`, map[string]any{"offset": 70.0, "cache": "hit"}}, // the same again keeps the place
		{`{"op":"filter","status":"refunded","min_amount":2000}`, map[string]any{"filter/status": "refunded", "filter/min_amount": 2000.0, "offset": 0.0}},
		{`{"op":"sort","column":"amount","dir":"desc"}`, map[string]any{"sort/column": "amount", "sort/dir": "desc"}},
		{`{"op":"sort","column":"name"}`, map[string]any{"sort/column": "name", "sort/dir": "asc"}},
		{`{"op":"scroll","offset":1000000000}`, nil}, // past the end: the last rows
		{`{"op":"scroll","offset":0,"page_size":7}`, map[string]any{"page_size": 7.0, "offset": 0.0}},
		{`{"op":"filter","text":"no such thing"}`, map[string]any{"total": 0.0, "rows": []any{}}},
		{`{"op":"reset"}`, map[string]any{"filter/text": "", "filter/status": "", "filter/min_amount": 0.0, "sort/column": "id", "offset": 0.0, "page_size": 7.0, "total": n}}, // the window keeps its size
	}
	for _, s := range steps {
		t.Run(s.msg, func(t *testing.T) {
			ans, ok := send(t, a, p, s.msg).(gridAnswer)
			if !ok {
				t.Fatalf("answer is %T, want gridAnswer", ans)
			}
			tr := p.Tree()
			for path, want := range s.want {
				if got := tr.Get(path); !reflect.DeepEqual(got, want) {
					t.Errorf("%s = %#v, want %#v", path, got, want)
				}
			}
			if ans.Total != int(tr.Number("total")) || ans.Offset != int(tr.Number("offset")) || ans.Cache != tr.String("cache") {
				t.Errorf("answer %+v disagrees with the tree", ans)
			}
			checkWindow(t, a, p)
		})
	}
	t.Run("past the end shows the last rows", func(t *testing.T) {
		send(t, a, p, `{"op":"sort","column":"amount"}`)
		send(t, a, p, `{"op":"scroll","offset":99999999}`)
		tr := p.Tree()
		if got, want := tr.Number("offset"), n-tr.Number("page_size"); got != want {
			t.Fatalf("offset = %v, want %v", got, want)
		}
		checkWindow(t, a, p)
	})
}

// TestGridWritesOnlyWhatChanged counts deltas: a message writes the paths it
// changed, never the whole tree (about 20 paths).
func TestGridWritesOnlyWhatChanged(t *testing.T) {
	a := smallApp()
	p := openPage(t, a, "grid")
	for _, c := range []struct {
		msg    string
		atMost int
		which  string
	}{
		{`{"op":"scroll","offset":10}`, 4, "offset, rows, took_ms, cache"},
		{`{"op":"scroll","offset":10}`, 1, "took_ms"},
		{`{"op":"scroll","offset":11}`, 3, "offset, rows, took_ms"},
		{`{"op":"filter","text":"oslo"}`, 6, "filter/text, offset, total, rows, took_ms, cache"},
		{`{"op":"filter","text":"oslo"}`, 2, "took_ms, cache"},
		{`{"op":"sort","column":"date","dir":"desc"}`, 6, "sort/column, sort/dir, rows, took_ms, cache"},
	} {
		before := p.PendingDeltas()
		send(t, a, p, c.msg)
		if n := p.PendingDeltas() - before; n > c.atMost {
			t.Errorf("%s wrote %d deltas, want at most %d (%s)", c.msg, n, c.atMost, c.which)
		}
	}
}

func TestSetList(t *testing.T) {
	p := worker.NewTestPage("grid")
	tr := p.Tree()
	list := func(vals ...string) []any {
		out := make([]any, len(vals))
		for i, v := range vals {
			out[i] = map[string]any{"v": v}
		}
		return out
	}
	for _, c := range []struct {
		name   string
		list   []any
		deltas int
	}{
		{"new", list("a", "b", "c", "d"), 1},
		{"same", list("a", "b", "c", "d"), 0},
		{"one element", list("a", "x", "c", "d"), 1},
		{"two elements", list("y", "x", "c", "z"), 2},
		{"most elements", list("1", "2", "3", "z"), 1},
		{"longer", list("1", "2", "3", "z", "5"), 1},
		{"empty", list(), 1},
	} {
		before := p.PendingDeltas()
		if err := setList(tr, "rows", c.list); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if n := p.PendingDeltas() - before; n != c.deltas {
			t.Errorf("%s: %d deltas, want %d", c.name, n, c.deltas)
		}
		if got := tr.Get("rows"); !reflect.DeepEqual(got, c.list) {
			t.Errorf("%s: rows = %v, want %v", c.name, got, c.list)
		}
	}
}

// TestGridRebuildsIndex drops the cached index, as a move to another worker
// does, and checks the page answers from its tree all the same.
func TestGridRebuildsIndex(t *testing.T) {
	a := smallApp()
	p := openPage(t, a, "grid")
	send(t, a, p, `{"op":"filter","text":"ber","min_amount":100}`)
	send(t, a, p, `{"op":"sort","column":"city","dir":"desc"}`)
	send(t, a, p, `{"op":"scroll","offset":123}`)
	want := p.Tree().Get("rows")

	t.Run("cleared cache", func(t *testing.T) {
		clear(p.Local())
		ans := send(t, a, p, `{"op":"scroll","offset":123}`).(gridAnswer)
		if ans.Cache != "miss" {
			t.Errorf("cache = %q, want a miss after the cache was cleared", ans.Cache)
		}
		if got := p.Tree().Get("rows"); !reflect.DeepEqual(got, want) {
			t.Fatal("the rebuilt index shows other rows")
		}
		if ans := send(t, a, p, `{"op":"scroll","offset":123}`).(gridAnswer); ans.Cache != "hit" {
			t.Errorf("cache = %q after a rebuild, want a hit", ans.Cache)
		}
	})

	t.Run("stale cache", func(t *testing.T) {
		// An index for another query (a tree changed behind the cache)
		// must not answer.
		p.Local()[localIndex] = &gridIndex{q: defaultGrid().query(), res: a.table().run(defaultGrid().query())}
		ans := send(t, a, p, `{"op":"scroll","offset":123}`).(gridAnswer)
		if ans.Cache != "miss" {
			t.Errorf("cache = %q, want a miss for a stale index", ans.Cache)
		}
		checkWindow(t, a, p)
	})

	t.Run("moved page", func(t *testing.T) {
		// The tree arrives on a new worker without its Local objects and
		// without OpenPage.
		moved := worker.NewTestPage("grid")
		for k, v := range p.Tree().Get("").(map[string]any) {
			if err := moved.Tree().Set(k, v); err != nil {
				t.Fatal(err)
			}
		}
		send(t, a, moved, `{"op":"scroll","offset":124}`)
		checkWindow(t, a, moved)
		if got, want := moved.Tree().Get("filter"), p.Tree().Get("filter"); !reflect.DeepEqual(got, want) {
			t.Errorf("filter = %v, want %v", got, want)
		}
	})
}

func TestGridBadInput(t *testing.T) {
	a := smallApp()
	p := openPage(t, a, "grid")
	send(t, a, p, `{"op":"filter","text":"ber"}`)
	for _, c := range []struct {
		msg  string
		want error
	}{
		{`not json`, ErrBadMessage},
		{`[1,2]`, ErrBadMessage},
		{`"filter"`, ErrBadMessage},
		{`null`, ErrBadMessage},
		{`{}`, ErrBadMessage},
		{`{"op":42}`, ErrBadMessage},
		{`{"op":"explode"}`, ErrUnknownOp},
		{`{"op":"edit","title":"x"}`, ErrUnknownOp},
		{`{"op":"filter","text":7}`, ErrBadMessage},
		{`{"op":"filter","txt":"typo"}`, ErrBadMessage},
		{`{"op":"filter","status":"lost"}`, ErrBadMessage},
		{`{"op":"filter","min_amount":-1}`, ErrBadMessage},
		{`{"op":"filter","min_amount":"10"}`, ErrBadMessage},
		{`{"op":"filter","min_amount":1e300}`, ErrBadMessage},
		{`{"op":"filter","text":"` + strings.Repeat("é", 101) + `"}`, ErrBadMessage},
		{`{"op":"sort"}`, ErrBadMessage},
		{`{"op":"sort","column":"price"}`, ErrBadMessage},
		{`{"op":"sort","column":"amount","dir":"up"}`, ErrBadMessage},
		{`{"op":"scroll"}`, ErrBadMessage},
		{`{"op":"scroll","offset":-1}`, ErrBadMessage},
		{`{"op":"scroll","offset":1.5}`, ErrBadMessage},
		{`{"op":"scroll","offset":"10"}`, ErrBadMessage},
		{`{"op":"scroll","offset":1e40}`, ErrBadMessage},
		{`{"op":"scroll","offset":0,"page_size":0}`, ErrBadMessage},
		{`{"op":"scroll","offset":0,"page_size":201}`, ErrBadMessage},
		{`{"op":"scroll","offset":0} {"op":"reset"}`, ErrBadMessage},
		{`{"op":"reset","hard":true}`, ErrBadMessage},
	} {
		t.Run(c.msg, func(t *testing.T) {
			before, deltas := snapshot(t, p), p.PendingDeltas()
			ans, err := a.Message(context.Background(), p, json.RawMessage(c.msg))
			if !errors.Is(err, c.want) {
				t.Fatalf("error = %v, want %v", err, c.want)
			}
			if ans != nil {
				t.Errorf("answer = %v, want none with an error", ans)
			}
			if snapshot(t, p) != before || p.PendingDeltas() != deltas {
				t.Error("a refused message changed the tree")
			}
		})
	}
}

func TestUnknownKind(t *testing.T) {
	a := New()
	p := worker.NewTestPage("spreadsheet")
	if err := a.OpenPage(context.Background(), p); !errors.Is(err, ErrUnknownKind) {
		t.Fatalf("OpenPage error = %v, want ErrUnknownKind", err)
	}
	if _, err := a.Message(context.Background(), p, json.RawMessage(`{"op":"reset"}`)); !errors.Is(err, ErrUnknownKind) {
		t.Fatalf("Message error = %v, want ErrUnknownKind", err)
	}
}

// TestGridPagesInParallel runs pages of different users at once, as a
// worker's mailboxes do: the shared table and App must not race.
func TestGridPagesInParallel(t *testing.T) {
	a := New()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			p := worker.NewTestPage("grid")
			if err := a.OpenPage(context.Background(), p); err != nil {
				t.Error(err)
				return
			}
			for _, m := range []string{
				`{"op":"filter","status":"paid"}`,
				`{"op":"sort","column":"product","dir":"desc"}`,
				`{"op":"scroll","offset":` + string(rune('1'+i)) + `00}`,
			} {
				if _, err := a.Message(context.Background(), p, json.RawMessage(m)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}
