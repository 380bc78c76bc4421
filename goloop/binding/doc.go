// Command binding is goloop's CPython extension (_goloop), written in Go and C and built with
// -buildmode=c-shared. It is the only package that imports C: it adapts the pure Go packages
// (poller, sched, idtable, httpparser, httpserver) to Python objects, and its C files hold
// the paths that run once per callback or per request, where a call from C into Go would cost
// more than the work (the loop's ready ring and handles, reads into bytes and staged writes,
// TLS records, ASGI scopes and send/receive, WSGI environs and start_response). Its files
// form three parts, plus what they share.
//
// The loop (goloop.Loop and its transports):
//   - loop.go: the Go state of a loop, run_forever's iterations, timers, descriptors, and
//     the hooks other parts register on the loop (loopHook)
//   - loop_core.c: the LoopCore type, call_soon's staged handles and the inbox, the run
//     phase (gl_run_ready)
//   - loop_handle.c: the Handle/TimerHandle types, their free list, and running a handle in its
//     context
//   - loop_transport.go, loop_transport.c: stream transports and their write queues (small bytes
//     writes wait in C, loop_transport.c's wstage, and leave with one C call per iteration)
//   - loop_readpath.c: data_received / BufferedProtocol delivery
//   - loop_sockfast.c: the sock_* fast paths
//   - loop_sslfast.c: the C half of the TLS protocol (pyshim/goloop/_sslproto.py)
//
// The goloop.http parser binding (httptools' API over goloop/httpparser):
//   - parser.go, parser.c, parser.h (parser_* for any further file)
//
// The server binding (goloop serve, over goloop/httpserver). Shared by both interfaces
// (server*), used by both and using neither:
//   - server.c, server.h: HttpServer, the type of the Go server's handle (listen, close,
//     stats, TLS ...) whose subtypes are AsgiServer and WsgiServer; the request head Go
//     passes to C (GLHead), Go's answer codes, and the helpers both use (gbuf, gl_bytes,
//     gl_method, ClientDisconnected)
//   - server.go: the Go side of server.c: the registry of the Go servers (httpSrv, found by
//     sid), their making, listen, close, stats and release, and the head's packing (headBuf)
//   - server_tls.go: set_tls and the SIGHUP reload
//   - server_proxy_metrics.go, server_proxy_metrics.c: configure() (proxy headers, metrics,
//     slow clients), metrics(), and logging the engine's warnings (accept errors)
//   - server_static.go, server_static.c: static files (the mounts, the access log's records) and
//     the TLS controls beyond the files (lowest version, CRL)
//   - server_held.go: large bodies held from their bytes objects (references released on the
//     loop thread), WSGI's large parts (glWsgiSendLarge)
//   - server_thread.c: the per-thread state (one thread-local pointer to a heap block: the
//     library takes almost no static TLS, a reserve other libraries share)
//
// ASGI (asgi*):
//   - asgi.go, asgi.c, asgi.h: AsgiServer, its loop hook and driver, requests and HTTP
//     scopes, the send/receive objects
//   - asgi_ws.go, asgi_ws.c: WebSocket sessions
//   - asgi_spec.go, asgi_spec.c: http.response.trailers, pathsend and zerocopysend, and the
//     scopes' tls extension
//   - asgi_run.c: the request Task's creation and start
//
// WSGI (wsgi*):
//   - wsgi.go, wsgi.c, wsgi.h: WsgiServer, its pool threads and each request's run: the
//     application called, its result sent; the leader/follower pool (the threads' wait in
//     Go for the next exchange, GOLOOP_WSGI_POOL=leader)
//   - wsgi_handoff.go, wsgi_handoff.c: the hand-off pool (the default): the goroutine that
//     leads the server's poller, the C queues of requests and one-part answers, adoption
//   - wsgi_environ.c: the environ, built in C from the head, with the thread's caches
//   - wsgi_response.c: start_response and write
//   - wsgi_input.c: wsgi.input
//
// Shared by the three:
//   - module.c: the module's init, calling each part's init
//   - gl.h: the C layouts and constants Go and C share
//   - pyapi.c: CPython macros as functions for Go, and raising Go errors (errors.go)
//   - cmem.go: views between Go and C memory
//
// # The C contract
//
// Every C and Go file of the package follows these rules; the files point here rather than
// repeat them.
//
// Threads. Only a thread that holds the GIL (on a free-threaded build: an attached thread
// state) calls the C API: the thread running a loop, during its run phase and its Go calls
// from Python, or a WSGI pool thread while it runs the application or builds an environ.
// Go code reached from Python runs on that same OS thread, and may call C that touches
// Python until it releases the GIL (around a blocking epoll_wait, a WSGI pool thread's wait
// for a request or for body bytes). The engine's goroutines (httpserver's accept loops,
// writers, timers) never call Python: they hand their results to a queue the loop or pool
// thread takes. A loop's state is its owner thread's (GLLoop.owner); other threads reach it
// only through the locked inbox (call_soon_threadsafe) and the wake-up (gl_wake).
//
// References. Every PyObject pointer that Go or C keeps beyond a call is a strong
// reference, taken when it is stored and released (Py_DECREF, gl_decref) on a thread that
// may touch Python, never from a Go finalizer or goroutine. A pointer Go keeps is C memory
// to Go's garbage collector (it never moves or frees it), stored as *C.PyObject or as a
// uintptr (the timer heap). The few borrowed pointers say so where they are declared, with
// what keeps the object alive (a transport's wloop: the loop detaches its transports before
// it is freed; the loop's wdirty list: a listed transport is attached). Functions returning
// a PyObject* return a new reference unless their comment says borrowed; a call that steals
// one says so (gl_set_new).
//
// Entry points. The //export'ed Go functions of the server binding are named by part:
// glServer* for what both interfaces use (HttpServer's methods), glAsgi* and glWsgi* for
// one interface's. Every one of the package defers recoverInt or recoverObj (errors.go),
// so a Go panic becomes a SystemError, and each C entry point that would call into Go starts
// with GL_FORK_GUARD (gl.h): in a child forked after the Go runtime started, it raises
// instead of calling Go. Errors follow CPython's convention (NULL or -1 with an exception
// set).
//
// The _u entry points (gl_run_ready_u, gl_handle_run_u, gl_read_deliver_u,
// gl_read_buffered_u, gl_flush_staged_u) take their PyObject and buffer pointers as
// uintptr_t, which cgo passes without its pointer checks: on the loop's per-callback paths
// those checks cost more than the call's own work. What they trade away is that check,
// nothing else: the caller (always loop.go, on the owner thread with the GIL) guarantees
// that each pointer is a live object it holds a reference to, or C memory, for the call.
//
// Every C file compiles with the warnings below; the Makefile's builds (make build, make
// vet) add -Werror, so a new warning fails them.
package main

// #cgo CFLAGS: -Wall -Wextra -Wno-unused-parameter
import "C"
