package main

// Stream transports (the loop, doc.go): the Go state of each SocketTransportCore (conn),
// found by id from its C object; its write queue and the writev that sends it (at the end of
// the iteration, or at once when nothing is queued); reads from the poller's events handed to
// loop_readpath.c; pausing and resuming reading and writing. The lifecycle (close, EOF, errors) is
// pyshim/goloop/_transports.py's.

/*
#include "gl.h"
#include <stdlib.h>
*/
import "C"

import (
	"unsafe"

	"github.com/goloop/goloop/goloop/idtable"
	"github.com/goloop/goloop/goloop/poller"
	"golang.org/x/sys/unix"
)

// readBufSize is asyncio's max_size: the most one read takes from a socket.
const readBufSize = 256 * 1024

// maxIovecs bounds one writev.
const maxIovecs = 64

// seg is one queued write: a view of a bytes object the queue keeps a reference to (no
// copy), or a Go-owned copy of a mutable buffer (obj == nil).
type seg struct {
	b   []byte
	obj pyObj
}

// conn is the Go state of one stream transport (TCP or Unix socket).
type conn struct {
	id       int
	l        *loop
	tr       *C.GLTransport
	fd       int
	reading  bool // the transport wants data (started, not paused, not closing)
	detached bool
	dirty    bool // on l.dirty: has writes to flush at the end of this iteration

	buffered      bool
	onData        pyObj        // protocol.data_received
	lastRead      C.Py_ssize_t // bytes the last data_received got (picks the next read's buffer)
	getBuffer     pyObj        // BufferedProtocol.get_buffer
	bufferUpdated pyObj        // BufferedProtocol.buffer_updated

	wq    []seg
	whead int // first unsent segment
	woff  int // bytes of wq[whead] already sent
	wsize int // bytes queued, mirrored in tr.write_size
	iov   []unix.Iovec
}

// conns maps GLTransport.conn-1 to its state; loops in several threads use it at once.
var conns idtable.Table[conn]

func connOf(tr *C.GLTransport) *conn {
	return conns.Get(int(tr.conn) - 1)
}

func trObj(tr *C.GLTransport) pyObj { return (*C.PyObject)(unsafe.Pointer(tr)) }

var (
	cReadEOF        = C.CString("_read_ready__on_eof")
	cWriteDrained   = C.CString("_write_drained")
	cResumeProtocol = C.CString("_maybe_resume_protocol")
	cPauseProtocol  = C.CString("_maybe_pause_protocol")
	cDataReceived   = C.CString("data_received")
	cGetBuffer      = C.CString("get_buffer")
	cBufferUpdated  = C.CString("buffer_updated")
	msgReadErr      = C.CString("Fatal read error on socket transport")
	msgWriteErr     = C.gl_msg_write_err
	msgDataErr      = C.CString("Fatal error: protocol.data_received() call failed.")
	msgGetBufErr    = C.CString("Fatal error: protocol.get_buffer() call failed.")
	msgBufUpdErr    = C.CString("Fatal error: protocol.buffer_updated() call failed.")
)

// callMethod0 calls obj.name(); false means an exception is set.
func callMethod0(obj pyObj, name *C.char) bool {
	r := C.gl_call_method0(obj, name)
	if r == nil {
		return false
	}
	C.gl_decref(r)
	return true
}

// callMethod0In calls obj.name() in the contextvars context ctx (nil: the current one).
func callMethod0In(obj pyObj, name *C.char, ctx pyObj) bool {
	r := C.gl_call_method0_in(obj, name, ctx)
	if r == nil {
		return false
	}
	C.gl_decref(r)
	return true
}

// readCtx and writeCtx are the contexts the connection's reads and its queue's later sends
// call back in (see GLTransport in gl.h).
func (c *conn) readCtx() pyObj  { return c.tr.rctx }
func (c *conn) writeCtx() pyObj { return c.tr.wctx }

// sendCtx is the context flush's callbacks run in: the writer's when the loop sends
// (deferred), else the current one (nil).
func (c *conn) sendCtx(deferred bool) pyObj {
	if deferred {
		return c.writeCtx()
	}
	return nil
}

//export glConnAttach
func glConnAttach(tr *C.GLTransport, loopObj pyObj, fd C.int) (rc C.int) {
	defer recoverInt(&rc)
	if tr.conn != 0 {
		raise(C.PyExc_RuntimeError, "transport is already attached")
		return -1
	}
	l := getLoop((*C.GLLoop)(unsafe.Pointer(loopObj)))
	if !l.checkClosed() {
		return -1
	}
	c := &conn{l: l, tr: tr, fd: int(fd)}
	c.id, _ = conns.Add(c)
	C.gl_incref(trObj(tr)) // kept alive while the poller may deliver its events
	tr.conn = C.long(c.id + 1)
	tr.sock_fd = fd
	e := l.fds.get(int(fd))
	if e == nil {
		e = &fdEntry{}
		l.fds.set(int(fd), e)
	} else {
		l.claim(int(fd), e, nil, 0) // handles left by a closed socket that had this number
	}
	e.conn = c
	l.conns[c] = struct{}{}
	return 0
}

//export glConnSetProtocol
func glConnSetProtocol(tr *C.GLTransport, proto pyObj, buffered C.int) (rc C.int) {
	defer recoverInt(&rc)
	c := connOf(tr)
	if c == nil {
		return 0
	}
	c.dropProtocol()
	c.buffered = buffered != 0
	if c.buffered {
		c.getBuffer = C.gl_getattr(proto, cGetBuffer)
		c.bufferUpdated = C.gl_getattr(proto, cBufferUpdated)
		if c.getBuffer == nil || c.bufferUpdated == nil {
			c.dropProtocol()
			return -1
		}
	} else if c.onData = C.gl_getattr(proto, cDataReceived); c.onData == nil {
		return -1
	}
	return 0
}

func (c *conn) dropProtocol() {
	for _, p := range []*pyObj{&c.onData, &c.getBuffer, &c.bufferUpdated} {
		if *p != nil {
			C.gl_decref(*p)
			*p = nil
		}
	}
}

// want is the epoll interest the connection needs now.
func (c *conn) want() uint32 {
	var ev uint32
	if c.reading {
		ev |= poller.Readable
	}
	if c.wsize > 0 {
		ev |= poller.Writable
	}
	return ev
}

// update registers the connection's current interest (with the fd's other users'). Read
// interest the transport drops (pause_reading) stays registered until an event finds it
// not reading (onEvent: sync now): a protocol that pauses and resumes reading within a few
// iterations, as uvicorn's flow control does around each request body, costs no epoll_ctl
// (was two a request, the pause's and the resume's).
func (c *conn) update() { c.sync(false) }

// sync is update; now: drop read interest it kept too.
func (c *conn) sync(now bool) {
	if c.detached {
		return
	}
	e := c.l.fds.get(c.fd)
	if e == nil || e.conn != c {
		return
	}
	want := c.want()
	if !e.idle && (want == e.registered || (!now && e.registered&^want == poller.Readable && want&^e.registered == 0)) {
		return
	}
	c.l.sync(c.fd, e)
}

//export glConnRead
func glConnRead(tr *C.GLTransport, on C.int) (rc C.int) {
	defer recoverInt(&rc)
	if c := connOf(tr); c != nil {
		c.reading = on != 0
		c.update()
	}
	return 0
}

//export glConnEvents
func glConnEvents(tr *C.GLTransport) (ev C.long) {
	defer func() { recover() }()
	c := connOf(tr)
	if c == nil {
		return 0
	}
	w := c.want()
	if w&poller.Readable != 0 {
		ev |= 1
	}
	if w&poller.Writable != 0 {
		ev |= 2
	}
	return ev
}

// glConnWrite queues data; it leaves with the other writes of this loop iteration at its end
// (one writev), or at once when the queue passes the high-water mark. more != 0: another
// part of the same write follows (gl_transport_write_seq), which makes that check.
//
//export glConnWrite
func glConnWrite(tr *C.GLTransport, obj pyObj, buf *C.char, n C.Py_ssize_t, isBytes C.int, more C.int) (rc C.int) {
	defer recoverInt(&rc)
	c := connOf(tr)
	if c == nil {
		return 0
	}
	c.absorb() // what write() staged in C goes first
	// (a mutable buffer written with nothing queued was offered to the socket by write(): this
	// is what it did not take, copied below)
	src := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	if isBytes != 0 {
		C.gl_incref(obj)
		c.wq = append(c.wq, seg{b: src, obj: obj})
	} else if k := len(c.wq); k > c.whead && c.wq[k-1].obj == nil && cap(c.wq[k-1].b)-len(c.wq[k-1].b) >= len(src) {
		c.wq[k-1].b = append(c.wq[k-1].b, src...)
	} else {
		c.wq = append(c.wq, seg{b: append(make([]byte, 0, max(len(src), 4096)), src...)})
	}
	c.wsize += int(n)
	tr.write_size = C.Py_ssize_t(c.wsize)
	if c.wsize > int(tr.high_water) && more == 0 {
		if !c.flush(false) { // inside write(): its caller's context, as asyncio's send
			return -1
		}
		if c.wsize > int(tr.high_water) && tr.protocol_paused == 0 && !c.detached {
			if !callMethod0(trObj(tr), cPauseProtocol) {
				return -1
			}
		}
		return 0
	}
	if !c.dirty {
		c.dirty = true
		c.l.dirty = append(c.l.dirty, c)
		c.l.endFastRun()
	}
	return 0
}

// flush sends what it can of the queue. It returns false when a Python exception must
// propagate out of the loop (SystemExit, KeyboardInterrupt); other errors go to the
// transport's _fatal_error as in asyncio.
//
// deferred: the loop sends (at the end of an iteration, or the socket turned writable); it
// then makes the calls a drained queue is due (the protocol's resume_writing through
// _maybe_resume_protocol, connection_lost or the EOF through _write_drained), as asyncio's
// _write_ready does, in the writer's context as asyncio's writer handle would. A flush made
// inside a Python call (write() past the high-water mark, abort()) passes false: asyncio's
// write() never calls the protocol back, and a TLS protocol writing from its
// resume_writing() must not see connection_lost() before that write returns. Those calls
// are then left to the end of the iteration (the dirty list); a write error is reported in
// the caller's context, as asyncio's send would raise it there.
func (c *conn) flush(deferred bool) bool {
	c.absorb()
	// the context is read at each call (sendCtx): a callback may replace it (a write() that
	// finds the queue empty), which releases the one it had
	for c.wsize > 0 && !c.detached {
		var n int
		var err error
		if c.whead == len(c.wq)-1 {
			n, err = poller.RawSend(c.fd, c.wq[c.whead].b[c.woff:])
		} else {
			iov := c.iov[:0]
			for i := c.whead; i < len(c.wq) && len(iov) < maxIovecs; i++ {
				b := c.wq[i].b
				if i == c.whead {
					b = b[c.woff:]
				}
				v := unix.Iovec{Base: &b[0]}
				v.SetLen(len(b))
				iov = append(iov, v)
			}
			c.iov = iov
			n, err = poller.RawSendv(c.fd, iov)
		}
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			break
		}
		if err != nil {
			return c.writeFailed(err.(unix.Errno), deferred)
		}
		c.consume(n)
	}
	c.tr.write_blocked = 0
	if c.wsize > 0 {
		c.tr.write_blocked = 1
	}
	c.update()
	if !deferred {
		if c.notifyDue() && !c.dirty {
			c.dirty = true
			c.l.dirty = append(c.l.dirty, c)
			c.l.endFastRun()
		}
		return true
	}
	if c.resumeDue() {
		if !callMethod0In(trObj(c.tr), cResumeProtocol, c.sendCtx(true)) {
			return false
		}
	}
	if c.drainedDue() {
		if !callMethod0In(trObj(c.tr), cWriteDrained, c.sendCtx(true)) {
			return false
		}
	}
	return true
}

// resumeDue: the protocol was paused and the queue is at the low-water mark. Not once the
// connection is lost (_force_close): asyncio stops writing then, and calls nothing more.
func (c *conn) resumeDue() bool {
	tr := c.tr
	return !c.detached && tr.conn_lost == 0 && tr.protocol_paused != 0 && c.wsize <= int(tr.low_water)
}

// drainedDue: the queue is empty and a close, write_eof() or sendfile waits for that.
func (c *conn) drainedDue() bool {
	tr := c.tr
	return !c.detached && tr.conn_lost == 0 && c.wsize == 0 &&
		(tr.closing != 0 || tr.eof != 0 || tr.sendfile_busy != 0)
}

func (c *conn) notifyDue() bool { return c.resumeDue() || c.drainedDue() }

// consume drops n sent bytes from the head of the queue.
func (c *conn) consume(n int) {
	c.wsize -= n
	for n > 0 {
		s := &c.wq[c.whead]
		rest := len(s.b) - c.woff
		if n < rest {
			c.woff += n
			break
		}
		n -= rest
		if s.obj != nil {
			C.gl_decref(s.obj)
		}
		*s = seg{}
		c.whead++
		c.woff = 0
	}
	if c.whead == len(c.wq) {
		c.wq = c.wq[:0]
		c.whead = 0
	} else if c.whead >= 64 && 2*c.whead >= len(c.wq) {
		// A queue that never empties (a writer resumed at the low-water mark keeps writing)
		// must not keep its sent prefix: move the rest down.
		k := copy(c.wq, c.wq[c.whead:])
		clear(c.wq[k:])
		c.wq = c.wq[:k]
		c.whead = 0
	}
	c.tr.write_size = C.Py_ssize_t(c.wsize)
}

// writeFailed drops the queue and reports a send's error err to the transport's
// _fatal_error (see flush for deferred); false: an exception must propagate.
func (c *conn) writeFailed(err unix.Errno, deferred bool) bool {
	c.clearWrite()
	c.update()
	C.gl_set_oserror(C.int(err))
	return C.gl_call_fatal_in(trObj(c.tr), msgWriteErr, c.sendCtx(deferred)) == 0
}

// absorb moves what write() staged in C (gl.h, GLTransport.wstage; only while this queue
// is empty) into the queue, with the references it holds; write_size counts it already.
func (c *conn) absorb() {
	tr := c.tr
	n := int(tr.nwstage)
	if n == 0 {
		return
	}
	for i := 0; i < n; i++ {
		b := unsafe.Slice((*byte)(unsafe.Pointer(tr.wstage_buf[i])), int(tr.wstage_len[i]))
		if i == 0 {
			b = b[int(tr.wstage_off):]
		}
		c.wq = append(c.wq, seg{b: b, obj: tr.wstage[i]})
		c.wsize += len(b)
		tr.wstage[i] = nil
	}
	tr.nwstage = 0
	tr.wstage_off = 0
}

func (c *conn) clearWrite() {
	c.absorb()
	for i := c.whead; i < len(c.wq); i++ {
		if c.wq[i].obj != nil {
			C.gl_decref(c.wq[i].obj)
		}
		c.wq[i] = seg{}
	}
	c.wq = c.wq[:0]
	c.whead, c.woff, c.wsize = 0, 0, 0
	c.tr.write_size = 0
	c.tr.write_blocked = 0
}

//export glConnClearWrite
func glConnClearWrite(tr *C.GLTransport) (rc C.int) {
	defer recoverInt(&rc)
	if c := connOf(tr); c != nil {
		c.clearWrite()
		c.update()
	}
	return 0
}

//export glConnFlush
func glConnFlush(tr *C.GLTransport) (rc C.int) {
	defer recoverInt(&rc)
	if c := connOf(tr); c != nil && !c.flush(false) {
		return -1
	}
	return 0
}

// onEvent handles readiness of the connection's socket; false: an exception must propagate.
func (c *conn) onEvent(ev uint32) bool {
	if ev&(poller.Readable|poller.Error|poller.Hangup) != 0 {
		if !c.reading {
			c.sync(true) // (read interest kept after a pause: update)
		} else if !c.onReadable() {
			return false
		}
	}
	if !c.detached && c.wsize > 0 && ev&(poller.Writable|poller.Error|poller.Hangup) != 0 {
		return c.flush(true)
	}
	return true
}

func (c *conn) onReadable() bool {
	tr := c.tr
	if tr.conn_lost != 0 {
		return true
	}
	if c.buffered {
		return c.readBuffered()
	}
	// onData a PyObject, rbuf C memory: plain integers for cgo (see gl.h)
	n := C.gl_read_deliver_u(C.uintptr_t(uintptr(unsafe.Pointer(c.onData))), C.int(c.fd),
		C.uintptr_t(uintptr(unsafe.Pointer(&c.l.rbuf[0]))), C.Py_ssize_t(len(c.l.rbuf)), c.lastRead,
		C.uintptr_t(uintptr(unsafe.Pointer(c.readCtx()))), C.uintptr_t(uintptr(unsafe.Pointer(tr))))
	switch {
	case n > 0:
		c.lastRead = n
		return true
	case n == 0:
		return callMethod0In(trObj(tr), cReadEOF, c.readCtx())
	case n <= C.GL_RB_ERRNO:
		return c.readError(unix.Errno(C.GL_RB_ERRNO - n))
	default:
		return C.gl_call_fatal_in(trObj(tr), msgDataErr, c.readCtx()) == 0
	}
}

func (c *conn) readError(err error) bool {
	if err == unix.EAGAIN || err == unix.EINTR {
		return true
	}
	C.gl_set_oserror(C.int(err.(unix.Errno)))
	return C.gl_call_fatal_in(trObj(c.tr), msgReadErr, c.readCtx()) == 0
}

func (c *conn) readBuffered() bool {
	// PyObject pointers as plain integers for cgo (see gl.h)
	n := C.gl_read_buffered_u(C.uintptr_t(uintptr(unsafe.Pointer(c.getBuffer))),
		C.uintptr_t(uintptr(unsafe.Pointer(c.bufferUpdated))), C.int(c.fd),
		C.uintptr_t(uintptr(unsafe.Pointer(c.readCtx()))), C.uintptr_t(uintptr(unsafe.Pointer(c.tr))))
	switch {
	case n > 0:
		return true
	case n == 0:
		return callMethod0In(trObj(c.tr), cReadEOF, c.readCtx())
	case n <= C.GL_RB_ERRNO:
		return c.readError(unix.Errno(C.GL_RB_ERRNO - n))
	case n == C.GL_RB_GETBUF:
		return C.gl_call_fatal_in(trObj(c.tr), msgGetBufErr, c.readCtx()) == 0
	default:
		return C.gl_call_fatal_in(trObj(c.tr), msgBufUpdErr, c.readCtx()) == 0
	}
}

// detach unregisters the socket and drops every reference the Go side holds for it. The
// caller (the transport's Python code) then closes the socket.
func (c *conn) detach() {
	if c.detached {
		return
	}
	c.reading = false
	c.clearWrite()
	c.detached = true
	if e := c.l.fds.get(c.fd); e != nil && e.conn == c {
		e.conn = nil
		c.l.sync(c.fd, e)
	}
	delete(c.l.conns, c)
	c.dropProtocol()
	conns.Del(c.id)
	tr := c.tr
	tr.conn = 0
	C.gl_tr_clear_ctx(tr)
	C.gl_decref(trObj(tr))
}

//export glConnDetach
func glConnDetach(tr *C.GLTransport) (rc C.int) {
	defer recoverInt(&rc)
	if c := connOf(tr); c != nil {
		c.detach()
	}
	return 0
}

// flushDirty sends the writes queued during this iteration: first, in one call into C,
// what write() staged there (loop_transport.c); the transports C hands back (data left, an
// error, or calls due: see gl_flush_staged) join Go's list.
func (l *loop) flushDirty() bool {
	if self := l.self; self.nwdirty > 0 {
		k := int(C.gl_flush_staged_u(C.uintptr_t(uintptr(unsafe.Pointer(self)))))
		var failed []*conn
		for _, p := range unsafe.Slice(self.wdirty, k) {
			tr := (*C.GLTransport)(unsafe.Pointer(p))
			tr.wlisted = 0
			c := connOf(tr)
			if c == nil {
				continue
			}
			c.absorb()
			if tr.wstage_err != 0 {
				failed = append(failed, c)
			} else if !c.dirty {
				c.dirty = true
				l.dirty = append(l.dirty, c)
			}
		}
		self.nwdirty = 0
		for i, c := range failed {
			err := unix.Errno(c.tr.wstage_err)
			c.tr.wstage_err = 0
			if !c.detached && !c.writeFailed(err, true) {
				for _, d := range failed[i+1:] { // sent again in the next iteration
					d.tr.wstage_err = 0
					d.dirty = true
					l.dirty = append(l.dirty, d)
				}
				return false
			}
		}
	}
	for i := 0; i < len(l.dirty); i++ {
		c := l.dirty[i]
		l.dirty[i] = nil
		c.dirty = false
		if !c.detached && (c.wsize > 0 || c.notifyDue()) && !c.flush(true) {
			// keep the rest for the next iteration
			l.dirty = append(l.dirty[:0], l.dirty[i+1:]...)
			return false
		}
	}
	l.dirty = l.dirty[:0]
	return true
}
