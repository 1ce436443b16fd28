package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// Targets the issue sets, shown beside the measurements (never asserted).
const (
	// flatWithin: stickyd's p50 is flat across state sizes if the largest
	// is within this factor of the smallest.
	flatWithin = 1.25
	// inProcessWithin: stickyd's p50 within this factor of the in-process app's.
	inProcessWithin = 2.0
	// redisFactor: how much faster than the Redis app stickyd's p50 should
	// be, at redisFactorSize.
	redisFactor     = 300.0
	redisFactorSize = 1 << 20
	// idleGoal: bytes per idle WebSocket in stickyd (front and workers);
	// tabGoal: bytes per idle tab (a WebSocket, a page, a waiting pull).
	idleGoal = 8 << 10
	tabGoal  = 16 << 10
)

func printReport(w io.Writer, o *options, r *report) {
	fmt.Fprintln(w, "# stickyd and its peers")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- date: %s\n", r.start.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "- machine: %s\n", r.machine)
	if len(r.versions) > 0 {
		fmt.Fprintf(w, "- peers: %s\n", strings.Join(r.versions, ", "))
	}
	fmt.Fprintln(w, "- every server runs in its own process on this machine, and so does the client (this program): read the rows against each other, not as a server's capacity")
	if len(r.state) > 0 {
		printState(w, o, r.state)
	}
	if len(r.live) > 0 {
		printLive(w, o, r.live)
	}
	if len(r.proxy) > 0 {
		printProxy(w, o, r.proxy)
	}
	if len(r.idle) > 0 {
		printIdle(w, o, r.idle)
	}
	if len(r.files) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "Files: %s\n", strings.Join(r.files, ", "))
	}
}

func printState(w io.Writer, o *options, rs []stateResult) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "## Page state: in stickyd's worker vs in Redis")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- load: %d pages, each its own browser and WebSocket, closed loop, each sending the counter app's `inc`; "+
		"every page holds a blob of the given size, filled and its deltas acknowledged before measuring; %s\n",
		o.pages, windowRule(o))
	fmt.Fprintf(w, "- stickyd: the front and %d go-plugin workers; the state stays in the worker's page tree\n", o.workers)
	fmt.Fprintln(w, "- Redis app: a Go WebSocket server (gorilla/websocket, go-redis) that for each message GETs the page, decodes it, applies the inc, encodes it and SETs it; redis-server without persistence")
	fmt.Fprintln(w, "- in-process: the same app in one Go process (gorilla/websocket) that keeps the page in its memory: no hop, no store")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| state/page | system | msgs/s | p50 | p99 | max | measured |")
	fmt.Fprintln(w, "|--:|---|--:|--:|--:|--:|--:|")
	for _, r := range rs {
		fmt.Fprintf(w, "| %s | %s | %.0f | %s | %s | %s | %s |\n", r.size.Label, r.label, r.rate(),
			benchkit.FormatDuration(r.p(0.50)), benchkit.FormatDuration(r.p(0.99)), benchkit.FormatDuration(r.p(1)), measured(r.loadResult))
	}

	sizes := stateSizes(rs)
	redisKeys := stateRedisKeys(rs)
	find := func(key string, size int) *stateResult {
		for i := range rs {
			if rs[i].key == key && rs[i].size.Bytes == size {
				return &rs[i]
			}
		}
		return nil
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "| state/page |")
	for _, k := range redisKeys {
		fmt.Fprintf(w, " %s p50 ÷ stickyd p50 | stickyd msgs/s ÷ %s |", k, k)
	}
	fmt.Fprintln(w, " stickyd p50 ÷ in-process p50 | stickyd p50 ÷ its p50 at the smallest state |")
	fmt.Fprint(w, "|--:|")
	fmt.Fprint(w, strings.Repeat("--:|--:|", len(redisKeys)))
	fmt.Fprintln(w, "--:|--:|")
	var first *stateResult
	for _, size := range sizes {
		st := find(sysStickyd, size.Bytes)
		if first == nil {
			first = st
		}
		fmt.Fprintf(w, "| %s |", size.Label)
		for _, k := range redisKeys {
			rd := find(k, size.Bytes)
			fmt.Fprintf(w, " %s | %s |", ratio(p50(rd), p50(st)), ratioF(rate(st), rate(rd)))
		}
		fmt.Fprintf(w, " %s | %s |\n", ratio(p50(st), p50(find(sysInProcess, size.Bytes))), ratio(p50(st), p50(first)))
	}

	// The targets.
	fmt.Fprintln(w)
	var stP50s, vsMem []float64
	for _, size := range sizes {
		if st := find(sysStickyd, size.Bytes); st != nil {
			stP50s = append(stP50s, float64(st.p(0.50)))
			if m := find(sysInProcess, size.Bytes); m != nil && m.p(0.50) > 0 {
				vsMem = append(vsMem, float64(st.p(0.50))/float64(m.p(0.50)))
			}
		}
	}
	if len(stP50s) > 1 {
		spread := slices.Max(stP50s) / slices.Min(stP50s)
		fmt.Fprintf(w, "- target: stickyd's p50 flat from %s to %s (here: within %.2f×): largest ÷ smallest = %.2f×: %s\n",
			sizes[0].Label, sizes[len(sizes)-1].Label, flatWithin, spread, met(spread <= flatWithin))
	}
	if len(vsMem) > 0 {
		worst := slices.Max(vsMem)
		fmt.Fprintf(w, "- target: stickyd's p50 within %.0f× of the in-process app's: at worst %.2f×: %s\n", inProcessWithin, worst, met(worst <= inProcessWithin))
	}
	if st := find(sysStickyd, redisFactorSize); st != nil {
		for _, k := range redisKeys {
			if rd := find(k, redisFactorSize); rd != nil && st.p(0.50) > 0 {
				f := float64(rd.p(0.50)) / float64(st.p(0.50))
				fmt.Fprintf(w, "- target: at 1MB stickyd's p50 at least %.0f× lower than the %s's: %.0f×: %s\n", redisFactor, k, f, met(f >= redisFactor))
			}
		}
	} else {
		fmt.Fprintln(w, "- target at 1MB (stickyd 300× faster than Redis): not measured (1MB is not among -sizes)")
	}
}

// windowRule says how long each cell was measured.
func windowRule(o *options) string {
	return fmt.Sprintf("after a warm-up of at least %s in which every client finished a round trip, each cell is measured for %s, "+
		"or longer until it holds %d round trips per client (at most %s)", o.warmup, o.duration, minPerClient, maxWindowFactor*o.duration)
}

// measured says how many round trips the window held and how long it was.
func measured(r loadResult) string {
	return fmt.Sprintf("%s in %.1f s", formatCount(r.msgs), r.window.Seconds())
}

// stateSizes lists the sizes of rs in the order they ran.
func stateSizes(rs []stateResult) []benchkit.Size {
	var out []benchkit.Size
	for _, r := range rs {
		if !slices.ContainsFunc(out, func(s benchkit.Size) bool { return s.Bytes == r.size.Bytes }) {
			out = append(out, r.size)
		}
	}
	return out
}

// stateRedisKeys lists the Redis apps of rs, in the order they ran.
func stateRedisKeys(rs []stateResult) []string {
	var out []string
	for _, r := range rs {
		if strings.HasPrefix(r.key, sysRedis) && !slices.Contains(out, r.key) {
			out = append(out, r.key)
		}
	}
	return out
}

func p50(r *stateResult) time.Duration {
	if r == nil {
		return 0
	}
	return r.p(0.50)
}

func rate(r *stateResult) float64 {
	if r == nil {
		return 0
	}
	return r.rate()
}

// ratio is a ÷ b, or "—" when either is missing.
func ratio(a, b time.Duration) string { return ratioF(float64(a), float64(b)) }

func ratioF(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "—"
	}
	q := a / b
	switch {
	case q >= 100:
		return fmt.Sprintf("%.0f×", q)
	case q >= 10:
		return fmt.Sprintf("%.1f×", q)
	default:
		return fmt.Sprintf("%.2f×", q)
	}
}

func met(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**not met**"
}

func printProxy(w io.Writer, o *options, rs []proxyResult) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "## WebSocket proxying: stickyd's front vs nginx")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- load: each connection is a browser (page load, then its WebSocket with the cookie), closed loop, each message an echo of %d bytes; %s\n",
		o.payload, windowRule(o))
	fmt.Fprintln(w, "- stickyd: the front routes each message to the person's worker, whose counter app answers the echo op")
	fmt.Fprintln(w, "- nginx: `hash $cookie_sid consistent` upstream, `proxy_http_version 1.1` with Upgrade, one worker per CPU; behind it plain Go echo servers (gorilla) that write back every message")
	fmt.Fprintln(w, "- CPU per message: utime + stime of /proc/PID/stat of each process, read before and after a cell's whole drive and divided by its round trips; "+
		"front: stickyd's agent, nginx's master and workers, the echo servers when alone; behind: stickyd's workers, the echo servers behind nginx; "+
		"the client is this program, which shares the two cores with them: at a given rate what it spends is not left to the servers")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| connections | system | msgs/s | p50 | p99 | max | CPU µs/msg: servers (front + behind) | client CPU µs/msg | measured |")
	fmt.Fprintln(w, "|--:|---|--:|--:|--:|--:|--:|--:|--:|")
	for _, r := range rs {
		fmt.Fprintf(w, "| %s | %s | %.0f | %s | %s | %s | %s | %s | %s |\n", formatCount(r.conns), r.label, r.rate(),
			benchkit.FormatDuration(r.p(0.50)), benchkit.FormatDuration(r.p(0.99)), benchkit.FormatDuration(r.p(1)),
			r.cpuSplit(), perMsgNum(r.cpuPerMsg(standClient)), measured(r.loadResult))
	}
	find := func(key string, n int) *proxyResult {
		for i := range rs {
			if rs[i].key == key && rs[i].conns == n {
				return &rs[i]
			}
		}
		return nil
	}
	rateOf := func(r *proxyResult) float64 {
		if r == nil {
			return 0
		}
		return r.rate()
	}
	p99Of := func(r *proxyResult) time.Duration {
		if r == nil {
			return 0
		}
		return r.p(0.99)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| connections | stickyd msgs/s ÷ nginx msgs/s | stickyd p99 ÷ nginx p99 | nginx msgs/s ÷ no proxy | stickyd msgs/s ÷ no proxy |")
	fmt.Fprintln(w, "|--:|--:|--:|--:|--:|")
	for _, n := range o.conns {
		st, ng, d := find(proxyStickyd, n), find(proxyNginx, n), find(proxyDirect, n)
		if st == nil && ng == nil {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", formatCount(n),
			ratioF(rateOf(st), rateOf(ng)), ratio(p99Of(st), p99Of(ng)), ratioF(rateOf(ng), rateOf(d)), ratioF(rateOf(st), rateOf(d)))
	}
}

func printIdle(w io.Writer, o *options, rs []idleResult) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "## Idle WebSockets: memory per connection")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- each server starts fresh; its memory is read after %s of quiet (Go servers: after a GC that returns freed memory to the system), "+
		"then again after as many page loads as WebSockets (each a new browser: stickyd records its connection), then again with the WebSockets open and idle "+
		"(the client answers pings); per WebSocket = (with WebSockets − after page loads) ÷ WebSockets\n", o.settle)
	fmt.Fprintln(w, "- stickyd: the agent process alone (front, supervisor, raft in memory); its workers are listed as what stands behind it. nginx: master and workers; the Go echo servers behind it are listed apart")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| server | WebSockets | RSS before | after page loads | with WebSockets | per WebSocket | Go heap / stacks per WebSocket | goroutines per WebSocket | behind it, per WebSocket | per browser (load + WebSocket) |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	var skipped []string
	for _, r := range rs {
		if r.skipped != "" {
			skipped = append(skipped, fmt.Sprintf("- %s at %s WebSockets: not measured: %s", r.label, formatCount(r.conns), r.skipped))
			continue
		}
		rss, backend := r.perSocket()
		goCol, grCol := "—", "—"
		if r.isGo {
			heap, stacks, goroutines := r.perSocketGo()
			goCol = formatBytes(heap) + " / " + formatBytes(stacks)
			grCol = fmt.Sprintf("%.2f", goroutines)
		}
		behind := "—"
		if r.backend != "" {
			behind = formatBytes(backend) + " (" + r.backend + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.label, formatCount(r.conns),
			formatBytes(float64(r.base.rss)), formatBytes(float64(r.loaded.rss)), formatBytes(float64(r.open.rss)),
			formatBytes(rss), goCol, grCol, behind, formatBytes(r.perBrowser()))
	}
	if len(skipped) > 0 {
		fmt.Fprintln(w)
		for _, s := range skipped {
			fmt.Fprintln(w, s)
		}
	}
	fmt.Fprintln(w)
	for _, r := range rs {
		if r.key != idleStickyd || r.skipped != "" {
			continue
		}
		rss, behind := r.perSocket()
		rss += behind
		line := fmt.Sprintf("- target: at most %s per idle WebSocket in stickyd (front and workers): %s at %s: %s", formatBytes(idleGoal), formatBytes(rss), formatCount(r.conns), met(rss <= idleGoal))
		for _, peer := range rs {
			if peer.conns == r.conns && peer.key != idleStickyd && peer.skipped == "" {
				p, _ := peer.perSocket()
				line += fmt.Sprintf("; %s ÷ %s = %s", "stickyd", peer.key, ratioF(rss, p))
			}
		}
		fmt.Fprintln(w, line)
		if r.hasTabs {
			tab, tabBehind := r.perTab()
			total := rss + tab + tabBehind
			n := float64(r.conns)
			fmt.Fprintf(w, "- an idle tab (its WebSocket, a page open, a pull waiting): front %s (Go heap %s, stacks %s, %.2f goroutines) + workers %s on top of its WebSocket, %s in all at %s; target at most %s: %s\n",
				formatBytes(tab), formatBytes(float64(r.tabs.heap-r.open.heap)/n), formatBytes(float64(r.tabs.stacks-r.open.stacks)/n),
				float64(r.tabs.goroutines-r.open.goroutines)/n,
				formatBytes(tabBehind), formatBytes(total), formatCount(r.conns), formatBytes(tabGoal), met(total <= tabGoal))
		}
	}
}

// formatBytes writes n bytes with a binary unit: "812 B", "12.4 KB",
// "103.2 MB".
func formatBytes(n float64) string {
	neg := ""
	if n < 0 {
		neg, n = "-", -n
	}
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%s%.0f B", neg, n)
	case n < 1<<20:
		return fmt.Sprintf("%s%.1f KB", neg, n/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%s%.1f MB", neg, n/(1<<20))
	default:
		return fmt.Sprintf("%s%.2f GB", neg, n/(1<<30))
	}
}

// formatCount writes n with a space between thousands: "10 000".
func formatCount(n int) string {
	s := strconv.Itoa(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(' ')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// round3 keeps three significant digits, for the CSV files.
func round3(x float64) float64 {
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	p := math.Pow(10, 2-math.Floor(math.Log10(math.Abs(x))))
	return math.Round(x*p) / p
}
