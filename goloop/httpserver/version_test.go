package httpserver

import (
	"io"
	"testing"
)

// An HTTP/1 request line with a version other than 1.0 and 1.1 is answered 505 HTTP
// Version Not Supported (RFC 9110 15.6.6) and never reaches the application.
func TestUnsupportedVersion505(t *testing.T) {
	a, addr := startServer(t, Config{}, hello)
	for _, req := range []string{
		"GET / HTTP/2.0\r\nHost: x\r\n\r\n",
		"GET / HTTP/3.0\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.2\r\nHost: x\r\n\r\n",
		"GET / HTTP/0.9\r\nHost: x\r\n\r\n",
		"GET / HTTP/9.9\r\nHost: x\r\n\r\n",
		"POST / HTTP/2.0\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
		"GET /\r\n\r\n", // HTTP/0.9's simple request (no version), taken as one with no headers
	} {
		expectClosedWith(t, addr, req, 505)
	}
	if a.seenCount() != 0 {
		t.Fatalf("the app saw %d requests of unsupported versions", a.seenCount())
	}
	// after a good one on the same connection: its answer first, then the 505
	c, br := dial(t, addr)
	io.WriteString(c, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\nGET /two HTTP/2.0\r\nHost: x\r\n\r\n")
	if _, body := readResp(t, br, "GET"); body != "hello /ok" {
		t.Fatal(body)
	}
	if resp, _ := readResp(t, br, "GET"); resp.StatusCode != 505 {
		t.Fatal(resp.Status)
	}
	// malformed versions stay 400
	expectClosedWith(t, addr, "GET / HTTP/1.x\r\nHost: x\r\n\r\n", 400)
	expectClosedWith(t, addr, "GET / HTTP/12.0\r\nHost: x\r\n\r\n", 400)
	// 1.0 and 1.1 are served
	for _, v := range []string{"1.0", "1.1"} {
		c, br := dial(t, addr)
		io.WriteString(c, "GET /v HTTP/"+v+"\r\nHost: x\r\nConnection: close\r\n\r\n")
		if resp, body := readResp(t, br, "GET"); resp.StatusCode != 200 || body != "hello /v" {
			t.Fatal(v, resp.Status, body)
		}
	}
}
