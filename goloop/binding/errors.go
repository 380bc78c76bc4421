package main

// The one way a Go error becomes a Python exception (raise, raiseErr: OSError with the
// errno, through pyapi.c), and the recover that every exported function defers so a panic
// becomes a SystemError instead of killing the process.

/*
#include "gl.h"
#include <stdlib.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime/debug"
	"unsafe"

	"golang.org/x/sys/unix"
)

// raise sets a Python exception of type exc with msg.
func raise(exc *C.PyObject, msg string) {
	cs := C.CString(msg)
	C.gl_set_error(exc, cs)
	C.free(unsafe.Pointer(cs))
}

// raiseErr turns a Go error into the matching Python exception (OSError with errno for
// system call errors, so Python maps it to ConnectionResetError, PermissionError ...).
func raiseErr(err error) {
	var en unix.Errno
	if errors.As(err, &en) {
		C.gl_set_oserror(C.int(en))
		return
	}
	raise(C.PyExc_RuntimeError, err.Error())
}

// recoverInt and recoverObj are deferred by every exported function: a Go panic becomes a
// Python SystemError instead of killing the interpreter.
func recoverInt(rc *C.int) {
	if r := recover(); r != nil {
		raise(C.PyExc_SystemError, fmt.Sprintf("goloop internal error: %v\n%s", r, debug.Stack()))
		*rc = -1
	}
}

func recoverObj(ret **C.PyObject) {
	if r := recover(); r != nil {
		raise(C.PyExc_SystemError, fmt.Sprintf("goloop internal error: %v\n%s", r, debug.Stack()))
		*ret = nil
	}
}
