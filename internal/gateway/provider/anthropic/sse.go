package anthropic

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// errEventTooLong is returned by sseReader.next for a line, or an event's
// data, longer than the limit: a broken stream, not one to buffer.
var errEventTooLong = errors.New("server-sent event too long")

// sseEvent is one server-sent event: its name (the event: field, or
// "message") and its data lines joined by "\n".
type sseEvent struct {
	name string
	data []byte
}

// sseReader reads server-sent events (the WHATWG EventSource format):
// lines ending in "\n" or "\r\n", "field: value" lines, comments starting
// with ":", a blank line ending each event. Only event and data are kept.
type sseReader struct {
	sc  *bufio.Scanner
	max int
}

// newSSEReader reads events from r; no line and no event's data may be
// longer than maxBytes.
func newSSEReader(r io.Reader, maxBytes int) *sseReader {
	sc := bufio.NewScanner(r)
	// The scanner's limit counts the line's end too.
	sc.Buffer(make([]byte, 0, 64<<10), maxBytes+2)
	return &sseReader{sc: sc, max: maxBytes}
}

// next returns the next event with data; io.EOF when the stream ends. An
// event the stream ends in the middle of is dropped, as the format says:
// only a blank line completes an event.
func (s *sseReader) next() (sseEvent, error) {
	var ev sseEvent
	hasData := false
	for s.sc.Scan() {
		line := s.sc.Bytes()
		if len(line) > s.max {
			return sseEvent{}, fmt.Errorf("%w: a line is over %d bytes", errEventTooLong, s.max)
		}
		if len(line) == 0 {
			if !hasData { // an event without data is not dispatched
				ev = sseEvent{}
				continue
			}
			if ev.name == "" {
				ev.name = "message"
			}
			return ev, nil
		}
		if line[0] == ':' { // comment
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			ev.name = string(value)
		case "data":
			if hasData {
				ev.data = append(ev.data, '\n')
			}
			ev.data = append(ev.data, value...)
			hasData = true
			if len(ev.data) > s.max {
				return sseEvent{}, fmt.Errorf("%w: an event's data is over %d bytes", errEventTooLong, s.max)
			}
		}
		// id, retry and unknown fields are ignored.
	}
	if err := s.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return sseEvent{}, fmt.Errorf("%w: a line is over %d bytes", errEventTooLong, s.max)
		}
		return sseEvent{}, err
	}
	return sseEvent{}, io.EOF
}
