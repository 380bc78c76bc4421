package httpserver

// h3.go: HTTP/3 over QUIC (ServeH3), with quic-go's QUIC and HTTP/3 layers
// (github.com/quic-go/quic-go and its http3 package; writing QUIC is out of scope). Each
// QUIC connection is a Conn (its lock, its addresses, its TLS state for the scope's tls
// extension) with no socket of its own; each request stream is a Request whose protocol
// is *h3Stream. quic-go runs a goroutine per request stream (the handler): it queues the
// EvRequest exactly as the HTTP/1.1 and HTTP/2 readers do (Server.push and Notify: the
// loop thread, or a WSGI pool thread, takes it), then moves the request body in and the
// response out while the application answers through the Request's methods. No
// goroutine of this file calls the application: what crosses is the Request's state
// under c.mu, and the events.
//
// Backpressure: a request body is read from the stream only while the application holds
// less than BodyBuffer of it unread (QUIC's flow control then stops the client); a
// response's bytes wait in the stream's queue for the handler goroutine, whose writes
// block on QUIC's flow control, and Send reports SendPaused past WriteBuffer.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/sys/unix"
)

// H3Options are HTTP/3's limits (zero: the defaults).
type H3Options struct {
	// MaxStreams is how many request streams a client may have open at once (QUIC's
	// stream limit: a client cannot open more; default 100, HTTP/2's h2MaxStreams).
	MaxStreams int64
	// StreamWindow and ConnWindow bound QUIC's receive windows (default 1 MiB and 4 MiB):
	// what a client may send ahead of what the engine read.
	StreamWindow, ConnWindow uint64
}

// h3Server is the server's HTTP/3 state (Server.h3, under Server.mu).
type h3Server struct {
	srv *http3.Server
	pc  net.PacketConn
	ln  *quic.EarlyListener // the server's own: Close stops accepting before it returns
}

// h3Conn is the HTTP/3 state of a Conn (c.q): its QUIC connection.
type h3Conn struct {
	qc      *quic.Conn
	tracked bool // TrackClose: an EvConnClosed is queued when it closes (c.mu)
	ended   bool // the QUIC connection closed (c.mu)
	// the output's bound is the connection's, as on HTTP/2 (c.mu): queued is the bytes its
	// streams' queues hold (their qBytes); a sender waits while it is over WriteBuffer, and
	// the streams held back by it (waiting) are woken when their writers bring it under
	waiting map[*h3Stream]struct{}
	queued  int
}

// h3Stream is the protocol of an HTTP/3 request (Request.x). The fields are under c.mu
// unless said.
type h3Stream struct {
	r    *Request
	cond *sync.Cond // on c.mu: the handler and the body reader wait on it

	q        []bodyPart // response body parts not yet written (files among them)
	qBytes   int        // the bytes of q's byte parts
	writing  bool       // the handler is writing a part taken from q
	headOut  bool       // the response head is ready for the handler (r.headSent)
	want100  bool       // a 100 (Continue) to write
	endQd    bool       // the final body part is queued
	trReady  bool       // the trailers are ready (r.trHdr)
	cut      bool       // the application returned with the response incomplete: reset
	finished bool       // the handler returned: nothing more is written
	reset    bool       // the body came slower than BodyMinRate: the stream is reset

	// the request body's clock (deadline.go's rule: BodyMinRate after BodyGrace, stopped
	// while reading is paused or a 100 is owed); rd is the stream's read deadline
	rd     interface{ SetReadDeadline(time.Time) error }
	bodyAt time.Time // zero: the clock is stopped
	bodyN  int64     // bytes received since bodyAt
}

// ServeH3 serves HTTP/3 on UDP at addr ("host:port") with the server's TLS (SetTLS
// first). The socket has SO_REUSEPORT, as every worker process binds its own: the
// kernel keeps a client's packets on one socket by their addresses.
func (s *Server) ServeH3(addr string, o H3Options) error {
	if s.tls.Load() == nil {
		return errors.New("HTTP/3 needs TLS")
	}
	if o.MaxStreams <= 0 {
		o.MaxStreams = h2MaxStreams
	}
	if o.StreamWindow == 0 {
		o.StreamWindow = 1 << 20
	}
	if o.ConnWindow == 0 {
		o.ConnWindow = 4 << 20
	}
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp", addr)
	if err != nil {
		return err
	}
	hs := &http3.Server{
		TLSConfig: &tls.Config{GetConfigForClient: s.h3ConfigFor},
		QUICConfig: &quic.Config{
			MaxIncomingStreams:             o.MaxStreams,
			MaxIncomingUniStreams:          8,
			InitialStreamReceiveWindow:     min(o.StreamWindow, 512<<10),
			MaxStreamReceiveWindow:         o.StreamWindow,
			InitialConnectionReceiveWindow: min(o.ConnWindow, 512<<10),
			MaxConnectionReceiveWindow:     o.ConnWindow,
			MaxIdleTimeout:                 max(s.cfg.KeepAliveTimeout, 5*time.Second),
		},
		Handler:        http.HandlerFunc(s.h3Serve),
		MaxHeaderBytes: s.cfg.MaxHeadSize,
		IdleTimeout:    s.cfg.KeepAliveTimeout,
		ConnContext:    s.h3ConnContext,
	}
	// The listener is made here, not by hs.Serve: http3.Server.Shutdown closes the
	// listeners it made on its own goroutine, and a client connecting between Close and
	// that goroutine's turn would be accepted (then answered 503). The server does not
	// set Allow0RTT, so http3's own TLS wrapping (0-RTT settings in session tickets) is
	// not needed: ConfigureTLSConfig sets the ALPN.
	ln, err := quic.ListenEarly(pc, http3.ConfigureTLSConfig(hs.TLSConfig), hs.QUICConfig)
	if err != nil {
		pc.Close()
		return err
	}
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		ln.Close()
		pc.Close()
		return errors.New("the server is closed")
	}
	s.h3 = append(s.h3, h3Server{srv: hs, pc: pc, ln: ln})
	s.mu.Unlock()
	go hs.ServeListener(ln)
	return nil
}

// H3Addr is the UDP address of the last HTTP/3 socket ServeH3 opened (nil: none).
func (s *Server) H3Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.h3) == 0 {
		return nil
	}
	return s.h3[len(s.h3)-1].pc.LocalAddr()
}

// h3ConfigFor is the QUIC handshakes' GetConfigForClient: the certificate picked as for
// TCP (tls.go), TLS 1.3 (QUIC's), ALPN h3.
func (s *Server) h3ConfigFor(chi *tls.ClientHelloInfo) (*tls.Config, error) {
	l := s.tls.Load().cur.Load()
	i := pickCert(l, chi)
	cfg := l.one[i].Clone()
	cfg.MinVersion = tls.VersionTLS13
	cfg.NextProtos = []string{http3.NextProtoH3}
	return cfg, nil
}

// pickCert is the certificate crypto/tls would pick among the loaded ones.
func pickCert(l *tlsLoaded, chi *tls.ClientHelloInfo) int {
	if len(l.certs) > 1 {
		for j := range l.certs {
			if chi.SupportsCertificate(&l.certs[j]) == nil {
				return j
			}
		}
	}
	return 0
}

type h3ConnKey struct{}

// h3ConnContext makes the Conn of a new QUIC connection; it is forgotten when the
// connection closes.
func (s *Server) h3ConnContext(ctx context.Context, qc *quic.Conn) context.Context {
	c := &Conn{s: s, Remote: addrOf(qc.RemoteAddr()), Local: addrOf(qc.LocalAddr())}
	c.fd = -1
	c.wake = make(chan struct{}, 1)
	c.q = &h3Conn{qc: qc}
	c.served = true
	if s.proxy != nil {
		c.connTrusted() // decided now, read by the streams' goroutines (applyProxy)
	}
	s.mu.Lock()
	s.addConnLocked(c)
	s.mu.Unlock()
	context.AfterFunc(qc.Context(), func() {
		c.mu.Lock()
		c.q.ended = true
		c.closed = true
		tracked := c.q.tracked
		c.mu.Unlock()
		if tracked {
			s.push(Event{Kind: EvConnClosed, Req: &Request{c: c}})
		}
		s.forget(c)
	})
	return context.WithValue(ctx, h3ConnKey{}, c)
}

// h3TLSInfo is TLSInfo of an HTTP/3 connection.
func (c *Conn) h3TLSInfo() *TLSInfo {
	st := c.q.qc.ConnectionState().TLS
	info := &TLSInfo{Version: st.Version, CipherSuite: st.CipherSuite}
	if ts := c.s.tls.Load(); ts != nil {
		l := ts.cur.Load()
		i := 0
		if len(l.certs) > 1 { // the one whose leaf names the client's SNI
			for j := range l.certs {
				if leaf, err := x509.ParseCertificate(l.certs[j].Certificate[0]); err == nil &&
					leaf.VerifyHostname(st.ServerName) == nil {
					i = j
					break
				}
			}
		}
		info.ServerCert = l.pem[i]
	}
	peerInfo(info, st.PeerCertificates)
	return info
}

// h3TrackClose is TrackClose of an HTTP/3 connection.
func (c *Conn) h3TrackClose() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.q.ended {
		return false
	}
	c.q.tracked = true
	return true
}

// h3Serve is quic-go's handler goroutine of one request stream: it queues the request,
// then feeds its body and writes its response until the response is complete, the
// application cut it, or the client went away.
func (s *Server) h3Serve(w http.ResponseWriter, hr *http.Request) {
	c, _ := hr.Context().Value(h3ConnKey{}).(*Conn)
	if c == nil {
		panic(http.ErrAbortHandler)
	}
	if hr.Method == http.MethodConnect {
		w.WriteHeader(400)
		return
	}
	r := &Request{c: c, clen: -1, Major: 3}
	st := &h3Stream{r: r, cond: sync.NewCond(&c.mu)}
	r.x = st
	h3Head(r, hr)
	if s.proxy != nil {
		c.applyProxy(r)
	}
	if s.metrics != nil {
		if h3Metrics(r, w) {
			return
		}
		r.t0 = monoNow()
	}
	if lim := s.cfg.LimitConcurrency; (lim > 0 && s.inflight.Load() >= int64(lim)) || s.closed.Load() {
		w.Header()["Date"] = nil
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(503)
		w.Write([]byte("Service Unavailable"))
		return
	}
	r.dispatched = true
	s.inflight.Add(1)
	s.requests.Add(1)
	stop := context.AfterFunc(hr.Context(), st.gone) // STOP_SENDING, the connection lost
	defer stop()
	if s.static != nil && r.ws == nil {
		if m, rest := s.static.match(r.Path()); m != nil { // answered by Go (static.go)
			s.static.serve(m, r, rest)
			st.write(w)
			return
		}
	}
	st.rd, _ = w.(interface{ SetReadDeadline(time.Time) error })
	s.push(Event{Kind: EvRequest, Req: r})
	go st.readBody(hr.Body)
	st.write(w)
}

// h3Metrics answers a GET or HEAD of the metrics path from Go (metrics.go); false: r is
// not one.
func h3Metrics(r *Request, w http.ResponseWriter) bool {
	m := r.c.s.metrics
	if m.path == "" || string(r.Path()) != m.path {
		return false
	}
	if meth := r.Method(); string(meth) != "GET" && string(meth) != "HEAD" {
		return false
	}
	body := r.c.s.Metrics().Prometheus()
	hdr := []byte("content-type: text/plain; version=0.0.4; charset=utf-8\r\ncontent-length: " +
		strconv.Itoa(len(body)) + "\r\n")
	h3WriteHead(w, r.c.s, 200, hdr, false)
	if !r.head {
		w.Write([]byte(body))
	}
	return true
}

// bodyDeadlineLocked is when the body must have come so far (zero: no bound now): the
// clock starts at the first read after a pause or the 100.
func (st *h3Stream) bodyDeadlineLocked(now time.Time) time.Time {
	r := st.r
	cfg := &r.c.s.cfg
	if cfg.BodyMinRate <= 0 || st.rd == nil || r.expect100 || r.bodyDone {
		st.bodyAt = time.Time{}
		return time.Time{}
	}
	if st.bodyAt.IsZero() {
		st.bodyAt, st.bodyN = now, 0
	}
	credit := time.Duration(float64(st.bodyN) / float64(cfg.BodyMinRate) * float64(time.Second))
	return st.bodyAt.Add(cfg.BodyGrace + credit)
}

// h3Head fills r's head from quic-go's parsed request: lower-cased names, :authority as
// host, the cookie crumbs joined (quic-go's), then the method and the target.
func h3Head(r *Request, hr *http.Request) {
	add := func(name, value string) {
		r.Blob = append(r.Blob, name...)
		r.Ends = append(r.Ends, int32(len(r.Blob)))
		r.Blob = append(r.Blob, value...)
		r.Ends = append(r.Ends, int32(len(r.Blob)))
	}
	if hr.Host != "" {
		add("host", hr.Host)
	}
	for name, vals := range hr.Header {
		low := strings.ToLower(name)
		if low == "host" {
			continue
		}
		for _, v := range vals {
			if len(low) == 6 || len(low) == 2 {
				r.noteHeader([]byte(low), []byte(v)) // expect, te (spec.go)
			}
			add(low, v)
		}
	}
	if hr.ContentLength >= 0 && hr.Header.Get("Content-Length") == "" && hr.ContentLength > 0 {
		add("content-length", strconv.FormatInt(hr.ContentLength, 10))
	}
	path := hr.RequestURI
	if i := strings.IndexByte(path, '#'); i >= 0 {
		path = path[:i]
	}
	r.target = append(r.target, path...)
	r.finishHead([]byte(hr.Method))
	r.head = hr.Method == http.MethodHead
}

// gone: the client stopped the stream (STOP_SENDING, a reset) or the connection was
// lost: an application still answering sees a disconnect.
func (st *h3Stream) gone() {
	c := st.r.c
	c.mu.Lock()
	st.lostLocked()
	c.mu.Unlock()
}

func (st *h3Stream) lostLocked() {
	r := st.r
	if st.finished || r.lost {
		return
	}
	r.lost = true
	r.c.wakeLocked(r, nil)
	for _, p := range st.q {
		if p.f != nil {
			p.f.Close()
		}
	}
	st.dequeuedLocked(st.qBytes)
	st.q, st.qBytes = nil, 0
	delete(r.c.q.waiting, st)
	st.cond.Broadcast()
}

// dequeuedLocked: n bytes left st's queue (written, or dropped); the streams its
// connection's bound held back are woken when it is under it again.
func (st *h3Stream) dequeuedLocked(n int) {
	c := st.r.c
	q := c.q
	q.queued -= n
	if q.queued > c.s.cfg.WriteBuffer {
		return
	}
	for o := range q.waiting {
		delete(q.waiting, o)
		if o.r.waitSend && o.readyLocked() {
			c.wakeLocked(o.r, nil)
		}
	}
}

// readBody is the body reader goroutine: it reads while the application holds less than
// BodyBuffer unread.
func (st *h3Stream) readBody(body io.ReadCloser) {
	r := st.r
	c := r.c
	buf := make([]byte, 32*1024)
	for {
		c.mu.Lock()
		for len(r.body) > c.s.cfg.BodyBuffer && !r.lost && !st.finished {
			st.bodyAt = time.Time{} // paused: the clock starts again when reading resumes
			st.cond.Wait()
		}
		stop := r.lost || st.finished
		dl := st.bodyDeadlineLocked(time.Now())
		c.mu.Unlock()
		if stop {
			body.Close()
			return
		}
		if st.rd != nil {
			st.rd.SetReadDeadline(dl)
		}
		n, err := body.Read(buf)
		c.mu.Lock()
		st.bodyN += int64(n)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if d := st.bodyDeadlineLocked(time.Now()); d.IsZero() || time.Now().Before(d) {
				c.mu.Unlock() // the bound moved (a 100 owed, bytes came): read on
				continue
			}
			if !r.lost && !st.finished { // slower than BodyMinRate: reset (write)
				c.s.ctr.bodyTimeouts.Add(1)
				st.reset = true
				st.lostLocked()
			}
			c.mu.Unlock()
			return
		}
		if n > 0 && !r.lost {
			r.expect100 = false
			r.body = append(r.body, buf[:n]...)
			c.wakeLocked(r, nil)
		}
		if err != nil {
			if err == io.EOF || r.done {
				r.bodyDone = true
				c.wakeLocked(r, nil)
			} else {
				st.lostLocked() // the client reset its request stream
			}
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
}

// write is the handler goroutine's part: it writes the head, the 100, the body parts and
// the trailers as the application queues them, until the response is complete.
func (st *h3Stream) write(w http.ResponseWriter) {
	r := st.r
	c := r.c
	fl, _ := w.(http.Flusher)
	headDone := false
	defer func() {
		c.mu.Lock()
		st.finished = true
		st.dequeuedLocked(st.qBytes) // (what a cut response left)
		st.q, st.qBytes = nil, 0
		st.cond.Broadcast()
		c.mu.Unlock()
	}()
	for {
		c.mu.Lock()
		for !r.lost && !st.cut && !st.want100 && !(st.headOut && !headDone) && len(st.q) == 0 &&
			!(st.endQd && (!r.trailers || st.trReady)) {
			st.cond.Wait()
		}
		if r.lost {
			reset := st.reset
			c.mu.Unlock()
			if reset {
				h3Reset(w)
			}
			return
		}
		if st.cut {
			c.mu.Unlock()
			panic(http.ErrAbortHandler) // quic-go resets the stream
		}
		if st.want100 {
			st.want100 = false
			c.mu.Unlock()
			w.WriteHeader(100)
			continue
		}
		if st.headOut && !headDone {
			status, hdr := r.status, r.hdr
			c.mu.Unlock()
			h3WriteHead(w, c.s, status, hdr, r.trailers)
			headDone = true
			if fl != nil {
				fl.Flush()
			}
			continue
		}
		if len(st.q) > 0 {
			p := st.q[0]
			st.q[0] = bodyPart{}
			st.q = st.q[1:]
			st.writing = true
			c.mu.Unlock()
			err := st.writePart(w, p)
			c.mu.Lock()
			st.writing = false
			if p.f == nil {
				st.qBytes -= len(p.b)
				st.dequeuedLocked(len(p.b))
			}
			if err != nil {
				st.lostLocked()
				c.mu.Unlock()
				return
			}
			if r.waitSend && st.readyLocked() {
				c.wakeLocked(r, nil)
			}
			c.mu.Unlock()
			continue
		}
		// the final part is written (and the trailers are ready)
		if r.trailers && r.keepTr {
			scanHeaders(r.trHdr, func(name, value []byte) {
				w.Header().Add(http.TrailerPrefix+strings.ToLower(string(name)), string(value))
			})
		}
		if m := c.s.metrics; m != nil {
			m.observe(r)
		}
		c.mu.Unlock()
		return
	}
}

// h3WriteHead sets the response's header fields and writes its HEADERS frame.
func h3WriteHead(w http.ResponseWriter, s *Server, status int, hdr []byte, trailers bool) {
	h := w.Header()
	if !s.cfg.DateHeader {
		h["Date"] = nil // (quic-go adds one otherwise)
	}
	h["Content-Type"] = nil // no sniffing: only the application's content-type is sent
	for _, kv := range s.h2Extra() {
		h[kv[0]] = append(h[kv[0]], kv[1])
	}
	scanHeaders(hdr, func(name, value []byte) {
		n := strings.ToLower(string(name))
		if connSpecific(n) {
			return
		}
		h[n] = append(h[n], string(value))
	})
	if _, ok := h["content-type"]; ok {
		delete(h, "Content-Type")
	}
	if cl, ok := h["content-length"]; ok { // (quic-go checks the canonical name)
		delete(h, "content-length")
		h["Content-Length"] = cl
	}
	w.WriteHeader(status)
}

// h3Reset resets a stream whose request body came too slowly: H3_REQUEST_CANCELLED
// when no body byte of the response has left (the stream is taken from quic-go), else
// quic-go's reset of an aborted handler (H3_INTERNAL_ERROR).
func h3Reset(w http.ResponseWriter) {
	if hs, ok := w.(http3.HTTPStreamer); ok {
		if str, err := hs.HTTPStream(); err == nil {
			str.CancelRead(quic.StreamErrorCode(http3.ErrCodeRequestCanceled))
			str.CancelWrite(quic.StreamErrorCode(http3.ErrCodeRequestCanceled))
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// writePart writes a body part to the stream (blocking on QUIC's flow control) and
// flushes it. Meanwhile the response's clock runs (writerate.go's rule, per stream:
// RespMinRate on average after RespGrace, from the part's first write): past
// its deadline the write fails (os.ErrDeadlineExceeded, counted in respTimeouts) and
// quic-go resets the stream (H3_REQUEST_CANCELLED: a DATA frame is left unfinished).
func (st *h3Stream) writePart(w http.ResponseWriter, p bodyPart) error {
	cfg := &st.r.c.s.cfg
	wd, _ := w.(interface{ SetWriteDeadline(time.Time) error })
	var at time.Time
	var n int64
	on := wd != nil && cfg.RespMinRate > 0
	deadline := func() time.Time {
		credit := time.Duration(float64(n) / float64(cfg.RespMinRate) * float64(time.Second))
		return at.Add(cfg.RespGrace + credit)
	}
	var src io.Reader
	if p.f != nil {
		defer p.f.Close()
		src = io.NewSectionReader(p.f, p.off, p.n)
	}
	b := p.b
	var chunk []byte
	if on {
		at = time.Now()
		wd.SetWriteDeadline(deadline())
	}
	for {
		if len(b) == 0 && src != nil {
			if chunk == nil {
				chunk = make([]byte, 32<<10)
			}
			m, err := src.Read(chunk)
			if m == 0 && err == io.EOF {
				break
			} else if m == 0 && err != nil {
				return err
			}
			b = chunk[:m]
		}
		if len(b) == 0 {
			break
		}
		m, err := w.Write(b)
		b = b[m:]
		n += int64(m)
		if err == nil {
			continue
		}
		if !on || !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		if !time.Now().Before(deadline()) {
			st.r.c.s.ctr.respTimeouts.Add(1)
			return err
		}
		wd.SetWriteDeadline(deadline()) // the client read enough meanwhile: on
	}
	if fe, ok := w.(interface{ FlushError() error }); ok {
		for {
			err := fe.FlushError()
			if err == nil || !on || !errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if !time.Now().Before(deadline()) {
				st.r.c.s.ctr.respTimeouts.Add(1)
				return err
			}
			wd.SetWriteDeadline(deadline())
		}
	}
	if on {
		wd.SetWriteDeadline(time.Time{})
	}
	return nil
}

// ---- the application's side: *h3Stream is its Request's protocol (exchange.go) ----

func (st *h3Stream) tookBodyLocked(n int) bool {
	if n > 0 {
		st.cond.Broadcast() // the body reader may read again
	}
	return false
}

func (st *h3Stream) continueLocked() {
	if !st.finished {
		st.want100 = true
		st.cond.Broadcast()
		if st.rd != nil && st.r.c.s.cfg.BodyMinRate > 0 {
			st.rd.SetReadDeadline(time.Now()) // the body reader starts the body's clock
		}
	}
}

func (st *h3Stream) send(part bodyPart, more bool, notStarted error) (flags int, held bool, err error) {
	r := st.r
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := r.refuseLocked(part, notStarted); err != nil {
		return 0, false, err
	}
	if part.clamp && part.f != nil { // pathsend: the rest of the body
		more = false
	}
	if err := st.queueLocked(part, more); err != nil {
		return 0, false, err
	}
	if !st.readyLocked() && !r.lost && !st.endQd {
		r.waitSend = true
		flags |= SendPaused
	}
	return flags, false, nil
}

// queueLocked adds a part of the response: the head first, then the body's parts.
func (st *h3Stream) queueLocked(part bodyPart, more bool) error {
	r := st.r
	if !r.headSent {
		r.noBody = r.head || r.status < 200 || r.status == 204 || r.status == 304
		r.clen = -1
		scanHeaders(r.hdr, func(name, value []byte) {
			if len(name) == 14 && strings.EqualFold(string(name), "content-length") {
				if v, err := strconv.ParseInt(string(value), 10, 64); err == nil && v >= 0 {
					r.clen = v
				}
			}
		})
		r.headSent = true
		st.headOut = true
	}
	n := int64(len(part.b))
	if part.f != nil {
		n = part.n
		if part.clamp && r.clen >= 0 {
			n = min(n, r.clen-r.sent)
			part.n = n
		}
	}
	if n > 0 && !r.noBody {
		if r.clen >= 0 && r.sent+n > r.clen {
			if part.f != nil {
				part.f.Close()
			}
			return ErrTooLong
		}
		if part.f == nil {
			part.b = append([]byte(nil), part.b...)
			st.qBytes += len(part.b)
			r.c.q.queued += len(part.b)
		}
		st.q = append(st.q, part)
		r.sent += n
	} else if part.f != nil {
		part.f.Close()
	}
	st.cond.Broadcast()
	if !more && !r.noBody && r.clen >= 0 && r.sent < r.clen {
		r.bodyEnd = true // the stream is reset when the application returns (cutLocked)
		return ErrTooShort
	}
	if !more {
		r.bodyEnd = true
		if r.trailers {
			r.keepTr = true
		} else {
			st.doneLocked()
		}
		st.endQd = true
	}
	return nil
}

// doneLocked: the response is complete (queued): the application's receive sees it.
func (st *h3Stream) doneLocked() {
	r := st.r
	r.done = true
	if r.waitRecv {
		r.c.wakeLocked(r, nil)
	}
	st.cond.Broadcast()
}

func (st *h3Stream) completeWithLocked(body []byte) { st.queueLocked(bodyPart{b: body}, false) }

func (st *h3Stream) trailersLocked() error {
	st.trReady = true
	st.doneLocked()
	return nil
}

// readyLocked: the queued body and the connection's (h3Conn.queued) are under WriteBuffer
// and no file part waits. A stream held back by its connection's bound is remembered, to
// be woken when it is under it again (dequeuedLocked).
func (st *h3Stream) readyLocked() bool {
	c := st.r.c
	if st.qBytes > c.s.cfg.WriteBuffer {
		return false
	}
	if c.q.queued > c.s.cfg.WriteBuffer && !st.finished && !st.r.lost {
		if c.q.waiting == nil {
			c.q.waiting = map[*h3Stream]struct{}{}
		}
		c.q.waiting[st] = struct{}{}
		return false
	}
	for _, p := range st.q {
		if p.f != nil {
			return false
		}
	}
	return true
}

func (st *h3Stream) cutLocked(bool) {
	st.r.done = true
	st.cut = true
	st.cond.Broadcast()
}

// h3Close (Server.Close): GOAWAY on every connection; the streams in flight finish.
func (s *Server) h3Close(hs []h3Server) {
	for _, h := range hs {
		h.ln.Close() // no new connection from here on
		go h.srv.Shutdown(context.Background())
	}
}

// h3Abort (Server.Abort): every HTTP/3 connection closes now.
func (s *Server) h3Abort(hs []h3Server) {
	for _, h := range hs {
		go h.srv.Close()
	}
}
