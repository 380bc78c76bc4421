package httpserver

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// continueApp answers "got <body>" after reading the body (the way that sends a 100),
// and /noread 403 without reading it.
func continueApp(a *fakeApp, r *Request) {
	if string(r.Path()) == "/noread" {
		a.respond(r, 403, "", "no")
		return
	}
	a.respond(r, 200, "", "got "+string(a.readBody(r, true)))
}

func TestExpect100Continue(t *testing.T) {
	_, addr := startServer(t, Config{}, continueApp)
	c, br := dial(t, addr)
	fmt.Fprintf(c, "POST /e HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
	line, _ := br.ReadString('\n')
	blank, _ := br.ReadString('\n')
	if line != "HTTP/1.1 100 Continue\r\n" || blank != "\r\n" {
		t.Fatalf("got %q %q", line, blank)
	}
	fmt.Fprintf(c, "abc")
	if resp, body := readResp(t, br, "POST"); resp.StatusCode != 200 || body != "got abc" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	// answered without reading: no 100, and the connection closes after the response
	fmt.Fprintf(c, "POST /noread HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
	resp, body := readResp(t, br, "POST")
	if resp.StatusCode != 403 || body != "no" || !resp.Close {
		t.Fatalf("got %d %q close %v", resp.StatusCode, body, resp.Close)
	}
}

func trailersApp(a *fakeApp, r *Request) {
	if err := r.Start(200, nil); err != nil {
		panic(err)
	}
	r.SetTrailers()
	r.Send([]byte("abc"), false)
	if _, err := r.Send([]byte("x"), false); err != ErrCompleted {
		panic(fmt.Sprint("send after the body's end: ", err))
	}
	if err := r.SendTrailers([]byte("x-sum: 1\r\n"), true); err != nil {
		panic(err)
	}
	if err := r.SendTrailers([]byte("x-two: 2\r\n"), false); err != nil {
		panic(err)
	}
	if err := r.SendTrailers(nil, false); err != ErrTrailersDone {
		panic(fmt.Sprint("trailers after the end: ", err))
	}
	a.s.Flush()
}

func TestTrailers(t *testing.T) {
	_, addr := startServer(t, Config{}, trailersApp)
	c, br := dial(t, addr)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nTE: gzip, trailers\r\n\r\n")
	resp, body := readResp(t, br, "GET")
	if body != "abc" || resp.Trailer.Get("X-Sum") != "1" || resp.Trailer.Get("X-Two") != "2" ||
		len(resp.TransferEncoding) != 1 {
		t.Fatalf("got %q trailers %v te %v", body, resp.Trailer, resp.TransferEncoding)
	}
	// without TE: trailers they are dropped, the response framed as usual
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body = readResp(t, br, "GET")
	if body != "abc" || len(resp.Trailer) != 0 || resp.ContentLength != 3 || resp.Close {
		t.Fatalf("got %q trailers %v length %d", body, resp.Trailer, resp.ContentLength)
	}
}

func TestTrailersErrors(t *testing.T) {
	errs := make(chan error, 2)
	_, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		r.Start(200, nil)
		errs <- r.SendTrailers(nil, false) // not announced
		a.respond2(r, "x")
	})
	c, br := dial(t, addr)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	readResp(t, br, "GET")
	if err := <-errs; err != ErrNoTrailers {
		t.Fatal(err)
	}
}

func (a *fakeApp) respond2(r *Request, body string) {
	r.Send([]byte(body), false)
	a.s.Flush()
}

func TestSendFile(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 300000) // 4.8 MB
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	_, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		switch string(r.Path()) {
		case "/slow":
			<-release
			a.respond(r, 200, "", "slow")
		case "/chunked":
			r.Start(200, nil)
			r.Send([]byte("head-"), true)
			if _, err := r.SendFile(path); err != nil {
				panic(err)
			}
			a.s.Flush()
		case "/missing":
			r.Start(200, nil)
			if _, err := r.SendFile(path + ".nope"); !os.IsNotExist(err) {
				panic(err)
			}
			a.respond2(r, "none")
		default:
			r.Start(200, []byte("content-type: application/octet-stream\r\n"))
			if _, err := r.SendFile(path); err != nil {
				panic(err)
			}
			a.s.Flush()
		}
	})
	c, br := dial(t, addr)
	// the first file waits behind /slow (held in the request's output), the second is
	// the head of the line; a small response between them
	fmt.Fprintf(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /f HTTP/1.1\r\nHost: x\r\n\r\n"+
		"GET /chunked HTTP/1.1\r\nHost: x\r\n\r\nGET /missing HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(50 * time.Millisecond)
	close(release)
	if _, body := readResp(t, br, "GET"); body != "slow" {
		t.Fatal(body)
	}
	resp, body := readResp(t, br, "GET")
	if resp.ContentLength != int64(len(data)) || sha256.Sum256([]byte(body)) != sha256.Sum256(data) {
		t.Fatalf("file: length %d, %d bytes", resp.ContentLength, len(body))
	}
	resp, body = readResp(t, br, "GET")
	if len(resp.TransferEncoding) != 1 || body != "head-"+string(data) {
		t.Fatalf("chunked file: %v %d bytes", resp.TransferEncoding, len(body))
	}
	if _, body := readResp(t, br, "GET"); body != "none" {
		t.Fatal(body)
	}
}

// openTemp opens a temporary file holding data (closed at the test's end).
func openTemp(t *testing.T, data []byte) (*os.File, int) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, int(f.Fd())
}

// TestSendFD: http.response.zerocopysend's offset/count and file position rules, with
// content-length and chunked framing, and a part bigger than the socket buffer.
func TestSendFD(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 200000) // 3.2 MB
	f, fd := openTemp(t, data)
	pos := func() int64 { p, _ := f.Seek(0, io.SeekCurrent); return p }
	positions := make(chan int64, 4)
	_, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		if string(r.Path()) != "/toolong" {
			r.Start(200, nil)
		}
		var err error
		switch string(r.Path()) {
		case "/offset": // explicit offset: the position does not move
			f.Seek(7, io.SeekStart)
			_, _, err = r.SendFD(fd, 2, 5, false)
		case "/position": // from the position, which moves past each part
			f.Seek(3, io.SeekStart)
			if _, _, err = r.SendFD(fd, -1, 4, true); err == nil {
				positions <- pos()
				_, _, err = r.SendFD(fd, -1, -1, false)
			}
		case "/big": // more than the socket takes at once, then a body part
			f.Seek(0, io.SeekStart)
			if _, _, err = r.SendFD(fd, 0, -1, true); err == nil {
				_, err = r.Send([]byte("-end"), false)
			}
		case "/toolong": // past the declared content-length: an error, as a body's
			f.Seek(0, io.SeekStart)
			r.Start(200, []byte("content-length: 3\r\n"))
			if _, _, err = r.SendFD(fd, 0, 4, false); err == ErrTooLong {
				_, err = r.Send([]byte("abc"), false)
			}
		}
		if err != nil {
			panic(err)
		}
		positions <- pos()
		a.s.Flush()
	})
	c, br := dial(t, addr)
	for _, tc := range []struct {
		path, body string
		clen       int64
		pos        []int64
	}{
		{"/offset", "23456", 5, []int64{7}},
		{"/position", "3456" + string(data[7:]), -1, []int64{7, int64(len(data))}},
		{"/big", string(data) + "-end", -1, []int64{0}},
		{"/toolong", "abc", 3, []int64{0}},
	} {
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", tc.path)
		resp, body := readResp(t, br, "GET")
		if resp.ContentLength != tc.clen || body != tc.body {
			t.Fatalf("%s: length %d, %d bytes %.20q", tc.path, resp.ContentLength, len(body), body)
		}
		for _, want := range tc.pos {
			if p := <-positions; p != want {
				t.Fatalf("%s: file position %d, want %d", tc.path, p, want)
			}
		}
	}
}

func TestLingeringCloseAfter400(t *testing.T) {
	_, addr := startServer(t, Config{}, hello)
	c, _ := dial(t, addr)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nBad Header: 1\r\n\r\n")
	time.Sleep(50 * time.Millisecond)
	junk := bytes.Repeat([]byte("x"), 1<<20)
	for i := 0; i < 2; i++ {
		if _, err := c.Write(junk); err != nil {
			t.Fatalf("the server reset the connection: %v", err)
		}
	}
	c.(interface{ CloseWrite() error }).CloseWrite()
	b, err := io.ReadAll(c)
	if err != nil || !strings.HasPrefix(string(b), "HTTP/1.1 400 ") {
		t.Fatalf("%q %v", b, err)
	}
}

func TestWebSocketVersion426(t *testing.T) {
	_, addr := startServer(t, Config{}, hello)
	c, br := dial(t, addr)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 7\r\n\r\n")
	resp, _ := readResp(t, br, "GET")
	if resp.StatusCode != http.StatusUpgradeRequired || resp.Header.Get("Sec-WebSocket-Version") != "13" {
		t.Fatalf("got %d %v", resp.StatusCode, resp.Header)
	}
}

func TestHeldOutputBound(t *testing.T) {
	release := make(chan struct{})
	a, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		if string(r.Path()) == "/slow" {
			<-release
		}
		a.respond(r, 200, "", strings.Repeat("b", 512<<10))
	})
	c, br := dial(t, addr)
	fmt.Fprintf(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	for i := 0; i < 12; i++ {
		time.Sleep(20 * time.Millisecond)
		fmt.Fprintf(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	time.Sleep(300 * time.Millisecond)
	if n := a.seenCount(); n > 6 {
		t.Fatalf("%d requests dispatched behind an unfinished response", n)
	}
	close(release)
	for i := 0; i < 13; i++ {
		if _, body := readResp(t, br, "GET"); len(body) != 512<<10 {
			t.Fatal(len(body))
		}
	}
}

// TestSendFDH2: http.response.zerocopysend on HTTP/2 (read and sent as DATA): the same
// offset/position rules as on HTTP/1.1, and before http.response.start its own error.
func TestSendFDH2(t *testing.T) {
	f, fd := openTemp(t, []byte("0123456789abcdef"))
	early := make(chan error, 1)
	positions := make(chan int64, 1)
	_, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		_, _, err := r.SendFD(fd, 0, 1, false)
		early <- err
		r.Start(200, nil)
		f.Seek(3, io.SeekStart)
		if _, _, err = r.SendFD(fd, -1, 4, true); err == nil { // "3456", the position moves to 7
			_, _, err = r.SendFD(fd, 10, 3, false) // "abc", the position stays
		}
		if err != nil {
			panic(err)
		}
		p, _ := f.Seek(0, io.SeekCurrent)
		positions <- p
		a.s.Flush()
	})
	if body := h2cGet(t, addr); body != "3456abc" {
		t.Fatalf("%q", body)
	}
	if err := <-early; err != ErrZeroCopy {
		t.Fatalf("zerocopysend before start: %v", err)
	}
	if p := <-positions; p != 7 {
		t.Fatalf("file position %d, want 7", p)
	}
}

// TestSendFDH2Streamed: a zerocopysend part larger than the windows goes out as they open,
// between the parts before and after it; a sender that goes on without waiting for it
// (SendPaused) still gets its parts in order.
func TestSendFDH2Streamed(t *testing.T) {
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i * 7 / 5)
	}
	_, fd := openTemp(t, data)
	for _, wait := range []bool{true, false} {
		t.Run(fmt.Sprint("wait=", wait), func(t *testing.T) {
			paused := make(chan bool, 1)
			_, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
				r.Start(200, nil)
				r.Send([]byte("head"), true)
				flags, _, err := r.SendFD(fd, 100, -1, true)
				paused <- flags&SendPaused != 0
				if wait {
					err = a.waitRoom(r, flags, err)
				}
				if err == nil {
					_, err = r.Send([]byte("tail"), false)
				}
				if err != nil {
					panic(err)
				}
				a.s.Flush()
			})
			if body, want := h2cGet(t, addr), "head"+string(data[100:])+"tail"; body != want {
				t.Fatalf("%d bytes, want %d", len(body), len(want))
			}
			if !<-paused { // more than the stream's window: the part could not be out at once
				t.Fatal("a 1 MiB part did not pause its sender")
			}
		})
	}
}

// h2cGet is the body of GET / over h2c (prior knowledge); the response must be HTTP/2.
func h2cGet(t *testing.T, addr string) string {
	resp, err := h2cClient().Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.ProtoMajor != 2 {
		t.Fatalf("HTTP/%d, %v", resp.ProtoMajor, err)
	}
	return string(body)
}
