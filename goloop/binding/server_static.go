package main

// goloop serve's static files (server_static.c): the mounts Go serves before the
// application is called (goloop/httpserver/static.go), and the records the access log takes of
// their responses (Python logs them: the format and the logger are Python's). And the TLS
// controls beyond the files (--ssl-protocol-min, --ssl-crl: goloop/httpserver/tlsops.go).

/*
#include "server.h"
*/
import "C"

import (
	"crypto/tls"
	"encoding/json"
	"unsafe"

	"github.com/goloop/goloop/goloop/httpserver"
)

// glServerStaticConfig: spec is a JSON list of {"route", "dir", "index", "max_age"}; log: keep
// records for glServerStaticLog.
//
//export glServerStaticConfig
func glServerStaticConfig(sid C.long, spec *C.char, n C.Py_ssize_t, log C.int) (rc C.int) {
	defer recoverInt(&rc)
	var ms []struct {
		Route  string `json:"route"`
		Dir    string `json:"dir"`
		Index  string `json:"index"`
		MaxAge int    `json:"max_age"`
	}
	if err := json.Unmarshal(C.GoBytes(unsafe.Pointer(spec), C.int(n)), &ms); err != nil {
		raise(C.PyExc_ValueError, "static mounts: "+err.Error())
		return -1
	}
	mounts := make([]httpserver.StaticMount, len(ms))
	for i, m := range ms {
		mounts[i] = httpserver.StaticMount{Route: m.Route, Dir: m.Dir, Index: m.Index, MaxAge: m.MaxAge}
	}
	if err := getSrv(sid).s.SetStatic(mounts, log != 0); err != nil {
		raise(C.PyExc_OSError, "static files: "+err.Error())
		return -1
	}
	return 0
}

// glServerStaticLog returns the records since the last call as a JSON str (server_static.c).
//
//export glServerStaticLog
func glServerStaticLog(sid C.long) (ret pyObj) {
	defer recoverObj(&ret)
	recs, dropped := getSrv(sid).s.TakeStaticLog()
	rows := make([][]any, len(recs))
	for i, e := range recs {
		rows[i] = []any{e.Client, e.Method, e.Path, e.Proto, e.Status, e.Size, e.Duration, e.Agent, e.Referer}
	}
	b, err := json.Marshal(map[string]any{"records": rows, "dropped": dropped})
	if err != nil {
		raiseErr(err)
		return nil
	}
	return C.PyUnicode_FromStringAndSize((*C.char)(unsafe.Pointer(unsafe.SliceData(b))), C.Py_ssize_t(len(b)))
}

// glServerTLSExtra sets the lowest TLS version (minVer "1.3"; "" or "1.2": 1.2) and the CRL file
// ("" none) checked against client certificates, before set_tls (goloop/httpserver/tlsops.go).
//
//export glServerTLSExtra
func glServerTLSExtra(sid C.long, minVer, crl *C.char) (rc C.int) {
	defer recoverInt(&rc)
	x := httpserver.TLSExtra{CRLFile: C.GoString(crl)}
	if C.GoString(minVer) == "1.3" {
		x.MinVersion = tls.VersionTLS13
	}
	if err := getSrv(sid).s.SetTLSExtra(x); err != nil {
		raise(C.PyExc_ValueError, err.Error())
		return -1
	}
	return 0
}
