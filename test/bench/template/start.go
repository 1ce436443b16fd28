package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/plugins/worker"
	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// sample is one worker's start.
type sample struct {
	ready     time.Duration // launch → hello
	firstSort time.Duration // launch → a grid page opened and sorted
	rss       int64         // resident bytes after the first sort
	rssFile   int64         // of which file pages
	engine    *engineLine   // nil without an engine
}

// engineLine is the worker's "engine ready" log line.
type engineLine struct {
	How                                     string
	Took, Key, Wait, Build, Save, Map, Load time.Duration
}

// moduleRoot is the stickyd module's directory.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("finding the module: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("run the benchmark inside the stickyd module (go run ./test/bench/template)")
	}
	return filepath.Dir(gomod), nil
}

// execCommand runs a command and returns its combined output.
func execCommand(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

func sortDurations(d []time.Duration) { slices.Sort(d) }

// buildWorker builds the demo worker into dir, from this module's source.
func buildWorker(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	exe := filepath.Join(dir, "demo-worker")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", exe, "./plugins/examples/demo/cmd/demo-worker")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the demo worker: %w\n%s", err, out)
	}
	return exe, nil
}

// workerLogger is where the workers' logs are copied besides their own
// buffers: stderr at -log info or below, else nowhere.
func workerLogger(level hclog.Level, stderr io.Writer) io.Writer {
	if level == hclog.Off || level > hclog.Info {
		return io.Discard
	}
	return stderr
}

// startWorkers starts n workers together, with the template directory dir
// ("" for none), measures each one's start and stops them all.
func startWorkers(ctx context.Context, exe string, args []string, dir string, n int, tee io.Writer) ([]sample, error) {
	samples := make([]sample, n)
	procs := make([]host.Process, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			samples[i], procs[i], errs[i] = startOne(ctx, exe, args, dir, fmt.Sprintf("bench-%d", i+1), tee)
		})
	}
	wg.Wait()
	for _, p := range procs {
		if p != nil {
			p.Kill()
		}
	}
	return samples, errors.Join(errs...)
}

// startOne starts a worker as the host does and times it to its hello and
// to its first sort. The process is returned running, for its RSS to stay
// comparable while others start.
func startOne(ctx context.Context, exe string, args []string, dir, id string, tee io.Writer) (sample, host.Process, error) {
	var s sample
	logs := &syncBuffer{}
	l := hclog.New(&hclog.LoggerOptions{Name: "host", Level: hclog.Info, JSONFormat: true, Output: io.MultiWriter(logs, tee)})
	launcher := &host.PluginLauncher{Command: exe, Args: args, Env: []string{worker.TemplateDirEnv + "=" + dir}, Logger: l}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	start := time.Now()
	proc, conn, err := launcher.Launch(ctx, id)
	if err != nil {
		return s, nil, err
	}
	if _, err := channel.Accept(ctx, conn, &protocol.HelloAck{WorkerId: id, Group: "bench"}); err != nil {
		return s, proc, err
	}
	s.ready = time.Since(start)
	peer := channel.NewPeer(conn, nil)
	if err := firstSort(ctx, peer); err != nil {
		return s, proc, err
	}
	s.firstSort = time.Since(start)
	if s.rss, s.rssFile, err = residentMemory(proc.Pid()); err != nil {
		return s, proc, err
	}
	if len(args) == 0 || args[0] != "-engine=false" {
		// go-plugin copies the worker's stderr to the logger on its own
		// goroutine: the line may come a moment after the hello.
		deadline := time.Now().Add(10 * time.Second)
		for s.engine == nil && time.Now().Before(deadline) {
			s.engine = findEngineLine(logs.String())
			if s.engine == nil {
				time.Sleep(10 * time.Millisecond)
			}
		}
		if s.engine == nil {
			return s, proc, fmt.Errorf("the worker logged no \"engine ready\" line:\n%s", logs.String())
		}
	}
	return s, proc, nil
}

// firstSort opens a grid page on a new connection and sorts it by name,
// which reads the whole table's order: from the engine, or sorted then.
func firstSort(ctx context.Context, peer *channel.Peer) error {
	r, err := frame(ctx, peer, &protocol.Frame{Kind: &protocol.Frame_Http{Http: &protocol.HTTPRequest{Method: "GET", Url: "/"}}})
	if err != nil {
		return fmt.Errorf("first request: %w", err)
	}
	conn := r.GetIdentity().GetConn()
	user := protocol.AnonymousUser(conn)
	if _, err := frame(ctx, peer, &protocol.Frame{User: user, Conn: conn, Kind: &protocol.Frame_Open{Open: &protocol.PageOpen{Page: "grid-1", Kind: "grid"}}}); err != nil {
		return fmt.Errorf("opening a grid page: %w", err)
	}
	r, err = frame(ctx, peer, &protocol.Frame{User: user, Conn: conn, Kind: &protocol.Frame_Message{Message: &protocol.PageMessage{
		Page: "grid-1", Data: []byte(`{"op":"sort","column":"name"}`)}}})
	if err != nil {
		return fmt.Errorf("sorting the grid: %w", err)
	}
	res := r.GetMessage()
	var ans struct{ Total int }
	if res.GetError() != "" || json.Unmarshal(res.GetData(), &ans) != nil || ans.Total != 600_000 {
		return fmt.Errorf("sorting the grid answered %q, error %q", res.GetData(), res.GetError())
	}
	return nil
}

func frame(ctx context.Context, peer *channel.Peer, f *protocol.Frame) (*protocol.FrameReply, error) {
	env, err := peer.Call(ctx, &protocol.Envelope{Body: &protocol.Envelope_Frame{Frame: f}})
	if err != nil {
		return nil, err
	}
	return env.GetFrameReply(), nil
}

// residentMemory reads a process's resident set and its file-backed part
// from /proc.
func residentMemory(pid int) (rss, file int64, err error) {
	kb, err := procKB(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("reading the worker's memory: %w", err)
	}
	return kb["VmRSS"], kb["RssFile"], nil
}

// procKB reads the "Key: N kB" lines of a /proc file, in bytes.
func procKB(path string) (map[string]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		out[k] = n << 10
	}
	return out, nil
}

// findEngineLine reads the "engine ready" line out of the host logger's
// JSON lines (go-plugin relays the worker's fields as they were).
func findEngineLine(logs string) *engineLine {
	for _, line := range strings.Split(logs, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["@message"] != "engine ready" {
			continue
		}
		how, _ := m["how"].(string)
		e := &engineLine{How: how}
		for k, d := range map[string]*time.Duration{"took": &e.Took, "key_time": &e.Key, "wait": &e.Wait,
			"build": &e.Build, "save": &e.Save, "map": &e.Map, "load": &e.Load} {
			*d = duration(m[k])
		}
		return e
	}
	return nil
}

// duration reads a logged time.Duration: nanoseconds, or its String.
func duration(v any) time.Duration {
	switch v := v.(type) {
	case float64:
		return time.Duration(v)
	case string:
		d, _ := time.ParseDuration(v)
		return d
	}
	return 0
}

// syncBuffer is a buffer go-plugin's logging goroutine writes while the
// benchmark reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
