package httpserver

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// pattern is n bytes that differ from one 4-byte word to the next, so that output sent twice,
// lost or out of order does not compare equal.
func pattern(n int) []byte {
	b := make([]byte, n+4)
	for i := 0; i < n; i += 4 {
		binary.BigEndian.PutUint32(b[i:], uint32(i/4)*2654435761)
	}
	return b[:n]
}

// sendAll sends body in parts of part bytes (one part if part is 0), waiting whenever Send
// reports backpressure; it returns Send's error (ErrDisconnected when the client left).
func sendAll(a *fakeApp, r *Request, body []byte, part int) error {
	return sendAllVia(a, r, body, part, false)
}

// sendAllVia is sendAll; with held, each part goes through SendHeld from a scratch copy
// that is overwritten as soon as the call returns (a TLS connection borrows a body for the
// call only: what it did not write then must have been copied), and never released.
func sendAllVia(a *fakeApp, r *Request, body []byte, part int, held bool) error {
	if err := r.Start(200, nil); err != nil {
		return err
	}
	if part == 0 {
		part = len(body)
	}
	var scratch []byte
	for i := 0; i < len(body); i += part {
		end := min(i+part, len(body))
		var fl int
		var err error
		if held {
			scratch = append(scratch[:0], body[i:end]...)
			var kept bool
			fl, kept, err = r.SendHeld(scratch, end < len(body), func() { panic("a borrowed body was released") })
			if kept {
				panic("a TLS connection held a body past its send")
			}
			clear(scratch)
		} else {
			fl, err = r.Send(body[i:end], end < len(body))
		}
		if err != nil {
			return err
		}
		a.s.Flush()
		for fl&SendPaused != 0 {
			select {
			case <-a.wakeCh(r):
			case <-time.After(10 * time.Second):
				return fmt.Errorf("no wake-up")
			}
			ok, err := r.SendReady()
			if err != nil {
				return err
			}
			if ok {
				break
			}
		}
	}
	return nil
}

// startTLSWith is startServer with cfg, then TLS (no client certificates).
func startTLSWith(t *testing.T, p *testPKI, cfg Config, h func(a *fakeApp, r *Request)) (*fakeApp, string) {
	a, addr := startServer(t, cfg, h)
	if err := a.s.SetTLS(TLSOptions{CertFile: p.certFile, KeyFile: p.keyFile}); err != nil {
		t.Fatal(err)
	}
	return a, addr
}

func dialTLS(t *testing.T, addr string, p *testPKI) *tls.Conn {
	tc, err := tls.Dial("tcp", addr, p.client("http/1.1"))
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

// A response far larger than the socket takes, sent in one part or in many, reaches a
// client that reads slowly at first whole and in order; the connection stays usable.
// Held: the parts go through SendHeld and are borrowed (sendAllVia).
func TestTLSLargeResponseSlowReader(t *testing.T) {
	for _, held := range []bool{false, true} {
		t.Run(fmt.Sprint("held=", held), func(t *testing.T) { testTLSLargeResponseSlowReader(t, held) })
	}
}

func testTLSLargeResponseSlowReader(t *testing.T, held bool) {
	big := pattern(8 << 20)
	p := newPKI(t)
	_, addr := startTLSWith(t, p, Config{WriteBuffer: 64 << 10}, func(a *fakeApp, r *Request) {
		body, part := big, 0
		switch string(r.Path()) {
		case "/parts":
			part = 1 << 20
		case "/small": // less than the flush encrypts at once
			body = big[:40<<10]
		}
		if err := sendAllVia(a, r, body, part, held); err != nil {
			panic(err)
		}
	})
	tc := dialTLS(t, addr, p)
	defer tc.Close()
	sr := &slowReader{r: tc}
	br := bufio.NewReaderSize(sr, 4096)
	for _, path := range []string{"/one", "/parts", "/one"} {
		fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
		time.Sleep(100 * time.Millisecond) // the socket fills up
		sr.slow = 1 << 20                  // the first MiB slowly
		if _, body := readResp(t, br, "GET"); body != string(big) {
			t.Fatal(path, "body differs", len(body))
		}
	}
	// responses smaller than a flush encrypts at once, pipelined past what the socket takes
	var reqs bytes.Buffer
	for i := 0; i < 300; i++ {
		reqs.WriteString("GET /small HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	tc.Write(reqs.Bytes())
	time.Sleep(100 * time.Millisecond)
	sr.slow = 1 << 20
	tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i := 0; i < 300; i++ {
		if _, body := readResp(t, br, "GET"); body != string(big[:40<<10]) {
			t.Fatal("small", i, "body differs", len(body))
		}
	}
}

// slowReader reads at most 16 KiB at a time and sleeps before each read while slow > 0.
type slowReader struct {
	r    io.Reader
	slow int
}

func (s *slowReader) Read(p []byte) (int, error) {
	if s.slow > 0 {
		time.Sleep(time.Millisecond)
		p = p[:min(len(p), 16<<10)]
	}
	n, err := s.r.Read(p)
	s.slow -= n
	return n, err
}

// Many requests in a row on one TLS connection, then many pipelined in one write: every
// response arrives, in order.
func TestTLSKeepAliveMany(t *testing.T) {
	p := newPKI(t)
	_, addr := startTLSWith(t, p, Config{}, hello)
	tc := dialTLS(t, addr, p)
	defer tc.Close()
	br := bufio.NewReader(tc)
	for i := 0; i < 2000; i++ {
		fmt.Fprintf(tc, "GET /%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
		if _, body := readResp(t, br, "GET"); body != fmt.Sprintf("hello /%d", i) {
			t.Fatal(i, body)
		}
	}
	var reqs bytes.Buffer
	for i := 0; i < 30; i++ {
		fmt.Fprintf(&reqs, "GET /p%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
	}
	tc.Write(reqs.Bytes())
	for i := 0; i < 30; i++ {
		if _, body := readResp(t, br, "GET"); body != fmt.Sprintf("hello /p%d", i) {
			t.Fatal(i, body)
		}
	}
}

// A client that goes away in the middle of a large response: the application's send fails
// with ErrDisconnected and the connection is gone from the server.
func TestTLSDisconnectMidResponse(t *testing.T) {
	for _, held := range []bool{false, true} {
		t.Run(fmt.Sprint("held=", held), func(t *testing.T) { testTLSDisconnectMidResponse(t, held) })
	}
}

func testTLSDisconnectMidResponse(t *testing.T, held bool) {
	p := newPKI(t)
	errs := make(chan error, 1)
	a, addr := startTLSWith(t, p, Config{WriteBuffer: 64 << 10}, func(a *fakeApp, r *Request) {
		errs <- sendAllVia(a, r, pattern(256<<20), 1<<20, held)
	})
	tc := dialTLS(t, addr, p)
	io.WriteString(tc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, err := io.ReadFull(tc, make([]byte, 300<<10)); err != nil {
		t.Fatal(err)
	}
	tc.NetConn().Close()
	select {
	case err := <-errs:
		if err != ErrDisconnected {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the application's send never failed")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		a.s.mu.Lock()
		n := len(a.s.conns)
		a.s.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the connection was not forgotten")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// recordTypes is a net.Conn that notes the type of every TLS record it reads (the client's
// view of what the server wrote).
type recordTypes struct {
	net.Conn
	mu    sync.Mutex
	raw   []byte
	types []byte
}

func (r *recordTypes) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.mu.Lock()
	r.raw = append(r.raw, p[:n]...)
	for len(r.raw) >= 5 {
		l := 5 + int(binary.BigEndian.Uint16(r.raw[3:5]))
		if len(r.raw) < l {
			break
		}
		r.types = append(r.types, r.raw[0])
		r.raw = r.raw[l:]
	}
	r.mu.Unlock()
	return n, err
}

// A TLS connection the server closes (connection: close, and idle ones at shutdown) ends
// with close_notify: with TLS 1.2 the alert's record type shows on the wire.
func TestTLSCloseNotify(t *testing.T) {
	p := newPKI(t)
	a, addr := startTLS(t, p, 0, hello)
	for _, req := range []string{"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", ""} {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		rt := &recordTypes{Conn: nc}
		cfg := p.client("http/1.1")
		cfg.MaxVersion = tls.VersionTLS12
		tc := tls.Client(rt, cfg)
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		if req == "" {
			// an idle connection, closed by the server's shutdown
			io.WriteString(tc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			if _, body := readResp(t, bufio.NewReader(io.LimitReader(tc, 1<<20)), "GET"); body != "hello /" {
				t.Fatal(body)
			}
			a.s.Close()
		} else {
			io.WriteString(tc, req)
		}
		tc.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(tc)
		if err != nil {
			t.Fatal(err)
		}
		if req != "" && !strings.HasSuffix(string(b), "hello /") {
			t.Fatalf("%q", b)
		}
		rt.mu.Lock()
		types := rt.types
		rt.mu.Unlock()
		if len(types) == 0 || types[len(types)-1] != 21 { // alert
			t.Fatalf("records %v: the last is not an alert", types)
		}
		tc.Close()
	}
}

// A response the flush encrypts whole but the socket takes only in part: the records left
// over are written by the writer goroutine, though no plaintext is left for it.
func TestTLSRecordsLeftOverByFlush(t *testing.T) {
	p := newPKI(t)
	reqs := make(chan *Request, 1)
	release := make(chan struct{})
	a, addr := startTLSWith(t, p, Config{}, func(a *fakeApp, r *Request) {
		reqs <- r
		<-release
	})
	defer close(release)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	nc.(*net.TCPConn).SetReadBuffer(8 << 10)
	tc := tls.Client(nc, p.client("http/1.1"))
	defer tc.Close()
	io.WriteString(tc, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	r := <-reqs
	r.c.nc.(*tlsConn).sink.Conn.(*net.TCPConn).SetWriteBuffer(8 << 10)
	body := pattern(tlsChunk - 4<<10) // less than one flush encrypts, more than the socket takes
	r.Start(200, nil)
	r.Send(body, false)
	a.s.Flush()
	r.c.mu.Lock()
	outLeft := len(r.c.out)
	r.c.mu.Unlock()
	if outLeft != 0 {
		t.Fatalf("the flush left %d bytes of plaintext", outLeft)
	}
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, got := readResp(t, bufio.NewReader(tc), "GET"); got != string(body) {
		t.Fatal("body differs", len(got))
	}
}

// Records written at the same time by a non-blocking writer (the flush), a blocking one
// (the writer goroutine's tlsConn.Write) and crypto/tls itself outside both (as the reader
// goroutine's alerts and key updates, close_notify: straight to the sink, queued there
// while another owns the output) all reach the peer whole, each writer's in its order.
func TestTLSSinkWritersTakeTurns(t *testing.T) {
	p := newPKI(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := New(Config{})
	if err := s.SetTLS(TLSOptions{CertFile: p.certFile, KeyFile: p.keyFile}); err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, _ := ln.Accept()
		nc.(*net.TCPConn).SetWriteBuffer(16 << 10)
		t := s.wrapTLS(nc)
		t.(*tlsConn).Handshake()
		accepted <- t
	}()
	tc, err := tls.Dial("tcp", ln.Addr().String(), p.client())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	sc := (<-accepted).(*tlsConn)
	const n = 3000
	lines := func(tag byte, i int) []byte {
		var b []byte
		for j := i; j < i+10; j++ {
			b = fmt.Appendf(b, "%c%06d%s\n", tag, j, strings.Repeat(".", j%200))
		}
		return b
	}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // the flush's way: non-blocking, the rest by the writer goroutine's
		defer wg.Done()
		for i := 0; i < n; i += 10 {
			b := lines('A', i)
			m, err := sc.tryWrite(b)
			if err == nil {
				continue
			}
			if err := sc.sink.drain(); err != nil {
				panic(err)
			}
			if m < len(b) {
				if _, err := sc.Write(b[m:]); err != nil {
					panic(err)
				}
			}
		}
	}()
	for tag, write := range map[byte]func([]byte) (int, error){
		'B': sc.Write,      // the writer goroutine's: owns the output while it writes
		'C': sc.Conn.Write, // crypto/tls's own: does not wait for the output
	} {
		go func() {
			defer wg.Done()
			for i := 0; i < n; i += 10 {
				if _, err := write(lines(tag, i)); err != nil {
					panic(err)
				}
			}
		}()
	}
	next := map[byte]int{}
	br := bufio.NewReader(tc)
	tc.SetReadDeadline(time.Now().Add(20 * time.Second))
	for next['A'] < n || next['B'] < n || next['C'] < n {
		if next['A'] < 500 {
			time.Sleep(50 * time.Microsecond) // a slow reader at first: the socket fills
		}
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err, next)
		}
		var tag byte
		var i int
		fmt.Sscanf(line, "%c%06d", &tag, &i)
		if i != next[tag] || len(line) != 8+i%200 {
			t.Fatalf("got %q, want %c%06d", line, tag, next[tag])
		}
		next[tag]++
	}
	wg.Wait()
}

// A WebSocket session over TLS (wss): the reader goroutine's pongs and close echo and the
// application's messages share the flush's output.
func TestTLSWebSocket(t *testing.T) {
	p := newPKI(t)
	codes := make(chan int, 1)
	_, addr := startTLSWith(t, p, Config{}, wsEchoApp(codes))
	tc := dialTLS(t, addr, p)
	defer tc.Close()
	br, head := wsHandshake(t, tc, "")
	if !strings.HasPrefix(head, "HTTP/1.1 101 ") {
		t.Fatalf("handshake response: %q", head)
	}
	big := pattern(1 << 20)
	for i := 0; i < 20; i++ {
		writeFrame(tc, 0x89, []byte("p"), true)
		writeFrame(tc, 0x82, big[:i*50000], true)
		if f, b := readFrame(t, br); f != 0x8a || string(b) != "p" {
			t.Fatalf("pong: %x %q", f, b)
		}
		if f, b := readFrame(t, br); f != 0x82 || !bytes.Equal(b, big[:i*50000]) {
			t.Fatalf("echo %d: %x %d", i, f, len(b))
		}
	}
	wsClientClose(t, tc, br, codes)
}

// A record crypto/tls writes while another writer owns the output (here: records a flush
// left on a full socket) is queued behind the owner's, not written past them, and its
// writer does not wait; the owner writes both in order. With the output free, a record
// goes out at once.
func TestTLSSinkQueuesWhileOwned(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cl, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	k := &tlsSink{Conn: srv}
	k.cond.L = &k.mu
	k.owned, k.pend = true, []byte("first;")
	if n, err := k.Write([]byte("second;")); n != 7 || err != nil {
		t.Fatal(n, err)
	}
	if string(k.pend) != "first;second;" {
		t.Fatalf("queued %q", k.pend)
	}
	if err := k.writeAll(); err != nil || k.owned {
		t.Fatal(err, k.owned)
	}
	if _, err := k.Write([]byte("third;")); err != nil || k.owned || len(k.pend) != 0 {
		t.Fatal(err, k.owned, k.pend)
	}
	cl.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, 19)
	if _, err := io.ReadFull(cl, got); err != nil || string(got) != "first;second;third;" {
		t.Fatalf("%q %v", got, err)
	}
}
