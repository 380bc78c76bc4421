package asgi

// spec.go: the parts of ASGI's HTTP spec and of HTTP/1.1 beyond the plain exchange:
// Expect: 100-continue, response trailers (HTTP/1.1 chunked trailer section, HTTP/2
// trailing HEADERS), http.response.pathsend and http.response.zerocopysend (files sent by
// Go: sendfile(2) on plain TCP and Unix sockets), the lingering close after the server's own error answers, and the bound on the
// output held behind an unfinished pipelined response.

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"golang.org/x/sys/unix"
)

const (
	// maxHeld: past this much response output held behind an unfinished earlier
	// response of the same connection, the connection stops reading (and dispatching).
	maxHeld = 1 << 20
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

// maxFiles: past this many files queued on a connection, a sender waits (SendPaused) as
// it does past WriteBuffer bytes (each queued file holds a descriptor).
const maxFiles = 16

// fileSeg is a file to send at offset at of an output buffer (Conn.out or Request.out):
// the bytes before at leave first, then n bytes of f from its offset off, then the rest.
// With f nil it is a held body instead (SendHeld): b, memory the caller keeps valid until
// rel is called.
type fileSeg struct {
	at     int
	f      *os.File
	off, n int64
	b      []byte
	rel    func()
}

// outFullLocked: the connection's output is over its limits (bytes or files queued).
func (c *Conn) outFullLocked() bool {
	return c.unsentLocked() > c.s.cfg.WriteBuffer || len(c.files) > maxFiles
}

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
	c := r.c
	if r.h2 != nil { // HTTP/2: a HEADERS frame with :status 100
		if h := c.h2; h != nil && !r.h2.gone {
			h.hb.Reset()
			h.enc.WriteField(hpack.HeaderField{Name: ":status", Value: "100"})
			h.writeBlockLocked(r.h2.id, false)
			c.dirtyLocked()
		}
		return
	}
	if len(c.inflight) > 0 && c.inflight[0] == r {
		c.out = append(c.out, continue100...)
		c.dirtyLocked()
	} else {
		r.out = append(r.out, continue100...)
	}
}

// chunkedForTrailers: the response announced trailers and the client takes them (TE:
// trailers, HTTP/1.1): it is chunked even when it has one body part.
func (r *Request) chunkedForTrailers() bool {
	return r.trailers && r.teTrailers && (r.Minor >= 1 || r.Major > 1) && !r.noBody
}

// SetTrailers: the response's http.response.start had trailers: True (called after Start).
func (r *Request) SetTrailers() {
	r.c.mu.Lock()
	if r.started && !r.headSent {
		r.trailers = true
	}
	r.c.mu.Unlock()
}

// SendTrailers adds trailer lines ("name: value\r\n" each) after the final body part
// (http.response.trailers); more=false completes the response. On HTTP/1.1 they are sent
// only if the request had TE: trailers (and the response is chunked); else dropped.
func (r *Request) SendTrailers(hdr []byte, more bool) error {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !r.trailers:
		return ErrNoTrailers
	case !r.bodyEnd:
		return ErrTrailersEarly
	case r.trDone:
		return ErrTrailersDone
	case r.lost:
		return ErrDisconnected
	}
	r.trDone = !more
	if !r.keepTr {
		return nil // dropped: the response completed with its body
	}
	r.trHdr = append(r.trHdr, hdr...)
	if more {
		return nil
	}
	if r.h2 != nil {
		if c.h2 == nil {
			return ErrDisconnected
		}
		st := r.h2
		st.trReady = true
		if !st.endSent {
			st.endPending = true
		}
		r.done = true
		if r.waitRecv {
			c.wakeLocked(r, nil)
		}
		c.h2.writeDataLocked(st)
		return nil
	}
	head := len(c.inflight) > 0 && c.inflight[0] == r
	w := r.out
	if head {
		w = c.out
	}
	w = append(w, "0\r\n"...)
	w = append(w, r.trHdr...)
	w = append(w, "\r\n"...)
	r.trHdr = nil
	r.restore(w, head)
	r.completeLocked()
	return nil
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

// SendFile sends the file at path as the rest of the response's body and completes it
// (http.response.pathsend). On HTTP/1.1 the file is not read by the application's thread:
// the writer goroutine copies it to the socket (sendfile(2) on plain TCP; reads and TLS
// writes otherwise). On HTTP/2 it is read a frame at a time into the connection's output
// as the flow-control windows and the output's bound (WriteBuffer) allow.
func (r *Request) SendFile(path string) (flags int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = errors.New(path + " is not a regular file")
	}
	if err != nil {
		f.Close()
		return 0, err
	}
	size := fi.Size()
	if r.h2 != nil {
		return 0, r.h2SendFile(f, size)
	}
	return r.sendPart(&bodyPart{f: f, n: size, clamp: true}, false, ErrPathsend)
}

// h2SendFD is SendFD on HTTP/2 (it takes f, nil for an empty part): the part is read a
// frame at a time as the windows allow, as a pathsend's file; a sender that goes on with
// more parts is paused (SendPaused) until the part is out, so that parts leave in order.
func (r *Request) h2SendFD(f *os.File, pos, n int64, more bool) (flags int, err error) {
	if f == nil {
		return r.h2Send(nil, more, ErrZeroCopy)
	}
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := r.partErrLocked(ErrZeroCopy); err != nil {
		f.Close()
		return 0, err
	}
	h, st := c.h2, r.h2
	if err := h.sendLocked(r, nil, true); err != nil { // the head, if not sent
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
		h.endBodyLocked(r)
	}
	h.writeDataLocked(st)
	c.dirtyLocked()
	if more && st.file != nil && !r.lost {
		r.waitSend = true
		flags |= SendPaused
	}
	return flags, nil
}

// h2SendFile is SendFile on HTTP/2 (it takes f).
func (r *Request) h2SendFile(f *os.File, size int64) error {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := r.partErrLocked(ErrPathsend); err != nil {
		f.Close()
		return err
	}
	return c.h2.sendFileLocked(r, f, size)
}

// SendFD sends count bytes (-1: up to the end) of the regular file open as fd, from offset
// (-1: from its current position, which then moves past them, as sendfile(2) without an
// offset does), as the response's next body part (http.response.zerocopysend). fd is
// duplicated: the application may close its file once this returns. The writer goroutine
// sends the part with sendfile(2) at an explicit offset, so the position the application
// sees moves only here. On HTTP/2 the part is read a frame at a time as the windows
// allow (h2SendFD).
// n is the part's length.
func (r *Request) SendFD(fd int, offset, count int64, more bool) (flags int, n int64, err error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return 0, 0, os.NewSyscallError("fstat", err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return 0, 0, errors.New("http.response.zerocopysend needs a regular file")
	}
	pos := offset
	if pos < 0 {
		if pos, err = syscall.Seek(fd, 0, io.SeekCurrent); err != nil {
			return 0, 0, os.NewSyscallError("lseek", err)
		}
	}
	n = max(0, st.Size-pos)
	if count >= 0 {
		n = min(n, count)
	}
	var f *os.File
	if n > 0 {
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return 0, 0, os.NewSyscallError("fcntl", err)
		}
		f = os.NewFile(uintptr(dup), "")
	}
	if r.h2 != nil {
		flags, err = r.h2SendFD(f, pos, n, more)
		return flags, n, movePos(fd, offset, pos+n, err)
	}
	flags, err = r.sendPart(&bodyPart{f: f, off: pos, n: n}, more, ErrZeroCopy)
	return flags, n, movePos(fd, offset, pos+n, err)
}

// movePos: a part sent without an offset moves the file position past it (err: not sent).
func movePos(fd int, offset, to int64, err error) error {
	if err == nil && offset < 0 {
		if _, serr := syscall.Seek(fd, to, io.SeekStart); serr != nil {
			return os.NewSyscallError("lseek", serr)
		}
	}
	return err
}

// sendFileLocked is SendFile on HTTP/2: HEADERS (with content-length unless the
// application gave one), then the file as DATA frames from writeDataLocked/fileDataLocked.
func (h *h2Conn) sendFileLocked(r *Request, f *os.File, size int64) error {
	if !r.headSent && !hasHeader(r.hdr, "content-length") {
		r.hdr = append(r.hdr, "content-length: "...)
		r.hdr = strconv.AppendInt(r.hdr, size, 10)
		r.hdr = append(r.hdr, "\r\n"...)
	}
	if err := h.sendLocked(r, nil, true); err != nil { // the head, if not sent
		f.Close()
		return err
	}
	n := size
	if r.clen >= 0 {
		n = max(0, min(n, r.clen-r.sent))
	}
	st := r.h2
	if r.noBody || n == 0 || st.gone {
		f.Close()
	} else {
		st.file, st.fileOff, st.fileLeft = f, 0, n
		r.sent += n
		h.files++
	}
	h.endBodyLocked(r)
	h.writeDataLocked(st)
	h.c.dirtyLocked()
	return nil
}

// fileDataLocked writes DATA frames of st's file while the windows allow and the
// connection's output is under WriteBuffer: the file is read straight into the output,
// after a frame header written here. False: the file failed and the stream was reset.
func (h *h2Conn) fileDataLocked(st *h2Stream) bool {
	c := h.c
	for st.fileLeft > 0 && len(c.out) < c.s.cfg.WriteBuffer {
		n := min(st.fileLeft, int64(h.peerFrame), st.sendWin, h.sendWin)
		if n <= 0 {
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
	at := len(st.pending)
	st.pending = slices.Grow(st.pending, int(st.fileLeft))[:at+int(st.fileLeft)]
	_, err := st.file.ReadAt(st.pending[at:], st.fileOff)
	if err != nil {
		st.pending = st.pending[:at]
	}
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

// outLimit is how much of c.out may be written before the next file (c.mu held).
func (c *Conn) outLimit() int {
	if len(c.files) > 0 {
		return c.files[0].at
	}
	return len(c.out)
}

// popFileLocked takes the segment at the front of the output (c.mu held).
func (c *Conn) popFileLocked() fileSeg {
	fs := c.files[0]
	m := copy(c.files, c.files[1:])
	c.files[m] = fileSeg{}
	c.files = c.files[:m]
	return fs
}

// idleOutLocked: nothing left to write, bytes nor files.
func (c *Conn) idleOutLocked() bool { return len(c.out) == 0 && len(c.files) == 0 }

// takeOutLocked moves h's held output (bytes and files) to the connection's.
func (c *Conn) takeOutLocked(h *Request) {
	for _, fs := range h.files {
		fs.at += len(c.out)
		c.files = append(c.files, fs)
	}
	h.files = nil
	c.out = append(c.out, h.out...)
	h.out = nil
}

// sendFileFront copies the file at the front of the output to the socket (the writer
// goroutine; c.mu held, released during the copy). False: the connection failed.
func (c *Conn) sendFileFront() bool {
	fs := c.popFileLocked()
	c.mu.Unlock()
	var w int64
	var err error
	if c.rc != nil {
		w, err = sendfileAt(c.rc, fs.f, fs.off, fs.n)
	} else { // TLS: read and write
		w, err = io.Copy(c.nc, io.NewSectionReader(fs.f, fs.off, fs.n))
	}
	fs.f.Close()
	c.mu.Lock()
	return err == nil && w == fs.n // a file cut short breaks the framing: the connection ends
}

// sendfileAt sends n bytes of f from offset off to the socket of rc with sendfile(2) at an
// explicit offset: f's position (shared with the application's descriptor it was dup'ed
// from) does not move. It waits in Go's netpoller while the socket is full.
func sendfileAt(rc syscall.RawConn, f *os.File, off, n int64) (int64, error) {
	src, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var written int64
	var werr error
	cerr := src.Control(func(in uintptr) {
		err := rc.Write(func(out uintptr) bool {
			for written < n {
				o := off + written
				m, e := syscall.Sendfile(int(out), int(in), &o, int(min(n-written, 1<<30)))
				if m > 0 {
					written += int64(m)
				}
				switch {
				case e == syscall.EINTR:
				case e == syscall.EAGAIN:
					return false // wait until the socket takes more
				case e != nil:
					werr = os.NewSyscallError("sendfile", e)
					return true
				case m == 0:
					werr = io.ErrUnexpectedEOF // the file is shorter than it was
					return true
				}
			}
			return true
		})
		if werr == nil {
			werr = err
		}
	})
	if werr == nil {
		werr = cerr
	}
	return written, werr
}

// dropFilesLocked closes the files not yet sent and releases the held bodies (the
// connection is lost).
func (c *Conn) dropFilesLocked() {
	dropSegs(c.files)
	c.files, c.heldN = nil, 0
	for _, r := range c.inflight {
		dropSegs(r.files)
		r.files = nil
	}
}

// dropSegs closes the files and releases the held bodies of segs.
func dropSegs(segs []fileSeg) {
	for _, fs := range segs {
		if fs.f != nil {
			fs.f.Close()
		} else if fs.rel != nil { // nil: borrowed (sendPart's caller owns it)
			fs.rel()
		}
	}
}

// heldLocked is how much output the requests after the first hold.
func (c *Conn) heldLocked() int {
	n := 0
	for i := 1; i < len(c.inflight); i++ {
		n += len(c.inflight[i].out)
	}
	return n
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
