package main

// goloop serve's TLS (binding): the options of AsgiServer.set_tls and the SIGHUP reload.
// The handshakes and records are Go's (goloop/asgi/tls.go), in the connections' goroutines.

/*
#include "asgi.h"
*/
import "C"

import "github.com/goloop/goloop/goloop/asgi"

func cstr(p *C.char) string {
	if p == nil {
		return ""
	}
	return C.GoString(p)
}

// glAsgiSetTLS makes the server's connections TLS (files loaded now: an OSError if not).
//
//export glAsgiSetTLS
func glAsgiSetTLS(sid C.long, certfile, keyfile, password, cafile *C.char, certReqs C.int) (rc C.int) {
	defer recoverInt(&rc)
	err := getSrv(sid).s.SetTLS(asgi.TLSOptions{CertFile: cstr(certfile), KeyFile: cstr(keyfile),
		Password: cstr(password), CAFile: cstr(cafile), CertReqs: int(certReqs)})
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
