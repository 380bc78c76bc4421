package httpserver

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2cSettings is an HTTP2-Settings value: INITIAL_WINDOW_SIZE 1 MiB.
func h2cSettings() string {
	var b [6]byte
	binary.BigEndian.PutUint16(b[:], uint16(http2.SettingInitialWindowSize))
	binary.BigEndian.PutUint32(b[2:], 1<<20)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// response reads the frames of stream id up to its end: the final status, the headers
// (name=value;) and the body; 1xx statuses are collected in info.
func (c *rawH2) response(t *testing.T, id uint32) (status string, hdrs string, body []byte, info []string) {
	t.Helper()
	c.until(t, func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				return false
			}
			var sb strings.Builder
			st := f.PseudoValue("status")
			for _, hf := range f.RegularFields() {
				fmt.Fprintf(&sb, "%s=%s;", hf.Name, hf.Value)
			}
			if st != "" && st[0] == '1' {
				info = append(info, st)
				return false
			}
			status, hdrs = st, sb.String()
			return f.StreamEnded()
		case *http2.DataFrame:
			if f.StreamID != id {
				return false
			}
			body = append(body, f.Data()...)
			if len(f.Data()) > 0 {
				c.fr.WriteWindowUpdate(0, uint32(len(f.Data())))
				c.fr.WriteWindowUpdate(id, uint32(len(f.Data())))
			}
			return f.StreamEnded()
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				t.Fatalf("stream %d reset: %v", id, f.ErrCode)
			}
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v", f.ErrCode)
		}
		return false
	})
	return
}

// headersWith sends a request's HEADERS with extra fields.
func (c *rawH2) headersWith(id uint32, end bool, method, path string, extra ...[2]string) {
	c.hb.Reset()
	for _, kv := range append([][2]string{{":method", method}, {":scheme", "http"}, {":path", path}, {":authority", "x"}}, extra...) {
		c.enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hb.Bytes(), EndStream: end, EndHeaders: true})
}

func TestH2cUpgrade(t *testing.T) {
	_, addr := startServer(t, Config{ServerHeader: true}, echoApp)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(nc, "POST /up?x=1 HTTP/1.1\r\nHost: h\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"+
		"HTTP2-Settings: %s\r\nContent-Length: 5\r\n\r\nhel", h2cSettings())
	time.Sleep(20 * time.Millisecond) // the body in two reads
	io.WriteString(nc, "lo")
	br := bufio.NewReader(nc)
	var head []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err, head)
		}
		if line == "\r\n" {
			break
		}
		head = append(head, strings.TrimSpace(strings.ToLower(line)))
	}
	if head[0] != "http/1.1 101 switching protocols" || !strings.Contains(strings.Join(head, "|"), "upgrade: h2c") {
		t.Fatalf("head %q", head)
	}
	// the server speaks HTTP/2 now: its SETTINGS first, then the response on stream 1
	c := &rawH2{nc: nc}
	c.fr = http2.NewFramer(nc, br)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.hb)
	first, err := c.fr.ReadFrame()
	if _, ok := first.(*http2.SettingsFrame); err != nil || !ok {
		t.Fatalf("first frame %v %v", first, err)
	}
	io.WriteString(nc, http2.ClientPreface)
	c.fr.WriteSettings()
	status, hdrs, body, _ := c.response(t, 1)
	if status != "200" || string(body) != "POST /up 5:hello" || !strings.Contains(hdrs, "x-version=2;") ||
		!strings.Contains(hdrs, "server=goloop;") {
		t.Fatalf("stream 1: %s %q %q", status, hdrs, body)
	}
	if !strings.Contains(hdrs, "host=h;") || strings.Contains(hdrs, "upgrade") || strings.Contains(hdrs, "http2-settings") {
		t.Fatalf("the request's headers on stream 1: %q", hdrs)
	}
	// and the connection goes on as HTTP/2
	c.headers(3, true, "GET", "/next")
	if status, _, body, _ := c.response(t, 3); status != "200" || string(body) != "GET /next 0:" {
		t.Fatalf("stream 3: %s %q", status, body)
	}
}

// h2cUpgradeReq is a POST with Upgrade: h2c and body (chunked or with a content-length).
func h2cUpgradeReq(body string, chunked bool) string {
	s := "POST /d HTTP/1.1\r\nHost: h\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: " +
		h2cSettings() + "\r\n"
	if chunked {
		return s + fmt.Sprintf("Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	}
	return s + fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body)
}

// checkHTTP11 reads echoApp's HTTP/1.1 answer to h2cUpgradeReq(body).
func checkHTTP11(t *testing.T, name string, nc net.Conn, body string) {
	t.Helper()
	resp, got := readResp(t, bufio.NewReader(nc), "POST")
	if resp.StatusCode != 200 || resp.ProtoMajor != 1 || got != fmt.Sprintf("POST /d %d:%s", len(body), body[:min(16, len(body))]) {
		t.Fatalf("%s: %d %s %q", name, resp.StatusCode, resp.Proto, got)
	}
}

// TestH2cUpgradeDeclined: with NoH2, a body sent chunked or one larger than a stream
// window, Upgrade: h2c is ignored: the request is answered in HTTP/1.1, its body read.
func TestH2cUpgradeDeclined(t *testing.T) {
	_, addr := startServer(t, Config{}, echoApp)
	c, _ := dial(t, addr)
	io.WriteString(c, h2cUpgradeReq("body", true))
	checkHTTP11(t, "chunked", c, "body")
	c, _ = dial(t, addr)
	big := "body" + strings.Repeat("x", 300<<10)
	io.WriteString(c, h2cUpgradeReq(big, false))
	checkHTTP11(t, "large", c, big)

	_, addr = startServer(t, Config{NoH2: true}, echoApp)
	c, _ = dial(t, addr)
	io.WriteString(c, h2cUpgradeReq("body", false))
	checkHTTP11(t, "NoH2", c, "body")
}

func TestH2Expect100Continue(t *testing.T) {
	_, addr := startServer(t, Config{}, continueApp)
	c := dialH2(t, addr)
	c.headersWith(1, false, "POST", "/e", [2]string{"expect", "100-continue"})
	sawContinue := false
	c.until(t, func(f http2.Frame) bool {
		if h, ok := f.(*http2.MetaHeadersFrame); ok && h.StreamID == 1 {
			if h.PseudoValue("status") != "100" || h.StreamEnded() {
				t.Fatalf("first HEADERS: %v", h.Fields)
			}
			sawContinue = true
			return true
		}
		return false
	})
	c.fr.WriteData(1, true, []byte("abc"))
	if status, _, body, info := c.response(t, 1); !sawContinue || status != "200" || string(body) != "got abc" || info != nil {
		t.Fatalf("%s %q %v", status, body, info)
	}
	// the body sent with the request (in the same write): no 100
	var both bytes.Buffer
	fr := c.fr
	c.fr = http2.NewFramer(&both, nil)
	c.headersWith(3, false, "POST", "/e", [2]string{"expect", "100-continue"})
	c.fr.WriteData(3, true, []byte("xyz"))
	c.fr = fr
	c.nc.Write(both.Bytes())
	if status, _, body, info := c.response(t, 3); status != "200" || string(body) != "got xyz" || info != nil {
		t.Fatalf("%s %q %v", status, body, info)
	}
	// answered without reading: no 100
	c.headersWith(5, false, "POST", "/noread", [2]string{"expect", "100-continue"})
	if status, _, body, info := c.response(t, 5); status != "403" || string(body) != "no" || info != nil {
		t.Fatalf("%s %q %v", status, body, info)
	}
}

// TestH2SendFileBounded: a 50 MiB file goes out over HTTP/2 without being read whole: the
// server allocates a small part of it while the client takes it (windows wide open, so
// the output's bound is what holds the file back).
func TestH2SendFileBounded(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 50<<16) // 50 MiB
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(data)
	data = nil
	_, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		r.Start(200, []byte("content-type: application/octet-stream\r\n"))
		if string(r.Path()) == "/part" {
			r.Send([]byte("head-"), true)
		}
		if _, err := r.SendFile(path); err != nil {
			panic(err)
		}
		a.s.Flush()
	})
	c := dialH2(t, addr)
	c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	c.fr.WriteWindowUpdate(0, 1<<31-1-65535)
	c.headers(1, true, "GET", "/f")
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	h := sha256.New()
	var n int
	var clen string
	c.until(t, func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			for _, hf := range f.Fields {
				if hf.Name == "content-length" {
					clen = hf.Value
				}
			}
		case *http2.DataFrame:
			h.Write(f.Data())
			n += len(f.Data())
			return f.StreamEnded()
		}
		return false
	})
	runtime.ReadMemStats(&m1)
	if [32]byte(h.Sum(nil)) != want || clen != fmt.Sprint(50<<20) {
		t.Fatalf("file: %d bytes, content-length %q", n, clen)
	}
	if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > 16<<20 {
		t.Fatalf("sending a 50 MiB file allocated %d MiB", alloc>>20)
	}
	// after body parts, with the client's default windows (WINDOW_UPDATEs release it)
	c2 := dialH2(t, addr)
	c2.headers(1, true, "GET", "/part")
	if status, hdrs, body, _ := c2.response(t, 1); status != "200" || len(body) != 5+50<<20 ||
		string(body[:5]) != "head-" || sha256.Sum256(body[5:]) != want || strings.Contains(hdrs, "content-length") {
		t.Fatalf("after a part: %s %q %d bytes", status, hdrs, len(body))
	}
}
