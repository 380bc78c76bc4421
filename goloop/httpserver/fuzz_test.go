package httpserver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// FuzzConn: whatever bytes a client sends on one connection, then half-closing it, the
// engine answers with HTTP/1 responses or HTTP/2 frames (or nothing), closes the connection
// within a bound, and keeps no connection or request once the client is gone (an application
// left waiting for an event that does not come keeps its request). mode picks the driver (mode % 3:
// a goroutine per connection, a loop's poller, a pool-led poller), whether the client
// half-closes at once (the engine then sees the end while it answers, as uvicorn's and
// hyper's HTTP/1 it may drop what is unanswered) or once the answers stopped coming for
// 10 ms ((mode / 3) % 2), and where the bytes are cut in two writes (mode / 6). The limits
// are small so that short inputs reach them: a 1 KiB head, 4 requests in flight, 1 KiB of
// unread body, 4 KiB of unsent answer.
//
//	go test ./goloop/httpserver/ -run '^$' -fuzz '^FuzzConn$' -fuzztime 60s
func FuzzConn(f *testing.F) {
	for i, seed := range fuzzConnSeeds() {
		for m := 0; m < 6; m++ { // each driver, half-closing at once and after the answers
			f.Add(uint8(m+6*(i%5)), seed)
		}
	}
	f.Fuzz(func(t *testing.T, mode uint8, data []byte) {
		fuzzConnOnce(t, int(mode%3), mode/3%2 == 1, int(mode/6), data)
	})
}

// fuzzConnBound bounds every wait of one input: a connection's close after the client's
// half-close, the engine's forgetting of it and its requests.
const fuzzConnBound = 5 * time.Second

func fuzzConnOnce(t *testing.T, driver int, quiet bool, cut int, data []byte) {
	cfg := Config{MaxHeadSize: 1024, KeepAliveTimeout: 300 * time.Millisecond, HeadTimeout: time.Second,
		BodyGrace: time.Second, MaxPipeline: 4, BodyBuffer: 1024, WriteBuffer: 4096,
		ServerHeader: true, DateHeader: true}
	a, addr := startServerDriver(t, cfg, func(*Server) {}, fuzzApp, driver)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(fuzzConnBound))
	k := min(cut*len(data)/42, len(data))
	// Write errors are the engine's right (it may close on a bad head before reading the
	// rest); what it answered is read all the same.
	if _, err := c.Write(data[:k]); err == nil && k < len(data) {
		c.Write(data[k:])
	}
	var out []byte
	for until := time.Now().Add(fuzzConnBound); quiet && time.Now().Before(until); {
		c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		var b [4096]byte
		n, err := c.Read(b[:])
		out = append(out, b[:n]...)
		quiet = n > 0 && err == nil
	}
	c.SetDeadline(time.Now().Add(fuzzConnBound))
	c.(*net.TCPConn).CloseWrite()
	rest, err := io.ReadAll(c)
	out = append(out, rest...)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection stayed open %v after the client's half-close (answered %d bytes: %.200q)",
			fuzzConnBound, len(out), out)
	}
	if len(out) > 0 && !bytes.HasPrefix(out, []byte("HTTP/1.")) &&
		!(bytes.HasPrefix(data, []byte("PRI ")) && len(out) >= 9 && out[3] == byte(http2.FrameSettings)) {
		t.Fatalf("answered neither an HTTP/1 response nor HTTP/2 frames: %.200q", out)
	}
	if !bytes.Contains(data, []byte("HEAD")) { // a HEAD's answer has no body for its length
		if err := h1Framing(out); err != nil {
			t.Fatalf("%v in the answers: %.300q", err, out)
		}
	}
	c.Close()
	deadline := time.Now().Add(fuzzConnBound)
	for a.s.Connections() != 0 || a.s.InFlight() != 0 { // (a request is in flight until its AppDone)
		if time.Now().After(deadline) {
			t.Fatalf("%d connections and %d requests still held %v after the client left (an application "+
				"waiting for an event that does not come keeps its request)", a.s.Connections(), a.s.InFlight(),
				fuzzConnBound)
		}
		time.Sleep(time.Millisecond)
	}
}

// h1Framing reads out as HTTP/1 responses up to a 101 (what follows is another protocol's):
// each must parse, and only the last may be cut short (the client went away, or a reset
// lost the end of what was sent).
func h1Framing(out []byte) error {
	if !bytes.HasPrefix(out, []byte("HTTP/1.")) {
		return nil
	}
	rd := bytes.NewReader(out)
	br := bufio.NewReader(rd)
	for n := 0; ; n++ {
		if _, err := br.Peek(1); err != nil {
			return nil
		}
		at := len(out) - rd.Len() - br.Buffered()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || !bytes.Contains(out[at:], []byte("\r\n\r\n")) {
				return nil // a head cut short
			}
			return fmt.Errorf("answer %d: %v", n, err)
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return nil
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("answer %d's body: %v", n, err)
		}
	}
}

// fuzzApp reads each request's whole body and answers its length and 64 bytes for each of
// its bytes, in parts of 2 KiB: past the 4 KiB write buffer a send pauses until the client
// reads. A WebSocket is accepted and echoes up to 8 messages.
func fuzzApp(a *fakeApp, r *Request) {
	if w := r.WS(); w != nil {
		for i := 0; i < 10; i++ {
			k, data, _, _ := a.wsReceive(w)
			switch k {
			case WSConnect:
				if w.Accept("", nil) != nil {
					return
				}
			case WSDisconnect:
				return
			default:
				if _, err := w.Send(k == WSText, data); err != nil {
					return
				}
			}
			a.s.Flush()
		}
		w.Close(1000, "")
		a.s.Flush()
		return
	}
	n := len(a.readBody(r, true))
	if r.Start(200, []byte("content-type: text/plain\r\n")) != nil {
		a.s.Flush()
		return
	}
	answer := append([]byte(strconv.Itoa(n)+"\n"), bytes.Repeat([]byte("x"), min(64*n, 64<<10))...)
	for len(answer) > 0 {
		part := answer[:min(len(answer), 2048)]
		answer = answer[len(part):]
		if a.send(r, part, len(answer) > 0) != nil {
			return
		}
	}
}

// fuzzConnSeeds: well-formed exchanges of each kind the engine speaks, for the fuzzer to
// start from.
func fuzzConnSeeds() [][]byte {
	seeds := [][]byte{
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		[]byte("GET /a?b=c HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
		[]byte("POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"),
		[]byte("POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;e=1\r\nhello\r\n0\r\nT: v\r\n\r\n"),
		[]byte("PUT /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc"),
		[]byte("POST /cut HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc"),
		[]byte("POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: 300\r\n\r\n" + string(bytes.Repeat([]byte("b"), 300))),
		[]byte("HEAD / HTTP/1.0\r\n\r\n"),
		[]byte("GET / HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n"),
	}
	// A WebSocket: the upgrade, a masked text message, a close.
	ws := []byte("GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	mask := []byte{1, 2, 3, 4}
	frame := func(op byte, payload []byte) []byte {
		b := []byte{0x80 | op, 0x80 | byte(len(payload))}
		b = append(b, mask...)
		for i, c := range payload {
			b = append(b, c^mask[i%4])
		}
		return b
	}
	ws = append(ws, frame(1, []byte("hi"))...)
	ws = append(ws, frame(8, []byte{3, 232})...)
	seeds = append(seeds, ws)
	// HTTP/2 with prior knowledge: the preface, SETTINGS, a GET and a POST with a body.
	var h2 bytes.Buffer
	h2.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&h2, nil)
	fr.WriteSettings()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	head := func(method string) []byte {
		hb.Reset()
		for _, f := range [][2]string{{":method", method}, {":scheme", "http"}, {":path", "/"}, {":authority", "x"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		return append([]byte(nil), hb.Bytes()...)
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: head("GET"), EndStream: true, EndHeaders: true})
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: head("POST"), EndHeaders: true})
	fr.WriteData(3, true, []byte("body"))
	fr.WriteGoAway(0, http2.ErrCodeNo, nil)
	seeds = append(seeds, h2.Bytes())
	return seeds
}

func TestH1Framing(t *testing.T) {
	ok := "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi"
	chunked := "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
	for _, good := range []string{"", ok, ok + chunked + ok, ok + ok[:20], ok + chunked[:len(chunked)-4],
		"HTTP/1.1 100 Continue\r\n\r\n" + ok, "HTTP/1.1 101 Switching Protocols\r\n\r\n\x81\x02hi", "\x00\x00\x00\x04"} {
		if err := h1Framing([]byte(good)); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
	for _, bad := range []string{ok + "x" + ok, ok + "garbage\r\n\r\n", "HTTP/1.1 2000 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nhi" + ok, chunked[:50] + "hiX\r\n0\r\n\r\n"} {
		if h1Framing([]byte(bad)) == nil {
			t.Errorf("%q: taken for well-framed answers", bad)
		}
	}
}
