package main

// goloop serve's binding for ASGI's extensions: http.response.trailers, http.response.pathsend
// and http.response.zerocopysend (asgi_spec.c calls these), and the tls extension of a TLS
// connection's scopes (scopeExt); loop thread.

/*
#include "asgi.h"
*/
import "C"

import (
	"errors"
	"os"
	"unsafe"

	"github.com/goloop/goloop/goloop/httpserver"
	"golang.org/x/sys/unix"
)

// glAsgiStartTrailers: http.response.start had trailers: True.
//
//export glAsgiStartTrailers
func glAsgiStartTrailers(rid C.long) (rc C.int) {
	defer recoverInt(&rc)
	if r := getReq(rid); r != nil {
		r.SetTrailers()
	}
	return 0
}

// glAsgiSendTrailers is http.response.trailers (hdr: checked header lines).
//
//export glAsgiSendTrailers
func glAsgiSendTrailers(rid C.long, hdr *C.char, n C.Py_ssize_t, more C.int) (rc C.int) {
	defer recoverInt(&rc)
	r := getReq(rid)
	if r == nil {
		return C.GL_ERR_GONE
	}
	return asgiErr(r.SendTrailers(bytesFromC(hdr, n), more != 0))
}

// glAsgiSendFile is http.response.pathsend: Go sends the file and completes the response.
//
//export glAsgiSendFile
func glAsgiSendFile(rid C.long, path *C.char, n C.Py_ssize_t) (rc C.int) {
	defer recoverInt(&rc)
	r := getReq(rid)
	if r == nil {
		return C.GL_ERR_GONE
	}
	return sendFileRC(r.SendFile(C.GoStringN(path, C.int(n))))
}

// glAsgiSendFD is http.response.zerocopysend: count bytes (-1: to the end) of fd from
// offset (-1: its position, moved past them); *sent is how many.
//
//export glAsgiSendFD
func glAsgiSendFD(rid C.long, fd C.int, offset, count C.longlong, more C.int, sent *C.longlong) (rc C.int) {
	defer recoverInt(&rc)
	r := getReq(rid)
	if r == nil {
		return C.GL_ERR_GONE
	}
	flags, n, err := r.SendFD(int(fd), int64(offset), int64(count), more != 0)
	*sent = C.longlong(n)
	return sendFileRC(flags, err)
}

// sendFileRC is a file send's answer: an OSError for a failing system call (a missing
// file ...), else Send's.
func sendFileRC(flags int, err error) C.int {
	var pe *os.PathError
	var se *os.SyscallError
	var en unix.Errno
	if (errors.As(err, &pe) || errors.As(err, &se)) && errors.As(err, &en) {
		C.gl_set_oserror(C.int(en))
		return C.GL_ERR_RUNTIME
	}
	return sendRC(flags, err)
}

// scopeExt is the extensions dict of the scopes of connection c when it is not the
// template's: a TLS connection's, with "tls", made at its first request and kept until it
// closes (EvConnClosed: connClosed). nil otherwise, or on an error (reported: the scope goes
// without "tls", the request is served). owned: the caller must release it (c closed
// meanwhile: nothing keeps it).
func (sv *httpSrv) scopeExt(c *httpserver.Conn) (ext pyObj, owned bool) {
	if !c.TLS() {
		return nil, false
	}
	if o, ok := sv.tlsConns[c]; ok {
		return o, false
	}
	info := c.TLSInfo()
	if info == nil {
		return nil, false
	}
	blob := make([]byte, 0, len(info.ServerCert)+len(info.ClientName)+len(info.ClientChain)*800)
	ends := make([]int32, 0, 2+len(info.ClientChain))
	for _, s := range append([]string{info.ServerCert, info.ClientName}, info.ClientChain...) {
		blob = append(blob, s...)
		ends = append(ends, int32(len(blob)))
	}
	o := C.gl_asgi_tls_ext(sv.asgi(), bytesToC(blob), (*C.int32_t)(unsafe.Pointer(&ends[0])), C.int(len(ends)),
		C.int(info.Version), C.int(info.CipherSuite))
	if o == nil {
		C.PyErr_WriteUnraisable(nil)
		return nil, false
	}
	if !c.TrackClose() { // closed already: no event will release it
		return o, true
	}
	sv.tlsConns[c] = o
	return o, false
}

// connClosed releases what was kept for connection c (loop thread).
func (sv *httpSrv) connClosed(c *httpserver.Conn) {
	if o, ok := sv.tlsConns[c]; ok {
		delete(sv.tlsConns, c)
		C.gl_decref(o)
	}
}
