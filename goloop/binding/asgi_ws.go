package main

// goloop serve's WebSocket binding (Go side): the exports asgi_ws.c calls for a websocket
// scope's send and receive (goloop/httpserver/ws.go does the protocol). Loop thread only.

/*
#include "asgi.h"
*/
import "C"

import (
	"time"
	"unsafe"

	"github.com/goloop/goloop/goloop/httpserver"
)

func getWS(rid C.long) *httpserver.WS {
	if r := getReq(rid); r != nil {
		return r.WS()
	}
	return nil
}

//export glAsgiWsConfig
func glAsgiWsConfig(sid C.long, disabled C.int, maxSize, maxQueue C.long, pingInterval, pingTimeout C.double,
	deflate C.int) (rc C.int) {
	defer recoverInt(&rc)
	getSrv(sid).s.SetWSConfig(httpserver.WSConfig{
		Disabled:     disabled != 0,
		MaxSize:      int(maxSize),
		MaxQueue:     int(maxQueue),
		PingInterval: time.Duration(float64(pingInterval) * float64(time.Second)),
		PingTimeout:  time.Duration(float64(pingTimeout) * float64(time.Second)),
		Deflate:      deflate != 0,
	})
	return 0
}

// startWS makes the websocket scope of an upgrade request and starts the application.
func (sv *httpSrv) startWS(r *httpserver.Request) {
	rid, _ := asgiReqs.Add(r)
	ext, owned := sv.scopeExt(r.Conn())
	rc := C.gl_asgi_ws_request(sv.asgi(), C.long(rid), sv.head(r, ext))
	if owned {
		C.gl_decref(ext)
	}
	if rc < 0 { // the call could not start (reported by asgi.c gl_asgi_launch): a 500
		r.Done(false)
		asgiReqs.Del(rid)
	}
}

func wsRet(sid C.long, flags int, err error) C.int {
	if err != nil {
		return asgiErr(err)
	}
	if flags&httpserver.SendPaused != 0 {
		return C.GL_PAUSED
	}
	return C.GL_OK
}

//export glAsgiWsAccept
func glAsgiWsAccept(sid, rid C.long, sp *C.char, spn C.Py_ssize_t, hdr *C.char, hn C.Py_ssize_t) (rc C.int) {
	defer recoverInt(&rc)
	w := getWS(rid)
	if w == nil {
		return C.GL_ERR_GONE
	}
	return wsRet(sid, 0, w.Accept(string(bytesFromC(sp, spn)), bytesFromC(hdr, hn)))
}

//export glAsgiWsSend
func glAsgiWsSend(sid, rid C.long, text C.int, p *C.char, n C.Py_ssize_t) (rc C.int) {
	defer recoverInt(&rc)
	w := getWS(rid)
	if w == nil {
		return C.GL_ERR_GONE
	}
	flags, err := w.Send(text != 0, bytesFromC(p, n))
	return wsRet(sid, flags, err)
}

//export glAsgiWsClose
func glAsgiWsClose(sid, rid C.long, code C.int, reason *C.char, n C.Py_ssize_t) (rc C.int) {
	defer recoverInt(&rc)
	w := getWS(rid)
	if w == nil {
		return C.GL_ERR_GONE
	}
	return wsRet(sid, 0, w.Close(int(code), string(bytesFromC(reason, n))))
}

//export glAsgiWsDeny
func glAsgiWsDeny(sid, rid C.long, status C.int, hdr *C.char, n C.Py_ssize_t) (rc C.int) {
	defer recoverInt(&rc)
	w := getWS(rid)
	if w == nil {
		return C.GL_ERR_GONE
	}
	return wsRet(sid, 0, w.Deny(int(status), bytesFromC(hdr, n)))
}

//export glAsgiWsDenyBody
func glAsgiWsDenyBody(sid, rid C.long, body *C.char, n C.Py_ssize_t, more C.int) (rc C.int) {
	defer recoverInt(&rc)
	w := getWS(rid)
	if w == nil {
		return C.GL_ERR_GONE
	}
	flags, err := w.DenyBody(bytesFromC(body, n), more != 0)
	return wsRet(sid, flags, err)
}

// glAsgiWsRecv: the next message's kind (httpserver.WSKind), its data (bytes, str) or None, and
// for a disconnect its code and reason (a new str in *reason).
//
//export glAsgiWsRecv
func glAsgiWsRecv(rid C.long, kind, code *C.int, reason *pyObj) (ret pyObj) {
	defer recoverObj(&ret)
	w := getWS(rid)
	if w == nil {
		*kind, *code = C.int(httpserver.WSDisconnect), 1006
		*reason = C.gl_ws_text(nil, 0)
		return C.gl_none()
	}
	k, data, cd, rs := w.Receive()
	*kind = C.int(k)
	var p *C.char
	if len(data) > 0 {
		p = (*C.char)(unsafe.Pointer(&data[0]))
	}
	switch k {
	case httpserver.WSText, httpserver.WSBinary: // copied into Python: the memory goes back
		defer w.Release(data)
		if k == httpserver.WSText {
			return C.gl_ws_text(p, C.Py_ssize_t(len(data)))
		}
		return C.gl_bytes(p, C.Py_ssize_t(len(data)))
	case httpserver.WSDisconnect:
		*code = C.int(cd)
		var rp *C.char
		if len(rs) > 0 {
			rp = (*C.char)(unsafe.Pointer(unsafe.StringData(rs)))
		}
		*reason = C.gl_ws_text(rp, C.Py_ssize_t(len(rs)))
	}
	return C.gl_none()
}
