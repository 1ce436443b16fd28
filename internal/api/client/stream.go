package client

import (
	"bufio"
	"encoding/json"
	"io"
)

// Stream is an NDJSON answer read as the agent writes it, one value a line:
// a job's or a drain's progress, a tear-down's steps. Close it when done;
// the caller's context ends it sooner.
type Stream[T any] struct {
	body io.ReadCloser
	next func(*T) error
}

// newStream reads body with a JSON decoder: a read error or a cut value is
// the decoder's error, as it gives it.
func newStream[T any](body io.ReadCloser) *Stream[T] {
	dec := json.NewDecoder(body)
	return &Stream[T]{body: body, next: func(v *T) error { return dec.Decode(v) }}
}

// newLineStream reads body a line at a time: a read error ends the stream
// as its end does (io.EOF), and a line that is not JSON is Unmarshal's
// error. A caller whose answer ends with a final line (the tear-down's
// "done") tells a stream cut short by that line's absence.
func newLineStream[T any](body io.ReadCloser) *Stream[T] {
	sc := bufio.NewScanner(body)
	return &Stream[T]{body: body, next: func(v *T) error {
		if !sc.Scan() {
			return io.EOF
		}
		return json.Unmarshal(sc.Bytes(), v)
	}}
}

// Next returns the next value. At the end of the stream it returns io.EOF.
func (s *Stream[T]) Next() (T, error) {
	var v T
	err := s.next(&v)
	return v, err
}

// Close ends the stream. The agent carries on with what it was doing.
func (s *Stream[T]) Close() error { return s.body.Close() }
