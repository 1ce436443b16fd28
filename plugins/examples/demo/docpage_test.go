package demo

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDocOpen(t *testing.T) {
	p := openPage(t, New(), "doc")
	want := map[string]any{"title": "", "body": "", "words": 0.0, "chars": 0.0, "edits": 0.0, "edited_at": ""}
	if got := p.Tree().Get(""); !reflect.DeepEqual(got, want) {
		t.Fatalf("tree = %v, want %v", got, want)
	}
}

func TestDocEdit(t *testing.T) {
	a := New()
	clock := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	a.now = func() time.Time { return clock }
	p := openPage(t, a, "doc")
	steps := []struct {
		msg    string
		deltas int
		want   map[string]any
	}{
		{`{"op":"edit","title":"Q3 refunds","body":"Too many  refunds\nin Oslo."}`, 6, map[string]any{
			"title": "Q3 refunds", "body": "Too many  refunds\nin Oslo.", "words": 5.0, "chars": 26.0,
			"edits": 1.0, "edited_at": "2026-03-04T05:07:07Z",
		}},
		{`{"op":"edit","title":"Q3 refunds"}`, 0, map[string]any{"edits": 1.0}},
		{`{"op":"edit","body":"Fewer refunds – café"}`, 5, map[string]any{
			"title": "Q3 refunds", "words": 4.0, "chars": 20.0, "edits": 2.0,
		}},
		{`{"op":"edit","title":""}`, 3, map[string]any{"title": "", "words": 4.0, "edits": 3.0}},
	}
	for _, s := range steps {
		clock = clock.Add(time.Minute)
		before := p.PendingDeltas()
		ans, ok := send(t, a, p, s.msg).(docAnswer)
		if !ok {
			t.Fatalf("%s: answer is not a docAnswer", s.msg)
		}
		if n := p.PendingDeltas() - before; n != s.deltas {
			t.Errorf("%s: %d deltas, want %d", s.msg, n, s.deltas)
		}
		tr := p.Tree()
		for path, want := range s.want {
			if got := tr.Get(path); !reflect.DeepEqual(got, want) {
				t.Errorf("%s: %s = %#v, want %#v", s.msg, path, got, want)
			}
		}
		if ans.Words != int(tr.Number("words")) || ans.EditedAt != tr.String("edited_at") {
			t.Errorf("%s: answer %+v disagrees with the tree", s.msg, ans)
		}
	}
}

func TestDocBadInput(t *testing.T) {
	a := New()
	p := openPage(t, a, "doc")
	send(t, a, p, `{"op":"edit","title":"kept"}`)
	for _, c := range []struct {
		msg  string
		want error
	}{
		{`{"op":"edit"}`, ErrBadMessage},
		{`{"op":"edit","title":1}`, ErrBadMessage},
		{`{"op":"edit","body":["a"]}`, ErrBadMessage},
		{`{"op":"edit","text":"typo"}`, ErrBadMessage},
		{`{"op":"edit","title":"` + strings.Repeat("x", maxTitleRunes+1) + `"}`, ErrBadMessage},
		{`{"op":"edit","body":"` + strings.Repeat("x", maxBodyBytes+1) + `"}`, ErrBadMessage},
		{`{"op":"save"}`, ErrUnknownOp},
		{`{"op":"scroll","offset":1}`, ErrUnknownOp},
		{`{"title":"no op"}`, ErrBadMessage},
		{`{`, ErrBadMessage},
	} {
		name := c.msg
		if len(name) > 60 {
			name = name[:60]
		}
		t.Run(name, func(t *testing.T) {
			before, deltas := snapshot(t, p), p.PendingDeltas()
			_, err := a.Message(context.Background(), p, json.RawMessage(c.msg))
			if !errors.Is(err, c.want) {
				t.Fatalf("error = %v, want %v", err, c.want)
			}
			if snapshot(t, p) != before || p.PendingDeltas() != deltas {
				t.Error("a refused edit changed the tree")
			}
		})
	}
	if got := p.Tree().String("title"); got != "kept" {
		t.Fatalf("title = %q, want the last good edit's", got)
	}
}
