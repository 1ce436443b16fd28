package worker

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// appendJSON appends v, a value of a tree, as JSON: the bytes json.Marshal
// writes for the value Get returns (maps' keys in order, strings escaped
// for HTML, numbers as ES6 prints them), without decoding an encoded value first.
// Deltas and RESETs are written so; a NaN or an infinity is refused as
// json.Marshal refuses it.
func appendJSON(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		return strconv.AppendBool(b, x), nil
	case float64:
		return appendJSONNumber(b, x)
	case string:
		return appendJSONString(b, x), nil
	case encoded:
		b = slices.Grow(b, len(x)+len(x)/4)
		b, _, err := appendJSONRaw(b, string(x), 0)
		return b, err
	case []any:
		return appendJSONArray(b, x)
	case openArray:
		return appendJSONArray(b, x)
	case map[string]any:
		return appendJSONMap(b, x)
	case openMap:
		return appendJSONMap(b, x)
	}
	return nil, fmt.Errorf("writing JSON: %T is not a tree value", v)
}

func appendJSONArray(b []byte, a []any) ([]byte, error) {
	if a == nil {
		return append(b, "null"...), nil
	}
	b = append(b, '[')
	var err error
	for i, e := range a {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = appendJSON(b, e); err != nil {
			return nil, err
		}
	}
	return append(b, ']'), nil
}

func appendJSONMap(b []byte, m map[string]any) ([]byte, error) {
	if m == nil {
		return append(b, "null"...), nil
	}
	b = append(b, '{')
	var err error
	var small [16]entry
	for i, e := range sortedEntries(m, small[:]) {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(appendJSONString(b, e.key), ':')
		if b, err = appendJSON(b, e.val); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// jsonEntry is where a map's entry went in the JSON being written.
type jsonEntry struct {
	key      string
	from, to int
}

// appendJSONRaw appends the encoded value at s[i:] as JSON and returns
// where it ends. A map's entries are written as they come and put in
// order after, if they were not (the tree's own encodings are; those of
// older packages come in a Go map's order).
func appendJSONRaw(b []byte, s string, i int) ([]byte, int, error) {
	if i >= len(s) {
		return nil, 0, errTreeCodec
	}
	switch s[i] {
	case 'n':
		return append(b, "null"...), i + 1, nil
	case 't':
		return append(b, "true"...), i + 1, nil
	case 'f':
		return append(b, "false"...), i + 1, nil
	case 'd':
		if len(s)-i-1 < 8 {
			return nil, 0, errTreeCodec
		}
		b, err := appendJSONNumber(b, math.Float64frombits(le64(s[i+1:i+9])))
		return b, i + 9, err
	case 's':
		n, j, err := lenAt(s, i+1)
		if err != nil {
			return nil, 0, err
		}
		return appendJSONString(b, s[j:j+n]), j + n, nil
	case 'a', 'm':
	default:
		return nil, 0, errTreeCodec
	}
	n, j, err := lenAt(s, i+1)
	if err != nil {
		return nil, 0, err
	}
	if s[i] == 'a' {
		b = append(b, '[')
		for k := 0; k < n; k++ {
			if k > 0 {
				b = append(b, ',')
			}
			if b, j, err = appendJSONRaw(b, s, j); err != nil {
				return nil, 0, err
			}
		}
		return append(b, ']'), j, nil
	}
	b = append(b, '{')
	start := len(b)
	var small [16]jsonEntry
	entries := small[:0]
	inOrder := true
	for k := 0; k < n; k++ {
		kl, at, err := lenAt(s, j)
		if err != nil {
			return nil, 0, err
		}
		key := s[at : at+kl]
		if k > 0 {
			b = append(b, ',')
			inOrder = inOrder && entries[k-1].key <= key
		}
		from := len(b)
		b = append(appendJSONString(b, key), ':')
		if b, j, err = appendJSONRaw(b, s, at+kl); err != nil {
			return nil, 0, err
		}
		entries = append(entries, jsonEntry{key, from, len(b)})
	}
	if !inOrder {
		// Stable: of equal keys (a damaged package's), the last still
		// comes last, and wins where the JSON is read.
		slices.SortStableFunc(entries, func(a, b jsonEntry) int { return strings.Compare(a.key, b.key) })
		written := slices.Clone(b[start:])
		b = b[:start]
		for k, e := range entries {
			if k > 0 {
				b = append(b, ',')
			}
			b = append(b, written[e.from-start:e.to-start]...)
		}
	}
	return append(b, '}'), j, nil
}

// appendJSONNumber writes f as encoding/json does.
func appendJSONNumber(b []byte, f float64) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, &json.UnsupportedValueError{Value: reflect.ValueOf(f), Str: strconv.FormatFloat(f, 'g', -1, 64)}
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 is written e-9.
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}

const hexDigits = "0123456789abcdef"

// appendJSONString writes s as encoding/json does: quoted, with <, > and
// & escaped for HTML, invalid UTF-8 as U+FFFD, and U+2028 and U+2029
// escaped for JSONP.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = appendLong(b, s[start:i])
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = appendLong(b, s[start:i])
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = appendLong(b, s[start:i])
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = appendLong(b, s[start:])
	return append(b, '"')
}
