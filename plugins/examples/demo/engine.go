package demo

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/stickyd/stickyd/plugins/worker"
)

// The demo's engine (worker.Engine) is its order table with every sort
// order the grid offers already computed: for each column but id, the
// row indexes in ascending and in descending order of the value the grid
// shows, ties in id order both ways. A sort with no filter is then a view
// of the engine, and a filtered one a walk over it; no query sorts.
//
// Building it costs about 1.3 s of one core for 600,000 rows, nearly all
// of it the six comparison sorts by shown value (strings compared as
// strings, amounts as numbers, dates as their text): the grid's definition
// of its order, valid for any column, and the step a group's template
// saves every worker but the first. Loading it copies nothing: the table
// and the orders are slices over the image.
//
// The image, every array starting at a multiple of 8 bytes and every
// integer in the machine's byte order (an image is only read by the build
// that wrote it: the template key is the executable's hash):
//
//	header    engineHeaderSize bytes: magic, rows (uint64), maxCents (uint64)
//	name      rows × uint16
//	city      rows × uint8
//	product   rows × uint8
//	status    rows × uint8
//	cents     rows × int32
//	day       rows × uint16
//	asc       for each column but id, rows × int32
//	desc      for each column but id, rows × int32
//
// The dictionaries (names, ranks, lower cases) are a few thousand short
// strings derived from the package's word lists; LoadEngine makes them
// (under a millisecond) rather than storing strings in the image.
const (
	engineMagic      = "DEMOENG1"
	engineHeaderSize = 64
)

// errBadEngine wraps every reason an image is not the demo's engine.
var errBadEngine = errors.New("not a demo engine image")

// sortOrders are the engine's orders, indexed like columns; id's are nil
// (the rows are in id order).
type sortOrders struct {
	asc, desc [][]int32
}

// WithEngine returns the application with its engine: the worker builds
// the whole table and its sort orders (or maps them from the group's
// template) before it serves, and every sort reads them. Without it the
// table is generated on the first grid page and each query sorts.
//
// The engine is a choice of the binary (cmd/demo-worker serves it) rather
// than of every demo App, because its comparison sorts take about 30 s
// under the race detector: a race-enabled test that starts demo workers
// would wait that long for each one.
func (a *App) WithEngine() worker.App { return engineApp{a} }

// engineApp is the App with worker.Engine. Embedding keeps every other
// ability of *App (Schemas, TableWatcher) visible to the SDK.
type engineApp struct{ *App }

var (
	_ worker.Engine       = engineApp{}
	_ worker.Schemas      = engineApp{}
	_ worker.TableWatcher = engineApp{}
)

// BuildEngine builds the engine's image for the whole order table.
func (a engineApp) BuildEngine(ctx context.Context) ([]byte, error) {
	return buildEngine(ctx, rowCount)
}

// LoadEngine makes the image the App's table. The table reads the image in
// place, for as long as the worker serves.
func (a engineApp) LoadEngine(image []byte) error {
	d, err := openEngine(image)
	if err != nil {
		return fmt.Errorf("loading the demo's engine: %w", err)
	}
	a.table = func() *dataset { return d }
	return nil
}

// engineLayout is where each array of a rows-row image starts.
type engineLayout struct {
	rows                                    int
	name, city, product, status, cents, day int
	asc, desc                               []int // by column; 0 for id
	size                                    int
}

func layoutFor(rows int) engineLayout {
	l := engineLayout{rows: rows, asc: make([]int, len(columns)), desc: make([]int, len(columns))}
	off := engineHeaderSize
	next := func(bytes int) int {
		at := off
		off = (off + bytes + 7) &^ 7
		return at
	}
	l.name = next(rows * 2)
	l.city = next(rows)
	l.product = next(rows)
	l.status = next(rows)
	l.cents = next(rows * 4)
	l.day = next(rows * 2)
	for c := 1; c < len(columns); c++ {
		l.asc[c] = next(rows * 4)
	}
	for c := 1; c < len(columns); c++ {
		l.desc[c] = next(rows * 4)
	}
	l.size = off
	return l
}

// view is n values of type T at byte off of b. b must hold them and be
// aligned for T; it is, as every offset is a multiple of 8 and an image
// starts at a multiple of 8 (worker.Engine's contract).
func view[T any](b []byte, off, n int) []T {
	if n == 0 {
		return []T{}
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[off])), n)
}

// viewEngine returns the table laid out in b, with its dictionaries.
func viewEngine(b []byte, l engineLayout) *dataset {
	d := &dataset{
		name:    view[uint16](b, l.name, l.rows),
		city:    view[uint8](b, l.city, l.rows),
		product: view[uint8](b, l.product, l.rows),
		status:  view[uint8](b, l.status, l.rows),
		cents:   view[int32](b, l.cents, l.rows),
		day:     view[uint16](b, l.day, l.rows),
		sorted: &sortOrders{
			asc:  make([][]int32, len(columns)),
			desc: make([][]int32, len(columns)),
		},
	}
	for c := 1; c < len(columns); c++ {
		d.sorted.asc[c] = view[int32](b, l.asc[c], l.rows)
		d.sorted.desc[c] = view[int32](b, l.desc[c], l.rows)
	}
	d.fillDictionaries()
	return d
}

// buildEngine generates a rows-row table and lays it out, with its sort
// orders, in a new image.
func buildEngine(ctx context.Context, rows int) ([]byte, error) {
	l := layoutFor(rows)
	// Words, so that the image starts at a multiple of 8 however small.
	words := make([]uint64, l.size/8)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), l.size)
	src := generate(rows)
	copy(b, engineMagic)
	binary.NativeEndian.PutUint64(b[8:], uint64(rows))
	binary.NativeEndian.PutUint64(b[16:], uint64(src.maxCents))
	d := viewEngine(b, l)
	copy(d.name, src.name)
	copy(d.city, src.city)
	copy(d.product, src.product)
	copy(d.status, src.status)
	copy(d.cents, src.cents)
	copy(d.day, src.day)
	d.maxCents = src.maxCents
	for c := 1; c < len(columns); c++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("building the demo's engine: %w", err)
		}
		d.sortColumn(c)
	}
	return b, nil
}

// sortColumn fills column c's orders: rows sorted by the shown value, ties
// in id order; descending is the same runs of equal values, last first.
func (d *dataset) sortColumn(c int) {
	compare := d.compareShown(c)
	asc, desc := d.sorted.asc[c], d.sorted.desc[c]
	for i := range asc {
		asc[i] = int32(i)
	}
	slices.SortStableFunc(asc, compare)
	out := 0
	for end := len(asc); end > 0; {
		start := end - 1
		for start > 0 && compare(asc[start-1], asc[end-1]) == 0 {
			start--
		}
		out += copy(desc[out:], asc[start:end])
		end = start
	}
}

// compareShown orders two rows by the value the grid shows in column c.
func (d *dataset) compareShown(c int) func(a, b int32) int {
	switch columns[c] {
	case "name":
		return func(a, b int32) int { return strings.Compare(d.names[d.name[a]], d.names[d.name[b]]) }
	case "city":
		return func(a, b int32) int { return strings.Compare(cities[d.city[a]], cities[d.city[b]]) }
	case "product":
		return func(a, b int32) int { return strings.Compare(products[d.product[a]], products[d.product[b]]) }
	case "status":
		return func(a, b int32) int { return strings.Compare(statuses[d.status[a]], statuses[d.status[b]]) }
	case "amount":
		return func(a, b int32) int { return cmp.Compare(d.cents[a], d.cents[b]) }
	case "date":
		dates := make([]string, days)
		for i := range dates {
			dates[i] = epoch.AddDate(0, 0, i).Format(time.DateOnly)
		}
		return func(a, b int32) int { return strings.Compare(dates[d.day[a]], dates[d.day[b]]) }
	}
	return func(a, b int32) int { return cmp.Compare(a, b) }
}

// openEngine returns the table an image holds, reading it in place.
func openEngine(b []byte) (*dataset, error) {
	if len(b) < engineHeaderSize || string(b[:len(engineMagic)]) != engineMagic {
		return nil, fmt.Errorf("%w: bad magic", errBadEngine)
	}
	if uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
		return nil, fmt.Errorf("%w: the image is not aligned to 8 bytes", errBadEngine)
	}
	rows := binary.NativeEndian.Uint64(b[8:])
	if rows > 1<<31-1 {
		return nil, fmt.Errorf("%w: %d rows", errBadEngine, rows)
	}
	l := layoutFor(int(rows))
	if len(b) != l.size {
		return nil, fmt.Errorf("%w: %d bytes, %d rows take %d", errBadEngine, len(b), rows, l.size)
	}
	d := viewEngine(b, l)
	d.maxCents = int32(binary.NativeEndian.Uint64(b[16:]))
	return d, nil
}

// runSorted answers q, a query on a column other than id, from the engine's
// orders: with no filter the order itself (a view of the image), else the
// matching rows picked from it.
func (d *dataset) runSorted(q query) *result {
	order := d.sorted.asc[q.column]
	if q.desc {
		order = d.sorted.desc[q.column]
	}
	if q.text == "" && q.status < 0 && q.minCents <= 0 {
		return &result{rows: order, n: len(order)}
	}
	match := d.filter(q)
	in := make([]uint64, (d.len()+63)/64)
	for _, r := range match {
		in[r>>6] |= 1 << (r & 63)
	}
	rows := make([]int32, 0, len(match))
	for _, r := range order {
		if in[r>>6]&(1<<(r&63)) != 0 {
			rows = append(rows, r)
		}
	}
	return &result{rows: rows, n: len(rows)}
}
