package host

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// A worker's application output reaches the agent's log at info, a line at
// a time, attributed to the worker; the SDK's own log lines on the raw
// stderr are left to go-plugin, which logs them at their level.
func TestAppOutputLogsLinesAtInfo(t *testing.T) {
	var out bytes.Buffer
	log := hclog.New(&hclog.LoggerOptions{Name: "host.web-1", Level: hclog.Info, Output: &out})
	o := newAppOutput(log, "stderr", true)
	for _, chunk := range []string{
		"Internal Server Error: /orders/\n",
		"Traceback (most recent ", "call last):\n",
		`{"@level":"debug","@message":"the SDK's own line","@timestamp":"2026-12-06T10:00:00Z"}` + "\n",
		"[WARN] a prefixed line\n",
		"\n",
		"no end",
	} {
		if _, err := o.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	o.Flush()
	got := out.String()
	for _, want := range []string{
		"[INFO]  host.web-1: Internal Server Error: /orders/: stream=stderr",
		"[INFO]  host.web-1: Traceback (most recent call last):: stream=stderr",
		"[INFO]  host.web-1: no end: stream=stderr",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the log lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"the SDK's own line", "a prefixed line"} {
		if strings.Contains(got, not) {
			t.Errorf("the log has the SDK's line %q twice over:\n%s", not, got)
		}
	}
	if n := strings.Count(got, "\n"); n != 3 {
		t.Errorf("%d lines logged, want 3:\n%s", n, got)
	}
	// A line longer than the bound is logged in pieces, never held whole.
	out.Reset()
	o.Write(bytes.Repeat([]byte("x"), maxAppLine+10))
	if len(o.buf) != 10 || !strings.Contains(out.String(), strings.Repeat("x", 100)) {
		t.Errorf("a long line: %d bytes held, logged %d bytes", len(o.buf), out.Len())
	}
}

// A JSON log line reads as its message and fields, a traceback unfolded.
func TestReadableLine(t *testing.T) {
	got := readableLine(`{"@level": "error", "@message": "loading the WSGI application", "app": "shop:app", "traceback": "Traceback (most recent call last):\n  File \"x.py\"\nModuleNotFoundError: No module named 'shop'\n"}`)
	want := "loading the WSGI application app=shop:app\n    Traceback (most recent call last):\n      File \"x.py\"\n    ModuleNotFoundError: No module named 'shop'"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if got := readableLine("plain text"); got != "plain text" {
		t.Fatalf("a plain line became %q", got)
	}
}
