package asgi

import (
	"bufio"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// wsReceive is the application's receive() of a WebSocket session.
func (a *fakeApp) wsReceive(w *WS) (WSKind, []byte, int, string) {
	for {
		k, data, code, reason := w.Receive()
		if k != WSWait {
			return k, data, code, reason
		}
		select {
		case <-a.wakeCh(w.Request()):
		case <-time.After(10 * time.Second):
			panic("ws receive: no wake-up")
		}
	}
}

// wsEchoApp accepts and echoes every message; the disconnect's code goes to codes.
func wsEchoApp(codes chan int) func(a *fakeApp, r *Request) {
	return func(a *fakeApp, r *Request) {
		w := r.WS()
		if w == nil {
			hello(a, r)
			return
		}
		if k, _, _, _ := a.wsReceive(w); k != WSConnect {
			panic("first message is not connect")
		}
		proto := ""
		if len(w.Subprotocols) > 0 {
			proto = w.Subprotocols[len(w.Subprotocols)-1]
		}
		if err := w.Accept(proto, []byte("x-app: 1\r\n")); err != nil {
			panic(err)
		}
		a.s.Flush()
		for {
			k, data, code, _ := a.wsReceive(w)
			if k == WSDisconnect {
				if codes != nil {
					codes <- code
				}
				break
			}
			if string(data) == "close-me" {
				w.Close(4001, "bye")
				a.s.Flush()
				continue
			}
			if _, err := w.Send(k == WSText, data); err != nil {
				break
			}
			a.s.Flush()
		}
		w.AppDone(false)
		a.s.Flush()
	}
}

const wsKey = "dGhlIHNhbXBsZSBub25jZQ=="

func wsDial(t *testing.T, addr string, extra string) (net.Conn, *bufio.Reader, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	br, head := wsHandshake(t, c, extra)
	return c, br, head
}

// wsHandshake sends a WebSocket handshake on c and reads the response's head.
func wsHandshake(t *testing.T, c net.Conn, extra string) (*bufio.Reader, string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: "+wsKey+"\r\nSec-WebSocket-Version: 13\r\n"+extra+"\r\n")
	br := bufio.NewReader(c)
	var head strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("handshake: %v (%q)", err, head.String())
		}
		head.WriteString(line)
		if line == "\r\n" {
			break
		}
	}
	return br, head.String()
}

func writeFrame(c net.Conn, first byte, payload []byte, masked bool) {
	b := []byte{first}
	n := len(payload)
	mbit := byte(0)
	if masked {
		mbit = 0x80
	}
	switch {
	case n < 126:
		b = append(b, mbit|byte(n))
	case n < 1<<16:
		b = append(b, mbit|126, byte(n>>8), byte(n))
	default:
		b = append(b, mbit|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	p := append([]byte(nil), payload...)
	if masked {
		key := []byte{0x12, 0x34, 0x56, 0x78}
		b = append(b, key...)
		for i := range p {
			p[i] ^= key[i&3]
		}
	}
	c.Write(append(b, p...))
}

func readFrame(t *testing.T, br *bufio.Reader) (first byte, payload []byte) {
	t.Helper()
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		t.Fatalf("read frame: %v", err)
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var x [2]byte
		io.ReadFull(br, x[:])
		n = uint64(binary.BigEndian.Uint16(x[:]))
	case 127:
		var x [8]byte
		io.ReadFull(br, x[:])
		n = binary.BigEndian.Uint64(x[:])
	}
	if h[1]&0x80 != 0 {
		t.Fatal("server frame masked")
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(br, payload); err != nil {
		t.Fatalf("read payload: %v", err)
	}
	return h[0], payload
}

func closeCode(p []byte) int {
	if len(p) < 2 {
		return 1005
	}
	return int(binary.BigEndian.Uint16(p))
}

func TestWSEchoFragmentsAndControl(t *testing.T) {
	codes := make(chan int, 1)
	_, addr := startServer(t, Config{}, wsEchoApp(codes))
	c, br, head := wsDial(t, addr, "Sec-WebSocket-Protocol: a, b\r\n")
	if !strings.HasPrefix(head, "HTTP/1.1 101 ") || !strings.Contains(head, "sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n") ||
		!strings.Contains(head, "sec-websocket-protocol: b\r\n") || !strings.Contains(head, "x-app: 1\r\n") {
		t.Fatalf("handshake response: %q", head)
	}
	writeFrame(c, 0x81, []byte("hello"), true)
	if f, p := readFrame(t, br); f != 0x81 || string(p) != "hello" {
		t.Fatalf("echo: %x %q", f, p)
	}
	// a fragmented binary message with a ping between its fragments
	writeFrame(c, 0x02, []byte("ab"), true)
	writeFrame(c, 0x89, []byte("p1"), true)
	writeFrame(c, 0x00, []byte("cd"), true)
	writeFrame(c, 0x80, []byte("ef"), true)
	if f, p := readFrame(t, br); f != 0x8a || string(p) != "p1" {
		t.Fatalf("pong: %x %q", f, p)
	}
	if f, p := readFrame(t, br); f != 0x82 || string(p) != "abcdef" {
		t.Fatalf("fragmented echo: %x %q", f, p)
	}
	// a large message (64-bit length)
	big := bytes.Repeat([]byte("x"), 70000)
	writeFrame(c, 0x82, big, true)
	if f, p := readFrame(t, br); f != 0x82 || !bytes.Equal(p, big) {
		t.Fatalf("big echo: %x %d", f, len(p))
	}
	wsClientClose(t, c, br, codes)
}

// wsClientClose: the client closes (4001): the close is echoed, the application sees its
// code and the connection ends.
func wsClientClose(t *testing.T, c net.Conn, br *bufio.Reader, codes chan int) {
	t.Helper()
	writeFrame(c, 0x88, []byte{0x0f, 0xa1, 'o', 'k'}, true) // 4001
	if f, p := readFrame(t, br); f != 0x88 || closeCode(p) != 4001 {
		t.Fatalf("close echo: %x %v", f, p)
	}
	if code := <-codes; code != 4001 {
		t.Fatalf("disconnect code %d", code)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("connection not closed after the close handshake: %v", err)
	}
}

func TestWSServerClose(t *testing.T) {
	codes := make(chan int, 1)
	_, addr := startServer(t, Config{}, wsEchoApp(codes))
	c, br, _ := wsDial(t, addr, "")
	writeFrame(c, 0x81, []byte("close-me"), true)
	f, p := readFrame(t, br)
	if f != 0x88 || closeCode(p) != 4001 || string(p[2:]) != "bye" {
		t.Fatalf("close: %x %q", f, p)
	}
	writeFrame(c, 0x88, p[:2], true)
	if code := <-codes; code != 4001 {
		t.Fatalf("disconnect code %d", code)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("not closed: %v", err)
	}
}

func TestWSProtocolErrors(t *testing.T) {
	cases := []struct {
		name  string
		frame func(c net.Conn)
		code  int
	}{
		{"invalid utf-8", func(c net.Conn) { writeFrame(c, 0x81, []byte{0xff, 0xfe}, true) }, 1007},
		{"invalid utf-8 across fragments", func(c net.Conn) {
			writeFrame(c, 0x01, []byte{0xe2, 0x82}, true)
			writeFrame(c, 0x80, []byte{0x28}, true)
		}, 1007},
		{"unmasked", func(c net.Conn) { writeFrame(c, 0x81, []byte("x"), false) }, 1002},
		{"reserved opcode", func(c net.Conn) { writeFrame(c, 0x83, []byte("x"), true) }, 1002},
		{"rsv without extension", func(c net.Conn) { writeFrame(c, 0xc1, []byte("x"), true) }, 1002},
		{"continuation first", func(c net.Conn) { writeFrame(c, 0x80, []byte("x"), true) }, 1002},
		{"fragmented ping", func(c net.Conn) { writeFrame(c, 0x09, []byte("x"), true) }, 1002},
		{"too big", func(c net.Conn) { writeFrame(c, 0x82, make([]byte, 2000), true) }, 1009},
		{"too big in fragments", func(c net.Conn) {
			writeFrame(c, 0x02, make([]byte, 600), true)
			writeFrame(c, 0x80, make([]byte, 600), true)
		}, 1009},
		{"bad close code", func(c net.Conn) { writeFrame(c, 0x88, []byte{0x03, 0xed}, true) }, 1002}, // 1005
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			codes := make(chan int, 1)
			a, addr := startServer(t, Config{}, wsEchoApp(codes))
			a.s.SetWSConfig(WSConfig{MaxSize: 1024})
			c, br, _ := wsDial(t, addr, "")
			tc.frame(c)
			f, p := readFrame(t, br)
			if f != 0x88 || closeCode(p) != tc.code {
				t.Fatalf("got %x %v, want close %d", f, p, tc.code)
			}
			if code := <-codes; code != tc.code {
				t.Fatalf("disconnect code %d", code)
			}
			c.Close()
		})
	}
}

func TestWSDeflate(t *testing.T) {
	a, addr := startServer(t, Config{}, wsEchoApp(nil))
	a.s.SetWSConfig(WSConfig{Deflate: true})
	c, br, head := wsDial(t, addr, "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n")
	if !strings.Contains(head, "sec-websocket-extensions: permessage-deflate; server_no_context_takeover\r\n") {
		t.Fatalf("no deflate: %q", head)
	}
	// the client keeps its context: its second message refers to the first
	var zb bytes.Buffer
	fw, _ := flate.NewWriter(&zb, flate.BestCompression)
	msg := []byte(strings.Repeat("goloop websocket deflate ", 400))
	for i := 0; i < 2; i++ {
		zb.Reset()
		fw.Write(msg)
		fw.Flush()
		z := bytes.TrimSuffix(zb.Bytes(), []byte{0, 0, 0xff, 0xff})
		if i == 1 && len(z) > 100 {
			t.Fatalf("second message does not use the context: %d bytes", len(z))
		}
		writeFrame(c, 0xc1, z, true)
		f, p := readFrame(t, br)
		if f != 0xc1 {
			t.Fatalf("echo not compressed: %x", f)
		}
		fr := flate.NewReader(io.MultiReader(bytes.NewReader(p), strings.NewReader(deflateTail)))
		out, err := io.ReadAll(fr)
		if err != nil || !bytes.Equal(out, msg) {
			t.Fatalf("inflate: %v %d", err, len(out))
		}
	}
	// small messages go uncompressed
	writeFrame(c, 0x81, []byte("hi"), true)
	if f, p := readFrame(t, br); f != 0x81 || string(p) != "hi" {
		t.Fatalf("small: %x %q", f, p)
	}
}

func TestWSNegotiateDeflate(t *testing.T) {
	for offer, want := range map[string]bool{
		"permessage-deflate":                                                         true,
		"permessage-deflate; client_max_window_bits":                                 true,
		"permessage-deflate; server_max_window_bits=10":                              false,
		"permessage-deflate; server_max_window_bits=10, permessage-deflate":          true,
		"permessage-deflate; client_max_window_bits=7":                               false,
		"permessage-deflate; foo":                                                    false,
		"permessage-deflate; server_no_context_takeover; server_no_context_takeover": false,
		"x-webkit-deflate-frame":                                                     false,
	} {
		if got := negotiateDeflate(offer) != ""; got != want {
			t.Errorf("%q: %v", offer, got)
		}
	}
}

func TestWSDenyAndNotAccepted(t *testing.T) {
	_, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		w := r.WS()
		a.wsReceive(w)
		switch string(r.Path()) {
		case "/close":
			w.Close(1000, "")
		case "/deny":
			if err := w.Deny(401, []byte("content-type: text/plain\r\n")); err != nil {
				panic(err)
			}
			w.DenyBody([]byte("no"), false)
		}
		w.AppDone(false)
		a.s.Flush()
	})
	for path, want := range map[string]string{"/close": "HTTP/1.1 403 ", "/deny": "HTTP/1.1 401 ", "/none": "HTTP/1.1 500 "} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
			"Sec-WebSocket-Key: "+wsKey+"\r\nSec-WebSocket-Version: 13\r\n\r\n")
		all, _ := io.ReadAll(c)
		c.Close()
		if !strings.HasPrefix(string(all), want) {
			t.Fatalf("%s: %q", path, all)
		}
		if path == "/deny" && !strings.HasSuffix(string(all), "\r\n\r\nno") {
			t.Fatalf("deny body: %q", all)
		}
	}
}

func TestWSPingTimeout(t *testing.T) {
	codes := make(chan int, 1)
	a, addr := startServer(t, Config{}, wsEchoApp(codes))
	a.s.SetWSConfig(WSConfig{PingInterval: 50 * time.Millisecond, PingTimeout: 100 * time.Millisecond})
	c, br, _ := wsDial(t, addr, "")
	// answer the first ping, not the second
	f, p := readFrame(t, br)
	if f != 0x89 || len(p) != 4 {
		t.Fatalf("ping: %x %v", f, p)
	}
	writeFrame(c, 0x8a, p, true)
	if f, _ := readFrame(t, br); f != 0x89 {
		t.Fatalf("second ping: %x", f)
	}
	f, p = readFrame(t, br)
	if f != 0x88 || closeCode(p) != 1011 {
		t.Fatalf("timeout close: %x %v", f, p)
	}
	if code := <-codes; code != 1011 {
		t.Fatalf("disconnect code %d", code)
	}
}

func TestWSShutdownCloses1012(t *testing.T) {
	codes := make(chan int, 1)
	a, addr := startServer(t, Config{}, wsEchoApp(codes))
	c, br, _ := wsDial(t, addr, "")
	writeFrame(c, 0x81, []byte("x"), true)
	readFrame(t, br)
	a.s.Close()
	f, p := readFrame(t, br)
	if f != 0x88 || closeCode(p) != 1012 {
		t.Fatalf("shutdown: %x %v", f, p)
	}
	writeFrame(c, 0x88, p, true)
	if code := <-codes; code != 1012 {
		t.Fatalf("disconnect code %d", code)
	}
	select {
	case <-a.s.Idle():
	case <-time.After(5 * time.Second):
		t.Fatal("server not idle after the session closed")
	}
}

func TestWSHandshakeNotWebSocket(t *testing.T) {
	// an upgrade to something else is a plain request (answered, then closed)
	_, addr := startServer(t, Config{}, hello)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET /h HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n")
	all, _ := io.ReadAll(c)
	if !strings.HasPrefix(string(all), "HTTP/1.1 200 ") || !strings.HasSuffix(string(all), "hello /h") {
		t.Fatalf("%q", all)
	}
}

func TestWSMessageAndCloseInOneRead(t *testing.T) {
	got := make(chan string, 4)
	_, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		w := r.WS()
		a.wsReceive(w)
		w.Accept("", nil)
		a.s.Flush()
		for {
			k, data, code, _ := a.wsReceive(w)
			if k == WSDisconnect {
				got <- "disconnect " + string(rune('0'+code%10))
				break
			}
			got <- string(data)
		}
		w.AppDone(false)
		a.s.Flush()
	})
	c, br, _ := wsDial(t, addr, "")
	time.Sleep(20 * time.Millisecond) // the application waits in receive
	var buf bytes.Buffer
	for _, f := range []struct {
		first byte
		p     []byte
	}{{0x81, []byte("last words")}, {0x88, []byte{0x03, 0xe9}}} { // 1001
		b := []byte{f.first, 0x80 | byte(len(f.p)), 0, 0, 0, 0}
		buf.Write(append(b, f.p...))
	}
	c.Write(buf.Bytes())
	for _, want := range []string{"last words", "disconnect 1"} {
		select {
		case s := <-got:
			if s != want {
				t.Fatalf("got %q, want %q", s, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the application did not get %q", want)
		}
	}
	if f, _ := readFrame(t, br); f != 0x88 {
		t.Fatalf("close not echoed: %x", f)
	}
}
