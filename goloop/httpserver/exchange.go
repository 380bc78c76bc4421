package httpserver

// exchange.go: what the binding does with the exchange an EvRequest starts (Exchange,
// implemented by *Request), and the part of it every protocol shares: the checks and
// errors of ASGI's messages, taking the request body, the readiness of a paused sender,
// and the one finishing path (AppDone/Done: its guard, the in-flight count, a lost
// client, the 500 of an application that answered nothing). What differs per protocol is
// behind Request.x, a protocol: h1Exchange (HTTP/1.1 framing, request.go), *h2Stream
// (HTTP/2 frames and flow control, h2.go), *WS (a WebSocket handshake request and its
// session, ws.go; its HTTP answers are h1Exchange's). As Go's net/http has one
// ResponseWriter with an HTTP/1 and an HTTP/2 implementation.

import (
	"bytes"
	"errors"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Exchange is what the binding does with a request's exchange (an HTTP/1.1 request, an
// HTTP/2 stream, a WebSocket session's handshake request): *Request implements it.
// The application's side is called from one thread at a time.
type Exchange interface {
	// Receive takes the body received so far (http.request).
	Receive() ([]byte, RecvState)
	// Start records http.response.start; nothing is written before the first body part.
	Start(status int, hdr []byte) error
	// SendHeld is http.response.body, perhaps keeping body instead of copying it.
	SendHeld(body []byte, more bool, rel func()) (flags int, held bool, err error)
	// SendFile is http.response.pathsend, SendFD http.response.zerocopysend.
	SendFile(path string) (flags int, err error)
	SendFD(fd int, offset, count int64, more bool) (flags int, n int64, err error)
	// SetTrailers and SendTrailers: http.response.start's trailers, http.response.trailers.
	SetTrailers()
	SendTrailers(hdr []byte, more bool) error
	// SendReady: may a sender paused by SendPaused go on.
	SendReady() (bool, error)
	// Done: the application's call returned (failed: it raised).
	Done(failed bool)
	// Status is the response's status, 0 before it started (101: a WebSocket session).
	Status() int
}

var _ Exchange = (*Request)(nil)

// protocol is what an exchange's protocol does differently (c.mu held unless said).
type protocol interface {
	// tookBodyLocked: the application took n body bytes; true: flush now.
	tookBodyLocked(n int) bool
	// continueLocked writes the interim 100 (Continue) response.
	continueLocked()
	// send frames a body part (Send, SendFile, SendFD): it takes c.mu and checks
	// partErrLocked; it owns part.f (closed when sent, on error, or if unused); held:
	// part.b is kept until part.rel is called (SendHeld). The part is passed by value: a
	// pointer through the interface would make every SendHeld allocate it.
	send(part bodyPart, more bool, notStarted error) (flags int, held bool, err error)
	// completeWithLocked answers with body as the whole of it (the 500).
	completeWithLocked(body []byte)
	// trailersLocked sends r.trHdr, the final trailers, which complete the response.
	trailersLocked() error
	// readyLocked: a paused sender may go on (the output drained enough).
	readyLocked() bool
	// cutLocked: the application returned with its response started and incomplete.
	cutLocked(failed bool)
}

// RecvState is what Receive found.
type RecvState uint8

const (
	RecvWait       RecvState = iota // nothing yet: an EvWake follows when something happens
	RecvBody                        // a body part, more to come
	RecvLast                        // the last body part (perhaps empty)
	RecvDisconnect                  // the client went away, or the response is complete
)

// Errors of Start and Send (the binding raises them as RuntimeError, ErrDisconnected as
// an OSError).
var (
	ErrStarted    = errors.New("Unexpected ASGI message 'http.response.start' sent, after response already started.")
	ErrNotStarted = errors.New("Expected ASGI message 'http.response.start', but got 'http.response.body'.")
	ErrCompleted  = errors.New("Unexpected ASGI message 'http.response.body' sent, after response already completed.")
	ErrTooLong    = errors.New("Response content longer than Content-Length")
	ErrTooShort   = errors.New("Response content shorter than Content-Length")
	ErrStatus     = errors.New("ASGI 'http.response.start' status must be an integer from 100 to 999")
)

// Receive takes the body received so far (ASGI's receive()).
func (r *Request) Receive() ([]byte, RecvState) {
	b, _, st := r.receive(nil, false)
	return b, st
}

// ReceiveTo is Receive copying what it takes into dst: n bytes, up to len(dst); what did
// not fit stays for the next call (RecvBody, never RecvLast, then). The memory the body was
// read into stays with the server (bodyMem) for the next bodies read: no Release.
func (r *Request) ReceiveTo(dst []byte) (n int, st RecvState) {
	_, n, st = r.receive(dst, true)
	return n, st
}

// receive is Receive (to false: the body taken whole, returned) and ReceiveTo.
func (r *Request) receive(dst []byte, to bool) (b []byte, n int, st RecvState) {
	c := r.c
	c.mu.Lock()
	if r.lost {
		c.mu.Unlock()
		return nil, 0, RecvDisconnect
	}
	if len(r.body) > 0 || (r.bodyDone && !r.bodyTaken) {
		b, n, st = r.body, len(r.body), RecvBody
		switch {
		case !to:
			r.body = nil
		case n > len(dst): // (what did not fit moves to the front; nothing moves with no room)
			if n = copy(dst, b); n > 0 {
				r.body = r.body[:copy(r.body, r.body[n:])]
			}
			b = nil
		default:
			copy(dst, b)
			c.keepBodyMem(b)
			r.body, b = nil, nil
		}
		if r.body == nil && r.bodyDone {
			r.bodyTaken = true
			st = RecvLast
		}
		flush := r.x.tookBodyLocked(n)
		c.mu.Unlock()
		if flush {
			c.flush() // HTTP/2's window updates must leave now: the client may wait for them
		}
		return b, n, st
	}
	defer c.mu.Unlock()
	if r.bodyTaken && r.done {
		return nil, 0, RecvDisconnect
	}
	r.waitRecv = true
	r.continueLocked()
	return nil, 0, RecvWait
}

// Release gives back the memory of a body part Receive returned, once the caller copied
// it (b is not used after): the next bodies any connection reads reuse it (bodyMem), where
// each part would otherwise be new memory for the garbage collector.
func (r *Request) Release(b []byte) { r.c.keepBodyMem(b) }

// TakeWhole copies an HTTP/1.1 request's whole body into dst and takes it, as Receive
// would (its RecvLast), when all of it has arrived and fits: n its length, ok true. A head
// that announced no body has none: (0, true), with no lock taken. ok false, nothing taken:
// n > len(dst) when only room was missing (a dst of n bytes would do), else 0 (the body
// still arriving, the client gone, HTTP/2 or HTTP/3, whose taken bodies send flow control
// that must be flushed, or the connection's lock busy: TakeWhole never waits for it, so a
// caller may hold a lock of its own that the connection's holders take). The memory the
// body was read into is kept for a next one (bodyMem). Receive gives
// what was not taken; after a body taken whole it has nothing more to give (RecvWait, then
// RecvDisconnect once the response is complete).
func (r *Request) TakeWhole(dst []byte) (n int, ok bool) {
	if _, h1 := r.x.(h1Exchange); !h1 {
		return 0, false
	}
	if !r.hasBody {
		return 0, true
	}
	c := r.c
	if !c.mu.TryLock() {
		return 0, false
	}
	defer c.mu.Unlock()
	switch {
	case r.lost || !r.bodyDone || r.bodyTaken:
		return 0, false
	case len(r.body) > len(dst):
		return len(r.body), false
	}
	n = copy(dst, r.body)
	c.keepBodyMem(r.body)
	r.body, r.bodyTaken = nil, true
	r.x.tookBodyLocked(n)
	return n, true
}

// Start records the response's status and header lines ("name: value\r\n" each, already
// validated). Nothing is written before the first body part.
func (r *Request) Start(status int, hdr []byte) error { return r.StartReason(status, nil, hdr) }

// StartReason is Start with the status line's reason phrase (WSGI's status string has
// one, ASGI's message none): HTTP/1.1 sends it in place of the standard phrase (nil: the
// standard one); HTTP/2 has no reason phrase. The caller checked it (no CR, LF or other
// control character).
func (r *Request) StartReason(status int, reason, hdr []byte) error {
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
	if reason != nil && (status >= 600 || !bytes.Equal(reason, statusReason(status))) {
		r.reason = bytes.Clone(reason) // (an empty phrase is one too: "HTTP/1.1 200 ")
	}
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

// SendHeld is Send that may keep body instead of copying it (held: a loop-mode HTTP/1.1
// connection answering its first request in flight, a body of HoldMin bytes or more, rel
// not nil): the caller keeps body's memory valid and unchanged until the engine calls
// rel, once, from the thread that runs the loop driver, after the kernel took the bytes
// or the connection was lost (or from a hand-off to the goroutine driver, which copies
// them). Not held: body was copied, or, on a TLS connection, encrypted from body before
// SendHeld returned (its flush runs then; the socket's leftovers are copied), and rel is
// never called.
func (r *Request) SendHeld(body []byte, more bool, rel func()) (flags int, held bool, err error) {
	return r.x.send(bodyPart{b: body, rel: rel}, more, ErrNotStarted)
}

// SendHeldAnywhere is SendHeld whose rel may run on any goroutine (with c's lock held: it
// must only hand the release on, as the binding's queue for the loop thread does); then an
// HTTP/2 stream with nothing pending holds the body too, as its DATA frames leave when the
// client's window allows (a client that does not read would otherwise cost a copy of each
// stream's part).
func (r *Request) SendHeldAnywhere(body []byte, more bool, rel func()) (flags int, held bool, err error) {
	return r.x.send(bodyPart{b: body, rel: rel, relAny: true}, more, ErrNotStarted)
}

// H2 tells whether r is an HTTP/2 stream's.
func (r *Request) H2() bool {
	_, ok := r.x.(*h2Stream)
	return ok
}

// Holds tells whether SendHeld would hold a body of n bytes now instead of copying it
// (a loop-mode HTTP/1.1 connection answering r, its first request in flight). A sender
// that can keep its body alive for longer than a call (WSGI's bytes objects) holds it;
// otherwise it copies it in slices, waiting for the socket between them (the output's
// bound), rather than all at once.
func (r *Request) Holds(n int) bool {
	if _, ok := r.x.(h1Exchange); !ok || n < HoldMin {
		return false
	}
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lp != nil && r.firstLocked() && !r.lost
}

// bodyPart is a response body part: bytes b, or n bytes of file f from offset off.
type bodyPart struct {
	b      []byte
	f      *os.File
	off, n int64
	clamp  bool   // a part longer than the declared content-length is cut (pathsend), not an error
	rel    func() // b may be held (SendHeld): taken from the part (nil) if it was
	relAny bool   // rel may run on any goroutine (SendHeldAnywhere)
}

// refuseLocked is partErrLocked for part, whose file it closes when the part cannot be sent.
func (r *Request) refuseLocked(part bodyPart, notStarted error) error {
	err := r.partErrLocked(notStarted)
	if err != nil && part.f != nil {
		part.f.Close()
	}
	return err
}

// partErrLocked is why a body part cannot be sent now (nil: it can; notStarted: the error
// if the response was not started).
func (r *Request) partErrLocked(notStarted error) error {
	switch {
	case !r.started:
		return notStarted
	case r.done || r.bodyEnd:
		return ErrCompleted
	case r.lost:
		return ErrDisconnected
	}
	return nil
}

// SendFile sends the file at path as the rest of the response's body and completes it
// (http.response.pathsend). The application's thread does not read it: on HTTP/1.1 the
// writer goroutine copies it to the socket (sendfile(2) on plain TCP; reads and TLS
// writes otherwise); on HTTP/2 it is read a frame at a time into the connection's output
// as the flow-control windows and the output's bound (WriteBuffer) allow.
func (r *Request) SendFile(path string) (flags int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = errors.New(path + " is not a regular file")
	}
	if err != nil {
		f.Close()
		return 0, err
	}
	flags, _, err = r.x.send(bodyPart{f: f, n: fi.Size(), clamp: true}, false, ErrPathsend)
	return flags, err
}

// SendFD sends count bytes (-1: up to the end) of the regular file open as fd, from offset
// (-1: from its current position, which then moves past them, as sendfile(2) without an
// offset does), as the response's next body part (http.response.zerocopysend). fd is
// duplicated: the application may close its file once this returns. The part is sent
// from an explicit offset (sendfile(2) by the writer goroutine on HTTP/1.1, reads a frame
// at a time as the windows allow on HTTP/2), so the position the application sees moves
// only here. n is the part's length.
func (r *Request) SendFD(fd int, offset, count int64, more bool) (flags int, n int64, err error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return 0, 0, os.NewSyscallError("fstat", err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return 0, 0, errors.New("http.response.zerocopysend needs a regular file")
	}
	pos := offset
	if pos < 0 {
		if pos, err = syscall.Seek(fd, 0, io.SeekCurrent); err != nil {
			return 0, 0, os.NewSyscallError("lseek", err)
		}
	}
	n = max(0, st.Size-pos)
	if count >= 0 {
		n = min(n, count)
	}
	var f *os.File
	if n > 0 {
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return 0, 0, os.NewSyscallError("fcntl", err)
		}
		f = os.NewFile(uintptr(dup), "")
	}
	flags, _, err = r.x.send(bodyPart{f: f, off: pos, n: n}, more, ErrZeroCopy)
	return flags, n, movePos(fd, offset, pos+n, err)
}

// movePos: a part sent without an offset moves the file position past it (err: not sent).
func movePos(fd int, offset, to int64, err error) error {
	if err == nil && offset < 0 {
		if _, serr := syscall.Seek(fd, to, io.SeekStart); serr != nil {
			return os.NewSyscallError("lseek", serr)
		}
	}
	return err
}

// SetTrailers: the response's http.response.start had trailers: True (called after Start).
func (r *Request) SetTrailers() {
	r.c.mu.Lock()
	if r.started && !r.headSent {
		r.trailers = true
	}
	r.c.mu.Unlock()
}

// SendTrailers adds trailer lines ("name: value\r\n" each) after the final body part
// (http.response.trailers); more=false completes the response. On HTTP/1.1 they are sent
// only if the request had TE: trailers (and the response is chunked); else dropped.
func (r *Request) SendTrailers(hdr []byte, more bool) error {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !r.trailers:
		return ErrNoTrailers
	case !r.bodyEnd:
		return ErrTrailersEarly
	case r.trDone:
		return ErrTrailersDone
	case r.lost:
		return ErrDisconnected
	}
	r.trDone = !more
	if !r.keepTr {
		return nil // dropped: the response completed with its body
	}
	r.trHdr = append(r.trHdr, hdr...)
	if more {
		return nil
	}
	return r.x.trailersLocked()
}

// SendReady tells whether a sender paused by SendPaused may go on (false: wait for the
// next EvWake); err is ErrDisconnected if the client went away meanwhile.
func (r *Request) SendReady() (bool, error) {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.lost {
		return true, ErrDisconnected
	}
	if !r.x.readyLocked() {
		r.waitSend = true
		return false, nil
	}
	return true, nil
}

// Started tells whether the response was started.
func (r *Request) Started() bool { r.c.mu.Lock(); defer r.c.mu.Unlock(); return r.started }

// Status is the response's status: 0 before it started (101: a WebSocket session was
// accepted).
func (r *Request) Status() int {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	if !r.started {
		return 0
	}
	return r.status
}

// AppDone is Done(false).
func (r *Request) AppDone() { r.Done(false) }

// What Finish found when the application's call returned: what the server logs of it.
const (
	FinishOK         = iota // nothing to report (or done already)
	FinishLost              // the client went away: an error the application raised is its disconnect
	FinishNotStarted        // returned without starting a response: answered 500
	FinishIncomplete        // returned with its response started and incomplete: cut
)

// Done: the application's call for this exchange returned (failed: it raised). Once per
// exchange, whatever its protocol: the request leaves the in-flight count; a response not
// started is answered 500 and on HTTP/1.1 the connection closes after it, as uvicorn's (the
// application's state for that connection is unknown; so too after a complete response when
// failed: HTTP/2's stream is done then, and its connection stays); one started but incomplete is cut
// (HTTP/1.1: the connection ends after it; HTTP/2: the stream is reset; an accepted
// WebSocket session sends its close frame, 1011 when failed).
func (r *Request) Done(failed bool) { r.Finish(failed) }

// Finish is Done, telling what it found (Finish*; a WebSocket session's are FinishOK or
// FinishLost).
func (r *Request) Finish(failed bool) int { return r.finish(failed, false) }

// FinishReleased is Finish for an application's side that lets go of r in the same call:
// it keeps no reference to r and never calls it again (goloop's ASGI binding, when the
// application's call ends with nothing of it waiting on r). The connection may then reuse
// r for its next request as Config.ReuseRequests allows, without that setting.
func (r *Request) FinishReleased(failed bool) int { return r.finish(failed, true) }

func (r *Request) finish(failed, released bool) int {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	r.released = released
	if r.appDone {
		return FinishOK
	}
	r.appDone = true
	c.s.inflight.Add(-1)
	if r.lost {
		c.dropLocked(r) // (HTTP/2 streams are not in c.inflight: nothing to drop)
		return FinishLost
	}
	if r.done {
		if x, ok := r.x.(h1Exchange); ok {
			if failed {
				x.closeAfterLocked() // (HTTP/2: the stream is done; the connection stays)
			} else {
				r.reuseLocked()
			}
		}
		return FinishOK
	}
	_, ws := r.x.(*WS)
	if !r.started {
		r.status = 500
		r.hdr = append(r.hdr[:0], "content-type: text/plain; charset=utf-8\r\n"...)
		r.started = true
		r.keepAlive = false // HTTP/1.1: connection: close (uvicorn's 500 closes too)
		r.x.completeWithLocked([]byte("Internal Server Error"))
		if ws || failed {
			return FinishOK
		}
		return FinishNotStarted
	}
	r.x.cutLocked(failed)
	if ws || failed {
		return FinishOK
	}
	return FinishIncomplete
}
