package httpserver

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startServerWith is startServer with setup run on the server before it serves.
func startServerWith(t *testing.T, cfg Config, setup func(*Server), h func(a *fakeApp, r *Request)) (*fakeApp, string) {
	t.Helper()
	d := goroutineDriver
	if loopDriver && poolDriver { // pooldriver_test.go
		d = poolLedDriver
	} else if loopDriver { // loopdriver_test.go
		d = loopPollerDriver
	}
	return startServerDriver(t, cfg, setup, h, d)
}

// The engine's three ways of driving connections: a goroutine per connection (Serve), a
// loop's poller (ListenFd after SetLoop: goloop serve's ASGI), a PoolPoller led in turn by
// pool threads (its WSGI).
const (
	goroutineDriver = iota
	loopPollerDriver
	poolLedDriver
)

func startServerDriver(t *testing.T, cfg Config, setup func(*Server), h func(a *fakeApp, r *Request), driver int) (*fakeApp, string) {
	t.Helper()
	a := &fakeApp{notify: make(chan struct{}, 1), handler: h, wakes: map[*Request]chan struct{}{}}
	cfg.Notify = a.poke
	a.s = New(cfg)
	setup(a.s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	done := make(chan struct{})
	if driver == poolLedDriver {
		stop := servePool(t, a.s, ln, a.poke)
		t.Cleanup(func() { stop(); close(done) })
	} else if driver == loopPollerDriver {
		p := newTestPoller(t, a.poke)
		a.s.SetLoop(p)
		serveLoop(t, a.s, ln)
		t.Cleanup(func() { a.s.Abort(); p.stop(); close(done) })
	} else {
		if err := a.s.Serve(ln); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.s.Abort(); close(done) })
	}
	go a.run(done)
	return a, addr
}

func echoProxy(a *fakeApp, r *Request) {
	s := "-|-"
	if p := r.Proxy; p != nil {
		s = p.Scheme + "|" + p.Client
	}
	a.respond(r, 200, "", s)
}

func TestTrust(t *testing.T) {
	tr := parseTrust("127.0.0.1, 10.0.0.0/8,::1, /tmp/sock")
	for host, want := range map[string]bool{"127.0.0.1": true, "10.1.2.3": true, "11.0.0.1": false, "::1": true,
		"/tmp/sock": true, "": false, "x": false} {
		if tr.trusts(host) != want {
			t.Errorf("trusts(%q) != %v", host, want)
		}
	}
	if got := tr.clientFrom("1.2.3.4, 5.6.7.8, 10.0.0.1"); got != "5.6.7.8" {
		t.Errorf("clientFrom: %q", got)
	}
	if got := tr.clientFrom("10.0.0.2, 10.0.0.1"); got != "10.0.0.2" {
		t.Errorf("clientFrom all trusted: %q", got)
	}
	if got := parseTrust("*").clientFrom("1.2.3.4, 5.6.7.8"); got != "1.2.3.4" {
		t.Errorf("clientFrom *: %q", got)
	}
	if got := tr.clientFrom(" , "); got != "" {
		t.Errorf("clientFrom empty: %q", got)
	}
}

func TestProxyHeaders(t *testing.T) {
	get := func(addr, hdr string) string {
		c, br := dial(t, addr)
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n%s\r\n", hdr)
		_, body := readResp(t, br, "GET")
		return body
	}
	_, addr := startServerWith(t, Config{}, func(s *Server) { s.SetProxyHeaders("127.0.0.1") }, echoProxy)
	if got := get(addr, "X-Forwarded-Proto: https\r\nX-Forwarded-For: 1.2.3.4, 127.0.0.1\r\n"); got != "https|1.2.3.4" {
		t.Fatalf("trusted: %q", got)
	}
	if got := get(addr, "X-Forwarded-Proto: gopher\r\n"); got != "-|-" {
		t.Fatalf("bad proto: %q", got)
	}
	if got := get(addr, ""); got != "-|-" {
		t.Fatalf("no headers: %q", got)
	}
	_, addr2 := startServerWith(t, Config{}, func(s *Server) { s.SetProxyHeaders("10.0.0.1") }, echoProxy)
	if got := get(addr2, "X-Forwarded-Proto: https\r\nX-Forwarded-For: 1.2.3.4\r\n"); got != "-|-" {
		t.Fatalf("untrusted peer: %q", got)
	}
	_, addr3 := startServer(t, Config{}, echoProxy)
	if got := get(addr3, "X-Forwarded-Proto: https\r\nX-Forwarded-For: 1.2.3.4\r\n"); got != "-|-" {
		t.Fatalf("proxy headers off: %q", got)
	}
}

func TestMetrics(t *testing.T) {
	a, addr := startServerWith(t, Config{}, func(s *Server) { s.EnableMetrics("/metrics") }, func(a *fakeApp, r *Request) {
		if string(r.Path()) == "/missing" {
			a.respond(r, 404, "", "no")
			return
		}
		hello(a, r)
	})
	c, br := dial(t, addr)
	for _, p := range []string{"/a", "/b", "/missing"} {
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", p)
		readResp(t, br, "GET")
	}
	fmt.Fprintf(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body := readResp(t, br, "GET")
	if resp.StatusCode != 200 || resp.Close || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("metrics response: %d %v", resp.StatusCode, resp.Header)
	}
	for _, want := range []string{"goloop_requests_total 3\n", `goloop_responses_total{status="2xx"} 2`,
		`goloop_responses_total{status="4xx"} 1`, `goloop_request_duration_seconds_bucket{le="+Inf"} 3`,
		"goloop_request_duration_seconds_count 3\n"} {
		if !strings.Contains(body, want) {
			t.Fatalf("metrics lack %q:\n%s", want, body)
		}
	}
	if a.seenCount() != 3 {
		t.Fatalf("the application saw the metrics request: %d", a.seenCount())
	}
	// the connection stays usable
	fmt.Fprintf(c, "GET /c HTTP/1.1\r\nHost: x\r\n\r\n")
	if _, body := readResp(t, br, "GET"); body != "hello /c" {
		t.Fatalf("after metrics: %q", body)
	}
	deadline := time.Now().Add(5 * time.Second)
	for a.s.Metrics().Count != 4 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if ms := a.s.Metrics(); ms.Count != 4 || ms.Buckets[len(ms.Buckets)-1] != 4 || ms.Status[2] != 3 {
		t.Fatalf("snapshot: %+v", ms)
	}
}

// BenchmarkApplyProxy: the per-request cost of proxy headers on a trusted connection
// whose request has none (uvicorn's default: on, loopback trusted).
func BenchmarkApplyProxy(b *testing.B) {
	s := New(Config{})
	s.SetProxyHeaders("127.0.0.1")
	c := &Conn{s: s, Remote: Addr{Host: "127.0.0.1", Port: 1234}}
	r := &Request{c: c}
	for _, h := range [][2]string{{"host", "x"}, {"user-agent", "wrk"}, {"accept", "*/*"}} {
		r.Blob = append(r.Blob, h[0]...)
		r.Ends = append(r.Ends, int32(len(r.Blob)))
		r.Blob = append(r.Blob, h[1]...)
		r.Ends = append(r.Ends, int32(len(r.Blob)))
	}
	r.target = []byte("/")
	r.finishHead([]byte("GET"))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.applyProxy(r)
	}
}

// BenchmarkMetricsObserve: the per-request cost of metrics on (two clock reads, the
// histogram's atomics).
func BenchmarkMetricsObserve(b *testing.B) {
	s := New(Config{})
	s.EnableMetrics("")
	r := &Request{c: &Conn{s: s}, status: 200}
	for i := 0; i < b.N; i++ {
		r.t0 = monoNow()
		s.metrics.observe(r)
	}
}

// TestCloseAnswersFirstRequest: a connection accepted before Close whose request comes
// after it is answered (connection: close), not dropped: during a rolling reload the
// old worker may have accepted a connection whose client is still sending.
func TestCloseAnswersFirstRequest(t *testing.T) {
	a, addr := startServer(t, Config{}, hello)
	c, br := dial(t, addr)
	idle, _ := dial(t, addr)
	deadline := time.Now().Add(5 * time.Second)
	for a.s.Connections() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	a.s.Close()
	fmt.Fprintf(c, "GET /late HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body := readResp(t, br, "GET")
	if resp.StatusCode != 200 || body != "hello /late" || !resp.Close {
		t.Fatalf("got %d %q close=%v", resp.StatusCode, body, resp.Close)
	}
	// the connection that sends nothing is closed after the grace period
	idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := idle.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("idle connection: %d %v", n, err)
	}
	select {
	case <-a.s.Idle():
	case <-time.After(10 * time.Second):
		t.Fatal("connections left after Close")
	}
}

// sharedMetricsFile is a file laid out as the --workers master makes it (the header, nslots
// slots, used of them in use).
func sharedMetricsFile(t *testing.T, nslots, used int) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "metrics"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	var hdr [16]byte
	binary.LittleEndian.PutUint64(hdr[:], SharedMagic)
	binary.LittleEndian.PutUint64(hdr[8:], uint64(used))
	if _, err := f.Write(hdr[:]); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(int64(SharedHeaderSize + nslots*SharedSlotSize)); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestSharedMetrics: servers counting in slots of one shared file (workers) each report
// the sum of all slots; a server taking over a slot (a restarted worker) continues its
// counts, so totals never go back.
func TestSharedMetrics(t *testing.T) {
	f := sharedMetricsFile(t, 4, 2)
	get := func(addr, path string) string {
		c, br := dial(t, addr)
		defer c.Close()
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
		_, body := readResp(t, br, "GET")
		return body
	}
	start := func(slot int) (*fakeApp, string) {
		return startServerWith(t, Config{}, func(s *Server) {
			if err := s.EnableSharedMetrics("/metrics", int(f.Fd()), slot); err != nil {
				t.Fatal(err)
			}
		}, hello)
	}
	a0, addr0 := start(0)
	a1, addr1 := start(1)
	for i := 0; i < 3; i++ {
		get(addr0, "/")
	}
	get(addr1, "/")
	waitCount := func(a *fakeApp, n int64) MetricsSnapshot {
		deadline := time.Now().Add(5 * time.Second)
		for a.s.Metrics().Count != n && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		return a.s.Metrics()
	}
	for _, a := range []*fakeApp{a0, a1} {
		if ms := waitCount(a, 4); ms.Requests != 4 || ms.Status[2] != 4 || ms.Buckets[len(ms.Buckets)-1] != 4 {
			t.Fatalf("summed snapshot: %+v", ms)
		}
	}
	if body := get(addr1, "/metrics"); !strings.Contains(body, "goloop_requests_total 4\n") {
		t.Fatalf("the endpoint is not the sum:\n%s", body)
	}
	if a0.s.Requests() != 3 || a1.s.Requests() != 1 { // a server's own counts stay its own
		t.Fatalf("own requests: %d %d", a0.s.Requests(), a1.s.Requests())
	}
	a0.s.Abort()
	a2, addr2 := start(0) // the restarted worker of slot 0
	get(addr2, "/")
	if ms := waitCount(a2, 5); ms.Requests != 5 || a2.s.Requests() != 4 {
		t.Fatalf("after the take-over: %+v (own %d)", ms, a2.s.Requests())
	}
	if err := New(Config{}).EnableSharedMetrics("", int(f.Fd()), 4); err == nil {
		t.Fatal("a slot past the file's end was taken")
	}
}

// TestAcceptedAsCloseRuns: a connection Accept returned just before Close (it left the
// listening socket's queue, shared with other workers) has its request answered too.
func TestAcceptedAsCloseRuns(t *testing.T) {
	srv, closed := make(chan *Server, 1), make(chan struct{})
	testHookAccepted = func() {
		(<-srv).Close()
		close(closed)
	}
	defer func() { testHookAccepted = nil }()
	a, addr := startServer(t, Config{}, hello)
	srv <- a.s
	c, br := dial(t, addr)
	<-closed
	fmt.Fprintf(c, "GET /late HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body := readResp(t, br, "GET")
	if resp.StatusCode != 200 || body != "hello /late" || !resp.Close {
		t.Fatalf("got %d %q close=%v", resp.StatusCode, body, resp.Close)
	}
	select {
	case <-a.s.Idle():
	case <-time.After(10 * time.Second):
		t.Fatal("not idle after the late connection closed")
	}
}
