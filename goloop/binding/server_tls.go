package main

// goloop serve's TLS (binding, both interfaces): the options of HttpServer.set_tls and the
// SIGHUP reload. The handshakes and records are Go's (goloop/httpserver/tls.go), in the
// connections' goroutines; ASGI's tls scope extension is asgi_spec.go's.

/*
#include "server.h"
*/
import "C"

import (
	"net"
	"strconv"
	"strings"

	"github.com/goloop/goloop/goloop/httpserver"
)

func cstr(p *C.char) string {
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

// glServerSetTLS makes the server's connections TLS (files loaded now: an OSError if not);
// pairs is "cert\x00key\x00cert\x00key..." (several certificates: picked by SNI).
//
//export glServerSetTLS
func glServerSetTLS(sid C.long, pairs *C.char, plen C.Py_ssize_t, password, cafile *C.char, certReqs C.int) (rc C.int) {
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

// glServerReloadTLS reads the TLS files again; on error the current ones stay (OSError).
//
//export glServerReloadTLS
func glServerReloadTLS(sid C.long) (rc C.int) {
	defer recoverInt(&rc)
	if err := getSrv(sid).s.ReloadTLS(); err != nil {
		raise(C.PyExc_OSError, "TLS reload: "+err.Error())
		return -1
	}
	return 0
}

// glServerH3 serves HTTP/3 over QUIC on UDP at host:port (0: any free port; max streams 0:
// the default) with the server's TLS (after set_tls; goloop/httpserver/h3.go). It returns
// the UDP port, or -1 with an OSError.
//
//export glServerH3
func glServerH3(sid C.long, host *C.char, port, streams C.int) (rc C.int) {
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
