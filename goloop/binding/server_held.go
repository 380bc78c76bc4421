package main

// server_held.go: large response bodies held from their bytes objects, released on the loop
// thread (both interfaces: an ASGI body on an HTTP/2 stream, asgi.go's sendBody; WSGI's
// large parts, below). A WSGI response's large body parts (over GL_WSGI_HOLD_MAX; sent with
// the GIL released) are bounded in memory whatever the client reads:
//   - on a loop-mode HTTP/1.1 connection answering its first request in flight, and on an
//     HTTP/2 stream with nothing pending, the part's
//     bytes object is held, not copied (httpserver.Request.SendHeldAnywhere): wsgi_response.c gives Go a strong
//     reference, the engine writes from the object's buffer as the socket takes it, and
//     when it is done with it (written, or the connection lost) the reference goes to the
//     server's release list, which the loop thread empties with the GIL (the loop hook's
//     take; the list's first entry wakes the loop). The pool thread does not wait for the
//     client: a Flask app returning one 10 MiB bytes object to 200 clients that do not read
//     costs no copy, and the threads answer other clients meanwhile;
//   - anywhere else (TLS, a pipelined request, memory that is not an
//     immutable bytes object: write()'s buffer), the part is copied in slices of
//     wsgiSlice, each sent when the output is under its bound (WriteBuffer): the thread
//     waits (GIL released) for the socket between them, so a connection never holds more
//     than the bound and a slice queued.
// A client that reads too slowly is dropped by the engine's minimum response rate
// (httpserver/writerate.go): its held body is released and a waiting thread is freed.

/*
#include "wsgi.h"
*/
import "C"

import (
	"bytes"
	"strconv"
	"sync"
	"sync/atomic"
)

// wsgiSlice is how much of a large part is copied into the output at a time.
const wsgiSlice = 256 * 1024

// heldRefs are the references to held bodies the engine is done with, to release on the
// loop thread (with the GIL).
type heldRefs struct {
	mu   sync.Mutex
	objs []*C.PyObject
	n    atomic.Int32 // len(objs): the loop hook's look without the lock
}

// releaseLater queues obj's release (any thread, no GIL; perhaps with a connection's lock
// held: it takes only the queue's); the first one wakes the loop.
func (sv *httpSrv) releaseLater(obj *C.PyObject) {
	h := &sv.refs
	h.mu.Lock()
	h.objs = append(h.objs, obj)
	first := len(h.objs) == 1
	h.n.Store(int32(len(h.objs)))
	h.mu.Unlock()
	if first {
		sv.l.poll.Wake()
	}
}

// dropHeld releases the queued references (the loop thread, with the GIL: the hooks' take,
// the server's release).
func (sv *httpSrv) dropHeld() {
	h := &sv.refs
	if h.n.Load() == 0 {
		return
	}
	h.mu.Lock()
	objs := h.objs
	h.objs = nil
	h.n.Store(0)
	h.mu.Unlock()
	for _, o := range objs {
		C.gl_decref(o)
	}
}

// glWsgiSendLarge (GIL released) is glWsgiSend of a part over GL_WSGI_HOLD_MAX: obj, when
// not NULL, is the part's bytes object with a strong reference for Go; *held = 1 if Go
// kept it (released later on the loop thread), else wsgi_response.c releases it. sized: the
// application gave a Content-Length (else the last part of a response not started gets
// one, as a one-part answer does, though it is sent in slices).
//
//export glWsgiSendLarge
func glWsgiSendLarge(wid, gen C.long, status C.int, hdr *C.char, hn C.Py_ssize_t, body *C.char, n C.Py_ssize_t,
	more, flush, sized C.int, obj *C.PyObject, held *C.int, park C.int, taken *C.Py_ssize_t) (rc C.int) {
	defer wsgiRecover(wid, &rc)
	wk := worker(wid, gen)
	if wk == nil {
		return C.GL_ERR_GONE
	}
	r := wk.r
	b := bytesFromC(body, n)
	if status > 0 {
		head := bytesFromC(hdr, hn)
		if more == 0 && sized == 0 && status >= 200 && status != 204 && status != 304 {
			head = append(append(append(bytes.Clone(head), "Content-Length: "...),
				strconv.Itoa(len(b))...), "\r\n"...)
		}
		if err := wsgiStart(r, int(status), head); err != nil {
			return wk.err(err)
		}
	}
	*taken = n
	if obj != nil && (r.Holds(len(b)) || r.H2()) {
		sv := wk.w.sv
		flags, h, err := r.SendHeldAnywhere(b, more != 0, func() { sv.releaseLater(obj) })
		if h {
			*held = 1
		}
		return wk.sentOrPaused(flags, err, flush != 0, park != 0)
	}
	for len(b) > wsgiSlice {
		flags, err := r.Send(b[:wsgiSlice], true)
		b = b[wsgiSlice:]
		if rc := wk.sentOrPaused(flags, err, true, park != 0); rc != C.GL_OK {
			*taken = n - C.Py_ssize_t(len(b)) // (GL_WSGI_PAUSED: the rest is sent when resumed)
			return rc
		}
	}
	flags, err := r.Send(b, more != 0)
	return wk.sentOrPaused(flags, err, flush != 0, park != 0)
}
