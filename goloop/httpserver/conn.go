package httpserver

// conn.go: Conn, one connection, and its HTTP/1.1 reader (the goroutine driver's serve
// loop and the httpparser handler both drivers feed): requests queued for the
// application, their bodies, pipelining (a request's response waits behind the ones
// before it: advanceLocked), the server's own answers (400, 431, 503), close, loss and
// shutdown. Its output queue is outqueue.go's; the loop driver's reading loopdriver.go's.

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goloop/goloop/goloop/httpparser"
)

// Addr is one end of a connection as ASGI's scope gives it: host and port for TCP; for a
// Unix socket, Unix is set and Host is the socket's path (Port 0).
type Addr struct {
	Host string
	Port int
	Unix bool
}

func addrOf(a net.Addr) Addr {
	switch a := a.(type) {
	case *net.TCPAddr:
		return Addr{Host: a.IP.String(), Port: a.Port}
	case *net.UDPAddr: // QUIC (h3.go)
		return Addr{Host: a.IP.String(), Port: a.Port}
	case *net.UnixAddr:
		return Addr{Host: a.Name, Unix: true}
	}
	return Addr{}
}

// Conn is one connection: HTTP/1.1, and perhaps then what it switched to (next). Its
// reader (a goroutine, or the loop driver's readable events) reads and parses; the
// application's thread answers its requests (Request's methods) and flushes
// (Server.Flush). The state is grouped by who uses it: the output queue and the
// lifecycle under mu, the HTTP/1.1 reader's own, the protocol switched to, and the
// driver's (goroutine mode: nc; loop mode: connLoop; exactly one of c.nc and c.lp is set,
// and the checks on c.lp are where the two drivers differ).
type Conn struct {
	s      *Server
	nc     net.Conn        // goroutine mode: the socket (loop mode: nil)
	rc     syscall.RawConn // nc's descriptor, for the non-blocking write of Flush (nil over TLS)
	Remote Addr
	Local  Addr

	mu       sync.Mutex
	connOut  // under mu (outqueue.go)
	connLife // under mu
	connRead // the reader's own

	// next is the protocol the connection switched to from HTTP/1.1 (set by the reader,
	// under mu; nil: HTTP/1.1): *h2Conn (HTTP/2 by prior knowledge, ALPN or after h2c),
	// *WS (a WebSocket session, from its handshake request on) or *h2cUpgrade (an
	// `Upgrade: h2c` request being read, then *h2Conn).
	next switched

	q *h3Conn // an HTTP/3 connection's QUIC state (h3.go); nil: TCP

	connLoop // loop mode (loopdriver.go)
}

// connOut is a connection's output queue (outqueue.go; Conn.mu).
type connOut struct {
	inflight []*Request // dispatched, response not complete, in request order
	// the last of inflight, parsed while MaxPipeline requests were with the application
	// (the requests of one read are all parsed): handed over as those leave (undeferLocked)
	deferred []*Request
	out      []byte    // response bytes ready to be written, in order
	files    []fileSeg // files and held bodies to send at offsets of out
	heldN    int       // bytes of the held bodies in files (loop mode, SendHeld)
	writing  bool      // a flush or the writer goroutine owns the output (loop mode: it waits for writable)
	isDirty  bool      // in the server's dirty list
	// the minimum response rate's clock (writerate.go; atomics, any thread): since when
	// the output waits for the socket (monoNow, 0: it does not) and what it took since
	wAt, wN atomic.Int64
}

// connLife is a connection's lifecycle (Conn.mu).
type connLife struct {
	closing bool          // no more requests: close once the ones in flight are written
	closed  bool          //
	paused  bool          // the reader waits for room (wake)
	wake    chan struct{} // cap 1: room for the reader, or closed
	linger  bool          // close with a lingering close (spec.go)
	// output went out since the reader's keep-alive deadline was last looked at: the
	// connection's idle time counts from then (overdueLocked)
	answered bool
	// a request was dispatched; the server closes and c had none yet, so its first
	// request is still answered (connection: close) if it comes within a grace period
	served, lastOne bool
}

// connRead is the HTTP/1.1 reader's own state.
type connRead struct {
	p        *httpparser.Parser
	cur      *Request // the request being received (head or body)
	batch    []Event  // the last read's events, queued at once (pushBatch)
	stopRead bool
	deadline time.Time
	sniff    bool // the first read may turn the connection into HTTP/2 (h2.go)
	trust    int8 // proxy headers: 0 not known yet, 1 trusted peer, 2 not (proxy.go)

	// slow clients (deadline.go): the request whose head is being received and the read
	// that brought its first byte; the request whose body's rate is measured, since when,
	// and the bytes received since then
	headOf *Request
	headAt time.Time
	bodyOf *Request
	bodyAt time.Time
	bodyN  int64
}

// connLoop is a loop-mode connection's (loopdriver.go): the loop thread reads and writes
// the raw descriptor fd through the server's LoopPoller. lp is nil in goroutine mode (and
// after a hand-off to it). Under Conn.mu.
type connLoop struct {
	lp       LoopPoller
	fd       int    // -1 once closed or handed off (closed with fd >= 0: a lingering close drops the input)
	interest uint32 // registered with lp
	lread    bool   // read interest wanted (not stopped)
	lingerN  int    // bytes a lingering close may still drop
	// a finished request the reader's next newRequest reuses (Config.ReuseRequests; set
	// by Finish on the application's thread, taken by the reader: atomic)
	spare atomic.Pointer[Request]
}

// bodyMem holds the memory of bodies TakeWhole copied out and of parts Receive returned and
// its caller released (*[]byte, length 0), for the next bodies read, on any connection: a
// sync.Pool, so an idle connection keeps none of it and what is not taken again goes with
// the garbage collector's cycles.
var bodyMem sync.Pool

// keepBodyMem puts b's memory into bodyMem (its contents copied out, b not used after),
// unless it is larger than a body read without pausing grows to: BodyBuffer unread, one
// read more, and append's margin.
func (c *Conn) keepBodyMem(b []byte) {
	if cap(b) > 0 && cap(b) <= 2*(c.s.cfg.BodyBuffer+loopReadBuffer) {
		b = b[:0]
		bodyMem.Put(&b)
	}
}

// switched is a protocol a connection switched to from HTTP/1.1 (Conn.next).
type switched interface {
	// serve reads the protocol (on the connection's goroutine, after a loop-mode hand-off).
	serve()
	// input takes what followed the upgrade point in the last HTTP/1.1 read.
	input(b []byte)
	// drainedLocked: the output drained; false: HTTP/1.1's handling applies (the
	// requests in flight, a WebSocket session's among them).
	drainedLocked() bool
	// lostLocked: the connection is lost (its requests in flight are HTTP/1.1's to end).
	lostLocked()
}

func newConn(s *Server, nc net.Conn) *Conn {
	c := &Conn{s: s, Remote: addrOf(nc.RemoteAddr()), Local: addrOf(nc.LocalAddr())}
	c.fd = -1
	c.setNetConn(nc)
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	c.init()
	return c
}

// setNetConn makes nc the connection's socket (goroutine mode).
func (c *Conn) setNetConn(nc net.Conn) {
	c.nc = nc
	if t, ok := nc.(*tlsConn); ok {
		t.sink.conn = c // its blocking writes report progress to the rate clock (writerate.go)
	}
	if sc, ok := nc.(syscall.Conn); ok {
		c.rc, _ = sc.SyscallConn()
	}
}

// init makes the connection's parser and wake-up channel (both drivers).
func (c *Conn) init() {
	s := c.s
	c.wake = make(chan struct{}, 1)
	c.sniff = !s.cfg.NoH2
	c.p = httpparser.NewRequestParser(c)
	c.p.MaxHeaderSize = s.cfg.MaxHeadSize
	c.p.UpgradeSkipsBody = true
	// LenientVersion: any HTTP/<digit>.<digit> is parsed, so that OnHeadersComplete can
	// answer one other than 1.0 and 1.1 with 505 (a malformed version stays a 400)
	c.p.SetLeniencies(httpparser.LenientDataAfterClose | httpparser.LenientVersion)
	c.p.Want = httpparser.WantMessageBegin | httpparser.WantURL | httpparser.WantHeader |
		httpparser.WantHeadersComplete | httpparser.WantBody | httpparser.WantMessageComplete
}

// guard ends the connection if the reader panics (deferred by readers and handlers).
func (c *Conn) guard() {
	if r := recover(); r != nil {
		c.lost()
	}
}

// serve is the connection's goroutine: read, parse, queue the requests.
func (c *Conn) serve() {
	defer c.guard()
	buf := make([]byte, 16*1024)
	ka := c.s.cfg.KeepAliveTimeout
	for {
		if !c.waitRoom() {
			return
		}
		now := time.Now()
		c.mu.Lock()
		want, kind := c.readDeadlineLocked(now)
		c.mu.Unlock()
		// the keep-alive deadline is pushed only when 3/4 of it are left (a read deadline
		// costs a timer update); a head's or a body's may only bring it forward
		if want.Before(c.deadline) || kind == dlIdle && c.deadline.Sub(now) < ka*3/4 {
			c.deadline = want
			c.nc.SetReadDeadline(want)
		}
		n, err := c.nc.Read(buf)
		if c.sniff {
			if c.sniff = false; n > 0 && c.startH2(buf[:n]) {
				return
			}
			if c.s.cfg.H2Only { // not HTTP/2: closed without an answer (RFC 9113 3.4)
				c.lost()
				return
			}
		}
		if n > 0 {
			c.feed(buf[:n])
		}
		c.pushBatch(true)
		if c.stopRead {
			if serve := c.upgraded(); serve != nil {
				serve() // the goroutine serves the protocol switched to
			}
			return
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.mu.Lock()
				kind, next := c.overdueLocked(time.Now())
				c.mu.Unlock()
				if kind != dlIdle {
					c.timedOut(kind) // 408; the answer's lingering close ends the connection
					return
				}
				if !next.IsZero() { // busy, or a head's or body's bound is later
					c.deadline = next
					c.nc.SetReadDeadline(next)
					continue
				}
			}
			c.lost()
			return
		}
	}
}

// pushBatch queues the requests and wake-ups of the last read; notify: as push (the
// goroutine drivers), or not (the loop driver's reads: the loop takes the queue after the
// poll's events).
func (c *Conn) pushBatch(notify bool) {
	if len(c.batch) == 0 {
		return
	}
	if c.s.static != nil {
		c.staticBatch() // answered by Go (static.go), before the application sees them
	}
	if c.s.pushQuiet(c.batch) && notify && c.s.cfg.Notify != nil {
		c.s.cfg.Notify()
	}
	clear(c.batch)
	c.batch = c.batch[:0]
}

// busyLocked: a request is in flight or output waits (c.mu held): not idle.
func (c *Conn) busyLocked() bool {
	return len(c.inflight) > 0 || c.writing || !c.idleOutLocked()
}

// waitRoom blocks while the connection has as many requests in flight as it may, or the
// request being received holds as much unread body as it may. False: the connection closed.
func (c *Conn) waitRoom() bool {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return false
		}
		full := c.fullLocked()
		c.paused = full
		c.mu.Unlock()
		if !full {
			return true
		}
		<-c.wake
	}
}

// fullLocked: the connection has as many requests in flight as it may, or the request
// being received holds as much unread body as it may, or the requests after the first
// hold too much output, or between requests the output not yet written is over its bound
// (a client that sends requests and reads no answer: each answered request leaves the
// pipeline, its answer queued): reading stops (c.mu held) until the output is written
// (drainedLocked). Not in the middle of a body: a client may send all of it before it
// reads the answer the application already sends.
func (c *Conn) fullLocked() bool {
	return len(c.inflight) >= c.s.cfg.MaxPipeline ||
		(c.cur != nil && c.cur.dispatched && len(c.cur.body) > c.s.cfg.BodyBuffer) ||
		(len(c.inflight) > 1 && c.heldLocked() > maxHeld) ||
		(c.next == nil && (c.cur == nil || !c.cur.dispatched) && c.outFullLocked())
}

// room wakes the reader if it waits for room (c.mu held).
func (c *Conn) roomLocked() {
	if c.paused {
		if c.lp != nil {
			c.loopRoomLocked()
			return
		}
		c.paused = false
		c.wakeReader()
	}
}

// upgraded is what serves the connection once reading HTTP/1.1 stopped at an upgrade
// point: the WebSocket session (ws.go), or HTTP/2 after `Upgrade: h2c` (h2c.go); nil:
// neither, the connection ends.
func (c *Conn) upgraded() func() {
	if c.next != nil {
		return c.next.serve
	}
	return nil
}

func (c *Conn) feed(data []byte) {
	err := c.p.Feed(data)
	if err == nil {
		return
	}
	var ue *httpparser.UpgradeError
	if errors.As(err, &ue) {
		// What follows the request is not HTTP/1.1: a WebSocket session's (ws.go), or
		// not read (the request was answered as a plain one, keep-alive off).
		c.stopRead = true
		if c.next != nil {
			c.next.input(data[ue.Offset:])
		}
		return
	}
	code := 400
	var pe *httpparser.Error
	if errors.As(err, &pe) && pe.Kind == httpparser.KindHeaderOverflow {
		code = 431
	}
	if c.cur != nil && c.cur.dispatched {
		// The request's body is malformed: the application sees the client go away.
		c.mu.Lock()
		c.cur.lost = true
		c.wakeLocked(c.cur, &c.batch)
		c.dropLocked(c.cur) // it is not answered: the 400 follows the responses before it
		c.mu.Unlock()
	}
	c.cur = nil
	c.answer(code, "Invalid HTTP request received.")
	c.stopRead = true
}

// answer queues a response of the server's own (400, 431, 503) after the requests in
// flight and closes the connection after it.
func (c *Conn) answer(code int, text string) {
	r := &Request{c: c, keepAlive: false}
	r.x = h1Exchange{r}
	r.buildOwn(code, text)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	r.done = true
	c.linger = true
	c.inflight = append(c.inflight, r)
	c.advanceLocked()
	c.mu.Unlock()
	c.flush()
}

// httpparser.Handler

func (c *Conn) OnMessageBegin() error {
	c.cur = newRequest(c)
	return nil
}

func (c *Conn) OnURL(url []byte) error {
	if f := c.p.FragmentAt(); f > 0 {
		url = url[:f] // a fragment is not part of a request-target: stripped (README)
	}
	c.cur.target = append(c.cur.target, url...)
	return nil
}

func (c *Conn) OnStatus([]byte) error { return nil }

func (c *Conn) OnHeader(name, value []byte) error {
	r := c.cur
	if r.dispatched { // a trailer: not in ASGI's http.request
		return nil
	}
	if len(name) == 6 || len(name) == 2 {
		r.noteHeader(name, value) // expect, te (spec.go)
	}
	blob := append(r.Blob, name...)
	low := blob[len(blob)-len(name):]
	for i, b := range low {
		if 'A' <= b && b <= 'Z' {
			low[i] = b + 'a' - 'A'
		}
	}
	nameEnd := int32(len(blob))
	blob = append(blob, value...)
	r.Blob = blob
	r.Ends = append(r.Ends, nameEnd, int32(len(blob)))
	return nil
}

func (c *Conn) OnHeadersComplete() error {
	r := c.cur
	p := c.p
	r.headDone = true
	r.Major, r.Minor = p.Major(), p.Minor()
	r.keepAlive = p.ShouldKeepAlive() && !p.ShouldUpgrade()
	r.head = p.Method()[0] == 'H' && string(p.Method()) == "HEAD"
	r.hasBody = p.IsChunked() || p.ContentLength() > 0
	if r.Major != 1 || r.Minor > 1 {
		// HTTP/2.0 (or 0.9, 1.2, 3.0 ...) as HTTP/1 text: not a version this connection
		// speaks (HTTP/2 comes as its preface or an upgrade), never the application's
		// (RFC 9110 15.6.6). An HTTP/0.9 request (no version) is answered the same way.
		c.answer(505, "HTTP Version Not Supported")
		c.stopRead = true
		return nil
	}
	if p.IsConnect() {
		// CONNECT asks for a tunnel (RFC 9110 9.3.6), with an authority-form target
		// (RFC 9112 3.2.3) that has no path: not an ASGI request. 400, as uvicorn.
		c.answer(400, "Invalid HTTP request received.")
		c.stopRead = true
		return nil
	}
	r.finishHead(p.Method())
	if c.s.proxy != nil {
		c.applyProxy(r) // before an upgrade takes r (h2c: it becomes stream 1)
	}
	if !r.keepAlive {
		// A request that closes the connection: reading stops at its end (OnMessageComplete),
		// not here, or a body that is not all in this read would never arrive. The parser
		// drops whatever a client sends after it (LenientDataAfterClose).
		if p.ShouldUpgrade() {
			c.stopRead = true
			// a WebSocket handshake? (ws.go) One we do not accept is answered: 400, 426.
			if why := c.wsCheck(r, p.Method()); why != "" {
				c.answer(r.ownStatus, why)
				return nil
			}
			if r.ws == nil && c.upgradeBody(r) { // Upgrade: h2c, or its body is read (h2c.go)
				return nil
			}
		}
	}
	if m := c.s.metrics; m != nil {
		if c.serveMetrics(r) {
			return nil
		}
		r.t0 = monoNow()
	}
	if lim := c.s.cfg.LimitConcurrency; lim > 0 && c.s.inflight.Load() >= int64(lim) {
		r.own = true
		return nil
	}
	c.mu.Lock()
	if c.closing || c.closed {
		c.mu.Unlock()
		r.own = true
		return nil
	}
	r.dispatched = true
	c.served = true
	if c.lastOne {
		r.keepAlive = false // the last request: reading stops at its end
	}
	later := len(c.deferred) > 0 || len(c.inflight) >= c.s.cfg.MaxPipeline
	if later {
		c.deferred = append(c.deferred, r)
	}
	c.inflight = append(c.inflight, r)
	c.mu.Unlock()
	c.s.inflight.Add(1)
	c.s.requests.Add(1)
	if !later {
		c.batch = append(c.batch, Event{Kind: EvRequest, Req: r})
	}
	return nil
}

// undeferLocked hands the deferred requests to the application while fewer than
// MaxPipeline are with it and the output is within its bound (c.mu held; drainedLocked
// goes on): a client that pipelines thousands of requests in one write and reads no
// answer has no more of them answered than the output's bound holds, instead of all.
func (c *Conn) undeferLocked() {
	for len(c.deferred) > 0 && len(c.inflight)-len(c.deferred) < c.s.cfg.MaxPipeline && !c.outFullLocked() {
		r := c.deferred[0]
		c.deferred[0] = nil
		if c.deferred = c.deferred[1:]; len(c.deferred) == 0 {
			c.deferred = nil
		}
		if st := c.s.static; st != nil {
			if m, rest := st.route(r); m != nil { // (as staticBatch, on a goroutine: it takes c.mu)
				go func() {
					st.serve(m, r, rest)
					c.flush()
				}()
				continue
			}
		}
		c.s.push(Event{Kind: EvRequest, Req: r})
	}
}

// dropDeferredLocked ends r, deferred and never the application's, as its Done would: out of
// the in-flight count (c.mu held; r is out of c.deferred).
func (c *Conn) dropDeferredLocked(r *Request) {
	r.lost, r.appDone = true, true
	c.s.inflight.Add(-1)
}

func (c *Conn) OnBody(chunk []byte) error {
	r := c.cur
	if !r.dispatched {
		if up, ok := c.next.(*h2cUpgrade); ok && up.r == r { // the h2c upgrade's body (h2c.go)
			r.body = append(r.body, chunk...)
		}
		return nil
	}
	c.mu.Lock()
	c.bodyLocked(r, chunk)
	c.bodyN += int64(len(chunk))
	c.mu.Unlock()
	return nil
}

// bodyLocked takes a chunk of r's body (HTTP/1.1 or HTTP/2) and wakes its receiver: the
// client sends the body without waiting for a 100, so none is sent after it (c.mu held).
func (c *Conn) bodyLocked(r *Request, chunk []byte) {
	r.expect100 = false
	if r.body == nil {
		if b, _ := bodyMem.Get().(*[]byte); b != nil {
			r.body = *b
		}
	}
	r.body = append(r.body, chunk...)
	c.wakeLocked(r, &c.batch)
}

func (c *Conn) OnMessageComplete() error {
	r := c.cur
	c.cur = nil
	if r == nil {
		return nil
	}
	if !r.keepAlive {
		// Reading stops here; the connection closes with a lingering close, so that input
		// the client sent after this request (dropped) cannot turn the close into a reset
		// that destroys the response before the client has read it.
		c.stopRead = true
		if r.dispatched && c.next == nil { // (not a WebSocket session's, nor h2c's)
			c.mu.Lock()
			c.linger = true
			c.mu.Unlock()
		}
	}
	if !r.dispatched {
		if r.own {
			c.answer(503, "Service Unavailable")
			c.stopRead = true
		}
		return nil
	}
	c.mu.Lock()
	r.bodyDone = true
	c.wakeLocked(r, &c.batch)
	c.mu.Unlock()
	return nil
}

func (c *Conn) OnChunkHeader() error   { return nil }
func (c *Conn) OnChunkComplete() error { return nil }

// dropLocked removes r from the requests in flight (c.mu held).
func (c *Conn) dropLocked(r *Request) {
	for i, x := range c.inflight {
		if x == r {
			n := copy(c.inflight[i:], c.inflight[i+1:])
			c.inflight[i+n] = nil
			c.inflight = c.inflight[:i+n]
			for j, d := range c.deferred { // (a body's timeout drops the request being read)
				if d == r {
					c.deferred = append(c.deferred[:j], c.deferred[j+1:]...)
					c.dropDeferredLocked(r)
					break
				}
			}
			c.undeferLocked()
			c.advanceLocked()
			return
		}
	}
}

// wakeLocked queues an EvWake for r if its application waits (c.mu held).
func (c *Conn) wakeLocked(r *Request, batch *[]Event) {
	if r.waitRecv || r.waitSend {
		r.waitRecv, r.waitSend = false, false
		r.woken = true
		if batch != nil {
			*batch = append(*batch, Event{Kind: EvWake, Req: r})
		} else {
			c.s.push(Event{Kind: EvWake, Req: r})
		}
	}
}

// advanceLocked moves the output of the requests at the head of the line to c.out: the
// first request's bytes, and the following ones' as their predecessors complete.
func (c *Conn) advanceLocked() {
	for len(c.inflight) > 0 {
		h := c.inflight[0]
		if len(h.out) > 0 || len(h.files) > 0 {
			c.takeOutLocked(h)
		}
		if !h.done {
			break
		}
		n := copy(c.inflight, c.inflight[1:])
		c.inflight[n] = nil
		c.inflight = c.inflight[:n]
		c.undeferLocked()
		c.roomLocked()
		if !h.keepAlive {
			c.endAfterLocked()
			break
		}
	}
	c.dirtyLocked()
}

// endAfterLocked: no more requests on this connection; it closes once its output is
// written, and the requests in flight (pipelined after the last one answered) are lost.
func (c *Conn) endAfterLocked() {
	c.closing = true
	if c.lp != nil && c.next == nil {
		// A lingering close (the loop driver's): input the client sent that was not read
		// (a body the response did not wait for, pipelined requests) would turn a plain
		// close into a reset, and the kernel would drop what it still holds of the
		// response. (The goroutine driver's reader may still be reading: a plain close.)
		c.linger = true
	}
	for _, r := range c.inflight { // cannot be answered on this connection
		r.lost = true
		c.wakeLocked(r, nil)
	}
	clear(c.inflight)
	c.inflight = c.inflight[:0]
}

func (c *Conn) closeLocked() {
	c.closed = true
	if c.lp != nil {
		c.loopCloseLocked()
		return
	}
	if c.linger {
		c.wakeReader()
		go c.lingerClose()
		return
	}
	if tc, ok := c.nc.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	c.closeNet()
}

// closeNet closes a goroutine-mode connection's socket, wakes its reader if it waits for
// room and lets the server forget it.
func (c *Conn) closeNet() {
	c.nc.Close()
	c.wakeReader()
	go c.s.forget(c)
}

// wakeReader wakes the reader if it waits on c.wake (room, or the connection closed).
func (c *Conn) wakeReader() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// lost: the client went away or the connection failed: every request in flight sees it.
func (c *Conn) lost() {
	c.mu.Lock()
	c.lostLocked()
	c.mu.Unlock()
}

func (c *Conn) lostLocked() {
	if c.q != nil { // HTTP/3: its streams see the QUIC connection close (h3.go)
		go c.q.qc.CloseWithError(0, "")
		return
	}
	if c.next != nil {
		c.next.lostLocked()
	}
	c.dropFilesLocked()
	for _, r := range c.deferred {
		c.dropDeferredLocked(r)
	}
	c.deferred = nil
	for _, r := range c.inflight {
		r.lost = true
		c.wakeLocked(r, nil)
	}
	clear(c.inflight)
	c.inflight = c.inflight[:0]
	c.out = nil
	if c.lp != nil {
		c.loopLostLocked()
		return
	}
	if c.closed && c.linger {
		c.nc.Close() // ends a lingering close
	}
	if !c.closed {
		c.closed = true
		c.closeNet()
	}
}

// shutdown: the server closes. An idle connection closes now; a busy one after its
// requests in flight are answered.
func (c *Conn) shutdown() {
	if c.q != nil {
		return // HTTP/3: the server's GOAWAY (h3Close); its streams finish
	}
	c.mu.Lock()
	if h, ok := c.next.(*h2Conn); ok { // GOAWAY; its streams finish (HTTP/1.1's is below)
		c.mu.Unlock()
		h.shutdown()
		return
	}
	if !c.served && !c.closed {
		// Accepted and no request dispatched yet: the client has just connected (e.g. to a
		// socket other workers keep serving during a reload) and its request is on its way.
		// Answer it; a connection that sends nothing closes at the deadline.
		c.lastOne = true
		d := time.Now().Add(min(c.s.cfg.KeepAliveTimeout, firstRequestGrace))
		if c.lp != nil {
			c.deadline = d
			c.s.deadlineSoon(d)
		} else {
			c.nc.SetReadDeadline(d)
		}
		c.mu.Unlock()
		return
	}
	c.closing = true
	if !c.busyLocked() && !c.closed {
		c.closeLocked()
	}
	ws, _ := c.next.(*WS)
	c.mu.Unlock()
	if ws != nil {
		ws.shutdown() // an open WebSocket session is closed with 1012
	}
}

func (c *Conn) abort() { c.lost() }

// firstRequestGrace bounds how long a closing server waits for the first request of a
// connection it accepted.
const firstRequestGrace = time.Second

// ErrDisconnected is returned by Start and Send when the client went away (ASGI 2.4:
// send raises an OSError then).
var ErrDisconnected = errors.New("client disconnected")
