package front

import (
	"encoding/json"
	"strconv"
)

// decodeOp decodes one op as json.Unmarshal does, with the same result and
// the same errors. The ops a page sends take a fast road that reflects over
// nothing and copies nothing: keys spelled as the protocol spells them,
// strings without escapes, plain integers; o.Data is then a piece of b,
// which the caller must not change. Anything else (an escape, another key,
// a null, a number in another form, bad JSON) is left to encoding/json.
func decodeOp(b []byte, o *op) error {
	if end, ok := fastOp(b, 0, o); ok && onlySpace(b, end) {
		return nil
	}
	*o = op{}
	return json.Unmarshal(b, o)
}

// decodeOps decodes a batched frame, a JSON array of ops, as decodeOp does
// one.
func decodeOps(b []byte) ([]op, error) {
	if ops, ok := fastOps(b); ok {
		return ops, nil
	}
	var ops []op
	err := json.Unmarshal(b, &ops)
	return ops, err
}

func fastOps(b []byte) ([]op, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return nil, false
	}
	i = skipSpace(b, i+1)
	ops := make([]op, 0, 4)
	if i < len(b) && b[i] == ']' {
		return ops, onlySpace(b, i+1)
	}
	for {
		ops = append(ops, op{})
		end, ok := fastOp(b, i, &ops[len(ops)-1])
		if !ok {
			return nil, false
		}
		i = skipSpace(b, end)
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case ']':
			return ops, onlySpace(b, i+1)
		default:
			return nil, false
		}
	}
}

// fastOp decodes the object at b[i:] into o and returns the index after it;
// ok is false if the object is not of the fast road's kind.
func fastOp(b []byte, i int, o *op) (end int, ok bool) {
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != '{' {
		return 0, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for {
		key, next, ok := plainString(b, i)
		if !ok {
			return 0, false
		}
		i = skipSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return 0, false
		}
		i = skipSpace(b, i+1)
		switch string(key) {
		case "op":
			o.Op, i, ok = stringValue(b, i)
		case "page":
			o.Page, i, ok = stringValue(b, i)
		case "kind":
			o.Kind, i, ok = stringValue(b, i)
		case "msg_id":
			o.MsgID, i, ok = stringValue(b, i)
		case "id":
			o.ID, i, ok = uintValue(b, i)
		case "after":
			o.After, i, ok = uintValue(b, i)
		case "wait":
			o.Wait, i, ok = intValue(b, i)
		case "data":
			o.Data, i, ok = rawValue(b, i)
		default:
			return 0, false
		}
		if !ok {
			return 0, false
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return i + 1, true
		default:
			return 0, false
		}
	}
}

// plainString returns the string at b[i:] if it holds printable ASCII
// without escapes (what it decodes to is then its bytes).
func plainString(b []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

func stringValue(b []byte, i int) (string, int, bool) {
	s, next, ok := plainString(b, i)
	if !ok {
		return "", 0, false
	}
	return string(s), next, true
}

// digits returns the end of the run of digits at b[i:], if it is a JSON
// integer's (no leading zero but for 0 itself).
func digits(b []byte, i int) (int, bool) {
	j := i
	for j < len(b) && b[j] >= '0' && b[j] <= '9' {
		j++
	}
	if j == i || (b[i] == '0' && j > i+1) {
		return 0, false
	}
	// A fraction or an exponent: not an integer of the fast road.
	if j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
		return 0, false
	}
	return j, true
}

func uintValue(b []byte, i int) (uint64, int, bool) {
	end, ok := digits(b, i)
	if !ok {
		return 0, 0, false
	}
	n, err := strconv.ParseUint(string(b[i:end]), 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return n, end, true
}

func intValue(b []byte, i int) (int64, int, bool) {
	start := i
	if i < len(b) && b[i] == '-' {
		i++
	}
	end, ok := digits(b, i)
	if !ok {
		return 0, 0, false
	}
	n, err := strconv.ParseInt(string(b[start:end]), 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return n, end, true
}

// rawValue returns the JSON value at b[i:] as it stands, if it is valid
// and not null (encoding/json leaves a RawMessage null as "null"; the slow
// road keeps that case).
func rawValue(b []byte, i int) (json.RawMessage, int, bool) {
	end, ok := valueEnd(b, i)
	if !ok || !json.Valid(b[i:end]) || string(b[i:end]) == "null" {
		return nil, 0, false
	}
	return b[i:end:end], end, true
}

// valueEnd finds where the JSON value at b[i:] ends, trusting json.Valid
// to judge it after: strings are skipped with their escapes, objects and
// arrays by their depth.
func valueEnd(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	depth := 0
	for j := i; j < len(b); j++ {
		switch c := b[j]; c {
		case '"':
			for j++; j < len(b) && b[j] != '"'; j++ {
				if b[j] == '\\' {
					j++
				}
			}
			if j >= len(b) {
				return 0, false
			}
			if depth == 0 {
				return j + 1, true
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return j, true // a scalar's end, in its object or array
			}
			depth--
			if depth == 0 {
				return j + 1, true
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return j, true
			}
		}
	}
	if depth != 0 {
		return 0, false
	}
	return len(b), true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func onlySpace(b []byte, i int) bool { return skipSpace(b, i) == len(b) }
