package translate

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stickyd/stickyd/internal/gateway"
)

func TestDataURL(t *testing.T) {
	for _, tc := range []struct {
		url, media, data string
		ok               bool
	}{
		{"data:image/png;base64,iVBOR", "image/png", "iVBOR", true},
		{"data:image/png,raw", "", "", false},
		{"data:;base64,AAAA", "", "", false},
		{"https://example.com/a.png", "", "", false},
	} {
		media, data, ok := DataURL(tc.url)
		if media != tc.media || data != tc.data || ok != tc.ok {
			t.Errorf("%s: %q %q %v", tc.url, media, data, ok)
		}
	}
}

func TestEmbedInputsAndVectors(t *testing.T) {
	for in, want := range map[string]int{`"a"`: 1, `["a","b"]`: 2} {
		texts, err := EmbedInputs(json.RawMessage(in), "x")
		if err != nil || len(texts) != want {
			t.Errorf("%s: %v %v", in, texts, err)
		}
	}
	for _, in := range []string{`[[1,2]]`, `[1,2]`, `[]`, `{}`} {
		var pe *gateway.ProviderError
		if _, err := EmbedInputs(json.RawMessage(in), "x"); !errors.As(err, &pe) || pe.Param != "input" {
			t.Errorf("%s: %v", in, err)
		}
	}
	if v, _ := Vector([]float64{0.5, -1.5}, "base64"); string(v) != `"AAAAPwAAwL8="` {
		t.Errorf("base64: %s", v)
	}
	if v, _ := Vector([]float64{0.5, -1.5}, ""); string(v) != `[0.5,-1.5]` {
		t.Errorf("float: %s", v)
	}
	if _, err := Vector(nil, "int8"); err == nil {
		t.Error("int8 taken")
	}
}

func TestToolOutputAndName(t *testing.T) {
	if got := string(ToolOutput(` {"a":1} `)); got != `{"a":1}` {
		t.Errorf("object: %s", got)
	}
	if got := string(ToolOutput("21 degrees")); got != `{"output":"21 degrees"}` {
		t.Errorf("text: %s", got)
	}
	msgs := []gateway.Message{{Role: "assistant", ToolCalls: []gateway.ToolCall{{ID: "c1", Name: "old"}}},
		{Role: "assistant", ToolCalls: []gateway.ToolCall{{ID: "c1", Name: "new"}}}, {Role: "tool", ToolCallID: "c1"}}
	if name, ok := ToolName(msgs, 2, "c1"); !ok || name != "new" {
		t.Errorf("ToolName = %q %v", name, ok)
	}
	if _, ok := ToolName(msgs, 2, "c2"); ok {
		t.Error("found an unknown call")
	}
}

// The SSE reader: events of data lines, \r\n or \n, comments skipped; a
// body cut inside an event or a line is io.ErrUnexpectedEOF.
func TestSSEReader(t *testing.T) {
	r := NewSSEReader(strings.NewReader(": ping\r\n\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata: b\ndata: c\n\n"), 1<<10)
	for _, want := range []string{`{"a":1}`, "b\nc"} {
		got, err := r.Next()
		if err != nil || string(got) != want {
			t.Fatalf("got %q %v, want %q", got, err, want)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	for _, body := range []string{"data: a\n", "data: a\n\ndata: b"} {
		r := NewSSEReader(strings.NewReader(body), 1<<10)
		var err error
		for err == nil {
			_, err = r.Next()
		}
		if err != io.ErrUnexpectedEOF {
			t.Errorf("%q: %v", body, err)
		}
	}
	if _, err := NewSSEReader(strings.NewReader("data: "+strings.Repeat("x", 100)+"\n\n"), 10).Next(); err != ErrEventTooLong {
		t.Errorf("too long: %v", err)
	}
}
