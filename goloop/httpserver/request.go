package httpserver

// request.go: Request, a request's head (parsed into one blob) and the state of its
// exchange that every protocol shares (exchange.go has the methods on it), and
// h1Exchange, its HTTP/1.1 protocol: the response's head and framing, written at the
// request's place among the pipelined responses of its connection.

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"unsafe"
)

// Request is one request of a connection (an HTTP/1.1 request, an HTTP/2 stream, a
// WebSocket handshake) and its exchange (Exchange, exchange.go). Its head is read-only
// once queued; the body, response and waiting state are shared by the connection's reader
// and the application's thread under the connection's lock. The application's side
// (Receive, Start, Send, Done, ...) is called from one thread at a time. The fields
// marked HTTP/1.1 are h1Exchange's (and the server's own answers').
type Request struct {
	c *Conn

	// Blob holds the head's byte strings, Ends their ends: header i's name (lower-cased)
	// is segment 2i and its value 2i+1; after the headers come the method, the raw path,
	// the query string (without '?') and the percent-decoded path.
	Blob  []byte
	Ends  []int32
	Major int
	Minor int
	x     protocol // what answers it: h1Exchange, *h2Stream or *WS (exchange.go)
	// Tag is the application's (the binding keeps its own state of the request there:
	// memory Go does not manage).
	Tag unsafe.Pointer
	// Proxy is what trusted proxy headers changed (nil: nothing; proxy.go).
	Proxy *Proxy
	t0    int64 // when the head was complete (metrics on)

	target     []byte
	head       bool // a HEAD request: the response has no body
	keepAlive  bool // HTTP/1.1
	headDone   bool // the head is complete (OnHeadersComplete)
	dispatched bool // queued for the application
	hasBody    bool // the head announced a body (a Content-Length over 0, or chunked)
	own        bool // answered by the server itself (limit reached, shutting down)
	ws         *WS  // a WebSocket handshake (ws.go; also its Request.x)

	// under c.mu
	body      []byte // unread body
	bodyDone  bool   // the whole body arrived
	bodyTaken bool   // the last body part was handed over
	waitRecv  bool   // the application waits for body or disconnect: EvWake on change
	waitSend  bool   // the application waits for the output to drain: EvWake then
	lost      bool   // the client went away
	woken     bool   // an EvWake was queued for it (it may still be in the queue: not reused)
	released  bool   // the application's side let go of it (FinishReleased): reusable

	// the response, under c.mu
	started  bool
	headSent bool
	done     bool
	appDone  bool
	status   int
	reason   []byte // HTTP/1.1: the status line's phrase if not the standard one (StartReason)
	hdr      []byte // the application's header lines ("name: value\r\n" each)
	noBody   bool
	chunked  bool  // HTTP/1.1
	clen     int64 // declared or computed Content-Length, -1 if none
	sent     int64
	out      []byte // HTTP/1.1: output held while an earlier request's response is incomplete

	// spec.go: 100-continue, trailers; files (c.mu)
	expect100  bool      // Expect: 100-continue, no 100 sent yet and no body received
	teTrailers bool      // TE: trailers
	trailers   bool      // the response announced trailers
	keepTr     bool      // ... and they are sent (else dropped)
	bodyEnd    bool      // the final body part was sent
	trDone     bool      // the final trailers message was received
	trHdr      []byte    // trailer lines received so far
	files      []fileSeg // HTTP/1.1: files in out (pathsend)
	ownStatus  int       // answered by the server with this status (426) instead of the app

	// Room for a small request's Blob and Ends, and its target (then the response's
	// header lines): one allocation per request instead of five (newRequest).
	inl     [inlBlob + inlTail]byte
	inlEnds [12]int32
}

const inlBlob, inlTail = 160, 128

// newRequest is a request of c whose head the parser is about to deliver.
func newRequest(c *Conn) *Request {
	var r *Request
	if c.spare.Load() != nil { // (set only where reuse is allowed: reuseLocked)
		r = c.spare.Swap(nil)
	}
	if r != nil {
		*r = Request{c: c, clen: -1}
	} else {
		r = &Request{c: c, clen: -1}
	}
	r.x = h1Exchange{r}
	r.Blob = r.inl[:0:inlBlob] // a larger head grows out of it (append copies)
	r.Ends = r.inlEnds[:0]
	r.target = r.inl[inlBlob:inlBlob]
	return r
}

// Conn returns the request's connection.
func (r *Request) Conn() *Conn { return r.c }

func (r *Request) seg(i int) []byte {
	start := int32(0)
	if i > 0 {
		start = r.Ends[i-1]
	}
	return r.Blob[start:r.Ends[i]]
}

// NumHeaders is the number of header lines.
func (r *Request) NumHeaders() int { return (len(r.Ends) - 4) / 2 }

// Header returns header i: its lower-cased name and its value.
func (r *Request) Header(i int) (name, value []byte) { return r.seg(2 * i), r.seg(2*i + 1) }

func (r *Request) Method() []byte  { return r.seg(len(r.Ends) - 4) }
func (r *Request) RawPath() []byte { return r.seg(len(r.Ends) - 3) }
func (r *Request) Query() []byte   { return r.seg(len(r.Ends) - 2) }

// Path is the percent-decoded path (bytes: UTF-8 decoding is the caller's).
func (r *Request) Path() []byte { return r.seg(len(r.Ends) - 1) }

// KeepAlive tells whether the connection stays open after this request's response.
func (r *Request) KeepAlive() bool { return r.keepAlive }

// finishHead completes Blob and Ends with the method, the raw path, the query and the path.
func (r *Request) finishHead(method []byte) {
	t := r.target
	if len(t) > 0 && t[0] != '/' && t[0] != '*' { // absolute-form: scheme://authority/path
		if i := bytes.Index(t, []byte("://")); i >= 0 {
			rest := t[i+3:]
			auth := rest
			if j := bytes.IndexAny(rest, "/?"); j >= 0 {
				t, auth = rest[j:], rest[:j]
			} else {
				t = nil
			}
			if len(t) == 0 || t[0] == '?' {
				t = append([]byte("/"), t...)
			}
			if k := bytes.LastIndexByte(auth, '@'); k >= 0 {
				auth = auth[k+1:] // userinfo is not part of Host (RFC 9110 7.2)
			}
			r.setHost(auth)
		}
	}
	path, query := t, []byte(nil)
	if i := bytes.IndexByte(t, '?'); i >= 0 {
		path, query = t[:i], t[i+1:]
	}
	blob := append(r.Blob, method...)
	e0 := int32(len(blob))
	blob = append(blob, path...)
	e1 := int32(len(blob))
	blob = append(blob, query...)
	e2 := int32(len(blob))
	blob = appendUnquote(blob, path)
	r.Blob = blob
	r.Ends = append(r.Ends, e0, e1, e2, int32(len(blob)))
	r.target = nil
	if r.hdr == nil {
		r.hdr = r.inl[inlBlob:inlBlob] // the target's room is the response's header lines'
	}
}

// setHost makes the request's Host header host: a server that receives an absolute-form
// target MUST ignore Host and use the target's authority (RFC 9112 3.2.2). It replaces the
// first Host header's value (or adds one), before the method and the path are appended;
// only absolute-form targets, which are rare, come here.
func (r *Request) setHost(host []byte) {
	n := len(r.Ends) / 2
	for i := 0; i < n; i++ {
		if name, _ := r.Header(i); string(name) == "host" {
			start, end := r.Ends[2*i], r.Ends[2*i+1]
			tail := append(append([]byte(nil), host...), r.Blob[end:]...)
			r.Blob = append(r.Blob[:start], tail...)
			d := int32(len(host)) - (end - start)
			for j := 2*i + 1; j < len(r.Ends); j++ {
				r.Ends[j] += d
			}
			return
		}
	}
	r.Blob = append(r.Blob, "host"...)
	r.Ends = append(r.Ends, int32(len(r.Blob)))
	r.Blob = append(r.Blob, host...)
	r.Ends = append(r.Ends, int32(len(r.Blob)))
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// appendUnquote appends s with its %XX escapes decoded (an invalid escape stays as it is,
// as urllib.parse.unquote leaves it).
func appendUnquote(dst, s []byte) []byte {
	for {
		i := bytes.IndexByte(s, '%')
		if i < 0 {
			return append(dst, s...) // (a path without escapes: one copy)
		}
		dst = append(dst, s[:i]...)
		s = s[i:]
		if len(s) > 2 {
			hi, ok1 := unhex(s[1])
			lo, ok2 := unhex(s[2])
			if ok1 && ok2 {
				dst = append(dst, hi<<4|lo)
				s = s[3:]
				continue
			}
		}
		dst = append(dst, '%')
		s = s[1:]
	}
}

// h1Exchange is the HTTP/1.1 protocol of a Request (Request.x): the response's framing
// (content-length, chunked, close-delimited) into the connection's output, in request
// order behind the pipelined responses before it (Request.out until it is the first in
// flight). A WebSocket handshake request answers its HTTP responses through it too. One
// pointer: stored in the interface without an allocation.
type h1Exchange struct{ *Request }

func (x h1Exchange) tookBodyLocked(int) bool {
	x.c.roomLocked()
	return false
}

// continueLocked writes "100 Continue" at the request's place in the output.
func (x h1Exchange) continueLocked() {
	r, c := x.Request, x.c
	if r.firstLocked() {
		c.out = append(c.out, continue100...)
		c.dirtyLocked()
	} else {
		r.out = append(r.out, continue100...)
	}
}

// firstLocked: r is the first request in flight: its output goes to the connection's.
func (r *Request) firstLocked() bool {
	return len(r.c.inflight) > 0 && r.c.inflight[0] == r
}

// send appends part to the response's output; a large enough body on the first request in
// flight is held (loop mode) or borrowed for the call (TLS) instead of copied.
func (x h1Exchange) send(part bodyPart, more bool, notStarted error) (flags int, held bool, err error) {
	r, c := x.Request, x.c
	c.mu.Lock()
	defer c.mu.Unlock()
	borrowed := false
	rel := part.rel
	if err = r.partErrLocked(notStarted); err == nil {
		borrowed, err = x.appendPartLocked(&part, more)
	}
	if part.f != nil { // not queued
		part.f.Close()
	}
	short := err == ErrTooShort // queued, and not complete: Done cuts it
	if err != nil && !short {
		return 0, false, err
	}
	held = rel != nil && part.rel == nil
	if !more && !r.keepTr && !short {
		r.completeLocked()
	} else {
		c.dirtyLocked()
	}
	if borrowed {
		// Written now (or copied): never kept past this call. c.mu has been held since
		// canBorrowLocked saw no writer, so no other flush or writer touches the body.
		c.writeOutLocked()
		c.unholdLocked() // (a closed connection's loop ends early: nothing borrowed is left)
	}
	if c.outFullLocked() && !r.done {
		if !c.writing {
			c.mu.Unlock()
			c.flush()
			c.mu.Lock()
		}
		if c.outFullLocked() && !r.lost {
			r.waitSend = true
			flags |= SendPaused
		}
	}
	if short {
		return flags, held, ErrTooShort
	}
	return flags, held, nil
}

// appendPartLocked frames part into the response's output (c.mu held); a queued file is
// taken from part (part.f = nil).
func (x h1Exchange) appendPartLocked(part *bodyPart, more bool) (borrowed bool, err error) {
	r, c := x.Request, x.c
	var w []byte // where this part goes
	head := r.firstLocked()
	if head {
		w = c.out
	} else {
		w = r.out
	}
	n := part.n
	if part.f == nil {
		n = int64(len(part.b))
	}
	if !r.headSent {
		w = r.appendHead(w, int(n), more)
		r.headSent = true
	}
	if n > 0 && !r.noBody && r.clen >= 0 && r.sent+n > r.clen {
		if !part.clamp {
			r.restore(w, head)
			return false, ErrTooLong
		}
		n = r.clen - r.sent
	}
	if n > 0 && !r.noBody {
		if r.chunked {
			w = strconv.AppendInt(w, n, 16)
			w = append(w, "\r\n"...)
		}
		if part.f != nil {
			seg := fileSeg{at: len(w), f: part.f, off: part.off, n: n}
			if head {
				c.files = append(c.files, seg)
			} else {
				r.files = append(r.files, seg)
			}
			part.f = nil
		} else if part.rel != nil && head && c.lp != nil && n >= HoldMin && n == int64(len(part.b)) {
			c.files = append(c.files, fileSeg{at: len(w), n: n, b: part.b, rel: part.rel})
			c.heldN += int(n)
			part.rel = nil // held: released by the connection
		} else if part.rel != nil && head && n >= HoldMin && n == int64(len(part.b)) && c.canBorrowLocked() {
			// TLS: borrowed for the length of this call, whose flush encrypts it straight
			// from the caller's memory (send; what the socket does not take is copied)
			c.files = append(c.files, fileSeg{at: len(w), n: n, b: part.b})
			c.heldN += int(n)
			borrowed = true
		} else {
			w = append(w, part.b[:n]...)
		}
		if r.chunked {
			w = append(w, "\r\n"...)
		}
		r.sent += n
	}
	if !more {
		r.bodyEnd = true
		if r.chunked && !r.noBody && !r.keepTr { // with trailers: SendTrailers ends it
			w = append(w, "0\r\n\r\n"...)
		}
		if r.clen >= 0 && r.sent < r.clen && !r.noBody {
			// the framing is broken: close after what was sent; the sender gets
			// ErrTooShort (uvicorn's RuntimeError), the response is cut when it returns
			r.keepAlive = false
			err = ErrTooShort
		}
	}
	r.restore(w, head)
	return borrowed, err
}

// completeWithLocked answers with body as the whole of it.
func (x h1Exchange) completeWithLocked(body []byte) {
	x.appendPartLocked(&bodyPart{b: body}, false)
	x.completeLocked()
}

// trailersLocked ends the chunked body with the trailer section.
func (x h1Exchange) trailersLocked() error {
	r := x.Request
	head := r.firstLocked()
	w := r.out
	if head {
		w = x.c.out
	}
	w = append(w, "0\r\n"...)
	w = append(w, r.trHdr...)
	w = append(w, "\r\n"...)
	r.trHdr = nil
	r.restore(w, head)
	r.completeLocked()
	return nil
}

// readyLocked: the output is under its limits, or no writer is at work (the next send's
// flush writes it).
func (x h1Exchange) readyLocked() bool {
	c := x.c
	return !(c.outFullLocked() && c.writing)
}

// cutLocked: the response ends with what was sent, and the connection after it (its
// framing is incomplete).
func (x h1Exchange) cutLocked(bool) {
	x.keepAlive = false
	x.completeLocked()
}

// closeAfterLocked: the application raised after its response was complete. Its state
// for this connection is unknown, so the connection ends after that response, as uvicorn
// closes it (connection: close is too late: the head is out).
func (x h1Exchange) closeAfterLocked() {
	c := x.c
	for _, q := range c.inflight {
		if q == x.Request { // behind an earlier response: advanceLocked ends the connection after it
			x.keepAlive = false
			return
		}
	}
	if c.closing || c.closed {
		return
	}
	c.endAfterLocked()
	if !c.busyLocked() {
		c.closeLocked()
	}
}

func (r *Request) restore(w []byte, head bool) {
	if head {
		r.c.out = w
	} else {
		r.out = w
	}
}

// completeLocked: the response is complete.
func (r *Request) completeLocked() {
	c := r.c
	r.done = true
	if m := c.s.metrics; m != nil && r.dispatched {
		m.observe(r)
	}
	if r.waitRecv {
		c.wakeLocked(r, nil)
	}
	if r.firstLocked() {
		c.advanceLocked()
	}
	c.dirtyLocked()
	if c.idleOutLocked() && !c.writing {
		c.drainedLocked()
	}
}

// reuseLocked makes r, done and finished by the application (Finish), its connection's
// spare for its next request (Config.ReuseRequests, or FinishReleased; c.mu held) when nothing of the engine
// refers to it any more: a loop-mode HTTP/1.1 request whose whole body was read (the reader
// is past it), for which no EvWake was queued, not waiting behind an earlier response, not
// a WebSocket handshake, on a connection that stays open and did not switch protocols.
func (r *Request) reuseLocked() {
	c := r.c
	if !(c.s.cfg.ReuseRequests || r.released) || c.lp == nil || !r.bodyDone || r.woken || r.ws != nil || c.next != nil ||
		!r.keepAlive || c.closing || c.closed {
		return
	}
	for _, q := range c.inflight {
		if q == r {
			return
		}
	}
	if c.headOf == r { // the deadline's clocks know requests by pointer (deadline.go)
		c.headOf = nil
	}
	if c.bodyOf == r {
		c.bodyOf = nil
	}
	c.spare.Store(r)
}

// appendHead appends the status line and headers of the response, deciding its framing.
func (r *Request) appendHead(w []byte, n int, more bool) []byte {
	c := r.c
	s := c.s
	if !r.bodyDone {
		r.keepAlive = false // the rest of the body would have to be read first
	}
	if c.closing {
		r.keepAlive = false
	}
	if r.reason != nil {
		w = append(w, "HTTP/1.1 "...)
		w = strconv.AppendInt(w, int64(r.status), 10)
		w = append(w, ' ')
		w = append(w, r.reason...)
		w = append(w, "\r\n"...)
	} else {
		w = append(w, statusLine(r.status)...)
	}
	w = append(w, s.extra...)
	if s.cfg.DateHeader {
		w = append(w, dateHeader()...)
	}
	w = append(w, r.hdr...)
	r.noBody = r.head || r.status < 200 || r.status == 204 || r.status == 304
	f := scanFraming(r.hdr)
	r.clen = f.clen
	hasTE, hasConn := f.hasTE, f.hasConn
	if hasTE {
		r.chunked = f.chunked
	}
	if f.close {
		r.keepAlive = false
	}
	switch {
	case r.clen >= 0 || hasTE || r.noBody:
		if hasTE && !r.chunked {
			r.keepAlive = false
		}
	case r.chunkedForTrailers():
		w = append(w, "transfer-encoding: chunked\r\n"...)
		r.chunked = true
	case !more:
		w = append(w, "content-length: "...)
		w = strconv.AppendInt(w, int64(n), 10)
		w = append(w, "\r\n"...)
		r.clen = int64(n)
	case r.Minor >= 1 || r.Major > 1:
		w = append(w, "transfer-encoding: chunked\r\n"...)
		r.chunked = true
	default:
		r.keepAlive = false // HTTP/1.0: the end of the body is the end of the connection
	}
	r.keepTr = r.trailers && r.chunked && r.teTrailers && !r.noBody
	if !hasConn {
		if !r.keepAlive {
			w = append(w, "connection: close\r\n"...)
		} else if r.Major == 1 && r.Minor == 0 {
			w = append(w, "connection: keep-alive\r\n"...)
		}
	}
	return append(w, "\r\n"...)
}

// buildOwn makes the response of the server's own answer (400, 431, 503) in r.out.
func (r *Request) buildOwn(code int, text string) {
	r.status = code
	r.started, r.bodyDone = true, true
	if code == 426 {
		r.hdr = append(r.hdr, "sec-websocket-version: 13\r\nupgrade: websocket\r\n"...)
	}
	r.hdr = append(r.hdr, "content-type: text/plain; charset=utf-8\r\n"...)
	r.out = r.appendHead(r.out, len(text), false)
	r.out = append(r.out, text...)
	r.headSent = true
}

func scanHeaders(b []byte, f func(name, value []byte)) {
	for len(b) > 0 {
		var name, raw []byte
		name, raw, b = nextHeader(b)
		if name != nil {
			f(name, bytes.TrimSpace(raw))
		}
	}
}

// nextHeader splits the first "name: value" line off header lines b: its name (nil when the
// line has no ':' after a first byte), its value untrimmed (with the line's '\r'), and the
// lines after it.
func nextHeader(b []byte) (name, raw, rest []byte) {
	line := b
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		line, rest = b[:i], b[i+1:]
	}
	if j := bytes.IndexByte(line, ':'); j > 0 {
		name, raw = line[:j], line[j+1:]
	}
	return name, raw, rest
}

// framing is what a response's header lines say of its framing (scanFraming).
type framing struct {
	clen                           int64 // the last valid Content-Length, -1 if none
	hasTE, chunked, hasConn, close bool  // Transfer-Encoding (the last ends with chunked), Connection (one has close)
}

// scanFraming finds the framing headers among header lines hdr ("name: value\r\n" each; a
// line's name ends at its first ':'). Only their values are trimmed and parsed (a name of
// 10, 14 or 17 bytes): a line is one IndexByte for its end and three compares for where a
// ':' would end such a name; the ':' is looked for only in a line that may have one there.
func scanFraming(hdr []byte) framing {
	f := framing{clen: -1}
	for b := hdr; len(b) > 0; {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		j := 0
		switch {
		case len(line) > 14 && line[14] == ':':
			j = 14
		case len(line) > 10 && line[10] == ':':
			j = 10
		case len(line) > 17 && line[17] == ':':
			j = 17
		default:
			continue
		}
		if bytes.IndexByte(line[:j], ':') >= 0 {
			// the name ends at an earlier ':' (a line may have one at two of these places)
			j = bytes.IndexByte(line, ':')
			if j != 10 && j != 14 && j != 17 {
				continue
			}
		}
		name, raw := line[:j], line[j+1:]
		switch {
		case j == 14 && fieldContentLength.equal(name):
			if v, ok := parseLength(raw); ok {
				f.clen = v
			}
		case j == 17 && fieldTransferEncoding.equal(name):
			f.hasTE = true
			f.chunked = bytes.HasSuffix(bytes.ToLower(bytes.TrimSpace(raw)), []byte("chunked"))
		case j == 10 && fieldConnection.equal(name):
			f.hasConn = true
			if bytes.Contains(bytes.ToLower(bytes.TrimSpace(raw)), []byte("close")) {
				f.close = true
			}
		}
	}
	return f
}

// parseLength is a content-length value's: strconv.ParseInt of raw with its white space
// trimmed (bytes.TrimSpace, the line's '\r' with it), and whether it is one (>= 0). Its
// usual form (ASCII spaces, up to 18 digits, ASCII spaces) is read here; anything else as
// ParseInt reads it.
func parseLength(raw []byte) (int64, bool) {
	i := 0
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t') {
		i++
	}
	d, v := i, int64(0)
	for ; i < len(raw); i++ {
		c := raw[i] - '0'
		if c > 9 {
			break
		}
		v = v*10 + int64(c) // (more than 18 digits may overflow: strconv reads those)
	}
	if n := i - d; n > 0 && n <= 18 {
		for i < len(raw) && asciiSpace(raw[i]) {
			i++
		}
		if i == len(raw) {
			return v, true
		}
	}
	v, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	return v, err == nil && v >= 0
}

func asciiSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'
}

// foldName is a lower-case field name made of letters and '-' (8 to 24 bytes), compared
// with a name case-insensitively eight bytes at a time (the response's framing headers).
type foldName struct {
	w [4]uint64 // the name's words at 0, 8, 16 (as many as whole) and at len-8
	n int
}

func newFoldName(lower string) foldName {
	f := foldName{n: len(lower)}
	k := 0
	for i := 0; i+8 <= len(lower); i += 8 {
		f.w[k] = leWord(lower[i:])
		k++
	}
	f.w[3] = leWord(lower[len(lower)-8:])
	return f
}

func leWord(s string) uint64 {
	var x uint64
	for i := 7; i >= 0; i-- {
		x = x<<8 | uint64(s[i])
	}
	return x
}

var (
	fieldContentLength    = newFoldName("content-length")
	fieldTransferEncoding = newFoldName("transfer-encoding")
	fieldConnection       = newFoldName("connection")
)

// equal is equalFold(b, the name) for len(b) == f.n: each byte of b equals the name's, or
// is its letter's upper case. x|0x20 is the name's byte y for x == y and for x == y-0x20,
// which is the upper case of a letter (it has 0x40) and a control character for '-'.
func (f *foldName) equal(b []byte) bool {
	if len(b) != f.n {
		return false
	}
	eq := func(x, y uint64) bool {
		const sp = 0x2020202020202020
		return x|sp == y && ((x^y)<<1)&^x == 0
	}
	k := 0
	for i := 0; i+8 <= len(b); i += 8 {
		if !eq(binary.LittleEndian.Uint64(b[i:]), f.w[k]) {
			return false
		}
		k++
	}
	return eq(binary.LittleEndian.Uint64(b[len(b)-8:]), f.w[3])
}

func equalFold(b []byte, lower string) bool {
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
