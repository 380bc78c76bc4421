package main

// goloop serve's operations hooks (server_proxy_metrics.c): proxy headers and metrics, configured
// before the server listens; read on the loop thread.

/*
#include "server.h"
*/
import "C"

import (
	"encoding/json"
	"time"
	"unsafe"
)

// glServerConfigure: proxy (plen >= 0) turns proxy headers on with that trust list;
// metrics turns the counters on, path (if pathlen > 0) is served by Go; mfd >= 0: they
// are kept in slot mslot of that shared file (a --workers worker).
//
//export glServerConfigure
func glServerConfigure(sid C.long, proxy *C.char, plen C.Py_ssize_t, metrics C.int, path *C.char,
	pathlen C.Py_ssize_t, mfd, mslot C.int) (rc C.int) {
	defer recoverInt(&rc)
	sv := getSrv(sid)
	if plen >= 0 {
		sv.s.SetProxyHeaders(C.GoStringN(proxy, C.int(plen)))
	}
	if metrics != 0 {
		p := ""
		if pathlen > 0 {
			p = C.GoStringN(path, C.int(pathlen))
		}
		if mfd < 0 {
			sv.s.EnableMetrics(p)
		} else if err := sv.s.EnableSharedMetrics(p, int(mfd), int(mslot)); err != nil {
			raiseErr(err)
			return -1
		}
	}
	return 0
}

// glServerSlowClients sets the request head's deadline (headNs nanoseconds, 0: none) and the
// request body's minimum rate (bytes per second, 0: none), and HTTP/2 only (h2only).
//
//export glServerSlowClients
func glServerSlowClients(sid C.long, headNs C.longlong, rate C.long, h2only C.int) (rc C.int) {
	defer recoverInt(&rc)
	head, minRate := time.Duration(headNs), int(rate)
	if head == 0 {
		head = -1 // none (the engine's zero is its default)
	}
	if minRate == 0 {
		minRate = -1
	}
	getSrv(sid).s.SetSlowClients(head, minRate, h2only != 0)
	return 0
}

// glServerRespRate sets the minimum rate (bytes per second, 0: none) at which a client must
// read a response that waits for its socket, after graceNs nanoseconds (0: the engine's 5 s).
//
//export glServerRespRate
func glServerRespRate(sid C.long, rate C.long, graceNs C.longlong) (rc C.int) {
	defer recoverInt(&rc)
	minRate := int(rate)
	if minRate == 0 {
		minRate = -1 // none (the engine's zero is its default)
	}
	getSrv(sid).s.SetMinResponseRate(minRate, time.Duration(graceNs))
	return 0
}

// glServerMetrics returns the server's metrics as a str: Prometheus' text format, or JSON.
//
//export glServerMetrics
func glServerMetrics(sid C.long, asJSON C.int) (ret pyObj) {
	defer recoverObj(&ret)
	ms := getSrv(sid).s.Metrics()
	var s string
	if asJSON != 0 {
		b, err := json.Marshal(ms)
		if err != nil {
			raiseErr(err)
			return nil
		}
		s = string(b)
	} else {
		s = ms.Prometheus()
	}
	return C.PyUnicode_FromStringAndSize((*C.char)(unsafe.Pointer(unsafe.StringData(s))), C.Py_ssize_t(len(s)))
}
