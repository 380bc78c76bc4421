package main

// Views between Go and C memory for the length of one call (no copy), named by direction,
// and C's truth value. The server binding (asgi*.go) passes request blobs to C and takes
// the bodies and headers C passes back.

/*
#include "gl.h"
*/
import "C"

import "unsafe"

// cview is C's view of a Go string (nil when empty).
func cview(s string) *C.char {
	if len(s) == 0 {
		return nil
	}
	return (*C.char)(unsafe.Pointer(unsafe.StringData(s)))
}

// bytesToC is C's view of Go bytes (nil when empty).
func bytesToC(b []byte) *C.char {
	if len(b) == 0 {
		return nil
	}
	return (*C.char)(unsafe.Pointer(&b[0]))
}

// bytesFromC is Go's view of C's n bytes at p (nil when empty).
func bytesFromC(p *C.char, n C.Py_ssize_t) []byte {
	if n <= 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(p)), int(n))
}

// cbool is b as C's int (1 or 0).
func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
