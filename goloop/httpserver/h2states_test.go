package httpserver

import (
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// RFC 9113 5.1 (stream states), 5.3.1 (RFC 7540: self-dependency) and 8.3.1 (request
// pseudo-header fields): what the server answers to frames that break them.

// headersFields sends a HEADERS frame of the given fields (name, value pairs) on id.
func (c *rawH2) headersFields(id uint32, end bool, prio http2.PriorityParam, kv ...string) {
	c.hb.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		c.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hb.Bytes(),
		EndStream: end, EndHeaders: true, Priority: prio})
}

// next returns the next frame that is not SETTINGS, WINDOW_UPDATE or a PING ack.
func (c *rawH2) next(t *testing.T) http2.Frame {
	t.Helper()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		switch f.(type) {
		case *http2.SettingsFrame, *http2.WindowUpdateFrame:
			continue
		}
		return f
	}
}

// wantReset: the next frame is RST_STREAM id code.
func (c *rawH2) wantReset(t *testing.T, id uint32, code http2.ErrCode) {
	t.Helper()
	f := c.next(t)
	if rs, ok := f.(*http2.RSTStreamFrame); !ok || rs.StreamID != id || rs.ErrCode != code {
		t.Fatalf("got %v, want RST_STREAM %d %v", f, id, code)
	}
}

// wantAlive: a PING is answered next (no GOAWAY, no other frame before it).
func (c *rawH2) wantAlive(t *testing.T) {
	t.Helper()
	c.fr.WritePing(false, [8]byte{'a', 'l', 'i', 'v', 'e'})
	f := c.next(t)
	if p, ok := f.(*http2.PingFrame); !ok || !p.IsAck() || p.Data != [8]byte{'a', 'l', 'i', 'v', 'e'} {
		t.Fatalf("got %v, want the PING's ack", f)
	}
}

// waitDisconnect is an application that reads until the client goes away.
func waitDisconnect(started chan struct{}) func(a *fakeApp, r *Request) {
	return func(a *fakeApp, r *Request) {
		started <- struct{}{}
		for {
			if _, st := a.receive(r); st != RecvBody {
				return
			}
		}
	}
}

// DATA after the client's RST_STREAM: a stream error STREAM_CLOSED (5.1, "closed").
func TestH2DataAfterClientReset(t *testing.T) {
	started := make(chan struct{}, 1)
	_, addr := startServer(t, Config{}, waitDisconnect(started))
	c := dialH2(t, addr)
	c.headers(1, false, "POST", "/")
	<-started
	c.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	c.fr.WriteData(1, true, []byte("late"))
	c.wantReset(t, 1, http2.ErrCodeStreamClosed)
	c.wantAlive(t)
}

// DATA on a stream closed by both sides' END_STREAM: a connection error STREAM_CLOSED.
func TestH2DataOnClosedStream(t *testing.T) {
	_, addr := startServer(t, Config{}, quiet)
	c := dialH2(t, addr)
	c.headers(1, true, "GET", "/")
	c.until(t, func(f http2.Frame) bool {
		return f.Header().StreamID == 1 && f.Header().Flags.Has(http2.FlagHeadersEndStream)
	})
	c.fr.WriteData(1, true, []byte("late"))
	f := c.next(t)
	if g, ok := f.(*http2.GoAwayFrame); !ok || g.ErrCode != http2.ErrCodeStreamClosed || g.LastStreamID != 1 {
		t.Fatalf("got %v, want GOAWAY STREAM_CLOSED", f)
	}
}

// DATA still in flight on a stream the server reset is ignored (5.1, "closed").
func TestH2DataAfterServerResetIgnored(t *testing.T) {
	_, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		r.Start(200, nil) // answered before the request's end: RST_STREAM NO_ERROR
		r.Send([]byte("early"), false)
		a.s.Flush()
	})
	c := dialH2(t, addr)
	c.headers(1, false, "POST", "/")
	c.until(t, func(f http2.Frame) bool { rs, ok := f.(*http2.RSTStreamFrame); return ok && rs.StreamID == 1 })
	c.fr.WriteData(1, true, []byte("late"))
	c.wantAlive(t)
}

// HEADERS or PRIORITY making a stream depend on itself: a stream error PROTOCOL_ERROR
// (RFC 7540 5.3.1); the request is not served, the connection goes on.
func TestH2SelfDependency(t *testing.T) {
	a, addr := startServer(t, Config{}, quiet)
	c := dialH2(t, addr)
	c.headersFields(1, true, http2.PriorityParam{StreamDep: 1, Weight: 15},
		":method", "GET", ":scheme", "http", ":path", "/", ":authority", "x")
	c.wantReset(t, 1, http2.ErrCodeProtocol)
	c.fr.WritePriority(3, http2.PriorityParam{StreamDep: 3, Weight: 15}) // an idle stream
	c.wantReset(t, 3, http2.ErrCodeProtocol)
	c.headers(5, true, "GET", "/")
	c.until(t, func(f http2.Frame) bool {
		return f.Header().StreamID == 5 && f.Header().Flags.Has(http2.FlagHeadersEndStream)
	})
	c.wantAlive(t)
	if n := a.seenCount(); n != 1 {
		t.Fatalf("%d requests reached the application, want 1 (stream 5)", n)
	}
}

// PRIORITY making an open stream depend on itself resets it: its application sees a disconnect.
func TestH2SelfDependencyOpen(t *testing.T) {
	started := make(chan struct{}, 1)
	_, addr := startServer(t, Config{}, waitDisconnect(started))
	c := dialH2(t, addr)
	c.headers(1, false, "POST", "/")
	<-started
	c.fr.WritePriority(1, http2.PriorityParam{StreamDep: 1, Weight: 15})
	c.wantReset(t, 1, http2.ErrCodeProtocol)
	c.wantAlive(t)
}

// A request without :scheme is malformed: a stream error PROTOCOL_ERROR (8.3.1).
func TestH2MissingScheme(t *testing.T) {
	a, addr := startServer(t, Config{}, quiet)
	c := dialH2(t, addr)
	c.headersFields(1, true, http2.PriorityParam{}, ":method", "GET", ":path", "/", ":authority", "x")
	c.wantReset(t, 1, http2.ErrCodeProtocol)
	c.wantAlive(t)
	if n := a.seenCount(); n != 0 {
		t.Fatalf("%d requests reached the application", n)
	}
}
