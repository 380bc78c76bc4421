/* goloop serve's binding, the part both application interfaces share: the server type whose
 * subtypes are ASGI's (asgi.h) and WSGI's (wsgi.h), the request head Go passes to C, Go's
 * answers to a send, and small helpers (server.c). Files that use it: server.c,
 * server_proxy_metrics.c, asgi*.c, wsgi.c; the C contract is goloop/binding/doc.go's. */
#ifndef GOLOOP_SERVER_H
#define GOLOOP_SERVER_H
#include "gl.h"

/* _goloop.HttpServer: Python's handle on a Go httpserver.Server attached to a loop (server.go's
 * registry, found by sid), with the methods of the server itself: listen, close, abort,
 * release, stats, set_tls, reload_tls, configure, metrics. AsgiServer and WsgiServer are its
 * subtypes; it is never made by itself. */
typedef struct {
    PyObject_HEAD
    long sid;              /* Go server id; -1 before init and once released */
    PyObject *loop;        /* the goloop loop the server belongs to (strong) */
} GLServer;

/* For the subtypes' slots: the base's share of traverse and dealloc. dealloc releases the
 * Go server (if not yet), the loop, and frees the object; the subtype untracks it and clears
 * its own fields first. */
int gl_server_traverse(GLServer *self, visitproc visit, void *arg);
void gl_server_release(GLServer *self);  /* the Go server, now (idempotent) */
void gl_server_dealloc(GLServer *self);
PyTypeObject *gl_server_type(void);      /* HttpServer, the subtypes' tp_base */
PyTypeObject *gl_loop_type(void);        /* _goloop.LoopCore: what a server's loop must be */
int gl_init_server(PyObject *m);
int gl_init_server_static(PyObject *m);  /* server_static.c: static files, TLS controls */
/* server_proxy_metrics.c: the configure() and metrics() methods (off the per-request path) */
PyObject *gl_server_configure(GLServer *self, PyObject *args, PyObject *kwds);
PyObject *gl_server_metrics(GLServer *self, PyObject *arg);
void gl_server_warn(const char *msg);  /* logs an engine's warning on "goloop.error" */

/* What Go passes to start a request (an ASGI request or WebSocket session, asgi.go's head;
 * a WSGI request, wsgi.go): its head, the connection's addresses, what a trusted proxy
 * changed, the scope's extensions (ASGI).
 * All of it is C memory (the server's scratch, Go copies into it), valid for the call. */
typedef struct {
    const char *blob;        /* httpserver.Request.Blob: the headers' names and values, then the method, */
    const int32_t *ends;     /* raw path, query string and path; segment i ends at ends[i] */
    int nends;
    int major, minor;        /* the HTTP version (HTTP scopes) */
    const char *chost;       /* the client's address (none on a Unix socket) */
    Py_ssize_t chostlen;
    int cport;
    const char *shost;       /* the server's address; is_unix: the socket's path */
    Py_ssize_t shostlen;
    int sport, is_unix;
    const char *protos;      /* WebSocket: the subprotocols offered, comma separated */
    Py_ssize_t protolen;
    const char *proxy;       /* what trusted proxy headers changed ("scheme\nclient"), or NULL */
    Py_ssize_t proxylen;
    PyObject *ext;           /* the connection's extensions dict (TLS: with "tls"), or NULL; borrowed */
    void *resume;            /* WSGI: a parked response to go on with (wsgi.c's wsgi_resp; the
                              * rest is not filled), or NULL: a new request */
} GLHead;

/* Go's answers to a request's start and send (asgi.go, wsgi.go) */
#define GL_OK 0
#define GL_PAUSED 1
#define GL_ERR_DISCONNECTED (-2)
#define GL_ERR_RUNTIME (-3)     /* message in a RuntimeError */
#define GL_ERR_GONE (-4)        /* the request was released */
/* what a request's body reading found (httpserver.RecvState) */
#define GL_RECV_WAIT 0
#define GL_RECV_BODY 1
#define GL_RECV_LAST 2
#define GL_RECV_DISCONNECT 3

/* A growing byte buffer (PyMem's raw allocator: freed by a thread's exit without the GIL,
 * server_thread.c): gbuf_put appends (s NULL: n bytes of room, to fill), -1 with
 * MemoryError. */
typedef struct {
    char *p;
    Py_ssize_t n, cap;
} gbuf;
int gbuf_put(gbuf *b, const char *s, Py_ssize_t n);

/* The server binding's per-thread state (server_thread.c): a block on the heap behind ONE
 * thread-local pointer, made at the thread's first use and freed when the thread exits.
 * Static thread-local storage is a reserve glibc keeps small for libraries loaded after
 * start-up (512 bytes by default, shared with every other such library: OpenMP's libgomp,
 * Mesa's libEGL ...): a library that takes more than a pointer of it can fail to import.
 * Several threads serve at once (a loop in each, or WSGI pool threads on a free-threaded
 * build): the state is per thread, never shared. */
typedef struct {
    gbuf hdrbuf;             /* the header lines of the ASGI response being started
                                (asgi.c's gl_asgi_header_lines); raw memory: freed without the GIL */
    struct GLAsgiSend *held_start;  /* ASGI: the request whose http.response.start is held (borrowed: the
                                request lets go of it before it is freed, release_own_start) */
    void *wsgi;              /* a WSGI pool thread's caches (wsgi.h's wsgi_thread), owned by its
                                serve_thread() and freed by it, with the GIL, as it returns */
} gl_thread_state;
extern __thread gl_thread_state *gl_ts __attribute__((tls_model("initial-exec")));
gl_thread_state *gl_thread_state_new(void);
int gl_init_thread_state(void);
/* The calling thread's state, made now at its first use; NULL with MemoryError. */
static inline gl_thread_state *gl_thread(void) {
    gl_thread_state *t = gl_ts;
    return t != NULL ? t : gl_thread_state_new();
}

/* Shared helpers (server.c). */
PyObject *gl_bytes(const char *p, Py_ssize_t n);        /* bytes (the empty one shared) */
PyObject *gl_method(const char *p, Py_ssize_t n);       /* a method's str (interned when common) */
PyObject *gl_raise_disconnected(void);                  /* raises goloop.ClientDisconnected: NULL */
PyObject *gl_disconnected_error(void);                  /* a new ClientDisconnected (NULL: error) */
PyObject *gl_take_exception(void);  /* the exception being raised, with its traceback */

#endif
