// Package httpserver is the HTTP engine of `goloop serve`, for both ASGI and WSGI: listeners,
// connections, HTTP/1.1 parsing with goloop/httpparser, keep-alive, pipelining, request
// bodies and response framing, HTTP/2 and h2c, WebSocket, TLS, deadlines, proxy headers and
// metrics, and the drivers of connections (goroutines on Go's netpoller; the loop driver,
// loopdriver.go, on a LoopPoller: the event loop's own, or pooldriver.go's, which the WSGI
// pool's threads run). It is pure Go and knows nothing of Python: complete request
// heads become Requests queued as Events; whoever runs the application (goloop's binding: the
// loop thread for ASGI, the WSGI pool's threads) takes the queue, answers through Request's
// methods and calls Flush.
// See DESIGN.md.
package httpserver

import (
	"errors"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Config is the server's configuration. Zero values mean the defaults.
type Config struct {
	// MaxHeadSize limits a request's start line plus header section, a chunk-size line
	// and a trailer section (uvicorn's --h11-max-incomplete-event-size; default 16 KiB,
	// h11's). A larger head is answered 431 and the connection closed.
	MaxHeadSize int
	// KeepAliveTimeout closes a connection idle (no request in flight, none being
	// received) that long (default 5 s, uvicorn's --timeout-keep-alive).
	KeepAliveTimeout time.Duration
	// HeadTimeout bounds a request head's reception, from its first byte to its end: a
	// head still incomplete then is answered 408 and the connection closed (default 10 s;
	// negative: no bound). HTTP/2: a header block (HEADERS and its CONTINUATIONs) not
	// complete that long after its first frame began ends the connection (deadline.go).
	HeadTimeout time.Duration
	// BodyMinRate is the average rate (bytes per second) at which a request body must
	// arrive once BodyGrace has passed since its head (not counting the time reading is
	// paused, nor waiting for a 100 Continue); slower: the request is answered 408 (its
	// application sees a disconnect) and the connection closed. Default 240 (Kestrel's
	// MinRequestBodyDataRate); negative: no minimum. BodyGrace defaults to HeadTimeout
	// (10 s if that is off).
	BodyMinRate int
	BodyGrace   time.Duration
	// RespMinRate is the average rate (bytes per second) at which a client must read a
	// response whose output waits for its socket, once RespGrace (default 5 s) has passed
	// since the socket stopped taking bytes; slower: the connection is dropped and its
	// requests see a disconnect (writerate.go). Default 240 (Kestrel's
	// MinResponseDataRate); negative: no minimum.
	RespMinRate int
	RespGrace   time.Duration
	// MaxPipeline is how many requests of one connection may be in flight (dispatched,
	// response incomplete) before the connection stops reading (default 32).
	MaxPipeline int
	// BodyBuffer is how many unread request body bytes a request may hold before its
	// connection stops reading (default 64 KiB).
	BodyBuffer int
	// WriteBuffer is how many unsent response bytes a connection may hold before Send
	// reports backpressure (default 256 KiB).
	WriteBuffer int
	// ServerHeader and DateHeader add `server: goloop` and `date:` to every response
	// (the server's own answers included).
	ServerHeader, DateHeader bool
	// Headers are added to every response (uvicorn's --header), as name, value.
	Headers [][2]string
	// LimitConcurrency answers 503 to a request arriving while that many are in flight
	// (0: no limit).
	LimitConcurrency int
	// Notify is called (from any goroutine) when an event is queued to an empty queue.
	Notify func()
	// OnWarning is called (from any goroutine) when a warning for the operator is queued
	// (TakeWarnings: accept errors, accepterr.go).
	OnWarning func()
	// ReuseRequests: the application's side keeps no reference to a Request once its Done
	// returned, nor calls it again (goloop's WSGI pool). A loop-mode HTTP/1.1 connection
	// then reuses its finished request for its next one (Request.reuseLocked): no
	// allocation per keep-alive request.
	ReuseRequests bool

	// NoH2 turns HTTP/2 off (no h2 in ALPN, no h2c prior knowledge); H2MaxResets is how
	// many streams a client may reset per second before its connection is dropped
	// (default 100; see h2.go).
	NoH2        bool
	H2MaxResets int
	// H2Only: HTTP/2 only (`--http h2`): a plain connection must begin with the client
	// preface (prior knowledge; anything else is closed without an answer, RFC 9113 3.4)
	// and TLS offers only h2 in ALPN.
	H2Only bool
}

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EvRequest: a new request (its head and the body that came with it).
	EvRequest EventKind = iota
	// EvWake: something the application waits for happened on Req: body arrived, the
	// client went away, the response completed, or its output drained.
	EvWake
	// EvConnClosed: a connection the application asked about (Conn.TrackClose) closed;
	// Req is a placeholder whose Conn is it.
	EvConnClosed
)

// Event is one entry of the server's queue.
type Event struct {
	Kind EventKind
	Req  *Request
}

// Server is an HTTP/1.1 server whose requests are queued for an application.
type Server struct {
	cfg    Config
	extra  []byte // the server/default header lines (date excluded)
	closed atomic.Bool

	qmu   sync.Mutex
	queue []Event

	dmu   sync.Mutex
	dirty []*Conn // connections with output to flush
	spare []*Conn // the other list (Flush)

	mu        sync.Mutex
	listeners []net.Listener
	conns     map[*Conn]struct{}
	idle      chan struct{} // closed when conns becomes empty after Close
	wg        sync.WaitGroup

	needFlush atomic.Bool // a connection became dirty since NeedFlush last said so

	// the counters (metrics.go): this process' own, or its slot in a shared file with
	// --workers; inflight and requests point into ctr
	ctr      *counters
	inflight *atomic.Int64 // requests dispatched, application not done
	requests *atomic.Int64 // requests dispatched, ever

	tls     atomic.Pointer[tlsState] // SetTLS (tls.go)
	h2      h2Server                 // h2.go
	proxy   *proxyTrust              // proxy headers (proxy.go), nil: off
	metrics *metrics                 // counters (metrics.go), nil: off
	static  *staticServer            // static files served by Go (static.go), nil: none
	h3      []h3Server               // HTTP/3 (h3.go), under mu

	tlsExtra TLSExtra // SetTLSExtra (tlsops.go)

	wscfg atomic.Pointer[WSConfig] // WebSocket's configuration (ws.go)
	warn  warnings                 // for the operator's log (accepterr.go)

	// loop mode (loopdriver.go)
	lp    LoopPoller
	lls   []*loopListener // under mu
	rbuf  []byte          // the loop thread's read buffer, shared by the connections
	lt    loopTimer
	sweep []*Conn // the timer's scratch list
}

// New returns a server with configuration cfg.
func New(cfg Config) *Server {
	if cfg.MaxHeadSize <= 0 {
		cfg.MaxHeadSize = 16 * 1024
	}
	if cfg.KeepAliveTimeout <= 0 {
		cfg.KeepAliveTimeout = 5 * time.Second
	}
	cfg.setDeadlineDefaults()
	cfg.setRespDefaults()
	if cfg.MaxPipeline <= 0 {
		cfg.MaxPipeline = 32
	}
	if cfg.BodyBuffer <= 0 {
		cfg.BodyBuffer = 64 * 1024
	}
	if cfg.WriteBuffer <= 0 {
		cfg.WriteBuffer = 256 * 1024
	}
	s := &Server{cfg: cfg, conns: make(map[*Conn]struct{})}
	startMemWatch()
	s.useCounters(&counters{})
	s.lt.fd = -1
	if cfg.ServerHeader {
		s.extra = append(s.extra, "server: goloop\r\n"...)
	}
	for _, h := range cfg.Headers {
		s.extra = append(s.extra, h[0]...)
		s.extra = append(s.extra, ": "...)
		s.extra = append(s.extra, h[1]...)
		s.extra = append(s.extra, "\r\n"...)
	}
	return s
}

// ErrServerClosed is returned by Serve and ListenFd after Close.
var ErrServerClosed = errors.New("httpserver: server closed")

// ListenFd serves the listening socket fd (a duplicate is made: the caller keeps fd).
// With a LoopPoller (SetLoop) and no TLS, the loop thread accepts and serves its
// connections (loopdriver.go); else goroutines do.
func (s *Server) ListenFd(fd int) error {
	// An os.File closes its descriptor when closed or garbage collected: it must own a
	// duplicate, never fd itself (the caller's, e.g. a Python socket's).
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if s.lp != nil && s.tls.Load() == nil {
		return s.listenLoop(dup)
	}
	f := os.NewFile(uintptr(dup), "listener")
	ln, err := net.FileListener(f) // dups again
	f.Close()
	if err != nil {
		return err
	}
	return s.Serve(ln)
}

// Serve accepts connections on ln in a goroutine of its own and returns at once.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners = append(s.listeners, ln)
	s.wg.Add(1)
	s.mu.Unlock()
	go s.acceptLoop(ln)
	return nil
}

func (s *Server) acceptLoop(ln net.Listener) {
	defer s.wg.Done()
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and friends: back off as net/http does.
			s.acceptFailed(err)
			if delay == 0 {
				delay = 5 * time.Millisecond
			} else if delay *= 2; delay > time.Second {
				delay = time.Second
			}
			time.Sleep(delay)
			continue
		}
		delay = 0
		if testHookAccepted != nil {
			testHookAccepted()
		}
		c := newConn(s, s.wrapTLS(nc))
		s.mu.Lock()
		// Accepted as the server closes (Close ran since Accept returned): the connection
		// left the listening socket's queue, which other workers keep serving during a
		// rolling reload, so it is not dropped but treated as Close treats the connections
		// it finds: its first request is answered.
		late := s.closed.Load()
		if late && len(s.conns) == 0 {
			s.idle = make(chan struct{}) // not idle any more
		}
		s.addConnLocked(c)
		s.mu.Unlock()
		if late {
			c.shutdown()
		}
		go c.serve()
	}
}

// testHookAccepted, if set, runs after each Accept (tests).
var testHookAccepted func()

// Close stops accepting; idle connections are closed at once, busy ones once their
// requests in flight are answered (the responses say `connection: close`).
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed.Swap(true) {
		s.mu.Unlock()
		return
	}
	lns := s.listeners
	s.listeners = nil
	lls := s.lls
	s.lls = nil
	h3 := s.h3
	conns := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.idle = make(chan struct{})
	if len(s.conns) == 0 {
		close(s.idle)
	}
	s.mu.Unlock()
	for _, ln := range lns {
		ln.Close()
	}
	for _, ll := range lls {
		ll.close()
	}
	s.h3Close(h3) // GOAWAY
	for _, c := range conns {
		c.shutdown()
	}
}

// Idle returns a channel closed when, after Close, no connection is left (a connection
// accepted as Close ran makes a new one).
func (s *Server) Idle() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idle == nil {
		return nil
	}
	return s.idle
}

// Abort closes every connection now (the end of a graceful shutdown that timed out).
func (s *Server) Abort() {
	s.Close()
	s.mu.Lock()
	s.h3Abort(s.h3)
	conns := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.abort()
	}
	s.stopTimer()
}

// Connections is the number of open connections.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// InFlight is the number of requests dispatched whose application has not finished.
func (s *Server) InFlight() int { return int(s.inflight.Load()) }

// Requests is the number of requests dispatched so far.
func (s *Server) Requests() int64 { return s.requests.Load() }

// addConnLocked counts c among the server's connections (s.mu held).
func (s *Server) addConnLocked(c *Conn) {
	s.conns[c] = struct{}{}
	s.ctr.conns.Add(1)
}

func (s *Server) forget(c *Conn) {
	s.mu.Lock()
	if _, ok := s.conns[c]; ok {
		delete(s.conns, c)
		s.ctr.conns.Add(-1)
	}
	if s.idle != nil && len(s.conns) == 0 {
		select {
		case <-s.idle:
		default:
			close(s.idle)
		}
	}
	s.mu.Unlock()
}

// push queues events; the push that finds the queue empty calls Notify.
func (s *Server) push(evs ...Event) {
	if s.pushQuiet(evs) && s.cfg.Notify != nil {
		s.cfg.Notify()
	}
}

// pushQuiet queues events without Notify (the loop driver's reads: the loop takes the
// queue after the poll's events); it reports whether the queue was empty.
func (s *Server) pushQuiet(evs []Event) bool {
	s.qmu.Lock()
	wasEmpty := len(s.queue) == 0
	if len(evs) == 1 { // (the usual push: no typedslicecopy call)
		s.queue = append(s.queue, evs[0])
	} else {
		s.queue = append(s.queue, evs...)
	}
	s.qmu.Unlock()
	return wasEmpty
}

// Pending tells whether events are queued.
func (s *Server) Pending() bool {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	return len(s.queue) > 0
}

// Take appends the queued events to dst and empties the queue.
func (s *Server) Take(dst []Event) []Event {
	s.qmu.Lock()
	if len(s.queue) == 1 { // (as pushQuiet)
		dst = append(dst, s.queue[0])
		s.queue[0] = Event{}
	} else {
		dst = append(dst, s.queue...)
		clear(s.queue)
	}
	s.queue = s.queue[:0]
	s.qmu.Unlock()
	return dst
}

// markDirty adds c to the connections Flush writes; it reports whether c is the first.
func (s *Server) markDirty(c *Conn) bool {
	s.dmu.Lock()
	first := len(s.dirty) == 0
	s.dirty = append(s.dirty, c)
	s.dmu.Unlock()
	return first
}

// NeedFlush reports (once) that output was queued since it last said so: the caller
// arranges a Flush.
func (s *Server) NeedFlush() bool { return s.needFlush.Load() && s.needFlush.Swap(false) }

// Flush writes the output of every connection with output queued (one non-blocking write
// each, from the calling thread; what does not fit goes to a writer goroutine).
func (s *Server) Flush() {
	s.dmu.Lock()
	d := s.dirty
	s.dirty, s.spare = s.spare, nil // two lists in turn: no allocation per flush
	s.dmu.Unlock()
	for i, c := range d {
		c.flush()
		d[i] = nil
	}
	s.dmu.Lock()
	if s.spare == nil {
		s.spare = d[:0]
	}
	s.dmu.Unlock()
}

// date line cache: "date: <IMF-fixdate>\r\n", remade once a second.
var dateCache atomic.Pointer[dateLine]

type dateLine struct {
	sec  int64
	line []byte
}

func dateHeader() []byte {
	now := time.Now()
	if d := dateCache.Load(); d != nil && d.sec == now.Unix() {
		return d.line
	}
	b := make([]byte, 0, 40)
	b = append(b, "date: "...)
	b = now.UTC().AppendFormat(b, "Mon, 02 Jan 2006 15:04:05 GMT")
	b = append(b, "\r\n"...)
	dateCache.Store(&dateLine{sec: now.Unix(), line: b})
	return b
}

// reasons are the phrases of the status line (http.HTTPStatus's).
var reasons = map[int]string{
	100: "Continue", 101: "Switching Protocols", 200: "OK", 201: "Created", 202: "Accepted",
	203: "Non-Authoritative Information", 204: "No Content", 205: "Reset Content", 206: "Partial Content",
	300: "Multiple Choices", 301: "Moved Permanently", 302: "Found", 303: "See Other", 304: "Not Modified",
	307: "Temporary Redirect", 308: "Permanent Redirect", 400: "Bad Request", 401: "Unauthorized",
	403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed", 406: "Not Acceptable",
	408: "Request Timeout", 409: "Conflict", 410: "Gone", 411: "Length Required", 412: "Precondition Failed",
	413: "Request Entity Too Large", 414: "Request-URI Too Long", 415: "Unsupported Media Type",
	416: "Requested Range Not Satisfiable", 417: "Expectation Failed", 418: "I'm a Teapot",
	422: "Unprocessable Entity", 425: "Too Early", 426: "Upgrade Required", 428: "Precondition Required",
	429: "Too Many Requests", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
	501: "Not Implemented", 502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout",
	505: "HTTP Version Not Supported",
}

var statusLines [600][]byte

func init() {
	for code := 100; code < 600; code++ {
		statusLines[code] = []byte("HTTP/1.1 " + strconv.Itoa(code) + " " + reasons[code] + "\r\n")
	}
}

// statusReason is the standard phrase of code (100-599), as its status line has it.
func statusReason(code int) []byte {
	l := statusLines[code]
	return l[len("HTTP/1.1 NNN ") : len(l)-2]
}

func statusLine(code int) []byte {
	if code >= 100 && code < 600 {
		return statusLines[code]
	}
	return []byte("HTTP/1.1 " + strconv.Itoa(code) + " \r\n")
}
