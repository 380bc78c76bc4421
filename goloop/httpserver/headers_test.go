package httpserver

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// scanHeaders (h2, trailers, the spec checks) and appendHead's framing walk share
// nextHeader: names before the first ':', values trimmed of spaces and the '\r', lines
// without a name skipped, the last line without its '\n'.
func TestScanHeadersLines(t *testing.T) {
	var got []string
	scanHeaders([]byte("A: 1\r\nB:2\nno colon\r\n:x\r\n\r\nC-D:  3 \t\r\nE: a:b\r\nF:"), func(n, v []byte) {
		got = append(got, string(n)+"="+string(v))
	})
	require.Equal(t, []string{"A=1", "B=2", "C-D=3", "E=a:b", "F="}, got)
}

// The framing headers are found among others whatever their case and spacing, and only
// them: a Content-Length in a value or a longer name is not one.
func TestAppendHeadFraming(t *testing.T) {
	c := &Conn{s: &Server{}}
	r := &Request{c: c, status: 200, keepAlive: true, bodyDone: true,
		hdr: []byte("x-content-length: 9\r\nContent-Type: text/plain\r\nCONTENT-LENGTH:  5 \r\nX-Note: connection: close\r\n")}
	head := string(r.appendHead(nil, 5, false))
	require.Equal(t, int64(5), r.clen)
	require.True(t, r.keepAlive, head)
	require.False(t, r.chunked)

	r = &Request{c: c, status: 200, keepAlive: true, bodyDone: true, hdr: []byte("Transfer-Encoding: Chunked\r\nConnection: Close\r\n")}
	r.appendHead(nil, 0, true)
	require.True(t, r.chunked)
	require.False(t, r.keepAlive)
}

// framingRef is scanFraming as it was written before (every line split with nextHeader,
// names compared with equalFold, values trimmed and parsed with strconv): the reference.
func framingRef(hdr []byte) framing {
	f := framing{clen: -1}
	for b := hdr; len(b) > 0; {
		var name, raw []byte
		name, raw, b = nextHeader(b)
		j := len(name)
		if j != 10 && j != 14 && j != 17 {
			continue
		}
		value := bytes.TrimSpace(raw)
		switch {
		case j == 14 && equalFold(name, "content-length"):
			if v, err := strconv.ParseInt(string(value), 10, 64); err == nil && v >= 0 {
				f.clen = v
			}
		case j == 17 && equalFold(name, "transfer-encoding"):
			f.hasTE = true
			f.chunked = bytes.HasSuffix(bytes.ToLower(value), []byte("chunked"))
		case j == 10 && equalFold(name, "connection"):
			f.hasConn = true
			if bytes.Contains(bytes.ToLower(value), []byte("close")) {
				f.close = true
			}
		}
	}
	return f
}

// scanFraming (a ':' looked for only where a framing name would end, names compared eight
// bytes at a time, lengths read without strconv) finds what the plain walk finds, on lines
// made to trip each shortcut: ':' at two of the places, names one letter or case off, a
// '\r' or a control character where a name has '-', signs, 18 and 19 digits, Unicode
// spaces, no '\n' at the end.
func TestScanFramingMatchesPlainWalk(t *testing.T) {
	lines := []string{
		"Content-Length: 13", "content-length:5", "CONTENT-LENGTH:  5 \t", "Content-Length: +5",
		"Content-Length: -0", "Content-Length: -5", "Content-Length: 5 5", "Content-Length: ",
		"Content-Length: 123456789012345678", "Content-Length: 1234567890123456789",
		"Content-Length: 99999999999999999999", "Content-Length:\t7\v", "Content-Length: \u00a05",
		"Content-Length: 5\u0085", "Content-Length: 0x5", "Content-Length: 5_0", "Content\rLength: 5",
		"Content-Lengt\x08: 5", "Content-Lengti: 5", "Dontent-Length: 5", "Content-Length : 5",
		"X-Content-Length: 9", "Content-Type: text/plain", "Content:Length: 5", "Connection:a: close", "Connection:abc: close", "Connection:abcdef: close",
		"Connection: close", "connection: Keep-Alive, CLOSE", "CONNECTION:close ", "Connectio\x0e: close",
		"Transfer-Encoding: chunked", "transfer-encoding: gzip, Chunked ", "Transfer-Encoding: chunked, gzip",
		"Transfer\rEncoding: chunked", "Transfer-Encodinf: chunked", "X: a:b", ":x", "no colon", "",
		"abcdefghij:abc:efghij: 5", "abcdefghijklmn:abc:", "0123456789012345678901: x",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(hdr []byte) {
		t.Helper()
		require.Equal(t, framingRef(hdr), scanFraming(hdr), "%q", hdr)
	}
	for _, l := range lines {
		check([]byte(l + "\r\n"))
		check([]byte(l))
		check([]byte(l + "\n"))
	}
	for k := 0; k < 3000; k++ {
		var hdr []byte
		for n := rng.IntN(4); n >= 0; n-- {
			hdr = append(hdr, lines[rng.IntN(len(lines))]...)
			hdr = append(hdr, []string{"\r\n", "\n", "\r\n"}[rng.IntN(3)]...)
		}
		if rng.IntN(4) == 0 {
			hdr = hdr[:rng.IntN(len(hdr)+1)]
		}
		check(hdr)
	}
	for _, name := range []string{"content-length", "transfer-encoding", "connection"} {
		f := newFoldName(name)
		for i := 0; i < len(name); i++ {
			for c := 0; c < 256; c++ {
				b := []byte(name)
				b[i] = byte(c)
				require.Equal(t, equalFold(b, name), f.equal(b), "%q", b)
			}
		}
	}
}

// appendUnquote decodes %XX escapes (either case) and leaves an invalid or cut one as it is,
// as urllib.parse.unquote does (on bytes).
func TestAppendUnquote(t *testing.T) {
	for in, want := range map[string]string{
		"": "", "/": "/", "/a%20b": "/a b", "%2F%2f": "//", "/%": "/%", "/%4": "/%4", "/%41": "/A",
		"%zz%41%": "%zzA%", "%%41": "%A", "/caf%C3%A9?": "/caf\xc3\xa9?", "%4g%g4": "%4g%g4", "a%410": "aA0",
	} {
		require.Equal(t, want, string(appendUnquote([]byte("x"), []byte(in)))[1:], "%q", in)
	}
}
