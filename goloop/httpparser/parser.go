// Package httpparser is an incremental HTTP/1.1 parser (RFC 9112/9110)
// modeled on llhttp, the parser that httptools wraps. It works on byte
// slices, calls a Handler for each event, and does not allocate per request
// in steady state.
//
// Any split of the input across Feed calls produces the same callbacks
// (OnBody may be called a different number of times with the same bytes)
// and the same result: the start line, each header line, each chunk-size
// line and each trailer line is processed once it is complete; an
// incomplete line is kept in an internal buffer that is reused.
package httpparser

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// Handler receives parse events. Every method may return an error, which
// stops parsing: Feed returns an *Error with Kind KindCallback wrapping it.
// Slices passed to the methods are valid only during the call.
type Handler interface {
	OnMessageBegin() error
	OnURL(url []byte) error            // once per request, the whole request-target
	OnStatus(reason []byte) error      // once per response, the whole reason phrase (may be empty)
	OnHeader(name, value []byte) error // whole name and value (OWS trimmed); trailers too
	OnHeadersComplete() error
	OnBody(chunk []byte) error // body bytes as they arrive
	OnMessageComplete() error
	OnChunkHeader() error   // after each chunk-size line, also the last (0) one
	OnChunkComplete() error // after each chunk's CRLF, also the last chunk's (after trailers)
}

// Want tells which Handler methods the parser calls. Parsing and
// validation are the same whatever it is set to.
type Want uint16

const (
	WantMessageBegin Want = 1 << iota
	WantURL
	WantStatus
	WantHeader
	WantHeadersComplete
	WantBody
	WantMessageComplete
	WantChunkHeader
	WantChunkComplete

	WantAll = WantMessageBegin | WantURL | WantStatus | WantHeader | WantHeadersComplete |
		WantBody | WantMessageComplete | WantChunkHeader | WantChunkComplete
)

// Lenient flags relax one rule each. The bit values are llhttp's.
type Lenient uint16

const (
	// LenientHeaders accepts any byte but LF in header values, whitespace
	// between a header name and the colon, and obs-fold (continuation lines,
	// joined to the value with one SP).
	LenientHeaders Lenient = 1 << iota
	// LenientChunkedLength accepts Content-Length together with
	// Transfer-Encoding (Transfer-Encoding wins).
	LenientChunkedLength
	// LenientKeepAlive keeps parsing after a message that does not keep the
	// connection alive (instead of going to the closed state).
	LenientKeepAlive
	// LenientTransferEncoding accepts requests whose Transfer-Encoding does
	// not end with chunked (the body is then read until EOF), and chunked
	// applied more than once.
	LenientTransferEncoding
	// LenientVersion accepts any HTTP/<digit>.<digit> version.
	LenientVersion
	// LenientDataAfterClose discards data after a message that closed the
	// connection instead of failing.
	LenientDataAfterClose
	// LenientOptionalLFAfterCR accepts a CR alone as a line ending.
	LenientOptionalLFAfterCR
	// LenientOptionalCRLFAfterChunk accepts chunk data not followed by CRLF.
	LenientOptionalCRLFAfterChunk
	// LenientOptionalCRBeforeLF accepts a LF alone as a line ending.
	LenientOptionalCRBeforeLF
	// LenientSpacesAfterChunkSize accepts SP/HTAB after the chunk size.
	LenientSpacesAfterChunkSize

	LenientAll = LenientHeaders | LenientChunkedLength | LenientKeepAlive | LenientTransferEncoding |
		LenientVersion | LenientDataAfterClose | LenientOptionalLFAfterCR |
		LenientOptionalCRLFAfterChunk | LenientOptionalCRBeforeLF | LenientSpacesAfterChunkSize
)

// DefaultMaxHeaderSize is the default limit of a header (or trailer)
// section, start line included, and of a chunk-size line.
const DefaultMaxHeaderSize = 80 * 1024

// parser states
const (
	stStart     uint8 = iota // before a message: CR/LF are skipped
	stStartLine              // request or status line
	stHeaders
	stBodyLength
	stBodyEOF
	stChunkSize
	stChunkData
	stChunkDataCR
	stChunkDataLF
	stTrailers
	stClosed
	stUpgraded
	stError
)

// message flags
const (
	fContentLength uint16 = 1 << iota
	fTransferEncoding
	fChunked // Transfer-Encoding ends with chunked
	fChunkedTwice
	fConnClose
	fConnKeepAlive
	fConnUpgrade
	fUpgradeHeader
	fUpgrade // the message upgrades the connection
	fSkipBody
)

// body modes
const (
	bodyNone uint8 = iota
	bodyLength
	bodyChunked
	bodyEOF
)

// method classes
const (
	mOther uint8 = iota
	mConnect
	mHead
)

// Parser is an incremental HTTP/1.x request or response parser.
// It is not safe for concurrent use.
type Parser struct {
	// Want selects the Handler methods called (WantAll by default).
	Want Want
	// MaxHeaderSize limits the start line plus header section, the trailer
	// section, and each chunk-size line (DefaultMaxHeaderSize by default).
	MaxHeaderSize int
	// SkipBody, on a response parser, says that the response being parsed
	// answers a HEAD request: it has no body whatever its headers say. It
	// may be set before the response's headers complete (also from
	// OnHeadersComplete) and is cleared when the response completes.
	SkipBody bool
	// UpgradeSkipsBody makes a message that upgrades the connection end with its header
	// section, whatever its headers say of a body (httptools' behaviour: the bytes after
	// the headers belong to the new protocol).
	UpgradeSkipsBody bool
	upgradeBody      bool // ReadUpgradeBody was called for the current message

	h        Handler
	response bool
	lenient  Lenient
	state    uint8
	body     uint8
	mclass   uint8
	urlFrag  int32 // index of '#' in the request-target (OnURL's), 0: no fragment
	skipLF   bool  // LenientOptionalLFAfterCR: a line ended with CR, skip a following LF
	partial  bool  // buf holds an incomplete line
	hint     scanHint
	after09  bool // the request line had no version (HTTP/0.9): llhttp's URL state sees the next byte
	hasPend  bool // LenientHeaders: a header is pending in pendName/pendVal
	major    uint8
	minor    uint8
	flags    uint16
	status   int
	headSize int   // bytes of the current header/trailer section so far
	lineLen  int   // length of the line readLine returned, line ending included
	clen     int64 // Content-Length, -1 if none
	remain   uint64
	chunk    uint64 // size of the current chunk
	err      error

	buf      []byte // incomplete line
	method   []byte
	pendName []byte
	pendVal  []byte
}

// NewRequestParser returns a parser for requests.
func NewRequestParser(h Handler) *Parser {
	p := &Parser{h: h}
	p.init()
	return p
}

// NewResponseParser returns a parser for responses.
func NewResponseParser(h Handler) *Parser {
	p := &Parser{h: h, response: true}
	p.init()
	return p
}

func (p *Parser) init() {
	p.Want = WantAll
	p.MaxHeaderSize = DefaultMaxHeaderSize
	p.method = make([]byte, 0, 16)
	p.buf = make([]byte, 0, 256)
	p.clen = -1
}

// Reset makes the parser ready for a new connection. It keeps the handler,
// Want, MaxHeaderSize and the leniencies.
func (p *Parser) Reset() {
	p.state = stStart
	p.err = nil
	p.skipLF = false
	p.partial = false
	p.hint = scanHint{}
	p.SkipBody = false
	p.resetMessage()
	p.status = 0
	p.major, p.minor = 0, 0
	p.method = p.method[:0]
}

// SetHandler replaces the handler.
func (p *Parser) SetHandler(h Handler) { p.h = h }

// SetLeniencies sets the lenient flags (replacing earlier ones).
func (p *Parser) SetLeniencies(l Lenient) { p.lenient = l }

// Leniencies returns the lenient flags.
func (p *Parser) Leniencies() Lenient { return p.lenient }

// Method returns the request method of the current (or last) request.
// The slice is owned by the parser and valid until the next request line.
func (p *Parser) Method() []byte { return p.method }

// FragmentAt is the index of the '#' that begins a fragment in the request-target given
// to OnURL (valid from OnURL on), 0 when the target has none. The request line's scan
// finds it; nothing is scanned again.
func (p *Parser) FragmentAt() int { return int(p.urlFrag) }

// IsConnect tells whether the request's method is CONNECT.
func (p *Parser) IsConnect() bool { return p.mclass == mConnect }

// StatusCode returns the status code of the current (or last) response.
func (p *Parser) StatusCode() int { return p.status }

// Major returns the major HTTP version of the current message.
func (p *Parser) Major() int { return int(p.major) }

// Minor returns the minor HTTP version of the current message.
func (p *Parser) Minor() int { return int(p.minor) }

// ContentLength returns the Content-Length of the current message, -1 if none.
func (p *Parser) ContentLength() int64 { return p.clen }

// IsChunked tells whether the current message has a chunked body.
func (p *Parser) IsChunked() bool { return p.body == bodyChunked }

// ChunkSize returns the size of the current chunk (meaningful in OnChunkHeader).
func (p *Parser) ChunkSize() uint64 { return p.chunk }

// Err returns the error that stopped the parser, if any.
func (p *Parser) Err() error { return p.err }

// ReadUpgradeBody, called from OnHeadersComplete of a request that upgrades the
// connection, makes the parser read the request's body (as its headers declare it) before
// the upgrade, despite UpgradeSkipsBody: the request is answered before the switch, or the
// upgrade is declined (h2c).
func (p *Parser) ReadUpgradeBody() {
	if !p.response && p.flags&fUpgrade != 0 {
		p.upgradeBody = true
	}
}

// ShouldUpgrade tells whether the current message upgrades the connection
// (a request with Upgrade and Connection: upgrade, a CONNECT request, or a
// 101 response with Upgrade and Connection: upgrade). Valid from
// OnHeadersComplete on.
func (p *Parser) ShouldUpgrade() bool { return p.flags&fUpgrade != 0 }

// ShouldKeepAlive tells whether the connection may be used for another
// message after the current one (llhttp_should_keep_alive). Valid from
// OnHeadersComplete on.
func (p *Parser) ShouldKeepAlive() bool {
	if p.major > 0 && p.minor > 0 {
		if p.flags&fConnClose != 0 {
			return false
		}
	} else if p.flags&fConnKeepAlive == 0 {
		return false
	}
	return !p.needsEOF()
}

// StateKey returns a value that is the same as long as Major, Minor, StatusCode,
// ShouldKeepAlive and ShouldUpgrade return the same (cheap, for callers that cache them).
func (p *Parser) StateKey() uint64 {
	k := uint64(p.major) | uint64(p.minor)<<8 | uint64(p.flags)<<16 | uint64(uint32(p.status))<<32
	if p.SkipBody {
		k |= 1 << 31 // the flags use 9 bits
	}
	return k
}

func (p *Parser) needsEOF() bool {
	if !p.response {
		return false
	}
	if p.status/100 == 1 || p.status == 204 || p.status == 304 || p.SkipBody || p.flags&fSkipBody != 0 {
		return false
	}
	if p.flags&fTransferEncoding != 0 && p.flags&fChunked == 0 {
		return true
	}
	if p.flags&(fChunked|fContentLength) != 0 {
		return false
	}
	return true
}

func (p *Parser) resetMessage() {
	p.flags = 0
	p.upgradeBody = false
	p.clen = -1
	p.remain = 0
	p.chunk = 0
	p.body = bodyNone
	p.mclass = mOther
	p.headSize = 0
	p.hasPend = false
	p.after09 = false
}

// room returns how many bytes the current header section may still take (MaxHeaderSize
// <= 0: no limit, as llhttp).
func (p *Parser) room() int {
	if p.MaxHeaderSize <= 0 {
		return 1 << 62
	}
	return p.MaxHeaderSize - p.headSize
}

// chunkRoom is the limit of a chunk-size line.
func (p *Parser) chunkRoom() int {
	if p.MaxHeaderSize <= 0 {
		return 1 << 62
	}
	return p.MaxHeaderSize
}

func (p *Parser) fail(kind Kind, msg string, off int) error {
	e := &Error{Kind: kind, Msg: msg, Offset: off}
	p.err = e
	p.state = stError
	return e
}

func (p *Parser) cbErr(err error, off int) error {
	e := &Error{Kind: KindCallback, Msg: "callback failed", Offset: off, Err: err}
	p.err = e
	p.state = stError
	return e
}

// Feed parses data. It consumes all of data or returns an error: an *Error
// (also on every later call), or an *UpgradeError when the connection
// switches protocols.
func (p *Parser) Feed(data []byte) error {
	switch p.state {
	case stError:
		return p.err
	case stUpgraded:
		return &UpgradeError{Offset: 0}
	}
	n := len(data)
	i := 0
	for i < n {
		if p.skipLF {
			p.skipLF = false
			if data[i] == '\n' {
				i++
				continue
			}
		}
		switch p.state {
		case stStart:
			c := data[i]
			if c == '\r' || c == '\n' {
				i++
				continue
			}
			p.resetMessage()
			p.state = stStartLine
			if p.Want&WantMessageBegin != 0 {
				if err := p.h.OnMessageBegin(); err != nil {
					return p.cbErr(err, i)
				}
			}

		case stStartLine:
			if p.lenient&^fastLenient == 0 && !p.partial && !p.response {
				if next := p.fastRequestLine(data, i); next > 0 {
					i = next
					p.state = stHeaders
					break
				}
				if p.state == stError { // a callback failed
					return p.err
				}
			}
			start := lineRequest
			if p.response {
				start = lineStatus
			}
			line, next, err := p.readLine(data, i, p.room(), start)
			if err != nil {
				return err
			}
			if line == nil {
				i = n
				break
			}
			p.headSize += p.lineLen
			i = next
			if p.response {
				err = p.statusLine(line, i)
			} else {
				err = p.requestLine(line, i)
			}
			if err != nil {
				return err
			}
			p.state = stHeaders

		case stHeaders, stTrailers:
			if p.lenient&^fastLenient == 0 && !p.partial && p.state == stHeaders && !p.after09 {
				next, err := p.fastHeaderLine(data, i)
				if err != nil {
					return err
				}
				if next > 0 {
					i = next
					break
				}
			}
			line, next, err := p.readLine(data, i, p.room(), lineOther)
			if err != nil {
				return err
			}
			if line == nil {
				i = n
				break
			}
			p.headSize += p.lineLen
			i = next
			if p.after09 {
				p.after09 = false
				if len(line) > 0 && (line[0] == '\t' || line[0] == '\f') {
					return p.fail(KindInvalidURL, "invalid characters in url", i)
				}
			}
			trailer := p.state == stTrailers
			if len(line) != 0 {
				st := p.state
				if err := p.headerLine(line, trailer, i); err != nil {
					return p.earlierError(st, line, err)
				}
				break
			}
			if p.hasPend {
				if err := p.flushPending(trailer, i); err != nil {
					return err
				}
			}
			if trailer {
				if p.Want&WantChunkComplete != 0 {
					if err := p.h.OnChunkComplete(); err != nil {
						return p.cbErr(err, i)
					}
				}
				if err := p.messageComplete(i); err != nil {
					return err
				}
				break
			}
			if err := p.headersComplete(i); err != nil {
				return err
			}

		case stBodyLength:
			end, done, err := p.bodyPart(data, i)
			if err != nil {
				return err
			}
			i = end
			if done {
				if err := p.messageComplete(i); err != nil {
					return err
				}
			}

		case stBodyEOF:
			if p.Want&WantBody != 0 {
				if err := p.h.OnBody(data[i:]); err != nil {
					return p.cbErr(err, n)
				}
			}
			i = n

		case stChunkSize:
			line, next, err := p.readLine(data, i, p.chunkRoom(), lineOther)
			if err != nil {
				return err
			}
			if line == nil {
				i = n
				break
			}
			i = next
			if err := p.chunkSizeLine(line, i); err != nil {
				return p.earlierError(stChunkSize, line, err)
			}
			if p.Want&WantChunkHeader != 0 {
				if err := p.h.OnChunkHeader(); err != nil {
					return p.cbErr(err, i)
				}
			}
			if p.chunk == 0 {
				p.state = stTrailers
				p.headSize = 0
			} else {
				p.remain = p.chunk
				p.state = stChunkData
			}

		case stChunkData:
			end, done, err := p.bodyPart(data, i)
			if err != nil {
				return err
			}
			i = end
			if done {
				p.state = stChunkDataCR
			}

		case stChunkDataCR:
			switch data[i] {
			case '\r':
				i++
				p.state = stChunkDataLF
			case '\n':
				if p.lenient&LenientOptionalCRBeforeLF == 0 {
					return p.fail(KindCRExpected, "expected CRLF after chunk data", i)
				}
				i++
				if err := p.chunkComplete(i); err != nil {
					return err
				}
			default:
				if p.lenient&LenientOptionalCRLFAfterChunk == 0 {
					return p.fail(KindInvalidChunk, "expected CRLF after chunk data", i)
				}
				if err := p.chunkComplete(i); err != nil {
					return err
				}
			}

		case stChunkDataLF:
			if data[i] == '\n' {
				i++
			} else if p.lenient&LenientOptionalLFAfterCR == 0 {
				return p.fail(KindLFExpected, "expected LF after chunk data CR", i)
			}
			if err := p.chunkComplete(i); err != nil {
				return err
			}

		case stClosed:
			c := data[i]
			if c == '\r' || c == '\n' {
				i++
				continue
			}
			if p.lenient&LenientDataAfterClose == 0 {
				return p.fail(KindClosedConnection, "data after Connection: close", i)
			}
			i = n

		case stUpgraded:
			return &UpgradeError{Offset: i}

		default: // stError
			return p.err
		}
	}
	if p.state == stUpgraded {
		return &UpgradeError{Offset: n}
	}
	return nil
}

// fastLenient are the leniencies under which the fast paths of a request's head
// (fastRequestLine, fastHeaderLine) still apply: LenientDataAfterClose (goloop serve's) acts
// only once the connection is closing, never on a head's lines. The others change how lines
// are read (a header held back for a folded continuation, a CR alone ending a line, ...):
// readLine's general path.
const fastLenient = LenientDataAfterClose

// line kinds for readLine
const (
	lineOther = iota
	lineRequest
	lineStatus
)

// FeedEOF tells the parser that the connection was closed. It completes a
// response whose body is delimited by the close; it fails if a message is
// incomplete.
func (p *Parser) FeedEOF() error {
	switch p.state {
	case stError:
		return p.err
	case stUpgraded:
		return nil
	case stStart, stClosed:
		p.state = stClosed
		return nil
	case stBodyEOF:
		p.state = stClosed
		if p.Want&WantMessageComplete != 0 {
			if err := p.h.OnMessageComplete(); err != nil {
				return p.cbErr(err, 0)
			}
		}
		p.SkipBody = false
		return nil
	}
	return p.fail(KindInvalidEOF, "connection closed in the middle of a message", 0)
}

// bodyPart hands OnBody the part of data[i:] that belongs to the current Content-Length body or
// chunk (p.remain bytes), and returns the index after it and whether that body or chunk is
// now complete.
func (p *Parser) bodyPart(data []byte, i int) (int, bool, error) {
	end, done := len(data), false
	if uint64(end-i) >= p.remain {
		end, done = i+int(p.remain), true
	}
	p.remain -= uint64(end - i)
	if p.Want&WantBody != 0 {
		if err := p.h.OnBody(data[i:end]); err != nil {
			return end, done, p.cbErr(err, end)
		}
	}
	return end, done, nil
}

func (p *Parser) chunkComplete(off int) error {
	p.state = stChunkSize
	if p.Want&WantChunkComplete != 0 {
		if err := p.h.OnChunkComplete(); err != nil {
			return p.cbErr(err, off)
		}
	}
	return nil
}

func (p *Parser) messageComplete(off int) error {
	keep := p.ShouldKeepAlive()
	pausedNoUpgrade := false
	switch {
	case p.flags&fUpgrade != 0:
		p.state = stUpgraded
		p.skipLF = false // a LF after a lone CR belongs to the new protocol, whatever the split
	case p.response && p.status == 101:
		// llhttp stops after a 101 response even without Upgrade headers (httptools then
		// raises HttpParserError, on this and every later feed).
		pausedNoUpgrade = true
	case keep || p.lenient&LenientKeepAlive != 0:
		p.state = stStart
	default:
		p.state = stClosed
	}
	if p.Want&WantMessageComplete != 0 {
		if err := p.h.OnMessageComplete(); err != nil {
			return p.cbErr(err, off)
		}
	}
	p.SkipBody = false
	if pausedNoUpgrade {
		return p.fail(KindPausedUpgrade, "101 response without Upgrade", off)
	}
	return nil
}

// readLine returns the next complete line of data[i:] (joined with the
// buffered beginning of it, if any) without its line ending, and the index
// after it. If the line is incomplete it is buffered and line is nil.
// limit is the number of bytes (line ending included) the line may have.
// A start line (kind lineRequest, lineStatus) is returned with its line ending, and its
// beginning is checked as it arrives.
func (p *Parser) readLine(data []byte, i int, limit int, kind int) (line []byte, next int, err error) {
	rest := data[i:]
	var end int
	if p.lenient&LenientOptionalLFAfterCR == 0 {
		end = bytes.IndexByte(rest, '\n')
	} else {
		end = indexCRLF(rest)
	}
	if limit < 0 {
		limit = 0
	}
	if end < 0 {
		if !p.partial {
			p.partial = true
			p.buf = p.buf[:0]
			p.hint = scanHint{}
		}
		take := len(rest)
		if room := limit + 1 - len(p.buf); take > room {
			take = room
		}
		if take > 0 {
			p.buf = append(p.buf, rest[:take]...)
		}
		if err := p.checkLine(p.buf, limit, kind, len(data)); err != nil {
			return nil, 0, err
		}
		return nil, len(data), nil
	}
	next = i + end + 1
	if p.partial {
		p.partial = false
		p.hint = scanHint{}
		take := end + 1
		if room := limit + 1 - len(p.buf); take > room {
			take = room // the line is too long: checkLine fails below
		}
		p.buf = append(p.buf, rest[:take]...)
		line = p.buf
		p.lineLen = len(p.buf)
	} else {
		line = rest[:end+1]
		p.lineLen = end + 1
	}
	if len(line) > limit {
		if err := p.checkLine(line, limit, kind, next); err != nil {
			return nil, 0, err
		}
	}
	if kind != lineOther {
		return line, next, nil
	}
	// strip the line ending
	last := len(line) - 1
	if line[last] == '\n' {
		if last > 0 && line[last-1] == '\r' {
			line = line[:last-1]
		} else if p.lenient&LenientOptionalCRBeforeLF != 0 {
			line = line[:last]
		} else {
			// what the checks of the line's beginning would have found had it come in
			// pieces (the same error whatever the split), else the bare LF
			if p.lenient == 0 {
				k, msg := p.scanPartial(line[:last])
				p.hint = scanHint{}
				if k != KindOK {
					return nil, 0, p.fail(k, msg, next)
				}
			}
			return nil, 0, p.fail(KindCRExpected, "bare LF, expected CRLF", next)
		}
	} else { // CR alone (LenientOptionalLFAfterCR)
		line = line[:last]
		p.skipLF = true
	}
	return line, next, nil
}

// checkLine checks the beginning of a start line as llhttp would (within the limit) and
// then the size limit, the same way whatever the split.
func (p *Parser) checkLine(b []byte, limit int, kind int, off int) error {
	if kind != lineOther {
		w := b
		if len(w) > limit {
			w = w[:limit]
		}
		var k Kind
		var msg string
		if kind == lineRequest {
			var r reqLine
			k, msg = p.scanRequestLine(w, false, &r)
		} else {
			var major, minor uint8
			var st, end int
			var reason []byte
			var has bool
			k, msg = p.scanStatusLine(w, false, &major, &minor, &st, &reason, &has, &end)
		}
		if k != KindOK {
			return p.fail(k, msg, off)
		}
	}
	if kind == lineOther && p.lenient == 0 {
		// the bytes within the limit are checked first: had they come in smaller pieces,
		// their error would have come before the overflow
		w := b
		if len(w) > limit {
			w = w[:limit]
		}
		if k, msg := p.scanPartial(w); k != KindOK {
			return p.fail(k, msg, off)
		}
	}
	if len(b) > limit {
		if p.state == stChunkSize {
			return p.fail(KindHeaderOverflow, "chunk-size line too long", off)
		}
		return p.fail(KindHeaderOverflow, "header section too large", off)
	}
	return nil
}

func indexCRLF(b []byte) int {
	for j, c := range b {
		if c == '\r' || c == '\n' {
			return j
		}
	}
	return -1
}

// requestLine handles a complete request line (with its line ending).
func (p *Parser) requestLine(line []byte, off int) error {
	var r reqLine
	if k, msg := p.scanRequestLine(line, true, &r); k != KindOK {
		return p.fail(k, msg, off)
	}
	if r.end == 0 {
		return p.fail(KindInvalidVersion, "invalid request line", off)
	}
	if line[len(line)-1] == '\r' {
		p.skipLF = true
	}
	p.method = append(p.method[:0], r.method...)
	p.mclass = mOther
	switch string(r.method) {
	case "CONNECT":
		p.mclass = mConnect
	case "HEAD":
		p.mclass = mHead
	}
	p.major, p.minor = r.major, r.minor
	p.after09 = r.http09
	p.urlFrag = int32(r.frag)
	if p.Want&WantURL != 0 {
		if err := p.h.OnURL(r.url); err != nil {
			return p.cbErr(err, off)
		}
	}
	return nil
}

// statusLine handles a complete status line (with its line ending).
func (p *Parser) statusLine(line []byte, off int) error {
	var reason []byte
	var has bool
	var st, end int
	var major, minor uint8
	if k, msg := p.scanStatusLine(line, true, &major, &minor, &st, &reason, &has, &end); k != KindOK {
		return p.fail(k, msg, off)
	}
	if end == 0 {
		return p.fail(KindInvalidStatus, "invalid status line", off)
	}
	if line[len(line)-1] == '\r' {
		p.skipLF = true
	}
	p.major, p.minor, p.status = major, minor, st
	// llhttp calls on_status only when the line has a reason phrase (maybe empty) after
	// the code's space.
	if has && p.Want&WantStatus != 0 {
		if err := p.h.OnStatus(reason); err != nil {
			return p.cbErr(err, off)
		}
	}
	return nil
}

func (p *Parser) headerLine(line []byte, trailer bool, off int) error {
	c0 := line[0]
	if c0 == ' ' || c0 == '\t' {
		if p.lenient&LenientHeaders == 0 || !p.hasPend {
			return p.fail(KindInvalidHeader, "obsolete line folding", off)
		}
		v := trimOWS(line)
		for _, c := range v {
			if ctab[c]&cLenValue == 0 {
				return p.fail(KindInvalidHeader, "invalid character in header value", off)
			}
		}
		if len(v) > 0 {
			if len(p.pendVal) > 0 {
				p.pendVal = append(p.pendVal, ' ')
			}
			p.pendVal = append(p.pendVal, v...)
		}
		return nil
	}
	j := 0
	for j < len(line) && isToken(line[j]) {
		j++
	}
	if j == 0 {
		return p.fail(KindInvalidHeader, "invalid character in header name", off)
	}
	name := line[:j]
	if j < len(line) && line[j] != ':' && p.lenient&LenientHeaders != 0 {
		for j < len(line) && isOWS(line[j]) {
			j++
		}
	}
	if j >= len(line) || line[j] != ':' {
		return p.fail(KindInvalidHeader, "invalid character in header name", off)
	}
	value := trimLeftOWS(line[j+1:]) // llhttp keeps trailing whitespace
	if p.lenient&LenientHeaders == 0 {
		if !validValue(value) {
			for _, c := range value {
				if ctab[c]&cValue == 0 {
					if c == '\r' { // llhttp: a CR inside a value wants its LF
						return p.fail(KindLFExpected, "expected LF after CR", off)
					}
					break
				}
			}
			return p.fail(KindInvalidHeader, "invalid character in header value", off)
		}
		return p.emitHeader(name, value, trailer, off)
	}
	for _, c := range value {
		if ctab[c]&cLenValue == 0 {
			return p.fail(KindInvalidHeader, "invalid character in header value", off)
		}
	}
	{
		// obs-fold may follow: keep the header until the next line.
		if p.hasPend {
			if err := p.flushPending(trailer, off); err != nil {
				return err
			}
		}
		p.pendName = append(p.pendName[:0], name...)
		p.pendVal = append(p.pendVal[:0], value...)
		p.hasPend = true
		return nil
	}
}

// validValue checks field-value bytes (VCHAR, SP, HTAB, obs-text), eight
// at a time while they are all printable.
func validValue(v []byte) bool {
	const lo = 0x0101010101010101
	const hi = 0x8080808080808080
	for len(v) >= 8 {
		x := binary.LittleEndian.Uint64(v)
		ctl := (x - lo*0x20) & ^x & hi // some byte < 0x20
		y := x ^ (lo * 0x7f)
		del := (y - lo) & ^y & hi // some byte == 0x7f
		if ctl|del != 0 {
			break
		}
		v = v[8:]
	}
	for _, c := range v {
		if ctab[c]&cValue == 0 {
			return false
		}
	}
	return true
}

func (p *Parser) flushPending(trailer bool, off int) error {
	p.hasPend = false
	return p.emitHeader(p.pendName, p.pendVal, trailer, off)
}

func (p *Parser) emitHeader(name, value []byte, trailer bool, off int) error {
	// Trailer fields count as llhttp counts them: Content-Length there fails (the message
	// is chunked), Connection changes whether the connection is kept.
	{
		var err error
		switch len(name) {
		case 14:
			if eqFoldLower(name, "content-length") {
				err = p.contentLength(value, off)
			}
		case 17:
			if eqFoldLower(name, "transfer-encoding") {
				err = p.transferEncoding(value, off)
			}
		case 10:
			if eqFoldLower(name, "connection") {
				p.connection(value)
			}
		case 16:
			if eqFoldLower(name, "proxy-connection") {
				p.connection(value)
			}
		case 7:
			if len(value) > 0 && eqFoldLower(name, "upgrade") {
				p.flags |= fUpgradeHeader
			}
		}
		if err != nil {
			return err
		}
	}
	if p.Want&WantHeader != 0 {
		if err := p.h.OnHeader(name, value); err != nil {
			return p.cbErr(err, off)
		}
	}
	return nil
}

func (p *Parser) contentLength(v []byte, off int) error {
	if p.flags&fTransferEncoding != 0 && p.lenient&LenientChunkedLength == 0 {
		return p.fail(KindUnexpectedContentLength, "Content-Length with Transfer-Encoding", off)
	}
	if p.flags&fContentLength != 0 {
		return p.fail(KindInvalidContentLength, "duplicate Content-Length", off)
	}
	v = trimOWS(v)
	if len(v) == 0 {
		return p.fail(KindInvalidContentLength, "empty Content-Length", off)
	}
	var n uint64
	for _, c := range v {
		if c < '0' || c > '9' {
			return p.fail(KindInvalidContentLength, "invalid character in Content-Length", off)
		}
		d := uint64(c - '0')
		if n > (1<<63-1-d)/10 {
			return p.fail(KindInvalidContentLength, "Content-Length overflow", off)
		}
		n = n*10 + d
	}
	p.flags |= fContentLength
	p.clen = int64(n)
	return nil
}

// transferEncoding follows llhttp: the codings are separated by commas, chunked counts
// only as a whole element (followed by spaces at most); in a request nothing may follow
// chunked.
func (p *Parser) transferEncoding(v []byte, off int) error {
	if p.flags&fContentLength != 0 && p.lenient&LenientChunkedLength == 0 {
		return p.fail(KindUnexpectedContentLength, "Transfer-Encoding with Content-Length", off)
	}
	if len(v) == 0 {
		return p.fail(KindInvalidTransferEncoding, "empty Transfer-Encoding", off)
	}
	strictReq := !p.response && p.lenient&LenientTransferEncoding == 0
	if p.flags&fChunked != 0 && strictReq {
		return p.fail(KindInvalidTransferEncoding, "Transfer-Encoding after chunked", off)
	}
	p.flags |= fTransferEncoding
	first := true
	for more := true; more; {
		// every comma starts an element, the empty one after a trailing comma too
		// (llhttp: "chunked," does not end with chunked)
		var elem []byte
		if k := bytes.IndexByte(v, ','); k >= 0 {
			elem, v = v[:k], v[k+1:]
		} else {
			elem, v, more = v, nil, false
		}
		if !first {
			elem = trimLeftOWS(elem)
		}
		first = false
		e := elem
		for len(e) > 0 && e[len(e)-1] == ' ' {
			e = e[:len(e)-1]
		}
		if eqFoldLower(e, "chunked") {
			if p.flags&fChunked != 0 {
				p.flags |= fChunkedTwice
			}
			p.flags |= fChunked
			continue
		}
		if p.flags&fChunked != 0 {
			if strictReq {
				return p.fail(KindInvalidTransferEncoding, "Transfer-Encoding after chunked", off)
			}
			p.flags |= fChunkedTwice // chunked followed by another coding
		}
		p.flags &^= fChunked
	}
	return nil
}

func (p *Parser) connection(v []byte) {
	for len(v) > 0 {
		var elem []byte
		if k := bytes.IndexByte(v, ','); k >= 0 {
			elem, v = v[:k], v[k+1:]
		} else {
			elem, v = v, nil
		}
		elem = trimOWS(elem)
		switch len(elem) {
		case 5:
			if eqFoldLower(elem, "close") {
				p.flags |= fConnClose
			}
		case 10:
			if eqFoldLower(elem, "keep-alive") {
				p.flags |= fConnKeepAlive
			}
		case 7:
			if eqFoldLower(elem, "upgrade") {
				p.flags |= fConnUpgrade
			}
		}
	}
}

// decideBody sets p.body (and the upgrade flag) from the header section, as llhttp's
// llhttp__after_headers_complete.
func (p *Parser) decideBody(off int) error {
	f := p.flags
	if f&fUpgradeHeader != 0 && f&fConnUpgrade != 0 && (!p.response || p.status == 101) {
		f |= fUpgrade
	} else if !p.response && p.mclass == mConnect {
		f |= fUpgrade
	} else {
		f &^= fUpgrade
	}
	if p.UpgradeSkipsBody && f&fUpgrade != 0 && !p.upgradeBody {
		f |= fSkipBody
	} else if p.upgradeBody {
		f &^= fSkipBody
	}
	if p.response && p.SkipBody {
		f |= fSkipBody
	}
	p.flags = f
	skip := f&fSkipBody != 0
	hasBody := f&fChunked != 0 || (f&fContentLength != 0 && p.clen > 0)
	switch {
	case p.response && p.status == 101:
		p.body = bodyNone
	case f&fUpgrade != 0 && (p.mclass == mConnect || skip || !hasBody):
		p.body = bodyNone
	case p.response && p.status == 100:
		p.body = bodyNone
	case skip || p.response && (p.status == 102 || p.status == 103 || p.status == 204 || p.status == 304):
		p.body = bodyNone
	case f&fChunked != 0 && (p.response || f&fChunkedTwice == 0 || p.lenient&LenientTransferEncoding != 0):
		p.body = bodyChunked
	case f&fTransferEncoding != 0:
		if !p.response && p.lenient&(LenientTransferEncoding|LenientChunkedLength) == 0 {
			return p.fail(KindInvalidTransferEncoding, "request Transfer-Encoding must end with chunked, once", off)
		}
		p.body = bodyEOF
	case f&fContentLength != 0:
		if p.clen > 0 {
			p.body = bodyLength
		} else {
			p.body = bodyNone
		}
	case p.needsEOF():
		p.body = bodyEOF
	default:
		p.body = bodyNone
	}
	return nil
}

func (p *Parser) headersComplete(off int) error {
	if p.flags&fContentLength != 0 && p.flags&fTransferEncoding != 0 && p.lenient&LenientChunkedLength == 0 {
		return p.fail(KindUnexpectedContentLength, "Content-Length with Transfer-Encoding", off)
	}
	if err := p.decideBody(off); err != nil {
		return err
	}
	if p.Want&WantHeadersComplete != 0 {
		if err := p.h.OnHeadersComplete(); err != nil {
			return p.cbErr(err, off)
		}
		if p.response && p.SkipBody && p.body != bodyNone || p.upgradeBody {
			if err := p.decideBody(off); err != nil {
				return err
			}
		}
	}
	switch p.body {
	case bodyLength:
		p.remain = uint64(p.clen)
		p.state = stBodyLength
	case bodyChunked:
		p.state = stChunkSize
	case bodyEOF:
		p.state = stBodyEOF
	default:
		return p.messageComplete(off)
	}
	return nil
}

func (p *Parser) chunkSizeLine(line []byte, off int) error {
	j := 0
	var n uint64
	for j < len(line) && ctab[line[j]]&cHex != 0 {
		if n > (1<<63-1)>>4 {
			return p.fail(KindInvalidChunkSize, "chunk size overflow", off)
		}
		n = n<<4 | hexVal(line[j])
		j++
	}
	if j == 0 {
		return p.fail(KindInvalidChunkSize, "invalid chunk size", off)
	}
	if p.lenient&LenientSpacesAfterChunkSize != 0 {
		for j < len(line) && isOWS(line[j]) {
			j++
		}
	}
	if j < len(line) {
		if line[j] != ';' {
			return p.fail(KindInvalidChunkSize, "invalid character after chunk size", off)
		}
		if !chunkExtEnds(chunkExt(line[j+1:], ceStart)) {
			return p.fail(KindInvalidChunkSize, "invalid chunk extension", off)
		}
	}
	p.chunk = n
	return nil
}

// Chunk-extension states (llhttp's grammar: no whitespace around ';' or '=', empty names
// and values allowed, a quoted value only as a whole value).
const (
	ceStart  uint8 = iota // after ';'
	ceName                // in a name
	ceValue0              // after '='
	ceValue               // in a token value
	ceQuoted              // in a quoted value
	cePair                // after '\\' in a quoted value
	ceQDone               // after the closing quote
	ceBad
)

// chunkExt runs the chunk-extension grammar over b (what follows the first ';') from state
// st and returns the state it ends in (ceBad: invalid).
func chunkExt(b []byte, st uint8) uint8 {
	for _, c := range b {
		switch st {
		case ceStart:
			if c == ' ' || c == '"' || c == '\r' || c == '\n' {
				return ceBad
			}
			st = ceName
			fallthrough
		case ceName:
			switch {
			case isToken(c):
			case c == '=':
				st = ceValue0
			case c == ';':
				st = ceStart
			default:
				return ceBad
			}
		case ceValue0, ceValue:
			switch {
			case c == '"' && st == ceValue0:
				st = ceQuoted
			case isToken(c):
				st = ceValue
			case c == ';':
				st = ceStart
			default:
				return ceBad
			}
		case ceQuoted:
			switch {
			case c == '"':
				st = ceQDone
			case c == '\\':
				st = cePair
			case c == '\t' || c == ' ' || c == 0x21 || (c >= 0x23 && c <= 0x7e) || c >= 0x80:
			default:
				return ceBad
			}
		case cePair:
			if ctab[c]&cReason == 0 {
				return ceBad
			}
			st = ceQuoted
		case ceQDone:
			if c != ';' {
				return ceBad
			}
			st = ceStart
		default:
			return ceBad
		}
	}
	return st
}

// chunkExtEnds reports whether the line may end (CR) in chunk-extension state st.
func chunkExtEnds(st uint8) bool {
	return st == ceName || st == ceValue0 || st == ceValue || st == ceQDone
}

// fastRequestLine handles a well-formed request line ("METHOD target HTTP/1.x" CRLF) that
// lies whole in data[i:], without leniencies, in one pass: it returns the index after it,
// or 0 when the line needs the general path (incomplete, unusual or invalid), having then
// changed nothing. It returns 0 with p.err set when a callback failed.
func (p *Parser) fastRequestLine(data []byte, i int) int {
	n := len(data)
	j := i
	for j < n && ctab[data[j]]&cToken != 0 {
		j++
	}
	if j == i || j >= n || data[j] != ' ' {
		return 0
	}
	// an origin-form target without '#' (what llhttp's URL states accept unchanged)
	k := j + 1
	if k >= n || data[k] != '/' {
		return 0
	}
	for k < n && ctab[data[k]]&cURLFast != 0 {
		k++
	}
	if k+11 > n || data[k] != ' ' {
		return 0
	}
	v := data[k+1 : k+11]
	if binary.LittleEndian.Uint64(v) != 0x312e312f50545448 && // "HTTP/1.1"
		binary.LittleEndian.Uint64(v) != 0x302e312f50545448 || // "HTTP/1.0"
		v[8] != '\r' || v[9] != '\n' {
		return 0
	}
	next := k + 11
	if next-i > p.room() {
		return 0
	}
	m := data[i:j]
	if methodProtos(m)&protoHTTP == 0 || len(m) == 3 && string(m) == "PRI" {
		return 0
	}
	p.headSize += next - i
	p.lineLen = next - i
	if len(m) <= cap(p.method) && len(m) <= 8 {
		p.method = p.method[:len(m)]
		for x := range m {
			p.method[x] = m[x]
		}
	} else {
		p.method = append(p.method[:0], m...)
	}
	p.mclass = mOther
	switch len(m) {
	case 7:
		if string(m) == "CONNECT" {
			p.mclass = mConnect
		}
	case 4:
		if string(m) == "HEAD" {
			p.mclass = mHead
		}
	}
	p.major, p.minor = 1, v[7]-'0'
	p.urlFrag = 0 // the fast path's target has no '#'
	if p.Want&WantURL != 0 {
		if err := p.h.OnURL(data[j+1 : k]); err != nil {
			p.cbErr(err, next)
			return 0
		}
	}
	return next
}

// fastHeaderLine handles a well-formed header line (or the empty line ending the header
// section) that lies whole in data[i:], without leniencies, in one pass: it returns the
// index after it, or 0 when the line needs the general path, having then changed nothing.
func (p *Parser) fastHeaderLine(data []byte, i int) (int, error) {
	n := len(data)
	if i+1 < n && data[i] == '\r' && data[i+1] == '\n' {
		if p.hasPend || 2 > p.room() {
			return 0, nil
		}
		p.headSize += 2
		p.lineLen = 2
		i += 2
		return i, p.headersComplete(i)
	}
	j := i
	for j < n && ctab[data[j]]&cToken != 0 {
		j++
	}
	if j == i || j >= n || data[j] != ':' {
		return 0, nil
	}
	v := j + 1
	for v < n && (data[v] == ' ' || data[v] == '\t') {
		v++
	}
	// The value ends at its first byte that is not VCHAR, SP, HTAB or obs-text, found eight
	// bytes at a time (the lowest byte flagged by this test is exact).
	const lo = 0x0101010101010101
	const hi = 0x8080808080808080
	d := data[v:]
	for {
		if len(d) >= 8 {
			x := binary.LittleEndian.Uint64(d)
			y := x ^ (lo * 0x7f)
			m := ((x-lo*0x20) & ^x | (y-lo) & ^y) & hi // a byte < 0x20, or 0x7f
			if m == 0 {
				d = d[8:]
				continue
			}
			d = d[bits.TrailingZeros64(m)>>3:]
		} else {
			for len(d) > 0 && ctab[d[0]]&cValue != 0 {
				d = d[1:]
			}
			if len(d) == 0 {
				return 0, nil
			}
		}
		if d[0] != '\t' {
			break
		}
		d = d[1:]
	}
	if len(d) < 2 || d[0] != '\r' || d[1] != '\n' {
		return 0, nil
	}
	e := n - len(d)
	next := e + 2
	if next-i > p.room() {
		return 0, nil
	}
	p.headSize += next - i
	p.lineLen = next - i
	if err := p.emitHeader(data[i:j], data[v:e], false, next); err != nil {
		return 0, err
	}
	return next, nil
}

// earlierError returns, in place of err (the error of a whole header, trailer or chunk-size
// line), the error the checks of the line's beginning find in it (what the line would have
// failed with had it come in pieces), if any: the same error whatever the split.
func (p *Parser) earlierError(state uint8, line []byte, err error) error {
	e, ok := err.(*Error)
	if !ok || e.Kind == KindCallback || p.lenient != 0 {
		return err
	}
	saved := p.state
	p.state = state
	// line ended with CRLF (lenient is 0): in pieces, the check saw the line and its CR
	k, msg := p.scanPartial(line[:len(line)+1])
	p.state = saved
	p.hint = scanHint{}
	if k != KindOK {
		return p.fail(k, msg, e.Offset)
	}
	return err
}

// scanHint lets the checks of an incomplete line (fed again with every piece) resume where
// the previous check of the same buffer stopped, instead of rescanning it: without it, a
// long line fed a few bytes at a time costs time quadratic in its length. tag names the
// run the check stopped in (0: none), pos where, st the state the run needs.
type scanHint struct {
	tag uint8
	st  uint8
	pos int
}

const (
	hintNone    uint8 = iota
	hintName          // a header name's token run
	hintValue         // a header value; st: Content-Length's state (clNone, clLead, clDigits, clTrail)
	hintHex           // a chunk size's hex digits
	hintSpaces1       // the spaces after the method
	hintURL           // the target; st: the URL state
	hintSpaces2       // the spaces after the target
	hintReason        // a reason phrase
	hintExt           // chunk extensions; st: the chunk-extension state
)

// Content-Length states of hintValue.
const (
	clNone   = iota // not a Content-Length
	clLead          // OWS before the digits
	clDigits        // the digits
	clTrail         // OWS after the digits
	clDone          // a CR came: the value loop checks the rest
)

// resume returns where the run tagged tag, which starts at from, may continue in a buffer of
// n bytes, and the state saved with it.
func (p *Parser) resume(tag uint8, from, n int) (int, uint8, bool) {
	if p.hint.tag == tag && p.hint.pos > from && p.hint.pos <= n {
		return p.hint.pos, p.hint.st, true
	}
	return from, 0, false
}

// scanPartial checks the beginning of a header, trailer or chunk-size line as it arrives,
// so that an invalid byte fails at once (as in llhttp, which reads byte by byte) instead
// of when the line ends. b is the line buffer (it holds no LF); the check resumes at
// p.hint.
func (p *Parser) scanPartial(b []byte) (Kind, string) {
	n := len(b)
	switch p.state {
	case stHeaders, stTrailers:
		if n == 0 {
			return KindOK, ""
		}
		if p.after09 && (b[0] == '\t' || b[0] == '\f') {
			return KindInvalidURL, "invalid characters in url" // llhttp: still in the URL's states
		}
		if b[0] == '\r' {
			if n > 1 && b[1] != '\n' {
				return KindLFExpected, "expected LF after CR"
			}
			return KindOK, ""
		}
		var j int
		var cl uint8
		if p.hint.tag == hintValue && p.hint.pos <= n {
			j, cl = p.hint.pos, p.hint.st
		} else {
			j, _, _ = p.resume(hintName, 0, n)
			for j < n && isToken(b[j]) {
				j++
			}
			if j == n {
				p.hint = scanHint{tag: hintName, pos: j}
				return KindOK, ""
			}
			if j == 0 || b[j] != ':' {
				return KindInvalidHeader, "invalid header token"
			}
			cl = clNone
			if j == 14 && eqFoldLower(b[:j], "content-length") {
				// the checks of contentLength, in its order (llhttp's: at the colon)
				if p.flags&fTransferEncoding != 0 && p.lenient&LenientChunkedLength == 0 {
					return KindUnexpectedContentLength, "Content-Length with Transfer-Encoding"
				}
				if p.flags&fContentLength != 0 {
					return KindInvalidContentLength, "duplicate Content-Length"
				}
				cl = clLead
			}
			j++
		}
		for ; j < n; j++ {
			c := b[j]
			switch cl {
			case clLead, clDigits, clTrail:
				switch {
				case c >= '0' && c <= '9' && cl != clTrail:
					cl = clDigits
				case isOWS(c):
					if cl == clDigits {
						cl = clTrail
					}
				case c == '\r':
					cl = clDone
				default:
					return KindInvalidContentLength, "invalid character in Content-Length"
				}
			}
			if c == '\r' {
				if j+1 < n && b[j+1] != '\n' {
					return KindLFExpected, "expected LF after CR"
				}
				break // resume at the CR: its next byte is still to come
			}
			if ctab[c]&cValue == 0 {
				return KindInvalidHeader, "invalid header value char"
			}
		}
		// j is n, or the index of a CR ending b (its LF is still to come): resume there
		p.hint = scanHint{tag: hintValue, st: cl, pos: j}
	case stChunkSize:
		j, _, _ := p.resume(hintHex, 0, n)
		for j < n && ctab[b[j]]&cHex != 0 {
			j++
		}
		if j == n {
			p.hint = scanHint{tag: hintHex, pos: j}
			return KindOK, ""
		}
		if j == 0 || (b[j] != ';' && b[j] != '\r') {
			return KindInvalidChunkSize, "invalid character in chunk size"
		}
		if b[j] == ';' {
			// the extensions, checked as they come (resuming at p.hint)
			e, st := j+1, ceStart
			if p.hint.tag == hintExt && p.hint.pos > e && p.hint.pos <= n {
				e, st = p.hint.pos, p.hint.st
			}
			k := e + bytes.IndexByte(b[e:], '\r')
			if k < e {
				k = n
			}
			if st = chunkExt(b[e:k], st); st == ceBad || (k < n && !chunkExtEnds(st)) {
				return KindInvalidChunkSize, "invalid chunk extension"
			}
			if k == n {
				p.hint = scanHint{tag: hintExt, st: st, pos: n}
				return KindOK, ""
			}
			j = k
		}
		if b[j] == '\r' && j+1 < n && b[j+1] != '\n' {
			return KindLFExpected, "expected LF after chunk size"
		}
	}
	return KindOK, ""
}
