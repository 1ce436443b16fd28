package worker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// The tree codec is how page trees travel in a parked package: a compact
// binary form of JSON-like values, so that a move costs little more than a
// copy of the state (encoding/json runs at about a tenth of that). One type
// byte, then:
//
//	'n' nil   't' true   'f' false
//	'd' float64, 8 bytes little-endian
//	's' string: uvarint length, bytes
//	'a' array: uvarint count, values
//	'm' map: uvarint count, then per entry a uvarint key length, the key, a value
//
// Decoding checks every length against what is left, so a damaged package is
// an error, never a panic or a huge allocation.

var errTreeCodec = errors.New("damaged tree encoding")

// maxDepth bounds nesting on decode (a hostile package cannot exhaust the stack).
const maxDepth = 512

func appendValue(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, 'n'), nil
	case bool:
		if x {
			return append(b, 't'), nil
		}
		return append(b, 'f'), nil
	case float64:
		b = append(b, 'd')
		return binary.LittleEndian.AppendUint64(b, math.Float64bits(x)), nil
	case string:
		b = append(b, 's')
		b = binary.AppendUvarint(b, uint64(len(x)))
		return appendLong(b, x), nil
	case []any:
		b = append(b, 'a')
		b = binary.AppendUvarint(b, uint64(len(x)))
		var err error
		for _, e := range x {
			if b, err = appendValue(b, e); err != nil {
				return nil, err
			}
		}
		return b, nil
	case map[string]any:
		b = append(b, 'm')
		b = binary.AppendUvarint(b, uint64(len(x)))
		var err error
		for k, e := range x {
			b = binary.AppendUvarint(b, uint64(len(k)))
			b = append(b, k...)
			if b, err = appendValue(b, e); err != nil {
				return nil, err
			}
		}
		return b, nil
	}
	return nil, fmt.Errorf("encoding a tree: %T is not a tree value", v)
}

// copyPiece bounds one copy of a long value. A copy is one call the
// runtime cannot preempt: a 100 MB string copied whole holds up a garbage
// collection (which spins waiting for it) and everything that waits on that.
const copyPiece = 256 << 10

// appendLong appends s to b a piece at a time.
func appendLong(b []byte, s string) []byte {
	if len(s) <= copyPiece {
		return append(b, s...)
	}
	b = slices.Grow(b, len(s))
	for len(s) > 0 {
		n := min(len(s), copyPiece)
		b, s = append(b, s[:n]...), s[n:]
	}
	return b
}

// longString copies b into a new string a piece at a time.
func longString(b []byte) string {
	if len(b) <= copyPiece {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b))
	for len(b) > 0 {
		n := min(len(b), copyPiece)
		sb.Write(b[:n])
		b = b[n:]
	}
	return sb.String()
}

// sizeValue is the length of v's encoding (v is a tree value, as
// appendValue checks).
func sizeValue(v any) int {
	switch x := v.(type) {
	case float64:
		return 9
	case string:
		return 1 + uvarintLen(len(x)) + len(x)
	case []any:
		n := 1 + uvarintLen(len(x))
		for _, e := range x {
			n += sizeValue(e)
		}
		return n
	case map[string]any:
		n := 1 + uvarintLen(len(x))
		for k, e := range x {
			n += uvarintLen(len(k)) + len(k) + sizeValue(e)
		}
		return n
	}
	return 1 // nil, true, false (and what appendValue refuses)
}

func uvarintLen(n int) int {
	k := 1
	for u := uint64(n); u >= 0x80; u >>= 7 {
		k++
	}
	return k
}

// encodeTree encodes a tree's root.
func encodeTree(t *Tree) ([]byte, error) { return appendValue(nil, t.root) }

// decodeTree replaces t's content with an encoded root, without deltas.
func decodeTree(t *Tree, b []byte) error {
	if len(b) == 0 {
		t.root, t.size = map[string]any{}, 2
		return nil
	}
	v, rest, err := decodeValue(b, 0)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", errTreeCodec, len(rest))
	}
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("%w: the root is not a map", errTreeCodec)
	}
	t.root, t.size = m, int64(len(b))
	return nil
}

func decodeLen(b []byte) (int, []byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return 0, nil, errTreeCodec
	}
	return int(n), b[k:], nil
}

func decodeValue(b []byte, depth int) (any, []byte, error) {
	if len(b) == 0 || depth > maxDepth {
		return nil, nil, errTreeCodec
	}
	tag, b := b[0], b[1:]
	switch tag {
	case 'n':
		return nil, b, nil
	case 't':
		return true, b, nil
	case 'f':
		return false, b, nil
	case 'd':
		if len(b) < 8 {
			return nil, nil, errTreeCodec
		}
		return math.Float64frombits(binary.LittleEndian.Uint64(b)), b[8:], nil
	case 's':
		n, rest, err := decodeLen(b)
		if err != nil {
			return nil, nil, err
		}
		return longString(rest[:n]), rest[n:], nil
	case 'a':
		// Every element takes at least one byte, which bounds the count.
		n, rest, err := decodeLen(b)
		if err != nil {
			return nil, nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], rest, err = decodeValue(rest, depth+1); err != nil {
				return nil, nil, err
			}
		}
		return out, rest, nil
	case 'm':
		n, rest, err := decodeLen(b)
		if err != nil {
			return nil, nil, err
		}
		out := make(map[string]any, n)
		for i := 0; i < n; i++ {
			var kl int
			if kl, rest, err = decodeLen(rest); err != nil {
				return nil, nil, err
			}
			k := string(rest[:kl])
			if out[k], rest, err = decodeValue(rest[kl:], depth+1); err != nil {
				return nil, nil, err
			}
		}
		return out, rest, nil
	}
	return nil, nil, fmt.Errorf("%w: unknown tag %q", errTreeCodec, tag)
}
