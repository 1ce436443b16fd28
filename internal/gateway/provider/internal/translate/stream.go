package translate

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"sync/atomic"
	"time"
)

// StallReader reads a stream's body and calls stall (which cancels the
// request, so that a blocked Read returns) when no byte came for d.
type StallReader struct {
	r       io.Reader
	d       time.Duration
	timer   *time.Timer
	stalled atomic.Bool // set before stall is called
}

// NewStallReader watches r; Stop ends the watch.
func NewStallReader(r io.Reader, d time.Duration, stall func()) *StallReader {
	s := &StallReader{r: r, d: d}
	s.timer = time.AfterFunc(d, func() {
		s.stalled.Store(true)
		stall()
	})
	return s
}

func (s *StallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.timer.Reset(s.d)
	}
	return n, err
}

// Pause stops the watch while the stream waits for its reader (a slow
// reader is not a stalled provider); Resume starts it again.
func (s *StallReader) Pause()  { s.timer.Stop() }
func (s *StallReader) Resume() { s.timer.Reset(s.d) }

// Stalled reports whether the watch fired.
func (s *StallReader) Stalled() bool { return s.stalled.Load() }

// Stop ends the watch: the stream is over.
func (s *StallReader) Stop() { s.timer.Stop() }

// ErrEventTooLong is an SSE line longer than the reader's bound: a broken
// stream, not one to buffer.
var ErrEventTooLong = errors.New("server-sent event too long")

// SSEReader reads the data of server-sent events: "data:" lines up to a
// blank line, other fields and comments skipped, lines ending in "\n" or
// "\r\n".
type SSEReader struct {
	sc  *bufio.Scanner
	max int
}

// NewSSEReader reads events from r; no line and no event's data may be
// longer than maxBytes.
func NewSSEReader(r io.Reader, maxBytes int) *SSEReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxBytes+2)
	sc.Split(scanLines)
	return &SSEReader{sc: sc, max: maxBytes}
}

// Next returns the next event's data: io.EOF when the stream ended after
// a whole event, io.ErrUnexpectedEOF when it ended inside one (a cut),
// ErrEventTooLong, or the body's error.
func (r *SSEReader) Next() ([]byte, error) {
	var data []byte
	pending := false
	for r.sc.Scan() {
		line := r.sc.Bytes()
		if len(line) == 0 {
			if pending {
				return data, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" {
			continue
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if pending {
			data = append(data, '\n')
		}
		if len(data)+len(value) > r.max {
			return nil, ErrEventTooLong
		}
		data = append(data, value...)
		pending = true
	}
	switch err := r.sc.Err(); {
	case errors.Is(err, bufio.ErrTooLong):
		return nil, ErrEventTooLong
	case err != nil:
		return nil, err
	case pending:
		return nil, io.ErrUnexpectedEOF
	}
	return nil, io.EOF
}

// errCutLine is a body that ends inside a line.
var errCutLine = io.ErrUnexpectedEOF

// scanLines is bufio.ScanLines, but a body that ends inside a line is an
// error (a cut stream), not a last line.
func scanLines(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, bytes.TrimSuffix(data[:i], []byte("\r")), nil
	}
	if atEOF && len(data) > 0 {
		return 0, nil, errCutLine
	}
	return 0, nil, nil
}
