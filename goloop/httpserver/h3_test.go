package httpserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// startH3 is startTLSWith plus HTTP/3 on a UDP port of its own; it returns the app and
// the https:// base of the HTTP/3 port.
func startH3(t *testing.T, cfg Config, o H3Options, h func(a *fakeApp, r *Request)) (*fakeApp, string, *testPKI) {
	t.Helper()
	return startH3With(t, cfg, o, func(*Server) {}, h)
}

// startH3With is startH3 with setup called on the server before it serves.
func startH3With(t *testing.T, cfg Config, o H3Options, setup func(*Server), h func(a *fakeApp, r *Request)) (*fakeApp, string, *testPKI) {
	t.Helper()
	p := newPKI(t)
	a, _ := startServerWith(t, cfg, setup, h)
	if err := a.s.SetTLS(TLSOptions{CertFile: p.certFile, KeyFile: p.keyFile}); err != nil {
		t.Fatal(err)
	}
	if err := a.s.ServeH3("127.0.0.1:0", o); err != nil {
		t.Fatal(err)
	}
	return a, "https://" + a.s.H3Addr().String(), p
}

// h3Client is quic-go's HTTP/3 client trusting the test CA.
func h3Client(t *testing.T, p *testPKI, qc *quic.Config) *http.Client {
	tr := &http3.Transport{TLSClientConfig: p.client(), QUICConfig: qc}
	t.Cleanup(func() { tr.Close() })
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

// hashApp answers a request with its method, HTTP major version, body length and the
// body's SHA-256; /stream answers 64 parts of 64 KiB.
func hashApp(a *fakeApp, r *Request) {
	body := a.readBody(r, false)
	sum := sha256.Sum256(body)
	r.Start(200, []byte("content-type: text/plain\r\nx-version: "+fmt.Sprint(r.Major)+"\r\n"))
	if string(r.Path()) == "/stream" {
		chunk := bytes.Repeat([]byte("y"), 64<<10)
		for i := 0; i < 64; i++ {
			if err := a.send(r, chunk, true); err != nil {
				return
			}
		}
		a.send(r, nil, false)
		return
	}
	a.send(r, fmt.Appendf(nil, "%s %d %s", r.Method(), len(body), hex.EncodeToString(sum[:])), false)
}

// postHashed POSTs body and checks hashApp's answer; getStream checks /stream's length.
func postHashed(t *testing.T, cl *http.Client, base string, body []byte) {
	t.Helper()
	sum := sha256.Sum256(body)
	resp, err := cl.Post(base+"/up", "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("POST %d %s", len(body), hex.EncodeToString(sum[:])); string(b) != want {
		t.Fatalf("%q, want %q", b, want)
	}
}

func getStream(t *testing.T, cl *http.Client, base string) {
	t.Helper()
	resp, err := cl.Get(base + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != 64*64<<10 {
		t.Fatal(n, err)
	}
}

func TestH3GetPostStream(t *testing.T) {
	_, base, p := startH3(t, Config{}, H3Options{}, hashApp)
	cl := h3Client(t, p, nil)
	resp, err := cl.Get(base + "/x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 3 || resp.Header.Get("x-version") != "3" || !strings.HasPrefix(string(b), "GET 0 ") {
		t.Fatalf("%s %v %q", resp.Proto, resp.Header, b)
	}
	if _, ok := resp.Header["Date"]; ok {
		t.Fatalf("date header without DateHeader: %v", resp.Header)
	}
	postHashed(t, cl, base, pattern(5<<20))
	getStream(t, cl, base)
}

// 100 streams at once on one connection, each with a body, each answered with its own.
func TestH3ManyStreams(t *testing.T) {
	_, base, p := startH3(t, Config{}, H3Options{}, hashApp)
	cl := h3Client(t, p, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Go(func() {
			body := bytes.Repeat([]byte{byte(i)}, 1000+i)
			sum := sha256.Sum256(body)
			resp, err := cl.Post(base+"/s", "x/y", bytes.NewReader(body))
			if err != nil {
				errs <- err
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := fmt.Sprintf("POST %d %s", len(body), hex.EncodeToString(sum[:])); string(b) != want {
				errs <- fmt.Errorf("%q, want %q", b, want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// More streams than the limit: QUIC's stream limit holds the client back, none fails,
// and the application never has more than the limit in flight.
func TestH3StreamLimit(t *testing.T) {
	var cur, peak atomic.Int64
	app := func(a *fakeApp, r *Request) {
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(time.Millisecond) // (keeps streams overlapping; nothing depends on it)
		cur.Add(-1)
		a.respond(r, 200, "", "ok")
	}
	_, base, p := startH3(t, Config{}, H3Options{MaxStreams: 5}, app)
	cl := h3Client(t, p, nil)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 60 {
		wg.Go(func() {
			resp, err := cl.Get(base + "/")
			if err != nil {
				failed.Add(1)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
	if failed.Load() != 0 || peak.Load() > 5 {
		t.Fatalf("failed %d, peak in flight %d (limit 5)", failed.Load(), peak.Load())
	}
}

// Tiny flow-control windows: a large body still arrives whole, in both directions.
func TestH3TinyWindows(t *testing.T) {
	_, base, p := startH3(t, Config{BodyBuffer: 4096, WriteBuffer: 8192}, H3Options{StreamWindow: 16 << 10, ConnWindow: 32 << 10}, hashApp)
	cl := h3Client(t, p, &quic.Config{InitialStreamReceiveWindow: 16 << 10, MaxStreamReceiveWindow: 16 << 10,
		InitialConnectionReceiveWindow: 32 << 10, MaxConnectionReceiveWindow: 32 << 10})
	postHashed(t, cl, base, pattern(1<<20))
	getStream(t, cl, base)
}

// recvPast receives until the body's parts end: the state that ended them.
func recvPast(a *fakeApp, r *Request) RecvState {
	for {
		if _, st := a.receive(r); st != RecvBody {
			return st
		}
	}
}

// A client that resets its stream mid-body: the application sees a disconnect.
func TestH3ResetMidBody(t *testing.T) {
	got := make(chan RecvState, 1)
	began := make(chan struct{})
	app := func(a *fakeApp, r *Request) {
		close(began)
		got <- recvPast(a, r)
		quiet(a, r)
	}
	_, base, p := startH3(t, Config{}, H3Options{}, app)
	cl := h3Client(t, p, nil)
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/up", pr)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := cl.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	pw.Write(make([]byte, 1000))
	<-began // the request reached the application
	pw.Write(make([]byte, 1000))
	cancel() // the client's stream is reset
	if st := <-got; st != RecvDisconnect {
		t.Fatalf("receive after the reset: %d, want RecvDisconnect", st)
	}
	pw.Close()
	<-done
}

// A client that stops reading: the application's sends pause (SendPaused) long before a
// 64 MiB response is all queued; what the engine holds is bounded.
func TestH3SlowReaderBounded(t *testing.T) {
	paused := make(chan int64, 1)
	ended := make(chan error, 1)
	app := func(a *fakeApp, r *Request) {
		a.readBody(r, false)
		r.Start(200, nil)
		chunk := make([]byte, 64<<10)
		var sent int64
		for sent < 64<<20 {
			fl, err := r.Send(chunk, true)
			if err != nil {
				return
			}
			sent += int64(len(chunk))
			if fl&SendPaused != 0 {
				select {
				case paused <- sent:
				default:
				}
				if err := a.waitRoom(r, fl, nil); err != nil {
					ended <- err
					return
				}
			}
		}
		r.Send(nil, false)
		ended <- nil
	}
	_, base, p := startH3(t, Config{}, H3Options{}, app)
	cl := h3Client(t, p, &quic.Config{MaxStreamReceiveWindow: 64 << 10, MaxConnectionReceiveWindow: 128 << 10})
	resp, err := cl.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	sent := <-paused // the client read nothing of the body
	if sent >= 64<<20 {
		t.Fatalf("the application queued %d bytes without a pause", sent)
	}
	resp.Body.Close() // STOP_SENDING: the paused application sees the client go away
	if err := <-ended; err != ErrDisconnected {
		t.Fatalf("the paused sender ended with %v, want ErrDisconnected", err)
	}
}

// Server shutdown with a stream in flight: GOAWAY; the stream finishes whole; a new
// connection is refused.
func TestH3ShutdownMidStream(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	app := func(a *fakeApp, r *Request) {
		a.readBody(r, false)
		r.Start(200, nil)
		a.send(r, []byte("first "), true)
		close(started)
		<-release
		a.send(r, []byte("last"), false)
	}
	a, base, p := startH3(t, Config{}, H3Options{}, app)
	cl := h3Client(t, p, nil)
	resp, err := cl.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	<-started
	a.s.Close()
	close(release)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(b) != "first last" {
		t.Fatalf("%q %v", b, err)
	}
	cl2 := h3Client(t, p, &quic.Config{HandshakeIdleTimeout: 2 * time.Second})
	if resp, err := cl2.Get(base + "/"); err == nil {
		resp.Body.Close()
		t.Fatalf("a new connection after shutdown was answered %d", resp.StatusCode)
	}
}

// Static files are answered by Go over HTTP/3 too: a whole file, a range, a traversal
// refused; other paths reach the application.
func TestH3Static(t *testing.T) {
	dir, big := staticTree(t)
	p := newPKI(t)
	a, _ := startTLSWith(t, p, Config{}, hashApp)
	if err := a.s.SetStatic([]StaticMount{{Route: "/static", Dir: dir}}, false); err != nil {
		t.Fatal(err)
	}
	if err := a.s.ServeH3("127.0.0.1:0", H3Options{}); err != nil {
		t.Fatal(err)
	}
	base := "https://" + a.s.H3Addr().String()
	cl := h3Client(t, p, nil)
	get := func(path, rng string) (*http.Response, []byte) {
		req, _ := http.NewRequest("GET", base+path, nil)
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, b
	}
	if resp, b := get("/static/big.bin", ""); resp.StatusCode != 200 || !bytes.Equal(b, big) {
		t.Fatalf("%d, %d bytes", resp.StatusCode, len(b))
	}
	if resp, b := get("/static/big.bin", "bytes=10-19"); resp.StatusCode != 206 || !bytes.Equal(b, big[10:20]) {
		t.Fatalf("%d %q", resp.StatusCode, b)
	}
	if resp, _ := get("/static/%2e%2e/h3_test.go", ""); resp.StatusCode < 400 {
		t.Fatalf("traversal answered %d", resp.StatusCode)
	}
	if _, b := get("/other", ""); !strings.HasPrefix(string(b), "GET 0 ") || a.seenCount() != 1 {
		t.Fatalf("%q, the application saw %d", b, a.seenCount())
	}
}

// --limit-concurrency: a stream arriving while the limit is in flight is answered 503.
func TestH3LimitConcurrency(t *testing.T) {
	began, release := make(chan struct{}), make(chan struct{})
	app := func(a *fakeApp, r *Request) {
		close(began)
		<-release
		a.respond(r, 200, "", "ok")
	}
	_, base, p := startH3(t, Config{LimitConcurrency: 1}, H3Options{}, app)
	cl := h3Client(t, p, nil)
	first := make(chan int, 1)
	go func() {
		resp, err := cl.Get(base + "/1")
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-began
	resp, err := cl.Get(base + "/2")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	close(release)
	if resp.StatusCode != 503 || string(b) != "Service Unavailable" || <-first != 200 {
		t.Fatalf("%d %q", resp.StatusCode, b)
	}
}

// h3Code is the HTTP/3 error code of a client's error (-1: none).
func h3Code(err error) int64 {
	var he *http3.Error
	if errors.As(err, &he) {
		return int64(he.ErrorCode)
	}
	var se *quic.StreamError
	if errors.As(err, &se) {
		return int64(se.ErrorCode)
	}
	return -1
}

// A request body that stops coming after its first bytes (slower than BodyMinRate once
// BodyGrace passed): the stream is reset with H3_REQUEST_CANCELLED, the application sees
// a disconnect, and the metrics count a body timeout.
func TestH3BodyRateReset(t *testing.T) {
	got := make(chan RecvState, 1)
	app := func(a *fakeApp, r *Request) {
		got <- recvPast(a, r)
		quiet(a, r)
	}
	a, base, p := startH3With(t, Config{BodyMinRate: 1 << 20, BodyGrace: 100 * time.Millisecond}, H3Options{},
		func(s *Server) { s.EnableMetrics("") }, app)
	cl := h3Client(t, p, nil)
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest("POST", base+"/up", pr)
	done := make(chan error, 1)
	go func() {
		resp, err := cl.Do(req)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		done <- err
	}()
	pw.Write(make([]byte, 1000)) // then nothing
	if st := <-got; st != RecvDisconnect {
		t.Fatalf("receive of a stalled body: %d, want RecvDisconnect", st)
	}
	err := <-done
	if code := h3Code(err); code != int64(http3.ErrCodeRequestCanceled) {
		t.Fatalf("the client saw %v (code %#x), want a reset with H3_REQUEST_CANCELLED", err, code)
	}
	if n := a.s.Metrics().BodyTimeouts; n != 1 {
		t.Fatalf("body timeouts counted: %d, want 1", n)
	}
}

// A body that keeps coming faster than BodyMinRate is not cut, however long it takes
// past the grace.
func TestH3BodyRateKept(t *testing.T) {
	_, base, p := startH3(t, Config{BodyMinRate: 1, BodyGrace: 200 * time.Millisecond}, H3Options{}, hashApp)
	cl := h3Client(t, p, nil)
	pr, pw := io.Pipe()
	go func() { // each part buys 100 s: the pauses between them are past the grace
		for i := 0; i < 4; i++ {
			time.Sleep(300 * time.Millisecond)
			pw.Write(bytes.Repeat([]byte("z"), 100))
		}
		pw.Close()
	}()
	first := bytes.NewReader(bytes.Repeat([]byte("z"), 100))
	resp, err := cl.Post(base+"/up", "application/octet-stream", io.MultiReader(first, pr))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(string(b), "POST 500 ") {
		t.Fatalf("%q", b)
	}
}

// A client that stops reading a large response: past RespGrace with less than
// RespMinRate read, the stream is reset, the paused sender sees a disconnect and the
// metrics count a response timeout.
func TestH3SlowReaderReset(t *testing.T) {
	ended := make(chan error, 1)
	app := func(a *fakeApp, r *Request) {
		a.readBody(r, false)
		r.Start(200, nil)
		chunk := make([]byte, 64<<10)
		for sent := 0; sent < 64<<20; sent += len(chunk) {
			fl, err := r.Send(chunk, true)
			if err == nil && fl&SendPaused != 0 {
				err = a.waitRoom(r, fl, nil)
			}
			if err != nil {
				ended <- err
				return
			}
		}
		r.Send(nil, false)
		ended <- nil
	}
	a, base, p := startH3With(t, Config{RespMinRate: 64 << 10, RespGrace: 100 * time.Millisecond}, H3Options{},
		func(s *Server) { s.EnableMetrics("") }, app)
	cl := h3Client(t, p, &quic.Config{MaxStreamReceiveWindow: 64 << 10, MaxConnectionReceiveWindow: 128 << 10})
	resp, err := cl.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := <-ended; err != ErrDisconnected { // the client read nothing
		t.Fatalf("the sender ended with %v, want ErrDisconnected", err)
	}
	if n := a.s.Metrics().RespTimeouts; n != 1 {
		t.Fatalf("response timeouts counted: %d, want 1", n)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	if code := h3Code(err); code != int64(http3.ErrCodeRequestCanceled) {
		t.Fatalf("the client's read ended with %v (code %#x), want H3_REQUEST_CANCELLED", err, code)
	}
}

// GET /metrics over HTTP/3 is answered by Go (the application never sees it); HEAD too.
func TestH3Metrics(t *testing.T) {
	a, base, p := startH3With(t, Config{}, H3Options{}, func(s *Server) { s.EnableMetrics("/metrics") }, hashApp)
	cl := h3Client(t, p, nil)
	postHashed(t, cl, base, []byte("hello"))
	resp, err := cl.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") ||
		!strings.Contains(string(b), `goloop_responses_total{status="2xx"} 1`) {
		t.Fatalf("%d %v\n%s", resp.StatusCode, resp.Header, b)
	}
	resp, err = cl.Head(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(b) != 0 || a.seenCount() != 1 {
		t.Fatalf("HEAD: %d %q, the application saw %d requests", resp.StatusCode, b, a.seenCount())
	}
}
