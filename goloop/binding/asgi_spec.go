package main

// goloop serve's binding for http.response.trailers, http.response.pathsend and
// http.response.zerocopysend (asgi_spec.c calls these; loop thread).

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
	return asgiErr(r.SendTrailers(bytesFromC(hdr, n), more != 0))
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
		return C.GL_ASGI_ERR_GONE
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
		return C.GL_ASGI_ERR_RUNTIME
	}
	return sendRC(flags, err)
}
