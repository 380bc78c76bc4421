package httpserver

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// loopDriver: startServerWith serves with the loop driver (TestLoopDriver sets it).
var loopDriver bool

// poke wakes the fake application's taker (Notify, and the test poller after its events).
func (a *fakeApp) poke() {
	select {
	case a.notify <- struct{}{}:
	default:
	}
}

// testPoller is the loop driver's poller in the tests: an epoll run by a goroutine of its
// own (the loop thread's part); after each batch of events it calls after (the binding
// takes the queues then).
type testPoller struct {
	epfd, evfd int
	mu         sync.Mutex
	hs         map[int]func(uint32)
	gate       sync.Mutex // held around each batch of events (a test may hold them back)
	after      func()
	done       chan struct{}
	stopped    chan struct{}
}

func newTestPoller(t *testing.T, after func()) *testPoller {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	evfd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(evfd)})
	p := &testPoller{epfd: epfd, evfd: evfd, hs: map[int]func(uint32){}, after: after,
		done: make(chan struct{}), stopped: make(chan struct{})}
	go p.run()
	return p
}

func (p *testPoller) Register(fd int, events uint32, h func(uint32)) error {
	p.mu.Lock()
	p.hs[fd] = h
	p.mu.Unlock()
	return unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: events, Fd: int32(fd)})
}

func (p *testPoller) Modify(fd int, events uint32) error {
	return unix.EpollCtl(p.epfd, unix.EPOLL_CTL_MOD, fd, &unix.EpollEvent{Events: events, Fd: int32(fd)})
}

func (p *testPoller) Unregister(fd int) {
	unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	p.mu.Lock()
	delete(p.hs, fd)
	p.mu.Unlock()
}

func (p *testPoller) run() {
	defer close(p.stopped)
	evs := make([]unix.EpollEvent, 64)
	for {
		n, err := unix.EpollWait(p.epfd, evs, 100)
		select {
		case <-p.done:
			return
		default:
		}
		if err != nil {
			continue
		}
		p.gate.Lock()
		for _, ev := range evs[:n] {
			p.mu.Lock()
			h := p.hs[int(ev.Fd)]
			p.mu.Unlock()
			if h != nil {
				h(ev.Events)
			}
		}
		p.gate.Unlock()
		p.after()
	}
}

func (p *testPoller) stop() {
	close(p.done)
	unix.Write(p.evfd, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	<-p.stopped
	unix.Close(p.epfd)
	unix.Close(p.evfd)
}

// serveLoop serves ln's socket with the loop driver (ln itself is closed).
func serveLoop(t *testing.T, s *Server, ln net.Listener) {
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	err = s.ListenFd(int(f.Fd()))
	f.Close()
	ln.Close()
	if err != nil {
		t.Fatal(err)
	}
}

// The engine's tests, with the loop driver (TLS is the goroutine driver's only).
func TestLoopDriver(t *testing.T) {
	loopDriver = true
	defer func() { loopDriver = false }()
	for _, tc := range loopTests {
		t.Run(tc.name, tc.f)
	}
}

// loopTests are the engine's tests that TestLoopDriver runs (and TestPoolDriver, with a
// PoolPoller: pooldriver_test.go).
var loopTests = []struct {
	name string
	f    func(*testing.T)
}{
	{"KeepAlive", TestKeepAlive}, {"RequestHead", TestRequestHead}, {"Pipelining", TestPipelining},
	{"ChunkedInOut", TestChunkedInOut}, {"BadRequest", TestBadRequest}, {"HeadTooLarge", TestHeadTooLarge},
	{"KeepAliveTimeout", TestKeepAliveTimeout}, {"KeepAliveTimeoutBusy", TestKeepAliveTimeoutBusy},
	{"NoResponse500", TestNoResponse500}, {"IncompleteResponseCloses", TestIncompleteResponseCloses},
	{"TooLong", TestTooLong}, {"HTTP10AndHead", TestHTTP10AndHead}, {"LimitConcurrency", TestLimitConcurrency},
	{"Disconnect", TestDisconnect}, {"GracefulClose", TestGracefulClose}, {"LargeResponse", TestLargeResponse},
	{"Expect100Continue", TestExpect100Continue}, {"Trailers", TestTrailers}, {"TrailersErrors", TestTrailersErrors},
	{"SendFile", TestSendFile}, {"LingeringCloseAfter400", TestLingeringCloseAfter400},
	{"WebSocketVersion426", TestWebSocketVersion426}, {"HeldOutputBound", TestHeldOutputBound},
	{"Trust", TestTrust}, {"ProxyHeaders", TestProxyHeaders}, {"Metrics", TestMetrics},
	{"CloseAnswersFirstRequest", TestCloseAnswersFirstRequest},
	{"H2cPriorKnowledge", TestH2cPriorKnowledge}, {"H2FlowControl", TestH2FlowControl},
	{"H2ResetDisconnects", TestH2ResetDisconnects}, {"H2GracefulGoAway", TestH2GracefulGoAway},
	{"H2cUpgrade", TestH2cUpgrade}, {"H2cUpgradeDeclined", TestH2cUpgradeDeclined},
	{"H2Expect100Continue", TestH2Expect100Continue}, {"H2SendFileBounded", TestH2SendFileBounded},
	{"WSEchoFragmentsAndControl", TestWSEchoFragmentsAndControl}, {"WSServerClose", TestWSServerClose},
	{"WSProtocolErrors", TestWSProtocolErrors}, {"WSDeflate", TestWSDeflate},
	{"WSDenyAndNotAccepted", TestWSDenyAndNotAccepted},
	{"SlowReader", testLoopSlowReader}, {"ManyLargeResponses", testLoopManyLargeResponses},
	{"ResetsAndFds", testLoopResetsAndFds}, {"BothDrivers", testBothDrivers},
	{"HandOffWritePending", testHandOffWritePending}, {"AcceptBackoff", testAcceptBackoff},
	{"HangUpNotReading", testLoopHangUpNotReading},
	{"HeadTimeout", TestHeadTimeout}, {"BodyMinRate", TestBodyMinRate},
	{"H2HeaderBlockTimeout", TestH2HeaderBlockTimeout}, {"H2IdlePingsDoNotKeepAlive", TestH2IdlePingsDoNotKeepAlive},
	{"H2StalledFirstStreamOutlivesKeepAlive", TestH2StalledFirstStreamOutlivesKeepAlive},
	{"HeldSlowReader", testHeld(testLoopSlowReader)}, {"HeldMany", testHeld(testLoopManyLargeResponses)},
	{"HeldHandOff", testHeld(testHandOffWritePending)}, {"HeldPipelined", testHeld(testHeldPipelined)},
	{"HeldLost", testHeld(testHeldLost)}, {"HeldManyParts", testHeld(testHeldManyParts)},
	{"EarlyResponseLingers", testLoopEarlyResponseLingers},
	{"RespMinRate", TestRespMinRate}, {"RespMinRateOff", TestRespMinRateOff},
	{"HeldRespMinRate", testHeld(testHeldRespMinRate)}, {"H2HeldBody", TestH2HeldBody},
}

// dialSmall connects with a small receive buffer, so that large responses fill the
// server's socket and its writes are partial.
func dialSmall(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		rc.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096) })
		return nil
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReaderSize(c, 4096)
}

// sized answers a body of the size the path asks ("/1048576"), in one part (held, with
// sizedHolds set: SendHeld).
func sized(a *fakeApp, r *Request) {
	var n int
	fmt.Sscanf(string(r.Path()), "/%d", &n)
	if h := sizedHolds; h != nil {
		h.respond(a, r, bytes.Repeat([]byte("y"), n))
		return
	}
	a.respond(r, 200, "", strings.Repeat("y", n))
}

// sizedHolds: the tests' sized sends its bodies with SendHeld (testHeld sets it).
var sizedHolds *holds

// holds counts the bodies the engine held and released; a released body is overwritten,
// so that a write of it after its release shows in the response.
type holds struct {
	mu             sync.Mutex
	held, released int
	twice          bool
}

// respond answers body in two parts (16 KiB or more: both may be held), or as many as
// the query "parts=N" asks, with a content-length unless the query is "chunked".
func (h *holds) respond(a *fakeApp, r *Request, body []byte) {
	hdr := fmt.Sprintf("content-length: %d\r\n", len(body))
	if string(r.Query()) == "chunked" {
		hdr = ""
	}
	if err := r.Start(200, []byte(hdr)); err != nil {
		panic(err)
	}
	n := 2
	fmt.Sscanf(string(r.Query()), "parts=%d", &n)
	var parts [][]byte
	for i := 0; i < n; i++ {
		parts = append(parts, body[i*len(body)/n:(i+1)*len(body)/n])
	}
	for i, p := range parts {
		done := false
		rel := func() {
			h.mu.Lock()
			h.twice = h.twice || done
			done = true
			h.released++
			h.mu.Unlock()
			for j := range p {
				p[j] = 'Z'
			}
		}
		h.mu.Lock() // counted first: rel may run in SendHeld (its flush)
		h.held++
		h.mu.Unlock()
		_, held, err := r.SendHeld(p, i < n-1, rel)
		if !held {
			h.mu.Lock()
			h.held--
			h.mu.Unlock()
		}
		if err == ErrDisconnected {
			return // the client went away (testHeldLost)
		}
		if err != nil {
			panic(err)
		}
		a.s.Flush()
	}
}

// settled: every held body was released (within a few seconds), once.
func (h *holds) settled(t *testing.T) {
	for i := 0; ; i++ {
		h.mu.Lock()
		held, released, twice := h.held, h.released, h.twice
		h.mu.Unlock()
		if twice {
			t.Fatal("a held body was released twice")
		}
		if held == released {
			if held == 0 {
				t.Fatal("no body was held")
			}
			return
		}
		if i == 300 {
			t.Fatalf("%d bodies held, %d released", held, released)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testHeld runs f with sized's bodies held (SendHeld): the same responses arrive (none
// written after its release: its bytes would be 'Z'), and every body is released once.
func testHeld(f func(*testing.T)) func(*testing.T) {
	return func(t *testing.T) {
		h := &holds{}
		sizedHolds = h
		defer func() { sizedHolds = nil }()
		f(t)
		h.settled(t)
	}
}

// A held body's connection lost while its write waits: the body is released.
func testHeldLost(t *testing.T) {
	_, addr := startServer(t, Config{}, sized)
	c, br := dialSmall(t, addr)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "GET /8388608 HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	c.Close() // with 8 MiB unread: the server's write fails
}

// Pipelined held responses through a slow reader, read with net/http's chunked decoder.
func testHeldPipelined(t *testing.T) {
	_, addr := startServer(t, Config{}, sized)
	c, br := dialSmall(t, addr)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	sizes := []int{100 << 10, 40 << 10, 1 << 20, 20 << 10}
	for i, n := range sizes {
		fmt.Fprintf(c, "GET /%d%s HTTP/1.1\r\nHost: x\r\n\r\n", n, []string{"", "?chunked"}[i%2])
	}
	for _, n := range sizes {
		readSized(t, br, n)
	}
}

// readSized reads a response of sized's: n bytes, all 'y' (none written after its release).
func readSized(t *testing.T, br *bufio.Reader, n int) {
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil || len(b) != n || bytes.Count(b, []byte("y")) != n {
		t.Fatalf("%d bytes (%d 'y') of %d: %v", len(b), bytes.Count(b, []byte("y")), n, err)
	}
}

// Large responses to a client that reads slowly through a small receive buffer arrive
// whole: the loop's partial writes go on when the socket is writable.
func testLoopSlowReader(t *testing.T) {
	_, addr := startServer(t, Config{}, sized)
	c, br := dialSmall(t, addr)
	c.SetDeadline(time.Now().Add(30 * time.Second))
	for _, n := range []int{1 << 20, 8 << 20} {
		fmt.Fprintf(c, "GET /%d HTTP/1.1\r\nHost: x\r\n\r\n", n)
		resp, err := readHead(br)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 16<<10)
		got := 0
		for got < int(resp) {
			k, err := br.Read(buf[:min(len(buf), int(resp)-got)])
			if err != nil {
				t.Fatalf("%d of %d bytes: %v", got, n, err)
			}
			got += k
			if got%(256<<10) < k {
				time.Sleep(2 * time.Millisecond) // slow
			}
		}
	}
}

// readHead reads a response head and returns its content-length.
func readHead(br *bufio.Reader) (int64, error) {
	var n int64 = -1
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return 0, err
		}
		if line == "\r\n" {
			return n, nil
		}
		fmt.Sscanf(strings.ToLower(line), "content-length: %d", &n)
	}
}

// Many keep-alive 100 KiB responses in a row: none waits for a write that was not armed
// (a stall of a few hundred ms each would exceed the bound by far).
func testLoopManyLargeResponses(t *testing.T) {
	_, addr := startServer(t, Config{}, sized)
	c, br := dialSmall(t, addr)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	for i := 0; i < 200; i++ {
		fmt.Fprintf(c, "GET /102400 HTTP/1.1\r\nHost: x\r\n\r\n")
		n, err := readHead(br)
		if err == nil {
			_, err = io.CopyN(io.Discard, br, n)
		}
		if err != nil || n != 102400 {
			t.Fatalf("response %d: %v (%d)", i, err, n)
		}
	}
}

func countFds(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	return len(ents)
}

func waitConns(t *testing.T, s *Server, n int) {
	for end := time.Now().Add(5 * time.Second); s.Connections() != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d connections, want %d", s.Connections(), n)
		}
	}
}

func reset(c net.Conn) {
	c.(*net.TCPConn).SetLinger(0)
	c.Close()
}

// Clients that reset mid-head, mid-body (the application waiting for it) and mid-response,
// and many connections: the application sees the disconnects, and no descriptor is left.
func testLoopResetsAndFds(t *testing.T) {
	lost := make(chan struct{}, 100)
	a, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		if string(r.Path()) == "/body" {
			for {
				_, st := a.receive(r)
				if st == RecvDisconnect {
					lost <- struct{}{}
					return
				}
				if st == RecvLast {
					break
				}
			}
		}
		var n int
		fmt.Sscanf(string(r.Path()), "/%d", &n)
		if r.Start(200, nil) == nil { // the client may be gone already
			r.Send([]byte(strings.Repeat("y", n)), false)
		}
		a.s.Flush()
	})
	c, br := dial(t, addr)
	io.WriteString(c, "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n")
	readResp(t, br, "GET")
	c.Close()
	waitConns(t, a.s, 0) // the timer exists now
	before := countFds(t)

	var conns []net.Conn
	for i := 0; i < 50; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		switch i % 5 {
		case 0:
			io.WriteString(c, "GET /1 HTTP/1.1\r\nHost:") // mid-head
		case 1:
			io.WriteString(c, "POST /body HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
		case 2:
			io.WriteString(c, "GET /4194304 HTTP/1.1\r\nHost: x\r\n\r\n") // mid-response
		case 3:
			io.WriteString(c, "GET /10 HTTP/1.1\r\nHost: x\r\n\r\n")
		}
	}
	waitConns(t, a.s, 50)
	time.Sleep(50 * time.Millisecond)
	for i, c := range conns {
		if i%5 == 3 {
			c.Close()
		} else {
			reset(c)
		}
	}
	for i := 0; i < 10; i++ {
		select {
		case <-lost:
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of 10 applications saw the client go away", i)
		}
	}
	waitConns(t, a.s, 0)
	if after := countFds(t); after != before {
		t.Fatalf("%d descriptors, %d before", after, before)
	}
}

// A loop-mode server and a goroutine-mode one in one process.
func testBothDrivers(t *testing.T) {
	_, addr1 := startServer(t, Config{}, hello)
	loopDriver = false
	_, addr2 := startServer(t, Config{}, hello)
	loopDriver = true
	var wg sync.WaitGroup
	for _, addr := range []string{addr1, addr2, addr1, addr2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			for i := 0; i < 100; i++ {
				io.WriteString(c, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
				if _, err := readHead(br); err != nil {
					t.Error(err)
					return
				}
				if _, err := io.CopyN(io.Discard, br, int64(len("hello /x"))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// A WebSocket handshake pipelined behind a large response the socket has not taken yet:
// the connection is handed to the goroutine driver with its write pending (the writer
// goroutine finishes it), then the session is read by its goroutine.
func testHandOffWritePending(t *testing.T) {
	ws := wsEchoApp(nil)
	_, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		if r.WS() != nil {
			ws(a, r)
			return
		}
		sized(a, r)
	})
	c, br := dialSmall(t, addr)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(c, "GET /4194304 HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(100 * time.Millisecond) // the response fills the socket
	io.WriteString(c, "GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: "+wsKey+"\r\nSec-WebSocket-Version: 13\r\n\r\n")
	time.Sleep(100 * time.Millisecond) // handed off while the write waits
	if n, err := readHead(br); err != nil || n != 4194304 {
		t.Fatal(n, err)
	}
	if _, err := io.CopyN(io.Discard, br, 4194304); err != nil {
		t.Fatal(err)
	}
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 101") {
		t.Fatalf("%q %v", line, err)
	}
	if _, err := readHead(br); err != nil {
		t.Fatal(err)
	}
	writeFrame(c, 0x81, []byte("hi"), true)
	if first, p := readFrame(t, br); first != 0x81 || string(p) != "hi" {
		t.Fatalf("%x %q", first, p)
	}
}

// Accept failing with EMFILE pauses the listener (level-triggered, it would spin); the
// timer resumes it and the waiting connections are served.
func testAcceptBackoff(t *testing.T) {
	// free: descriptors left for the server; with one, the first accept takes the last
	// (the back-off's timer must exist already: made with the listener).
	for _, free := range []int{0, 1} {
		t.Run(fmt.Sprint(free), func(t *testing.T) {
			a, addr := startServer(t, Config{}, hello)
			gate := &a.s.lp.(*testPoller).gate
			gate.Lock() // the server accepts nothing until the limit is down
			var conns []net.Conn
			for i := 0; i < 3; i++ {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					gate.Unlock()
					t.Fatal(err)
				}
				defer c.Close()
				conns = append(conns, c)
			}
			restore := limitFds(t, free)
			gate.Unlock()
			for _, c := range conns {
				io.WriteString(c, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n")
			}
			time.Sleep(250 * time.Millisecond) // accept fails, the listener pauses
			if n := a.s.Connections(); n != free {
				t.Errorf("%d connections accepted with %d descriptors free", n, free)
			}
			restore()
			for _, c := range conns {
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, body := readResp(t, bufio.NewReader(c), "GET"); body != "hello /a" {
					t.Fatal(body)
				}
			}
		})
	}
}

// limitFds lowers RLIMIT_NOFILE so that exactly free descriptors are left (the holes
// below the highest open one are filled first); restore undoes it.
func limitFds(t *testing.T, free int) (restore func()) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip(err)
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	top := 0
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > top {
			top = n
		}
	}
	var fillers []int
	for {
		fd, err := unix.Dup(0)
		if err != nil {
			t.Fatal(err)
		}
		if fd > top {
			unix.Close(fd)
			break
		}
		fillers = append(fillers, fd)
	}
	low := lim
	low.Cur = uint64(top + 1 + free)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Skip(err)
	}
	done := false
	restore = func() {
		if !done {
			done = true
			unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
			for _, fd := range fillers {
				unix.Close(fd)
			}
		}
	}
	t.Cleanup(restore)
	return restore
}

// A client that resets while its connection does not read (its request closes the
// connection: reading stopped at its end): the hang-up event ends the connection, and the
// application sees the client go away.
func testLoopHangUpNotReading(t *testing.T) {
	lost := make(chan struct{}, 1)
	a, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		for {
			if _, st := a.receive(r); st == RecvDisconnect {
				lost <- struct{}{}
				return
			}
		}
	})
	c, _ := dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	waitConns(t, a.s, 1)
	time.Sleep(50 * time.Millisecond) // the request is read: reading is off
	reset(c)
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("the application did not see the client go away")
	}
	waitConns(t, a.s, 0)
}

// A response of more held parts than one writev takes, queued before the client reads:
// the writes go on part after part, in order.
func testHeldManyParts(t *testing.T) {
	_, addr := startServer(t, Config{}, sized)
	c, br := dialSmall(t, addr)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	const n = 64 << 17 // 8 MiB: more than the socket takes at once
	fmt.Fprintf(c, "GET /%d?parts=64 HTTP/1.1\r\nHost: x\r\n\r\n", n)
	time.Sleep(100 * time.Millisecond) // all the parts are queued
	readSized(t, br, n)
}

// A loop busy past a connection's keep-alive deadline (here: its events held back, and
// the timer's handled first, as when both come in one batch) does not cut the connection:
// its response went out after the deadline was set, so it was not idle for the timeout
// yet; and once it is past that too, a next request waiting unread keeps it (closing a
// socket with unread input resets the connection, and the request is lost). It still
// closes, without a reset, once idle.
func TestLoopKeepAliveSparesBusyLoop(t *testing.T) {
	loopDriver = true
	defer func() { loopDriver = false }()
	const ka = 100 * time.Millisecond
	got, answer := make(chan struct{}), make(chan struct{})
	a, addr := startServer(t, Config{KeepAliveTimeout: ka}, func(a *fakeApp, r *Request) {
		if string(r.Path()) == "/1" {
			got <- struct{}{}
			<-answer
		}
		hello(a, r)
	})
	gate := &a.s.lp.(*testPoller).gate
	c, br := dial(t, addr)
	io.WriteString(c, "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n")
	<-got // read: its keep-alive deadline is set
	gate.Lock()
	locked := true
	defer func() {
		if locked {
			gate.Unlock()
		}
	}()
	time.Sleep(2 * ka) // past that deadline, the loop holding its events
	close(answer)      // the response goes out (written by the application's thread)
	if _, body := readResp(t, br, "GET"); body != "hello /1" {
		t.Fatal(body)
	}
	a.s.onTimer(0)
	c.SetReadDeadline(time.Now().Add(ka))
	if _, err := br.Peek(1); !isTimeout(err) {
		t.Fatalf("the connection was closed right after its response: %v", err)
	}
	time.Sleep(2 * ka) // past the period it was given
	io.WriteString(c, "GET /2 HTTP/1.1\r\nHost: x\r\n\r\n")
	a.s.onTimer(0)
	gate.Unlock()
	locked = false
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, body := readResp(t, br, "GET"); body != "hello /2" {
		t.Fatal(body)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("expected the idle connection to close: %v", err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// A response sent before its request's body was read ends the connection (the rest of the
// body would have to be read first) with a lingering close: the body still coming, unread
// when the output is handed to the kernel, would turn a plain close into a reset that
// drops the part of the response the client has not received yet.
func testLoopEarlyResponseLingers(t *testing.T) {
	const n = 4 << 20
	_, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		a.respond(r, 200, "", strings.Repeat("y", n))
	})
	c, br := dialSmall(t, addr) // the response waits in the server's socket
	c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", 1<<30)
	go func() {
		junk := make([]byte, 64<<10)
		for i := 0; i < 32; i++ {
			if _, err := c.Write(junk); err != nil {
				return
			}
		}
	}()
	readSized(t, br, n)
}
