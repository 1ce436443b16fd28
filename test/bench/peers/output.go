package main

import (
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// writeFiles writes a CSV file and a PNG plot for each part the run
// measured into dir, and returns their paths.
func writeFiles(dir string, r *report) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	add := func(name string, write func(path string) error) error {
		path := filepath.Join(dir, name)
		if err := write(path); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		files = append(files, path)
		return nil
	}
	if len(r.state) > 0 {
		if err := add("peers-state.csv", func(p string) error { return writeCSV(p, stateCSV(r.state)) }); err != nil {
			return files, err
		}
		caption := fmt.Sprintf("%d pages, closed loop, inc — %s", r.state[0].pages, r.machine)
		if err := add("peers-state.png", func(p string) error { return plotState(p, r.state, caption) }); err != nil {
			return files, err
		}
	}
	if len(r.live) > 0 {
		if err := add("peers-live.csv", func(p string) error { return writeCSV(p, liveCSV(r.live)) }); err != nil {
			return files, err
		}
		rows, caption := livePlotRows(r)
		if err := add("peers-live.png", func(p string) error { return plotState(p, rows, caption) }); err != nil {
			return files, err
		}
	}
	if len(r.proxy) > 0 {
		if err := add("peers-proxy.csv", func(p string) error { return writeCSV(p, proxyCSV(r.proxy)) }); err != nil {
			return files, err
		}
		if err := add("peers-proxy.png", func(p string) error { return plotProxy(p, r) }); err != nil {
			return files, err
		}
	}
	if len(r.idle) > 0 {
		if err := add("peers-idle.csv", func(p string) error { return writeCSV(p, idleCSV(r.idle)) }); err != nil {
			return files, err
		}
		if err := add("peers-idle.png", func(p string) error { return plotIdle(p, r) }); err != nil {
			return files, err
		}
	}
	return files, nil
}

func writeCSV(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if err := w.WriteAll(rows); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func us(d time.Duration) string { return strconv.FormatFloat(round3(float64(d)/1e3), 'f', -1, 64) }
func num(x float64) string      { return strconv.FormatFloat(round3(x), 'f', -1, 64) }

func stateCSV(rs []stateResult) [][]string {
	rows := [][]string{{"system", "state_bytes", "pages", "msgs", "window_s", "msgs_per_s", "p50_us", "p99_us", "max_us"}}
	for _, r := range rs {
		rows = append(rows, []string{r.key, strconv.Itoa(r.size.Bytes), strconv.Itoa(r.pages), strconv.Itoa(r.msgs),
			num(r.window.Seconds()), num(r.rate()), us(r.p(0.50)), us(r.p(0.99)), us(r.p(1))})
	}
	return rows
}

func proxyCSV(rs []proxyResult) [][]string {
	rows := [][]string{{"system", "connections", "msgs", "window_s", "msgs_per_s", "p50_us", "p99_us", "max_us",
		"cpu_front_us_per_msg", "cpu_behind_us_per_msg", "cpu_client_us_per_msg"}}
	for _, r := range rs {
		rows = append(rows, []string{r.key, strconv.Itoa(r.conns), strconv.Itoa(r.msgs),
			num(r.window.Seconds()), num(r.rate()), us(r.p(0.50)), us(r.p(0.99)), us(r.p(1)),
			num(r.cpuPerMsg(standFront)), num(r.cpuPerMsg(standBehind)), num(r.cpuPerMsg(standClient))})
	}
	return rows
}

func idleCSV(rs []idleResult) [][]string {
	rows := [][]string{{"server", "websockets", "measured", "rss_base_bytes", "rss_loaded_bytes", "rss_open_bytes",
		"per_websocket_rss_bytes", "per_websocket_heap_bytes", "per_websocket_stack_bytes", "goroutines_loaded", "goroutines_open",
		"backend_loaded_bytes", "backend_open_bytes", "per_websocket_backend_bytes", "note"}}
	for _, r := range rs {
		if r.skipped != "" {
			rows = append(rows, []string{r.key, strconv.Itoa(r.conns), "false", "", "", "", "", "", "", "", "", "", "", "", r.skipped})
			continue
		}
		rss, backend := r.perSocket()
		heap, stacks := "", ""
		if r.isGo {
			h, s, _ := r.perSocketGo()
			heap, stacks = num(h), num(s)
		}
		rows = append(rows, []string{r.key, strconv.Itoa(r.conns), "true",
			strconv.FormatInt(r.base.rss, 10), strconv.FormatInt(r.loaded.rss, 10), strconv.FormatInt(r.open.rss, 10),
			num(rss), heap, stacks, strconv.Itoa(r.loaded.goroutines), strconv.Itoa(r.open.goroutines),
			strconv.FormatInt(r.loaded.backend, 10), strconv.FormatInt(r.open.backend, 10), num(backend), r.backend})
	}
	return rows
}

// plotState draws p50 and msgs/s against the state size, one line per
// system, both axes logarithmic, over caption.
func plotState(path string, rs []stateResult, caption string) error {
	latency, rate := plot.New(), plot.New()
	latency.Title.Text = "per-message p50 latency"
	latency.Y.Label.Text = "p50 (ms)"
	rate.Title.Text = "messages per second, all pages"
	rate.Y.Label.Text = "msgs/s"
	var sizeTicks plot.ConstantTicks
	for _, s := range stateSizes(rs) {
		sizeTicks = append(sizeTicks, plot.Tick{Value: float64(max(s.Bytes, 1)), Label: s.Label})
	}
	for _, p := range []*plot.Plot{latency, rate} {
		p.X.Label.Text = "page state"
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, sizeTicks
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		p.Legend.Top = true
	}
	var keys []string
	for _, s := range rs {
		if !slices.Contains(keys, s.key) {
			keys = append(keys, s.key)
		}
	}
	for i, k := range keys {
		var lat, rt plotter.XYs
		label := k
		for _, s := range rs {
			if s.key != k {
				continue
			}
			x := float64(max(s.size.Bytes, 1))
			lat = append(lat, plotter.XY{X: x, Y: float64(s.p(0.50)) / 1e6})
			rt = append(rt, plotter.XY{X: x, Y: s.rate()})
		}
		for _, pp := range []struct {
			p   *plot.Plot
			xys plotter.XYs
		}{{latency, lat}, {rate, rt}} {
			l, pts, err := plotter.NewLinePoints(pp.xys)
			if err != nil {
				return err
			}
			l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
			pts.Shape = plotutil.Shape(i)
			pp.p.Add(l, pts)
			pp.p.Legend.Add(label, l, pts)
		}
	}
	// Room above the lines for the legend: a decade on a log axis.
	for _, p := range []*plot.Plot{latency, rate} {
		p.Y.Max *= 10
	}
	return saveTiles(path, 2, [][]*plot.Plot{{latency, rate}}, caption)
}

// plotProxy draws msgs/s and p99 per connection count, a bar per system.
func plotProxy(path string, r *report) error {
	var keys []string
	var counts []int
	for _, p := range r.proxy {
		if !slices.Contains(keys, p.key) {
			keys = append(keys, p.key)
		}
		if !slices.Contains(counts, p.conns) {
			counts = append(counts, p.conns)
		}
	}
	names := make([]string, len(counts))
	for i, c := range counts {
		names[i] = formatCount(c) + " connections"
	}
	value := func(key string, conns int, f func(proxyResult) float64) float64 {
		for _, p := range r.proxy {
			if p.key == key && p.conns == conns {
				return f(p)
			}
		}
		return 0
	}
	rate := bars("messages per second", "msgs/s", keys, names, func(k string, i int) float64 {
		return value(k, counts[i], func(p proxyResult) float64 { return p.rate() })
	})
	p99 := bars("p99 latency", "p99 (ms)", keys, names, func(k string, i int) float64 {
		return value(k, counts[i], func(p proxyResult) float64 { return float64(p.p(0.99)) / 1e6 })
	})
	if rate.err != nil {
		return rate.err
	}
	if p99.err != nil {
		return p99.err
	}
	return saveTiles(path, 2, [][]*plot.Plot{{rate.p, p99.p}}, "WebSocket echo, closed loop — "+r.machine)
}

// plotIdle draws the memory per idle WebSocket, a bar per server, for each
// count measured.
func plotIdle(path string, r *report) error {
	var keys []string
	var counts []int
	for _, s := range r.idle {
		if s.skipped != "" {
			continue
		}
		if !slices.Contains(keys, s.key) {
			keys = append(keys, s.key)
		}
		if !slices.Contains(counts, s.conns) {
			counts = append(counts, s.conns)
		}
	}
	if len(counts) == 0 {
		return fmt.Errorf("no idle cell was measured")
	}
	names := make([]string, len(counts))
	for i, c := range counts {
		names[i] = formatCount(c) + " WebSockets"
	}
	b := bars("resident memory per idle WebSocket", "KB", keys, names, func(k string, i int) float64 {
		for _, s := range r.idle {
			if s.key == k && s.conns == counts[i] && s.skipped == "" {
				rss, _ := s.perSocket()
				return rss / 1024
			}
		}
		return 0
	})
	if b.err != nil {
		return b.err
	}
	target, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: idleGoal / 1024}, {X: float64(len(counts)) - 0.5, Y: idleGoal / 1024}})
	if err != nil {
		return err
	}
	target.Dashes = plotutil.Dashes(1)
	b.p.Add(target)
	b.p.Legend.Add("target for stickyd", target)
	return saveTiles(path, 1, [][]*plot.Plot{{b.p}}, r.machine)
}

// barPlot is a grouped bar chart, or the error building it.
type barPlot struct {
	p   *plot.Plot
	err error
}

// bars draws, for each group (names), a bar per key of height value(key,
// group index).
func bars(title, ylabel string, keys, names []string, value func(key string, group int) float64) barPlot {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	width := vg.Points(18)
	for j, k := range keys {
		vs := make(plotter.Values, len(names))
		for i := range names {
			vs[i] = value(k, i)
		}
		b, err := plotter.NewBarChart(vs, width)
		if err != nil {
			return barPlot{err: err}
		}
		b.Color = plotutil.Color(j)
		b.LineStyle.Width = 0
		b.Offset = vg.Length(float64(j)-float64(len(keys)-1)/2) * width
		p.Add(b)
		p.Legend.Add(k, b)
	}
	p.NominalX(names...)
	p.Y.Min = 0
	p.Y.Max *= 1.35 // room above the bars for the legend
	p.Y.Tick.Marker = plainTicks{}
	return barPlot{p: p}
}

// plainTicks are the default ticks labelled without trailing zeros
// ("50000", not "50000.00").
type plainTicks struct{}

func (plainTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
		}
	}
	return ts
}

// saveTiles draws plots side by side under a caption and writes them as a
// PNG.
func saveTiles(path string, cols int, plots [][]*plot.Plot, caption string) error {
	const w, h, captionH = 6 * vg.Inch, 4.5 * vg.Inch, 0.35 * vg.Inch
	img := vgimg.New(vg.Length(cols)*w, h+captionH)
	dc := draw.New(img)
	top := draw.Crop(dc, 0, 0, captionH, 0)
	tiles := draw.Tiles{Rows: len(plots), Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(plots, tiles, top)
	for i := range plots {
		for j := range plots[i] {
			plots[i][j].Draw(canvases[i][j])
		}
	}
	sty := plot.New().Title.TextStyle
	sty.Font.Size = vg.Points(9)
	sty.XAlign = draw.XCenter
	dc.FillText(sty, vg.Point{X: dc.Center().X, Y: dc.Min.Y + 0.12*vg.Inch}, caption)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
