package main

// goloop serve's binding (Go side): an asgi.Server attached to a loop. Its connection
// goroutines queue requests; the loop thread takes the queue once per iteration (takeASGI,
// called by runOnce) and asgi.c turns each request into an ASGI call. Only the loop
// thread runs this file's code, apart from the Notify the goroutines call (poll.Wake).

/*
#include "asgi.h"
*/
import "C"

import (
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goloop/goloop/goloop/asgi"
	"github.com/goloop/goloop/goloop/idtable"
)

type asgiSrv struct {
	id     int
	l      *loop
	py     *C.GLAsgiServer
	s      *asgi.Server
	evs    []asgi.Event
	tagged map[*asgi.Request]struct{} // requests whose Tag holds a reference to their send object
	// the extensions dict of each TLS connection's scopes, with "tls" (asgi_tls.go)
	tlsConns map[*asgi.Conn]pyObj
}

var (
	asgiServers idtable.Table[asgiSrv]
	asgiReqs    idtable.Table[asgi.Request]
)

func getSrv(sid C.long) *asgiSrv {
	sv := asgiServers.Get(int(sid))
	if sv == nil {
		panic("goloop: ASGI server released")
	}
	return sv
}

//export glAsgiServerNew
func glAsgiServerNew(py *C.GLAsgiServer, lp *C.GLLoop, maxHead, keepAliveMs, limitConc C.long,
	serverHdr, dateHdr C.int, headers *C.char, hlen C.Py_ssize_t) (rc C.int) {
	defer recoverInt(&rc)
	l := getLoop(lp)
	if !l.checkClosed() {
		return -1
	}
	cfg := asgi.Config{
		MaxHeadSize:      int(maxHead),
		KeepAliveTimeout: time.Duration(keepAliveMs) * time.Millisecond,
		LimitConcurrency: int(limitConc),
		ServerHeader:     serverHdr != 0,
		DateHeader:       dateHdr != 0,
	}
	if hlen > 0 {
		for _, line := range strings.Split(C.GoStringN(headers, C.int(hlen)), "\n") {
			if name, value, ok := strings.Cut(line, ":"); ok {
				cfg.Headers = append(cfg.Headers, [2]string{name, value})
			}
		}
	}
	poll := l.poll
	cfg.Notify = func() { poll.Wake() } // ErrClosed: the loop is gone, nobody to wake
	sv := &asgiSrv{l: l, py: py, s: asgi.New(cfg), tagged: map[*asgi.Request]struct{}{},
		tlsConns: map[*asgi.Conn]pyObj{}}
	if !goroutineReaders() {
		sv.s.SetLoop(drvPoller{l})
	}
	id, _ := asgiServers.Add(sv)
	sv.id = id
	py.sid = C.long(id)
	l.asgi = append(l.asgi, sv)
	l.endFastRun()
	return 0
}

//export glAsgiListen
func glAsgiListen(sid C.long, fd C.int) (rc C.int) {
	defer recoverInt(&rc)
	if err := getSrv(sid).s.ListenFd(int(fd)); err != nil {
		raiseErr(err)
		return -1
	}
	return 0
}

//export glAsgiClose
func glAsgiClose(sid C.long, abort C.int) (rc C.int) {
	defer recoverInt(&rc)
	sv := getSrv(sid)
	if abort != 0 {
		sv.s.Abort()
	} else {
		sv.s.Close()
	}
	return 0
}

//export glAsgiStats
func glAsgiStats(sid C.long, conns, inflight, requests *C.long) (rc C.int) {
	defer recoverInt(&rc)
	sv := getSrv(sid)
	*conns = C.long(sv.s.Connections())
	*inflight = C.long(sv.s.InFlight())
	*requests = C.long(sv.s.Requests())
	return 0
}

//export glAsgiFlush
func glAsgiFlush(sid C.long) (rc C.int) {
	defer recoverInt(&rc)
	if sv := asgiServers.Get(int(sid)); sv != nil {
		sv.s.Flush()
	}
	return 0
}

// glAsgiServerRelease closes the server now and drops the references Go holds (loop thread).
//
//export glAsgiServerRelease
func glAsgiServerRelease(sid C.long) {
	defer func() { recover() }()
	sv := asgiServers.Get(int(sid))
	if sv == nil {
		return
	}
	sv.s.Abort()
	sv.release()
}

func (sv *asgiSrv) release() {
	for r := range sv.tagged {
		if r.Tag != nil {
			o := pyObj(r.Tag)
			r.Tag = nil
			C.gl_decref(o)
		}
	}
	clear(sv.tagged)
	for c := range sv.tlsConns {
		sv.connClosed(c)
	}
	l := sv.l
	for i, x := range l.asgi {
		if x == sv {
			l.asgi = append(l.asgi[:i], l.asgi[i+1:]...)
			break
		}
	}
	asgiServers.Del(sv.id)
	sv.py.sid = -1
}

// releaseASGI: the loop closes; its servers close with it.
func (l *loop) releaseASGI() {
	for len(l.asgi) > 0 {
		sv := l.asgi[0]
		sv.s.Abort()
		sv.release()
	}
}

// takeASGI is runOnce's hook: it takes each server's queue and starts the requests
// (asgi.c), and resumes the receive/send waits that events ended; then it writes the
// output queued while the loop was not running and by the requests just started (on 3.12+
// their Tasks start eagerly: an application that does not wait answers here, and nothing
// may be left to run before the poll, which would then block with its response unwritten).
func (l *loop) takeASGI() bool {
	l.takeASGIQueues()
	l.flushASGI()
	return true
}

// takeASGIQueues takes each server's queue (runOnce: at the iteration's start, and after
// the poll's events, which the loop driver's reads queue requests from).
func (l *loop) takeASGIQueues() {
	for i := 0; i < len(l.asgi); i++ {
		sv := l.asgi[i]
		if !sv.s.Pending() {
			continue
		}
		sv.evs = sv.s.Take(sv.evs[:0])
		for j := range sv.evs {
			ev := sv.evs[j]
			sv.evs[j] = asgi.Event{}
			if sv.py.sid < 0 { // released by the previous event's Python code
				continue
			}
			switch ev.Kind {
			case asgi.EvRequest:
				sv.start(ev.Req)
			case asgi.EvWake:
				sv.wake(ev.Req)
			case asgi.EvConnClosed:
				sv.connClosed(ev.Req.Conn())
			}
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

// drvPoller is goloop serve's loop driver's poller (asgi.LoopPoller): the loop's epoll
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

// flushASGI writes the responses the iteration's handles produced: runOnce calls it after
// running them (one non-blocking write per connection with output, from Go: no handle,
// no extra iteration).
func (l *loop) flushASGI() {
	if len(l.asgi) == 0 {
		return
	}
	for _, sv := range l.asgi {
		if sv.s.NeedFlush() {
			sv.s.Flush()
		}
	}
}

// cview, cbytes: C's view of Go bytes for the length of one call (nil when empty).
func cview(s string) *C.char {
	if len(s) == 0 {
		return nil
	}
	return (*C.char)(unsafe.Pointer(unsafe.StringData(s)))
}

func cbytes(b []byte) *C.char {
	if len(b) == 0 {
		return nil
	}
	return (*C.char)(unsafe.Pointer(&b[0]))
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// proxyEnc is what trusted proxy headers changed in r ("scheme\nclient", asgi_ops.c), or nil.
func proxyEnc(r *asgi.Request) (*C.char, C.Py_ssize_t) {
	if p := r.Proxy; p != nil {
		return cbytes(p.Enc), C.Py_ssize_t(len(p.Enc))
	}
	return nil, 0
}

func (sv *asgiSrv) start(r *asgi.Request) {
	if r.WS() != nil {
		sv.startWS(r) // a WebSocket handshake (asgi_ws.go)
		return
	}
	rid, _ := asgiReqs.Add(r)
	c := r.Conn()
	penc, plen := proxyEnc(r)
	ext, owned := sv.scopeExt(c)
	rc := C.gl_asgi_request(sv.py, C.long(rid), cbytes(r.Blob), (*C.int32_t)(unsafe.Pointer(&r.Ends[0])), C.int(len(r.Ends)),
		C.int(r.Major), C.int(r.Minor), cview(c.Remote.Host), C.Py_ssize_t(len(c.Remote.Host)), C.int(c.Remote.Port),
		cview(c.Local.Host), C.Py_ssize_t(len(c.Local.Host)), C.int(c.Local.Port), cbool(c.Local.Unix), penc, plen, ext)
	if owned {
		C.gl_decref(ext)
	}
	if rc < 0 { // the call could not start (reported by asgi.c): a 500
		r.AppDone()
		asgiReqs.Del(rid)
	}
}

func (sv *asgiSrv) wake(r *asgi.Request) {
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

func getReq(rid C.long) *asgi.Request {
	return asgiReqs.Get(int(rid))
}

// glAsgiStart is http.response.start.
//
//export glAsgiStart
func glAsgiStart(sid, rid C.long, status C.int, hdr *C.char, n C.Py_ssize_t) (rc C.int) {
	defer recoverInt(&rc)
	r := getReq(rid)
	if r == nil {
		return C.GL_ASGI_ERR_GONE
	}
	return asgiErr(r.Start(int(status), cBytes(hdr, n)))
}

func asgiErr(err error) C.int {
	switch err {
	case nil:
		return C.GL_ASGI_OK
	case asgi.ErrDisconnected:
		return C.GL_ASGI_ERR_DISCONNECTED
	}
	raise(C.PyExc_RuntimeError, err.Error())
	return C.GL_ASGI_ERR_RUNTIME
}

// glAsgiSend is http.response.body (obj: see sendBody).
//
//export glAsgiSend
func glAsgiSend(sid, rid C.long, body *C.char, n C.Py_ssize_t, more C.int, obj *C.PyObject) (rc C.int) {
	defer recoverInt(&rc)
	r := getReq(rid)
	if r == nil {
		return C.GL_ASGI_ERR_GONE
	}
	return sendBody(r, body, n, more, obj)
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
		return C.GL_ASGI_ERR_GONE
	}
	if err := r.Start(int(status), cBytes(hdr, hn)); err != nil {
		return asgiErr(err)
	}
	return sendBody(r, body, n, more, obj)
}

// sendBody sends a body part. obj, when not NULL, is the body's bytes object (immutable):
// a large body is then held by the loop driver instead of copied, with a strong reference
// released on the loop thread once the kernel took the bytes (asgi.Request.SendHeld).
func sendBody(r *asgi.Request, body *C.char, n C.Py_ssize_t, more C.int, obj *C.PyObject) C.int {
	if obj == nil || int(n) < asgi.HoldMin {
		return sendRC(r.Send(cBytes(body, n), more != 0))
	}
	C.gl_incref(obj)
	flags, held, err := r.SendHeld(cBytes(body, n), more != 0, func() { C.gl_decref(obj) })
	if !held {
		C.gl_decref(obj)
	}
	return sendRC(flags, err)
}

// sendRC is the answer to a body part's send: an error, GL_ASGI_PAUSED or GL_ASGI_OK.
func sendRC(flags int, err error) C.int {
	if err != nil {
		return asgiErr(err)
	}
	if flags&asgi.SendPaused != 0 {
		return C.GL_ASGI_PAUSED
	}
	return C.GL_ASGI_OK
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
	if st != asgi.RecvBody && st != asgi.RecvLast {
		return C.gl_none()
	}
	if len(b) == 0 {
		return C.gl_bytes(nil, 0)
	}
	return C.gl_bytes((*C.char)(unsafe.Pointer(&b[0])), C.Py_ssize_t(len(b)))
}

// glAsgiSendReady: 1 the paused sender may go on, 0 it waits, GL_ASGI_ERR_DISCONNECTED.
//
//export glAsgiSendReady
func glAsgiSendReady(rid C.long) (rc C.int) {
	defer recoverInt(&rc)
	r := getReq(rid)
	if r == nil {
		return C.GL_ASGI_ERR_DISCONNECTED
	}
	ok, err := r.SendReady()
	if err != nil {
		return C.GL_ASGI_ERR_DISCONNECTED
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
	sv := asgiServers.Get(int(sid))
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

// appDone: the application's call for r (a request or a WebSocket session) returned, or
// raised (failed): a response not started is answered 500, an accepted session closes
// (1011 when failed).
func appDone(r *asgi.Request, failed bool) {
	if w := r.WS(); w != nil {
		w.AppDone(failed)
	} else {
		r.AppDone()
	}
}

// glAsgiDone: the application's call returned (failed: it raised).
//
//export glAsgiDone
func glAsgiDone(sid, rid C.long, failed C.int) (rc C.int) {
	defer recoverInt(&rc)
	if r := getReq(rid); r != nil {
		appDone(r, failed != 0)
	}
	return 0
}

// glAsgiStatus is the response's status (101: a WebSocket session accepted; 0: not started).
//
//export glAsgiStatus
func glAsgiStatus(rid C.long) (rc C.int) {
	defer recoverInt(&rc)
	if r := getReq(rid); r != nil && r.Started() {
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
		appDone(r, false)
		asgiReqs.Del(int(rid))
	}
}
