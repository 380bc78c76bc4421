package tests_go

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/goloop/goloop/goloop/httpparser"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// httpRec records the parser's events as strings; consecutive body chunks
// are merged so that event lists do not depend on how input was split.
type httpRec struct {
	p      *httpparser.Parser
	ev     []string
	msgs   []string // per message, at OnHeadersComplete: parser getters
	failOn string   // event prefix whose callback returns errHTTPStop
}

var errHTTPStop = errors.New("stop requested by handler")

func (r *httpRec) add(s string) error {
	if strings.HasPrefix(s, "body ") && len(r.ev) > 0 && strings.HasPrefix(r.ev[len(r.ev)-1], "body ") {
		r.ev[len(r.ev)-1] += s[5:]
	} else {
		r.ev = append(r.ev, s)
	}
	if r.failOn != "" && strings.HasPrefix(s, r.failOn) {
		return errHTTPStop
	}
	return nil
}

func (r *httpRec) OnMessageBegin() error      { return r.add("begin") }
func (r *httpRec) OnURL(u []byte) error       { return r.add("url " + string(u)) }
func (r *httpRec) OnStatus(s []byte) error    { return r.add("status " + string(s)) }
func (r *httpRec) OnHeader(n, v []byte) error { return r.add("h " + string(n) + "=" + string(v)) }
func (r *httpRec) OnBody(b []byte) error      { return r.add("body " + string(b)) }
func (r *httpRec) OnMessageComplete() error   { return r.add("complete") }
func (r *httpRec) OnChunkHeader() error       { return r.add(fmt.Sprintf("ch %d", r.p.ChunkSize())) }
func (r *httpRec) OnChunkComplete() error     { return r.add("cc") }
func (r *httpRec) OnHeadersComplete() error {
	p := r.p
	r.msgs = append(r.msgs, fmt.Sprintf("%s %d.%d st=%d ka=%t up=%t cl=%d chunked=%t",
		p.Method(), p.Major(), p.Minor(), p.StatusCode(), p.ShouldKeepAlive(), p.ShouldUpgrade(),
		p.ContentLength(), p.IsChunked()))
	return r.add("hc")
}

// httpOpts configures one parse.
type httpOpts struct {
	resp     bool
	lenient  httpparser.Lenient
	skipBody bool
	eof      bool // call FeedEOF after the input
	maxHdr   int
	noLimit  bool // MaxHeaderSize = 0: no limit
	upSkips  bool // UpgradeSkipsBody (what goloop.http sets)
	failOn   string
}

// httpResult is everything observable about one parse.
type httpResult struct {
	Events  []string
	Msgs    []string
	ErrKind httpparser.Kind // KindOK if none
	Upgrade int             // absolute offset of the upgrade, -1 if none
	Err     error
}

func (o httpOpts) newParser() (*httpparser.Parser, *httpRec) {
	r := &httpRec{failOn: o.failOn}
	var p *httpparser.Parser
	if o.resp {
		p = httpparser.NewResponseParser(r)
	} else {
		p = httpparser.NewRequestParser(r)
	}
	r.p = p
	p.SetLeniencies(o.lenient)
	p.SkipBody = o.skipBody
	if o.maxHdr > 0 {
		p.MaxHeaderSize = o.maxHdr
	}
	if o.noLimit {
		p.MaxHeaderSize = 0
	}
	p.UpgradeSkipsBody = o.upSkips
	return p, r
}

// runHTTP feeds the chunks one Feed call each.
func runHTTP(o httpOpts, chunks ...[]byte) httpResult {
	p, r := o.newParser()
	res := httpResult{Upgrade: -1}
	consumed := 0
	var err error
	for _, c := range chunks {
		err = p.Feed(c)
		if err != nil {
			var ue *httpparser.UpgradeError
			if errors.As(err, &ue) {
				res.Upgrade = consumed + ue.Offset
				err = nil
			}
			break
		}
		consumed += len(c)
	}
	if err == nil && res.Upgrade < 0 && o.eof {
		err = p.FeedEOF()
	}
	if err != nil {
		res.Err = err
		var pe *httpparser.Error
		if errors.As(err, &pe) {
			res.ErrKind = pe.Kind
		} else {
			res.ErrKind = 255
		}
	}
	res.Events, res.Msgs = r.ev, r.msgs
	return res
}

// splitsOf returns the input whole, byte by byte, and cut at every point.
func splitsOf(in []byte, every bool) [][][]byte {
	out := [][][]byte{{in}}
	bytesplit := make([][]byte, len(in))
	for i := range in {
		bytesplit[i] = in[i : i+1]
	}
	out = append(out, bytesplit)
	if every {
		for i := 1; i < len(in); i++ {
			out = append(out, [][]byte{in[:i], in[i:]})
		}
	}
	return out
}

// equalResults compares two results, ignoring error offsets/messages.
func equalResults(a, b httpResult) bool {
	if a.ErrKind != b.ErrKind || a.Upgrade != b.Upgrade || len(a.Events) != len(b.Events) || len(a.Msgs) != len(b.Msgs) {
		return false
	}
	for i := range a.Events {
		if a.Events[i] != b.Events[i] {
			return false
		}
	}
	for i := range a.Msgs {
		if a.Msgs[i] != b.Msgs[i] {
			return false
		}
	}
	return true
}

// httpCase is one table-driven parser case.
type httpCase struct {
	name    string
	in      string
	o       httpOpts
	want    []string // expected events; nil: not checked
	msgs    []string // expected per-message getters; nil: not checked
	err     httpparser.Kind
	upgrade int // expected absolute upgrade offset; 0: no upgrade expected
}

func runHTTPCases(t *testing.T, cases []httpCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := []byte(c.in)
			whole := runHTTP(c.o, in)
			if c.want != nil {
				assert.Equal(t, c.want, whole.Events, "events")
			}
			if c.msgs != nil {
				assert.Equal(t, c.msgs, whole.Msgs, "msgs")
			}
			assert.Equal(t, c.err, whole.ErrKind, "error kind (err=%v)", whole.Err)
			if c.upgrade > 0 {
				assert.Equal(t, c.upgrade, whole.Upgrade, "upgrade offset")
			} else {
				assert.Equal(t, -1, whole.Upgrade, "unexpected upgrade")
			}
			for _, sp := range splitsOf(in, len(in) <= 600)[1:] {
				got := runHTTP(c.o, sp...)
				if !equalResults(whole, got) {
					require.Equal(t, whole, got, "split into %d parts (first part %d bytes) differs", len(sp), len(sp[0]))
				}
			}
		})
	}
}

const (
	lenAll = httpparser.LenientAll
)

func TestHttpRequests(t *testing.T) {
	cl := func(v string) string { return "POST / HTTP/1.1\r\nContent-Length: " + v + "\r\n\r\n" }
	te := func(v string) string { return "POST / HTTP/1.1\r\nTransfer-Encoding: " + v + "\r\n\r\n" }
	chunked := func(body string) string { return "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + body }
	runHTTPCases(t, []httpCase{
		{name: "simple GET", in: "GET / HTTP/1.1\r\nHost: a\r\n\r\n",
			want: []string{"begin", "url /", "h Host=a", "hc", "complete"},
			msgs: []string{"GET 1.1 st=0 ka=true up=false cl=-1 chunked=false"}},
		{name: "leading empty lines skipped", in: "\r\n\r\n\nGET /x HTTP/1.1\r\n\r\n",
			want: []string{"begin", "url /x", "hc", "complete"}},
		// httptools (llhttp) trims the whitespace before a value and keeps the one after it
		{name: "leading OWS trimmed, trailing kept, empty value", in: "GET / HTTP/1.1\r\nX:  a \t b \t\r\nY:\r\nZ: \r\n\r\n",
			want: []string{"begin", "url /", "h X=a \t b \t", "h Y=", "h Z=", "hc", "complete"}},
		{name: "known method and rich target", in: "M-SEARCH /a/b?c=d&e=%20#frag HTTP/1.0\r\n\r\n",
			want: []string{"begin", "url /a/b?c=d&e=%20#frag", "hc", "complete"},
			msgs: []string{"M-SEARCH 1.0 st=0 ka=false up=false cl=-1 chunked=false"}},
		{name: "obs-text in value", in: "GET /a HTTP/1.1\r\nX: caf\xc3\xa9\r\n\r\n",
			want: []string{"begin", "url /a", "h X=caf\xc3\xa9", "hc", "complete"}},
		{name: "absolute and asterisk targets", in: "OPTIONS * HTTP/1.1\r\n\r\nGET http://u@h:1/p?q HTTP/1.1\r\n\r\n",
			want: []string{"begin", "url *", "hc", "complete", "begin", "url http://u@h:1/p?q", "hc", "complete"}},
		{name: "content-length body", in: cl("5") + "hello",
			want: []string{"begin", "url /", "h Content-Length=5", "hc", "body hello", "complete"},
			msgs: []string{"POST 1.1 st=0 ka=true up=false cl=5 chunked=false"}},
		{name: "content-length zero", in: cl("0"), want: []string{"begin", "url /", "h Content-Length=0", "hc", "complete"}},
		{name: "content-length leading zeros", in: cl("003") + "abc", want: []string{"begin", "url /", "h Content-Length=003", "hc", "body abc", "complete"}},
		{name: "pipelined", in: "GET /1 HTTP/1.1\r\n\r\n" + cl("2") + "hiGET /3 HTTP/1.1\r\nA: b\r\n\r\n",
			want: []string{"begin", "url /1", "hc", "complete", "begin", "url /", "h Content-Length=2", "hc", "body hi", "complete",
				"begin", "url /3", "h A=b", "hc", "complete"}},
		{name: "1.0 closes by default", in: "GET / HTTP/1.0\r\n\r\n\r\n",
			msgs: []string{"GET 1.0 st=0 ka=false up=false cl=-1 chunked=false"}},
		{name: "1.0 data after close", in: "GET / HTTP/1.0\r\n\r\nGET / HTTP/1.0\r\n\r\n", err: httpparser.KindClosedConnection},
		{name: "1.0 keep-alive", in: "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /2 HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
			msgs: []string{"GET 1.0 st=0 ka=true up=false cl=-1 chunked=false", "GET 1.0 st=0 ka=true up=false cl=-1 chunked=false"}},
		{name: "1.1 connection close", in: "GET / HTTP/1.1\r\nConnection: foo, CLOSE\r\n\r\n",
			msgs: []string{"GET 1.1 st=0 ka=false up=false cl=-1 chunked=false"}},
		{name: "1.1 close then data", in: "GET / HTTP/1.1\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\n\r\n", err: httpparser.KindClosedConnection},
		{name: "lenient data after close discards", in: "GET / HTTP/1.1\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\n\r\n",
			o: httpOpts{lenient: httpparser.LenientDataAfterClose}, want: []string{"begin", "url /", "h Connection=close", "hc", "complete"}},
		{name: "lenient keep-alive parses on", in: "GET / HTTP/1.1\r\nConnection: close\r\n\r\nGET /2 HTTP/1.1\r\n\r\n",
			o: httpOpts{lenient: httpparser.LenientKeepAlive}, want: []string{"begin", "url /", "h Connection=close", "hc", "complete", "begin", "url /2", "hc", "complete"}},
		{name: "chunked with extensions and trailers", in: chunked("5;a=b;c=\"x\\\"y\"\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nT: v\r\nU: w\r\n\r\n"),
			want: []string{"begin", "url /c", "h Transfer-Encoding=chunked", "hc", "ch 5", "body hello", "cc", "ch 26", "body abcdefghijklmnopqrstuvwxyz", "cc",
				"ch 0", "h T=v", "h U=w", "cc", "complete"},
			msgs: []string{"POST 1.1 st=0 ka=true up=false cl=-1 chunked=true"}},
		{name: "chunked then pipelined", in: chunked("0\r\n\r\n") + "GET / HTTP/1.1\r\n\r\n",
			want: []string{"begin", "url /c", "h Transfer-Encoding=chunked", "hc", "ch 0", "cc", "complete", "begin", "url /", "hc", "complete"}},
		{name: "gzip, chunked", in: te("gzip, chunked") + "1\r\nx\r\n0\r\n\r\n",
			want: []string{"begin", "url /", "h Transfer-Encoding=gzip, chunked", "hc", "ch 1", "body x", "cc", "ch 0", "cc", "complete"}},
		{name: "TE over two headers", in: "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: Chunked\r\n\r\n0\r\n\r\n",
			msgs: []string{"POST 1.1 st=0 ka=true up=false cl=-1 chunked=true"}},
		{name: "websocket upgrade", in: "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n\r\n\x81\x05hello",
			want:    []string{"begin", "url /ws", "h Upgrade=websocket", "h Connection=keep-alive, Upgrade", "hc", "complete"},
			msgs:    []string{"GET 1.1 st=0 ka=true up=true cl=-1 chunked=false"},
			upgrade: 73},
		{name: "upgrade with body", in: "POST / HTTP/1.1\r\nUpgrade: x\r\nConnection: upgrade\r\nContent-Length: 2\r\n\r\nhiRAW",
			want: []string{"begin", "url /", "h Upgrade=x", "h Connection=upgrade", "h Content-Length=2", "hc", "body hi", "complete"}, upgrade: 73},
		{name: "CONNECT", in: "CONNECT h:443 HTTP/1.1\r\nContent-Length: 5\r\n\r\nTLS..",
			want:    []string{"begin", "url h:443", "h Content-Length=5", "hc", "complete"},
			msgs:    []string{"CONNECT 1.1 st=0 ka=true up=true cl=5 chunked=false"},
			upgrade: 45},
		{name: "upgrade header without connection upgrade", in: "GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\nGET / HTTP/1.1\r\n\r\n",
			msgs: []string{"GET 1.1 st=0 ka=true up=false cl=-1 chunked=false", "GET 1.1 st=0 ka=true up=false cl=-1 chunked=false"}},

		// request line errors
		{name: "bad method char", in: "G@T / HTTP/1.1\r\n\r\n", err: httpparser.KindInvalidMethod},
		{name: "NUL method", in: "\x00GET / HTTP/1.1\r\n\r\n", err: httpparser.KindInvalidMethod},
		{name: "garbage without newline fails early", in: "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", err: httpparser.KindInvalidMethod},
		{name: "leading space", in: " GET / HTTP/1.1\r\n\r\n", err: httpparser.KindInvalidMethod},
		{name: "method only", in: "GET\r\n\r\n", err: httpparser.KindInvalidMethod},
		{name: "double space before the target", in: "GET  / HTTP/1.1\r\n\r\n", // llhttp skips it
			want: []string{"begin", "url /", "hc", "complete"}, msgs: []string{"GET 1.1 st=0 ka=true up=false cl=-1 chunked=false"}},
		{name: "CTL in target", in: "GET /a\x01b HTTP/1.1\r\n\r\n", err: httpparser.KindInvalidURL},
		{name: "DEL in target", in: "GET /a\x7f HTTP/1.1\r\n\r\n", err: httpparser.KindInvalidURL},
		{name: "tab in target", in: "GET /a\tb HTTP/1.1\r\n\r\n", err: httpparser.KindInvalidURL},
		{name: "missing version is HTTP/0.9", in: "GET /\r\n\r\n", want: []string{"begin", "url /", "hc", "complete"},
			msgs: []string{"GET 0.9 st=0 ka=false up=false cl=-1 chunked=false"}},
		{name: "HTTP/2.0", in: "GET / HTTP/2.0\r\n\r\n", want: []string{"begin", "url /", "hc", "complete"},
			msgs: []string{"GET 2.0 st=0 ka=false up=false cl=-1 chunked=false"}},
		{name: "HTTP/1.2", in: "GET / HTTP/1.2\r\n\r\n", err: httpparser.KindInvalidVersion},
		{name: "lenient version", in: "GET / HTTP/1.2\r\n\r\n", o: httpOpts{lenient: httpparser.LenientVersion},
			msgs: []string{"GET 1.2 st=0 ka=true up=false cl=-1 chunked=false"}}, // llhttp: minor > 0 keeps alive
		{name: "lowercase http", in: "GET / http/1.1\r\n\r\n", err: httpparser.KindInvalidVersion},
		{name: "version junk", in: "GET / HTTP/1.1x\r\n\r\n", err: httpparser.KindInvalidVersion},
		{name: "short version", in: "GET / HTTP/1\r\n\r\n", err: httpparser.KindInvalidVersion},
		{name: "trailing space after version", in: "GET / HTTP/1.1 \r\n\r\n", err: httpparser.KindInvalidVersion},

		// line endings
		{name: "bare LF", in: "GET / HTTP/1.1\nHost: a\n\n", err: httpparser.KindInvalidVersion}, // llhttp: "Expected CRLF after version"
		{name: "bare LF in headers", in: "GET / HTTP/1.1\r\nHost: a\n\r\n", err: httpparser.KindCRExpected},
		{name: "lenient bare LF", in: "GET / HTTP/1.1\nHost: a\n\n", o: httpOpts{lenient: httpparser.LenientOptionalCRBeforeLF},
			want: []string{"begin", "url /", "h Host=a", "hc", "complete"}},
		{name: "bare CR in value", in: "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", err: httpparser.KindLFExpected},
		{name: "bare CR ends request line", in: "GET / HTTP/1.1\rHost: a\r\n\r\n", err: httpparser.KindInvalidVersion},
		{name: "lenient CR line endings", in: "GET / HTTP/1.1\rHost: a\r\nX: b\r\r", o: httpOpts{lenient: httpparser.LenientOptionalLFAfterCR},
			want: []string{"begin", "url /", "h Host=a", "h X=b", "hc", "complete"}},

		// header errors
		{name: "space in name", in: "GET / HTTP/1.1\r\nX Y: a\r\n\r\n", err: httpparser.KindInvalidHeader},
		{name: "space before colon", in: "GET / HTTP/1.1\r\nHost : a\r\n\r\n", err: httpparser.KindInvalidHeader},
		{name: "lenient space before colon", in: "GET / HTTP/1.1\r\nHost : a\r\n\r\n", o: httpOpts{lenient: httpparser.LenientHeaders},
			want: []string{"begin", "url /", "h Host=a", "hc", "complete"}},
		{name: "empty name", in: "GET / HTTP/1.1\r\n: a\r\n\r\n", err: httpparser.KindInvalidHeader},
		{name: "no colon", in: "GET / HTTP/1.1\r\nHost\r\n\r\n", err: httpparser.KindInvalidHeader},
		{name: "non-token name", in: "GET / HTTP/1.1\r\nX(y): a\r\n\r\n", err: httpparser.KindInvalidHeader},
		{name: "NUL in value", in: "GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n", err: httpparser.KindInvalidHeader},
		{name: "CTL in value", in: "GET / HTTP/1.1\r\nX: a\x01b\r\n\r\n", err: httpparser.KindInvalidHeader},
		{name: "CTL deep in long value", in: "GET / HTTP/1.1\r\nX: abcdefghijklm\x1fnopqrstuvwxyz\r\n\r\n", err: httpparser.KindInvalidHeader},
		{name: "DEL deep in long value", in: "GET / HTTP/1.1\r\nX: abcdefghijklmnopqrst\x7fuvwxyz\r\n\r\n", err: httpparser.KindInvalidHeader},
		{name: "long value with tab and obs-text", in: "GET / HTTP/1.1\r\nX: abcdefghij\tklmnop\x80\xffqrstuvwxyz~ \r\n\r\n",
			want: []string{"begin", "url /", "h X=abcdefghij\tklmnop\x80\xffqrstuvwxyz~ ", "hc", "complete"}},
		{name: "DEL in value", in: "GET / HTTP/1.1\r\nX: a\x7fb\r\n\r\n", err: httpparser.KindInvalidHeader},
		{name: "lenient CTL in value", in: "GET / HTTP/1.1\r\nX: a\x01b\r\n\r\n", o: httpOpts{lenient: httpparser.LenientHeaders},
			want: []string{"begin", "url /", "h X=a\x01b", "hc", "complete"}},
		{name: "obs-fold rejected", in: "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", err: httpparser.KindInvalidHeader},
		{name: "obs-fold first line", in: "GET / HTTP/1.1\r\n X: a\r\n\r\n", err: httpparser.KindInvalidHeader},
		{name: "lenient obs-fold", in: "GET / HTTP/1.1\r\nX: a\r\n b\r\n\t c \r\nY: d\r\n\r\n", o: httpOpts{lenient: httpparser.LenientHeaders},
			want: []string{"begin", "url /", "h X=a b c", "h Y=d", "hc", "complete"}},
		{name: "header overflow", in: "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", 60) + "\r\n\r\n", o: httpOpts{maxHdr: 64},
			err: httpparser.KindHeaderOverflow},
		{name: "header size at the limit", in: "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", 40) + "\r\n\r\n", o: httpOpts{maxHdr: 63},
			want: []string{"begin", "url /", "h X=" + strings.Repeat("a", 40), "hc", "complete"}},
		{name: "header size one over", in: "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", 40) + "\r\n\r\n", o: httpOpts{maxHdr: 62},
			err: httpparser.KindHeaderOverflow},
		{name: "overflow without newline", in: "GET /" + strings.Repeat("a", 100), o: httpOpts{maxHdr: 64}, err: httpparser.KindHeaderOverflow},

		// Content-Length
		{name: "CL letters", in: cl("abc"), err: httpparser.KindInvalidContentLength},
		{name: "CL negative", in: cl("-1"), err: httpparser.KindInvalidContentLength},
		{name: "CL plus", in: cl("+1"), err: httpparser.KindInvalidContentLength},
		{name: "CL inner space", in: cl("1 2"), err: httpparser.KindInvalidContentLength},
		{name: "CL list", in: cl("1,1"), err: httpparser.KindInvalidContentLength},
		{name: "CL empty", in: cl(""), err: httpparser.KindInvalidContentLength},
		{name: "CL overflow", in: cl("99999999999999999999"), err: httpparser.KindInvalidContentLength},
		{name: "CL max int64", in: cl("9223372036854775807"), o: httpOpts{eof: true}, err: httpparser.KindInvalidEOF},
		{name: "CL max int64 + 1", in: cl("9223372036854775808"), err: httpparser.KindInvalidContentLength},
		{name: "CL repeated same", in: "POST / HTTP/1.1\r\nContent-Length: 1\r\ncontent-length: 1\r\n\r\nx", err: httpparser.KindInvalidContentLength},
		{name: "CL repeated differing", in: "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy", err: httpparser.KindInvalidContentLength},
		{name: "CL with TE", in: "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", err: httpparser.KindUnexpectedContentLength},
		{name: "TE with CL", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n0\r\n\r\n", err: httpparser.KindUnexpectedContentLength},
		{name: "lenient CL with TE", in: "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			o:    httpOpts{lenient: httpparser.LenientChunkedLength},
			want: []string{"begin", "url /", "h Content-Length=1", "h Transfer-Encoding=chunked", "hc", "ch 0", "cc", "complete"}},
		{name: "EOF in body", in: cl("5") + "ab", o: httpOpts{eof: true}, err: httpparser.KindInvalidEOF},
		{name: "EOF in headers", in: "GET / HTTP/1.1\r\nHost: a", o: httpOpts{eof: true}, err: httpparser.KindInvalidEOF},
		{name: "EOF between messages", in: "GET / HTTP/1.1\r\n\r\n", o: httpOpts{eof: true}},

		// Transfer-Encoding
		{name: "TE gzip only", in: te("gzip"), err: httpparser.KindInvalidTransferEncoding},
		{name: "TE chunked not last", in: te("chunked, gzip"), err: httpparser.KindInvalidTransferEncoding},
		{name: "TE chunked twice", in: te("chunked, chunked"), err: httpparser.KindInvalidTransferEncoding},
		{name: "TE chunked twice over headers", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", err: httpparser.KindInvalidTransferEncoding},
		{name: "TE not a token", in: te("chun ked"), err: httpparser.KindInvalidTransferEncoding},
		{name: "TE identity then chunked", in: te("identity, chunked") + "0\r\n\r\n",
			want: []string{"begin", "url /", "h Transfer-Encoding=identity, chunked", "hc", "ch 0", "cc", "complete"}},
		{name: "lenient TE reads until EOF", in: te("gzip") + "abc", o: httpOpts{lenient: httpparser.LenientTransferEncoding, eof: true},
			want: []string{"begin", "url /", "h Transfer-Encoding=gzip", "hc", "body abc", "complete"}},

		// chunk sizes
		{name: "chunk size uppercase hex", in: chunked("A\r\n0123456789\r\n0\r\n\r\n"), want: nil},
		{name: "chunk size not hex", in: chunked("zz\r\n"), err: httpparser.KindInvalidChunkSize},
		{name: "chunk size empty", in: chunked("\r\n"), err: httpparser.KindInvalidChunkSize},
		{name: "chunk size negative", in: chunked("-1\r\n"), err: httpparser.KindInvalidChunkSize},
		{name: "chunk size plus", in: chunked("+1\r\nx\r\n"), err: httpparser.KindInvalidChunkSize},
		{name: "chunk size 0x", in: chunked("0x1\r\nx\r\n"), err: httpparser.KindInvalidChunkSize},
		{name: "chunk size leading space", in: chunked(" 1\r\nx\r\n"), err: httpparser.KindInvalidChunkSize},
		{name: "chunk size trailing space", in: chunked("1 \r\nx\r\n0\r\n\r\n"), err: httpparser.KindInvalidChunkSize},
		{name: "lenient chunk size trailing space", in: chunked("1 \t\r\nx\r\n0  ;a=b\r\n\r\n"), o: httpOpts{lenient: httpparser.LenientSpacesAfterChunkSize},
			want: []string{"begin", "url /c", "h Transfer-Encoding=chunked", "hc", "ch 1", "body x", "cc", "ch 0", "cc", "complete"}},
		{name: "chunk size overflow", in: chunked("10000000000000000\r\n"), err: httpparser.KindInvalidChunkSize},
		{name: "chunk size max", in: chunked("7fffffffffffffff\r\nabc"), o: httpOpts{eof: true}, err: httpparser.KindInvalidEOF},
		{name: "chunk ext CTL", in: chunked("1;a\x01\r\nx\r\n"), err: httpparser.KindInvalidChunkSize},
		{name: "chunk ext empty name", in: chunked("1;\r\nx\r\n"), err: httpparser.KindInvalidChunkSize},
		{name: "chunk ext unterminated quote", in: chunked("1;a=\"x\r\nx\r\n"), err: httpparser.KindInvalidChunkSize},
		{name: "chunk ext BWS", in: chunked("1 ; a = b ;c\r\nx\r\n0\r\n\r\n"), err: httpparser.KindInvalidChunkSize},
		{name: "chunk ext BWS after semicolon", in: chunked("1; a = b ;c\r\nx\r\n0\r\n\r\n"), err: httpparser.KindInvalidChunkSize}, // llhttp: no BWS
		{name: "chunk data without CRLF", in: chunked("3\r\nabcX\r\n"), err: httpparser.KindInvalidChunk},
		{name: "chunk data CR without LF", in: chunked("3\r\nabc\rX"), err: httpparser.KindLFExpected},
		{name: "chunk data bare LF", in: chunked("3\r\nabc\n0\r\n\r\n"), err: httpparser.KindCRExpected},
		{name: "lenient chunk data without CRLF", in: chunked("3\r\nabc0\r\n\r\n"), o: httpOpts{lenient: httpparser.LenientOptionalCRLFAfterChunk},
			want: []string{"begin", "url /c", "h Transfer-Encoding=chunked", "hc", "ch 3", "body abc", "cc", "ch 0", "cc", "complete"}},
		{name: "bad trailer", in: chunked("0\r\nBad Trailer\r\n\r\n"), err: httpparser.KindInvalidHeader},
		{name: "trailer overflow", in: chunked("0\r\nT: " + strings.Repeat("v", 100) + "\r\n\r\n"), o: httpOpts{maxHdr: 90}, err: httpparser.KindHeaderOverflow},
		{name: "chunk line overflow", in: chunked("1;a=" + strings.Repeat("v", 100) + "\r\n"), o: httpOpts{maxHdr: 90}, err: httpparser.KindHeaderOverflow},
		{name: "EOF in chunked", in: chunked("5\r\nab"), o: httpOpts{eof: true}, err: httpparser.KindInvalidEOF},
		// llhttp checks trailer fields as header fields: Content-Length meets chunked
		{name: "trailer CL is checked", in: chunked("0\r\nContent-Length: x\r\n\r\n"),
			want: []string{"begin", "url /c", "h Transfer-Encoding=chunked", "hc", "ch 0"}, err: httpparser.KindUnexpectedContentLength},

		// callback errors
		{name: "callback error on header", in: "GET / HTTP/1.1\r\nA: b\r\nC: d\r\n\r\n", o: httpOpts{failOn: "h A"},
			want: []string{"begin", "url /", "h A=b"}, err: httpparser.KindCallback},
		{name: "callback error on begin", in: "GET / HTTP/1.1\r\n\r\n", o: httpOpts{failOn: "begin"},
			want: []string{"begin"}, err: httpparser.KindCallback},
		{name: "callback error on complete", in: "GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n", o: httpOpts{failOn: "complete"},
			want: []string{"begin", "url /", "hc", "complete"}, err: httpparser.KindCallback},
	})
}

func TestHttpResponses(t *testing.T) {
	r := httpOpts{resp: true}
	re := httpOpts{resp: true, eof: true}
	runHTTPCases(t, []httpCase{
		{name: "200 with CL", in: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", o: r,
			want: []string{"begin", "status OK", "h Content-Length=2", "hc", "body hi", "complete"},
			msgs: []string{" 1.1 st=200 ka=true up=false cl=2 chunked=false"}},
		{name: "reason with spaces and obs-text", in: "HTTP/1.1 404 Not \tFound \xff\r\nContent-Length: 0\r\n\r\n", o: r,
			want: []string{"begin", "status Not \tFound \xff", "h Content-Length=0", "hc", "complete"}},
		{name: "no reason: no OnStatus", in: "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", o: r,
			want: []string{"begin", "h Content-Length=0", "hc", "complete"}},
		{name: "empty reason", in: "HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n", o: r,
			want: []string{"begin", "status ", "h Content-Length=0", "hc", "complete"}},
		{name: "body until EOF", in: "HTTP/1.1 200 OK\r\n\r\nabc", o: re,
			want: []string{"begin", "status OK", "hc", "body abc", "complete"},
			msgs: []string{" 1.1 st=200 ka=false up=false cl=-1 chunked=false"}},
		{name: "body until EOF not complete without EOF", in: "HTTP/1.1 200 OK\r\n\r\nabc", o: r,
			want: []string{"begin", "status OK", "hc", "body abc"}},
		{name: "204 ignores CL", in: "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", o: r,
			want: []string{"begin", "status No Content", "h Content-Length=5", "hc", "complete", "begin", "status OK", "h Content-Length=0", "hc", "complete"}},
		{name: "304 no body", in: "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n", o: re,
			want: []string{"begin", "status Not Modified", "h Transfer-Encoding=chunked", "hc", "complete"}},
		{name: "100 continue then 200", in: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx", o: r,
			want: []string{"begin", "status Continue", "hc", "complete", "begin", "status OK", "h Content-Length=1", "hc", "body x", "complete"}},
		{name: "HEAD response via SkipBody", in: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", o: httpOpts{resp: true, skipBody: true},
			want: []string{"begin", "status OK", "h Content-Length=10", "hc", "complete"},
			msgs: []string{" 1.1 st=200 ka=true up=false cl=10 chunked=false"}},
		{name: "TE gzip response until EOF", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nzzz", o: re,
			want: []string{"begin", "status OK", "h Transfer-Encoding=gzip", "hc", "body zzz", "complete"},
			msgs: []string{" 1.1 st=200 ka=false up=false cl=-1 chunked=false"}},
		{name: "chunked response", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n", o: r,
			want: []string{"begin", "status OK", "h Transfer-Encoding=chunked", "hc", "ch 2", "body hi", "cc", "ch 0", "cc", "complete"}},
		{name: "101 upgrade", in: "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nxyz", o: r,
			want:    []string{"begin", "status Switching Protocols", "h Upgrade=websocket", "h Connection=Upgrade", "hc", "complete"},
			msgs:    []string{" 1.1 st=101 ka=true up=true cl=-1 chunked=false"},
			upgrade: 77},
		{name: "200 with upgrade headers is not an upgrade", in: "HTTP/1.1 200 OK\r\nUpgrade: h2c\r\nConnection: upgrade\r\nContent-Length: 0\r\n\r\n", o: r,
			msgs: []string{" 1.1 st=200 ka=true up=false cl=0 chunked=false"}},
		{name: "1.0 response closes", in: "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP/1.0 200 OK\r\n\r\n", o: r,
			err: httpparser.KindClosedConnection},
		{name: "status 2 digits", in: "HTTP/1.1 20 OK\r\n\r\n", o: r, err: httpparser.KindInvalidStatus},
		{name: "status 4 digits", in: "HTTP/1.1 2000 OK\r\n\r\n", o: r, err: httpparser.KindInvalidStatus},
		{name: "status letters", in: "HTTP/1.1 abc OK\r\n\r\n", o: r, err: httpparser.KindInvalidStatus},
		{name: "status missing", in: "HTTP/1.1\r\n\r\n", o: r, err: httpparser.KindInvalidVersion}, // llhttp: "Expected space after version"
		{name: "status glued reason", in: "HTTP/1.1 200OK\r\n\r\n", o: r, err: httpparser.KindInvalidStatus},
		{name: "reason CTL is kept", in: "HTTP/1.1 200 O\x01K\r\n\r\n", o: r, want: []string{"begin", "status O\x01K", "hc"}},
		{name: "bad protocol", in: "HTTX/1.1 200 OK\r\n\r\n", o: r, err: httpparser.KindInvalidVersion},
		{name: "response version 2", in: "HTTP/2.0 200 OK\r\n\r\n", o: r, want: []string{"begin", "status OK", "hc"},
			msgs: []string{" 2.0 st=200 ka=false up=false cl=-1 chunked=false"}},
		{name: "response version 1.2", in: "HTTP/1.2 200 OK\r\n\r\n", o: r, err: httpparser.KindInvalidVersion},
		{name: "EOF mid body", in: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nab", o: re, err: httpparser.KindInvalidEOF},
		{name: "response CL with TE", in: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", o: r, err: httpparser.KindUnexpectedContentLength},
	})
}

func TestHttpErrorIsSticky(t *testing.T) {
	r := &httpRec{failOn: "h X"}
	p := httpparser.NewRequestParser(r)
	r.p = p
	err := p.Feed([]byte("GET / HTTP/1.1\r\nX: 1\r\n\r\n"))
	var pe *httpparser.Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, httpparser.KindCallback, pe.Kind)
	assert.ErrorIs(t, err, errHTTPStop)
	var ce *httpparser.CallbackError = pe
	assert.Same(t, errHTTPStop, ce.Unwrap())
	assert.Same(t, err, p.Feed([]byte("GET / HTTP/1.1\r\n\r\n")))
	assert.Same(t, err, p.FeedEOF())
	assert.Same(t, err, p.Err())

	p.Reset()
	r.failOn = ""
	require.NoError(t, p.Feed([]byte("GET /again HTTP/1.1\r\n\r\n")))
	assert.Contains(t, r.ev, "url /again")

	bad := httpparser.NewRequestParser(&httpRec{})
	err = bad.Feed([]byte("GET /\x01 HTTP/1.1\r\n"))
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, httpparser.KindInvalidURL, pe.Kind)
	assert.Equal(t, 17, pe.Offset) // after the failing line
	assert.Contains(t, err.Error(), "InvalidURL")
	assert.Same(t, err, bad.Feed([]byte("x")))
}

func TestHttpUpgradeOffsetAndAfter(t *testing.T) {
	r := &httpRec{}
	p := httpparser.NewRequestParser(r)
	r.p = p
	req := "GET / HTTP/1.1\r\nUpgrade: ws\r\nConnection: upgrade\r\n\r\n"
	require.NoError(t, p.Feed([]byte(req[:10])))
	err := p.Feed([]byte(req[10:] + "DATA"))
	var ue *httpparser.UpgradeError
	require.ErrorAs(t, err, &ue)
	assert.Equal(t, len(req)-10, ue.Offset)
	var pe *httpparser.Error
	assert.False(t, errors.As(err, &pe), "UpgradeError is not an *Error")
	err = p.Feed([]byte("more"))
	require.ErrorAs(t, err, &ue)
	assert.Equal(t, 0, ue.Offset)
	assert.True(t, p.ShouldUpgrade())
	assert.NoError(t, p.FeedEOF())
}

func TestHttpGettersAndWant(t *testing.T) {
	r := &httpRec{}
	p := httpparser.NewRequestParser(r)
	r.p = p
	p.Want = httpparser.WantURL | httpparser.WantMessageComplete
	require.NoError(t, p.Feed([]byte("PUT /x HTTP/1.0\r\nContent-Length: 3\r\nA: b\r\n\r\nabc")))
	assert.Equal(t, []string{"url /x", "complete"}, r.ev)
	assert.Equal(t, "PUT", string(p.Method()))
	assert.Equal(t, 1, p.Major())
	assert.Equal(t, 0, p.Minor())
	assert.False(t, p.ShouldKeepAlive())
	assert.Equal(t, int64(3), p.ContentLength())
	assert.Equal(t, httpparser.Lenient(0), p.Leniencies())

	rr := &httpRec{}
	q := httpparser.NewResponseParser(rr)
	rr.p = q
	q.Want = httpparser.WantStatus
	require.NoError(t, q.Feed([]byte("HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n")))
	assert.Equal(t, []string{"status Busy"}, rr.ev)
	assert.Equal(t, 503, q.StatusCode())
	assert.True(t, q.ShouldKeepAlive())
}

// skipOnHeaders sets SkipBody from OnHeadersComplete, as a client that
// knows it sent HEAD might.
type skipOnHeaders struct{ httpRec }

func (s *skipOnHeaders) OnHeadersComplete() error {
	s.p.SkipBody = true
	return s.httpRec.OnHeadersComplete()
}

func TestHttpSkipBodyFromCallback(t *testing.T) {
	s := &skipOnHeaders{}
	p := httpparser.NewResponseParser(s)
	s.p = p
	require.NoError(t, p.Feed([]byte("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n")))
	assert.Equal(t, []string{"begin", "status OK", "h Content-Length=4", "hc", "complete", "begin", "status OK", "h Content-Length=4", "hc", "complete"}, s.ev)
}

func TestHttpManySplits(t *testing.T) {
	// A long pipelined stream cut into random pieces gives the same events.
	var sb strings.Builder
	for i := 0; i < 20; i++ {
		fmt.Fprintf(&sb, "POST /item/%d?x=%d HTTP/1.1\r\nHost: example.com\r\nUser-Agent: test/1.0\r\n", i, i*7)
		if i%2 == 0 {
			body := strings.Repeat("b", i*13)
			fmt.Fprintf(&sb, "Content-Length: %d\r\n\r\n%s", len(body), body)
		} else {
			sb.WriteString("Transfer-Encoding: chunked\r\n\r\n")
			for j := 0; j < i%4+1; j++ {
				fmt.Fprintf(&sb, "%x;n=%d\r\n%s\r\n", j+3, j, strings.Repeat("c", j+3))
			}
			sb.WriteString("0\r\nX-Trailer: yes\r\n\r\n")
		}
	}
	in := []byte(sb.String())
	o := httpOpts{}
	whole := runHTTP(o, in)
	require.Equal(t, httpparser.KindOK, whole.ErrKind, "%v", whole.Err)
	require.Len(t, whole.Msgs, 20)
	rng := rand.New(rand.NewPCG(1, 2))
	for k := 0; k < 300; k++ {
		var parts [][]byte
		for rest := in; len(rest) > 0; {
			n := 1 + rng.IntN(min(len(rest), 1+rng.IntN(64)))
			parts = append(parts, rest[:n])
			rest = rest[n:]
		}
		got := runHTTP(o, parts...)
		require.True(t, equalResults(whole, got), "split %d differs", k)
	}
	byByte := runHTTP(o, splitsOf(in, false)[1]...)
	require.True(t, equalResults(whole, byByte))
}

func TestHttpZeroAllocs(t *testing.T) {
	req := []byte("GET /index.html?x=1 HTTP/1.1\r\nHost: localhost:8080\r\nUser-Agent: wrk\r\nAccept: */*\r\nContent-Length: 3\r\n\r\nabc")
	chunked := []byte("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\n")
	p := httpparser.NewRequestParser(nopHandler{})
	p.SetLeniencies(httpparser.LenientHeaders) // also exercise the pending-header path
	for i := 0; i < 3; i++ {
		require.NoError(t, p.Feed(req))
		require.NoError(t, p.Feed(chunked))
	}
	allocs := testing.AllocsPerRun(200, func() {
		_ = p.Feed(req)
		_ = p.Feed(chunked)
		for i := range req { // split feeding reuses the line buffer
			_ = p.Feed(req[i : i+1])
		}
	})
	assert.Zero(t, allocs)
}

type nopHandler struct{}

func (nopHandler) OnMessageBegin() error      { return nil }
func (nopHandler) OnURL([]byte) error         { return nil }
func (nopHandler) OnStatus([]byte) error      { return nil }
func (nopHandler) OnHeader(_, _ []byte) error { return nil }
func (nopHandler) OnHeadersComplete() error   { return nil }
func (nopHandler) OnBody([]byte) error        { return nil }
func (nopHandler) OnMessageComplete() error   { return nil }
func (nopHandler) OnChunkHeader() error       { return nil }
func (nopHandler) OnChunkComplete() error     { return nil }

func TestHttpParseURL(t *testing.T) {
	type u struct {
		schema, host, path, query, fragment, userinfo string
		port                                          int
	}
	str := func(b []byte) string {
		if b == nil {
			return "<nil>"
		}
		return string(b)
	}
	ok := []struct {
		in   string
		want u
	}{
		{"/", u{"<nil>", "<nil>", "/", "<nil>", "<nil>", "<nil>", -1}},
		{"*", u{"<nil>", "<nil>", "*", "<nil>", "<nil>", "<nil>", -1}},
		{"/a/b?c=d&e#frag", u{"<nil>", "<nil>", "/a/b", "c=d&e", "frag", "<nil>", -1}},
		{"/p?", u{"<nil>", "<nil>", "/p", "<nil>", "<nil>", "<nil>", -1}},
		{"/p?q?r#f?g#h", u{"<nil>", "<nil>", "/p", "q?r", "f?g#h", "<nil>", -1}},
		{"/p#", u{"<nil>", "<nil>", "/p", "<nil>", "<nil>", "<nil>", -1}},
		{"http://example.com", u{"http", "example.com", "<nil>", "<nil>", "<nil>", "<nil>", -1}},
		{"https://user:pw@example.com:8443/x/y?z=1#top", u{"https", "example.com", "/x/y", "z=1", "top", "user:pw", 8443}},
		{"http://h:0/", u{"http", "h", "/", "<nil>", "<nil>", "<nil>", 0}},
		{"http://h:65535?q", u{"http", "h", "<nil>", "q", "<nil>", "<nil>", 65535}},
		{"http://[::1]:80/p", u{"http", "::1", "/p", "<nil>", "<nil>", "<nil>", 80}},
		{"http://[fe80::1%25eth0]/", u{"http", "fe80::1%25eth0", "/", "<nil>", "<nil>", "<nil>", -1}},
		{"/caf\xc3\xa9", u{"<nil>", "<nil>", "/caf\xc3\xa9", "<nil>", "<nil>", "<nil>", -1}},
	}
	for _, c := range ok {
		got, err := httpparser.ParseURL([]byte(c.in))
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, u{str(got.Schema), str(got.Host), str(got.Path), str(got.Query), str(got.Fragment), str(got.Userinfo), got.Port}, c.in)
	}
	for _, in := range []string{"", "a", "http:/x", "http://", "http:///p", "http://h:/", "http://h:65536/", "http://h:8x/",
		"http://a@b@c/", "http://h#f", "http://[::1/", "http://[]/", "http://[g::1]/", "1http://h/", "/a b", "/a\x01", "/a?\x7f",
		"http://h h/", "?q", "#f", "http://h:-1/"} {
		_, err := httpparser.ParseURL([]byte(in))
		var ue *httpparser.URLError
		assert.ErrorAs(t, err, &ue, "%q", in)
	}
}

// TestHttpHttptoolsVerdicts: goloop.http gives httptools' (llhttp's) verdicts on the
// requests where they once differed. Every expectation below was checked against httptools 0.9 (the error kinds are
// the ones whose Python exception class is httptools' class).
func TestHttpHttptoolsVerdicts(t *testing.T) {
	req := func(line string) string { return line + "\r\n\r\n" }
	ok := func(url string) []string { return []string{"begin", "url " + url, "hc", "complete"} }
	msg := func(m, v string, ka bool) []string {
		return []string{fmt.Sprintf("%s %s st=0 ka=%t up=false cl=-1 chunked=false", m, v, ka)}
	}
	chunked := "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
	chunkedEv := []string{"begin", "url /c", "h Transfer-Encoding=chunked", "hc", "ch 0"}
	chunkOK := []string{"begin", "url /c", "h Transfer-Encoding=chunked", "hc", "ch 1", "body x", "cc", "ch 0", "cc", "complete"}
	big := "GET / HTTP/1.1\r\nX: " + strings.Repeat("v", httpparser.DefaultMaxHeaderSize) + "\r\n\r\n"
	runHTTPCases(t, []httpCase{
		// methods: llhttp's list, nothing else
		{name: "unknown method", in: req("FOO / HTTP/1.1"), want: []string{"begin"}, err: httpparser.KindInvalidMethod},
		{name: "method with a token char after a known one", in: req("M-SEARCH! / HTTP/1.1"), want: []string{"begin"}, err: httpparser.KindInvalidMethod},
		{name: "lowercase method", in: req("get / HTTP/1.1"), want: []string{"begin"}, err: httpparser.KindInvalidMethod},
		{name: "WebDAV method", in: req("PROPFIND /d HTTP/1.1"), want: ok("/d"), msgs: msg("PROPFIND", "1.1", true)},
		{name: "PURGE", in: req("PURGE /x HTTP/1.1"), want: ok("/x"), msgs: msg("PURGE", "1.1", true)},
		// RTSP and ICE
		{name: "RTSP method with RTSP", in: req("ANNOUNCE / RTSP/1.0"), want: ok("/"), msgs: msg("ANNOUNCE", "1.0", false)},
		{name: "RTSP request with URL and header", in: "DESCRIBE rtsp://h/x RTSP/1.0\r\nCSeq: 1\r\n\r\n",
			want: []string{"begin", "url rtsp://h/x", "h CSeq=1", "hc", "complete"}, msgs: msg("DESCRIBE", "1.0", false)},
		{name: "HTTP method with RTSP", in: req("GET / RTSP/1.0"), want: ok("/"), msgs: msg("GET", "1.0", false)},
		{name: "RTSP-only method with HTTP", in: req("ANNOUNCE / HTTP/1.1"), err: httpparser.KindInvalidVersion},
		{name: "SOURCE with ICE", in: req("SOURCE /m ICE/1.0"), want: ok("/m"), msgs: msg("SOURCE", "1.0", false)},
		{name: "SOURCE with HTTP", in: req("SOURCE /m HTTP/1.1"), want: ok("/m"), msgs: msg("SOURCE", "1.1", true)},
		{name: "ICE needs SOURCE", in: req("GET / ICE/1.0"), err: httpparser.KindInvalidVersion},
		// versions 0.9 to 2.0
		{name: "HTTP/0.9 line", in: req("GET / HTTP/0.9"), want: ok("/"), msgs: msg("GET", "0.9", false)},
		{name: "HTTP/0.9 with a body", in: "GET / HTTP/0.9\r\nContent-Length: 2\r\n\r\nab",
			want: []string{"begin", "url /", "h Content-Length=2", "hc", "body ab", "complete"}},
		{name: "HTTP/2.0 line", in: req("GET / HTTP/2.0"), want: ok("/"), msgs: msg("GET", "2.0", false)},
		{name: "HTTP/2.1", in: req("GET / HTTP/2.1"), err: httpparser.KindInvalidVersion},
		{name: "HTTP/3.0", in: req("GET / HTTP/3.0"), err: httpparser.KindInvalidVersion},
		{name: "HTTP/1.9", in: req("GET / HTTP/1.9"), err: httpparser.KindInvalidVersion},
		{name: "PRI preface", in: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", err: httpparser.KindInvalidVersion},
		// version absent or invalid
		{name: "version absent: HTTP/0.9", in: "GET /\r\nHost: a\r\n\r\n",
			want: []string{"begin", "url /", "h Host=a", "hc", "complete"}, msgs: msg("GET", "0.9", false)},
		{name: "version absent, bare LF", in: "GET /\n", want: []string{"begin", "url /"}},
		{name: "HTAB after an HTTP/0.9 line", in: "GET /x\r\n\tA: b\r\n\r\n", want: []string{"begin", "url /x"}, err: httpparser.KindInvalidURL},
		{name: "FF after an HTTP/0.9 line", in: "GET /x\n\f\r\n", want: []string{"begin", "url /x"}, err: httpparser.KindInvalidURL},
		{name: "VT after an HTTP/0.9 line", in: "GET /x\r\n\v\r\n", want: []string{"begin", "url /x"}, err: httpparser.KindInvalidHeader},
		{name: "HTAB after an HTTP/0.9 line's first header", in: "GET /x\r\nA: b\r\n\tC: d\r\n\r\n", want: []string{"begin", "url /x", "h A=b"}, err: httpparser.KindInvalidHeader},
		{name: "HTAB after an HTTP/1.1 line", in: "GET /x HTTP/1.1\r\n\t\r\n", want: []string{"begin", "url /x"}, err: httpparser.KindInvalidHeader},
		{name: "space then no version", in: req("GET / "), err: httpparser.KindInvalidVersion},
		{name: "other protocol", in: req("GET / HTTX/1.1"), err: httpparser.KindInvalidVersion},
		// second space
		{name: "space inside the target", in: req("GET /a b HTTP/1.1"), err: httpparser.KindInvalidVersion},
		{name: "spaces before the version", in: req("GET /   HTTP/1.1"), want: ok("/"), msgs: msg("GET", "1.1", true)},
		{name: "text after the version", in: req("GET / HTTP/1.1  x"), err: httpparser.KindInvalidVersion},
		{name: "HTAB after the target's space", in: req("GET / \tHTTP/1.1"), err: httpparser.KindInvalidURL}, // llhttp: "Invalid characters in url"
		{name: "FF after the target's space", in: req("GET * \fHTTP/1.1"), err: httpparser.KindInvalidURL},
		{name: "HTAB after two spaces", in: req("GET /  \tHTTP/1.1"), err: httpparser.KindInvalidVersion},
		// non-ASCII target
		{name: "UTF-8 in path", in: req("GET /caf\xc3\xa9 HTTP/1.1"), want: []string{"begin"}, err: httpparser.KindInvalidURL},
		{name: "obs-text in path", in: req("GET /\xff HTTP/1.1"), want: []string{"begin"}, err: httpparser.KindInvalidURL},
		{name: "UTF-8 in query", in: req("GET /?\xc3\xa9 HTTP/1.1"), want: []string{"begin"}, err: httpparser.KindInvalidURL},
		{name: "UTF-8 in fragment", in: req("GET /#\xc3\xa9 HTTP/1.1"), want: []string{"begin"}, err: httpparser.KindInvalidURL},
		{name: "UTF-8 in host", in: req("GET http://h\xc3\xa9/ HTTP/1.1"), want: []string{"begin"}, err: httpparser.KindInvalidURL},
		// empty target
		{name: "empty target", in: req("GET  HTTP/1.1"), want: []string{"begin"}, err: httpparser.KindInvalidURL},
		{name: "no target", in: req("GET HTTP/1.1"), want: []string{"begin"}, err: httpparser.KindInvalidURL},
		// trailing whitespace of a value kept
		{name: "trailing SP kept", in: "GET / HTTP/1.1\r\nX: a \r\n\r\n", want: []string{"begin", "url /", "h X=a ", "hc", "complete"}},
		{name: "trailing HTAB kept", in: "GET / HTTP/1.1\r\nX: a\t\r\n\r\n", want: []string{"begin", "url /", "h X=a\t", "hc", "complete"}},
		{name: "trailer trailing whitespace kept", in: chunked + "0\r\nT: v \t\r\n\r\n",
			want: append(append([]string{}, chunkedEv...), "h T=v \t", "cc", "complete")},
		// Content-Length (and Transfer-Encoding) in a chunked trailer
		{name: "valid CL in trailer", in: chunked + "0\r\nContent-Length: 5\r\n\r\n", want: chunkedEv, err: httpparser.KindUnexpectedContentLength},
		{name: "empty CL in trailer", in: chunked + "0\r\nContent-Length:\r\n\r\n", want: chunkedEv, err: httpparser.KindUnexpectedContentLength},
		{name: "chunked again in trailer", in: chunked + "0\r\nTransfer-Encoding: chunked\r\n\r\n", want: chunkedEv, err: httpparser.KindInvalidTransferEncoding},
		// an upgrade ends the message with its headers (goloop.http sets UpgradeSkipsBody)
		{name: "upgrade with chunked body ends at headers", in: "POST /u HTTP/1.1\r\nUpgrade: h2c\r\nConnection: upgrade\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nPRI",
			o:    httpOpts{upSkips: true},
			want: []string{"begin", "url /u", "h Upgrade=h2c", "h Connection=upgrade", "h Transfer-Encoding=chunked", "hc", "complete"},
			msgs: []string{"POST 1.1 st=0 ka=true up=true cl=-1 chunked=false"}, upgrade: 83}, // the body is skipped
		{name: "upgrade with CL body ends at headers", in: "POST / HTTP/1.1\r\nUpgrade: x\r\nConnection: upgrade\r\nContent-Length: 2\r\n\r\nhiRAW",
			o: httpOpts{upSkips: true}, want: []string{"begin", "url /", "h Upgrade=x", "h Connection=upgrade", "h Content-Length=2", "hc", "complete"}, upgrade: 71},
		{name: "101 with CL ends at headers", in: "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nContent-Length: 3\r\n\r\nxyz",
			o:    httpOpts{resp: true, upSkips: true},
			want: []string{"begin", "status Switching Protocols", "h Upgrade=websocket", "h Connection=Upgrade", "h Content-Length=3", "hc", "complete"}, upgrade: 96},
		// chunk extensions: llhttp's grammar (found by the differential fuzz)
		{name: "chunk ext empty name", in: chunked + "1;=v\r\nx\r\n0\r\n\r\n", want: chunkOK},
		{name: "chunk ext empty value", in: chunked + "1;a=\r\nx\r\n0\r\n\r\n", want: chunkOK},
		{name: "chunk ext empty element", in: chunked + "1;;a=b\r\nx\r\n0\r\n\r\n", want: chunkOK},
		{name: "chunk ext empty name after a name", in: chunked + "1;a;=v\r\nx\r\n0\r\n\r\n", want: chunkOK},
		{name: "chunk ext quoted pair obs-text", in: chunked + "1;a=\"\\\xff\"\r\nx\r\n0\r\n\r\n", want: chunkOK},
		{name: "chunk ext ends with ;", in: chunked + "1;a=b;\r\nx\r\n0\r\n\r\n", err: httpparser.KindInvalidChunkSize},
		{name: "chunk ext SP after ;", in: chunked + "1; a=b\r\nx\r\n0\r\n\r\n", err: httpparser.KindInvalidChunkSize},
		{name: "chunk ext SP before =", in: chunked + "1;a =b\r\nx\r\n0\r\n\r\n", err: httpparser.KindInvalidChunkSize},
		{name: "chunk ext SP after =", in: chunked + "1;a= b\r\nx\r\n0\r\n\r\n", err: httpparser.KindInvalidChunkSize},
		{name: "chunk ext trailing SP", in: chunked + "1;a=b \r\nx\r\n0\r\n\r\n", err: httpparser.KindInvalidChunkSize},
		{name: "chunk ext HTAB after quoted", in: chunked + "1;a=\"x\"\t\r\nx\r\n0\r\n\r\n", err: httpparser.KindInvalidChunkSize},
		{name: "chunk ext quote inside token", in: chunked + "1;a=b\"\r\nx\r\n0\r\n\r\n", err: httpparser.KindInvalidChunkSize},
		// Transfer-Encoding: a trailing comma leaves an empty last coding (not chunked)
		{name: "TE chunked with trailing comma (request)", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked,\r\n\r\n0\r\n\r\n",
			err: httpparser.KindInvalidTransferEncoding},
		{name: "TE chunked SP comma (request)", in: "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked ,\r\n\r\n0\r\n\r\n",
			err: httpparser.KindInvalidTransferEncoding},
		{name: "TE chunked with trailing comma (response)", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked,\r\n\r\n0\r\n\r\n",
			o:    httpOpts{resp: true, eof: true},
			want: []string{"begin", "status OK", "h Transfer-Encoding=chunked,", "hc", "body 0\r\n\r\n", "complete"},
			msgs: []string{" 1.1 st=200 ka=false up=false cl=-1 chunked=false"}},
		// the header size limit: settable, none, and the default
		{name: "default limit", in: big, want: []string{"begin", "url /"}, err: httpparser.KindHeaderOverflow},
		{name: "no limit", in: big, o: httpOpts{noLimit: true}, want: []string{"begin", "url /", "h X=" + strings.Repeat("v", httpparser.DefaultMaxHeaderSize), "hc", "complete"}},
		{name: "raised limit", in: big, o: httpOpts{maxHdr: len(big)}, want: []string{"begin", "url /", "h X=" + strings.Repeat("v", httpparser.DefaultMaxHeaderSize), "hc", "complete"}},
		{name: "raised limit one short of the header line", in: big, o: httpOpts{maxHdr: len(big) - 3}, want: []string{"begin", "url /"}, err: httpparser.KindHeaderOverflow},
		{name: "no limit on the chunk-size line", in: chunked + "1;a=" + strings.Repeat("v", 100) + "\r\nx\r\n0\r\n\r\n", o: httpOpts{noLimit: true},
			want: []string{"begin", "url /c", "h Transfer-Encoding=chunked", "hc", "ch 1", "body x", "cc", "ch 0", "cc", "complete"}},
	})
}
