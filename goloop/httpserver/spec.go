package httpserver

// spec.go: the parts of ASGI's HTTP spec and of HTTP/1.1 beyond the plain exchange:
// Expect: 100-continue and TE: trailers noted from the head, the 100's rule, HTTP/2's
// trailing HEADERS and its files (http.response.pathsend and http.response.zerocopysend
// read a frame at a time as the windows allow; HTTP/1.1's files are segments of the
// output queue, outqueue.go, sent with sendfile(2)), and the lingering close after the
// server's own error answers. The messages' shared checks are exchange.go's, HTTP/1.1's
// chunked trailer section request.go's.

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

const (
	// lingerTime and lingerMax bound the lingering close: after an error answer (400,
	// 426, 431, 503) the write side is shut and the client's further input is read and
	// dropped (up to lingerMax bytes, for up to lingerTime) before the socket is closed, so
	// the client reads the answer instead of a reset.
	lingerTime = 2 * time.Second
	lingerMax  = 64 << 20
)

var continue100 = []byte("HTTP/1.1 100 Continue\r\n\r\n")

// Errors of SendTrailers and SendFile.
var (
	ErrNoTrailers    = errors.New("Unexpected ASGI message 'http.response.trailers' sent, without 'trailers': True in 'http.response.start'.")
	ErrTrailersEarly = errors.New("Unexpected ASGI message 'http.response.trailers' sent, before the final 'http.response.body'.")
	ErrTrailersDone  = errors.New("Unexpected ASGI message 'http.response.trailers' sent, after the trailers were complete.")
	ErrPathsend      = errors.New("Expected ASGI message 'http.response.start', but got 'http.response.pathsend'.")
	ErrZeroCopy      = errors.New("Expected ASGI message 'http.response.start', but got 'http.response.zerocopysend'.")
)

// noteHeader records the request headers that change how it is answered (OnHeader; name
// as received).
func (r *Request) noteHeader(name, value []byte) {
	switch {
	case len(name) == 6 && equalFold(name, "expect"):
		v := bytes.TrimSpace(value)
		r.expect100 = len(v) == 12 && equalFold(v, "100-continue")
	case len(name) == 2 && equalFold(name, "te"):
		for _, t := range bytes.Split(value, []byte(",")) {
			if i := bytes.IndexByte(t, ';'); i >= 0 {
				t = t[:i]
			}
			if t = bytes.TrimSpace(t); len(t) == 8 && equalFold(t, "trailers") {
				r.teTrailers = true
			}
		}
	}
}

// continueLocked writes "100 Continue" for a request that expects it, the first time its
// application waits for the body (uvicorn's rule): not before, so an application that
// answers without reading the body never makes the client send it (c.mu held).
func (r *Request) continueLocked() {
	if !r.expect100 || r.headSent || r.bodyDone || r.Major == 1 && r.Minor < 1 {
		return
	}
	r.expect100 = false
	r.x.continueLocked()
}

// chunkedForTrailers: the response announced trailers and the client takes them (TE:
// trailers, HTTP/1.1): it is chunked even when it has one body part.
func (r *Request) chunkedForTrailers() bool {
	return r.trailers && r.teTrailers && (r.Minor >= 1 || r.Major > 1) && !r.noBody
}

// writeTrailersLocked writes st's trailers as a HEADERS frame ending the stream (after
// its last DATA).
func (h *h2Conn) writeTrailersLocked(st *h2Stream) {
	h.hb.Reset()
	scanHeaders(st.r.trHdr, func(name, value []byte) {
		n := strings.ToLower(string(name))
		if connSpecific(n) || n == "content-length" {
			return
		}
		h.enc.WriteField(hpack.HeaderField{Name: n, Value: string(value)})
	})
	st.r.trHdr = nil
	h.writeBlockLocked(st.id, true)
}

// sendFileLocked is SendFile on HTTP/2 (it takes f): HEADERS (with content-length unless
// the application gave one), then the file as DATA frames from writeDataLocked/fileDataLocked.
func (h *h2Conn) sendFileLocked(st *h2Stream, f *os.File, size int64) error {
	r := st.r
	if !r.headSent && !hasHeader(r.hdr, "content-length") {
		r.hdr = append(r.hdr, "content-length: "...)
		r.hdr = strconv.AppendInt(r.hdr, size, 10)
		r.hdr = append(r.hdr, "\r\n"...)
	}
	if err := h.sendLocked(st, nil, true); err != nil { // the head, if not sent
		f.Close()
		return err
	}
	n := size
	if r.clen >= 0 {
		n = max(0, min(n, r.clen-r.sent))
	}
	if r.noBody || n == 0 || st.gone {
		f.Close()
	} else {
		st.file, st.fileOff, st.fileLeft = f, 0, n
		r.sent += n
		h.files++
	}
	h.endBodyLocked(st)
	h.writeDataLocked(st)
	h.c.dirtyLocked()
	return nil
}

// sendFDLocked is SendFD on HTTP/2 (it takes f, n bytes from pos): the part is read a
// frame at a time as the windows allow, as a pathsend's file; a sender that goes on with
// more parts is paused (SendPaused) until the part is out, so that parts leave in order.
func (h *h2Conn) sendFDLocked(st *h2Stream, f *os.File, pos, n int64, more bool) (flags int, err error) {
	r := st.r
	if err := h.sendLocked(st, nil, true); err != nil { // the head, if not sent
		f.Close()
		return 0, err
	}
	if r.clen >= 0 && r.sent+n > r.clen && !r.noBody {
		f.Close()
		return 0, ErrTooLong
	}
	if err := h.fileToPendingLocked(st); err != nil { // a part the sender did not wait for
		f.Close()
		return 0, err
	}
	if r.noBody || st.gone {
		f.Close()
	} else {
		st.file, st.fileOff, st.fileLeft = f, pos, n
		r.sent += n
		h.files++
	}
	if !more {
		h.endBodyLocked(st)
	}
	h.writeDataLocked(st)
	h.c.dirtyLocked()
	if more && st.file != nil && !r.lost {
		r.waitSend = true
		flags |= SendPaused
	}
	return flags, nil
}

// fileDataLocked writes DATA frames of st's file while the windows allow and the
// connection's output is under WriteBuffer: the file is read straight into the output,
// after a frame header written here. False: the file failed and the stream was reset.
func (h *h2Conn) fileDataLocked(st *h2Stream) bool {
	c := h.c
	for st.fileLeft > 0 && len(c.out) < c.s.cfg.WriteBuffer {
		n := min(st.fileLeft, int64(h.peerFrame), st.sendWin, h.sendWin)
		if n <= 0 {
			h.flowWaitLocked()
			return true
		}
		end := st.endPending && n == st.fileLeft && !st.trReady
		at := len(c.out)
		var flags byte
		if end {
			flags = byte(http2.FlagDataEndStream)
		}
		c.out = append(c.out, byte(n>>16), byte(n>>8), byte(n), byte(http2.FrameData), flags,
			byte(st.id>>24)&0x7f, byte(st.id>>16), byte(st.id>>8), byte(st.id))
		c.out = slices.Grow(c.out, int(n))[:at+9+int(n)]
		if _, err := st.file.ReadAt(c.out[at+9:], st.fileOff); err != nil { // the file shrank
			c.out = c.out[:at]
			h.resetLocked(st.id, http2.ErrCodeInternal)
			return false
		}
		st.fileOff += n
		st.fileLeft -= n
		st.sendWin -= n
		h.sendWin -= n
		h.dataSent += n
		if end {
			st.endPending, st.endSent = false, true
		}
	}
	if st.fileLeft == 0 {
		h.closeFileLocked(st)
	}
	return true
}

// fileToPendingLocked reads what is left of st's file (a zerocopysend part) into its
// pending bytes, for a part sent while the file is still going out: the parts stay in
// order. The Python sender waits instead (SendPaused), so this is for other senders.
func (h *h2Conn) fileToPendingLocked(st *h2Stream) error {
	if st.file == nil {
		return nil
	}
	h.ownPendingLocked(st)
	at := len(st.pending)
	st.pending = slices.Grow(st.pending, int(st.fileLeft))[:at+int(st.fileLeft)]
	_, err := st.file.ReadAt(st.pending[at:], st.fileOff)
	if err != nil {
		st.pending = st.pending[:at]
	}
	h.copied += len(st.pending) - at
	h.closeFileLocked(st)
	return err
}

// closeFileLocked closes st's file (sent, or the stream is gone).
func (h *h2Conn) closeFileLocked(st *h2Stream) {
	if st.file != nil {
		st.file.Close()
		st.file = nil
		h.files--
	}
}

// hasHeader tells whether the header lines hdr have a field name (lower-case).
func hasHeader(hdr []byte, name string) bool {
	found := false
	scanHeaders(hdr, func(n, _ []byte) {
		if len(n) == len(name) && equalFold(n, name) {
			found = true
		}
	})
	return found
}

// lingerClose ends a connection after an error answer: the write side is shut, the
// client's further input read and dropped (bounded), then the socket closed.
func (c *Conn) lingerClose() {
	c.shutWrite()
	c.nc.SetReadDeadline(time.Now().Add(lingerTime))
	io.CopyN(io.Discard, c.nc, lingerMax)
	c.nc.Close()
	c.s.forget(c)
}

var _ net.Conn = (*tlsConn)(nil)
