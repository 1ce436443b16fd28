package demo

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"unsafe"
)

var (
	smallEngineOnce  sync.Once
	smallEngineImage []byte
	smallEngineErr   error
)

// smallEngine is the engine of the 20,000-row table the grid tests use.
func smallEngine(t *testing.T) ([]byte, *dataset) {
	t.Helper()
	smallEngineOnce.Do(func() { smallEngineImage, smallEngineErr = buildEngine(context.Background(), 20_000) })
	if smallEngineErr != nil {
		t.Fatal(smallEngineErr)
	}
	d, err := openEngine(smallEngineImage)
	if err != nil {
		t.Fatal(err)
	}
	return smallEngineImage, d
}

func TestEngineHoldsTheTable(t *testing.T) {
	_, d := smallEngine(t)
	want := generate(20_000)
	for name, pair := range map[string][2]any{
		"name":     {d.name, want.name},
		"city":     {d.city, want.city},
		"product":  {d.product, want.product},
		"status":   {d.status, want.status},
		"cents":    {d.cents, want.cents},
		"day":      {d.day, want.day},
		"maxCents": {d.maxCents, want.maxCents},
		"names":    {d.names, want.names},
		"nameRank": {d.nameRank, want.nameRank},
	} {
		if !reflect.DeepEqual(pair[0], pair[1]) {
			t.Errorf("the engine's %s differs from the generated table's", name)
		}
	}
}

// The engine's orders answer every query as the slow reference does: the
// same filters, columns and directions as TestQueryMatchesReference.
func TestEngineQueriesMatchReference(t *testing.T) {
	_, d := smallEngine(t)
	filters := []gridState{
		{},
		{Text: "an"},
		{Text: "  LoNdOn "},
		{Text: "o", Status: "refunded"},
		{Status: "pending", MinAmount: 1000},
		{MinAmount: 12.34},
		{Text: "no such thing"},
	}
	for _, f := range filters {
		for _, col := range columns {
			for _, dir := range []string{"asc", "desc"} {
				st := f
				st.Column, st.Dir = col, dir
				t.Run(fmt.Sprintf("%q/%s/%v/%s/%s", f.Text, f.Status, f.MinAmount, col, dir), func(t *testing.T) {
					checkQuery(t, d, st)
				})
			}
		}
	}
}

// inside reports whether the n elements of type T at p lie within b.
func inside[T any](b []byte, s []T) bool {
	if len(s) == 0 {
		return true
	}
	lo, hi := uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&b[0]))+uintptr(len(b))
	p := uintptr(unsafe.Pointer(&s[0]))
	return p >= lo && p+uintptr(len(s))*unsafe.Sizeof(s[0]) <= hi
}

// Loading copies nothing: the table, the orders and an unfiltered sort's
// answer are the image's own bytes.
func TestEngineReadsTheImageInPlace(t *testing.T) {
	b, d := smallEngine(t)
	if !inside(b, d.name) || !inside(b, d.city) || !inside(b, d.product) || !inside(b, d.status) ||
		!inside(b, d.cents) || !inside(b, d.day) {
		t.Fatal("a column of the loaded table is not in the image")
	}
	for c := 1; c < len(columns); c++ {
		if !inside(b, d.sorted.asc[c]) || !inside(b, d.sorted.desc[c]) {
			t.Fatalf("an order of column %s is not in the image", columns[c])
		}
	}
	r := d.run(gridState{Column: "name", Dir: "desc"}.query())
	if !inside(b, r.rows) {
		t.Fatal("an unfiltered sort copied its order out of the image")
	}
}

func TestEngineRejectsBadImages(t *testing.T) {
	good, _ := smallEngine(t)
	shifted := make([]byte, len(good)+1)
	copy(shifted[1:], good)
	cases := map[string][]byte{
		"empty":        nil,
		"short":        good[:10],
		"bad magic":    append([]byte("NOTDEMO!"), good[8:]...),
		"truncated":    good[:len(good)-4],
		"misaligned":   shifted[1:],
		"one too many": append(append([]byte(nil), good...), 0),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := openEngine(b); !errors.Is(err, errBadEngine) {
				t.Fatalf("openEngine = %v, want errBadEngine", err)
			}
		})
	}
}

// An App loaded from an engine serves its grid from it.
func TestAppServesTheGridFromItsEngine(t *testing.T) {
	b, _ := smallEngine(t)
	a := New()
	if err := a.WithEngine().(engineApp).LoadEngine(b); err != nil {
		t.Fatal(err)
	}
	if a.table().sorted == nil {
		t.Fatal("the loaded table has no sort orders")
	}
	p := openPage(t, a, "grid")
	for _, msg := range []string{
		`{"op":"sort","column":"name","dir":"desc"}`,
		`{"op":"scroll","offset":777}`,
		`{"op":"filter","text":"ber","min_amount":250}`,
		`{"op":"sort","column":"date"}`,
		`{"op":"filter","status":"shipped"}`,
	} {
		send(t, a, p, msg)
		checkWindow(t, a, p)
	}
}

func TestEngineBuildStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := buildEngine(ctx, 1000); !errors.Is(err, context.Canceled) {
		t.Fatalf("buildEngine on an ended context = %v, want context.Canceled", err)
	}
}

func BenchmarkBuildEngine(b *testing.B) {
	for b.Loop() {
		if _, err := buildEngine(context.Background(), rowCount); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkQueryEngine is BenchmarkQuery's queries answered from the
// engine's orders.
func BenchmarkQueryEngine(b *testing.B) {
	img, err := buildEngine(context.Background(), rowCount)
	if err != nil {
		b.Fatal(err)
	}
	d, err := openEngine(img)
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name string
		st   gridState
	}{
		{"all by id", gridState{Column: "id"}},
		{"all by name", gridState{Column: "name"}},
		{"all by amount desc", gridState{Column: "amount", Dir: "desc"}},
		{"text by date", gridState{Text: "an", Column: "date"}},
		{"status and min by city", gridState{Status: "refunded", MinAmount: 100, Column: "city"}},
	}
	for _, c := range cases {
		q := c.st.query()
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				d.run(q)
			}
		})
	}
}
