package asgi

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"unsafe"
)

// Request is one request of a connection. Its head is read-only once queued; the body,
// response and waiting state are shared by the connection's goroutine and the
// application's thread under the connection's lock. The application's side (Receive,
// Start, Send, AppDone, ...) is called from one thread at a time.
type Request struct {
	c *Conn

	// Blob holds the head's byte strings, Ends their ends: header i's name (lower-cased)
	// is segment 2i and its value 2i+1; after the headers come the method, the raw path,
	// the query string (without '?') and the percent-decoded path.
	Blob  []byte
	Ends  []int32
	Major int
	Minor int
	h2    *h2Stream // an HTTP/2 stream's (h2.go); nil for HTTP/1.1
	// Tag is the application's (the binding keeps its own state of the request there:
	// memory Go does not manage).
	Tag unsafe.Pointer
	// Proxy is what trusted proxy headers changed (nil: nothing; proxy.go).
	Proxy *Proxy
	t0    int64 // when the head was complete (metrics on)

	target     []byte
	head       bool // a HEAD request: the response has no body
	keepAlive  bool
	dispatched bool // queued for the application
	own        bool // answered by the server itself (limit reached, shutting down)
	ws         *WS  // a WebSocket handshake (ws.go)

	// under c.mu
	body      []byte // unread body
	bodyDone  bool   // the whole body arrived
	bodyTaken bool   // the last body part was handed over
	waitRecv  bool   // the application waits for body or disconnect: EvWake on change
	waitSend  bool   // the application waits for the output to drain: EvWake then
	lost      bool   // the client went away

	// the response, under c.mu
	started  bool
	headSent bool
	done     bool
	appDone  bool
	status   int
	hdr      []byte // the application's header lines ("name: value\r\n" each)
	noBody   bool
	chunked  bool
	clen     int64 // declared or computed Content-Length, -1 if none
	sent     int64
	out      []byte // output held while an earlier request's response is incomplete

	// spec.go: 100-continue, trailers, files (c.mu)
	expect100  bool      // Expect: 100-continue, no 100 sent yet and no body received
	teTrailers bool      // TE: trailers
	trailers   bool      // the response announced trailers
	keepTr     bool      // ... and they are sent (else dropped)
	bodyEnd    bool      // the final body part was sent
	trDone     bool      // the final trailers message was received
	trHdr      []byte    // trailer lines received so far
	files      []fileSeg // files in out (pathsend)
	ownStatus  int       // answered by the server with this status (426) instead of the app

	// Room for a small request's Blob and Ends, and its target (then the response's
	// header lines): one allocation per request instead of five (newRequest).
	inl     [inlBlob + inlTail]byte
	inlEnds [12]int32
}

const inlBlob, inlTail = 160, 128

// newRequest is a request of c whose head the parser is about to deliver.
func newRequest(c *Conn) *Request {
	r := &Request{c: c, clen: -1}
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
	r.Blob = append(r.Blob, method...)
	r.Ends = append(r.Ends, int32(len(r.Blob)))
	t := r.target
	if len(t) > 0 && t[0] != '/' && t[0] != '*' { // absolute-form: scheme://authority/path
		if i := bytes.Index(t, []byte("://")); i >= 0 {
			rest := t[i+3:]
			if j := bytes.IndexAny(rest, "/?"); j >= 0 {
				t = rest[j:]
			} else {
				t = nil
			}
			if len(t) == 0 || t[0] == '?' {
				t = append([]byte("/"), t...)
			}
		}
	}
	path, query := t, []byte(nil)
	if i := bytes.IndexByte(t, '?'); i >= 0 {
		path, query = t[:i], t[i+1:]
	}
	r.Blob = append(r.Blob, path...)
	r.Ends = append(r.Ends, int32(len(r.Blob)))
	r.Blob = append(r.Blob, query...)
	r.Ends = append(r.Ends, int32(len(r.Blob)))
	r.Blob = appendUnquote(r.Blob, path)
	r.Ends = append(r.Ends, int32(len(r.Blob)))
	r.target = nil
	if r.hdr == nil {
		r.hdr = r.inl[inlBlob:inlBlob] // the target's room is the response's header lines'
	}
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
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if ok1 && ok2 {
				dst = append(dst, hi<<4|lo)
				i += 2
				continue
			}
		}
		dst = append(dst, s[i])
	}
	return dst
}

// RecvState is what Receive found.
type RecvState uint8

const (
	RecvWait       RecvState = iota // nothing yet: an EvWake follows when something happens
	RecvBody                        // a body part, more to come
	RecvLast                        // the last body part (perhaps empty)
	RecvDisconnect                  // the client went away, or the response is complete
)

// Receive takes the body received so far (ASGI's receive()).
func (r *Request) Receive() ([]byte, RecvState) {
	if r.h2 != nil {
		return r.h2Receive()
	}
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.lost {
		return nil, RecvDisconnect
	}
	if len(r.body) > 0 || (r.bodyDone && !r.bodyTaken) {
		b := r.body
		r.body = nil
		c.roomLocked()
		if r.bodyDone {
			r.bodyTaken = true
			return b, RecvLast
		}
		return b, RecvBody
	}
	if r.bodyTaken && r.done {
		return nil, RecvDisconnect
	}
	r.waitRecv = true
	r.continueLocked()
	return nil, RecvWait
}

// Errors of Start and Send (the binding raises them as RuntimeError, ErrDisconnected as
// an OSError).
var (
	ErrStarted    = errors.New("Unexpected ASGI message 'http.response.start' sent, after response already started.")
	ErrNotStarted = errors.New("Expected ASGI message 'http.response.start', but got 'http.response.body'.")
	ErrCompleted  = errors.New("Unexpected ASGI message 'http.response.body' sent, after response already completed.")
	ErrTooLong    = errors.New("Response content longer than Content-Length")
	ErrStatus     = errors.New("ASGI 'http.response.start' status must be an integer from 100 to 999")
)

// Start records the response's status and header lines ("name: value\r\n" each, already
// validated). Nothing is written before the first body part.
func (r *Request) Start(status int, hdr []byte) error {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.started {
		return ErrStarted
	}
	if status < 100 || status > 999 {
		return ErrStatus
	}
	if r.lost {
		return ErrDisconnected
	}
	r.started = true
	r.status = status
	r.hdr = append(r.hdr[:0], hdr...)
	return nil
}

// Send flags.
const (
	SendPaused = 1 << iota // the output is over its limit: wait for EvWake (SendReady)
)

// Send adds a body part (ASGI's http.response.body); more=false completes the response.
// body is copied.
func (r *Request) Send(body []byte, more bool) (flags int, err error) {
	flags, _, err = r.SendHeld(body, more, nil)
	return flags, err
}

// HoldMin is the smallest body SendHeld may hold (or borrow) instead of copying.
const HoldMin = 16 * 1024

// SendHeld is Send that may keep body instead of copying it (held: a loop-mode connection
// answering its first request in flight, a body of HoldMin bytes or more, rel not nil):
// the caller keeps body's memory valid and unchanged until the engine calls rel, once,
// from the thread that runs the loop driver, after the kernel took the bytes or the
// connection was lost (or from a hand-off to the goroutine driver, which copies them).
// Not held: body was copied, or, on a TLS connection, encrypted from body before
// SendHeld returned (its flush runs then; the socket's leftovers are copied), and rel is
// never called.
func (r *Request) SendHeld(body []byte, more bool, rel func()) (flags int, held bool, err error) {
	if r.h2 != nil {
		flags, err = r.h2Send(body, more, ErrNotStarted)
		return flags, false, err
	}
	part := bodyPart{b: body, rel: rel}
	flags, err = r.sendPart(&part, more, ErrNotStarted)
	return flags, rel != nil && part.rel == nil, err
}

// bodyPart is a response body part: bytes b, or n bytes of file f from offset off.
type bodyPart struct {
	b      []byte
	f      *os.File
	off, n int64
	clamp  bool   // a part longer than the declared content-length is cut (pathsend), not an error
	rel    func() // b may be held (SendHeld): taken from the part (nil) if it was
}

// sendPart appends part to the response's output (notStarted: the error if the response
// was not started). It owns part.f: the file is closed when sent, on error, or if unused.
func (r *Request) sendPart(part *bodyPart, more bool, notStarted error) (flags int, err error) {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	borrowed := false
	if err = r.partErrLocked(notStarted); err == nil {
		borrowed, err = r.appendPartLocked(part, more)
	}
	if part.f != nil { // not queued
		part.f.Close()
	}
	if err != nil {
		return 0, err
	}
	if !more && !r.keepTr {
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
	return flags, nil
}

// partErrLocked is why a body part cannot be sent now (nil: it can; notStarted: the error
// if the response was not started).
func (r *Request) partErrLocked(notStarted error) error {
	switch {
	case !r.started:
		return notStarted
	case r.done || r.bodyEnd:
		return ErrCompleted
	case r.lost || r.h2 != nil && r.c.h2 == nil:
		return ErrDisconnected
	}
	return nil
}

// appendPartLocked frames part into the response's output (c.mu held); a queued file is
// taken from part (part.f = nil).
func (r *Request) appendPartLocked(part *bodyPart, more bool) (borrowed bool, err error) {
	c := r.c
	var w []byte // where this part goes
	head := len(c.inflight) > 0 && c.inflight[0] == r
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
			// from the caller's memory (sendPart; what the socket does not take is copied)
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
			r.keepAlive = false // the framing is broken: close after what was sent
		}
	}
	r.restore(w, head)
	return borrowed, nil
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
	if len(c.inflight) > 0 && c.inflight[0] == r {
		c.advanceLocked()
	}
	c.dirtyLocked()
	if c.idleOutLocked() && !c.writing {
		c.drainedLocked()
	}
}

// SendReady tells whether a sender paused by SendPaused may go on (false: wait for the
// next EvWake); err is ErrDisconnected if the client went away meanwhile.
func (r *Request) SendReady() (bool, error) {
	if r.h2 != nil {
		return r.h2SendReady()
	}
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.lost {
		return true, ErrDisconnected
	}
	if c.outFullLocked() && c.writing {
		r.waitSend = true
		return false, nil
	}
	return true, nil
}

// Started tells whether the response was started; Status is its status.
func (r *Request) Started() bool { r.c.mu.Lock(); defer r.c.mu.Unlock(); return r.started }
func (r *Request) Status() int   { r.c.mu.Lock(); defer r.c.mu.Unlock(); return r.status }

// AppDone: the application's call for this request returned (or failed). A response not
// started is answered 500; one started but incomplete ends the connection.
func (r *Request) AppDone() {
	if r.h2 != nil {
		r.h2AppDone()
		return
	}
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.appDone {
		return
	}
	r.appDone = true
	c.s.inflight.Add(-1)
	if r.lost {
		c.dropLocked(r)
		return
	}
	if r.done {
		return
	}
	if !r.started {
		r.keepAlive = r.keepAlive && !r.bodyPending()
		w := c.out
		head := len(c.inflight) > 0 && c.inflight[0] == r
		if !head {
			w = r.out
		}
		r.status = 500
		r.hdr = append(r.hdr[:0], "content-type: text/plain; charset=utf-8\r\n"...)
		r.started = true
		const text = "Internal Server Error"
		w = r.appendHead(w, len(text), false)
		w = append(w, text...)
		r.restore(w, head)
		r.completeLocked()
		return
	}
	r.keepAlive = false
	r.completeLocked()
}

// bodyPending: the request's body was not all received (the connection cannot be reused
// unless it is read to its end; it is closed instead).
func (r *Request) bodyPending() bool { return !r.bodyDone }

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
	w = append(w, statusLine(r.status)...)
	w = append(w, s.extra...)
	if s.cfg.DateHeader {
		w = append(w, dateHeader()...)
	}
	w = append(w, r.hdr...)
	r.clen = -1
	r.noBody = r.head || r.status < 200 || r.status == 204 || r.status == 304
	hasTE, hasConn := false, false
	scanHeaders(r.hdr, func(name, value []byte) {
		switch {
		case len(name) == 14 && equalFold(name, "content-length"):
			if v, err := strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64); err == nil && v >= 0 {
				r.clen = v
			}
		case len(name) == 17 && equalFold(name, "transfer-encoding"):
			hasTE = true
			r.chunked = bytes.HasSuffix(bytes.ToLower(bytes.TrimSpace(value)), []byte("chunked"))
		case len(name) == 10 && equalFold(name, "connection"):
			hasConn = true
			if bytes.Contains(bytes.ToLower(value), []byte("close")) {
				r.keepAlive = false
			}
		}
	})
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
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			i = len(b)
		}
		line := bytes.TrimRight(b[:i], "\r")
		if j := bytes.IndexByte(line, ':'); j > 0 {
			f(line[:j], bytes.TrimSpace(line[j+1:]))
		}
		if i == len(b) {
			break
		}
		b = b[i+1:]
	}
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
