package httpserver

// WebSocket (RFC 6455, with RFC 7692's permessage-deflate) on the engine's own connection.
//
// A request that asks for a WebSocket upgrade (GET, HTTP/1.1, Upgrade: websocket,
// Sec-WebSocket-Key, Sec-WebSocket-Version: 13) gets a *WS (Request.WS) and is queued as an
// EvRequest like any request; the binding makes a websocket scope of it. Until the
// application decides, nothing is written: Accept writes the 101 response, Deny/DenyBody an
// HTTP response (the denial response extension), Close before Accept a 403.
//
// After the upgrade the connection's goroutine reads frames (ws.serve): it unmasks,
// reassembles fragments, inflates, checks UTF-8 and sizes, answers pings and the close
// handshake itself, and queues whole messages (an EvWake when the application waits).
// The application's messages are framed by Send on its thread into the connection's
// output, written by Flush as HTTP responses are (one write per loop iteration for every
// message queued; the writer goroutine takes what the socket does not).
//
// The request stays in flight for the whole session: it completes (and the connection
// closes) when the close handshake ends or the connection is lost. The WS is its
// request's protocol (Request.x): the HTTP answers are h1Exchange's, and Request.Done, the
// one finishing path, ends an accepted session with a close frame (WS.cutLocked). It is
// also what the connection switched to (Conn.next).
//
// This file has the session: its configuration, the application's side (Accept, Receive,
// Send, Close), the output, and the reader (frames, fragments, control frames, masking).
// The handshake request is wshandshake.go's, permessage-deflate wsdeflate.go's, and the
// UTF-8 check of text that arrives in frames wsutf8.go's.

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"time"
	"unicode/utf8"
)

// WSConfig configures WebSocket (uvicorn's --ws-* options). Zero values mean the defaults,
// except Deflate (false: no permessage-deflate) and Disabled.
type WSConfig struct {
	// Disabled: upgrade requests are plain HTTP requests (uvicorn's --ws none).
	Disabled bool
	// MaxSize limits a message (after inflating); a larger one closes with 1009
	// (default 16 MiB, --ws-max-size).
	MaxSize int
	// MaxQueue is how many received messages wait for the application before the
	// connection stops reading (default 32, --ws-max-queue).
	MaxQueue int
	// PingInterval: a ping is sent that often (0: never; --ws-ping-interval).
	// PingTimeout: without a pong that long after a ping, the connection closes with 1011
	// (0: no limit; --ws-ping-timeout).
	PingInterval, PingTimeout time.Duration
	// Deflate accepts permessage-deflate offers (--ws-per-message-deflate).
	Deflate bool
	// CloseTimeout is how long a close frame waits for the peer's (default 5 s).
	CloseTimeout time.Duration
}

// SetWSConfig sets the WebSocket configuration (before serving).
func (s *Server) SetWSConfig(cfg WSConfig) {
	if cfg.MaxSize <= 0 {
		cfg.MaxSize = 16 * 1024 * 1024
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = 32
	}
	if cfg.CloseTimeout <= 0 {
		cfg.CloseTimeout = 5 * time.Second
	}
	s.wscfg.Store(&cfg)
}

func (s *Server) wsConfig() *WSConfig {
	if p := s.wscfg.Load(); p != nil {
		return p
	}
	s.SetWSConfig(WSConfig{})
	return s.wscfg.Load()
}

// wsMaxControlOut: unsent output past WriteBuffer beyond which a client that pings without
// reading the pongs is failed (1008), as HTTP/2's h2MaxControlOut.
const wsMaxControlOut = 1 << 20

// WS session phases.
const (
	wsConnecting = iota // the application has not accepted yet
	wsOpen              // accepted
	wsHTTP              // answered with an HTTP response (denial, 403, 500)
	wsClosed            // the close handshake ended, or the connection failed
)

// WSKind is what WS.Receive found.
type WSKind uint8

const (
	WSWait       WSKind = iota // nothing yet: an EvWake follows
	WSConnect                  // websocket.connect (the first receive)
	WSText                     // a text message (valid UTF-8)
	WSBinary                   // a binary message
	WSDisconnect               // websocket.disconnect (Code, Reason)
)

// Errors of the WebSocket messages (the binding raises them as RuntimeError).
var (
	ErrWSNotAccepted = errors.New("Unexpected ASGI message 'websocket.send', before 'websocket.accept'.")
	ErrWSAccepted    = errors.New("Unexpected ASGI message 'websocket.accept', after the connection was accepted or answered.")
	ErrWSHTTPStart   = errors.New("Unexpected ASGI message 'websocket.http.response.start', after 'websocket.accept' or a response.")
	ErrWSHTTPBody    = errors.New("Unexpected ASGI message 'websocket.http.response.body' without 'websocket.http.response.start'.")
	ErrWSCloseCode   = errors.New("websocket.close: invalid close code")
	ErrWSReason      = errors.New("websocket.close: the reason is longer than 123 bytes")
)

type wsMsg struct {
	text bool
	data []byte
}

// WS is the WebSocket side of an upgrade request.
type WS struct {
	r *Request
	c *Conn

	// from the handshake request (read-only)
	key          []byte
	Subprotocols []string      // the client's, in its order
	zp           deflateParams // the permessage-deflate offer taken (zp.resp "": none)

	// under c.mu
	phase        uint8
	deflate      bool // negotiated (accepted with it)
	connectTaken bool
	msgs         []wsMsg
	closeSent    bool
	closeRecv    bool
	code         int // the disconnect's code and reason (valid once closeRecv or failed)
	reason       string
	pingPending  bool
	timer        *time.Timer

	// the reader's own
	rbuf    []byte
	roff    int
	fragOp  byte // opcode of the message being reassembled, 0 if none
	fragZ   bool // that message is compressed
	frag    []byte
	dict    []byte     // the client's LZ77 window (the last zp.clientWindow bytes it sent)
	utf8    utf8Stream // the text message being received, checked so far
	zProbes int        // a compressed text message's frames inflated so far (zProbe)
	zDone   int        // bytes of its inflated text checked
	pdone   int        // bytes of the incomplete frame at roff already unmasked and checked
	failed  bool       // a protocol error: the rest of the input is not parsed
	drained bool
}

// WS returns the request's WebSocket side, nil for a plain HTTP request.
func (r *Request) WS() *WS { return r.ws }

// Request returns the handshake request.
func (w *WS) Request() *Request { return w.r }

// ---------- the application's side (its thread) ----------

// Accept writes the 101 response: subprotocol ("" for none) and hdr, the application's
// header lines ("name: value\r\n" each, validated by the caller).
func (w *WS) Accept(subprotocol string, hdr []byte) error {
	c := w.c
	r := w.r
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.phase != wsConnecting || r.started {
		return ErrWSAccepted
	}
	if r.lost {
		return ErrDisconnected
	}
	h := sha1.New()
	h.Write(w.key)
	h.Write([]byte("258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	var acc [28]byte
	base64.StdEncoding.Encode(acc[:], h.Sum(nil))
	b := make([]byte, 0, 256+len(hdr))
	b = append(b, "HTTP/1.1 101 Switching Protocols\r\n"...)
	b = append(b, c.s.extra...)
	if c.s.cfg.DateHeader {
		b = append(b, dateHeader()...)
	}
	b = append(b, "upgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: "...)
	b = append(b, acc[:]...)
	b = append(b, "\r\n"...)
	if subprotocol != "" {
		b = append(b, "sec-websocket-protocol: "...)
		b = append(b, subprotocol...)
		b = append(b, "\r\n"...)
	}
	if w.zp.resp != "" {
		b = append(b, "sec-websocket-extensions: "...)
		b = append(b, w.zp.resp...)
		b = append(b, "\r\n"...)
		w.deflate = true
	}
	b = append(b, hdr...)
	b = append(b, "\r\n"...)
	r.started, r.headSent = true, true
	r.status = 101
	w.phase = wsOpen
	w.outLocked(b, nil, true)
	if iv := c.s.wsConfig().PingInterval; iv > 0 {
		w.timer = time.AfterFunc(iv, w.tick)
	}
	return nil
}

// Deny starts the HTTP response that refuses the connection (websocket.http.response.start).
func (w *WS) Deny(status int, hdr []byte) error {
	c := w.c
	c.mu.Lock()
	if w.phase != wsConnecting {
		c.mu.Unlock()
		return ErrWSHTTPStart
	}
	c.mu.Unlock()
	if err := w.r.Start(status, hdr); err != nil {
		return err
	}
	c.mu.Lock()
	w.phase = wsHTTP
	c.mu.Unlock()
	return nil
}

// DenyBody is websocket.http.response.body.
func (w *WS) DenyBody(body []byte, more bool) (int, error) {
	c := w.c
	c.mu.Lock()
	ph := w.phase
	c.mu.Unlock()
	if ph != wsHTTP {
		return 0, ErrWSHTTPBody
	}
	return w.r.Send(body, more)
}

// wsMem holds the memory of large messages the application copied out and released, for
// the next large messages of any session: a message is read by its session's goroutine and
// released by the application's thread, usually on another P, where a sync.Pool's item put
// by one is not found by the other. Up to wsMemKeep buffers of wsMemMin..wsMemMax bytes
// (at most 2 MiB, whatever the number of sessions); a message uses one of at most 4 times
// its size.
var wsMem = make(chan []byte, wsMemKeep)

const (
	wsMemMin  = 4096
	wsMemMax  = 256 << 10
	wsMemKeep = 8
)

// wsCopy: the message's own copy of p (a frame's payload in the read buffer).
func wsCopy(p []byte) []byte {
	if len(p) >= wsMemMin {
		select {
		case b := <-wsMem:
			if cap(b) >= len(p) && cap(b) <= 4*len(p) {
				return append(b[:0], p...)
			}
			wsKeep(b)
		default:
		}
	}
	return append([]byte(nil), p...)
}

// wsKeep puts b's memory into wsMem (b not used after) if it is of a size kept and there
// is room.
func wsKeep(b []byte) {
	if cap(b) < wsMemMin || cap(b) > wsMemMax {
		return
	}
	select {
	case wsMem <- b[:0]:
	default:
	}
}

// Release gives back the memory of a message Receive returned, once the application has
// copied it out (b is not used after): the next large messages reuse it (wsMem).
func (w *WS) Release(b []byte) { wsKeep(b) }

// Phase tells what the session is: 0 connecting, 1 accepted, 2 HTTP response, 3 closed.
func (w *WS) Phase() int {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	return int(w.phase)
}

// Receive returns the next message for the application.
func (w *WS) Receive() (kind WSKind, data []byte, code int, reason string) {
	c := w.c
	r := w.r
	c.mu.Lock()
	defer c.mu.Unlock()
	if !w.connectTaken {
		w.connectTaken = true
		return WSConnect, nil, 0, ""
	}
	if len(w.msgs) > 0 {
		m := w.msgs[0]
		w.msgs[0] = wsMsg{}
		w.msgs = w.msgs[1:]
		if len(w.msgs) == 0 {
			w.msgs = nil
		}
		c.roomLocked()
		if m.text {
			return WSText, m.data, 0, ""
		}
		return WSBinary, m.data, 0, ""
	}
	switch {
	case w.phase == wsClosed:
		return WSDisconnect, nil, w.code, w.reason
	case r.lost || w.phase == wsHTTP && r.done:
		return WSDisconnect, nil, 1006, ""
	}
	r.waitRecv = true
	return WSWait, nil, 0, ""
}

// Send frames a message (websocket.send). Flags as Request.Send's (SendPaused: wait for
// the output to drain, SendReady).
func (w *WS) Send(text bool, data []byte) (flags int, err error) {
	c := w.c
	r := w.r
	c.mu.Lock()
	ph, deflate := w.phase, w.deflate
	c.mu.Unlock()
	if ph == wsConnecting {
		return 0, ErrWSNotAccepted
	}
	op := byte(2)
	if text {
		op = 1
	}
	var z []byte
	if deflate && len(data) >= 128 {
		z = deflateMessage(data, w.zp.serverBits)
		if len(z) >= len(data) {
			z = nil
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.phase != wsOpen || w.closeSent || r.lost || c.closed {
		return 0, ErrDisconnected
	}
	var hb [10]byte
	if z != nil {
		w.outLocked(frameHead(hb[:0], op|0x40, len(z)), z, true)
	} else {
		w.outLocked(frameHead(hb[:0], op, len(data)), data, true)
	}
	if len(c.out) > c.s.cfg.WriteBuffer {
		if !c.writing {
			c.mu.Unlock()
			c.flush()
			c.mu.Lock()
		}
		if len(c.out) > c.s.cfg.WriteBuffer && !r.lost {
			r.waitSend = true
			flags |= SendPaused
		}
	}
	return flags, nil
}

// ValidCloseCode tells whether code may be sent in a close frame.
func ValidCloseCode(code int) bool {
	switch {
	case code >= 1000 && code <= 1003, code >= 1007 && code <= 1014:
		return true
	case code >= 3000 && code <= 4999:
		return true
	}
	return false
}

// Close is websocket.close: before Accept a 403 response, after it a close frame (the
// session ends when the client answers, or after CloseTimeout).
func (w *WS) Close(code int, reason string) error {
	c := w.c
	r := w.r
	if !ValidCloseCode(code) {
		return ErrWSCloseCode
	}
	if len(reason) > 123 {
		return ErrWSReason
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch w.phase {
	case wsConnecting:
		if r.lost {
			return ErrDisconnected
		}
		w.phase = wsHTTP
		r.status = 403
		r.started = true
		w.outLocked(r.appendHead(nil, 0, false), nil, true)
		r.headSent = true
		r.completeLocked()
		return nil
	case wsOpen:
		if !w.closeSent && !r.lost {
			w.sendCloseLocked(code, reason, true)
			c.nc.SetReadDeadline(time.Now().Add(c.s.wsConfig().CloseTimeout))
		}
	}
	return nil
}

// AppDone: the application's call returned (failed: with an exception): Request.Done,
// whose cutLocked is below.
func (w *WS) AppDone(failed bool) { w.r.Done(failed) }

// Status is the response's status for the access log: 101 accepted, the HTTP response's,
// or 0.
func (w *WS) Status() int { return w.r.Status() }

// ---------- the handshake request's protocol (Request.x, exchange.go) ----------
// Before the session is accepted, and when it is answered with an HTTP response instead
// (denial, 403, 500), the request is an HTTP/1.1 exchange: h1Exchange's. Only the end of
// an accepted session differs: the application's return sends the close frame.

func (w *WS) h1() h1Exchange              { return h1Exchange{w.r} }
func (w *WS) tookBodyLocked(n int) bool   { return w.h1().tookBodyLocked(n) }
func (w *WS) continueLocked()             { w.h1().continueLocked() }
func (w *WS) completeWithLocked(b []byte) { w.h1().completeWithLocked(b) }
func (w *WS) trailersLocked() error       { return w.h1().trailersLocked() }
func (w *WS) readyLocked() bool           { return w.h1().readyLocked() }
func (w *WS) send(part bodyPart, more bool, notStarted error) (int, bool, error) {
	return w.h1().send(part, more, notStarted)
}

// cutLocked: not accepted, an HTTP/1.1 response cut short; open: a close frame (1000, or
// 1011 after an error); closed: nothing.
func (w *WS) cutLocked(failed bool) {
	switch w.phase {
	case wsConnecting, wsHTTP:
		w.h1().cutLocked(failed)
	case wsOpen:
		if w.closeSent {
			return
		}
		code, reason := 1000, ""
		if failed {
			code, reason = 1011, "Internal Server Error"
		}
		w.sendCloseLocked(code, reason, true)
		w.c.nc.SetReadDeadline(time.Now().Add(w.c.s.wsConfig().CloseTimeout))
	}
}

// input: what followed the handshake request in its read is the session's first frames.
func (w *WS) input(b []byte) { w.rbuf = append(w.rbuf, b...) }

// drainedLocked and lostLocked: the session's request is in flight like an HTTP/1.1
// request's: the connection's own handling wakes and ends it.
func (w *WS) drainedLocked() bool { return false }
func (w *WS) lostLocked()         {}

// ---------- output ----------

// outLocked queues a and b after the output of the requests before this one (c.mu held);
// dirty: mark the connection for the next Flush (the application's thread); the reader
// flushes itself instead.
func (w *WS) outLocked(a, b []byte, dirty bool) {
	c := w.c
	r := w.r
	if len(c.inflight) > 0 && c.inflight[0] == r {
		c.out = append(c.out, a...)
		c.out = append(c.out, b...)
		if dirty {
			c.dirtyLocked()
		}
	} else {
		r.out = append(r.out, a...)
		r.out = append(r.out, b...)
	}
}

func frameHead(b []byte, first byte, n int) []byte {
	b = append(b, 0x80|first)
	switch {
	case n < 126:
		b = append(b, byte(n))
	case n < 1<<16:
		b = append(b, 126, byte(n>>8), byte(n))
	default:
		b = append(b, 127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	return b
}

// sendCloseLocked queues a close frame (c.mu held).
func (w *WS) sendCloseLocked(code int, reason string, dirty bool) {
	var p []byte
	if code != 1005 {
		p = binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(reason)), uint16(code))
		p = append(p, reason...)
	}
	var hb [10]byte
	w.outLocked(frameHead(hb[:0], 8, len(p)), p, dirty)
	w.closeSent = true
	if w.code == 0 {
		w.code, w.reason = code, reason
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	c := w.c
	c.roomLocked() // a reader paused for room reads the answer
}

// tick is the keep-alive timer: send a ping, or fail the connection when the last one got
// no pong within PingTimeout.
func (w *WS) tick() {
	c := w.c
	cfg := c.s.wsConfig()
	c.mu.Lock()
	if w.phase != wsOpen || w.closeSent || c.closed || w.r.lost {
		c.mu.Unlock()
		return
	}
	if w.pingPending {
		w.sendCloseLocked(1011, "keepalive ping timeout", false)
		w.phase = wsClosed
		w.code, w.reason = 1011, "keepalive ping timeout"
		c.mu.Unlock()
		c.flush()
		c.lost()
		return
	}
	var p [4]byte
	rand.Read(p[:])
	var hb [10]byte
	w.outLocked(frameHead(hb[:0], 9, 4), p[:], false)
	if cfg.PingTimeout > 0 {
		w.pingPending = true
		w.timer.Reset(cfg.PingTimeout)
	} else {
		w.timer.Reset(cfg.PingInterval)
	}
	c.mu.Unlock()
	c.flush()
}

// shutdown: the server closes: an open session is closed with 1012 (service restart).
func (w *WS) shutdown() {
	c := w.c
	c.mu.Lock()
	if w.phase == wsOpen && !w.closeSent && !w.r.lost && !c.closed {
		w.sendCloseLocked(1012, "", false)
		c.nc.SetReadDeadline(time.Now().Add(c.s.wsConfig().CloseTimeout))
		c.mu.Unlock()
		c.flush()
		return
	}
	c.mu.Unlock()
}

// ---------- the reader (the connection's goroutine) ----------

// serve reads the session's frames until it ends.
func (w *WS) serve() {
	c := w.c
	if !w.r.dispatched {
		return
	}
	cfg := c.s.wsConfig()
	c.nc.SetReadDeadline(time.Time{})
	for {
		// room: the application has not taken MaxQueue messages yet
		c.mu.Lock()
		for len(w.msgs) >= cfg.MaxQueue && !c.closed && !w.closeSent && !w.r.lost {
			c.paused = true
			c.mu.Unlock()
			<-c.wake
			c.mu.Lock()
		}
		ph, closeSent := w.phase, w.closeSent
		c.mu.Unlock()
		if ph == wsHTTP || (ph == wsClosed && !closeSent) {
			return
		}
		if len(w.rbuf) == cap(w.rbuf) {
			nb := make([]byte, len(w.rbuf), max(2*cap(w.rbuf), 16*1024))
			copy(nb, w.rbuf)
			w.rbuf = nb
		}
		n, err := c.nc.Read(w.rbuf[len(w.rbuf):cap(w.rbuf)])
		w.rbuf = w.rbuf[:len(w.rbuf)+n]
		c.mu.Lock()
		ph, closeSent = w.phase, w.closeSent
		drained := len(c.out) == 0 && !c.writing
		c.mu.Unlock()
		if ph == wsOpen || closeSent {
			if w.failed {
				// after a protocol error: drop the input; half-close once our close frame
				// is out, so the peer sees the end and closes
				w.rbuf = w.rbuf[:0]
				if drained && !w.drained {
					w.drained = true
					if tc, ok := c.nc.(interface{ CloseWrite() error }); ok {
						tc.CloseWrite()
					}
				}
			} else if !w.process() {
				w.end()
				return
			}
			c.pushBatch(true)
		}
		if err != nil {
			if closeSent || w.failed {
				w.end() // the peer closed, or did not answer our close in time
			} else {
				c.lost()
			}
			return
		}
	}
}

// end: the close handshake is over (or timed out): the session completes and the
// connection closes once its output is written.
func (w *WS) end() {
	c := w.c
	r := w.r
	c.pushBatch(true) // the wake-ups of the messages before the close
	c.mu.Lock()
	w.phase = wsClosed
	if w.timer != nil {
		w.timer.Stop()
	}
	if !r.done && !r.lost {
		r.keepAlive = false
		r.completeLocked() // wakes a receive that waits
	}
	c.mu.Unlock()
	c.flush()
}

// fail closes the session for a protocol error (code 1002, 1007, 1009): a close frame,
// then the rest of the input is read and dropped until the peer closes (or CloseTimeout).
func (w *WS) fail(code int, reason string) {
	c := w.c
	c.mu.Lock()
	if !w.closeSent {
		w.sendCloseLocked(code, reason, false)
	}
	w.code, w.reason = code, reason
	w.phase = wsClosed
	w.failed = true
	if w.r.waitRecv {
		c.wakeLocked(w.r, &c.batch)
	}
	c.mu.Unlock()
	c.nc.SetReadDeadline(time.Now().Add(c.s.wsConfig().CloseTimeout))
	c.flush()
	c.mu.Lock()
	done := len(c.out) == 0 && !c.writing
	c.mu.Unlock()
	if done {
		w.drained = true
		if tc, ok := c.nc.(interface{ CloseWrite() error }); ok {
			tc.CloseWrite()
		}
	}
}

// process parses the frames in rbuf; false: the session is over (close handshake done).
func (w *WS) process() bool {
	c := w.c
	cfg := c.s.wsConfig()
	keep := true
	flushNeeded := false
	for !w.failed {
		b := w.rbuf[w.roff:]
		if len(b) < 2 {
			break
		}
		fin := b[0]&0x80 != 0
		rsv := b[0] & 0x70
		op := b[0] & 0x0f
		masked := b[1]&0x80 != 0
		n := uint64(b[1] & 0x7f)
		hl := 2
		switch n {
		case 126:
			if len(b) < 4 {
				goto more
			}
			n = uint64(binary.BigEndian.Uint16(b[2:]))
			hl = 4
		case 127:
			if len(b) < 10 {
				goto more
			}
			n = binary.BigEndian.Uint64(b[2:])
			hl = 10
		}
		if !masked {
			w.fail(1002, "frame not masked")
			break
		}
		hl += 4
		if op >= 8 {
			if op > 10 || !fin || n > 125 || rsv != 0 {
				w.fail(1002, "invalid control frame")
				break
			}
		} else {
			switch {
			case op > 2:
				w.fail(1002, "reserved opcode")
			case op == 0 && w.fragOp == 0:
				w.fail(1002, "unexpected continuation frame")
			case op != 0 && w.fragOp != 0:
				w.fail(1002, "expected a continuation frame")
			case rsv != 0 && (rsv != 0x40 || op == 0 || !w.deflate):
				w.fail(1002, "reserved bits set")
			case n > uint64(cfg.MaxSize) || uint64(len(w.frag))+n > uint64(cfg.MaxSize):
				w.fail(1009, "message too big")
			}
			if w.failed {
				break
			}
		}
		if uint64(len(b)) < uint64(hl)+n {
			// fail fast: the part of an uncompressed text frame already here is checked
			if avail := len(b) - hl; op < 8 && avail > w.pdone && w.plainText(op, rsv) {
				q := b[hl+w.pdone : hl+avail]
				unmaskAt(q, b[hl-4:hl], w.pdone)
				w.pdone = avail
				if !w.utf8.feed(q, false) {
					w.fail(1007, "invalid UTF-8")
					break
				}
			}
			if need := w.roff + hl + int(n); need > cap(w.rbuf) {
				nb := make([]byte, len(w.rbuf)-w.roff, hl+int(n))
				copy(nb, w.rbuf[w.roff:])
				w.rbuf = nb
				w.roff = 0
			}
			goto more
		}
		{
			p := b[hl : hl+int(n)]
			done := w.pdone
			w.pdone = 0
			unmaskAt(p[done:], b[hl-4:hl], done)
			w.roff += hl + int(n)
			if op < 8 && w.plainText(op, rsv) && !w.utf8.feed(p[done:], fin) {
				w.fail(1007, "invalid UTF-8")
				break
			}
			if op >= 8 {
				switch op {
				case 9: // ping
					c.mu.Lock()
					if !w.closeSent {
						var hb [10]byte
						w.outLocked(frameHead(hb[:0], 10, len(p)), p, false)
						flushNeeded = true
					}
					flood := len(c.out) > c.s.cfg.WriteBuffer+wsMaxControlOut
					c.mu.Unlock()
					if flood { // pings without reading the pongs: the output would grow without bound
						w.fail(1008, "pings not read")
					}
				case 10: // pong
					c.mu.Lock()
					if w.pingPending {
						w.pingPending = false
						if w.timer != nil {
							w.timer.Reset(cfg.PingInterval)
						}
					}
					c.mu.Unlock()
				case 8:
					code, reason := 1005, ""
					if len(p) == 1 {
						w.fail(1002, "invalid close frame")
						break
					}
					if len(p) >= 2 {
						code = int(binary.BigEndian.Uint16(p))
						reason = string(p[2:])
						if !ValidCloseCode(code) {
							w.fail(1002, "invalid close code")
							break
						}
						if !utf8.ValidString(reason) {
							w.fail(1007, "invalid close reason")
							break
						}
					}
					c.mu.Lock()
					w.closeRecv = true
					if !w.closeSent { // echo the client's code
						w.sendCloseLocked(code, "", false)
					}
					w.code, w.reason = code, reason // the disconnect carries the client's code
					c.mu.Unlock()
					keep = false
				}
				if !keep || w.failed {
					break
				}
				continue
			}
			// data frames
			c.mu.Lock()
			drop := w.closeSent
			c.mu.Unlock()
			if op != 0 {
				w.fragOp, w.fragZ = op, rsv != 0
			}
			if fin && len(w.frag) == 0 {
				w.message(wsCopy(p), drop)
			} else {
				w.frag = append(w.frag, p...)
				if !fin && w.fragOp == 1 && w.fragZ && !w.zProbe(cfg.MaxSize) {
					w.fail(1007, "invalid UTF-8")
					break
				}
				if fin {
					m := w.frag
					w.frag = nil
					w.message(m, drop)
				}
			}
			continue
		}
	more:
		break
	}
	if w.roff > 0 {
		m := copy(w.rbuf, w.rbuf[w.roff:])
		w.rbuf = w.rbuf[:m]
		w.roff = 0
	}
	if flushNeeded {
		c.flush()
	}
	return keep
}

// message delivers a complete message (inflated and checked here).
func (w *WS) message(data []byte, drop bool) {
	c := w.c
	cfg := c.s.wsConfig()
	text := w.fragOp == 1
	z := w.fragZ
	w.fragOp, w.fragZ = 0, false
	if z && text {
		w.utf8, w.zProbes, w.zDone = utf8Stream{}, 0, 0
	}
	if z {
		var code int
		deflated := data
		data, code = w.inflate(deflated, cfg.MaxSize)
		w.Release(deflated) // (inflate's result is memory of its own)
		if code != 0 {
			w.fail(code, "")
			return
		}
	}
	if text && z && !utf8.Valid(data) { // uncompressed text was checked frame by frame
		w.fail(1007, "invalid UTF-8")
		return
	}
	if drop {
		return
	}
	c.mu.Lock()
	w.msgs = append(w.msgs, wsMsg{text: text, data: data})
	if w.r.waitRecv {
		c.wakeLocked(w.r, &c.batch)
	}
	c.mu.Unlock()
}

// plainText tells whether a data frame (op, rsv) is part of an uncompressed text message:
// one whose UTF-8 is checked as its frames arrive.
func (w *WS) plainText(op, rsv byte) bool {
	if op == 0 {
		return w.fragOp == 1 && !w.fragZ
	}
	return op == 1 && rsv == 0
}

// unmaskAt unmasks p, the part of a payload that starts off bytes into it.
func unmaskAt(p, key []byte, off int) {
	if off&3 == 0 {
		unmask(p, key)
		return
	}
	var k [4]byte
	for i := range k {
		k[i] = key[(off+i)&3]
	}
	unmask(p, k[:])
}

// unmask XORs p with the masking key, 32 bytes a step (four words, on a slice whose bounds
// the compiler knows: ~2.5x the speed of a word a step, which was 13 % of a 64 KiB
// message's CPU), then eight, then the rest.
func unmask(p, key []byte) {
	k4 := binary.LittleEndian.Uint32(key)
	k8 := uint64(k4) | uint64(k4)<<32
	for len(p) >= 32 {
		b := p[:32:32]
		binary.LittleEndian.PutUint64(b[0:], binary.LittleEndian.Uint64(b[0:])^k8)
		binary.LittleEndian.PutUint64(b[8:], binary.LittleEndian.Uint64(b[8:])^k8)
		binary.LittleEndian.PutUint64(b[16:], binary.LittleEndian.Uint64(b[16:])^k8)
		binary.LittleEndian.PutUint64(b[24:], binary.LittleEndian.Uint64(b[24:])^k8)
		p = p[32:]
	}
	for len(p) >= 8 {
		binary.LittleEndian.PutUint64(p, binary.LittleEndian.Uint64(p)^k8)
		p = p[8:]
	}
	for i := range p {
		p[i] ^= key[i&3]
	}
}
