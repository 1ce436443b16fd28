package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-json-experiment/json/jsontext"
)

// Native bodies are edited in place, never decoded and encoded again: a
// caller's request reaches a provider of its own shape byte for byte,
// apart from the fields the gateway must set (the model, and on a stream
// the usage it counts), and an answer keeps the provider's bytes.

// errNotObject is a native body that is not a JSON object.
var errNotObject = errors.New("not a JSON object")

// span is where a top-level member's value sits in a JSON object: start
// and end of the value (found), and the offset of the object's closing
// brace, with whether the object has any member.
type span struct {
	start, end int
	found      bool
	closing    int
	members    bool
}

// locate finds key's value among body's top-level members, reading its
// tokens (TokenDecoder: no value is decoded).
func locate(body []byte, key string) (span, error) {
	var s span
	dec := TokenDecoder(body)
	tok, err := dec.ReadToken()
	if err != nil {
		return s, err
	}
	if tok.Kind() != '{' {
		return s, errNotObject
	}
	for dec.PeekKind() != '}' {
		s.members = true
		name, err := dec.ReadToken()
		if err != nil {
			return s, err
		}
		match := !s.found && name.String() == key
		raw, err := dec.ReadValue()
		if err != nil {
			return s, err
		}
		if match {
			s.end = int(dec.InputOffset())
			s.start = s.end - len(raw)
			s.found = true
		}
	}
	if _, err := dec.ReadToken(); err != nil { // the closing brace
		return s, err
	}
	s.closing = int(dec.InputOffset()) - 1
	if s.closing < 0 || s.closing >= len(body) || body[s.closing] != '}' {
		return s, errNotObject
	}
	return s, nil
}

// TokenDecoder reads body's JSON tokens as leniently as encoding/json
// reads a body: a name given twice, or text that is not UTF-8, is no
// error.
func TokenDecoder(body []byte) *jsontext.Decoder {
	return jsontext.NewDecoder(bytes.NewReader(body), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
}

// JSONField returns the value of a top-level member of the JSON object
// body, as written; ok is false when it has none (or body is not an
// object).
func JSONField(body []byte, key string) (json.RawMessage, bool) {
	s, err := locate(body, key)
	if err != nil || !s.found {
		return nil, false
	}
	return json.RawMessage(body[s.start:s.end]), true
}

// SetJSONField returns body with the top-level member key set to value
// (JSON): its value replaced where it is, or the member added at the end
// of the object. Every other byte of body is kept.
func SetJSONField(body []byte, key string, value any) ([]byte, error) {
	v, err := json.Marshal(value)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", key, err)
	}
	s, err := locate(body, key)
	if err != nil {
		return nil, fmt.Errorf("setting %s: %w", key, err)
	}
	var out []byte
	if s.found {
		out = make([]byte, 0, len(body)-(s.end-s.start)+len(v))
		out = append(append(append(out, body[:s.start]...), v...), body[s.end:]...)
		return out, nil
	}
	k, _ := json.Marshal(key)
	out = make([]byte, 0, len(body)+len(k)+len(v)+2)
	out = append(out, body[:s.closing]...)
	if s.members {
		out = append(out, ',')
	}
	out = append(append(append(out, k...), ':'), v...)
	return append(out, body[s.closing:]...), nil
}
