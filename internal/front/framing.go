package front

import (
	"bytes"
	"io"
	"net"
	"strconv"
)

// Strict HTTP/1.1 framing. Go's server takes a bare LF as a line end in the
// request line and the header fields (RFC 9112 lets a recipient do so) and
// serves a request that carries both Content-Length and Transfer-Encoding
// as chunked. A proxy in front that reads the same bytes otherwise (a bare
// LF as part of a field, the length from Content-Length) then sees other
// requests than the front: the classic request smuggling. So the front
// reads every request's framing strictly as the bytes arrive, before Go's
// parser sees them: lines end with CRLF only, no bare CR, not both
// Content-Length and Transfer-Encoding, no transfer coding but chunked.
// The first byte that breaks a rule is replaced, with everything after
// it, by a NUL and an empty line: Go's parser answers that request
// 400 Bad Request and closes the connection, and the requests before it on
// the connection are served as they were.

// framingReason names a broken rule, for stickyd_front_framing_refused_total.
type framingReason string

const (
	reasonBareLF   framingReason = "bare_lf"
	reasonBareCR   framingReason = "bare_cr"
	reasonCLAndTE  framingReason = "content_length_and_transfer_encoding"
	reasonCoding   framingReason = "transfer_coding"
	reasonChunk    framingReason = "chunk"
	reasonLongLine framingReason = "field_too_long"
)

// framingRefusal is what a broken connection reads from the point of the
// break: an invalid byte and the end of a header section.
var framingRefusal = []byte("\x00\r\n\r\n")

// Scanner states.
const (
	stRequestLine = iota // in a request line
	stField              // in a header field line (or at a line's start)
	stBody               // in a body of known length
	stChunkSize          // in a chunk-size line
	stChunkData          // in chunk data
	stChunkEnd           // the CRLF after chunk data
	stTrailer            // in the trailer section
	stPass               // past an upgrade: no more HTTP on this connection
)

// maxFieldPrefix is how much of a header field line the scanner keeps: its
// name and enough of its value to read the framing fields.
const maxFieldPrefix = 256

// framing scans one connection's bytes as HTTP/1.1 requests.
type framing struct {
	state  int
	prevCR bool
	// line holds the start of the current line (at most maxFieldPrefix
	// bytes); long is set when it was cut.
	line []byte
	long bool
	// Of the request whose header section is being read.
	contentLength int64 // -1: none
	te            bool  // a Transfer-Encoding field
	chunked       bool
	upgrade       bool
	remaining     int64 // of the body or chunk being read
	chunkCRLF     int   // bytes of the CRLF after chunk data seen
}

func newFraming() *framing {
	return &framing{state: stRequestLine, contentLength: -1}
}

// scan reads b, returning the offset of the first byte that breaks a rule
// (and the rule), or -1.
func (f *framing) scan(b []byte) (int, framingReason) {
	for i := 0; i < len(b); i++ {
		switch f.state {
		case stPass:
			return -1, ""
		case stBody:
			n := min(int64(len(b)-i), f.remaining)
			f.remaining -= n
			i += int(n) - 1
			if f.remaining == 0 {
				f.nextRequest()
			}
			continue
		case stChunkData:
			n := min(int64(len(b)-i), f.remaining)
			f.remaining -= n
			i += int(n) - 1
			if f.remaining == 0 {
				f.state, f.chunkCRLF = stChunkEnd, 0
			}
			continue
		case stChunkEnd:
			if want := "\r\n"[f.chunkCRLF]; b[i] != want {
				return i, reasonChunk
			}
			if f.chunkCRLF++; f.chunkCRLF == 2 {
				f.state = stChunkSize
			}
			continue
		}
		// A line-oriented state: the request line, a field, a chunk size,
		// a trailer.
		c := b[i]
		switch {
		case c == '\n' && !f.prevCR:
			return i, reasonBareLF
		case c == '\n':
			f.prevCR = false
			if r := f.endLine(); r != "" {
				return i, r
			}
			continue
		case f.prevCR:
			return i, reasonBareCR
		case c == '\r':
			f.prevCR = true
			continue
		}
		if len(f.line) < maxFieldPrefix {
			f.line = append(f.line, c)
		} else {
			f.long = true
		}
	}
	return -1, ""
}

// endLine handles the end of a line (its CRLF seen).
func (f *framing) endLine() framingReason {
	line, long := f.line, f.long
	f.line, f.long = f.line[:0], false
	switch f.state {
	case stRequestLine:
		if len(line) > 0 { // empty lines before a request line are skipped
			f.state = stField
		}
		return ""
	case stChunkSize:
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		size, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
		if err != nil || size < 0 || long {
			return reasonChunk
		}
		if size == 0 {
			f.state = stTrailer
		} else {
			f.state, f.remaining = stChunkData, size
		}
		return ""
	case stTrailer:
		if len(line) == 0 {
			f.nextRequest()
		}
		return ""
	}
	// stField
	if len(line) == 0 {
		return f.endHeaders()
	}
	colon := bytes.IndexByte(line, ':')
	if colon < 0 {
		return "" // Go's parser refuses it
	}
	name := bytes.ToLower(bytes.TrimSpace(line[:colon]))
	value := bytes.TrimSpace(line[colon+1:])
	switch string(name) {
	case "content-length":
		if long {
			return reasonLongLine
		}
		if n, err := strconv.ParseInt(string(value), 10, 64); err == nil && n >= 0 {
			f.contentLength = n
		}
	case "transfer-encoding":
		if long {
			return reasonLongLine
		}
		f.te = true
		if !bytes.EqualFold(value, []byte("chunked")) {
			return reasonCoding
		}
		f.chunked = true
	case "upgrade":
		f.upgrade = true
	}
	return ""
}

// endHeaders handles the empty line that ends a header section.
func (f *framing) endHeaders() framingReason {
	switch {
	case f.te && f.contentLength >= 0:
		return reasonCLAndTE
	case f.upgrade:
		// A WebSocket takes the connection over; a refused upgrade
		// closes it (Front.ServeHTTP), so no request follows unread.
		f.state = stPass
	case f.chunked:
		f.state = stChunkSize
	case f.contentLength > 0:
		f.state, f.remaining = stBody, f.contentLength
	default:
		f.nextRequest()
	}
	return ""
}

func (f *framing) nextRequest() {
	*f = framing{state: stRequestLine, contentLength: -1, line: f.line[:0]}
}

// strictConn is a served connection whose bytes are read through a
// framing scanner.
type strictConn struct {
	net.Conn
	f       *framing // nil past an upgrade
	refused func(framingReason)
	// tail is what is left to read after a break: framingRefusal, then
	// nothing.
	tail   []byte
	broken bool
}

func (c *strictConn) Read(p []byte) (int, error) {
	if c.broken {
		if len(c.tail) == 0 {
			return 0, io.EOF
		}
		n := copy(p, c.tail)
		c.tail = c.tail[n:]
		return n, nil
	}
	n, err := c.Conn.Read(p)
	if c.f == nil {
		return n, err // past an upgrade: the WebSocket's bytes pass as they are
	}
	i, reason := c.f.scan(p[:n])
	if c.f.state == stPass {
		// Nothing more is HTTP on this connection: the scanner and its
		// line buffer go, not kept for the WebSocket's whole life.
		c.f = nil
	}
	if i >= 0 {
		c.broken, c.tail = true, framingRefusal
		if c.refused != nil {
			c.refused(reason)
		}
		if i == 0 {
			return c.Read(p)
		}
		return i, nil
	}
	return n, err
}
