package demo

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// reference answers a grid state the slow, obvious way, from the rows'
// shown values: strings compared as strings, amounts as currency.
func reference(d *dataset, st gridState) []int {
	text := strings.ToLower(strings.TrimSpace(st.Text))
	// Memos keep the slow way from being too slow under -race: each
	// distinct string is lowered, and each day formatted, once.
	lowered := map[string]string{}
	lower := func(s string) string {
		l, ok := lowered[s]
		if !ok {
			l = strings.ToLower(s)
			lowered[s] = l
		}
		return l
	}
	dates := map[uint16]string{}
	date := func(i int) string {
		s, ok := dates[d.day[i]]
		if !ok {
			s = d.date(i)
			dates[d.day[i]] = s
		}
		return s
	}
	var rows []int
	for i := range d.len() {
		name, city, product := d.names[d.name[i]], cities[d.city[i]], products[d.product[i]]
		if text != "" && !strings.Contains(lower(name), text) &&
			!strings.Contains(lower(city), text) && !strings.Contains(lower(product), text) {
			continue
		}
		if st.Status != "" && statuses[d.status[i]] != st.Status {
			continue
		}
		if float64(d.cents[i])/100 < st.MinAmount {
			continue
		}
		rows = append(rows, i)
	}
	by := func(a, b int) int {
		switch st.Column {
		case "name":
			return strings.Compare(d.names[d.name[a]], d.names[d.name[b]])
		case "city":
			return strings.Compare(cities[d.city[a]], cities[d.city[b]])
		case "product":
			return strings.Compare(products[d.product[a]], products[d.product[b]])
		case "status":
			return strings.Compare(statuses[d.status[a]], statuses[d.status[b]])
		case "amount":
			return cmp.Compare(d.cents[a], d.cents[b])
		case "date":
			return strings.Compare(date(a), date(b))
		}
		return cmp.Compare(a, b)
	}
	slices.SortFunc(rows, func(a, b int) int {
		c := by(a, b)
		if st.Dir == "desc" {
			c = -c
		}
		if c == 0 {
			return cmp.Compare(a, b) // ties in id order, both ways
		}
		return c
	})
	return rows
}

func resultRows(r *result) []int {
	out := make([]int, r.len())
	for i := range out {
		out[i] = r.at(i)
	}
	return out
}

func checkQuery(t *testing.T, d *dataset, st gridState) {
	t.Helper()
	want := reference(d, st)
	got := resultRows(d.run(st.query()))
	if len(got) != len(want) {
		t.Fatalf("%d rows match, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("match %d is row %d, want row %d", i, got[i], want[i])
		}
	}
}

func TestQueryMatchesReference(t *testing.T) {
	d := generate(20_000)
	filters := []gridState{
		{},
		{Text: "an"},
		{Text: "  LoNdOn "},
		{Text: "o", Status: "refunded"},
		{Status: "pending", MinAmount: 1000},
		{MinAmount: 12.34},
		{MinAmount: 4000.005},
		{Text: "no such thing"},
		{MinAmount: 1e6},
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

// TestQueryFullTable checks a few queries on the real 600,000 rows, chosen
// so that the reference's slow sort stays quick.
func TestQueryFullTable(t *testing.T) {
	d := data()
	for _, st := range []gridState{
		{Text: "zimmermann", Status: "refunded", Column: "amount", Dir: "desc"},
		{Text: "oslo", MinAmount: 3000, Column: "name"},
		{Status: "pending", MinAmount: 2500, Column: "date", Dir: "desc"},
		{Text: "drone", Status: "paid", Column: "id", Dir: "desc"},
	} {
		t.Run(fmt.Sprintf("%+v", st), func(t *testing.T) { checkQuery(t, d, st) })
	}
	t.Run("everything by id", func(t *testing.T) {
		for _, dir := range []string{"asc", "desc"} {
			r := d.run(gridState{Column: "id", Dir: dir}.query())
			if r.len() != rowCount {
				t.Fatalf("%s: %d rows, want %d", dir, r.len(), rowCount)
			}
			first, last := r.at(0), r.at(r.len()-1)
			if dir == "desc" {
				first, last = last, first
			}
			if first != 0 || last != rowCount-1 {
				t.Fatalf("%s: rows run from %d to %d", dir, r.at(0), r.at(r.len()-1))
			}
		}
	})
	t.Run("everything by amount is ordered", func(t *testing.T) {
		r := d.run(gridState{Column: "amount"}.query())
		if r.len() != rowCount {
			t.Fatalf("%d rows, want %d", r.len(), rowCount)
		}
		for i := 1; i < r.len(); i++ {
			a, b := r.at(i-1), r.at(i)
			if d.cents[a] > d.cents[b] || d.cents[a] == d.cents[b] && a > b {
				t.Fatalf("rows %d and %d out of order at %d", a, b, i)
			}
		}
	})
}

func TestRadixSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, top := range []uint32{0, 1, 255, 256, 70_000, 1 << 24, 1<<32 - 1} {
		for _, n := range []int{0, 1, 2, 1000} {
			t.Run(fmt.Sprintf("top=%d/n=%d", top, n), func(t *testing.T) {
				rows := make([]int32, n)
				keys := make([]uint32, n)
				for i := range rows {
					rows[i] = int32(i)
					keys[i] = uint32(rng.Uint64() % (uint64(top) + 1))
				}
				want := slices.Clone(rows)
				slices.SortStableFunc(want, func(a, b int32) int { return cmp.Compare(keys[a], keys[b]) })
				radixSort(rows, slices.Clone(keys), top)
				if !slices.Equal(rows, want) {
					t.Fatalf("got %v, want %v", rows[:min(n, 10)], want[:min(n, 10)])
				}
			})
		}
	}
}

func TestMinCents(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want int64
	}{
		{0, 0}, {0.01, 1}, {12.34, 1234}, {12.345, 1235}, {0.1 + 0.2, 30}, {4999.99, 499999}, {1e7, 1e9},
	} {
		if got := minCents(c.in); got != c.want {
			t.Errorf("minCents(%v) = %d, want %d", c.in, got, c.want)
		}
	}
}
