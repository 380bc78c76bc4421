package httpserver

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeApp plays the binding's part: it takes the queue when notified and runs handler for
// each request in a goroutine of its own, then AppDone and Flush.
type fakeApp struct {
	s       *Server
	notify  chan struct{}
	handler func(a *fakeApp, r *Request)
	mu      sync.Mutex
	wakes   map[*Request]chan struct{}
	seen    int
	other   chan Event // events of other kinds (EvConnClosed), if set
}

func startServer(t *testing.T, cfg Config, h func(a *fakeApp, r *Request)) (*fakeApp, string) {
	t.Helper()
	return startServerWith(t, cfg, func(*Server) {}, h)
}

func (a *fakeApp) run(done chan struct{}) {
	var evs []Event
	for {
		select {
		case <-done:
			return
		case <-a.notify:
		}
		evs = a.s.Take(evs[:0])
		for _, ev := range evs {
			r := ev.Req
			switch ev.Kind {
			case EvRequest:
				a.mu.Lock()
				a.seen++
				a.mu.Unlock()
				go func() {
					a.handler(a, r)
					r.AppDone()
					a.s.Flush()
				}()
			case EvWake:
				select {
				case a.wakeCh(r) <- struct{}{}:
				default:
				}
			default:
				if a.other != nil {
					a.other <- ev
				}
			}
		}
	}
}

func (a *fakeApp) wakeCh(r *Request) chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	ch := a.wakes[r]
	if ch == nil {
		ch = make(chan struct{}, 1)
		a.wakes[r] = ch
	}
	return ch
}

func (a *fakeApp) seenCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.seen
}

// receive is ASGI's receive(): it waits for the EvWake when nothing is there.
func (a *fakeApp) receive(r *Request) ([]byte, RecvState) { return a.receiveOpt(r, false) }

// receiveOpt is receive; with flush, as the binding does it: the loop flushes what Receive
// queued (a 100 Continue) before it waits.
func (a *fakeApp) receiveOpt(r *Request, flush bool) ([]byte, RecvState) {
	for {
		b, st := r.Receive()
		if st != RecvWait {
			return b, st
		}
		if flush {
			a.s.Flush()
		}
		select {
		case <-a.wakeCh(r):
		case <-time.After(10 * time.Second):
			panic("receive: no wake-up")
		}
	}
}

// readBody receives r's whole body (until the last part or a disconnect).
func (a *fakeApp) readBody(r *Request, flush bool) []byte {
	var body []byte
	for {
		b, st := a.receiveOpt(r, flush)
		body = append(body, b...)
		if st != RecvBody {
			return body
		}
	}
}

func (a *fakeApp) respond(r *Request, status int, hdr string, parts ...string) {
	if err := r.Start(status, []byte(hdr)); err != nil {
		panic(err)
	}
	if len(parts) == 0 {
		parts = []string{""}
	}
	for i, p := range parts {
		if _, err := r.Send([]byte(p), i < len(parts)-1); err != nil {
			panic(err)
		}
		a.s.Flush()
	}
}

func hello(a *fakeApp, r *Request) {
	a.respond(r, 200, "content-type: text/plain\r\n", "hello "+string(r.Path()))
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

func readResp(t *testing.T, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestKeepAlive(t *testing.T) {
	_, addr := startServer(t, Config{ServerHeader: true, DateHeader: true, Headers: [][2]string{{"x-extra", "1"}}}, hello)
	c, br := dial(t, addr)
	for i := 0; i < 3; i++ {
		fmt.Fprintf(c, "GET /a%%20b%d?q=1 HTTP/1.1\r\nHost: x\r\n\r\n", i)
		resp, body := readResp(t, br, "GET")
		if resp.StatusCode != 200 || body != fmt.Sprintf("hello /a b%d", i) {
			t.Fatalf("got %d %q", resp.StatusCode, body)
		}
		if resp.ContentLength != int64(len(body)) || resp.Close {
			t.Fatalf("framing: length %d close %v", resp.ContentLength, resp.Close)
		}
		if resp.Header.Get("Server") != "goloop" || resp.Header.Get("Date") == "" || resp.Header.Get("X-Extra") != "1" {
			t.Fatalf("headers: %v", resp.Header)
		}
	}
}

func TestRequestHead(t *testing.T) {
	got := make(chan string, 1)
	_, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		var sb strings.Builder
		fmt.Fprintf(&sb, "%s|%s|%s|%s|%d.%d", r.Method(), r.RawPath(), r.Query(), r.Path(), r.Major, r.Minor)
		for i := 0; i < r.NumHeaders(); i++ {
			n, v := r.Header(i)
			fmt.Fprintf(&sb, "|%s=%s", n, v)
		}
		got <- sb.String()
		a.respond(r, 204, "")
	})
	c, br := dial(t, addr)
	io.WriteString(c, "DELETE http://example.com/p%2Fq%ZZ?x=%20 HTTP/1.1\r\nHost: h\r\nX-Mixed-Case: V a\r\n\r\n")
	resp, _ := readResp(t, br, "DELETE")
	if resp.StatusCode != 204 {
		t.Fatal(resp.Status)
	}
	// absolute-form: the target's authority is the host (RFC 9112 3.2.2), Host is ignored
	want := "DELETE|/p%2Fq%ZZ|x=%20|/p/q%ZZ|1.1|host=example.com|x-mixed-case=V a"
	if s := <-got; s != want {
		t.Fatalf("head:\n got %s\nwant %s", s, want)
	}
}

// Pipelined requests are all dispatched before any response, answered out of order by
// the app, and the responses leave in request order.
func TestPipelining(t *testing.T) {
	const n = 10
	var mu sync.Mutex
	arrived := 0
	all := make(chan struct{})
	a, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		mu.Lock()
		arrived++
		if arrived == n {
			close(all)
		}
		mu.Unlock()
		<-all // every request is in flight before any answer
		var i int
		fmt.Sscanf(string(r.Path()), "/%d", &i)
		time.Sleep(time.Duration(n-i) * time.Millisecond) // later ones answer first
		a.respond(r, 200, "", fmt.Sprintf("r%d", i))
	})
	c, br := dial(t, addr)
	var req bytes.Buffer
	for i := 0; i < n; i++ {
		fmt.Fprintf(&req, "GET /%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
	}
	c.Write(req.Bytes())
	for i := 0; i < n; i++ {
		_, body := readResp(t, br, "GET")
		if body != fmt.Sprintf("r%d", i) {
			t.Fatalf("response %d: %q", i, body)
		}
	}
	if a.seenCount() != n {
		t.Fatalf("dispatched %d", a.seenCount())
	}
}

// A chunked request body streams to the app; a response in parts goes out chunked.
func TestChunkedInOut(t *testing.T) {
	_, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		var body []byte
		for {
			b, st := a.receive(r)
			body = append(body, b...)
			if st != RecvBody {
				if st != RecvLast {
					panic("disconnect")
				}
				break
			}
		}
		r.Start(200, nil)
		r.Send([]byte("got:"), true)
		a.s.Flush()
		r.Send(body, true)
		r.Send(nil, false)
	})
	c, br := dial(t, addr)
	io.WriteString(c, "POST /u HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
	time.Sleep(20 * time.Millisecond) // the body arrives in two reads
	io.WriteString(c, "6\r\n world\r\n0\r\n\r\n")
	resp, body := readResp(t, br, "POST")
	if body != "got:hello world" || len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
		t.Fatalf("%q %v", body, resp.TransferEncoding)
	}
	// the connection is still usable
	io.WriteString(c, "POST /u HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
	if _, body := readResp(t, br, "POST"); body != "got:abc" {
		t.Fatalf("%q", body)
	}
}

func expectClosedWith(t *testing.T, addr, req string, code int) {
	t.Helper()
	c, br := dial(t, addr)
	io.WriteString(c, req)
	resp, _ := readResp(t, br, "GET")
	if resp.StatusCode != code || !resp.Close {
		t.Fatalf("status %d close %v, want %d and close", resp.StatusCode, resp.Close, code)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("connection not closed: %v", err)
	}
}

func TestBadRequest(t *testing.T) {
	a, addr := startServer(t, Config{}, hello)
	expectClosedWith(t, addr, "GARBAGE\r\n\r\n", 400)
	expectClosedWith(t, addr, "GET / HTTP/1.1\r\nBad Header\r\n\r\n", 400)
	expectClosedWith(t, addr, "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400)
	if a.seenCount() != 0 {
		t.Fatalf("the app saw %d malformed requests", a.seenCount())
	}
	// after a good one on the same connection: its answer first, then the 400
	c, br := dial(t, addr)
	io.WriteString(c, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\nBAD\x01\r\n\r\n")
	if _, body := readResp(t, br, "GET"); body != "hello /ok" {
		t.Fatal(body)
	}
	if resp, _ := readResp(t, br, "GET"); resp.StatusCode != 400 {
		t.Fatal(resp.Status)
	}
}

func TestHeadTooLarge(t *testing.T) {
	a, addr := startServer(t, Config{MaxHeadSize: 1024}, hello)
	expectClosedWith(t, addr, "GET / HTTP/1.1\r\nX: "+strings.Repeat("a", 2000)+"\r\n\r\n", 431)
	c, br := dial(t, addr) // under the limit is fine
	io.WriteString(c, "GET / HTTP/1.1\r\nX: "+strings.Repeat("a", 900)+"\r\n\r\n")
	if resp, _ := readResp(t, br, "GET"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	if a.seenCount() != 1 {
		t.Fatal(a.seenCount())
	}
}

func TestKeepAliveTimeout(t *testing.T) {
	_, addr := startServer(t, Config{KeepAliveTimeout: 200 * time.Millisecond}, hello)
	c, br := dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	readResp(t, br, "GET")
	start := time.Now()
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("expected the idle connection to close: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("closed too late")
	}
}

// A slow request keeps its connection past the keep-alive timeout.
func TestKeepAliveTimeoutBusy(t *testing.T) {
	_, addr := startServer(t, Config{KeepAliveTimeout: 100 * time.Millisecond}, func(a *fakeApp, r *Request) {
		time.Sleep(400 * time.Millisecond)
		hello(a, r)
	})
	c, br := dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, _ := readResp(t, br, "GET"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
}

func TestNoResponse500(t *testing.T) {
	_, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {})
	c, br := dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body := readResp(t, br, "GET")
	if resp.StatusCode != 500 || body != "Internal Server Error" {
		t.Fatal(resp.Status, body)
	}
}

func TestIncompleteResponseCloses(t *testing.T) {
	_, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		r.Start(200, []byte("content-length: 10\r\n"))
		r.Send([]byte("abc"), true)
	})
	c, br := dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("expected a truncated body")
	}
}

func TestTooLong(t *testing.T) {
	errc := make(chan error, 1)
	_, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		r.Start(200, []byte("Content-Length: 2\r\n"))
		_, err := r.Send([]byte("abc"), false)
		errc <- err
	})
	c, _ := dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if err := <-errc; err != ErrTooLong {
		t.Fatal(err)
	}
}

func TestHTTP10AndHead(t *testing.T) {
	_, addr := startServer(t, Config{}, hello)
	expectClosedWith(t, addr, "GET / HTTP/1.0\r\n\r\n", 200)
	c, br := dial(t, addr)
	io.WriteString(c, "HEAD /h HTTP/1.1\r\nHost: x\r\n\r\nGET /g HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body := readResp(t, br, "HEAD")
	if resp.StatusCode != 200 || body != "" {
		t.Fatal(resp.Status, body)
	}
	if _, body := readResp(t, br, "GET"); body != "hello /g" {
		t.Fatal(body)
	}
}

func TestLimitConcurrency(t *testing.T) {
	release := make(chan struct{})
	_, addr := startServer(t, Config{LimitConcurrency: 1}, func(a *fakeApp, r *Request) {
		<-release
		hello(a, r)
	})
	c1, br1 := dial(t, addr)
	io.WriteString(c1, "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(50 * time.Millisecond)
	expectClosedWith(t, addr, "GET /2 HTTP/1.1\r\nHost: x\r\n\r\n", 503)
	close(release)
	if _, body := readResp(t, br1, "GET"); body != "hello /1" {
		t.Fatal(body)
	}
}

func TestDisconnect(t *testing.T) {
	got := make(chan RecvState, 1)
	sendErr := make(chan error, 1)
	_, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		a.receive(r) // the (empty) body
		_, st := a.receive(r)
		got <- st
		_, err := r.Send(nil, false)
		if err == nil {
			err = r.Start(200, nil)
		}
		sendErr <- err
	})
	c, _ := dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(50 * time.Millisecond)
	c.Close()
	if st := <-got; st != RecvDisconnect {
		t.Fatal(st)
	}
	if err := <-sendErr; err != ErrDisconnected && err != ErrNotStarted {
		t.Fatal(err)
	}
}

// Graceful close: the request in flight is answered (connection: close), then the
// connection closes; new connections are refused.
func TestGracefulClose(t *testing.T) {
	inApp := make(chan struct{})
	release := make(chan struct{})
	a, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		close(inApp)
		<-release
		hello(a, r)
	})
	c, br := dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	<-inApp
	a.s.Close()
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Fatal("still accepting")
	}
	close(release)
	resp, body := readResp(t, br, "GET")
	if body != "hello /" || !resp.Close {
		t.Fatal(body, resp.Close)
	}
	select {
	case <-a.s.Idle():
	case <-time.After(5 * time.Second):
		t.Fatal("not idle")
	}
}

// A large response leaves through the writer goroutine and the sender is paused.
func TestLargeResponse(t *testing.T) {
	big := strings.Repeat("x", 4<<20)
	_, addr := startServer(t, Config{WriteBuffer: 64 << 10}, func(a *fakeApp, r *Request) {
		r.Start(200, nil)
		for i := 0; i < 4; i++ {
			fl, err := r.Send([]byte(big[i<<20:(i+1)<<20]), i < 3)
			if err != nil {
				panic(err)
			}
			for fl&SendPaused != 0 {
				<-a.wakeCh(r)
				if ok, _ := r.SendReady(); ok {
					break
				}
			}
			a.s.Flush()
		}
	})
	c, br := dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(100 * time.Millisecond) // the socket fills up
	if _, body := readResp(t, br, "GET"); body != big {
		t.Fatal(len(body))
	}
}

// ListenFd leaves the caller's descriptor alone (it owns a duplicate): closing the server
// and collecting garbage must not close fd.
func TestListenFdKeepsCallersFd(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	s := New(Config{})
	if err := s.ListenFd(fd); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for i := 0; i < 3; i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		t.Fatalf("the caller's descriptor was closed: %v", err)
	}
}
