package demo

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/stickyd/stickyd/plugins/worker"
)

// The doc page's tree:
//
//	title      string  at most 200 characters
//	body       string  at most 64 KiB
//	words      number  words in the body
//	chars      number  characters in the body
//	edits      number  edits that changed something
//	edited_at  string  RFC 3339 time of the last such edit, "" before any
//
// Message: {"op":"edit", "title"?, "body"?} sets what it gives; an edit that
// changes nothing writes nothing. It answers {"words", "chars", "edited_at"}.
const (
	maxTitleRunes = 200
	maxBodyBytes  = 64 << 10
)

// docAnswer is the answer to an edit.
type docAnswer struct {
	Words    int    `json:"words"`
	Chars    int    `json:"chars"`
	EditedAt string `json:"edited_at"`
}

func (a *App) openDoc(p *worker.Page) error {
	t := p.Tree()
	for _, w := range []struct {
		path string
		v    any
	}{
		{"title", ""}, {"body", ""}, {"words", 0.0}, {"chars", 0.0}, {"edits", 0.0}, {"edited_at", ""},
	} {
		if err := setChanged(t, w.path, w.v); err != nil {
			return fmt.Errorf("opening a doc page: %w", err)
		}
	}
	return nil
}

type editMsg struct {
	Op    string  `json:"op"`
	Title *string `json:"title"`
	Body  *string `json:"body"`
}

func (a *App) docMessage(p *worker.Page, raw json.RawMessage) (any, error) {
	op, err := readOp(raw)
	if err != nil {
		return nil, err
	}
	if op != "edit" {
		return nil, unknownOp(kindDoc, op, "edit")
	}
	var m editMsg
	if err := decodeOp(op, raw, &m); err != nil {
		return nil, err
	}
	const doing = "editing the document"
	if m.Title == nil && m.Body == nil {
		return nil, badf(doing, "give a title, a body or both")
	}
	t := p.Tree()
	title, body := t.String("title"), t.String("body")
	if m.Title != nil {
		if n := utf8.RuneCountInString(*m.Title); n > maxTitleRunes {
			return nil, badf(doing, "the title has %d characters, at most %d", n, maxTitleRunes)
		}
		title = *m.Title
	}
	if m.Body != nil {
		if n := len(*m.Body); n > maxBodyBytes {
			return nil, badf(doing, "the body has %d bytes, at most %d", n, maxBodyBytes)
		}
		body = *m.Body
	}
	ans := docAnswer{
		Words:    len(strings.Fields(body)),
		Chars:    utf8.RuneCountInString(body),
		EditedAt: t.String("edited_at"),
	}
	if title == t.String("title") && body == t.String("body") {
		return ans, nil
	}
	ans.EditedAt = a.now().UTC().Format(time.RFC3339)
	for _, w := range []struct {
		path string
		v    any
	}{
		{"title", title},
		{"body", body},
		{"words", float64(ans.Words)},
		{"chars", float64(ans.Chars)},
		{"edits", t.Number("edits") + 1},
		{"edited_at", ans.EditedAt},
	} {
		if err := setChanged(t, w.path, w.v); err != nil {
			return nil, fmt.Errorf("writing the document: %w", err)
		}
	}
	return ans, nil
}
