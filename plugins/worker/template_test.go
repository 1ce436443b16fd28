package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// engineApp is a testApp with an engine: its image is size bytes of a
// pattern, and builds counts the BuildEngine calls of every engineApp that
// shares the counter (the workers of one group).
type engineApp struct {
	testApp
	builds *atomic.Int32
	size   int
	delay  time.Duration // how long a build takes
	fail   error         // what BuildEngine returns, if not nil

	loads atomic.Int32
	mu    sync.Mutex // guards image
	image []byte     // what LoadEngine got
}

var _ Engine = (*engineApp)(nil)

func newEngineApp(builds *atomic.Int32) *engineApp {
	return &engineApp{builds: builds, size: 1 << 20}
}

func pattern(i int) byte { return byte(i*7 + 3) }

func (a *engineApp) BuildEngine(ctx context.Context) ([]byte, error) {
	a.builds.Add(1)
	if a.fail != nil {
		return nil, a.fail
	}
	select {
	case <-time.After(a.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	b := make([]byte, a.size)
	for i := range b {
		b[i] = pattern(i)
	}
	return b, nil
}

func (a *engineApp) LoadEngine(image []byte) error {
	if len(image) != a.size {
		return fmt.Errorf("image of %d bytes, want %d", len(image), a.size)
	}
	if len(image) > 0 && uintptr(unsafe.Pointer(&image[0]))%8 != 0 {
		return errors.New("image is not aligned to 8 bytes")
	}
	for i, c := range image {
		if c != pattern(i) {
			return fmt.Errorf("image byte %d is %d, want %d", i, c, pattern(i))
		}
	}
	a.loads.Add(1)
	a.mu.Lock()
	a.image = image
	a.mu.Unlock()
	return nil
}

// logBuffer is a logger's output that tests read while workers write.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// hows lists the "how" of each "engine ready" line.
func (l *logBuffer) hows(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["@message"] != "engine ready" {
			continue
		}
		out = append(out, fmt.Sprint(m["how"]))
	}
	return out
}

func testOptions(version string, out *logBuffer) Options {
	return Options{Name: "enginetest", Version: version,
		Logger: hclog.New(&hclog.LoggerOptions{Output: out, JSONFormat: true, Level: hclog.Info})}
}

// startEngineWorker serves app on an in-memory channel, as a host would
// start it, and returns once the worker said hello; stop ends it.
func startEngineWorker(t *testing.T, app App, opts Options) (stop func(), err error) {
	t.Helper()
	h, w := channel.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeConn(ctx, app, opts, w) }()
	actx, acancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer acancel()
	if _, err := channel.Accept(actx, h, &protocol.HelloAck{WorkerId: "w"}); err != nil {
		cancel()
		return nil, fmt.Errorf("%w (worker: %v)", err, <-done)
	}
	peer := channel.NewPeer(h, nil)
	return sync.OnceFunc(func() {
		cancel()
		peer.Close()
		<-done
	}), nil
}

// mappings counts this process's mappings of path (/proc/self/maps).
func mappings(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasSuffix(line, " "+path) {
			n++
		}
	}
	return n
}

func mapped(t *testing.T, path string) bool { return mappings(t, path) > 0 }

func requireLinux(t *testing.T) {
	t.Helper()
	if !mmapSupported {
		t.Skip("engine templates need Linux")
	}
}

func imagePath(t *testing.T, dir, version string) string {
	t.Helper()
	key, err := templateKey(Options{Name: "enginetest", Version: version})
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, fmt.Sprintf("%x.img", key))
}

func TestEngineBuiltOnceForWorkersStartingTogether(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	t.Setenv(TemplateDirEnv, dir)
	var builds atomic.Int32
	var logs logBuffer
	apps := []*engineApp{newEngineApp(&builds), newEngineApp(&builds)}
	var wg sync.WaitGroup
	stops := make([]func(), len(apps))
	errs := make([]error, len(apps))
	for i, a := range apps {
		a.delay = 300 * time.Millisecond // long enough for both to overlap
		wg.Go(func() { stops[i], errs[i] = startEngineWorker(t, a, testOptions("1", &logs)) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
		defer stops[i]()
	}
	if n := builds.Load(); n != 1 {
		t.Fatalf("BuildEngine ran %d times for two workers of one template, want 1", n)
	}
	for i, a := range apps {
		// The hello came after the engine was loaded.
		if n := a.loads.Load(); n != 1 {
			t.Fatalf("worker %d loaded its engine %d times before its hello, want 1", i, n)
		}
	}
	hows := logs.hows(t)
	slices.Sort(hows)
	if strings.Join(hows, ",") != "built,mapped" {
		t.Fatalf("the workers got their engines as %q, want one built and one mapped", hows)
	}
	// Both read the file: each has its own mapping of it, not a copy.
	if n := mappings(t, imagePath(t, dir, "1")); n != 2 {
		t.Fatalf("the image is mapped %d times while two workers run, want 2", n)
	}
}

// The "engine ready" line gives its durations as durations ("1.2s"), in
// the JSON a plugin writes as in text: a number of nanoseconds became
// took="1.233524177e+09" in the host's log.
func TestEngineReadyDurationsReadAsDurations(t *testing.T) {
	requireLinux(t)
	t.Setenv(TemplateDirEnv, t.TempDir())
	var builds atomic.Int32
	var logs logBuffer
	stop, err := startEngineWorker(t, newEngineApp(&builds), testOptions("1", &logs))
	if err != nil {
		t.Fatal(err)
	}
	stop()
	var line map[string]any
	for _, l := range strings.Split(logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["@message"] == "engine ready" {
			line = m
		}
	}
	if line == nil {
		t.Fatalf("no engine ready line in:\n%s", logs.String())
	}
	for _, k := range []string{"took", "key_time", "wait", "build", "save", "map", "load"} {
		s, ok := line[k].(string)
		if !ok {
			t.Fatalf("%s = %v (%T), want a duration's text", k, line[k], line[k])
		}
		if _, err := time.ParseDuration(s); err != nil {
			t.Fatalf("%s = %q: %v", k, s, err)
		}
	}
}

// An in-process worker without a logger writes text lines to the host's
// stderr, as the host does, not the JSON lines a plugin writes for
// go-plugin (they showed raw inside stickyd dev's text log).
func TestInProcessLogsText(t *testing.T) {
	requireLinux(t)
	t.Setenv(TemplateDirEnv, t.TempDir())
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	serve := InProcess(newEngineApp(new(atomic.Int32)), Options{Name: "enginetest", Version: "1"})
	os.Stderr = stderr
	read := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		read <- string(b)
	}()

	h, c := channel.Pipe()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, c) }()
	actx, acancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer acancel()
	if _, err := channel.Accept(actx, h, &protocol.HelloAck{WorkerId: "w"}); err != nil {
		t.Fatal(err)
	}
	peer := channel.NewPeer(h, nil)
	cancel()
	peer.Close()
	<-done
	w.Close()
	out := <-read
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "engine ready") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("no engine ready line in:\n%s", out)
	}
	if strings.HasPrefix(strings.TrimSpace(line), "{") || !strings.Contains(line, "[INFO]  worker: engine ready: how=built took=") {
		t.Fatalf("not a text line: %s", line)
	}
}

func TestEngineSecondStartMapsWithoutBuilding(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	t.Setenv(TemplateDirEnv, dir)
	var builds atomic.Int32
	var logs logBuffer
	for i := range 2 {
		stop, err := startEngineWorker(t, newEngineApp(&builds), testOptions("1", &logs))
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		stop()
	}
	if n := builds.Load(); n != 1 {
		t.Fatalf("BuildEngine ran %d times for two starts of one build, want 1", n)
	}
	if hows := strings.Join(logs.hows(t), ","); hows != "built,mapped" {
		t.Fatalf("the starts got their engines as %q, want built then mapped", hows)
	}
}

func TestEngineCorruptImageIsRebuilt(t *testing.T) {
	requireLinux(t)
	cases := []struct {
		name    string
		corrupt func(b []byte) []byte
	}{
		{"empty", func(b []byte) []byte { return nil }},
		{"header only", func(b []byte) []byte { return b[:imageHeaderSize] }},
		{"truncated by one byte", func(b []byte) []byte { return b[:len(b)-1] }},
		{"truncated in the payload", func(b []byte) []byte { return b[:len(b)/2] }},
		{"one byte too many", func(b []byte) []byte { return append(b, 0) }},
		{"bad magic", func(b []byte) []byte { b[0] ^= 0xff; return b }},
		{"header byte flipped", func(b []byte) []byte { b[50] ^= 1; return b }},
		{"header checksum flipped", func(b []byte) []byte { b[headerSumAt] ^= 1; return b }},
		{"bad end marker", func(b []byte) []byte { b[len(b)-imageTrailerSize] ^= 1; return b }},
		{"trailer key flipped", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv(TemplateDirEnv, dir)
			var builds atomic.Int32
			var logs logBuffer
			opts := testOptions("1", &logs)
			img, _, err := loadEngine(t.Context(), newEngineApp(&builds), opts, opts.Logger)
			if err != nil {
				t.Fatal(err)
			}
			closeEngine(img, opts.Logger)
			path := imagePath(t, dir, "1")
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			// Replace it as a damaged disk or a careless hand would; the
			// SDK itself never writes an image in place.
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, c.corrupt(b), 0o644); err != nil {
				t.Fatal(err)
			}

			img, st, err := loadEngine(t.Context(), newEngineApp(&builds), opts, opts.Logger)
			if err != nil {
				t.Fatalf("starting on a corrupt image: %v", err)
			}
			defer closeEngine(img, opts.Logger)
			if st.How != engineBuilt || builds.Load() != 2 {
				t.Fatalf("got the engine as %q after %d builds, want built after 2", st.How, builds.Load())
			}
			if !strings.Contains(logs.String(), "engine image not usable, rebuilding it") {
				t.Fatalf("the rebuild was not logged:\n%s", logs.String())
			}
			b, err = os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := checkImage(b, engineKeyFor(t, "1")); err != nil {
				t.Fatalf("the rebuilt image: %v", err)
			}
			if err := verifyPayload(b); err != nil {
				t.Fatalf("the rebuilt image: %v", err)
			}
		})
	}
}

func engineKeyFor(t *testing.T, version string) [32]byte {
	t.Helper()
	k, err := templateKey(Options{Name: "enginetest", Version: version})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A flipped payload byte passes the start's checks (see the format's
// comment: starts do not hash the payload) and fails verifyPayload.
func TestEnginePayloadChecksumIsVerifiedOffline(t *testing.T) {
	key := engineKeyFor(t, "1")
	payload := bytes.Repeat([]byte{1, 2, 3}, 1000)
	b := append(append(encodeHeader(key, payload), payload...), encodeTrailer(key, len(payload))...)
	if err := verifyPayload(b); err != nil {
		t.Fatalf("a good image: %v", err)
	}
	b[imageHeaderSize+10] ^= 1
	if _, err := checkImage(b, key); err != nil {
		t.Fatalf("the start's checks read the payload: %v", err)
	}
	if err := verifyPayload(b); !errors.Is(err, errBadImage) {
		t.Fatalf("verifyPayload on a flipped payload = %v, want errBadImage", err)
	}
}

func TestEngineNewBuildDoesNotReadOldImage(t *testing.T) {
	requireLinux(t)
	if engineKey([32]byte{1}, "a", "1") == engineKey([32]byte{2}, "a", "1") {
		t.Fatal("two executables have the same key")
	}
	if engineKey([32]byte{1}, "a", "1") == engineKey([32]byte{1}, "a", "2") ||
		engineKey([32]byte{1}, "a", "1") == engineKey([32]byte{1}, "b", "1") ||
		engineKey([32]byte{1}, "a", "b\x001") == engineKey([32]byte{1}, "a\x00b", "1") {
		t.Fatal("two apps or versions have the same key")
	}

	dir := t.TempDir()
	t.Setenv(TemplateDirEnv, dir)
	var builds atomic.Int32
	var logs logBuffer
	start := func(version string) *engineStart {
		t.Helper()
		opts := testOptions(version, &logs)
		img, st, err := loadEngine(t.Context(), newEngineApp(&builds), opts, opts.Logger)
		if err != nil {
			t.Fatal(err)
		}
		closeEngine(img, opts.Logger)
		return st
	}
	old := start("1")
	if st := start("2"); st.How != engineBuilt || st.Path == old.Path {
		t.Fatalf("the new build got %q from %s, want its own image built", st.How, st.Path)
	}
	if n := builds.Load(); n != 2 {
		t.Fatalf("BuildEngine ran %d times for two builds, want 2", n)
	}

	// An old image under the new key's name is still refused: the key in
	// the header is checked, not only the file's name.
	b, err := os.ReadFile(old.Path)
	if err != nil {
		t.Fatal(err)
	}
	path3 := imagePath(t, dir, "3")
	if err := os.WriteFile(path3, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if st := start("3"); st.How != engineBuilt || builds.Load() != 3 {
		t.Fatalf("build 3 got %q from build 1's image", st.How)
	}
	if !strings.Contains(logs.String(), "built for another key") {
		t.Fatalf("the refusal was not logged:\n%s", logs.String())
	}
}

// Writing to an engine faults, with a template (the file's mapping) and
// without one (the read-only copy). SetPanicOnFault turns the fault into a
// panic this test recovers; without it the worker dies, which is the point.
func TestEngineImageIsReadOnly(t *testing.T) {
	requireLinux(t)
	for _, dir := range []string{"", t.TempDir()} {
		name := map[bool]string{true: "cold", false: "mapped"}[dir == ""]
		t.Run(name, func(t *testing.T) {
			t.Setenv(TemplateDirEnv, dir)
			var builds atomic.Int32
			a := newEngineApp(&builds)
			opts := testOptions("1", &logBuffer{})
			img, _, err := loadEngine(t.Context(), a, opts, opts.Logger)
			if err != nil {
				t.Fatal(err)
			}
			defer closeEngine(img, opts.Logger)
			addr, faulted := writeFaults(&a.image[a.size/2])
			if !faulted {
				t.Fatal("writing to the engine image did not fault")
			}
			if addr != uintptr(unsafe.Pointer(&a.image[a.size/2])) {
				t.Fatalf("faulted at %#x, wrote at %p", addr, &a.image[a.size/2])
			}
		})
	}
}

// writeFaults writes to *p and reports whether, and where, it faulted.
func writeFaults(p *byte) (addr uintptr, faulted bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(interface{ Addr() uintptr }); ok {
				addr, faulted = e.Addr(), true
				return
			}
			panic(r)
		}
	}()
	*p = 0xff
	return 0, false
}

func TestEngineColdBuildsEveryStart(t *testing.T) {
	t.Setenv(TemplateDirEnv, "")
	var builds atomic.Int32
	var logs logBuffer
	for i := range 2 {
		stop, err := startEngineWorker(t, newEngineApp(&builds), testOptions("1", &logs))
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		stop()
	}
	if n := builds.Load(); n != 2 {
		t.Fatalf("BuildEngine ran %d times for two cold starts, want 2", n)
	}
	if hows := strings.Join(logs.hows(t), ","); hows != "cold,cold" {
		t.Fatalf("the starts got their engines as %q, want cold twice", hows)
	}
}

// In-process workers of one App value (stickyd dev) share its engine: it
// is loaded once, stays mapped while any of them runs, and is unmapped
// when the last ends.
func TestEngineSharedByInProcessWorkersOfOneApp(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	t.Setenv(TemplateDirEnv, dir)
	var builds atomic.Int32
	a := newEngineApp(&builds)
	opts := testOptions("1", &logBuffer{})
	stop1, err := startEngineWorker(t, a, opts)
	if err != nil {
		t.Fatal(err)
	}
	stop2, err := startEngineWorker(t, a, opts)
	if err != nil {
		t.Fatal(err)
	}
	if n := a.loads.Load(); n != 1 {
		t.Fatalf("LoadEngine ran %d times for two workers of one App, want 1", n)
	}
	path := imagePath(t, dir, "1")
	stop1()
	if !mapped(t, path) {
		t.Fatal("the image was unmapped while a worker still runs")
	}
	stop2()
	if mapped(t, path) {
		t.Fatal("the image is still mapped after the last worker ended")
	}
	stop3, err := startEngineWorker(t, a, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer stop3()
	if n, b := a.loads.Load(), builds.Load(); n != 2 || b != 1 {
		t.Fatalf("after a restart: %d loads and %d builds, want 2 and 1", n, b)
	}
}

func TestEngineBuildErrorStopsStart(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(TemplateDirEnv, dir)
	var builds atomic.Int32
	a := newEngineApp(&builds)
	a.fail = errors.New("reference data unreachable")
	opts := testOptions("1", &logBuffer{})
	if _, err := startEngineWorker(t, a, opts); err == nil || !strings.Contains(err.Error(), "reference data unreachable") {
		t.Fatalf("start with a failing build = %v, want its error", err)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*.img*")); len(files) != 0 {
		t.Fatalf("a failed build left %q", files)
	}
	// The failure is not remembered: the next start builds again.
	a.fail = nil
	stop, err := startEngineWorker(t, a, opts)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if n := builds.Load(); n != 2 {
		t.Fatalf("BuildEngine ran %d times, want 2", n)
	}
}

func TestEngineLockWaitEndsWithContext(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	t.Setenv(TemplateDirEnv, dir)
	key := engineKeyFor(t, "1")
	unlock, err := lockKey(t.Context(), filepath.Join(dir, fmt.Sprintf("%x.lock", key)), hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	var builds atomic.Int32
	opts := testOptions("1", &logBuffer{})
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, _, err := loadEngine(ctx, newEngineApp(&builds), opts, opts.Logger); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("start while another holds the lock = %v, want the deadline", err)
	}
	if n := builds.Load(); n != 0 {
		t.Fatalf("BuildEngine ran %d times without the lock", n)
	}
}

// A template that cannot be written does not stop the worker: it starts
// from its own build, as without a template, and says so.
func TestEngineUnsavableImageStartsFromOwnBuild(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	t.Setenv(TemplateDirEnv, dir)
	// A directory where the image goes: it can be neither mapped nor
	// replaced (a read-only directory would not stop root).
	if err := os.Mkdir(imagePath(t, dir, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	var builds atomic.Int32
	var logs logBuffer
	opts := testOptions("1", &logs)
	img, st, err := loadEngine(t.Context(), newEngineApp(&builds), opts, opts.Logger)
	if err != nil {
		t.Fatalf("start on an unsavable template: %v", err)
	}
	defer closeEngine(img, opts.Logger)
	if st.How != engineCold || builds.Load() != 1 {
		t.Fatalf("got the engine as %q after %d builds, want cold after 1", st.How, builds.Load())
	}
	if !strings.Contains(logs.String(), "this worker starts from its own build") {
		t.Fatalf("the fallback was not logged:\n%s", logs.String())
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*.tmp*")); len(files) != 0 {
		t.Fatalf("the failed save left %q", files)
	}
}

// The temporary file of a build that died before its rename is removed by
// the next build.
func TestEnginePartialImageIsRemoved(t *testing.T) {
	requireLinux(t)
	dir := t.TempDir()
	t.Setenv(TemplateDirEnv, dir)
	partial := imagePath(t, dir, "1") + ".tmp123"
	if err := os.WriteFile(partial, []byte("half an image"), 0o644); err != nil {
		t.Fatal(err)
	}
	var builds atomic.Int32
	opts := testOptions("1", &logBuffer{})
	img, st, err := loadEngine(t.Context(), newEngineApp(&builds), opts, opts.Logger)
	if err != nil {
		t.Fatal(err)
	}
	defer closeEngine(img, opts.Logger)
	if st.How != engineBuilt {
		t.Fatalf("got the engine as %q, want built", st.How)
	}
	if _, err := os.Stat(partial); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the partial image is still there: %v", err)
	}
}
