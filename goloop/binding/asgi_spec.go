package main

// goloop serve's binding for http.response.trailers and http.response.pathsend
// (asgi_spec.c calls these; loop thread).

/*
#include "asgi.h"
*/
import "C"

import (
	"errors"
	"os"

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
		return C.GL_ASGI_ERR_GONE
	}
	return asgiErr(r.SendTrailers(cBytes(hdr, n), more != 0))
}

// glAsgiSendFile is http.response.pathsend: Go sends the file and completes the response.
//
//export glAsgiSendFile
func glAsgiSendFile(rid C.long, path *C.char, n C.Py_ssize_t) (rc C.int) {
	defer recoverInt(&rc)
	r := getReq(rid)
	if r == nil {
		return C.GL_ASGI_ERR_GONE
	}
	err := r.SendFile(C.GoStringN(path, C.int(n)))
	var pe *os.PathError
	var en unix.Errno
	if errors.As(err, &pe) && errors.As(err, &en) {
		C.gl_set_oserror(C.int(en))
		return C.GL_ASGI_ERR_RUNTIME
	}
	return asgiErr(err)
}
