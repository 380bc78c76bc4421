package tests_go

import (
	"bufio"
	"bytes"
	"strings"
	"testing"

	"github.com/goloop/goloop/goloop/httpparser"
	"github.com/valyala/fasthttp"
)

// The request wrk sends.
var benchWrkRequest = []byte("GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n")

// A browser-like request with 10 headers.
var benchBrowserRequest = []byte("GET /static/js/app.3f9a1c.js?v=1.4.2 HTTP/1.1\r\n" +
	"Host: www.example.com\r\n" +
	"Connection: keep-alive\r\n" +
	"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36\r\n" +
	"Accept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8\r\n" +
	"Accept-Encoding: gzip, deflate, br, zstd\r\n" +
	"Accept-Language: en-US,en;q=0.9,fr;q=0.8\r\n" +
	"Referer: https://www.example.com/products/list?page=2&sort=price\r\n" +
	"Cookie: session=8f2d9c1e4b7a6f3d; theme=dark; _ga=GA1.2.123456789.1700000000\r\n" +
	"Cache-Control: max-age=0\r\n" +
	"Upgrade-Insecure-Requests: 1\r\n" +
	"\r\n")

// lenHandler does a little work with what it gets, like a binding would.
type lenHandler struct{ n int }

func (h *lenHandler) OnMessageBegin() error      { return nil }
func (h *lenHandler) OnURL(u []byte) error       { h.n += len(u); return nil }
func (h *lenHandler) OnStatus(s []byte) error    { h.n += len(s); return nil }
func (h *lenHandler) OnHeader(n, v []byte) error { h.n += len(n) + len(v); return nil }
func (h *lenHandler) OnHeadersComplete() error   { return nil }
func (h *lenHandler) OnBody(b []byte) error      { h.n += len(b); return nil }
func (h *lenHandler) OnMessageComplete() error   { h.n++; return nil }
func (h *lenHandler) OnChunkHeader() error       { return nil }
func (h *lenHandler) OnChunkComplete() error     { return nil }

func benchOurs(b *testing.B, req []byte) {
	h := &lenHandler{}
	p := httpparser.NewRequestParser(h)
	if err := p.Feed(req); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(req)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := p.Feed(req); err != nil {
			b.Fatal(err)
		}
	}
	if h.n == 0 {
		b.Fatal("no work")
	}
}

func benchFasthttp(b *testing.B, req []byte) {
	var h fasthttp.RequestHeader
	r := bytes.NewReader(req)
	br := bufio.NewReaderSize(r, 4096)
	b.SetBytes(int64(len(req)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.Reset(req)
		br.Reset(r)
		if err := h.Read(br); err != nil {
			b.Fatal(err)
		}
	}
	if len(h.Host()) == 0 {
		b.Fatal("no host")
	}
}

func BenchmarkHttpParserWrk(b *testing.B)                { benchOurs(b, benchWrkRequest) }
func BenchmarkFasthttpRequestHeaderWrk(b *testing.B)     { benchFasthttp(b, benchWrkRequest) }
func BenchmarkHttpParserBrowser(b *testing.B)            { benchOurs(b, benchBrowserRequest) }
func BenchmarkFasthttpRequestHeaderBrowser(b *testing.B) { benchFasthttp(b, benchBrowserRequest) }

// 16 pipelined wrk requests in one Feed, as in the pipelined wrk runs.
func BenchmarkHttpParserWrkPipelined16(b *testing.B) {
	benchOurs(b, bytes.Repeat(benchWrkRequest, 16))
}

// The browser request arriving in 7 pieces (partial lines are buffered).
func BenchmarkHttpParserBrowserSplit(b *testing.B) {
	h := &lenHandler{}
	p := httpparser.NewRequestParser(h)
	req := benchBrowserRequest
	step := len(req)/7 + 1
	b.SetBytes(int64(len(req)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := 0; j < len(req); j += step {
			if err := p.Feed(req[j:min(j+step, len(req))]); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// Long lines fed 16 bytes at a time: the checks of an incomplete line resume where the
// previous piece's check stopped, so the cost grows linearly with the line (it grew with
// its square before).
func benchLongLine(b *testing.B, resp bool, in []byte) {
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var p *httpparser.Parser
		if resp {
			p = httpparser.NewResponseParser(nopHandler{})
		} else {
			p = httpparser.NewRequestParser(nopHandler{})
		}
		for j := 0; j < len(in); j += 16 {
			if err := p.Feed(in[j:min(j+16, len(in))]); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkHttpParserLongURLPieces(b *testing.B) {
	benchLongLine(b, false, []byte("GET /"+strings.Repeat("a", 64<<10)+" HTTP/1.1\r\n\r\n"))
}

func BenchmarkHttpParserLongValuePieces(b *testing.B) {
	benchLongLine(b, false, []byte("GET / HTTP/1.1\r\nX: "+strings.Repeat("a", 64<<10)+"\r\n\r\n"))
}

func BenchmarkHttpParserLongReasonPieces(b *testing.B) {
	benchLongLine(b, true, []byte("HTTP/1.1 200 "+strings.Repeat("a", 64<<10)+"\r\n\r\n"))
}
