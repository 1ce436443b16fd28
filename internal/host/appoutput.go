package host

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// maxAppLine bounds a line of a worker's output held while its end is
// awaited; a longer one is logged in pieces of this size.
const maxAppLine = 64 << 10

// appOutput logs what a worker's application writes outside the SDK's own
// log, line by line, at info, attributed to the worker: a framework's
// error lines (Django's "Internal Server Error", Flask's "ERROR in app"), a
// print, a C library's complaint. go-plugin hands a plugin's stderr to it
// (and logs the lines itself only at debug), and a Go worker's stdout and
// stderr, forwarded over go-plugin's stdio stream.
type appOutput struct {
	log    hclog.Logger
	stream string // "stdout" or "stderr"
	// raw is set for the plugin's raw stderr, which also carries the
	// SDK's own log lines (JSON, or with a [LEVEL] prefix): go-plugin logs
	// those at their level, and they are skipped here.
	raw bool

	mu  sync.Mutex
	buf []byte
	// tail is the stream's last lines, all of them (the SDK's too), to
	// say why a worker that never started ended.
	tail []string
}

// tailLines and tailLineBytes bound what appOutput keeps of a stream's end.
const (
	tailLines     = 20
	tailLineBytes = 4 << 10
)

func newAppOutput(log hclog.Logger, stream string, raw bool) *appOutput {
	return &appOutput{log: log, stream: stream, raw: raw}
}

func (o *appOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf = append(o.buf, p...)
	for {
		i := bytes.IndexByte(o.buf, '\n')
		if i < 0 {
			break
		}
		o.emit(o.buf[:i])
		o.buf = o.buf[i+1:]
	}
	for len(o.buf) >= maxAppLine {
		o.emit(o.buf[:maxAppLine])
		o.buf = o.buf[maxAppLine:]
	}
	if len(o.buf) == 0 {
		o.buf = nil // keep no buffer between lines
	}
	return len(p), nil
}

// Flush logs a last line that had no end.
func (o *appOutput) Flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.emit(o.buf)
	o.buf = nil
}

func (o *appOutput) emit(line []byte) {
	line = bytes.TrimRight(line, "\r")
	if len(bytes.TrimSpace(line)) == 0 {
		return
	}
	kept := line
	if len(kept) > tailLineBytes {
		kept = append(kept[:tailLineBytes:tailLineBytes], "…"...)
	}
	if len(o.tail) == tailLines {
		o.tail = append(o.tail[:0], o.tail[1:]...)
	}
	o.tail = append(o.tail, string(kept))
	if o.raw && sdkLogLine(line) {
		return
	}
	o.log.Info(string(line), "stream", o.stream)
}

// sdkLogLine says whether a line of a plugin's stderr is a log line
// go-plugin logs at its own level: hclog's JSON, or text that starts with
// a level in brackets.
func sdkLogLine(line []byte) bool {
	if bytes.HasPrefix(line, []byte("{")) && bytes.Contains(line, []byte(`"@message"`)) {
		return true
	}
	for _, p := range [][]byte{[]byte("[TRACE]"), []byte("[DEBUG]"), []byte("[INFO]"), []byte("[WARN]"), []byte("[ERROR]")} {
		if bytes.HasPrefix(line, p) {
			return true
		}
	}
	return false
}

// Tail is the stream's last lines, oldest first.
func (o *appOutput) Tail() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.tail...)
}

// readableLine writes a line of a worker's output for a person: an SDK
// log line in JSON as its message and fields, a traceback among them
// unfolded; any other line as it is.
func readableLine(line string) string {
	if !strings.HasPrefix(line, "{") {
		return line
	}
	var m map[string]any
	if json.Unmarshal([]byte(line), &m) != nil {
		return line
	}
	msg, _ := m["@message"].(string)
	if msg == "" {
		return line
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		if !strings.HasPrefix(k, "@") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString(msg)
	for _, k := range keys {
		if v, ok := m[k].(string); ok && strings.Contains(v, "\n") {
			b.WriteString("\n    " + strings.ReplaceAll(strings.TrimRight(v, "\n"), "\n", "\n    "))
			continue
		}
		fmt.Fprintf(&b, " %s=%v", k, m[k])
	}
	return b.String()
}
