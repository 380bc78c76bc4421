package httpserver

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"golang.org/x/net/http2"
)

// h2Queued is what an HTTP/2 connection's output holds in Go's memory: the bytes queued
// for the socket and the copies in its streams' pending data (held bodies are the
// application's memory, kept alive by its own paused send).
func h2Queued(c *Conn) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.next.(*h2Conn)
	if !ok {
		return 0
	}
	n := len(c.out)
	for _, st := range h.streams {
		if st.pendRel == nil {
			n += len(st.pending)
		}
	}
	if n != h.queuedLocked() {
		panic(fmt.Sprintf("queued %d, counted %d", n, h.queuedLocked()))
	}
	return n
}

// theConn is the server's one connection (once it has one).
func theConn(t *testing.T, s *Server) *Conn {
	var conn *Conn
	waitFor(t, "the connection", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for k := range s.conns {
			conn = k
		}
		return conn != nil
	})
	return conn
}

// heldStreamer answers each stream with parts parts of part, each sent with
// SendHeldAnywhere as goloop's ASGI binding does on HTTP/2 (the part is the application's
// bytes object: held while it waits, not copied), waiting for room when paused; paused
// counts the senders waiting at a time, released the parts let go.
type heldStreamer struct {
	part      []byte
	parts     int
	paused    atomic.Int32
	held      atomic.Int32
	released  atomic.Int32
	completed atomic.Int32
}

func (hs *heldStreamer) handle(a *fakeApp, r *Request) {
	r.Start(200, []byte(fmt.Sprintf("content-length: %d\r\n", len(hs.part)*hs.parts)))
	for i := 0; i < hs.parts; i++ {
		flags, h, err := r.SendHeldAnywhere(hs.part, i < hs.parts-1, func() { hs.released.Add(1) })
		if h {
			hs.held.Add(1)
		}
		if flags&SendPaused != 0 {
			hs.paused.Add(1)
		}
		err = a.waitRoom(r, flags, err)
		if flags&SendPaused != 0 {
			hs.paused.Add(-1)
		}
		if err != nil {
			return
		}
	}
	hs.completed.Add(1)
}

// One HTTP/2 connection, its streams' windows shut (the client never lets a DATA byte
// go), n streams each answering 2 MiB in 64 KiB parts: what the connection holds stays
// under its bound (WriteBuffer) and one part, not n times a per-stream bound. Then the
// windows open and every stream completes (the output's bound does not starve one).
func TestH2ConnectionBoundZeroWindow(t *testing.T) {
	const n = 40
	hs := &heldStreamer{part: bytes.Repeat([]byte("p"), 64<<10), parts: 32}
	a, addr := startServer(t, Config{RespMinRate: -1}, hs.handle)
	c := dialH2(t, addr)
	c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	for i := 0; i < n; i++ {
		c.headers(uint32(1+2*i), true, "GET", "/")
	}
	conn := theConn(t, a.s)
	waitFor(t, "every sender paused", func() bool { return int(hs.paused.Load()) == n })
	bound := a.s.cfg.WriteBuffer + len(hs.part) + 16<<10 // + the HEADERS frames
	if q := h2Queued(conn); q > bound {
		t.Fatalf("%d bytes queued for %d streams, bound %d", q, n, bound)
	}
	// the windows open: every stream completes, all its bytes
	c.fr.WriteWindowUpdate(0, 1<<30)
	for i := 0; i < n; i++ {
		c.fr.WriteWindowUpdate(uint32(1+2*i), 1<<30)
	}
	got := map[uint32]int{}
	ended := 0
	c.until(t, func(f http2.Frame) bool {
		if d, ok := f.(*http2.DataFrame); ok {
			got[d.StreamID] += len(d.Data())
			if d.StreamEnded() {
				ended++
			}
		}
		return ended == n
	})
	for id, k := range got {
		if k != len(hs.part)*hs.parts {
			t.Fatalf("stream %d: %d bytes", id, k)
		}
	}
	waitFor(t, "every part released", func() bool { return hs.released.Load() == hs.held.Load() })
	waitFor(t, "the output written", func() bool { return h2Queued(conn) == 0 })
}

// One HTTP/2 connection whose client opens large windows and never reads the socket: the
// DATA frames wait in the streams (held bodies, no copy) instead of all going into the
// connection's output, which stays under the bound and one part.
func TestH2ConnectionBoundNotReading(t *testing.T) {
	const n = 40
	hs := &heldStreamer{part: bytes.Repeat([]byte("q"), 1<<20), parts: 4}
	a, addr := startServer(t, Config{RespMinRate: -1}, hs.handle)
	c := dialH2(t, addr)
	c.nc.(*net.TCPConn).SetReadBuffer(4096)
	c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
	c.fr.WriteWindowUpdate(0, 1<<30)
	for i := 0; i < n; i++ {
		c.headers(uint32(1+2*i), true, "GET", "/")
	}
	conn := theConn(t, a.s)
	// the kernel's socket buffers may take a whole stream's answer (4 MiB) before the others
	// start: that stream completes instead of pausing
	waitFor(t, "every sender paused or complete", func() bool {
		return int(hs.paused.Load()+hs.completed.Load()) == n
	})
	bound := a.s.cfg.WriteBuffer + 64<<10 // + a DATA frame past it
	if q := h2Queued(conn); q > bound {
		t.Fatalf("%d bytes queued for %d streams, bound %d", q, n, bound)
	}
	c.nc.Close()
	waitFor(t, "every part released", func() bool { return hs.released.Load() == hs.held.Load() })
}

// HTTP/3: one QUIC connection, n streams whose client reads nothing (small windows): the
// streams' queues together stay under the connection's bound and what each stream's first
// part adds (the binding's parts are copied on HTTP/3), not n times a per-stream bound;
// quic-go itself holds what the client's windows let go and the part being written.
func TestH3ConnectionBound(t *testing.T) {
	const n = 30
	part := bytes.Repeat([]byte("h"), 16<<10)
	var paused atomic.Int32
	var mu sync.Mutex
	var reqs []*Request
	a, base, p := startH3(t, Config{RespMinRate: -1}, H3Options{}, func(a *fakeApp, r *Request) {
		mu.Lock()
		reqs = append(reqs, r)
		mu.Unlock()
		r.Start(200, nil)
		for i := 0; i < 256; i++ {
			flags, err := r.Send(part, true)
			if flags&SendPaused != 0 {
				paused.Add(1)
			}
			err = a.waitRoom(r, flags, err)
			if flags&SendPaused != 0 {
				paused.Add(-1)
			}
			if err != nil {
				return
			}
		}
		r.Send(nil, false)
	})
	// every stream's window (64 KiB) fits the connection's (4 MiB) n times over: HEADERS are
	// stream data under the connection's window too, so a smaller one filled by the first
	// streams' DATA would hold back the later streams' responses (quic-go's defaults: 512 KiB
	// a stream, 768 KiB the connection)
	const win = 64 << 10
	cl := h3Client(t, p, &quic.Config{
		InitialStreamReceiveWindow: win, MaxStreamReceiveWindow: win,
		InitialConnectionReceiveWindow: 4 << 20, MaxConnectionReceiveWindow: 4 << 20,
	})
	var bodies []io.Closer
	var bmu sync.Mutex
	for i := 0; i < n; i++ {
		go func() {
			resp, err := cl.Get(base + "/")
			if err == nil {
				bmu.Lock()
				bodies = append(bodies, resp.Body)
				bmu.Unlock()
			}
		}()
	}
	waitFor(t, "every sender paused", func() bool { return int(paused.Load()) == n })
	waitFor(t, "every response", func() bool { bmu.Lock(); defer bmu.Unlock(); return len(bodies) == n })
	mu.Lock()
	c := reqs[0].c
	queued := 0
	c.mu.Lock()
	for _, r := range reqs {
		if r.c != c {
			t.Fatal("more than one QUIC connection")
		}
		queued += r.x.(*h3Stream).qBytes
	}
	c.mu.Unlock()
	mu.Unlock()
	if bound := a.s.cfg.WriteBuffer + n*len(part) + 64<<10; queued > bound {
		t.Fatalf("%d bytes queued for %d streams, bound %d", queued, n, bound)
	}
	bmu.Lock()
	for _, b := range bodies {
		b.Close()
	}
	bmu.Unlock()
	waitFor(t, "every sender told of the disconnect", func() bool { return paused.Load() == 0 })
}

// WebSocket: a client that floods pings and reads nothing (the pongs queue in the output)
// is failed (1008) once the output passes its bound and a margin: the output stops there
// instead of growing with every ping (the minimum response rate off, which would drop it
// after its grace).
func TestWSPingFloodNotReading(t *testing.T) {
	a, addr := startServer(t, Config{RespMinRate: -1}, wsEchoApp(nil))
	c, _, _ := wsDial(t, addr, "")
	var sent atomic.Int32
	go func() {
		p := bytes.Repeat([]byte("p"), 125)
		for i := 0; i < 200000; i++ { // 25 MB of pongs: more than the kernel's buffers
			writeFrame(c, 0x89, p, true)
			sent.Add(1)
		}
	}()
	conn := theConn(t, a.s)
	waitFor(t, "the pings sent", func() bool { return sent.Load() == 200000 })
	conn.mu.Lock()
	q := len(conn.out)
	conn.mu.Unlock()
	if bound := a.s.cfg.WriteBuffer + wsMaxControlOut + 4096; q > bound {
		t.Fatalf("%d bytes queued, bound %d", q, bound)
	}
}

// The output's pump serves the streams in turn: with the connection's window opened a
// frame at a time, three streams with bodies waiting send their DATA frames in rotation,
// none twice before the others.
func TestH2PumpRoundRobin(t *testing.T) {
	const n = 3
	hs := &heldStreamer{part: bytes.Repeat([]byte("r"), 1<<20), parts: 1}
	_, addr := startServer(t, Config{RespMinRate: -1}, hs.handle)
	c := dialH2(t, addr)
	c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
	for i := 0; i < n; i++ {
		c.headers(uint32(1+2*i), true, "GET", "/")
	}
	// the connection's first 65,535 bytes go at once: read them, then every sender waits
	got := 0
	c.until(t, func(f http2.Frame) bool {
		if d, ok := f.(*http2.DataFrame); ok {
			got += len(d.Data())
		}
		return got == 65535
	})
	waitFor(t, "every sender paused", func() bool { return int(hs.paused.Load()) == n })
	var order []uint32
	for len(order) < 9*n {
		c.fr.WriteWindowUpdate(0, 16384)
		c.until(t, func(f http2.Frame) bool {
			d, ok := f.(*http2.DataFrame)
			if ok {
				order = append(order, d.StreamID)
			}
			return ok
		})
	}
	for i := n; i < len(order); i++ {
		if order[i] != order[i-n] {
			t.Fatalf("DATA frames' streams in order %v: not in turn", order)
		}
	}
	if order[0] == order[1] || order[1] == order[2] || order[0] == order[2] {
		t.Fatalf("DATA frames' streams in order %v: not in turn", order)
	}
	c.nc.Close()
	waitFor(t, "every part released", func() bool { return hs.released.Load() == hs.held.Load() })
}

// A client that keeps its HTTP/2 windows shut (the socket takes everything, so the socket's
// clock never runs) is dropped by the minimum response rate once the grace has passed: the
// application's paused send sees the disconnect and it is counted. A client that reads
// (x/net's, opening its windows as it reads) gets its whole body with the same rate.
func TestH2ShutWindowMinRate(t *testing.T) {
	errs := make(chan error, 4)
	a, addr := startServer(t, Config{RespMinRate: 64 << 10, RespGrace: 100 * time.Millisecond},
		func(a *fakeApp, r *Request) {
			if string(r.Path()) == "/big" {
				echoApp(a, r)
				return
			}
			r.Start(200, nil)
			part := bytes.Repeat([]byte("w"), 64<<10)
			for {
				flags, err := r.Send(part, true)
				for err == nil && flags&SendPaused != 0 {
					<-a.wakeCh(r) // (no bound: the test's own ends a hang)
					var ok bool
					if ok, err = r.SendReady(); ok {
						break
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	c := dialH2(t, addr)
	c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	c.headers(1, true, "GET", "/")
	select {
	case err := <-errs:
		if err != ErrDisconnected {
			t.Fatalf("the paused sender got %v", err)
		}
	case <-time.After(30 * time.Second): // (a bound that only ends a hang)
		t.Fatal("a client with its windows shut was kept")
	}
	waitFor(t, "the timeout counted", func() bool { return a.s.Metrics().RespTimeouts == 1 })
	resp, err := h2cClient().Get("http://" + addr + "/big")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || n != 64*64<<10 {
		t.Fatalf("a reading client: %d bytes, %v", n, err)
	}
}

// A stream whose client keeps its own window shut holds the connection over its bound
// (its copied parts); a second stream's answer still goes out and its sender is not
// paused: the bound holds back the streams with bytes pending, not one whose parts all left.
func TestH2ShutStreamDoesNotHoldOthers(t *testing.T) {
	smallFlags := make(chan int, 1)
	var bigPaused atomic.Bool
	a, addr := startServer(t, Config{RespMinRate: -1}, func(a *fakeApp, r *Request) {
		r.Start(200, nil)
		if string(r.Path()) == "/small" { // in two parts: the first does not end the stream
			flags, _ := r.Send([]byte("sm"), true)
			a.s.Flush()
			smallFlags <- flags
			a.waitRoom(r, flags, nil)
			r.Send([]byte("all"), false)
			return
		}
		part := bytes.Repeat([]byte("s"), 64<<10)
		for {
			flags, err := r.Send(part, true) // copied
			if flags&SendPaused != 0 {
				bigPaused.Store(true)
			}
			if err = a.waitRoom(r, flags, err); err != nil {
				return
			}
			bigPaused.Store(false)
		}
	})
	c := dialH2(t, addr)
	c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	c.headers(1, true, "GET", "/big") // its window stays shut
	conn := theConn(t, a.s)
	waitFor(t, "the connection over its bound, the big sender paused", func() bool {
		return bigPaused.Load() && h2Queued(conn) > a.s.cfg.WriteBuffer
	})
	// stream 3 and its window in one write (one read: its application runs after both)
	var buf bytes.Buffer
	fr := c.fr
	c.fr = http2.NewFramer(&buf, nil)
	c.fr.WriteWindowUpdate(0, 1<<20) // (the connection's window: stream 3's may go)
	c.headers(3, true, "GET", "/small")
	c.fr.WriteWindowUpdate(3, 1<<20)
	c.fr = fr
	c.nc.Write(buf.Bytes())
	if f := <-smallFlags; f&SendPaused != 0 {
		t.Fatal("the small stream's sender was paused by the other stream's")
	}
	c.until(t, func(f http2.Frame) bool {
		d, ok := f.(*http2.DataFrame)
		return ok && d.StreamID == 3 && d.StreamEnded()
	})
	c.nc.Close()
}
