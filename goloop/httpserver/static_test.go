package httpserver

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// staticTree makes a mounted directory (and a secret beside it, which must never be
// served) and returns the mount's path.
func staticTree(t *testing.T) (dir string, big []byte) {
	t.Helper()
	top := t.TempDir()
	dir = filepath.Join(top, "public")
	big = make([]byte, 1<<20+123)
	rand.New(rand.NewSource(1)).Read(big)
	files := map[string]string{
		"hello.txt":       "hello world",
		"app.js":          "console.log('plain')",
		"app.js.br":       "BROTLI-BYTES",
		"app.js.gz":       "GZIP-BYTES",
		"only.css.gz":     "GZ-CSS",
		"only.css":        "body{}",
		"sub/index.html":  "<h1>index</h1>",
		"sub/page.css":    "p{}",
		"empty.txt":       "",
		"noext":           "raw",
		"dir/notindex.md": "md",
		"big.bin":         string(big),
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(top, "secret.txt"), []byte("TOPSECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"inside":       "hello.txt",                           // stays in the root: served
		"escape":       "../secret.txt",                       // leaves it: refused
		"escdir":       "..",                                  // a directory outside
		"abs":          filepath.Join(top, "secret.txt"),      // absolute, outside
		"sub/up":       "../../secret.txt",                    // from a subdirectory
		"sub/uphello":  "../hello.txt",                        // up, but still inside
		"sub/absinner": filepath.Join(dir, "sub", "page.css"), // absolute: resolved beneath the root
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	return dir, big
}

func startStatic(t *testing.T, cfg Config, index string) (*fakeApp, string, []byte) {
	t.Helper()
	dir, big := staticTree(t)
	a, addr := startServerWith(t, cfg, func(s *Server) {
		if err := s.SetStatic([]StaticMount{{Route: "/static", Dir: dir, Index: index, MaxAge: 3600}}, true); err != nil {
			t.Fatal(err)
		}
	}, hello)
	return a, addr, big
}

type staticCase struct {
	name    string
	method  string
	path    string
	hdr     string // extra header lines ("{etag}", "{lastmod}": hello.txt's)
	status  int
	body    string            // "" with status 200/206: not checked unless checkBody
	want    map[string]string // headers (lower-case names; "" : absent)
	noBody  bool
	checkBd bool
}

var staticCases = []staticCase{
	{name: "file", method: "GET", path: "/static/hello.txt", status: 200, body: "hello world", checkBd: true,
		want: map[string]string{"Content-Type": "text/plain; charset=utf-8", "Cache-Control": "public, max-age=3600",
			"Accept-Ranges": "bytes", "Content-Length": "11", "Vary": ""}},
	{name: "head", method: "HEAD", path: "/static/hello.txt", status: 200, noBody: true,
		want: map[string]string{"Content-Length": "11"}},
	{name: "empty file", method: "GET", path: "/static/empty.txt", status: 200, body: "", checkBd: true,
		want: map[string]string{"Content-Length": "0"}},
	{name: "type css", method: "GET", path: "/static/sub/page.css", status: 200, want: map[string]string{"Content-Type": "text/css; charset=utf-8"}},
	{name: "type unknown", method: "GET", path: "/static/noext", status: 200, want: map[string]string{"Content-Type": "application/octet-stream"}},
	{name: "query ignored", method: "GET", path: "/static/hello.txt?v=3", status: 200, body: "hello world", checkBd: true},
	{name: "percent-encoded name", method: "GET", path: "/static/hell%6f.txt", status: 200, body: "hello world", checkBd: true},
	{name: "missing", method: "GET", path: "/static/nope.txt", status: 404},
	{name: "route alone without index", method: "GET", path: "/static", status: 404},
	{name: "directory without index", method: "GET", path: "/static/dir/", status: 404},

	// conditional requests
	{name: "if-none-match", method: "GET", path: "/static/hello.txt", hdr: "If-None-Match: {etag}\r\n", status: 304, noBody: true,
		want: map[string]string{"Cache-Control": "public, max-age=3600", "Content-Length": ""}},
	{name: "if-none-match weak and list", method: "GET", path: "/static/hello.txt", hdr: "If-None-Match: \"x\", W/{etag}\r\n", status: 304, noBody: true},
	{name: "if-none-match star", method: "HEAD", path: "/static/hello.txt", hdr: "If-None-Match: *\r\n", status: 304, noBody: true},
	{name: "if-none-match other", method: "GET", path: "/static/hello.txt", hdr: "If-None-Match: \"other\"\r\n", status: 200, body: "hello world", checkBd: true},
	{name: "if-modified-since same", method: "GET", path: "/static/hello.txt", hdr: "If-Modified-Since: {lastmod}\r\n", status: 304, noBody: true},
	{name: "if-modified-since old", method: "GET", path: "/static/hello.txt", hdr: "If-Modified-Since: Sat, 01 Jan 2000 00:00:00 GMT\r\n", status: 200},
	{name: "if-none-match wins over if-modified-since", method: "GET", path: "/static/hello.txt",
		hdr: "If-None-Match: \"other\"\r\nIf-Modified-Since: {lastmod}\r\n", status: 200},

	// ranges
	{name: "range", method: "GET", path: "/static/hello.txt", hdr: "Range: bytes=0-4\r\n", status: 206, body: "hello", checkBd: true,
		want: map[string]string{"Content-Range": "bytes 0-4/11", "Content-Length": "5"}},
	{name: "range open", method: "GET", path: "/static/hello.txt", hdr: "Range: bytes=6-\r\n", status: 206, body: "world", checkBd: true},
	{name: "range suffix", method: "GET", path: "/static/hello.txt", hdr: "Range: bytes=-5\r\n", status: 206, body: "world", checkBd: true},
	{name: "range past end clamped", method: "GET", path: "/static/hello.txt", hdr: "Range: bytes=6-100\r\n", status: 206, body: "world", checkBd: true,
		want: map[string]string{"Content-Range": "bytes 6-10/11"}},
	{name: "range unsatisfiable", method: "GET", path: "/static/hello.txt", hdr: "Range: bytes=20-30\r\n", status: 416,
		want: map[string]string{"Content-Range": "bytes */11", "Content-Type": "text/plain; charset=utf-8", "Content-Length": "0"}},
	{name: "range on empty", method: "GET", path: "/static/empty.txt", hdr: "Range: bytes=0-\r\n", status: 416},
	{name: "multiple ranges: whole", method: "GET", path: "/static/hello.txt", hdr: "Range: bytes=0-1,3-4\r\n", status: 200, body: "hello world", checkBd: true},
	{name: "malformed range: whole", method: "GET", path: "/static/hello.txt", hdr: "Range: bytes=5-2\r\n", status: 200, body: "hello world", checkBd: true},
	{name: "other unit: whole", method: "GET", path: "/static/hello.txt", hdr: "Range: lines=1-2\r\n", status: 200},
	{name: "if-range match", method: "GET", path: "/static/hello.txt", hdr: "Range: bytes=0-4\r\nIf-Range: {etag}\r\n", status: 206, body: "hello", checkBd: true},
	{name: "if-range date", method: "GET", path: "/static/hello.txt", hdr: "Range: bytes=0-4\r\nIf-Range: {lastmod}\r\n", status: 206},
	{name: "if-range stale", method: "GET", path: "/static/hello.txt", hdr: "Range: bytes=0-4\r\nIf-Range: \"old\"\r\n", status: 200, body: "hello world", checkBd: true},
	{name: "head ignores range", method: "HEAD", path: "/static/hello.txt", hdr: "Range: bytes=0-4\r\n", status: 200, noBody: true},

	// precompressed siblings
	{name: "br", method: "GET", path: "/static/app.js", hdr: "Accept-Encoding: gzip, br\r\n", status: 200, body: "BROTLI-BYTES", checkBd: true,
		want: map[string]string{"Content-Encoding": "br", "Vary": "Accept-Encoding", "Content-Type": "text/javascript; charset=utf-8"}},
	{name: "gzip", method: "GET", path: "/static/app.js", hdr: "Accept-Encoding: gzip\r\n", status: 200, body: "GZIP-BYTES", checkBd: true,
		want: map[string]string{"Content-Encoding": "gzip", "Vary": "Accept-Encoding"}},
	{name: "br refused by q=0", method: "GET", path: "/static/app.js", hdr: "Accept-Encoding: br;q=0, gzip;q=0.5\r\n", status: 200, body: "GZIP-BYTES", checkBd: true},
	{name: "identity", method: "GET", path: "/static/app.js", hdr: "Accept-Encoding: identity\r\n", status: 200, body: "console.log('plain')", checkBd: true,
		want: map[string]string{"Content-Encoding": "", "Vary": "Accept-Encoding"}},
	{name: "no accept-encoding", method: "GET", path: "/static/app.js", status: 200, body: "console.log('plain')", checkBd: true},
	{name: "star", method: "GET", path: "/static/only.css", hdr: "Accept-Encoding: *\r\n", status: 200, body: "GZ-CSS", checkBd: true,
		want: map[string]string{"Content-Type": "text/css; charset=utf-8"}},

	// methods
	{name: "post", method: "POST", path: "/static/hello.txt", status: 405, want: map[string]string{"Allow": "GET, HEAD"}},
	{name: "delete", method: "DELETE", path: "/static/nope", status: 405, want: map[string]string{"Allow": "GET, HEAD"}},

	// not static: the application answers
	{name: "app", method: "GET", path: "/other", status: 200, body: "hello /other", checkBd: true},
	{name: "route boundary", method: "GET", path: "/staticx/hello.txt", status: 200, body: "hello /staticx/hello.txt", checkBd: true},

	// symbolic links
	{name: "symlink inside", method: "GET", path: "/static/inside", status: 200, body: "hello world", checkBd: true},
	{name: "symlink up but inside", method: "GET", path: "/static/sub/uphello", status: 200, body: "hello world", checkBd: true},
}

// traversal: every one must be refused, and the secret never served.
var staticTraversal = []struct {
	path   string
	status int
}{
	{"/static/../secret.txt", 400},
	{"/static/sub/../../secret.txt", 400},
	{"/static/%2e%2e/secret.txt", 400},
	{"/static/%2E%2E/secret.txt", 400},
	{"/static/.%2e/secret.txt", 400},
	{"/static/..%2fsecret.txt", 400},
	{"/static/%2e%2e%2fsecret.txt", 400},
	{"/static/sub%2f..%2f..%2fsecret.txt", 400},
	{"/static/..%5csecret.txt", 400},
	{"/static/sub%5c..%5c..%5csecret.txt", 400},
	{"/static/%5c..%5csecret.txt", 400},
	{"/static/hello.txt%00.js", 400},
	{"/static/%00", 400},
	{"/static/./hello.txt", 400},
	{"/static/escape", 404},
	{"/static/escdir/secret.txt", 404},
	{"/static/escdir/public/hello.txt", 404},
	{"/static/abs", 404},
	{"/static/sub/up", 404},
	{"/static/sub/absinner", 404}, // an absolute link, even to a file inside, is not followed out of the root
}

// staticDo sends one raw HTTP/1.1 request on a new connection and reads its response.
func staticDo(t *testing.T, addr, method, path, hdr string) (*http.Response, string) {
	t.Helper()
	c, br := dial(t, addr)
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\n%s\r\n", method, path, hdr)
	return readResp(t, br, method)
}

func runStaticCases(t *testing.T, addr string, do func(method, path, hdr string) (*http.Response, string)) {
	t.Helper()
	ref, _ := do("GET", "/static/hello.txt", "")
	etag, lastmod := ref.Header.Get("Etag"), ref.Header.Get("Last-Modified")
	if !strings.HasPrefix(etag, `"`) || lastmod == "" {
		t.Fatalf("etag %q last-modified %q", etag, lastmod)
	}
	for _, tc := range staticCases {
		hdr := strings.NewReplacer("{etag}", etag, "{lastmod}", lastmod).Replace(tc.hdr)
		resp, body := do(tc.method, tc.path, hdr)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d (%q)", tc.name, resp.StatusCode, tc.status, body)
			continue
		}
		if tc.checkBd && body != tc.body {
			t.Errorf("%s: body %q, want %q", tc.name, body, tc.body)
		}
		for k, vs := range resp.Header {
			if len(vs) > 1 {
				t.Errorf("%s: %d %s headers", tc.name, len(vs), k)
			}
		}
		if tc.noBody && body != "" {
			t.Errorf("%s: a body %q", tc.name, body)
		}
		for k, v := range tc.want {
			if got := resp.Header.Get(k); got != v && !(k == "Content-Length" && v != "" && resp.ContentLength == int64(len(v)) && false) {
				if k == "Content-Length" && v != "" && fmt.Sprint(resp.ContentLength) == v {
					continue
				}
				t.Errorf("%s: %s %q, want %q", tc.name, k, got, v)
			}
		}
		if tc.status == 200 && strings.HasPrefix(tc.path, "/static/") && resp.Header.Get("Etag") == "" {
			t.Errorf("%s: no etag", tc.name)
		}
	}
	for _, tc := range staticTraversal {
		resp, body := do("GET", tc.path, "")
		if resp.StatusCode != tc.status || strings.Contains(body, "TOPSECRET") {
			t.Errorf("traversal %s: %d %q, want %d", tc.path, resp.StatusCode, body, tc.status)
		}
	}
}

func TestStatic(t *testing.T) {
	a, addr, big := startStatic(t, Config{}, "")
	runStaticCases(t, addr, func(method, path, hdr string) (*http.Response, string) {
		return staticDo(t, addr, method, path, hdr)
	})
	// a large file (sendfile(2) on plain TCP), whole and a range of it
	resp, body := staticDo(t, addr, "GET", "/static/big.bin", "")
	if resp.StatusCode != 200 || body != string(big) {
		t.Fatalf("big: %d, %d bytes", resp.StatusCode, len(body))
	}
	resp, body = staticDo(t, addr, "GET", "/static/big.bin", "Range: bytes=1000-700999\r\n")
	if resp.StatusCode != 206 || body != string(big[1000:701000]) {
		t.Fatalf("big range: %d, %d bytes", resp.StatusCode, len(body))
	}
	// the application never saw a static request: only /other and /staticx/... reached it
	if n := a.seenCount(); n != 2 {
		t.Fatalf("the application saw %d requests, want 2", n)
	}
	log, dropped := a.s.TakeStaticLog()
	if dropped != 0 || len(log) < len(staticCases) {
		t.Fatalf("static log: %d records, %d dropped", len(log), dropped)
	}
	e := log[0]
	if e.Method != "GET" || e.Path != "/static/hello.txt" || e.Status != 200 || e.Size != 11 || e.Proto != "1.1" ||
		!strings.HasPrefix(e.Client, "127.0.0.1:") {
		t.Fatalf("log record %+v", e)
	}
}

func TestStaticIndex(t *testing.T) {
	_, addr, _ := startStatic(t, Config{}, "index.html")
	for _, p := range []string{"/static/sub/", "/static/sub", "/static//sub//"} {
		resp, body := staticDo(t, addr, "GET", p, "")
		if resp.StatusCode != 200 || body != "<h1>index</h1>" || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
			t.Fatalf("%s: %d %q", p, resp.StatusCode, body)
		}
	}
	if resp, _ := staticDo(t, addr, "GET", "/static/", ""); resp.StatusCode != 404 { // the root has no index.html
		t.Fatalf("root: %d", resp.StatusCode)
	}
	if resp, _ := staticDo(t, addr, "GET", "/static/dir/", ""); resp.StatusCode != 404 {
		t.Fatalf("dir without index: %d", resp.StatusCode)
	}
}

// Keep-alive and pipelining: static responses keep their place among the application's.
func TestStaticPipelined(t *testing.T) {
	_, addr, _ := startStatic(t, Config{}, "")
	c, br := dial(t, addr)
	io.WriteString(c, "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /static/hello.txt HTTP/1.1\r\nHost: x\r\n\r\n"+
		"GET /static/nope HTTP/1.1\r\nHost: x\r\n\r\nHEAD /static/hello.txt HTTP/1.1\r\nHost: x\r\n\r\n"+
		"GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
	for _, want := range []struct {
		method string
		status int
		body   string
	}{{"GET", 200, "hello /a"}, {"GET", 200, "hello world"}, {"GET", 404, "Not Found"}, {"HEAD", 200, ""}, {"GET", 200, "hello /b"}} {
		resp, body := readResp(t, br, want.method)
		if resp.StatusCode != want.status || body != want.body || resp.Close {
			t.Fatalf("want %d %q, got %d %q close=%v", want.status, want.body, resp.StatusCode, body, resp.Close)
		}
	}
	// a body sent to a static route (405) is read and dropped
	fmt.Fprintf(c, "POST /static/hello.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nabcdeGET /c HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, _ := readResp(t, br, "POST"); resp.StatusCode != 405 {
		t.Fatalf("post: %d", resp.StatusCode)
	}
	if resp, body := readResp(t, br, "GET"); resp.StatusCode != 200 || body != "hello /c" {
		t.Fatalf("after post: %d %q", resp.StatusCode, body)
	}
}

// The loop driver (plain connections on the loop thread) and the WSGI pool's.
func TestStaticLoopAndPoolDrivers(t *testing.T) {
	loopDriver = true
	t.Run("loop", func(t *testing.T) { TestStatic(t); TestStaticPipelined(t) })
	poolDriver = true
	t.Run("pool", func(t *testing.T) { TestStatic(t); TestStaticPipelined(t) })
	loopDriver, poolDriver = false, false
}

// HTTP/2 (h2c and over TLS) and HTTP/1.1 over TLS: the same answers.
func TestStaticH2AndTLS(t *testing.T) {
	check := func(t *testing.T, cl *http.Client, base string, big []byte, proto int) {
		do := func(method, path, hdr string) (*http.Response, string) {
			req, err := http.NewRequest(method, base+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.URL.Opaque = path // sent as is (no cleaning of .. or %2f)
			if i := strings.IndexByte(path, '?'); i >= 0 {
				req.URL.Opaque = path[:i]
				req.URL.RawQuery = path[i+1:]
			}
			for _, line := range strings.Split(strings.TrimSpace(hdr), "\r\n") {
				if k, v, ok := strings.Cut(line, ":"); ok {
					req.Header.Set(k, strings.TrimSpace(v))
				}
			}
			if req.Header.Get("Accept-Encoding") == "" {
				req.Header.Set("Accept-Encoding", "identity") // (Go's transport would ask for gzip)
			}
			resp, err := cl.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.ProtoMajor != proto {
				t.Fatalf("%s: %s", path, resp.Proto)
			}
			return resp, string(b)
		}
		runStaticCases(t, base, do)
		resp, body := do("GET", "/static/big.bin", "")
		if resp.StatusCode != 200 || body != string(big) {
			t.Fatalf("big: %d, %d bytes", resp.StatusCode, len(body))
		}
		resp, body = do("GET", "/static/big.bin", "Range: bytes=-300000\r\n")
		if resp.StatusCode != 206 || body != string(big[len(big)-300000:]) {
			t.Fatalf("big range: %d, %d bytes", resp.StatusCode, len(body))
		}
	}
	t.Run("h2c", func(t *testing.T) {
		_, addr, big := startStatic(t, Config{}, "")
		check(t, h2cClient(), "http://"+addr, big, 2)
	})
	p := newPKI(t)
	dir, big := staticTree(t)
	a, addr := startTLS(t, p, 0, hello)
	if err := a.s.SetStatic([]StaticMount{{Route: "/static", Dir: dir, MaxAge: 3600}}, false); err != nil {
		t.Fatal(err)
	}
	t.Run("h2 over TLS", func(t *testing.T) {
		cl := &http.Client{Transport: &http2.Transport{TLSClientConfig: p.client()}, Timeout: 20 * time.Second}
		check(t, cl, "https://"+addr, big, 2)
	})
	t.Run("HTTP/1.1 over TLS", func(t *testing.T) {
		cl := &http.Client{Transport: &http.Transport{TLSClientConfig: p.client("http/1.1"),
			TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}, Timeout: 20 * time.Second}
		check(t, cl, "https://"+addr, big, 1)
	})
}

func TestStaticNames(t *testing.T) {
	for _, tc := range []struct{ raw, rest, name string }{
		{"/s/a/b.txt", "/a/b.txt", "a/b.txt"},
		{"/s", "", "."},
		{"/s/", "/", "."},
		{"/s//a//", "//a//", "a"},
		{"/s/..", "/..", ""},
		{"/s/a%2fb", "/a/b", ""},
		{"/s/a%5Cb", "/a\\b", ""},
		{"/s/a\x00", "/a\x00", ""},
		{"/s/.x", "/.x", ".x"},
		{"/s/x..y", "/x..y", "x..y"},
	} {
		name, err := staticName([]byte(tc.raw), []byte(tc.rest))
		if (tc.name == "") != (err != nil) || name != tc.name && tc.name != "" {
			t.Errorf("%q: %q %v, want %q", tc.raw, name, err, tc.name)
		}
	}
}

func TestStaticParseRange(t *testing.T) {
	for _, tc := range []struct {
		v        string
		size     int64
		start, n int64
		ok       bool
	}{
		{"bytes=0-0", 10, 0, 1, true},
		{"bytes=0-", 10, 0, 10, true},
		{"bytes=9-", 10, 9, 1, true},
		{"bytes=10-", 10, 0, -1, true},
		{"bytes=-1", 10, 9, 1, true},
		{"bytes=-20", 10, 0, 10, true},
		{"bytes=-0", 10, 0, -1, true},
		{"BYTES= 2-3", 10, 2, 2, true},
		{"bytes=3-2", 10, 0, 0, false},
		{"bytes=a-b", 10, 0, 0, false},
		{"bytes=1-2,4-5", 10, 0, 0, false},
		{"bytes=-", 10, 0, 0, false},
		{"items=1-2", 10, 0, 0, false},
	} {
		start, n, ok := parseRange([]byte(tc.v), tc.size)
		if ok != tc.ok || ok && (start != tc.start || n != tc.n) {
			t.Errorf("%q: %d %d %v", tc.v, start, n, ok)
		}
	}
}

func TestStaticSetErrors(t *testing.T) {
	s := New(Config{})
	if err := s.SetStatic([]StaticMount{{Route: "/x", Dir: "/nonexistent-goloop"}}, false); err == nil {
		t.Fatal("a missing directory was accepted")
	}
	if err := s.SetStatic([]StaticMount{{Route: "x", Dir: t.TempDir()}}, false); err == nil {
		t.Fatal("a route without '/' was accepted")
	}
	if err := s.SetStatic([]StaticMount{{Route: "/x", Dir: t.TempDir(), Index: "../i.html"}}, false); err == nil {
		t.Fatal("an index with a '/' was accepted")
	}
}

// Records beyond the bound are dropped and counted, not kept.
func TestStaticLogBounded(t *testing.T) {
	st := &staticServer{logOn: true}
	r := newRequest(&Conn{s: New(Config{})})
	r.finishHead([]byte("GET"))
	r.x = h1Exchange{r}
	for i := 0; i < staticLogMax+5; i++ {
		st.record(r, 200, 1, monoNow())
	}
	if len(st.log) != staticLogMax || st.dropped != 5 {
		t.Fatalf("%d kept, %d dropped", len(st.log), st.dropped)
	}
	_ = bufio.NewReader
	_ = bytes.Equal
}

// Static responses are counted by the metrics as the application's are.
func TestStaticMetrics(t *testing.T) {
	dir, _ := staticTree(t)
	a, addr := startServerWith(t, Config{}, func(s *Server) {
		s.EnableMetrics("")
		if err := s.SetStatic([]StaticMount{{Route: "/static", Dir: dir}}, false); err != nil {
			t.Fatal(err)
		}
	}, hello)
	staticDo(t, addr, "GET", "/static/hello.txt", "")
	staticDo(t, addr, "GET", "/static/nope", "")
	staticDo(t, addr, "GET", "/app", "")
	m := a.s.Metrics()
	if m.Requests != 3 || m.Count != 3 || m.Status[2] != 2 || m.Status[4] != 1 {
		t.Fatalf("metrics %+v", m)
	}
}

// Without openat2(2) (kernels before 5.6): os.Root opens the files, with the same answers.
func TestStaticWithoutOpenat2(t *testing.T) {
	noOpenat2.Store(true)
	defer noOpenat2.Store(false)
	TestStatic(t)
	TestStaticIndex(t)
}
