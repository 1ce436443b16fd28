package demo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// readOp returns the op of a message: a JSON object with an "op" string.
func readOp(raw json.RawMessage) (string, error) {
	var m struct {
		Op string `json:"op"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", fmt.Errorf("reading a message: %w: %w", ErrBadMessage, err)
	}
	if m.Op == "" {
		return "", fmt.Errorf("reading a message: %w: it has no op", ErrBadMessage)
	}
	return m.Op, nil
}

// decodeOp decodes the message of op into v, refusing fields v lacks (so a
// misspelt field is an error, not a silent no-op) and trailing data.
func decodeOp(op string, raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("reading a %q message: %w: %w", op, ErrBadMessage, err)
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		return fmt.Errorf("reading a %q message: %w: data after the object", op, ErrBadMessage)
	}
	return nil
}

// badf is an ErrBadMessage saying what was being done and why.
func badf(doing, format string, args ...any) error {
	return fmt.Errorf("%s: %w: %s", doing, ErrBadMessage, fmt.Sprintf(format, args...))
}

// unknownOp is the error for an op the page kind lacks.
func unknownOp(kind, op string, known ...string) error {
	return fmt.Errorf("handling %q on a %s page: %w (the page takes %q)", op, kind, ErrUnknownOp, known)
}
