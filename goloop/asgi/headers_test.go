package asgi

import (
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
