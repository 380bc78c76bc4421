package main

// goloop serve's binding (Go side): an httpserver.Server attached to a loop as a loop hook
// (loop.go). The engine queues its events (requests, wakes, closed connections): with the
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
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goloop/goloop/goloop/httpserver"
	"github.com/goloop/goloop/goloop/idtable"
)

type asgiSrv struct {
	id     int
	l      *loop
	py     *C.GLServer
	s      *httpserver.Server
	evs    []httpserver.Event
	tagged map[*httpserver.Request]struct{} // requests whose Tag holds a reference to their send object
	refs   heldRefs                         // held bodies' references to release on the loop thread (server_held.go)
	// the extensions dict of each TLS connection's ASGI scopes, with "tls" (asgi_spec.go)
	tlsConns map[*httpserver.Conn]pyObj
	headBuf  // the C memory head passes a request's scope fields in
	// onRelease, if set, runs when the server is released (a WSGI server's pool: wsgi.go)
	onRelease func()
}

// asgi is the server's Python object as ASGI's (an AsgiServer: only for an ASGI server).
func (sv *asgiSrv) asgi() *C.GLAsgiServer { return (*C.GLAsgiServer)(unsafe.Pointer(sv.py)) }

// headBuf is the C memory a request's head is passed to C in (head): the GLHead and
// its scratch. The loop thread's (asgiSrv), or each WSGI pool thread's own (wsgi.go).
type headBuf struct {
	hd         *C.GLHead
	scratch    unsafe.Pointer
	scratchLen int
}

func newHeadBuf() headBuf { return headBuf{hd: (*C.GLHead)(C.calloc(1, C.sizeof_GLHead))} }

func (b *headBuf) free() {
	C.free(unsafe.Pointer(b.hd))
	C.free(b.scratch)
	b.hd, b.scratch, b.scratchLen = nil, nil, 0
}

var (
	asgiServers idtable.Table[asgiSrv]
	asgiReqs    idtable.Table[httpserver.Request]
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
	sv := newAsgiSrv(&py.base, l, serverConfig(maxHead, keepAliveMs, limitConc, serverHdr, dateHdr, headers, hlen))
	if !goroutineReaders() {
		sv.s.SetLoop(drvPoller{l})
	}
	l.addHook(sv)
	l.endFastRun()
	return 0
}

// serverConfig is the engine's configuration from the server's constructor arguments.
func serverConfig(maxHead, keepAliveMs, limitConc C.long, serverHdr, dateHdr C.int, headers *C.char,
	hlen C.Py_ssize_t) httpserver.Config {
	cfg := httpserver.Config{
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
	return cfg
}

// newAsgiSrv makes the Go server of py (cfg.Notify: the loop's wake-up unless set) and
// registers it (py.sid).
func newAsgiSrv(py *C.GLServer, l *loop, cfg httpserver.Config) *asgiSrv {
	poll := l.poll
	if cfg.Notify == nil {
		cfg.Notify = func() { poll.Wake() } // ErrClosed: the loop is gone, nobody to wake
	}
	// the loop thread logs the engine's warnings (its hook's take: logWarnings)
	cfg.OnWarning = func() { poll.Wake() }
	sv := &asgiSrv{l: l, py: py, s: httpserver.New(cfg), tagged: map[*httpserver.Request]struct{}{},
		tlsConns: map[*httpserver.Conn]pyObj{}, headBuf: newHeadBuf()}
	id, _ := asgiServers.Add(sv)
	sv.id = id
	py.sid = C.long(id)
	return sv
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
	sv.l.removeHook(sv)
	if sv.onRelease != nil {
		sv.onRelease()
	}
	sv.dropHeld() // (the connections were aborted: their held bodies are queued)
	sv.headBuf.free()
	asgiServers.Del(sv.id)
	sv.py.sid = -1
}

// asgiSrv is a loop hook (loop.go): take, flush, loopClosed.

// loopClosed: the loop closes; its servers close with it.
func (sv *asgiSrv) loopClosed() {
	sv.s.Abort()
	sv.release()
}

// take takes the server's queue and starts its requests (asgi.c), resumes the
// receive/send waits that events ended, and handles closed connections. runOnce calls it
// at the iteration's start and after the poll's events (the loop driver's reads queue
// requests).
func (sv *asgiSrv) take() {
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

// logWarnings logs the engine's warnings for the operator (accept errors: EMFILE ...) on
// the "goloop.error" logger (server_proxy_metrics.c's gl_server_warn; loop thread).
func (sv *asgiSrv) logWarnings() {
	for _, msg := range sv.s.TakeWarnings() {
		cs := C.CString(msg)
		C.gl_server_warn(cs)
		C.free(unsafe.Pointer(cs))
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
func (sv *asgiSrv) flush() {
	if sv.s.NeedFlush() {
		sv.s.Flush()
	}
}

// head is what C makes r's scope from (asgi.h's GLHead): r's head, its connection's
// addresses, what trusted proxy headers changed, the WebSocket subprotocols offered, and the
// connection's extensions (ext, or nil). Go copies them into the server's C scratch (a few
// hundred bytes): C memory holds no Go pointer, and a call with one pointer argument checks
// less than one with six Go pointers.
func (sv *asgiSrv) head(r *httpserver.Request, ext pyObj) *C.GLHead {
	return sv.headBuf.fill(r, ext)
}

func (sv *headBuf) fill(r *httpserver.Request, ext pyObj) *C.GLHead {
	c := r.Conn()
	var protos string
	if ws := r.WS(); ws != nil {
		protos = strings.Join(ws.Subprotocols, ",")
	}
	var proxy []byte
	if r.Proxy != nil {
		proxy = r.Proxy.Enc // "scheme\nclient" (server_proxy_metrics.c)
	}
	ne := 4 * len(r.Ends) // first: the int32 ends, aligned
	n := ne + len(r.Blob) + len(c.Remote.Host) + len(c.Local.Host) + len(protos) + len(proxy)
	if n > sv.scratchLen {
		C.free(sv.scratch)
		sv.scratchLen = max(n, 2*sv.scratchLen, 1024)
		sv.scratch = C.malloc(C.size_t(sv.scratchLen))
	}
	buf := unsafe.Slice((*byte)(sv.scratch), n)
	copy(unsafe.Slice((*int32)(sv.scratch), len(r.Ends)), r.Ends)
	off := ne
	put := func(b []byte) (*C.char, C.Py_ssize_t) {
		if len(b) == 0 {
			return nil, 0
		}
		p := (*C.char)(unsafe.Pointer(&buf[off]))
		off += copy(buf[off:], b)
		return p, C.Py_ssize_t(len(b))
	}
	putS := func(s string) (*C.char, C.Py_ssize_t) { return put(unsafe.Slice(unsafe.StringData(s), len(s))) }
	h := sv.hd
	h.ends, h.nends = (*C.int32_t)(sv.scratch), C.int(len(r.Ends))
	h.blob, _ = put(r.Blob)
	h.major, h.minor = C.int(r.Major), C.int(r.Minor)
	h.chost, h.chostlen = putS(c.Remote.Host)
	h.shost, h.shostlen = putS(c.Local.Host)
	h.cport, h.sport, h.is_unix = C.int(c.Remote.Port), C.int(c.Local.Port), cbool(c.Local.Unix)
	h.protos, h.protolen = putS(protos)
	h.proxy, h.proxylen = put(proxy)
	h.ext = ext
	return h
}

func (sv *asgiSrv) start(r *httpserver.Request) {
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

func (sv *asgiSrv) wake(r *httpserver.Request) {
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
	if obj == nil || int(n) < httpserver.HoldMin {
		return sendRC(r.Send(bytesFromC(body, n), more != 0))
	}
	sv := asgiServers.Get(int(sid))
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
	return C.gl_bytes((*C.char)(unsafe.Pointer(&b[0])), C.Py_ssize_t(len(b)))
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
		rc = C.int(r.Finish(failed != 0))
		asgiReqs.Del(int(rid))
	}
	return rc
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
