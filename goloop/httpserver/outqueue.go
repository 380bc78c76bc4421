package httpserver

// outqueue.go: a connection's output queue. Response bytes are appended to Conn.out (the
// first request in flight's, and its predecessors' once they complete: advanceLocked;
// a later pipelined request's wait in its Request.out); files (pathsend, zerocopysend)
// and held bodies (SendHeld) are segments (fileSeg) at offsets of it. Flush writes it
// with non-blocking writes from the application's thread (the loop driver: writable
// events, loopdriver.go; TLS: encrypted first, tls.go); what the socket does not take
// goes to the writer goroutine, which blocks in Go's netpoller. The queue's bounds make
// senders wait (SendPaused) and the reader stop.

import (
	"io"
	"os"
	"syscall"

	"github.com/goloop/goloop/goloop/poller"
	"golang.org/x/sys/unix"
)

const (
	// maxHeld: past this much response output held behind an unfinished earlier
	// response of the same connection, the connection stops reading (and dispatching).
	maxHeld = 1 << 20
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
// goroutine; c.mu held, released during the copy). An error: the connection failed.
func (c *Conn) sendFileFront() error {
	fs := c.popFileLocked()
	c.mu.Unlock()
	var w int64
	var err error
	if c.rc != nil {
		for err == nil && w < fs.n {
			var m int64
			m, err = sendfileAt(c.rc, fs.f, fs.off+w, fs.n-w)
			w += m
			c.wrote(int(m))
			if err != nil && c.writeGoesOn(err) {
				err = nil // a slow client still within the minimum rate
			}
		}
	} else { // TLS: read and write
		w, err = io.Copy(c.nc, io.NewSectionReader(fs.f, fs.off, fs.n))
	}
	fs.f.Close()
	c.mu.Lock()
	if err == nil && w != fs.n {
		err = io.ErrUnexpectedEOF // a file cut short breaks the framing: the connection ends
	}
	return err
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
		} else if fs.rel != nil { // nil: borrowed (h1Exchange.send's caller owns it)
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

// dirtyLocked puts c in the server's dirty list (once per flush) if it has output.
func (c *Conn) dirtyLocked() {
	if !c.idleOutLocked() && !c.isDirty {
		c.isDirty = true
		if c.s.markDirty(c) {
			c.s.needFlush.Store(true)
		}
	}
}

// flush writes c.out with non-blocking writes from the calling thread; what the socket
// does not take goes to the writer goroutine.
func (c *Conn) flush() {
	c.mu.Lock()
	c.isDirty = false
	if c.writing {
		c.mu.Unlock()
		return
	}
	if c.lp != nil {
		c.loopWriteLocked()
		c.mu.Unlock()
		return
	}
	c.writeOutLocked()
	c.mu.Unlock()
}

// writeOutLocked is flush's non-blocking writing (c.mu held, released while writing; c
// not writing: c.writing is set while it writes, or the writer goroutine is started). A
// borrowed body (h1Exchange.send, TLS) is encrypted from the caller's memory; the writer
// goroutine is handed a copy of what the socket did not take.
func (c *Conn) writeOutLocked() {
	for !c.idleOutLocked() && !c.closed {
		c.writing = true
		buf := c.out[:c.outLimit()]
		borrowed := len(buf) == 0 && c.files[0].f == nil
		if borrowed {
			buf = c.files[0].b
		} else if len(buf) == 0 { // a file is next: the writer goroutine sends it
			go c.writer()
			return
		}
		c.mu.Unlock()
		n, err := c.tryWrite(buf)
		c.mu.Lock()
		if borrowed {
			c.consumeBorrowedLocked(n)
		} else {
			c.consumeLocked(n)
		}
		if err == unix.EAGAIN || (err == nil && n < len(buf)) {
			c.unholdLocked()
			go c.writer()
			return
		}
		if err != nil {
			c.writing = false
			c.lostLocked()
			return
		}
	}
	c.writing = false
	c.drainedLocked()
}

func (c *Conn) tryWrite(buf []byte) (n int, err error) {
	if c.rc == nil {
		if t, ok := c.nc.(*tlsConn); ok {
			return t.tryWrite(buf) // encrypted here, written as below (tls.go)
		}
		return 0, unix.EAGAIN
	}
	return rawWrite(c.rc, buf)
}

// rawWrite is one non-blocking write to rc's socket (a raw system call, as the loop
// driver's: no entersyscall/exitsyscall on the loop thread).
func rawWrite(rc syscall.RawConn, buf []byte) (n int, err error) {
	cerr := rc.Control(func(fd uintptr) {
		for {
			n, err = poller.RawWrite(int(fd), buf)
			if err != unix.EINTR {
				return
			}
		}
	})
	if n < 0 {
		n = 0
	}
	if cerr != nil {
		return 0, cerr
	}
	return n, err
}

// consumeBorrowedLocked drops n written bytes of the borrowed body at the front of the
// output (the connection may have been lost meanwhile: nothing is left then).
func (c *Conn) consumeBorrowedLocked(n int) {
	if len(c.files) == 0 || c.files[0].at != 0 || c.files[0].f != nil {
		return
	}
	fs := &c.files[0]
	c.wrote(n)
	fs.b, fs.n, c.heldN = fs.b[n:], fs.n-int64(n), c.heldN-n
	if len(fs.b) == 0 {
		c.popFileLocked()
	}
}

// unsentLocked is how many response bytes wait to be written (files aside).
func (c *Conn) unsentLocked() int { return len(c.out) + c.heldN }

func (c *Conn) consumeLocked(n int) {
	if n <= 0 {
		return
	}
	if c.rc != nil || c.lp != nil { // (TLS: the sink counts the records it writes)
		c.wrote(n)
	}
	for i := range c.files {
		c.files[i].at -= n
	}
	if n >= len(c.out) {
		c.out = c.out[:0]
		if cap(c.out) > 1<<20 {
			c.out = nil
		}
		return
	}
	m := copy(c.out, c.out[n:])
	c.out = c.out[:m]
}

// writer writes c.out with blocking writes (Go's netpoller) until it is empty.
// Its writes have the minimum response rate's deadline (writerate.go).
func (c *Conn) writer() {
	c.armWriteDeadline()
	defer c.disarmWriteDeadline()
	if err := c.drainTLS(); err != nil {
		c.mu.Lock()
		c.writeFailedLocked(err)
		c.mu.Unlock()
		return
	}
	c.mu.Lock()
	for !c.idleOutLocked() && !c.closed {
		buf := c.out[:c.outLimit()]
		if len(buf) == 0 {
			if err := c.sendFileFront(); err != nil {
				c.writeFailedLocked(err)
				c.mu.Unlock()
				return
			}
			continue
		}
		c.mu.Unlock()
		n, err := c.nc.Write(buf)
		c.mu.Lock()
		c.consumeLocked(n)
		if err != nil && !c.writeGoesOn(err) {
			c.writeFailedLocked(err)
			c.mu.Unlock()
			return
		}
	}
	c.writing = false
	c.drainedLocked()
	c.mu.Unlock()
}

// drainedLocked: the output is written. Wake the senders that wait for it; close the
// connection if it is done.
func (c *Conn) drainedLocked() {
	c.unstall()
	c.answered = true
	if c.next != nil && c.next.drainedLocked() {
		return
	}
	for _, r := range c.inflight {
		if r.waitSend {
			c.wakeLocked(r, nil)
		}
	}
	c.undeferLocked()
	c.roomLocked() // a reader paused for the output reads on
	if c.closing && len(c.inflight) == 0 && c.idleOutLocked() && !c.closed {
		c.closeLocked()
	}
}
