package worker

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"unsafe"
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
// an error, never a panic or a huge allocation. It is also how a tree keeps
// the parts nobody has touched since they came (encoded.go).

var errTreeCodec = errors.New("damaged tree encoding")

// maxDepth bounds nesting on decode (a hostile package cannot exhaust the stack).
const maxDepth = 512

// appendValue appends the encoding of v, a tree value. An encoded value
// is copied as it is.
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
		return appendNumber(b, x), nil
	case string:
		return appendString(b, x), nil
	case encoded:
		return appendLong(b, string(x)), nil
	case []any:
		return appendArray(b, x)
	case openArray:
		return appendArray(b, x)
	case map[string]any:
		return appendMap(b, x)
	case openMap:
		return appendMap(b, x)
	}
	return nil, fmt.Errorf("encoding a tree: %T is not a tree value", v)
}

func appendArray(b []byte, a []any) ([]byte, error) {
	b = append(b, 'a')
	b = binary.AppendUvarint(b, uint64(len(a)))
	var err error
	for _, e := range a {
		if b, err = appendValue(b, e); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func appendMap(b []byte, m map[string]any) ([]byte, error) {
	b = append(b, 'm')
	b = binary.AppendUvarint(b, uint64(len(m)))
	var err error
	for k, e := range m {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		if b, err = appendValue(b, e); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func appendNumber(b []byte, f float64) []byte {
	b = append(b, 'd')
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}

func appendString(b []byte, s string) []byte {
	b = append(b, 's')
	b = binary.AppendUvarint(b, uint64(len(s)))
	return appendLong(b, s)
}

// appendAny encodes v, a value given to Tree.Set, as JSON-like values,
// without making them first: numbers of any Go type become float64s, a
// map's entries go in key order (a map means the same in any order, and in
// this one its encoding is the same every time and turns into JSON as
// encoding/json writes it, with nothing to sort), and anything else goes
// through its JSON. A func or a channel is refused.
func appendAny(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil, bool, float64, string:
		return appendValue(b, x)
	case int:
		return appendNumber(b, float64(x)), nil
	case int64:
		return appendNumber(b, float64(x)), nil
	case int32:
		return appendNumber(b, float64(x)), nil
	case uint64:
		return appendNumber(b, float64(x)), nil
	case uint32:
		return appendNumber(b, float64(x)), nil
	case float32:
		return appendNumber(b, float64(x)), nil
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return nil, err
		}
		return appendNumber(b, f), nil
	case map[string]any:
		return appendAnyMap(b, x)
	case []any:
		b = append(b, 'a')
		b = binary.AppendUvarint(b, uint64(len(x)))
		var err error
		for _, e := range x {
			if b, err = appendAny(b, e); err != nil {
				return nil, err
			}
		}
		return b, nil
	case []string:
		b = append(b, 'a')
		b = binary.AppendUvarint(b, uint64(len(x)))
		for _, e := range x {
			b = appendString(b, e)
		}
		return b, nil
	case json.RawMessage:
		var out any
		if err := json.Unmarshal(x, &out); err != nil {
			return nil, err
		}
		return appendAny(b, out)
	case encoded, openMap, openArray:
		return appendValue(b, x)
	}
	switch reflect.ValueOf(v).Kind() {
	case reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return nil, fmt.Errorf("a %T is a live object, not data: keep it in Page.Local", v)
	}
	j, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("a %T is not serialisable data: %w", v, err)
	}
	var out any
	if err := json.Unmarshal(j, &out); err != nil {
		return nil, err
	}
	return appendAny(b, out)
}

// entry is a map's entry on its way out.
type entry struct {
	key string
	val any
}

// sortedEntries returns m's entries in key order, in small if they fit
// (most maps of a tree are small: a row, a filter).
func sortedEntries(m map[string]any, small []entry) []entry {
	es := small[:0]
	if len(m) > cap(small) {
		es = make([]entry, 0, len(m))
	}
	for k, v := range m {
		es = append(es, entry{k, v})
	}
	slices.SortFunc(es, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	return es
}

func appendAnyMap(b []byte, m map[string]any) ([]byte, error) {
	b = append(b, 'm')
	b = binary.AppendUvarint(b, uint64(len(m)))
	var small [16]entry
	var err error
	for _, e := range sortedEntries(m, small[:]) {
		b = binary.AppendUvarint(b, uint64(len(e.key)))
		b = append(b, e.key...)
		if b, err = appendAny(b, e.val); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// sizeAny is the length of appendAny's encoding of v, known without
// encoding it for JSON-like values and ints (ok false for what goes
// through its JSON), so that the encoding is made in one buffer of its
// size.
func sizeAny(v any) (n int, ok bool) {
	switch x := v.(type) {
	case nil, bool:
		return 1, true
	case float64, int, int64, int32, uint64, uint32, float32, json.Number:
		return 9, true
	case string:
		return 1 + uvarintLen(len(x)) + len(x), true
	case encoded:
		return len(x), true
	case map[string]any:
		n = 1 + uvarintLen(len(x))
		for k, e := range x {
			m, ok := sizeAny(e)
			if !ok {
				return 0, false
			}
			n += uvarintLen(len(k)) + len(k) + m
		}
		return n, true
	case []any:
		n = 1 + uvarintLen(len(x))
		for _, e := range x {
			m, ok := sizeAny(e)
			if !ok {
				return 0, false
			}
			n += m
		}
		return n, true
	case []string:
		n = 1 + uvarintLen(len(x))
		for _, e := range x {
			n += 1 + uvarintLen(len(e)) + len(e)
		}
		return n, true
	}
	return 0, false
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

// cloneString copies s, a piece at a time.
func cloneString(s string) string {
	if len(s) <= copyPiece {
		return strings.Clone(s)
	}
	var sb strings.Builder
	sb.Grow(len(s))
	for len(s) > 0 {
		n := min(len(s), copyPiece)
		sb.WriteString(s[:n])
		s = s[n:]
	}
	return sb.String()
}

// ownString makes b, an encoding just made and never written again, the
// string a tree keeps. It is not copied unless append left much of its
// capacity unused (which the tree would hold for nothing).
func ownString(b []byte) string {
	if cap(b)-len(b) > len(b)/8 {
		return longString(b)
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// sizeValue is the length of v's encoding (v is a tree value, as
// appendValue checks).
func sizeValue(v any) int {
	switch x := v.(type) {
	case float64:
		return 9
	case string:
		return 1 + uvarintLen(len(x)) + len(x)
	case encoded:
		return len(x)
	case []any:
		return sizeArray(x)
	case openArray:
		return sizeArray(x)
	case map[string]any:
		return sizeMap(x)
	case openMap:
		return sizeMap(x)
	}
	return 1 // nil, true, false (and what appendValue refuses)
}

func sizeArray(a []any) int {
	n := 1 + uvarintLen(len(a))
	for _, e := range a {
		n += sizeValue(e)
	}
	return n
}

func sizeMap(m map[string]any) int {
	n := 1 + uvarintLen(len(m))
	for k, e := range m {
		n += uvarintLen(len(k)) + len(k) + sizeValue(e)
	}
	return n
}

func uvarintLen(n int) int {
	k := 1
	for u := uint64(n); u >= 0x80; u >>= 7 {
		k++
	}
	return k
}

// encodeTree encodes a tree's root.
func encodeTree(t *Tree) ([]byte, error) {
	return appendValue(make([]byte, 0, sizeValue(t.root)), t.root)
}

// decodeTree replaces t's content with an encoded root, without deltas.
// b is checked whole and copied once (a piece at a time); the tree opens
// its root and keeps the rest encoded until it is read or written (encoded.go),
// so a page costs about its encoded size until it is used. b is not kept:
// the package it came in can go.
func decodeTree(t *Tree, b []byte) error {
	if len(b) == 0 {
		t.root, t.size, t.held = map[string]any{}, 2, 0
		return nil
	}
	if b[0] != 'm' {
		if _, err := skipValue(string(b), 0, maxDepth); err != nil {
			return err
		}
		return fmt.Errorf("%w: the root is not a map", errTreeCodec)
	}
	s := longString(b)
	root, end, err := openContainer(s, 0, maxDepth)
	if err != nil {
		return err
	}
	if end != len(s) {
		return fmt.Errorf("%w: %d trailing bytes", errTreeCodec, len(s)-end)
	}
	t.root, t.size, t.held = map[string]any(root.(openMap)), int64(len(b)), int64(len(b))
	return nil
}

// uvarintAt reads a uvarint at s[i:] as binary.Uvarint does: k <= 0 is
// an error.
func uvarintAt(s string, i int) (x uint64, k int) {
	var shift uint
	for k = 0; k < binary.MaxVarintLen64; k++ {
		if i+k >= len(s) {
			return 0, 0
		}
		c := s[i+k]
		if c < 0x80 {
			if k == binary.MaxVarintLen64-1 && c > 1 {
				return 0, -(k + 1) // overflow
			}
			return x | uint64(c)<<shift, k + 1
		}
		x |= uint64(c&0x7f) << shift
		shift += 7
	}
	return 0, -(binary.MaxVarintLen64 + 1)
}

// lenAt reads a length or a count at s[i:], which must not be more than
// what is left after it, and returns where what it counts begins.
func lenAt(s string, i int) (n, j int, err error) {
	u, k := uvarintAt(s, i)
	if k <= 0 || u > uint64(len(s)-i-k) {
		return 0, 0, errTreeCodec
	}
	return int(u), i + k, nil
}

// skipValue checks the value at s[i:] and returns where it ends. left is
// how many levels it may nest past this one (encoded containers the tree made
// or checked itself are read with no bound).
func skipValue(s string, i, left int) (int, error) {
	if i >= len(s) || left < 0 {
		return 0, errTreeCodec
	}
	switch tag := s[i]; tag {
	case 'n', 't', 'f':
		return i + 1, nil
	case 'd':
		if len(s)-i-1 < 8 {
			return 0, errTreeCodec
		}
		return i + 9, nil
	case 's':
		n, j, err := lenAt(s, i+1)
		return j + n, err
	case 'a', 'm':
		// Every element takes at least one byte, which bounds the count.
		n, j, err := lenAt(s, i+1)
		for k := 0; k < n && err == nil; k++ {
			if tag == 'm' {
				var kl int
				if kl, j, err = lenAt(s, j); err != nil {
					break
				}
				j += kl
			}
			j, err = skipValue(s, j, left-1)
		}
		return j, err
	default:
		return 0, fmt.Errorf("%w: unknown tag %q", errTreeCodec, tag)
	}
}

// itemAt reads the value at s[i:] as an opened container holds it: a
// scalar as itself, an array or a map encoded (sharing s). A string is a
// copy: one read or kept by an app never keeps a whole encoding alive.
func itemAt(s string, i, left int) (any, int, error) {
	if i >= len(s) {
		return nil, 0, errTreeCodec
	}
	switch s[i] {
	case 'n':
		return nil, i + 1, nil
	case 't':
		return true, i + 1, nil
	case 'f':
		return false, i + 1, nil
	case 'd':
		if len(s)-i-1 < 8 {
			return nil, 0, errTreeCodec
		}
		return math.Float64frombits(le64(s[i+1 : i+9])), i + 9, nil
	case 's':
		n, j, err := lenAt(s, i+1)
		if err != nil {
			return nil, 0, err
		}
		return cloneString(s[j : j+n]), j + n, nil
	}
	end, err := skipValue(s, i, left)
	if err != nil {
		return nil, 0, err
	}
	return encoded(s[i:end]), end, nil
}

// le64 reads 8 bytes little-endian.
func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// openContainer reads the array or the map at s[i:] one level deep, into
// an openArray or an openMap: its elements as itemAt reads them. It
// returns where the container ends.
func openContainer(s string, i, left int) (any, int, error) {
	if i >= len(s) || (s[i] != 'a' && s[i] != 'm') || left < 0 {
		return nil, 0, errTreeCodec
	}
	n, j, err := lenAt(s, i+1)
	if err != nil {
		return nil, 0, err
	}
	if s[i] == 'a' {
		out := make(openArray, n)
		for k := range out {
			if out[k], j, err = itemAt(s, j, left-1); err != nil {
				return nil, 0, err
			}
		}
		return out, j, nil
	}
	out := make(openMap, n)
	for k := 0; k < n; k++ {
		var kl int
		if kl, j, err = lenAt(s, j); err != nil {
			return nil, 0, err
		}
		key := cloneString(s[j : j+kl])
		if out[key], j, err = itemAt(s, j+kl, left-1); err != nil {
			return nil, 0, err
		}
	}
	return out, j, nil
}

// decodeAt reads the value at s[i:] whole, into JSON-like values of their
// own. s is an encoding checked before.
func decodeAt(s string, i int) (any, int) {
	if s[i] != 'a' && s[i] != 'm' {
		v, end, _ := itemAt(s, i, 0)
		return v, end
	}
	n, j, _ := lenAt(s, i+1)
	if s[i] == 'a' {
		out := make([]any, n)
		for k := range out {
			out[k], j = decodeAt(s, j)
		}
		return out, j
	}
	out := make(map[string]any, n)
	for k := 0; k < n; k++ {
		kl, at, _ := lenAt(s, j)
		out[cloneString(s[at:at+kl])], j = decodeAt(s, at+kl)
	}
	return out, j
}
