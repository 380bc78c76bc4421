package main

// goloop serve's binding, ASGI's Go side: an ASGI server's httpSrv (server.go) attached to
// its loop as a loop hook (loop.go). The engine queues its events (requests, wakes, closed connections): with the
// default loop driver its handlers run on the loop thread from the poll's dispatch; with
// GOLOOP_SERVE_READERS=goroutines, connection goroutines queue them and Notify wakes the
// poll. runOnce takes the queue twice per iteration (take: at the start, and after a poll
// with events) and asgi.c turns each request into an ASGI call; flush writes the output.
// The code runs on the loop thread, apart from Notify (poll.Wake) and glAsgiReqFree (any
// thread that frees the send object).

/*
#include "asgi.h"
*/
import "C"

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goloop/goloop/goloop/httpserver"
	"github.com/goloop/goloop/goloop/idtable"
)

// asgi is the server's Python object as ASGI's (an AsgiServer: only for an ASGI server).
func (sv *httpSrv) asgi() *C.GLAsgiServer { return (*C.GLAsgiServer)(unsafe.Pointer(sv.py)) }

var asgiReqs idtable.Table[httpserver.Request]

//export glAsgiServerNew
func glAsgiServerNew(py *C.GLAsgiServer, lp *C.GLLoop, maxHead, keepAliveMs, limitConc C.long,
	serverHdr, dateHdr C.int, headers *C.char, hlen C.Py_ssize_t) (rc C.int) {
	defer recoverInt(&rc)
	l := getLoop(lp)
	if !l.checkClosed() {
		return -1
	}
	sv := newHttpSrv(&py.base, l, serverConfig(maxHead, keepAliveMs, limitConc, serverHdr, dateHdr, headers, hlen))
	sv.beforeAbort = sv.finishPending
	if !goroutineReaders() {
		sv.s.SetLoop(drvPoller{l})
	}
	l.addHook(sv)
	l.endFastRun()
	return 0
}

// An ASGI server's httpSrv is its loop hook (loop.go): take, flush, loopClosed (a WSGI
// server's hook is wsgi.go's wsgiHook).

// loopClosed: the loop closes; its servers close with it.
func (sv *httpSrv) loopClosed() {
	sv.finishPending()
	sv.s.Abort()
	sv.release()
}

// take takes the server's queue and starts its requests (asgi.c), resumes the
// receive/send waits that events ended, and handles closed connections. runOnce calls it
// at the iteration's start and after the poll's events (the loop driver's reads queue
// requests).
func (sv *httpSrv) take() {
	sv.finishPending()
	sv.dropHeld()
	if sv.s.HasWarnings() {
		sv.logWarnings()
	}
	if !sv.s.Pending() {
		return
	}
	sv.evs = sv.s.Take(sv.evs[:0])
	for j := range sv.evs {
		ev := sv.evs[j]
		sv.evs[j] = httpserver.Event{}
		if sv.py.sid < 0 { // released by the previous event's Python code
			continue
		}
		switch ev.Kind {
		case httpserver.EvRequest:
			sv.start(ev.Req)
		case httpserver.EvWake:
			sv.wake(ev.Req)
		case httpserver.EvConnClosed:
			sv.connClosed(ev.Req.Conn())
		}
	}
}

// goroutineReaders: GOLOOP_SERVE_READERS=goroutines selects the goroutine driver (a
// goroutine per connection) instead of the loop driver. Read with C's getenv: Go's copy
// of the environment is the one of the library's load, and Python's os.environ changes
// the C one.
func goroutineReaders() bool {
	v := C.getenv(cReadersEnv)
	return v != nil && C.GoString(v) == "goroutines"
}

var cReadersEnv = C.CString("GOLOOP_SERVE_READERS")

// drvPoller is goloop serve's loop driver's poller (httpserver.LoopPoller): the loop's epoll
// and fdTable; the engine's handlers run from dispatch, on the loop thread.
type drvPoller struct{ l *loop }

func (p drvPoller) Register(fd int, events uint32, h func(uint32)) error {
	l := p.l
	if e := l.fds.get(fd); e != nil && !e.idle && e.drv == nil {
		return unix.EEXIST // Python watches a descriptor of this number: not ours
	}
	if err := l.poll.Add(fd, events); err != nil {
		return err
	}
	l.fds.set(fd, &fdEntry{drv: h, registered: events})
	return nil
}

func (p drvPoller) Modify(fd int, events uint32) error {
	e := p.l.fds.get(fd)
	if e == nil || e.drv == nil {
		return unix.ENOENT
	}
	e.registered = events
	return p.l.poll.Mod(fd, events)
}

func (p drvPoller) Unregister(fd int) {
	if e := p.l.fds.get(fd); e != nil && e.drv != nil {
		p.l.poll.Del(fd)
		p.l.fds.del(fd)
	}
}

// flush writes the responses the iteration's handles produced: runOnce calls it after
// running them (one non-blocking write per connection with output, from Go: no handle,
// no extra iteration).
func (sv *httpSrv) flush() {
	sv.finishPending()
	if sv.s.NeedFlush() {
		sv.s.Flush()
	}
}

// head is what C makes r's scope from (asgi.h's GLHead): r's head, its connection's
// addresses, what trusted proxy headers changed, the WebSocket subprotocols offered, and the
// connection's extensions (ext, or nil). Go copies them into the server's C scratch (a few
// hundred bytes): C memory holds no Go pointer, and a call with one pointer argument checks
// less than one with six Go pointers.
func (sv *httpSrv) head(r *httpserver.Request, ext pyObj) *C.GLHead {
	return sv.headBuf.fill(r, ext)
}

func (sv *httpSrv) start(r *httpserver.Request) {
	if r.WS() != nil {
		sv.startWS(r) // a WebSocket handshake (asgi_ws.go)
		return
	}
	rid, _ := asgiReqs.Add(r)
	ext, owned := sv.scopeExt(r.Conn())
	rc := C.gl_asgi_request(sv.asgi(), C.long(rid), sv.head(r, ext))
	if owned {
		C.gl_decref(ext)
	}
	if rc < 0 { // the call could not start (reported by asgi.c): a 500
		r.Done(false)
		asgiReqs.Del(rid)
	}
}

func (sv *httpSrv) wake(r *httpserver.Request) {
	if r.Tag == nil {
		return
	}
	o := (*C.GLAsgiSend)(r.Tag)
	if C.gl_asgi_wake(o, cbool(r.WS() != nil)) == 0 { // nothing left to wait for
		r.Tag = nil
		delete(sv.tagged, r)
		C.gl_decref(pyObj(unsafe.Pointer(o)))
	}
}

func getReq(rid C.long) *httpserver.Request {
	return asgiReqs.Get(int(rid))
}

// glAsgiStart is http.response.start.
//
//export glAsgiStart
func glAsgiStart(sid, rid C.long, status C.int, hdr *C.char, n C.Py_ssize_t) (rc C.int) {
	defer recoverInt(&rc)
	r := getReq(rid)
	if r == nil {
		return C.GL_ERR_GONE
	}
	return asgiErr(r.Start(int(status), bytesFromC(hdr, n)))
}

func asgiErr(err error) C.int {
	switch err {
	case nil:
		return C.GL_OK
	case httpserver.ErrDisconnected:
		return C.GL_ERR_DISCONNECTED
	}
	raise(C.PyExc_RuntimeError, err.Error())
	return C.GL_ERR_RUNTIME
}

// glAsgiSend is http.response.body (obj: see sendBody).
//
//export glAsgiSend
func glAsgiSend(sid, rid C.long, body *C.char, n C.Py_ssize_t, more C.int, obj *C.PyObject) (rc C.int) {
	defer recoverInt(&rc)
	r := getReq(rid)
	if r == nil {
		return C.GL_ERR_GONE
	}
	return sendBody(sid, r, body, n, more, obj)
}

// glAsgiStartSend is http.response.start (held by asgi.c until now) and the first
// http.response.body in one call.
//
//export glAsgiStartSend
func glAsgiStartSend(sid, rid C.long, status C.int, hdr *C.char, hn C.Py_ssize_t, body *C.char, n C.Py_ssize_t,
	more C.int, obj *C.PyObject) (rc C.int) {
	defer recoverInt(&rc)
	r := getReq(rid)
	if r == nil {
		return C.GL_ERR_GONE
	}
	if err := r.Start(int(status), bytesFromC(hdr, hn)); err != nil {
		return asgiErr(err)
	}
	return sendBody(sid, r, body, n, more, obj)
}

// sendBody sends a body part. obj, when not NULL, is the body's bytes object (immutable):
// a large body is then held by the loop driver instead of copied, with a strong reference
// released on the loop thread once the kernel took the bytes (httpserver.Request.SendHeld);
// on an HTTP/2 stream, held while the client's window keeps it, the reference queued for
// the loop thread when it went (SendHeldAnywhere, server_held.go).
func sendBody(sid C.long, r *httpserver.Request, body *C.char, n C.Py_ssize_t, more C.int, obj *C.PyObject) C.int {
	// (a small part on HTTP/2 is offered too: held while its connection is over the
	// output's bound, which its send then waits for, rather than copied per stream)
	if obj == nil || (int(n) < httpserver.HoldMin && !r.H2()) {
		return sendRC(r.Send(bytesFromC(body, n), more != 0))
	}
	sv := servers.Get(int(sid))
	if sv == nil {
		return sendRC(r.Send(bytesFromC(body, n), more != 0))
	}
	C.gl_incref(obj)
	var flags int
	var held bool
	var err error
	if r.H2() { // released where the window let the body go: queued for the loop thread
		flags, held, err = r.SendHeldAnywhere(bytesFromC(body, n), more != 0, func() { sv.releaseLater(obj) })
	} else {
		flags, held, err = r.SendHeld(bytesFromC(body, n), more != 0, func() { C.gl_decref(obj) })
	}
	if !held {
		C.gl_decref(obj)
	}
	return sendRC(flags, err)
}

// sendRC is the answer to a body part's send: an error, GL_PAUSED or GL_OK.
func sendRC(flags int, err error) C.int {
	if err != nil {
		return asgiErr(err)
	}
	if flags&httpserver.SendPaused != 0 {
		return C.GL_PAUSED
	}
	return C.GL_OK
}

// glAsgiRecv takes the body received so far: a new bytes object (body states) or None.
//
//export glAsgiRecv
func glAsgiRecv(rid C.long, state *C.int) (ret pyObj) {
	defer recoverObj(&ret)
	r := getReq(rid)
	if r == nil {
		*state = C.GL_RECV_DISCONNECT
		return C.gl_none()
	}
	b, st := r.Receive()
	*state = C.int(st)
	if st != httpserver.RecvBody && st != httpserver.RecvLast {
		return C.gl_none()
	}
	if len(b) == 0 {
		return C.gl_bytes(nil, 0)
	}
	o := C.gl_bytes((*C.char)(unsafe.Pointer(&b[0])), C.Py_ssize_t(len(b)))
	r.Release(b)
	return o
}

// glAsgiSendReady: 1 the paused sender may go on, 0 it waits, GL_ERR_DISCONNECTED.
//
//export glAsgiSendReady
func glAsgiSendReady(rid C.long) (rc C.int) {
	defer recoverInt(&rc)
	r := getReq(rid)
	if r == nil {
		return C.GL_ERR_DISCONNECTED
	}
	ok, err := r.SendReady()
	if err != nil {
		return C.GL_ERR_DISCONNECTED
	}
	if ok {
		return 1
	}
	return 0
}

// glAsgiWait: the send object o waits on a Future: Go keeps a reference to it until the
// EvWake that ends the wait (loop thread).
//
//export glAsgiWait
func glAsgiWait(sid, rid C.long, o *C.GLAsgiSend) (rc C.int) {
	defer recoverInt(&rc)
	r := getReq(rid)
	sv := servers.Get(int(sid))
	if r == nil || sv == nil {
		return 0
	}
	if r.Tag == nil {
		C.gl_incref(pyObj(unsafe.Pointer(o)))
		r.Tag = unsafe.Pointer(o)
		sv.tagged[r] = struct{}{}
	}
	return 0
}

// glAsgiDone: the application's call for a request or a WebSocket session returned
// (failed: it raised): a response not started is answered 500, an accepted session closes
// (1011 when failed). Returns what was found (httpserver.Finish*: what the server logs).
//
//export glAsgiDone
func glAsgiDone(sid, rid C.long, failed C.int) (rc C.int) {
	defer recoverInt(&rc)
	if r := getReq(rid); r != nil {
		return C.int(r.Finish(failed != 0))
	}
	return httpserver.FinishOK
}

// glAsgiFinish is glAsgiDone that also forgets the request (asgi.c gl_asgi_finish: the
// application's call returned in an AsgiRun).
//
//export glAsgiFinish
func glAsgiFinish(rid C.long, failed C.int) (rc C.int) {
	defer recoverInt(&rc)
	rc = httpserver.FinishOK
	if r := getReq(rid); r != nil {
		asgiReqs.Del(int(rid))
		if r.Tag == nil {
			// nothing of the binding refers to r any more (the send object's id is let go of
			// now, no Future waits on it): its connection may reuse it for its next request
			return C.int(r.FinishReleased(failed != 0))
		}
		rc = C.int(r.Finish(failed != 0))
	}
	return rc
}

// finishPending finishes the requests C let go of when their application returned after
// completing the response (asgi.c gl_asgi_finish_done): what glAsgiFinish does for each,
// without a call into Go per request. Run before the server's events are taken, before its
// output is flushed and when it is released.
func (sv *httpSrv) finishPending() {
	a := sv.asgi()
	n := int(a.nfin)
	if n == 0 {
		return
	}
	a.nfin = 0
	for _, rid := range unsafe.Slice(a.fin, n) {
		if r := getReq(rid); r != nil {
			asgiReqs.Del(int(rid))
			if r.Tag == nil {
				r.FinishReleased(false)
			} else {
				r.Finish(false)
			}
		}
	}
}

// glAsgiStatus is the response's status (101: a WebSocket session accepted; 0: not started).
//
//export glAsgiStatus
func glAsgiStatus(rid C.long) (rc C.int) {
	defer recoverInt(&rc)
	if r := getReq(rid); r != nil {
		return C.int(r.Status())
	}
	return 0
}

// glAsgiReqFree: the send object of a request or a WebSocket session is freed (any thread
// that frees Python objects).
//
//export glAsgiReqFree
func glAsgiReqFree(rid C.long) {
	defer func() { recover() }()
	if r := getReq(rid); r != nil {
		r.Done(false)
		asgiReqs.Del(int(rid))
	}
}
