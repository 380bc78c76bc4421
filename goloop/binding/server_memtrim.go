package main

// server_memtrim.go: the memory watcher's C part (server_memtrim.c): after a spike, the
// pages C's allocator keeps free (Python's large objects are malloc's) go back to the
// system, as the Go heap's do (httpserver/memwatch.go).

/*
#include <stdint.h>
int64_t gl_native_release(int64_t slack);
*/
import "C"

import "github.com/goloop/goloop/goloop/httpserver"

func init() {
	httpserver.SetNativeRelease(func(slack int64) { C.gl_native_release(C.int64_t(slack)) })
}
