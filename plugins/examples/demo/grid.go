package demo

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/stickyd/stickyd/plugins/worker"
)

// The grid page's tree:
//
//	filter/text        string  free text over name, city and product
//	filter/status      string  one of meta/statuses, or "" for any
//	filter/min_amount  number  0 means no minimum
//	sort/column        string  one of meta/columns
//	sort/dir           string  "asc" or "desc"
//	offset             number  first row of the window
//	page_size          number  rows in the window, 1 to 200
//	total              number  rows matching the filter
//	rows               array   the window: objects with the columns as keys
//	took_ms            number  time the last message's query took
//	cache              string  "hit" if it used the cached index, "miss" if it built it
//	meta/columns, meta/statuses, meta/row_count  fixed, written when the page opens
//
// Messages: {"op":"filter", "text"?, "status"?, "min_amount"?} sets the
// given fields and goes back to the top; {"op":"sort", "column", "dir"?}
// sorts ("dir" defaults to "asc") and goes back to the top; {"op":"scroll",
// "offset", "page_size"?} moves the window (an offset past the end shows the
// last rows); {"op":"reset"} restores the defaults of the filter, the sort
// and the offset (the window keeps its page_size). Each answers
// {"total", "offset", "took_ms", "cache"}.
const (
	defaultPageSize = 50
	maxPageSize     = 200
	maxTextRunes    = 100
	maxMinAmount    = 1e7
	maxOffset       = 1 << 30
)

// localIndex is the Page.Local key of the page's *gridIndex.
const localIndex = "demo.grid.index"

// gridState is the grid's truth, as the tree holds it.
type gridState struct {
	Text      string
	Status    string
	MinAmount float64
	Column    string
	Dir       string
	Offset    int
	PageSize  int
}

func defaultGrid() gridState {
	return gridState{Column: "id", Dir: "asc", PageSize: defaultPageSize}
}

// readGrid reads the state from the tree. A value that is missing or out of
// range (a tree from an older build) reads as its default, and the next
// write puts the default in the tree.
func readGrid(t *worker.Tree) gridState {
	st := defaultGrid()
	st.Text = t.String("filter/text")
	if s := t.String("filter/status"); slices.Contains(statuses, s) {
		st.Status = s
	}
	if m := t.Number("filter/min_amount"); m > 0 && m <= maxMinAmount {
		st.MinAmount = m
	}
	if c := t.String("sort/column"); slices.Contains(columns, c) {
		st.Column = c
	}
	if t.String("sort/dir") == "desc" {
		st.Dir = "desc"
	}
	if o := t.Number("offset"); o > 0 && o <= maxOffset {
		st.Offset = int(o)
	}
	if s := t.Number("page_size"); s >= 1 && s <= maxPageSize {
		st.PageSize = int(s)
	}
	return st
}

// query is the state's query over the table.
func (st gridState) query() query {
	return query{
		text:     strings.ToLower(strings.TrimSpace(st.Text)),
		status:   slices.Index(statuses, st.Status),
		minCents: minCents(st.MinAmount),
		column:   max(slices.Index(columns, st.Column), 0),
		desc:     st.Dir == "desc",
	}
}

// gridIndex is the cached result of the tree's query: a live object in
// Page.Local, never the truth.
type gridIndex struct {
	q   query
	res *result
}

// index returns the result of q: the page's cached one when it answers q,
// otherwise one built from the table and cached. The cache is gone after
// the page moved to another worker; it is rebuilt here from the tree.
func (a *App) index(p *worker.Page, q query) (res *result, hit bool) {
	if c, ok := p.Local()[localIndex].(*gridIndex); ok && c.q == q {
		return c.res, true
	}
	res = a.table().run(q)
	p.Local()[localIndex] = &gridIndex{q: q, res: res}
	return res, false
}

// gridAnswer is the answer to every grid message.
type gridAnswer struct {
	Total  int     `json:"total"`
	Offset int     `json:"offset"`
	TookMS float64 `json:"took_ms"`
	Cache  string  `json:"cache"`
}

func (a *App) openGrid(p *worker.Page) error {
	t := p.Tree()
	meta := map[string]any{
		"columns":   anyList(columns),
		"statuses":  anyList(statuses),
		"row_count": float64(a.table().len()),
	}
	if err := setChanged(t, "meta", meta); err != nil {
		return fmt.Errorf("opening a grid page: %w", err)
	}
	_, err := a.showGrid(p, defaultGrid())
	return err
}

type filterMsg struct {
	Op        string   `json:"op"`
	Text      *string  `json:"text"`
	Status    *string  `json:"status"`
	MinAmount *float64 `json:"min_amount"`
}

type sortMsg struct {
	Op     string `json:"op"`
	Column string `json:"column"`
	Dir    string `json:"dir"`
}

type scrollMsg struct {
	Op       string `json:"op"`
	Offset   *int   `json:"offset"`
	PageSize *int   `json:"page_size"`
}

func (a *App) gridMessage(p *worker.Page, raw json.RawMessage) (any, error) {
	op, err := readOp(raw)
	if err != nil {
		return nil, err
	}
	st := readGrid(p.Tree())
	switch op {
	case "filter":
		var m filterMsg
		if err := decodeOp(op, raw, &m); err != nil {
			return nil, err
		}
		if st, err = applyFilter(st, m); err != nil {
			return nil, err
		}
	case "sort":
		var m sortMsg
		if err := decodeOp(op, raw, &m); err != nil {
			return nil, err
		}
		if st, err = applySort(st, m); err != nil {
			return nil, err
		}
	case "scroll":
		var m scrollMsg
		if err := decodeOp(op, raw, &m); err != nil {
			return nil, err
		}
		if st, err = applyScroll(st, m); err != nil {
			return nil, err
		}
	case "reset":
		var m struct {
			Op string `json:"op"`
		}
		if err := decodeOp(op, raw, &m); err != nil {
			return nil, err
		}
		// The window's size is the browser's room, not a setting: it
		// stays, so the page does not draw the default size and refit.
		size := st.PageSize
		st = defaultGrid()
		st.PageSize = size
	default:
		return nil, unknownOp(kindGrid, op, "filter", "sort", "scroll", "reset")
	}
	return a.showGrid(p, st)
}

// applyFilter sets the fields m gives. A filter that changes goes back to
// the top; one sent again (a retry) keeps the offset.
func applyFilter(st gridState, m filterMsg) (gridState, error) {
	const doing = "filtering the grid"
	next := st
	if m.Text != nil {
		if n := utf8.RuneCountInString(*m.Text); n > maxTextRunes {
			return st, badf(doing, "text has %d characters, at most %d", n, maxTextRunes)
		}
		next.Text = *m.Text
	}
	if m.Status != nil {
		if *m.Status != "" && !slices.Contains(statuses, *m.Status) {
			return st, badf(doing, "status %q is not one of %q (or \"\" for any)", *m.Status, statuses)
		}
		next.Status = *m.Status
	}
	if m.MinAmount != nil {
		v := *m.MinAmount
		if v < 0 || v > maxMinAmount {
			return st, badf(doing, "min_amount %v is not between 0 and %d", v, int(maxMinAmount))
		}
		next.MinAmount = v
	}
	if next.query() != st.query() {
		next.Offset = 0
	}
	return next, nil
}

// applySort sorts on m's column; a new order goes back to the top.
func applySort(st gridState, m sortMsg) (gridState, error) {
	const doing = "sorting the grid"
	if !slices.Contains(columns, m.Column) {
		return st, badf(doing, "column %q is not one of %q", m.Column, columns)
	}
	dir := m.Dir
	if dir == "" {
		dir = "asc"
	}
	if dir != "asc" && dir != "desc" {
		return st, badf(doing, "dir %q is not \"asc\" or \"desc\"", m.Dir)
	}
	if m.Column != st.Column || dir != st.Dir {
		st.Column, st.Dir, st.Offset = m.Column, dir, 0
	}
	return st, nil
}

// applyScroll moves the window; showGrid clamps an offset past the end.
func applyScroll(st gridState, m scrollMsg) (gridState, error) {
	const doing = "scrolling the grid"
	if m.Offset == nil {
		return st, badf(doing, "offset is missing")
	}
	if *m.Offset < 0 {
		return st, badf(doing, "offset %d is negative", *m.Offset)
	}
	st.Offset = min(*m.Offset, maxOffset)
	if m.PageSize != nil {
		if *m.PageSize < 1 || *m.PageSize > maxPageSize {
			return st, badf(doing, "page_size %d is not between 1 and %d", *m.PageSize, maxPageSize)
		}
		st.PageSize = *m.PageSize
	}
	return st, nil
}

// showGrid brings the tree to st: it runs the query (from the cache when it
// can), clamps the offset so the window ends at the last row at most, and
// writes what changed.
func (a *App) showGrid(p *worker.Page, st gridState) (gridAnswer, error) {
	start := time.Now()
	res, hit := a.index(p, st.query())
	st.Offset = max(min(st.Offset, res.len()-st.PageSize), 0)
	end := min(st.Offset+st.PageSize, res.len())
	d := a.table()
	rows := make([]any, 0, end-st.Offset)
	for i := st.Offset; i < end; i++ {
		rows = append(rows, d.row(res.at(i)))
	}
	ans := gridAnswer{
		Total:  res.len(),
		Offset: st.Offset,
		TookMS: math.Round(float64(time.Since(start).Microseconds())) / 1000,
		Cache:  "miss",
	}
	if hit {
		ans.Cache = "hit"
	}
	t := p.Tree()
	writes := []struct {
		path string
		v    any
	}{
		{"filter/text", st.Text},
		{"filter/status", st.Status},
		{"filter/min_amount", st.MinAmount},
		{"sort/column", st.Column},
		{"sort/dir", st.Dir},
		{"offset", float64(st.Offset)},
		{"page_size", float64(st.PageSize)},
		{"total", float64(ans.Total)},
		{"took_ms", ans.TookMS},
		{"cache", ans.Cache},
	}
	for _, w := range writes {
		if err := setChanged(t, w.path, w.v); err != nil {
			return ans, fmt.Errorf("writing the grid: %w", err)
		}
	}
	if err := setList(t, "rows", rows); err != nil {
		return ans, fmt.Errorf("writing the grid's rows: %w", err)
	}
	return ans, nil
}
