package httpserver

import (
	"bytes"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// trickle writes s a few bytes at a time, every gap, until done or the write fails.
func trickle(c net.Conn, s string, n int, gap time.Duration) error {
	for len(s) > 0 {
		k := min(n, len(s))
		if _, err := io.WriteString(c, s[:k]); err != nil {
			return err
		}
		s = s[k:]
		time.Sleep(gap)
	}
	return nil
}

// A head trickled a byte at a time (each byte well within the keep-alive timeout) is
// answered 408 and its connection closed once HeadTimeout has passed; counted.
func TestHeadTimeout(t *testing.T) {
	a, addr := startServer(t, Config{KeepAliveTimeout: 2 * time.Second, HeadTimeout: 300 * time.Millisecond}, hello)
	c, br := dial(t, addr)
	go trickle(c, "GET /slow HTTP/1.1\r\nHost: x\r\nX-Long: "+strings.Repeat("a", 200)+"\r\n\r\n", 1, 20*time.Millisecond)
	resp, _ := readResp(t, br, "GET")
	if resp.StatusCode != 408 || !resp.Close {
		t.Fatalf("status %d close %v, want 408 and close", resp.StatusCode, resp.Close)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("connection not closed: %v", err)
	}
	if a.seenCount() != 0 || a.s.Metrics().HeadTimeouts != 1 {
		t.Fatalf("seen %d, head timeouts %d", a.seenCount(), a.s.Metrics().HeadTimeouts)
	}
	if p := a.s.Metrics().Prometheus(); !strings.Contains(p, "goloop_request_timeouts_total{phase=\"head\"} 1\n") {
		t.Fatal(p)
	}
	// a head that comes in time, in pieces, after a wait longer than the head timeout
	// (the idle time before a head is the keep-alive timeout's)
	c, br = dial(t, addr)
	time.Sleep(400 * time.Millisecond)
	go trickle(c, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n", 8, 10*time.Millisecond)
	if resp, body := readResp(t, br, "GET"); resp.StatusCode != 200 || body != "hello /ok" {
		t.Fatal(resp.Status, body)
	}
}

// A body slower than BodyMinRate (after the grace) is cut: 408, the application sees a
// disconnect, counted; a slow body above the rate completes, however long it takes.
func TestBodyMinRate(t *testing.T) {
	var lost atomic.Int32
	a, addr := startServer(t, Config{KeepAliveTimeout: 2 * time.Second, HeadTimeout: 300 * time.Millisecond,
		BodyMinRate: 100}, func(a *fakeApp, r *Request) {
		var body []byte
		for {
			b, st := a.receiveOpt(r, true)
			body = append(body, b...)
			if st == RecvDisconnect {
				lost.Add(1)
				return
			}
			if st == RecvLast {
				break
			}
		}
		a.respond(r, 200, "", "got "+string(rune('0'+len(body)/100)))
	})
	c, br := dial(t, addr)
	go trickle(c, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"+strings.Repeat("b", 100), 60, 0)
	if resp, body := readResp(t, br, "POST"); resp.StatusCode != 200 || body != "got 1" {
		t.Fatal(resp.Status, body)
	}
	// 2 bytes every 30 ms: ~67 bytes/s, under the 100 the server wants
	io.WriteString(c, "POST /trickle HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
	go trickle(c, strings.Repeat("b", 1000), 2, 30*time.Millisecond)
	resp, _ := readResp(t, br, "POST")
	if resp.StatusCode != 408 || !resp.Close {
		t.Fatalf("status %d close %v, want 408 and close", resp.StatusCode, resp.Close)
	}
	deadline := time.Now().Add(5 * time.Second)
	for lost.Load() != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if lost.Load() != 1 || a.s.Metrics().BodyTimeouts != 1 {
		t.Fatalf("disconnects seen %d, body timeouts %d", lost.Load(), a.s.Metrics().BodyTimeouts)
	}
	// an upload at ~330 bytes/s (10 bytes every 30 ms) taking several grace periods completes
	c, br = dial(t, addr)
	io.WriteString(c, "POST /honest HTTP/1.1\r\nHost: x\r\nContent-Length: 400\r\n\r\n")
	go trickle(c, strings.Repeat("b", 400), 10, 30*time.Millisecond)
	if resp, body := readResp(t, br, "POST"); resp.StatusCode != 200 || body != "got 4" {
		t.Fatal(resp.Status, body)
	}
}

// An HTTP/2 header block left incomplete (HEADERS without END_HEADERS, then CONTINUATIONs
// trickled) ends the connection with GOAWAY once HeadTimeout has passed, even with a
// stream open (which turns the idle deadline off); counted as a head timeout.
func TestH2HeaderBlockTimeout(t *testing.T) {
	started := make(chan struct{}, 1)
	a, addr := startServer(t, Config{KeepAliveTimeout: 5 * time.Second, HeadTimeout: 300 * time.Millisecond},
		waitDisconnect(started))
	c := dialH2(t, addr)
	c.headers(1, false, "POST", "/open") // a stream whose app waits for its body
	<-started
	c.hb.Reset()
	c.enc.WriteField(hpack.HeaderField{Name: ":method", Value: "GET"})
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: c.hb.Bytes(), EndHeaders: false})
	// a byte-sized CONTINUATION every 50 ms: the block never ends
	defer every(50*time.Millisecond, func() error { return c.fr.WriteContinuation(3, false, []byte{0x82}) })()
	c.wantGoAway(t, http2.ErrCodeEnhanceYourCalm)
	if n := a.s.Metrics().HeadTimeouts; n != 1 {
		t.Fatal(n)
	}
}

// An HTTP/2 connection with no stream closes after the keep-alive timeout even if the
// client keeps sending PINGs (they used to push the deadline, holding it open forever).
func TestH2IdlePingsDoNotKeepAlive(t *testing.T) {
	_, addr := startServer(t, Config{KeepAliveTimeout: 400 * time.Millisecond}, hello)
	c := dialH2(t, addr)
	defer every(50*time.Millisecond, func() error { return c.fr.WritePing(false, [8]byte{}) })()
	c.wantGoAway(t, http2.ErrCodeNo)
}

// wantGoAway reads frames until a GOAWAY, which must have code.
func (c *rawH2) wantGoAway(t *testing.T, code http2.ErrCode) {
	t.Helper()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("no GOAWAY: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != code {
				t.Fatalf("GOAWAY %v, want %v", g.ErrCode, code)
			}
			return
		}
	}
}

// every calls f every gap in a goroutine until f fails or the returned stop is called.
func every(gap time.Duration, f func() error) (stop func()) {
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(gap):
			}
			if f() != nil {
				return
			}
		}
	}()
	return func() { close(done) }
}

// A stream stalled on flow control for longer than the keep-alive timeout completes once
// the client opens its window, also when the preface, the client's SETTINGS and the
// stream's HEADERS come in one write, so in the server's first read: the keep-alive
// deadline armed for the preface must not stay armed once the stream is open (it did, and
// cut the connection KeepAliveTimeout after it opened). Written frame by frame (dialH2),
// the preface comes alone in the first read, the next read finds the connection idle and
// sets its deadline again, and the stream's HEADERS then clear it: that case always passed.
func TestH2StalledFirstStreamOutlivesKeepAlive(t *testing.T) {
	const ka = 300 * time.Millisecond
	body := strings.Repeat("0123456789abcdef", 256) // 4 KiB
	_, addr := startServer(t, Config{KeepAliveTimeout: ka}, func(a *fakeApp, r *Request) {
		a.respond(r, 200, "content-type: text/plain\r\n", body)
	})
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	const win = 1024 // the stream's window: a quarter of the response
	var first bytes.Buffer
	first.WriteString(http2.ClientPreface)
	fw := http2.NewFramer(&first, nil)
	fw.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: win})
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, kv := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":path", "/stall"}, {":authority", "x"}} {
		enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	fw.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
	if _, err := nc.Write(first.Bytes()); err != nil { // one write: one read of the server
		t.Fatal(err)
	}
	fr := http2.NewFramer(nc, nc)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	got := 0
	for got < win { // the window's worth of the body, then the stream waits
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %d bytes: %v", got, err)
		}
		if d, ok := f.(*http2.DataFrame); ok && d.StreamID == 1 {
			got += len(d.Data())
		}
	}
	time.Sleep(3 * ka) // stalled for longer than the keep-alive timeout
	fr.WriteSettingsAck()
	fr.WriteWindowUpdate(1, 1<<20)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("the stalled stream was cut after %d of %d bytes: %v", got, len(body), err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v after %d of %d bytes", f.ErrCode, got, len(body))
		case *http2.DataFrame:
			if f.StreamID == 1 {
				got += len(f.Data())
				if f.StreamEnded() {
					if got != len(body) {
						t.Fatalf("%d bytes, want %d", got, len(body))
					}
					return
				}
			}
		}
	}
}
