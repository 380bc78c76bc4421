package main

// goloop serve's TLS (binding): the options of AsgiServer.set_tls, the SIGHUP reload, and
// the tls scope extension of each TLS connection. The handshakes and records are Go's
// (goloop/httpserver/tls.go), in the connections' goroutines.

/*
#include "asgi.h"
*/
import "C"

import (
	"net"
	"strconv"
	"strings"
	"unsafe"

	"github.com/goloop/goloop/goloop/httpserver"
)

func cstr(p *C.char) string {
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

// glAsgiSetTLS makes the server's connections TLS (files loaded now: an OSError if not);
// pairs is "cert\x00key\x00cert\x00key..." (several certificates: picked by SNI).
//
//export glAsgiSetTLS
func glAsgiSetTLS(sid C.long, pairs *C.char, plen C.Py_ssize_t, password, cafile *C.char, certReqs C.int) (rc C.int) {
	defer recoverInt(&rc)
	o := httpserver.TLSOptions{Password: cstr(password), CAFile: cstr(cafile), CertReqs: int(certReqs)}
	f := strings.Split(C.GoStringN(pairs, C.int(plen)), "\x00")
	for i := 0; i+1 < len(f); i += 2 {
		o.Certs = append(o.Certs, httpserver.CertKey{CertFile: f[i], KeyFile: f[i+1]})
	}
	err := getSrv(sid).s.SetTLS(o)
	if err != nil {
		raise(C.PyExc_OSError, "TLS: "+err.Error())
		return -1
	}
	return 0
}

// glAsgiReloadTLS reads the TLS files again; on error the current ones stay (OSError).
//
//export glAsgiReloadTLS
func glAsgiReloadTLS(sid C.long) (rc C.int) {
	defer recoverInt(&rc)
	if err := getSrv(sid).s.ReloadTLS(); err != nil {
		raise(C.PyExc_OSError, "TLS reload: "+err.Error())
		return -1
	}
	return 0
}

// scopeExt is the extensions dict of the scopes of connection c when it is not the
// template's: a TLS connection's, with "tls", made at its first request and kept until it
// closes (EvConnClosed: connClosed). nil otherwise, or on an error (reported: the scope goes
// without "tls", the request is served). owned: the caller must release it (c closed
// meanwhile: nothing keeps it).
func (sv *asgiSrv) scopeExt(c *httpserver.Conn) (ext pyObj, owned bool) {
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
	o := C.gl_asgi_tls_ext(sv.py, bytesToC(blob), (*C.int32_t)(unsafe.Pointer(&ends[0])), C.int(len(ends)),
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
func (sv *asgiSrv) connClosed(c *httpserver.Conn) {
	if o, ok := sv.tlsConns[c]; ok {
		delete(sv.tlsConns, c)
		C.gl_decref(o)
	}
}

// glServeH3 serves HTTP/3 over QUIC on UDP at host:port (0: any free port; max streams 0:
// the default) with the server's TLS (after set_tls; goloop/httpserver/h3.go). It returns
// the UDP port, or -1 with an OSError.
//
//export glServeH3
func glServeH3(sid C.long, host *C.char, port, streams C.int) (rc C.int) {
	defer recoverInt(&rc)
	s := getSrv(sid).s
	addr := net.JoinHostPort(C.GoString(host), strconv.Itoa(int(port)))
	if err := s.ServeH3(addr, httpserver.H3Options{MaxStreams: int64(streams)}); err != nil {
		raise(C.PyExc_OSError, "HTTP/3: "+err.Error())
		return -1
	}
	a, _ := s.H3Addr().(*net.UDPAddr)
	if a == nil {
		return 0
	}
	return C.int(a.Port)
}
