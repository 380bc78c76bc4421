package main

// goloop serve's binding, the Go side of server.c (both interfaces): the registry of the
// Go servers (httpserver.Server) that HttpServer objects are handles on, found by their
// sid; a server's making, listening, closing, stats and release; the C memory a request's
// head is passed to C in (GLHead, headBuf). ASGI's requests and loop hook are asgi.go's,
// WSGI's pool is wsgi.go's. The code runs on the loop thread, apart from headBuf.fill,
// which a WSGI pool thread also runs on its own headBuf.

/*
#include "server.h"
*/
import "C"

import (
	"strings"
	"time"
	"unsafe"

	"github.com/goloop/goloop/goloop/httpserver"
	"github.com/goloop/goloop/goloop/idtable"
)

// httpSrv is the Go side of an HttpServer (py, either interface's): its engine and what
// Go holds for it. tagged and tlsConns are only ever filled by ASGI (asgi.go, asgi_spec.go).
type httpSrv struct {
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
	// onRelease, if set, runs when the server is released (a WSGI server's pool: wsgi.go);
	// beforeAbort before its connections are aborted (ASGI's pending finishes: asgi.go)
	onRelease, beforeAbort func()
}

// servers holds the Go servers of both interfaces by id (an HttpServer's sid).
var servers idtable.Table[httpSrv]

// headBuf is the C memory a request's head is passed to C in (head): the GLHead and
// its scratch. The loop thread's (httpSrv), or each WSGI pool thread's own (wsgi.go).
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

func getSrv(sid C.long) *httpSrv {
	sv := servers.Get(int(sid))
	if sv == nil {
		panic("goloop: server released")
	}
	return sv
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

// newHttpSrv makes the Go server of py (cfg.Notify: the loop's wake-up unless set) and
// registers it (py.sid).
func newHttpSrv(py *C.GLServer, l *loop, cfg httpserver.Config) *httpSrv {
	poll := l.poll
	if cfg.Notify == nil {
		cfg.Notify = func() { poll.Wake() } // ErrClosed: the loop is gone, nobody to wake
	}
	// the loop thread logs the engine's warnings (its hook's take: logWarnings)
	cfg.OnWarning = func() { poll.Wake() }
	sv := &httpSrv{l: l, py: py, s: httpserver.New(cfg), tagged: map[*httpserver.Request]struct{}{},
		tlsConns: map[*httpserver.Conn]pyObj{}, headBuf: newHeadBuf()}
	id, _ := servers.Add(sv)
	sv.id = id
	py.sid = C.long(id)
	return sv
}

//export glServerListen
func glServerListen(sid C.long, fd C.int) (rc C.int) {
	defer recoverInt(&rc)
	if err := getSrv(sid).s.ListenFd(int(fd)); err != nil {
		raiseErr(err)
		return -1
	}
	return 0
}

//export glServerClose
func glServerClose(sid C.long, abort C.int) (rc C.int) {
	defer recoverInt(&rc)
	sv := getSrv(sid)
	if abort != 0 {
		sv.s.Abort()
	} else {
		sv.s.Close()
	}
	return 0
}

//export glServerStats
func glServerStats(sid C.long, conns, inflight, requests *C.long) (rc C.int) {
	defer recoverInt(&rc)
	sv := getSrv(sid)
	*conns = C.long(sv.s.Connections())
	*inflight = C.long(sv.s.InFlight())
	*requests = C.long(sv.s.Requests())
	return 0
}

//export glServerFlush
func glServerFlush(sid C.long) (rc C.int) {
	defer recoverInt(&rc)
	if sv := servers.Get(int(sid)); sv != nil {
		sv.s.Flush()
	}
	return 0
}

// glServerRelease closes the server now and drops the references Go holds (loop thread).
//
//export glServerRelease
func glServerRelease(sid C.long) {
	defer func() { recover() }()
	sv := servers.Get(int(sid))
	if sv == nil {
		return
	}
	if sv.beforeAbort != nil {
		sv.beforeAbort()
	}
	sv.s.Abort()
	sv.release()
}

func (sv *httpSrv) release() {
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
	servers.Del(sv.id)
	sv.py.sid = -1
}

// logWarnings logs the engine's warnings for the operator (accept errors: EMFILE ...) on
// the "goloop.error" logger (server_proxy_metrics.c's gl_server_warn; loop thread).
func (sv *httpSrv) logWarnings() {
	for _, msg := range sv.s.TakeWarnings() {
		cs := C.CString(msg)
		C.gl_server_warn(cs)
		C.free(unsafe.Pointer(cs))
	}
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
