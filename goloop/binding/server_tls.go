package main

// goloop serve's TLS (binding, both interfaces): the options of HttpServer.set_tls and the
// SIGHUP reload. The handshakes and records are Go's (goloop/httpserver/tls.go), in the
// connections' goroutines; ASGI's tls scope extension is asgi_spec.go's.

/*
#include "server.h"
*/
import "C"

import (
	"strings"

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
