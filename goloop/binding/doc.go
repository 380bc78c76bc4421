// Command binding is goloop's CPython extension (_goloop), built with -buildmode=c-shared.
// It is the only package that imports C: it adapts the pure Go packages (poller, sched,
// idtable, httpparser, httpserver) to Python objects. Its files form three parts, plus what they
// share.
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
// (server_*):
//   - server_tls.go: set_tls, the SIGHUP reload, and the TLS extension of scopes
//   - server_proxy_metrics.go, server_proxy_metrics.c: proxy headers, metrics, and logging
//     the engine's warnings (accept errors)
//   - server_static.go, server_static.c: static files (the mounts, the access log's records) and
//     the TLS controls beyond the files (lowest version, CRL)
//   - server_held.go: large bodies held from their bytes objects (references released on the
//     loop thread), WSGI's large parts (glWsgiSendLarge)
//   - server_thread.c: the per-thread state (one thread-local pointer to a heap block: the
//     library takes almost no static TLS, a reserve other libraries share)
//
// ASGI (asgi*):
//   - asgi.go, asgi.c, asgi.h: the server (AsgiServer, which WSGI's extends), requests and
//     HTTP scopes, the send/receive objects
//   - asgi_ws.go, asgi_ws.c: WebSocket sessions
//   - asgi_spec.go, asgi_spec.c: http.response.trailers, pathsend and zerocopysend
//   - asgi_run.c: the request Task's creation and start
//
// WSGI (wsgi*):
//   - wsgi.go, wsgi.c, wsgi.h: WSGI (WsgiServer, a subtype of AsgiServer): the pool threads'
//     wait in Go for the next exchange, the environ built in C, start_response, wsgi.input
//
// Shared by the three:
//   - module.c: the module's init, calling each part's init
//   - gl.h: the C layouts and constants Go and C share
//   - pyapi.c: CPython macros as functions for Go, and raising Go errors (errors.go)
//   - cmem.go: views between Go and C memory
package main
