package httpserver

// HTTP/2 (RFC 9113) connections: over TLS when ALPN chose h2, and h2c with prior knowledge
// (a plain connection whose first bytes are the client preface). Frames are read and
// written with golang.org/x/net/http2's Framer and hpack; each stream becomes a Request of
// the same model as HTTP/1.1's (one ASGI call per stream), answered through the same
// Exchange, whose protocol (Request.x) is the stream's h2Stream; the connection's output
// goes through the same output queue as HTTP/1.1's (outqueue.go). See DESIGN.md.

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

const (
	h2MaxStreams    = 100       // SETTINGS_MAX_CONCURRENT_STREAMS we announce
	h2StreamWindow  = 256 << 10 // our initial stream receive window
	h2ConnWindow    = 1 << 20   // our connection receive window
	h2MaxFrame      = 16384     // SETTINGS_MAX_FRAME_SIZE we accept (the default)
	h2DefaultResets = 100       // streams a client may reset per second (rapid reset)
	h2MaxControlOut = 1 << 20   // unsent output beyond which a peer that sends PINGs/SETTINGS without reading is dropped
	h2ClosedKept    = 256       // closed streams whose way of closing is remembered (h2Conn.ended)
)

// How a stream closed (h2Conn.ended), which decides what a frame on it afterwards is
// (RFC 9113 5.1): after the client's END_STREAM and our response's (both sides closed),
// DATA is a connection error STREAM_CLOSED; after the client's RST_STREAM, a stream error
// STREAM_CLOSED; after our RST_STREAM, frames still in flight are ignored.
const (
	closedNormal uint8 = iota + 1
	closedByPeer       // the client's RST_STREAM
	closedByUs         // our RST_STREAM
)

// h2Server is the server's HTTP/2 state shared by its connections.
type h2Server struct {
	once  sync.Once
	extra [][2]string // server header and --header lines, lower-cased names
}

func (s *Server) h2Extra() [][2]string {
	s.h2.once.Do(func() {
		scanHeaders(s.extra, func(n, v []byte) {
			s.h2.extra = append(s.h2.extra, [2]string{strings.ToLower(string(n)), string(v)})
		})
	})
	return s.h2.extra
}

// h2Conn is the HTTP/2 state of a Conn (c.next). Fields marked "c.mu" are shared by the
// reader goroutine and the application's thread under c.mu; the Framer's write side and
// the hpack encoder are used under c.mu, its read side by the reader goroutine only.
type h2Conn struct {
	c   *Conn
	br  *bufio.Reader
	fr  *http2.Framer
	enc *hpack.Encoder
	hb  bytes.Buffer // hpack output

	// c.mu
	streams     map[uint32]*h2Stream
	maxID       uint32    // the highest stream id the client opened
	goaway      bool      // GOAWAY sent or received: no new streams
	idle        bool      // no stream: the keep-alive deadline is set (deadlineLocked)
	bodyDl      bool      // a request body's minimum rate sets the read deadline (deadlineLocked)
	bodyNew     bool      // a stream with a body opened: the read deadline is to be set again
	prefaceSent bool      // our SETTINGS are written
	sendWin     int64     // connection send window
	peerInit    int64     // the peer's SETTINGS_INITIAL_WINDOW_SIZE
	peerFrame   int       // the peer's SETTINGS_MAX_FRAME_SIZE
	recvWin     int64     // our connection receive window, as the peer sees it
	connUnacked int64     // consumed, not yet returned with a WINDOW_UPDATE
	files       int       // streams sending a file (pathsend)
	copied      int       // Go's copies in the streams' pending bytes (held bodies aside): queuedLocked
	rrAfter     uint32    // the stream the output's pump served first last time (pumpLocked)
	rrIDs       []uint32  // pumpLocked's scratch
	dataSent    int64     // DATA payload bytes written, ever
	flowAt      time.Time // a stream's DATA has waited for the client's windows since (zero: none): flowWaitLocked
	flowBase    int64     // dataSent then
	flowTimer   *time.Timer
	ended       map[uint32]uint8 // how the last h2ClosedKept closed streams closed (closedNormal...)
	endedIDs    []uint32         // their ids, in order of closing (a ring)
	endedNext   int

	// reader goroutine
	resets     int
	resetStart time.Time
	maxResets  int
}

// h2Stream is one stream's state (c.mu), and the protocol of its Request (Request.x).
type h2Stream struct {
	id         uint32
	r          *Request
	h          *h2Conn
	sendWin    int64
	pending    []byte   // response body not yet sent (flow control)
	pendRel    func()   // pending is a held body's memory (SendHeld): released once written or dropped
	holdNext   func()   // the part being sent may be held (send, for sendLocked)
	file       *os.File // pathsend, zerocopysend: a file sent after pending, read as the windows allow (spec.go)
	fileOff    int64    // where the rest of file starts
	fileLeft   int64    // what is left to send of file
	endPending bool     // END_STREAM follows pending
	endSent    bool
	recvWin    int64 // our receive window, as the peer sees it
	unacked    int64
	declared   int64 // the request's content-length, -1 if none
	received   int64
	bodyAt     time.Time // the body's clock started (zero: none; bodyDeadlineLocked)
	bodyBase   int64     // received then
	remoteDone bool      // END_STREAM received (or the stream was reset)
	gone       bool      // removed from streams
	trReady    bool      // the trailers end the stream after pending (spec.go)
	how        uint8     // how it closed, when it did (closedNormal...; 0: normally)
}

// newStream makes stream id of r, r's protocol.
func (h *h2Conn) newStream(id uint32, r *Request) *h2Stream {
	st := &h2Stream{id: id, r: r, h: h, sendWin: h.peerInit, recvWin: h2StreamWindow, declared: -1}
	r.x = st
	return st
}

// startH2 turns c into an HTTP/2 connection if its first bytes (first) are the client
// preface or its TLS handshake chose h2; it then serves c and returns true.
func (c *Conn) startH2(first []byte) bool {
	if !c.alpnH2() && !h2Preface(first) {
		return false
	}
	h := c.newH2(first)
	c.mu.Lock()
	c.next = h
	c.mu.Unlock()
	h.serve()
	return true
}

// newH2 makes c's HTTP/2 state; first are the bytes read from c not yet consumed.
func (c *Conn) newH2(first []byte) *h2Conn {
	h := &h2Conn{c: c, streams: map[uint32]*h2Stream{}, sendWin: 65535, peerInit: 65535,
		peerFrame: 16384, recvWin: 65535, maxResets: c.s.cfg.H2MaxResets}
	if h.maxResets <= 0 {
		h.maxResets = h2DefaultResets
	}
	rd := io.MultiReader(bytes.NewReader(append([]byte(nil), first...)), c.nc)
	h.br = bufio.NewReaderSize(rd, 32<<10)
	h.fr = http2.NewFramer(h2Writer{c}, h.br)
	h.fr.SetMaxReadFrameSize(h2MaxFrame)
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.fr.MaxHeaderListSize = uint32(2 * c.s.cfg.MaxHeadSize)
	h.enc = hpack.NewEncoder(&h.hb)
	return h
}

// writePrefaceLocked writes the server's connection preface: our SETTINGS and the
// connection window's increase.
func (h *h2Conn) writePrefaceLocked() {
	h.fr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: h2MaxStreams},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2StreamWindow},
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: h2MaxFrame},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: h.fr.MaxHeaderListSize},
	)
	h.fr.WriteWindowUpdate(0, h2ConnWindow-65535)
	h.recvWin = h2ConnWindow
	h.prefaceSent = true
}

// h2Preface: first (a connection's first read) begins as HTTP/2's client preface.
func h2Preface(first []byte) bool {
	n := min(len(first), len(http2.ClientPreface))
	return string(first[:n]) == http2.ClientPreface[:n]
}

// h2Writer appends the Framer's output to the connection's (c.mu held by the writer).
type h2Writer struct{ c *Conn }

func (w h2Writer) Write(p []byte) (int, error) {
	w.c.out = append(w.c.out, p...)
	return len(p), nil
}

// serve is the reader: frames in, events out.
func (h *h2Conn) serve() {
	c := h.c
	ka := c.s.cfg.KeepAliveTimeout
	var pre [24]byte
	c.nc.SetReadDeadline(time.Now().Add(ka))
	if _, err := io.ReadFull(h.br, pre[:]); err != nil || string(pre[:]) != http2.ClientPreface {
		c.lost()
		return
	}
	c.mu.Lock()
	// the keep-alive deadline set above is armed: say so, or a first stream whose HEADERS came
	// in the preface's read would leave it armed (deadlineLocked sees no change) and the
	// connection would close KeepAliveTimeout after it opened, that stream still running
	h.idle = true
	if !h.prefaceSent { // (h2c upgrade: sent with the 101)
		h.writePrefaceLocked()
	}
	c.mu.Unlock()
	c.flush()
	for {
		if h.br.Buffered() == 0 {
			h.pushBatch()
			c.flush()
			c.mu.Lock()
			if c.closed {
				c.mu.Unlock()
				return
			}
			h.deadlineLocked(false)
			c.mu.Unlock()
		} else if h.bodyDl || h.bodyNew { // bodies coming: their rates' deadline as they progress
			c.mu.Lock()
			h.deadlineLocked(false)
			c.mu.Unlock()
		}
		blk := h.headerBlockDeadline()
		f, err := h.fr.ReadFrame()
		if blk { // the header block's bound is over: the connection's again
			c.mu.Lock()
			h.deadlineLocked(true)
			c.mu.Unlock()
		}
		if err != nil {
			var se http2.StreamError
			var ce http2.ConnectionError
			switch {
			case errors.As(err, &se):
				c.mu.Lock()
				if se.StreamID > h.maxID {
					h.maxID = se.StreamID
				}
				h.resetLocked(se.StreamID, se.Code)
				c.mu.Unlock()
				continue
			case errors.As(err, &ce):
				h.fail(http2.ErrCode(ce))
			case errors.Is(err, http2.ErrFrameTooLarge):
				h.fail(http2.ErrCodeFrameSize)
			default:
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					if blk { // a header block not complete in time (deadline.go)
						c.s.ctr.headTimeouts.Add(1)
						h.fail(http2.ErrCodeEnhanceYourCalm)
					} else if c.mu.Lock(); h.bodyDl { // a body slower than the minimum rate
						c.mu.Unlock()
						c.s.ctr.bodyTimeouts.Add(1)
						h.fail(http2.ErrCodeEnhanceYourCalm)
					} else {
						c.mu.Unlock()
						h.fail(http2.ErrCodeNo) // idle
					}
				} else {
					h.pushBatch()
					c.lost()
				}
			}
			return
		}
		if code, ok := h.frame(f); !ok {
			h.fail(code)
			return
		}
	}
}

// headerBlockDeadline bounds a header block as HTTP/1.1's heads are bounded (deadline.go):
// when the next frame is a HEADERS frame not all in the buffer, or one that CONTINUATION
// frames follow, the block must be complete HeadTimeout after its frame header came (a
// client trickling a block would hold the connection: no other frame may come between,
// and with streams open it has no read deadline). True: the read deadline was set for it.
// A whole block in the buffer costs a Peek.
func (h *h2Conn) headerBlockDeadline() bool {
	t := h.c.s.cfg.HeadTimeout
	if t < 0 {
		return false
	}
	hdr, err := h.br.Peek(9) // (an error: ReadFrame meets it)
	if err != nil || http2.FrameType(hdr[3]) != http2.FrameHeaders {
		return false
	}
	n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
	if http2.Flags(hdr[4]).Has(http2.FlagHeadersEndHeaders) && h.br.Buffered() >= 9+n {
		return false
	}
	h.c.nc.SetReadDeadline(time.Now().Add(t))
	return true
}

// deadlineLocked: an idle connection (no stream) closes after the keep-alive timeout from
// when it became idle: frames that open no stream (PING, SETTINGS, WINDOW_UPDATE) do not
// push it, or a client pinging every few seconds would hold an idle connection forever
// (as Go's net/http, whose idle timer only streams reset). force: set it again (after a
// header block's bound). With streams whose bodies are coming, the earliest of their
// minimum rates' deadlines (bodyDeadlineLocked).
func (h *h2Conn) deadlineLocked(force bool) {
	idle := len(h.streams) == 0
	var body time.Time
	if !idle && h.c.s.cfg.BodyMinRate > 0 {
		body = h.bodyDeadlineLocked()
	}
	h.bodyNew = false
	if idle == h.idle && !force && body.IsZero() && !h.bodyDl {
		return
	}
	h.idle, h.bodyDl = idle, !body.IsZero()
	switch {
	case idle:
		h.c.nc.SetReadDeadline(time.Now().Add(h.c.s.cfg.KeepAliveTimeout))
	case h.bodyDl:
		h.c.nc.SetReadDeadline(body)
	default:
		h.c.nc.SetReadDeadline(time.Time{})
	}
}

// bodyDeadlineLocked: HTTP/2 request bodies get HTTP/1.1's minimum rate (deadline.go), per
// stream: a stream's body must come at BodyMinRate on average after BodyGrace, from its
// head. The framer hands over a DATA frame only when whole, so a frame's bytes count once
// it is complete and each stream is given one more maximal frame's time. A stream the
// flow control holds back (its window or the connection's is closed: the application has
// not read what came) has its clock started again. The earliest deadline (zero: none);
// when it passes, the connection fails with ENHANCE_YOUR_CALM (the read may have stopped
// inside a frame: the framing cannot go on) and its streams see a disconnect.
func (h *h2Conn) bodyDeadlineLocked() time.Time {
	cfg := &h.c.s.cfg
	var first, now time.Time
	for _, st := range h.streams {
		if st.remoteDone || st.bodyAt.IsZero() || st.r.lost {
			continue
		}
		if st.recvWin <= 0 || h.recvWin <= 0 {
			if now.IsZero() {
				now = time.Now()
			}
			st.bodyAt, st.bodyBase = now, st.received
			continue
		}
		credit := time.Duration(float64(st.received-st.bodyBase+h2MaxFrame) / float64(cfg.BodyMinRate) * float64(time.Second))
		if d := st.bodyAt.Add(cfg.BodyGrace + credit); first.IsZero() || d.Before(first) {
			first = d
		}
	}
	return first
}

func (h *h2Conn) pushBatch() { h.c.pushBatch(true) }

// fail sends GOAWAY with code, drops the streams (their applications see a disconnect)
// and closes the connection: after the output is written, the write side is shut and what
// the client still sends is read and dropped for a second, so that the client reads the
// GOAWAY (closing with unread input would reset the connection and lose it).
func (h *h2Conn) fail(code http2.ErrCode) {
	c := h.c
	h.pushBatch()
	c.mu.Lock()
	if !c.closed {
		h.fr.WriteGoAway(h.maxID, code, nil)
		h.goaway = true
		for _, st := range h.streams {
			h.dropLocked(st)
		}
		h.pushBatch()
	}
	c.mu.Unlock()
	c.flush()
	end := time.Now().Add(time.Second)
	c.nc.SetWriteDeadline(end)
	for {
		c.mu.Lock()
		done := c.closed || (len(c.out) == 0 && !c.writing)
		c.mu.Unlock()
		if done || time.Now().After(end) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.shutWrite()
	c.nc.SetReadDeadline(end)
	io.Copy(io.Discard, h.br)
	c.lost()
}

// frame handles one frame; false: a connection error with code.
func (h *h2Conn) frame(f http2.Frame) (http2.ErrCode, bool) {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return h.onHeaders(f)
	case *http2.DataFrame:
		return h.onData(f)
	case *http2.WindowUpdateFrame:
		inc := int64(f.Increment)
		if f.StreamID == 0 {
			if h.sendWin+inc > 1<<31-1 {
				return http2.ErrCodeFlowControl, false
			}
			h.sendWin += inc
			h.pumpLocked()
		} else if st := h.streams[f.StreamID]; st != nil {
			if st.sendWin+inc > 1<<31-1 {
				h.resetLocked(st.id, http2.ErrCodeFlowControl)
				return 0, true
			}
			st.sendWin += inc
			h.writeDataLocked(st)
		} else if f.StreamID > h.maxID {
			return http2.ErrCodeProtocol, false // an idle stream
		}
		h.drainedLocked()
	case *http2.SettingsFrame:
		if f.IsAck() {
			return 0, true
		}
		var bad http2.ErrCode
		f.ForeachSetting(func(s http2.Setting) error {
			if code := h.settingLocked(s); code != 0 {
				bad = code
			}
			return nil
		})
		if bad != 0 {
			return bad, false
		}
		h.fr.WriteSettingsAck()
		h.pumpLocked()
		return h.controlOut()
	case *http2.PingFrame:
		if !f.IsAck() {
			h.fr.WritePing(true, f.Data)
			return h.controlOut()
		}
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID { // its own dependency: a stream error (RFC 7540 5.3.1)
			h.maxID = max(h.maxID, f.StreamID) // an idle stream is closed by it
			h.resetLocked(f.StreamID, http2.ErrCodeProtocol)
		}
	case *http2.RSTStreamFrame:
		return h.onReset(f.StreamID)
	case *http2.GoAwayFrame:
		h.goaway = true
		c.closing = true
		h.maybeCloseLocked()
	case *http2.PushPromiseFrame:
		return http2.ErrCodeProtocol, false
	}
	return 0, true
}

// settingLocked applies one of the peer's settings (a SETTINGS frame's, or HTTP2-Settings'
// of an h2c upgrade); non-zero: the connection error it is.
func (h *h2Conn) settingLocked(s http2.Setting) http2.ErrCode {
	if err := s.Valid(); err != nil {
		if ce, ok := err.(http2.ConnectionError); ok {
			return http2.ErrCode(ce)
		}
		return http2.ErrCodeProtocol
	}
	switch s.ID {
	case http2.SettingInitialWindowSize:
		d := int64(s.Val) - h.peerInit
		h.peerInit = int64(s.Val)
		for _, st := range h.streams {
			st.sendWin += d
		}
	case http2.SettingMaxFrameSize:
		h.peerFrame = int(s.Val)
	case http2.SettingHeaderTableSize:
		h.enc.SetMaxDynamicTableSizeLimit(s.Val)
	}
	return 0
}

// controlOut: a peer that makes us answer (PING, SETTINGS) without reading is dropped.
func (h *h2Conn) controlOut() (http2.ErrCode, bool) {
	if len(h.c.out) > h2MaxControlOut+h.c.s.cfg.WriteBuffer {
		return http2.ErrCodeEnhanceYourCalm, false
	}
	return 0, true
}

// connection-specific header fields, malformed in HTTP/2 requests (RFC 9113 8.2.2) and
// dropped from responses.
func connSpecific(name string) bool {
	switch name {
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
		return true
	}
	return false
}

func (h *h2Conn) onHeaders(f *http2.MetaHeadersFrame) (http2.ErrCode, bool) {
	c := h.c
	id := f.StreamID
	if id%2 == 0 {
		return http2.ErrCodeProtocol, false
	}
	if f.HasPriority() && f.Priority.StreamDep == id { // its own dependency: a stream error (RFC 7540 5.3.1)
		h.maxID = max(h.maxID, id)
		h.resetLocked(id, http2.ErrCodeProtocol)
		return 0, true
	}
	if st := h.streams[id]; st != nil { // trailers: they end the request (not in ASGI)
		if !f.StreamEnded() || st.remoteDone {
			return http2.ErrCodeProtocol, false
		}
		return h.endRemoteLocked(st)
	}
	if id <= h.maxID {
		return http2.ErrCodeStreamClosed, false
	}
	h.maxID = id
	if h.goaway {
		return 0, true
	}
	if len(h.streams) >= h2MaxStreams {
		h.fr.WriteRSTStream(id, http2.ErrCodeRefusedStream)
		c.dirtyLocked()
		return 0, true
	}
	method, path, authority := f.PseudoValue("method"), f.PseudoValue("path"), f.PseudoValue("authority")
	// malformed (RFC 9113 8.3.1): a request other than CONNECT (not served) has :method,
	// :scheme and :path
	if method == "" || path == "" || f.PseudoValue("scheme") == "" || method == "CONNECT" || (path[0] != '/' && !(path == "*" && method == "OPTIONS")) {
		h.fr.WriteRSTStream(id, http2.ErrCodeProtocol)
		c.dirtyLocked()
		return 0, true
	}
	r := &Request{c: c, clen: -1, Major: 2}
	st := h.newStream(id, r)
	fields := f.RegularFields()
	hasHost := false
	var cookie []byte
	for _, hf := range fields {
		switch {
		case connSpecific(hf.Name), hf.Name == "te" && hf.Value != "trailers":
			h.fr.WriteRSTStream(id, http2.ErrCodeProtocol)
			c.dirtyLocked()
			return 0, true
		case hf.Name == "host":
			hasHost = true
		case hf.Name == "expect":
			r.noteHeader([]byte(hf.Name), []byte(hf.Value)) // 100-continue (spec.go)
		case hf.Name == "content-length":
			n, err := strconv.ParseInt(hf.Value, 10, 64)
			if err != nil || n < 0 || (st.declared >= 0 && st.declared != n) {
				h.fr.WriteRSTStream(id, http2.ErrCodeProtocol)
				c.dirtyLocked()
				return 0, true
			}
			st.declared = n
		}
	}
	if authority != "" && !hasHost { // as hypercorn: :authority is the host header
		r.Blob = append(r.Blob, "host"...)
		r.Ends = append(r.Ends, int32(len(r.Blob)))
		r.Blob = append(r.Blob, authority...)
		r.Ends = append(r.Ends, int32(len(r.Blob)))
	}
	for _, hf := range fields {
		if hf.Name == "cookie" { // split crumbs are one header again (RFC 9113 8.2.3)
			if cookie != nil {
				cookie = append(cookie, "; "...)
			}
			cookie = append(cookie, hf.Value...)
			continue
		}
		r.Blob = append(r.Blob, hf.Name...)
		r.Ends = append(r.Ends, int32(len(r.Blob)))
		r.Blob = append(r.Blob, hf.Value...)
		r.Ends = append(r.Ends, int32(len(r.Blob)))
	}
	if cookie != nil {
		r.Blob = append(r.Blob, "cookie"...)
		r.Ends = append(r.Ends, int32(len(r.Blob)))
		r.Blob = append(r.Blob, cookie...)
		r.Ends = append(r.Ends, int32(len(r.Blob)))
	}
	if i := strings.IndexByte(path, '#'); i >= 0 {
		path = path[:i] // a fragment is not part of :path (RFC 9113 8.3.1): stripped, as HTTP/1.1
	}
	r.target = append(r.target, path...)
	r.finishHead([]byte(method))
	r.head = method == "HEAD"
	if c.s.proxy != nil {
		c.applyProxy(r) // X-Forwarded-* of each stream, as of each HTTP/1.1 request
	}
	return h.openLocked(st, f.StreamEnded())
}

// openLocked makes st (its request's head complete) an open stream and queues its
// request; ended: the client's END_STREAM came with the head.
func (h *h2Conn) openLocked(st *h2Stream, ended bool) (http2.ErrCode, bool) {
	c := h.c
	r := st.r
	h.streams[st.id] = st
	if lim := c.s.cfg.LimitConcurrency; (lim > 0 && c.s.inflight.Load() >= int64(lim)) || c.closing {
		r.own = true
		r.bodyDone = true // what follows is not read
		r.started, r.status = true, 503
		r.hdr = append(r.hdr, "content-type: text/plain; charset=utf-8\r\n"...)
		r.appDone = true
		h.sendLocked(st, []byte("Service Unavailable"), false)
		return 0, true
	}
	r.dispatched = true
	c.s.inflight.Add(1)
	c.s.requests.Add(1)
	c.batch = append(c.batch, Event{Kind: EvRequest, Req: r})
	if ended {
		return h.endRemoteLocked(st)
	}
	if c.s.cfg.BodyMinRate > 0 {
		st.bodyAt, h.bodyNew = time.Now(), true
	}
	return 0, true
}

// endRemoteLocked: the client's END_STREAM on st.
func (h *h2Conn) endRemoteLocked(st *h2Stream) (http2.ErrCode, bool) {
	st.remoteDone = true
	if st.declared >= 0 && st.received != st.declared {
		h.resetLocked(st.id, http2.ErrCodeProtocol)
		return 0, true
	}
	r := st.r
	r.bodyDone = true
	h.c.wakeLocked(r, &h.c.batch)
	if st.endSent {
		h.removeLocked(st)
	}
	return 0, true
}

func (h *h2Conn) onData(f *http2.DataFrame) (http2.ErrCode, bool) {
	c := h.c
	n := int64(f.Length)
	if n > h.recvWin {
		return http2.ErrCodeFlowControl, false
	}
	h.recvWin -= n
	st := h.streams[f.StreamID]
	if st == nil || st.remoteDone {
		if f.StreamID > h.maxID {
			return http2.ErrCodeProtocol, false
		}
		h.giveBackLocked(n) // a closed stream: the connection's window is ours again
		if st != nil {      // half-closed (remote): a stream error
			h.resetLocked(st.id, http2.ErrCodeStreamClosed)
			return 0, true
		}
		switch h.ended[f.StreamID] {
		case closedNormal: // after both sides' END_STREAM: a connection error
			return http2.ErrCodeStreamClosed, false
		case closedByPeer: // after the client's RST_STREAM: a stream error
			h.fr.WriteRSTStream(f.StreamID, http2.ErrCodeStreamClosed)
			h.c.dirtyLocked()
			return h.controlOut() // (a client that does not read its answers is dropped)
		} // after our RST_STREAM (or closed long ago): ignored, it may have been in flight
		return 0, true
	}
	if n > st.recvWin {
		h.giveBackLocked(n)
		h.resetLocked(st.id, http2.ErrCodeFlowControl)
		return 0, true
	}
	st.recvWin -= n
	data := f.Data()
	if pad := n - int64(len(data)); pad > 0 { // padding is consumed at once
		st.unacked += pad
		h.giveBackLocked(pad)
	}
	st.received += int64(len(data))
	if st.declared >= 0 && st.received > st.declared {
		h.resetLocked(st.id, http2.ErrCodeProtocol)
		return 0, true
	}
	r := st.r
	if r.own || r.lost {
		h.giveBackLocked(int64(len(data)))
	} else if len(data) > 0 {
		c.bodyLocked(r, data)
	}
	if f.StreamEnded() {
		return h.endRemoteLocked(st)
	}
	return 0, true
}

// giveBackLocked returns n consumed bytes to the connection's receive window (a
// WINDOW_UPDATE once half of it is consumed).
func (h *h2Conn) giveBackLocked(n int64) {
	h.connUnacked += n
	if h.connUnacked >= h2ConnWindow/2 {
		h.fr.WriteWindowUpdate(0, uint32(h.connUnacked))
		h.recvWin += h.connUnacked
		h.connUnacked = 0
		h.c.dirtyLocked()
	}
}

// consumedLocked: the application took n body bytes of st.
func (h *h2Conn) consumedLocked(st *h2Stream, n int64) {
	if !st.remoteDone {
		st.unacked += n
		if st.unacked >= h2StreamWindow/2 {
			h.fr.WriteWindowUpdate(st.id, uint32(st.unacked))
			st.recvWin += st.unacked
			st.unacked = 0
			h.c.dirtyLocked()
		}
	}
	h.giveBackLocked(n)
}

func (h *h2Conn) onReset(id uint32) (http2.ErrCode, bool) {
	if id > h.maxID {
		return http2.ErrCodeProtocol, false
	}
	st := h.streams[id]
	if st == nil {
		return 0, true
	}
	r := st.r
	early := !r.done
	st.how = closedByPeer
	h.dropLocked(st)
	if early { // rapid reset (CVE-2023-44487): a client that cancels too fast goes away
		now := time.Now()
		if now.Sub(h.resetStart) > time.Second {
			h.resetStart, h.resets = now, 0
		}
		h.resets++
		if h.resets > h.maxResets {
			return http2.ErrCodeEnhanceYourCalm, false
		}
	}
	return 0, true
}

// dropLocked ends st from the client's side or ours: its application sees a disconnect
// (a request not yet handed to it is withdrawn), its buffered body returns the window.
func (h *h2Conn) dropLocked(st *h2Stream) {
	c := h.c
	r := st.r
	if !r.lost {
		r.lost = true
		for i := len(c.batch) - 1; i >= 0; i-- { // not yet queued: never started
			if c.batch[i].Req == r && c.batch[i].Kind == EvRequest {
				c.batch = append(c.batch[:i], c.batch[i+1:]...)
				c.s.inflight.Add(-1)
				r.appDone = true
				break
			}
		}
		c.wakeLocked(r, &c.batch)
	}
	if len(r.body) > 0 {
		h.giveBackLocked(int64(len(r.body)))
		r.body = nil
	}
	h.dropPendingLocked(st)
	h.closeFileLocked(st)
	h.removeLocked(st)
	h.wakeLocked() // its copies left the connection's bound: others may have room
}

// dropPendingLocked forgets st's pending bytes (a held body is released).
func (h *h2Conn) dropPendingLocked(st *h2Stream) {
	if st.pendRel == nil {
		h.copied -= len(st.pending)
	}
	st.pending = nil
	st.releasePending()
}

// releasePending releases the held body pending was (it no longer refers to it).
func (st *h2Stream) releasePending() {
	if rel := st.pendRel; rel != nil {
		st.pendRel = nil
		rel()
	}
}

// resetLocked sends RST_STREAM for id and drops the stream if it is open.
func (h *h2Conn) resetLocked(id uint32, code http2.ErrCode) {
	h.fr.WriteRSTStream(id, code)
	h.c.dirtyLocked()
	if st := h.streams[id]; st != nil {
		st.how = closedByUs
		h.dropLocked(st)
	} else {
		h.endedLocked(id, closedByUs)
	}
}

// endedLocked remembers how stream id closed (the last h2ClosedKept of them).
func (h *h2Conn) endedLocked(id uint32, how uint8) {
	if h.ended == nil {
		h.ended = make(map[uint32]uint8, h2ClosedKept)
		h.endedIDs = make([]uint32, h2ClosedKept)
	}
	if old := h.endedIDs[h.endedNext]; old != 0 {
		delete(h.ended, old)
	}
	h.endedIDs[h.endedNext] = id
	h.endedNext = (h.endedNext + 1) % h2ClosedKept
	h.ended[id] = how
}

func (h *h2Conn) removeLocked(st *h2Stream) {
	if st.gone {
		return
	}
	st.gone = true
	delete(h.streams, st.id)
	if st.how == 0 {
		st.how = closedNormal
	}
	h.endedLocked(st.id, st.how)
	if len(h.streams) == 0 {
		if !h.c.closing {
			h.idle = true
			h.c.nc.SetReadDeadline(time.Now().Add(h.c.s.cfg.KeepAliveTimeout))
		}
		h.maybeCloseLocked()
	}
}

// maybeCloseLocked closes a closing connection with no stream left and its output written.
func (h *h2Conn) maybeCloseLocked() {
	c := h.c
	if c.closing && len(h.streams) == 0 && len(c.out) == 0 && !c.writing && !c.closed {
		c.closeLocked()
	}
}

// input: an h2Conn reads from its own buffered reader (newH2 takes the first bytes).
func (h *h2Conn) input([]byte) {}

// drainedLocked (Conn.drainedLocked's HTTP/2 part): the output is written; the DATA and
// files that waited for room go on (pumpLocked), the senders that have room again are
// woken, and the connection closes if it is done.
func (h *h2Conn) drainedLocked() bool {
	c := h.c
	if len(c.out) == 0 && !c.writing {
		h.pumpLocked()
		if len(c.out) > 0 {
			c.writing = true
			go c.writer()
		}
	}
	h.wakeLocked()
	if len(c.out) == 0 && !c.writing {
		h.maybeCloseLocked()
	}
	return true
}

// The output's bound on an HTTP/2 connection is the connection's, whatever its streams
// (one client may open h2MaxStreams of them): what it holds in Go's memory, its output
// (c.out) and the copies in its streams' pending bytes (queuedLocked), is kept near
// WriteBuffer. A sender waits (SendPaused) while it is over and its own stream has
// bytes pending (one whose parts all went into the output is not held back by another
// stream's), and while its own stream still holds a body by reference (SendHeldAnywhere:
// the application's memory, which its paused send keeps alive anyway; never copied to
// append the next part); a part that comes while the connection is over the bound is
// held, not copied, when its sender allows it (the ASGI binding on HTTP/2 does for every
// part; WSGI's parts over GL_WSGI_HOLD_MAX), so the connection holds at most WriteBuffer
// and one part (a part that cannot be held: one per stream). DATA frames go into the
// output only while it is under WriteBuffer (writeDataLocked): a client that opens large
// windows and does not read gets no more. When the output drains, the pump fills it again
// one frame per stream in turn (round robin from the stream after the one that wrote
// first last time), and every waiting sender with room again is woken at once: none is
// left waiting behind the others.

// queuedLocked is what the connection holds of its responses in Go's memory.
func (h *h2Conn) queuedLocked() int { return len(h.c.out) + h.copied }

// pumpLocked writes the streams' pending DATA (and files) into the output while it is
// under WriteBuffer and the windows allow, a frame per stream in turn.
func (h *h2Conn) pumpLocked() {
	c := h.c
	ids := h.rrIDs[:0]
	for id, st := range h.streams {
		if len(st.pending) > 0 || st.file != nil || st.endPending {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	slices.Sort(ids)
	i, _ := slices.BinarySearch(ids, h.rrAfter+1) // the first after the last round's first
	if i == len(ids) {
		i = 0
	}
	ids = append(ids[i:], ids[:i]...)
	var first uint32 // the first stream that wrote: the next pump begins after it
	for more := true; more && len(c.out) < c.s.cfg.WriteBuffer; {
		more = false
		for _, id := range ids {
			if st := h.streams[id]; st != nil && len(c.out) < c.s.cfg.WriteBuffer {
				at := len(c.out)
				h.writeDataNLocked(st, 1)
				if len(c.out) > at {
					more = more || !st.gone
					if first == 0 {
						first = id
					}
				}
			}
		}
	}
	if first != 0 {
		h.rrAfter = first
	}
	h.rrIDs = ids[:0]
}

// wakeLocked wakes the paused senders that may go on (readyLocked).
func (h *h2Conn) wakeLocked() {
	for _, st := range h.streams {
		if st.r.waitSend && st.readyLocked() {
			h.c.wakeLocked(st.r, nil)
		}
	}
}

// Clients slow to read, HTTP/2's part (writerate.go has the socket's): a client may keep
// its flow-control windows shut while the socket takes everything, so the minimum response
// rate's clock also runs while a stream's DATA waits for the client's windows: from the
// moment one first did (flowAt), the client must let RespMinRate bytes/s of DATA go on
// average after RespGrace (deadline = flowAt + grace + DATA written since / rate). A timer
// looks at the deadline; past it, if a stream still waits for a window, the connection is
// lost (its streams' applications see a disconnect, a WSGI thread waiting to send is
// freed) and respTimeouts counts it; else the clock stops.

// flowWaitLocked: a stream's DATA waits for the client's windows: the clock starts unless
// it runs.
func (h *h2Conn) flowWaitLocked() {
	cfg := &h.c.s.cfg
	if cfg.RespMinRate < 0 || !h.flowAt.IsZero() || h.c.closed {
		return
	}
	h.flowAt, h.flowBase = time.Now(), h.dataSent
	d := h.flowDeadlineLocked().Sub(h.flowAt)
	if h.flowTimer == nil {
		h.flowTimer = time.AfterFunc(d, h.flowExpired)
	} else {
		h.flowTimer.Reset(d)
	}
}

// flowDeadlineLocked is when the client must have let the DATA since flowAt go.
func (h *h2Conn) flowDeadlineLocked() time.Time {
	cfg := &h.c.s.cfg
	credit := time.Duration(float64(h.dataSent-h.flowBase) / float64(cfg.RespMinRate) * float64(time.Second))
	return h.flowAt.Add(cfg.RespGrace + credit)
}

// flowExpired is the clock's timer: a later deadline (the client let DATA go meanwhile)
// re-arms it; past it, a stream still waiting for a window loses the connection.
func (h *h2Conn) flowExpired() {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || h.flowAt.IsZero() {
		return
	}
	if d := time.Until(h.flowDeadlineLocked()); d > 0 {
		h.flowTimer.Reset(d)
		return
	}
	for _, st := range h.streams {
		if (len(st.pending) > 0 || st.file != nil) && (st.sendWin <= 0 || h.sendWin <= 0) {
			c.s.ctr.respTimeouts.Add(1)
			c.lostLocked()
			return
		}
	}
	h.flowAt = time.Time{} // nothing waits for a window now
}

// lostLocked (Conn.lostLocked's HTTP/2 part): every stream's application sees a disconnect.
func (h *h2Conn) lostLocked() {
	if h.flowTimer != nil {
		h.flowTimer.Stop()
	}
	for _, st := range h.streams {
		st.r.lost = true
		h.c.wakeLocked(st.r, nil)
		st.gone = true
		h.closeFileLocked(st)
		h.dropPendingLocked(st)
	}
	clear(h.streams)
}

// shutdown (Server.Close): GOAWAY; the streams in progress finish, then the connection closes.
func (h *h2Conn) shutdown() {
	c := h.c
	c.mu.Lock()
	if !c.closed && !h.goaway {
		h.fr.WriteGoAway(h.maxID, http2.ErrCodeNo, nil)
	}
	h.goaway = true
	c.closing = true
	c.mu.Unlock()
	c.flush()
	c.mu.Lock()
	h.maybeCloseLocked()
	c.mu.Unlock()
}

// ---- the application's side: *h2Stream is its Request's protocol (exchange.go) ----

func (st *h2Stream) tookBodyLocked(n int) bool {
	if n == 0 {
		return false
	}
	out := len(st.h.c.out)
	st.h.consumedLocked(st, int64(n))
	return len(st.h.c.out) > out
}

// continueLocked: a HEADERS frame with :status 100.
func (st *h2Stream) continueLocked() {
	if st.gone {
		return
	}
	h := st.h
	h.hb.Reset()
	h.enc.WriteField(hpack.HeaderField{Name: ":status", Value: "100"})
	h.writeBlockLocked(st.id, false)
	h.c.dirtyLocked()
}

// send queues a body part: bytes as DATA frames as the windows allow (the rest pending),
// a file (pathsend, zerocopysend) read a frame at a time as they allow.
func (st *h2Stream) send(part bodyPart, more bool, notStarted error) (flags int, held bool, err error) {
	r, h, c := st.r, st.h, st.h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := r.refuseLocked(part, notStarted); err != nil {
		return 0, false, err
	}
	switch {
	case part.f != nil && part.clamp:
		return 0, false, h.sendFileLocked(st, part.f, part.n)
	case part.f != nil:
		flags, err = h.sendFDLocked(st, part.f, part.off, part.n, more)
		return flags, false, err
	}
	// a large body on a stream with nothing pending is held (SendHeld), not copied: the
	// window may let none of it go for long (a client that does not read), and a copy of
	// each stream's part would cost its size per stream
	// (a small one too when the connection is over its bound: the sender waits then, and
	// the part is its memory while it does)
	offered := part.rel != nil && part.relAny && len(st.pending) == 0 && st.pendRel == nil &&
		(len(part.b) >= HoldMin || h.queuedLocked()+len(part.b) > c.s.cfg.WriteBuffer)
	if offered {
		st.holdNext = part.rel
	}
	err = h.sendLocked(st, part.b, more)
	held = offered && st.holdNext == nil // taken by sendLocked (it sets holdNext to nil when it holds)
	st.holdNext = nil
	if err != nil {
		return 0, held, err
	}
	if !r.lost && !st.readyLocked() {
		if len(c.out) > c.s.cfg.WriteBuffer && !c.writing {
			c.mu.Unlock()
			c.flush()
			c.mu.Lock()
		}
		if !r.lost && !st.readyLocked() {
			r.waitSend = true
			flags |= SendPaused
		}
	}
	return flags, held, nil
}

func (st *h2Stream) completeWithLocked(body []byte) { st.h.sendLocked(st, body, false) }

// trailersLocked: a HEADERS frame of trailers ends the stream after its pending DATA.
func (st *h2Stream) trailersLocked() error {
	r := st.r
	st.trReady = true
	if !st.endSent {
		st.endPending = true
	}
	r.done = true
	if r.waitRecv {
		st.h.c.wakeLocked(r, nil)
	}
	st.h.writeDataLocked(st)
	return nil
}

// readyLocked: the stream's pending body is under WriteBuffer and holds no body by
// reference, it has none at all while the connection is over its bound (queuedLocked: a
// stream whose parts all went into the output is not held back by another's), and no
// zerocopysend part is still going out.
func (st *h2Stream) readyLocked() bool {
	if st.endSent || st.gone { // its response left: nothing to wait for (removed, it is woken no more)
		return true
	}
	wb := st.h.c.s.cfg.WriteBuffer
	return !(len(st.pending) > wb || st.pendRel != nil || len(st.pending) > 0 && st.h.queuedLocked() > wb ||
		st.file != nil)
}

// cutLocked: a response started and not complete resets the stream.
func (st *h2Stream) cutLocked(bool) {
	st.r.done = true
	st.h.resetLocked(st.id, http2.ErrCodeInternal)
}

// sendLocked adds a part of st's response: HEADERS first, then DATA as the windows allow.
func (h *h2Conn) sendLocked(st *h2Stream, body []byte, more bool) error {
	c := h.c
	r := st.r
	if !r.headSent {
		r.noBody = r.head || r.status < 200 || r.status == 204 || r.status == 304
		h.hb.Reset()
		h.enc.WriteField(hpack.HeaderField{Name: ":status", Value: strconv.Itoa(r.status)})
		for _, kv := range c.s.h2Extra() {
			h.enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
		}
		if c.s.cfg.DateHeader {
			d := dateHeader() // "date: ...\r\n"
			h.enc.WriteField(hpack.HeaderField{Name: "date", Value: string(d[6 : len(d)-2])})
		}
		r.clen = -1
		scanHeaders(r.hdr, func(name, value []byte) {
			n := strings.ToLower(string(name))
			if connSpecific(n) {
				return
			}
			if n == "content-length" {
				if v, err := strconv.ParseInt(string(value), 10, 64); err == nil && v >= 0 {
					r.clen = v
				}
			}
			h.enc.WriteField(hpack.HeaderField{Name: n, Value: string(value)})
		})
		short := !more && !r.noBody && r.clen >= 0 && int64(len(body)) < r.clen
		end := !more && (len(body) == 0 || r.noBody) && !r.trailers && !short
		h.writeBlockLocked(st.id, end)
		r.headSent = true
		if end {
			st.endSent = true
		}
	}
	if len(body) > 0 && !r.noBody {
		if r.clen >= 0 && r.sent+int64(len(body)) > r.clen {
			return ErrTooLong
		}
		if err := h.fileToPendingLocked(st); err != nil {
			return err
		}
		if st.holdNext != nil && len(st.pending) == 0 && st.file == nil {
			st.pending, st.pendRel, st.holdNext = body[:len(body):len(body)], st.holdNext, nil
		} else {
			h.ownPendingLocked(st)
			st.pending = append(st.pending, body...)
			h.copied += len(body)
		}
		r.sent += int64(len(body))
	}
	if !more && !r.noBody && r.clen >= 0 && r.sent < r.clen {
		// no END_STREAM: the stream is reset when the application returns (cutLocked)
		r.bodyEnd = true
		h.writeDataLocked(st)
		c.dirtyLocked()
		return ErrTooShort
	}
	if !more {
		h.endBodyLocked(st)
	}
	h.writeDataLocked(st)
	c.dirtyLocked()
	return nil
}

// endBodyLocked: st's final body part (or file) is queued; the stream ends after it (or
// after the trailers, spec.go).
func (h *h2Conn) endBodyLocked(st *h2Stream) {
	r := st.r
	r.bodyEnd = true
	if r.trailers { // a HEADERS frame of trailers ends the stream
		r.keepTr = true
		return
	}
	if !st.endSent {
		st.endPending = true
	}
	r.done = true
	if r.waitRecv {
		h.c.wakeLocked(r, nil)
	}
}

// writeBlockLocked writes the header block in h.hb as a HEADERS frame for stream id,
// followed by CONTINUATIONs past the peer's frame size.
func (h *h2Conn) writeBlockLocked(id uint32, end bool) {
	blk := h.hb.Bytes()
	first := min(len(blk), h.peerFrame)
	h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: blk[:first],
		EndStream: end, EndHeaders: first == len(blk)})
	for blk = blk[first:]; len(blk) > 0; {
		n := min(len(blk), h.peerFrame)
		h.fr.WriteContinuation(id, n == len(blk), blk[:n])
		blk = blk[n:]
	}
}

// ownPendingLocked copies a held body's rest in st's pending bytes (released) to append to
// them (a sender that did not wait for it to leave).
func (h *h2Conn) ownPendingLocked(st *h2Stream) {
	if st.pendRel != nil {
		st.pending = append([]byte(nil), st.pending...)
		h.copied += len(st.pending)
		st.releasePending()
	}
}

// writeDataLocked writes st's pending body as DATA frames while both windows allow and
// the output is under WriteBuffer.
func (h *h2Conn) writeDataLocked(st *h2Stream) { h.writeDataNLocked(st, -1) }

// writeDataNLocked is writeDataLocked of at most frames frames of pending bytes (-1: no
// limit; a file's and END_STREAM's follow the last of them).
func (h *h2Conn) writeDataNLocked(st *h2Stream, frames int) {
	if st.gone {
		return
	}
	c := h.c
	for len(st.pending) > 0 && frames != 0 && len(c.out) < c.s.cfg.WriteBuffer {
		n := int64(min(len(st.pending), h.peerFrame))
		n = min(n, st.sendWin, h.sendWin)
		if n <= 0 {
			h.flowWaitLocked()
			break
		}
		end := st.endPending && int(n) == len(st.pending) && !st.trReady && st.file == nil
		h.fr.WriteData(st.id, end, st.pending[:n])
		st.pending = st.pending[n:]
		if st.pendRel == nil {
			h.copied -= int(n)
		}
		st.sendWin -= n
		h.sendWin -= n
		h.dataSent += n
		frames--
		if end {
			st.endPending, st.endSent = false, true
		}
	}
	if len(st.pending) == 0 {
		st.pending = nil
		st.releasePending()
		if st.file != nil && !h.fileDataLocked(st) {
			return // reset
		}
		if st.endPending && st.file == nil {
			if st.trReady {
				h.writeTrailersLocked(st)
			} else {
				h.fr.WriteData(st.id, true, nil)
			}
			st.endPending, st.endSent = false, true
		}
	}
	if st.endSent {
		if !st.remoteDone { // answered before the request's end: no more of it is wanted
			h.fr.WriteRSTStream(st.id, http2.ErrCodeNo)
			st.remoteDone = true
			st.how = closedByUs
			r := st.r
			if len(r.body) > 0 {
				h.giveBackLocked(int64(len(r.body)))
				r.body = nil
			}
			r.bodyDone, r.bodyTaken = true, true
		}
		if st.r.waitSend { // its last part left: a sender paused by it goes on
			h.c.wakeLocked(st.r, nil)
		}
		h.removeLocked(st)
	}
	h.c.dirtyLocked()
}
