package httpserver

import (
	"bytes"
	"compress/flate"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// streamer answers /N with N bytes in 64 KiB parts, each sent when the output has room
// (an ASGI application awaiting send); a part refused as disconnected is counted in lost.
func streamer(lost *atomic.Int32) func(a *fakeApp, r *Request) {
	return func(a *fakeApp, r *Request) {
		var n int
		fmt.Sscanf(string(r.Path()), "/%d", &n)
		r.Start(200, []byte(fmt.Sprintf("content-length: %d\r\n", n)))
		part := []byte(strings.Repeat("z", 64<<10))
		for sent := 0; sent < n; sent += len(part) {
			if err := a.send(r, part[:min(len(part), n-sent)], sent+len(part) < n); err != nil {
				lost.Add(1)
				r.Done(false)
				return
			}
		}
		r.Done(false)
	}
}

// waitFor polls cond until it holds or a generous bound passes (not a timing assertion:
// the bound only ends a test that would otherwise hang).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("still waiting for %s", what)
		}
	}
}

// A client that never reads its response is dropped once RespGrace has passed with less
// than RespMinRate read: the application's send sees the disconnect, the connection
// closes, and it is counted. A client reading above the rate gets the whole body, however
// long it takes (within the test's bounds).
func TestRespMinRate(t *testing.T) {
	var lost atomic.Int32
	a, addr := startServer(t, Config{RespMinRate: 64 << 10, RespGrace: 100 * time.Millisecond,
		KeepAliveTimeout: time.Minute}, streamer(&lost))
	c, _ := dialSmall(t, addr)
	defer c.Close()
	fmt.Fprintf(c, "GET /%d HTTP/1.1\r\nHost: x\r\n\r\n", 64<<20)
	waitFor(t, "the response timeout", func() bool { return a.s.Metrics().RespTimeouts == 1 })
	waitFor(t, "the application's disconnect", func() bool { return lost.Load() == 1 })
	waitFor(t, "the connection's end", func() bool { return a.s.Connections() == 0 })
	if p := a.s.Metrics().Prometheus(); !strings.Contains(p, "goloop_request_timeouts_total{phase=\"response\"} 1\n") {
		t.Fatal(p)
	}
	// a reader above the rate: the whole body
	c2, br := dialSmall(t, addr)
	defer c2.Close()
	c2.SetDeadline(time.Now().Add(60 * time.Second))
	fmt.Fprintf(c2, "GET /%d HTTP/1.1\r\nHost: x\r\n\r\n", 4<<20)
	n, err := readHead(br)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.CopyN(io.Discard, br, n); err != nil || got != 4<<20 {
		t.Fatalf("%d bytes: %v", got, err)
	}
	if a.s.Metrics().RespTimeouts != 1 || lost.Load() != 1 {
		t.Fatalf("timeouts %d lost %d", a.s.Metrics().RespTimeouts, lost.Load())
	}
}

// With the minimum off (negative), a client that does not read keeps its connection.
func TestRespMinRateOff(t *testing.T) {
	var lost atomic.Int32
	a, addr := startServer(t, Config{RespMinRate: -1, RespGrace: 50 * time.Millisecond,
		KeepAliveTimeout: time.Minute}, streamer(&lost))
	c, br := dialSmall(t, addr)
	defer c.Close()
	fmt.Fprintf(c, "GET /%d HTTP/1.1\r\nHost: x\r\n\r\n", 8<<20)
	time.Sleep(300 * time.Millisecond) // several graces: nothing may happen
	if a.s.Metrics().RespTimeouts != 0 || lost.Load() != 0 || a.s.Connections() != 1 {
		t.Fatalf("timeouts %d lost %d conns %d", a.s.Metrics().RespTimeouts, lost.Load(), a.s.Connections())
	}
	c.SetDeadline(time.Now().Add(60 * time.Second))
	n, err := readHead(br)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.CopyN(io.Discard, br, n); err != nil || got != 8<<20 {
		t.Fatalf("%d bytes: %v", got, err)
	}
}

// The output's bound: a client that does not read holds at most WriteBuffer (and what
// one part adds past it) queued in the server, however large the response.
func TestOutputBoundNotReading(t *testing.T) {
	var lost atomic.Int32
	var maxQueued atomic.Int64
	a, addr := startServer(t, Config{RespMinRate: -1, KeepAliveTimeout: time.Minute},
		func(a *fakeApp, r *Request) {
			streamer(&lost)(a, r)
		})
	c, _ := dialSmall(t, addr)
	defer c.Close()
	fmt.Fprintf(c, "GET /%d HTTP/1.1\r\nHost: x\r\n\r\n", 64<<20)
	var conn *Conn
	waitFor(t, "the connection", func() bool {
		a.s.mu.Lock()
		defer a.s.mu.Unlock()
		for k := range a.s.conns {
			conn = k
		}
		return conn != nil
	})
	for i := 0; i < 50; i++ {
		conn.mu.Lock()
		q := int64(conn.unsentLocked())
		conn.mu.Unlock()
		if q > maxQueued.Load() {
			maxQueued.Store(q)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if q := maxQueued.Load(); q > int64(a.s.cfg.WriteBuffer)+64<<10+4096 {
		t.Fatalf("%d bytes queued, bound %d", q, a.s.cfg.WriteBuffer)
	}
}

// A held body (WSGI's and ASGI's whole-bytes bodies on the loop driver) whose client does
// not read: once the grace passes the connection is dropped and the body released
// (testHeld checks the releases).
func testHeldRespMinRate(t *testing.T) {
	a, addr := startServer(t, Config{RespMinRate: 64 << 10, RespGrace: 100 * time.Millisecond,
		KeepAliveTimeout: time.Minute}, sized)
	c, _ := dialSmall(t, addr)
	defer c.Close()
	fmt.Fprintf(c, "GET /%d?parts=1 HTTP/1.1\r\nHost: x\r\n\r\n", 32<<20)
	waitFor(t, "the response timeout", func() bool { return a.s.Metrics().RespTimeouts == 1 })
	waitFor(t, "the connection's end", func() bool { return a.s.Connections() == 0 })
}

// A decompression bomb (64 MiB of zeros, compressed) against a 1 MiB message bound: the
// inflater stops past the bound having allocated about the bound and a piece, not a
// buffer doubled past it (1009).
func TestWSInflateBombBounded(t *testing.T) {
	var zb bytes.Buffer
	fw, _ := flate.NewWriter(&zb, flate.BestCompression)
	zero := make([]byte, 1<<20)
	for i := 0; i < 64; i++ {
		fw.Write(zero)
	}
	fw.Flush()
	p := bytes.TrimSuffix(zb.Bytes(), []byte{0, 0, 0xff, 0xff})
	w := &WS{}
	w.inflate([]byte{}, 1<<20) // the flate reader's own allocations, pooled
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	_, code := w.inflate(p, 1<<20)
	runtime.ReadMemStats(&m1)
	if code != 1009 {
		t.Fatalf("code %d", code)
	}
	if got := m1.TotalAlloc - m0.TotalAlloc; got > 1<<20+256<<10 {
		t.Fatalf("%d bytes allocated for a 1 MiB bound", got)
	}
	// a message within the bound comes back whole
	data, code := w.inflate(bytes.TrimSuffix(deflateMessage(bytes.Repeat([]byte("ab"), 300<<10), 15), nil), 1<<20)
	if code != 0 || !bytes.Equal(data, bytes.Repeat([]byte("ab"), 300<<10)) {
		t.Fatalf("code %d, %d bytes", code, len(data))
	}
}

// The memory watcher frees after a spike: a heap grown by a garbage spike is released
// (its collection and scavenge called), and a small steady heap is left alone.
func TestMemWatchFreesAfterSpike(t *testing.T) {
	freed := make(chan struct{}, 16)
	go memWatch(20*time.Millisecond, func() {
		runtime.GC()
		select {
		case freed <- struct{}{}:
		default:
		}
	})
	var spike [][]byte
	for i := 0; i < 64; i++ {
		spike = append(spike, make([]byte, 1<<20))
	}
	spike = nil
	select {
	case <-freed:
	case <-time.After(30 * time.Second):
		t.Fatal("a 64 MiB spike was not released")
	}
	_ = spike
}

// An HTTP/2 stream whose client's window is shut holds a large body sent with
// SendHeldAnywhere (no copy): released once its DATA left when the window opened (the bytes
// received are the body's: none written after the release, which overwrites them), or when
// the connection is lost.
func TestH2HeldBody(t *testing.T) {
	var held, released atomic.Int32
	sent, done := make(chan struct{}, 4), make(chan struct{}, 4)
	_, addr := startServer(t, Config{RespMinRate: -1}, func(a *fakeApp, r *Request) {
		defer func() {
			if p := recover(); p != nil {
				panic(fmt.Sprint(p, " ", string(r.Path())))
			}
		}()
		body := bytes.Repeat([]byte("y"), 1<<20)
		r.Start(200, nil)
		flags, h, err := r.SendHeldAnywhere(body, false, func() {
			released.Add(1)
			for i := range body {
				body[i] = 'Z'
			}
		})
		if h {
			held.Add(1)
		}
		sent <- struct{}{}
		a.waitRoom(r, flags, err)
		r.Done(false)
		done <- struct{}{}
	})
	c := dialH2(t, addr)
	c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	c.headers(1, true, "GET", "/held")
	<-sent
	if held.Load() != 1 || released.Load() != 0 {
		t.Fatalf("held %d released %d", held.Load(), released.Load())
	}
	c.fr.WriteWindowUpdate(0, 1<<20)
	c.fr.WriteWindowUpdate(1, 1<<20)
	got := 0
	c.until(t, func(f http2.Frame) bool {
		if d, ok := f.(*http2.DataFrame); ok {
			if bytes.IndexByte(d.Data(), 'Z') >= 0 {
				t.Fatal("a released body was written")
			}
			got += len(d.Data())
			return d.StreamEnded()
		}
		return false
	})
	if got != 1<<20 {
		t.Fatalf("%d bytes", got)
	}
	waitFor(t, "the release", func() bool { return released.Load() == 1 })
	// lost with its body held
	c2 := dialH2(t, addr)
	c2.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	c2.headers(1, true, "GET", "/held2")
	<-sent
	if held.Load() != 2 {
		t.Fatalf("held %d", held.Load())
	}
	c2.nc.Close()
	waitFor(t, "the release of a lost stream's body", func() bool { return released.Load() == 2 })
	<-done // both handlers returned before the server stops
	<-done
}
