package httpserver

import (
	"bufio"
	"bytes"
	"compress/flate"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
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
	c.Write(frameBytes(first, payload, masked))
}

// frameBytes: a frame as a client (masked) or a server sends it.
func frameBytes(first byte, payload []byte, masked bool) []byte {
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
	return append(b, p...)
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
	const base = "permessage-deflate; server_no_context_takeover"
	for offer, want := range map[string]string{
		"permessage-deflate":                                                                          base,
		"permessage-deflate; client_max_window_bits":                                                  base,
		"permessage-deflate; client_max_window_bits=9":                                                base + "; client_max_window_bits=9",
		`permessage-deflate; client_max_window_bits="12"`:                                             base + "; client_max_window_bits=12",
		"permessage-deflate; server_max_window_bits=10":                                               base + "; server_max_window_bits=10",
		"permessage-deflate; server_max_window_bits=8; client_no_context_takeover":                    base + "; server_max_window_bits=8; client_no_context_takeover",
		"permessage-deflate; server_no_context_takeover; server_max_window_bits=15":                   base + "; server_max_window_bits=15",
		"permessage-deflate; server_max_window_bits=7, permessage-deflate":                            base,
		"permessage-deflate; server_max_window_bits=16, permessage-deflate; server_max_window_bits=9": base + "; server_max_window_bits=9",
		"permessage-deflate; server_max_window_bits":                                                  "",
		"permessage-deflate; server_max_window_bits=010":                                              "",
		"permessage-deflate; server_max_window_bits=+9":                                               "",
		"permessage-deflate; client_max_window_bits=7":                                                "",
		"permessage-deflate; client_no_context_takeover=1":                                            "",
		"permessage-deflate; foo":                                                                     "",
		"permessage-deflate; server_no_context_takeover; server_no_context_takeover":                  "",
		"x-webkit-deflate-frame":                                                                      "",
	} {
		p, ok := negotiateDeflate(offer)
		if p.resp != want || ok != (want != "") {
			t.Errorf("%q: %q %v, want %q", offer, p.resp, ok, want)
		}
	}
	p, _ := negotiateDeflate("permessage-deflate; server_max_window_bits=9; client_max_window_bits=10")
	if p.serverBits != 9 || p.clientWindow != 1024 {
		t.Errorf("params: %+v", p)
	}
	if p, _ = negotiateDeflate("permessage-deflate; client_no_context_takeover"); p.serverBits != 15 || p.clientWindow != 0 {
		t.Errorf("params: %+v", p)
	}
}

// maxDistance inflates a raw deflate stream and returns its data and the longest
// back-reference in it: the window its reader needs.
func maxDistance(t *testing.T, z []byte) ([]byte, int) {
	t.Helper()
	var pos uint
	bit := func() uint {
		if pos/8 >= uint(len(z)) {
			t.Fatal("deflate: truncated")
		}
		b := uint(z[pos/8]>>(pos%8)) & 1
		pos++
		return b
	}
	bits := func(n int) int {
		v := 0
		for i := 0; i < n; i++ {
			v |= int(bit()) << i
		}
		return v
	}
	type huff struct{ codes map[[2]int]int } // (length, code): symbol
	build := func(lens []int) huff {
		h := huff{map[[2]int]int{}}
		var count [16]int
		for _, l := range lens {
			count[l]++
		}
		count[0] = 0
		var next [16]int
		code := 0
		for l := 1; l < 16; l++ {
			code = (code + count[l-1]) << 1
			next[l] = code
		}
		for sym, l := range lens {
			if l > 0 {
				h.codes[[2]int{l, next[l]}] = sym
				next[l]++
			}
		}
		return h
	}
	decode := func(h huff) int {
		code := 0
		for l := 1; l < 16; l++ {
			code = code<<1 | int(bit())
			if s, ok := h.codes[[2]int{l, code}]; ok {
				return s
			}
		}
		t.Fatalf("deflate: bad code %b at bit %d (%d codes)", code, pos, len(h.codes))
		return 0
	}
	lbase := []int{3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258}
	lext := []int{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0}
	dbase := []int{1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577}
	dext := []int{0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}
	var out []byte
	maxd := 0
	for {
		final := bit()
		btype := bits(2)
		if btype == 0 {
			pos = (pos + 7) &^ 7
			n := int(z[pos/8]) | int(z[pos/8+1])<<8
			pos += 32
			out = append(out, z[pos/8:pos/8+uint(n)]...)
			pos += uint(n) * 8
		} else {
			var lit, dist huff
			if btype == 1 {
				l := make([]int, 288)
				for i := range l {
					l[i] = map[bool]int{true: 8, false: 9}[i < 144 || i >= 280]
					if i >= 256 && i < 280 {
						l[i] = 7
					}
				}
				d := make([]int, 30)
				for i := range d {
					d[i] = 5
				}
				lit, dist = build(l), build(d)
			} else {
				hlit, hdist, hclen := bits(5)+257, bits(5)+1, bits(4)+4
				order := []int{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}
				cl := make([]int, 19)
				for i := 0; i < hclen; i++ {
					cl[order[i]] = bits(3)
				}
				ch := build(cl)
				var lens []int
				for len(lens) < hlit+hdist {
					switch sym := decode(ch); {
					case sym < 16:
						lens = append(lens, sym)
					case sym == 16:
						for n := 3 + bits(2); n > 0; n-- {
							lens = append(lens, lens[len(lens)-1])
						}
					default:
						var n int
						if sym == 17 {
							n = 3 + bits(3)
						} else {
							n = 11 + bits(7)
						}
						for ; n > 0; n-- {
							lens = append(lens, 0)
						}
					}
				}
				lit, dist = build(lens[:hlit]), build(lens[hlit:])
			}
			for {
				sym := decode(lit)
				if sym < 256 {
					out = append(out, byte(sym))
					continue
				}
				if sym == 256 {
					break
				}
				n := lbase[sym-257] + bits(lext[sym-257])
				ds := decode(dist)
				d := dbase[ds] + bits(dext[ds])
				if d > len(out) {
					t.Fatalf("deflate: distance %d before the start", d)
				}
				maxd = max(maxd, d)
				for ; n > 0; n-- {
					out = append(out, out[len(out)-d])
				}
			}
		}
		if final == 1 || pos/8 >= uint(len(z)) {
			break
		}
	}
	return out, maxd
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

// wsJSON is a typical JSON message of n records.
func wsJSON(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"type":"update","items":[`)
	names := []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace"}
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		nm := names[i%len(names)]
		fmt.Fprintf(&b, `{"id":%d,"name":"%s %d","email":"%s.%d@example.com","active":%v,"score":%.1f,"tags":["tag%d","group%d"],"created_at":"2026-11-%02dT%02d:%02d:00Z"}`,
			i, nm, i*7919%1000, nm, i*31%97, i%3 != 0, float64(i*37%1000)/10, i%5, i%3, 1+i%28, i%24, i*7%60)
	}
	b.WriteString("]}")
	return []byte(b.String())
}

// TestWSDeflateWindow: with server_max_window_bits=N, no back-reference of the server's
// output reaches farther than 2^N bytes (RFC 7692 7.1.2.1), and it still compresses.
func TestWSDeflateWindow(t *testing.T) {
	msgs := [][]byte{wsJSON(200), []byte(strings.Repeat("goloop websocket deflate ", 3000))}
	for bits := 8; bits <= 15; bits++ {
		for _, m := range msgs {
			z := deflateMessage(m, bits)
			out, d := maxDistance(t, append(z, 0, 0, 0xff, 0xff))
			if !bytes.Equal(out, m) {
				t.Fatalf("bits %d: the data differs", bits)
			}
			if d > 1<<bits || len(z) >= len(m)*2/3 {
				t.Errorf("bits %d: distance %d, %d of %d bytes", bits, d, len(z), len(m))
			}
			if bits == 15 && d <= 1<<10 {
				t.Errorf("the check sees no long distance: %d", d) // the message has them
			}
		}
	}
}

// BenchmarkWSDeflateWindow: the cost of a small window on a typical JSON message (29 KB):
// compressed size / message size as "ratio".
func BenchmarkWSDeflateWindow(b *testing.B) {
	m := wsJSON(200)
	for _, bits := range []int{15, 12, 10, 9, 8} {
		b.Run(strconv.Itoa(bits), func(b *testing.B) {
			b.SetBytes(int64(len(m)))
			var n int
			for i := 0; i < b.N; i++ {
				n = len(deflateMessage(m, bits))
			}
			b.ReportMetric(float64(n)/float64(len(m)), "ratio")
		})
	}
}

func TestUTF8Stream(t *testing.T) {
	valid := "aé✓😀κόσμε"
	// a valid text cut anywhere, in two or three pieces, is valid
	for i := 0; i <= len(valid); i++ {
		for j := i; j <= len(valid); j++ {
			var u utf8Stream
			if !u.feed([]byte(valid[:i]), false) || !u.feed([]byte(valid[i:j]), false) || !u.feed([]byte(valid[j:]), true) {
				t.Fatalf("valid cut at %d, %d", i, j)
			}
		}
	}
	// the piece that fails is the one with the first byte that no valid text can follow
	for _, tc := range []struct {
		pieces []string
		fail   int // index of the piece that must fail
	}{
		{[]string{"κόσμε", "\xf4\x90\x80\x80", "edited"}, 1},
		{[]string{"κόσμε\xf4", "\x90", "\x80\x80"}, 1},
		{[]string{"ok\xe0", "\x80", "\x80"}, 1},
		{[]string{"ok\xed", "\xa0\x80"}, 1},
		{[]string{"ok", "\xc0\xaf"}, 1},
		{[]string{"ok\xf5"}, 0},
		{[]string{"ok\xf0\x90", "A"}, 1},
		{[]string{"ok\xf0\x90\x80", "\x80\x80"}, 1},
		{[]string{"ok\xe2\x9c", ""}, 1}, // the message ends inside a sequence
		{[]string{"\x80"}, 0},
	} {
		var u utf8Stream
		for i, p := range tc.pieces {
			ok := u.feed([]byte(p), i == len(tc.pieces)-1)
			if ok != (i < tc.fail) {
				t.Errorf("%q: piece %d: %v", tc.pieces, i, ok)
				break
			}
			if !ok {
				break
			}
		}
	}
}

// TestWSUTF8FailFast: invalid UTF-8 closes with 1007 in the fragment, or the part of a
// frame, where it occurs, before the message's end is sent (RFC 6455 8.1, Autobahn 6.4).
func TestWSUTF8FailFast(t *testing.T) {
	codes := make(chan int, 4)
	_, addr := startServer(t, Config{}, wsEchoApp(codes))
	expect1007 := func(c net.Conn, br *bufio.Reader) {
		t.Helper()
		f, p := readFrame(t, br)
		if f != 0x88 || closeCode(p) != 1007 {
			t.Fatalf("got %x %q", f, p)
		}
		if code := <-codes; code != 1007 {
			t.Fatalf("disconnect code %d", code)
		}
	}
	// fragments: the second one is invalid, the last is never sent
	c, br, _ := wsDial(t, addr, "")
	writeFrame(c, 0x01, []byte("κόσμε"), true)
	writeFrame(c, 0x00, []byte("\xf4\x90"), true)
	expect1007(c, br)
	// one frame, of which only the part up to the invalid bytes is sent
	c, br, _ = wsDial(t, addr, "")
	payload := []byte("κόσμε\xf4\x90\x80\x80edited")
	var hb [10]byte
	head := append(frameHead(hb[:0], 1, len(payload)), 1, 2, 3, 4)
	head[1] |= 0x80
	p := append([]byte(nil), payload...)
	unmask(p, head[len(head)-4:])
	c.Write(head)
	c.Write(p[:3]) // a part that ends inside "ό" (when read on its own: carried)
	c.Write(p[3 : len("κόσμε")+2])
	expect1007(c, br)
}

// TestWSUTF8FailFastCompressed: a compressed text message's invalid UTF-8 closes with 1007
// in the frame whose compressed bytes reach it, before the message's end is sent.
func TestWSUTF8FailFastCompressed(t *testing.T) {
	codes := make(chan int, 4)
	a, addr := startServer(t, Config{}, wsEchoApp(codes))
	a.s.SetWSConfig(WSConfig{Deflate: true})
	var zb bytes.Buffer
	fw, _ := flate.NewWriter(&zb, flate.BestSpeed)
	text := append(wsJSON(100), "κόσμε\xf4\x90\x80\x80"...) // in the middle
	text = append(text, wsJSON(200)...)
	fw.Write(text)
	fw.Flush()
	z := bytes.TrimSuffix(zb.Bytes(), []byte{0, 0, 0xff, 0xff})
	bad := len(wsJSON(100)) + len("κόσμε") + 2
	// reach: the fewest compressed bytes whose inflated prefix holds the invalid bytes
	reach := sort.Search(len(z), func(n int) bool {
		out, _ := io.ReadAll(flate.NewReader(bytes.NewReader(z[:n])))
		return len(out) >= bad
	})
	if reach < 200 || reach > len(z)-100 {
		t.Fatalf("reach %d of %d", reach, len(z))
	}
	for _, split := range [][2]int{{reach, reach}, {reach / 2, reach}} { // in the first frame, the second
		c, br, head := wsDial(t, addr, "Sec-WebSocket-Extensions: permessage-deflate\r\n")
		if !strings.Contains(head, "permessage-deflate") {
			t.Fatalf("no deflate: %q", head)
		}
		writeFrame(c, 0x41, z[:split[0]], true) // text, compressed, not final
		if split[1] > split[0] {
			writeFrame(c, 0x00, z[split[0]:split[1]], true)
		}
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		f, p := readFrame(t, br)
		if f != 0x88 || closeCode(p) != 1007 {
			t.Fatalf("got %x %q", f, p)
		}
		if code := <-codes; code != 1007 {
			t.Fatalf("disconnect code %d", code)
		}
		c.Close()
	}
}

// BenchmarkUTF8Stream: the frame-by-frame check against one utf8.Valid of the message
// (a 1 KiB text with multi-byte characters, as one frame and as 64-byte fragments).
func BenchmarkUTF8Stream(b *testing.B) {
	m := []byte(strings.Repeat("goloop κόσμε ✓ ", 64)[:1024])
	for len(m) > 0 && !utf8.Valid(m) {
		m = m[:len(m)-1]
	}
	b.Run("utf8.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(m)))
		for i := 0; i < b.N; i++ {
			utf8.Valid(m)
		}
	})
	b.Run("frame", func(b *testing.B) {
		b.SetBytes(int64(len(m)))
		for i := 0; i < b.N; i++ {
			var u utf8Stream
			u.feed(m, true)
		}
	})
	b.Run("64-byte-fragments", func(b *testing.B) {
		b.SetBytes(int64(len(m)))
		for i := 0; i < b.N; i++ {
			var u utf8Stream
			for j := 0; j < len(m); j += 64 {
				u.feed(m[j:min(j+64, len(m))], j+64 >= len(m))
			}
		}
	})
}

// BenchmarkWSInflateFragmented: what the fail-fast check of a compressed text message
// costs: a 29 KB JSON message inflated whole (one frame) and with its frames checked as
// they arrive (4 and 16 frames: zProbe at each non-final one).
func BenchmarkWSInflateFragmented(b *testing.B) {
	var zb bytes.Buffer
	fw, _ := flate.NewWriter(&zb, flate.BestSpeed)
	fw.Write(wsJSON(150))
	fw.Flush()
	z := bytes.TrimSuffix(zb.Bytes(), []byte{0, 0, 0xff, 0xff})
	for _, frames := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("frames=%d", frames), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				w := &WS{}
				step := (len(z) + frames - 1) / frames
				for off := 0; off < len(z); off += step {
					w.frag = append(w.frag, z[off:min(off+step, len(z))]...)
					if off+step < len(z) && !w.zProbe(16<<20) {
						b.Fatal("invalid")
					}
				}
				if _, code := w.inflate(w.frag, 16<<20); code != 0 {
					b.Fatal(code)
				}
			}
		})
	}
}
