package httpserver

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"
)

// benchPoller is a LoopPoller that only records the handlers (the benchmarks call them).
type benchPoller struct{ hs map[int]func(uint32) }

func (p *benchPoller) Register(fd int, _ uint32, h func(uint32)) error { p.hs[fd] = h; return nil }
func (p *benchPoller) Modify(int, uint32) error                        { return nil }
func (p *benchPoller) Unregister(fd int)                               { delete(p.hs, fd) }

// benchConn is a loop-mode connection over a socketpair: the server's end is served by
// the loop driver's handler, the client's end is returned.
func benchConn(b testing.TB, cfg Config) (s *Server, h func(uint32), client int) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { unix.Close(fds[1]) })
	for _, fd := range fds {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	}
	p := &benchPoller{hs: map[int]func(uint32){}}
	s = New(cfg)
	s.SetLoop(p)
	s.rbuf = make([]byte, loopReadBuffer)
	s.acceptLoopConn(fds[0], &unix.SockaddrUnix{Name: "bench"})
	b.Cleanup(s.Abort)
	return s, p.hs[fds[0]], fds[1]
}

// benchServe: per op, the client sends reqs (n requests), the loop driver reads them, a
// fake application answers each with hdr and body, Flush writes, the client reads it all.
func benchServe(b *testing.B, cfg Config, reqs []byte, n int, hdr, body []byte) {
	s, h, client := benchConn(b, cfg)
	var evs []Event
	rbuf := make([]byte, 1<<20)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := unix.Write(client, reqs); err != nil {
			b.Fatal(err)
		}
		h(evIn)
		evs = s.Take(evs[:0])
		if len(evs) != n {
			b.Fatalf("%d events, want %d", len(evs), n)
		}
		for j, ev := range evs {
			r := ev.Req
			r.StartReason(200, benchServeReason, hdr)
			if benchServeHeld {
				r.SendHeld(body, false, func() {})
			} else {
				r.Send(body, false)
			}
			r.AppDone()
			evs[j] = Event{}
		}
		s.Flush()
		for got := 0; ; {
			m, err := unix.Read(client, rbuf)
			if m > 0 {
				got += m
			}
			if err == unix.EAGAIN || m <= 0 {
				if got == 0 {
					b.Fatal("no response")
				}
				break
			}
		}
	}
}

var (
	benchServeHeld   bool
	benchServeReason []byte // the status line's phrase (StartReason; nil: Start's)
)

var benchHdr = []byte("content-type: text/plain\r\ncontent-length: 13\r\n")

// BenchmarkLoopPipelined16: the engine's part of serve_bench's "16 pipelined" row.
func BenchmarkLoopPipelined16(b *testing.B) {
	req := []byte("GET / HTTP/1.1\r\nHost: localhost:8000\r\n\r\n")
	benchServe(b, Config{ServerHeader: true, DateHeader: true}, bytes.Repeat(req, 16), 16,
		benchHdr, []byte("Hello, world!"))
}

// BenchmarkLoopBig: the engine's part of the "100 KiB response" row.
func BenchmarkLoopBig(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 100*1024)
	hdr := []byte("content-type: application/octet-stream\r\ncontent-length: 102400\r\n")
	benchServe(b, Config{ServerHeader: true, DateHeader: true},
		[]byte("GET / HTTP/1.1\r\nHost: localhost:8000\r\n\r\n"), 1, hdr, body)
}

// BenchmarkLoopBigHeld: the 100 KiB response held (SendHeld) instead of copied.
func BenchmarkLoopBigHeld(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 100*1024)
	hdr := []byte("content-type: application/octet-stream\r\ncontent-length: 102400\r\n")
	benchServeHeld = true
	defer func() { benchServeHeld = false }()
	benchServe(b, Config{ServerHeader: true, DateHeader: true},
		[]byte("GET / HTTP/1.1\r\nHost: localhost:8000\r\n\r\n"), 1, hdr, body)
}

// BenchmarkLoopWSGIKeepAlive: the engine's part of a WSGI hello world on a keep-alive
// connection (bench/analysis/wsgi_instr.py's raw row): one request per read, answered as
// the WSGI pool thread answers it (StartReason with start_response's phrase, one Send that
// completes it, Done, Flush; ReuseRequests, as the pool sets it).
func BenchmarkLoopWSGIKeepAlive(b *testing.B) {
	benchServeReason = []byte("OK")
	defer func() { benchServeReason = nil }()
	benchServe(b, Config{ServerHeader: true, DateHeader: true, ReuseRequests: true},
		[]byte("GET / HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n\r\n"), 1,
		[]byte("Content-Type: text/plain\r\nContent-Length: 13\r\n"), []byte("Hello, World!"))
}
