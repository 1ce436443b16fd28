package demo

import (
	"reflect"
	"slices"
	"testing"
	"unsafe"
)

func TestGenerateIsDeterministic(t *testing.T) {
	a, b := generate(5000), generate(5000)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two generations of the same size differ")
	}
	if a.len() != 5000 {
		t.Fatalf("len = %d, want 5000", a.len())
	}
	// The first rows of the big table are the first rows of any size's,
	// except the date, which spreads over the table's length.
	full := data()
	for i := range 100 {
		if a.name[i] != full.name[i] || a.cents[i] != full.cents[i] || a.city[i] != full.city[i] {
			t.Fatalf("row %d differs between sizes", i)
		}
	}
}

func TestDatasetShape(t *testing.T) {
	d := data()
	if d.len() != rowCount {
		t.Fatalf("len = %d, want %d", d.len(), rowCount)
	}
	seen := make([]int, len(statuses))
	for i := range d.len() {
		switch {
		case int(d.name[i]) >= len(d.names):
			t.Fatalf("row %d: name %d out of range", i, d.name[i])
		case int(d.city[i]) >= len(cities):
			t.Fatalf("row %d: city %d out of range", i, d.city[i])
		case int(d.product[i]) >= len(products):
			t.Fatalf("row %d: product %d out of range", i, d.product[i])
		case int(d.status[i]) >= len(statuses):
			t.Fatalf("row %d: status %d out of range", i, d.status[i])
		case d.cents[i] < 100 || d.cents[i] > d.maxCents:
			t.Fatalf("row %d: amount %d out of range", i, d.cents[i])
		case int(d.day[i]) >= days:
			t.Fatalf("row %d: day %d out of range", i, d.day[i])
		}
		seen[d.status[i]]++
	}
	for s, n := range seen {
		if n == 0 {
			t.Errorf("no row has status %q", statuses[s])
		}
	}
	if d.date(0) < "2021-01-01" || d.date(d.len()-1) > "2025-12-31" {
		t.Errorf("dates run from %s to %s", d.date(0), d.date(d.len()-1))
	}
}

// TestDatasetIsCompact keeps the table's columns small: a wider column
// costs every worker megabytes.
func TestDatasetIsCompact(t *testing.T) {
	d := data()
	perRow := unsafe.Sizeof(d.name[0]) + unsafe.Sizeof(d.city[0]) + unsafe.Sizeof(d.product[0]) +
		unsafe.Sizeof(d.status[0]) + unsafe.Sizeof(d.cents[0]) + unsafe.Sizeof(d.day[0])
	if total := int(perRow) * d.len(); perRow > 16 || total > 16<<20 {
		t.Fatalf("columns take %d bytes a row, %d MB in all", perRow, total>>20)
	}
}

func TestDictionaryRanks(t *testing.T) {
	d := generate(10)
	for _, c := range []struct {
		name  string
		words []string
		rank  []uint32
	}{
		{"names", d.names, d.nameRank},
		{"cities", cities, d.cityRank},
		{"products", products, d.productRank},
		{"statuses", statuses, d.statusRank},
	} {
		t.Run(c.name, func(t *testing.T) {
			byRank := make([]string, len(c.words))
			for i, w := range c.words {
				byRank[c.rank[i]] = w
			}
			if !slices.IsSorted(byRank) || slices.Contains(byRank, "") {
				t.Fatalf("ranks do not sort the words: %q", byRank)
			}
		})
	}
}

func TestRowValues(t *testing.T) {
	d := data()
	r := d.row(41)
	want := map[string]any{
		"id":      42.0,
		"name":    d.names[d.name[41]],
		"city":    cities[d.city[41]],
		"product": products[d.product[41]],
		"status":  statuses[d.status[41]],
		"amount":  float64(d.cents[41]) / 100,
		"date":    d.date(41),
	}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("row(41) = %v, want %v", r, want)
	}
	if len(r) != len(columns) {
		t.Fatalf("a row has %d keys, want one per column (%d)", len(r), len(columns))
	}
}
