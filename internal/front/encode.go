package front

import (
	"encoding/json"
	"strconv"
	"sync"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// The WebSocket's answers are written by hand, straight from the worker's
// reply: no answer struct, no slice of deltas, and the JSON values the
// worker encoded (a message's data, a delta's value) copied as they are,
// not re-read by encoding/json (which compacts and checks every byte of
// them again). The worker's SDK wrote those values with a JSON encoder.
// The output decodes to exactly what json.Marshal of the answer gives.

// appendReply appends the answer to op id that rep makes (toAnswer). bad
// reports a value that was not JSON, written as null (the worker's bug, for
// the log).
func appendReply(b []byte, id uint64, rep *protocol.FrameReply) (out []byte, bad bool) {
	b = append(b, `{"op":"reply","id":`...)
	b = strconv.AppendUint(b, id, 10)
	if rep.WorkerId != "" {
		b = append(b, `,"worker":`...)
		b = appendString(b, rep.WorkerId)
	}
	switch k := rep.Kind.(type) {
	case *protocol.FrameReply_Opened:
		o := k.Opened
		b = append(b, `,"opened":{"page":`...)
		b = appendString(b, o.Page)
		b = append(b, `,"kind":`...)
		b = appendString(b, o.Kind)
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, o.Seq, 10)
		if o.Notice != "" {
			b = append(b, `,"notice":`...)
			b = appendString(b, o.Notice)
		}
		if o.Resync {
			b = append(b, `,"resync":true`...)
		}
		b = append(b, `,"base":`...)
		b = strconv.AppendUint(b, o.Base, 10)
		b = append(b, '}')
	case *protocol.FrameReply_Message:
		switch m := k.Message; {
		case m.Error != "":
			b = append(b, `,"error":`...)
			b = appendString(b, m.Error)
			b = append(b, `,"code":`...)
			b = appendString(b, appCode(m))
			if m.Retry {
				b = append(b, `,"retry":true`...)
			}
		case len(m.Data) > 0:
			b = append(b, `,"data":`...)
			b, bad = appendRaw(b, m.Data)
		}
	case *protocol.FrameReply_Deltas:
		if ds := k.Deltas.Deltas; len(ds) > 0 {
			b = append(b, `,"deltas":[`...)
			for i, d := range ds {
				if i > 0 {
					b = append(b, ',')
				}
				var badValue bool
				b, badValue = appendDelta(b, d)
				bad = bad || badValue
			}
			b = append(b, ']')
		}
		if k.Deltas.Last != 0 {
			b = append(b, `,"last":`...)
			b = strconv.AppendUint(b, k.Deltas.Last, 10)
		}
	}
	return append(b, '}'), bad
}

func appendDelta(b []byte, d *protocol.Delta) (out []byte, bad bool) {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, d.Seq, 10)
	b = append(b, `,"op":`...)
	b = appendString(b, deltaOps[d.Op])
	if d.Path != "" {
		b = append(b, `,"path":`...)
		b = appendString(b, d.Path)
	}
	if len(d.Value) > 0 {
		b = append(b, `,"value":`...)
		b, bad = appendRaw(b, d.Value)
	}
	if d.Notice != "" {
		b = append(b, `,"notice":`...)
		b = appendString(b, d.Notice)
	}
	return append(b, '}'), bad
}

// appendRaw appends a JSON value the worker encoded. One that is not JSON
// (a worker's bug) becomes null rather than breaking the page's frame; the
// check is the cost of a scan, paid only by values that do not start the
// way the encoder's always do.
func appendRaw(b []byte, v []byte) (out []byte, bad bool) {
	if trustedJSON(v) || json.Valid(v) {
		return append(b, v...), false
	}
	return append(b, "null"...), true
}

// trustedJSON reports a value whose validity is cheap to see: a number,
// true, false or null, or a string without escapes or control bytes.
// Anything else is checked in full.
func trustedJSON(v []byte) bool {
	switch s := string(v); {
	case s == "true", s == "false", s == "null":
		return true
	case len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"':
		for _, c := range v[1 : len(v)-1] {
			if c < 0x20 || c == '"' || c == '\\' {
				return false
			}
		}
		return true
	case len(v) > 0 && len(v) <= 24 && (v[0] == '-' || v[0] >= '0' && v[0] <= '9'):
		return json.Valid(v)
	}
	return false
}

// appendString appends s as a JSON string, as encoding/json writes it.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// bufPool holds the buffers answers are written into: a socket holds one
// only while it writes.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledBuf is the largest buffer given back to bufPool: a page's big
// first pull does not stay in the pool.
const maxPooledBuf = 64 << 10
