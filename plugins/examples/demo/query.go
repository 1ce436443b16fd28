package demo

import (
	"math"
	"slices"
	"strings"
)

// columns a grid can sort on, in the order a page shows them.
var columns = []string{"id", "name", "city", "product", "status", "amount", "date"}

// query is what selects and orders rows. It is comparable, so a cached index
// knows whether it still answers the tree's query.
type query struct {
	text     string // lower-case substring of name, city or product; "" matches all
	status   int    // index into statuses, or -1 for any
	minCents int64  // rows with at least this amount; 0 means no minimum
	column   int    // index into columns
	desc     bool
}

// result is the ordered list of matching rows. When nothing is filtered
// and the order is by id, the rows are not listed: row i is i or its mirror.
type result struct {
	rows []int32 // matching row indexes, in order; nil when identity
	n    int     // number of matching rows
	desc bool    // for the identity: descending ids
}

// len is the number of matching rows.
func (r *result) len() int { return r.n }

// at is the row index of the i-th match, 0 <= i < len().
func (r *result) at(i int) int {
	if r.rows != nil {
		return int(r.rows[i])
	}
	if r.desc {
		return r.n - 1 - i
	}
	return i
}

// minCents turns a minimum amount in currency units into cents, rounding up
// so that a row matches exactly when its amount is at least min.
func minCents(min float64) int64 {
	return int64(math.Ceil(math.Round(min*1e6) / 1e4))
}

// run filters and sorts the whole table. Ties keep ascending id order in both
// directions. It costs one pass over the rows plus a radix sort of the
// matches: a few milliseconds for 600,000 rows. A table from the engine
// (engine.go) sorts nothing: it reads its precomputed orders.
func (d *dataset) run(q query) *result {
	if q.text == "" && q.status < 0 && q.minCents <= 0 && columns[q.column] == "id" {
		return &result{n: d.len(), desc: q.desc}
	}
	if d.sorted != nil && columns[q.column] != "id" {
		return d.runSorted(q) // the engine's orders: no sort at query time
	}
	rows := d.filter(q)
	switch columns[q.column] {
	case "id":
		if q.desc {
			slices.Reverse(rows)
		}
	default:
		key, top := d.sortKey(q.column)
		keys := make([]uint32, len(rows))
		for i, r := range rows {
			k := key(int(r))
			if q.desc {
				k = top - k
			}
			keys[i] = k
		}
		radixSort(rows, keys, top)
	}
	return &result{rows: rows, n: len(rows)}
}

// filter returns the matching rows in ascending id order.
func (d *dataset) filter(q query) []int32 {
	var nameOK, cityOK, productOK []bool
	if q.text != "" {
		nameOK = matches(d.namesLower, q.text)
		cityOK = matches(d.citiesLower, q.text)
		productOK = matches(d.productsLower, q.text)
	}
	status := uint8(0)
	if q.status >= 0 {
		status = uint8(q.status)
	}
	var rows []int32
	for i := range d.len() {
		if q.status >= 0 && d.status[i] != status {
			continue
		}
		if int64(d.cents[i]) < q.minCents {
			continue
		}
		if nameOK != nil && !nameOK[d.name[i]] && !cityOK[d.city[i]] && !productOK[d.product[i]] {
			continue
		}
		rows = append(rows, int32(i))
	}
	if cap(rows) > len(rows)+len(rows)/4 {
		rows = slices.Clone(rows) // the result stays cached: no spare room
	}
	return rows
}

// matches tells, for each dictionary entry, whether it contains text: the
// free-text filter looks at a few thousand words, not at 600,000 rows.
func matches(lower []string, text string) []bool {
	ok := make([]bool, len(lower))
	for i, w := range lower {
		ok[i] = strings.Contains(w, text)
	}
	return ok
}

// sortKey returns the integer key of a column, whose order is the column's
// order, and the largest key it can have.
func (d *dataset) sortKey(column int) (func(int) uint32, uint32) {
	switch columns[column] {
	case "name":
		return func(i int) uint32 { return d.nameRank[d.name[i]] }, uint32(len(d.names) - 1)
	case "city":
		return func(i int) uint32 { return d.cityRank[d.city[i]] }, uint32(len(cities) - 1)
	case "product":
		return func(i int) uint32 { return d.productRank[d.product[i]] }, uint32(len(products) - 1)
	case "status":
		return func(i int) uint32 { return d.statusRank[d.status[i]] }, uint32(len(statuses) - 1)
	case "amount":
		return func(i int) uint32 { return uint32(d.cents[i]) }, uint32(d.maxCents)
	case "date":
		return func(i int) uint32 { return uint32(d.day[i]) }, days - 1
	}
	return func(i int) uint32 { return uint32(i) }, uint32(max(d.len()-1, 0))
}

// radixSort orders rows by keys (parallel slices), stably, one byte of key
// per pass: as many passes as top, the largest key, has bytes.
func radixSort(rows []int32, keys []uint32, top uint32) {
	n := len(rows)
	if n < 2 {
		return
	}
	srcR, srcK := rows, keys
	dstR, dstK := make([]int32, n), make([]uint32, n)
	for shift := uint(0); shift < 32 && top>>shift > 0; shift += 8 {
		var count [257]int
		for _, k := range srcK {
			count[(k>>shift)&0xff+1]++
		}
		for b := 1; b < 257; b++ {
			count[b] += count[b-1]
		}
		for i, k := range srcK {
			b := (k >> shift) & 0xff
			j := count[b]
			count[b]++
			dstR[j], dstK[j] = srcR[i], k
		}
		srcR, dstR = dstR, srcR
		srcK, dstK = dstK, srcK
	}
	if &srcR[0] != &rows[0] {
		copy(rows, srcR)
	}
}
