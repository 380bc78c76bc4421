/* goloop serve's binding: the C objects of the ASGI server (asgi.c) and what asgi.go calls.
 * Everything here runs on the thread of the loop the server belongs to. */
#ifndef GOLOOP_ASGI_H
#define GOLOOP_ASGI_H
#include "gl.h"

/* _goloop.AsgiServer: Python's handle on a Go httpserver.Server attached to a loop. */
typedef struct {
    PyObject_HEAD
    long sid;              /* Go server id; -1 once released */
    PyObject *loop;
    PyObject *runner;      /* runner(scope, receive, send) -> coroutine */
    PyObject *template;    /* the scope's constant items */
    PyObject *scope_tpl;   /* template + every key an HTTP request sets (None): what a scope copies */
    char scope_tpl_state;  /* scope_tpl has "state" */
    PyObject *state;       /* lifespan state (dict) or NULL */
    PyObject *app;         /* set: an HTTP request calls app itself (not runner, which is still
                              the websocket's) and its coroutine runs in an AsgiRun (asgi_run.c) */
    PyObject *on_error;    /* with app: on_error(exc) logs an application's exception */
    /* the scope's last addresses, reused while they stay the same (asgi.c addr_cached) */
    PyObject *c_host, *s_addr;                  /* client host (str), server (host, port) */
    char c_key[64], s_key[64];
    Py_ssize_t c_keylen, s_keylen;
    int s_port;
} GLAsgiServer;

/* `send` of one request (and the state receive shares). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    long rid;              /* Go request id; -1 once released */
    GLAsgiServer *srv;
    PyObject *recv_fut;    /* the Future receive() returned, until resolved */
    PyObject *send_fut;    /* the Future send() returned (backpressure), until resolved */
    char finished;         /* the application returned and the request was let go (asgi_run.c) */
    char started;          /* http.response.start was accepted (held or given to Go) */
    char start_lost;       /* a held start reached Go after the client went away */
    int held_status;       /* http.response.start held in C (its header lines in hdrbuf) until
                              the first body part takes it to Go in the same call; 0: none */
} GLAsgiSend;

/* `receive` of one request: the state is its send's. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    GLAsgiSend *send;
} GLAsgiRecv;

/* The send and receive types of HTTP (asgi.c) and of the WebSocket (asgi_ws.c) share their
 * slots and send's methods (asgi.c); they differ in the call each object carries. */
void gl_asgi_send_dealloc(GLAsgiSend *self);
int gl_asgi_send_traverse(GLAsgiSend *self, visitproc visit, void *arg);
int gl_asgi_send_clear(GLAsgiSend *self);
void gl_asgi_recv_dealloc(GLAsgiRecv *self);
int gl_asgi_recv_traverse(GLAsgiRecv *self, visitproc visit, void *arg);
extern PyMethodDef gl_asgi_send_methods[];  /* _done, _fail, _status */
#define GL_ASGI_TYPE(T, slots, name, doc, ...) {                                    \
    PyVarObject_HEAD_INIT(NULL, 0)                                                  \
    .tp_name = (name),                                                              \
    .tp_basicsize = sizeof(T),                                                      \
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL, \
    .tp_doc = (doc),                                                                \
    .tp_dealloc = (destructor)slots##_dealloc,                                      \
    .tp_traverse = (traverseproc)slots##_traverse,                                  \
    .tp_call = PyVectorcall_Call,                                                   \
    .tp_vectorcall_offset = offsetof(T, vectorcall),                                \
    __VA_ARGS__}
#define GL_ASGI_SEND_TYPE(name, doc) GL_ASGI_TYPE(GLAsgiSend, gl_asgi_send, name, doc, \
    .tp_clear = (inquiry)gl_asgi_send_clear, .tp_methods = gl_asgi_send_methods)
#define GL_ASGI_RECV_TYPE(name, doc) GL_ASGI_TYPE(GLAsgiRecv, gl_asgi_recv, name, doc)

/* What makes a request's send and receive: their types and calls. */
typedef struct {
    PyTypeObject *send_type, *recv_type;
    vectorcallfunc send_call, recv_call;
} GLAsgiKind;

/* The message receive() returns now, or NULL: an error, or (none set) nothing yet. */
typedef PyObject *(*gl_asgi_message_fn)(GLAsgiSend *s);

PyObject *gl_asgi_raise_disconnected(void);  /* ClientDisconnected (asgi.c) */

/* message[key] of a dict (or any mapping), or NULL without an error when it is missing. */
static inline PyObject *gl_asgi_get(PyObject *msg, PyObject *key) {
    if (PyDict_CheckExact(msg)) return Py_XNewRef(PyDict_GetItemWithError(msg, key));
    PyObject *v = PyObject_GetItem(msg, key);
    if (v == NULL && PyErr_ExceptionMatches(PyExc_KeyError)) PyErr_Clear();
    return v;
}

/* A message's type is s (interned: usually the same object). */
static inline int gl_asgi_is(PyObject *t, PyObject *s) {
    return t == s || (PyUnicode_Check(t) && PyUnicode_Compare(t, s) == 0);
}

/* send(message)'s checks: the message's type (a new reference), or NULL with an error. */
static inline PyObject *gl_asgi_send_type(GLAsgiSend *self, PyObject *const *args, size_t nargsf, PyObject *kwnames,
                                          PyObject *type_key) {
    GL_FORK_GUARD(NULL);
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "send() takes one message");
        return NULL;
    }
    if (self->rid < 0 || self->srv->sid < 0) return gl_asgi_raise_disconnected();
    PyObject *type = gl_asgi_get(args[0], type_key);
    if (type == NULL && !PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "type");
    return type;
}

/* The bytes of body (NULL: none; bytes as they are, any other buffer through view): -1 with
 * an error; release view with PyBuffer_Release (nothing to do when body was bytes). */
static inline int gl_asgi_view(PyObject *body, Py_buffer *view, char **p, Py_ssize_t *n) {
    view->obj = NULL;
    if (body == NULL || PyBytes_CheckExact(body)) {
        *p = body != NULL ? PyBytes_AS_STRING(body) : NULL;
        *n = body != NULL ? PyBytes_GET_SIZE(body) : 0;
        return 0;
    }
    if (PyObject_GetBuffer(body, view, PyBUF_SIMPLE) < 0) return -1;
    *p = view->buf;
    *n = view->len;
    return 0;
}

/* msg[key]'s truth (absent: false); -1 with an error. */
static inline int gl_asgi_flag(PyObject *msg, PyObject *key) {
    PyObject *v = gl_asgi_get(msg, key);
    if (v == NULL) return PyErr_Occurred() ? -1 : 0;
    int on = PyObject_IsTrue(v);
    Py_DECREF(v);
    return on;
}

/* An http.response.body message's body (NULL: missing) and more_body; -1 with an error. */
static inline int gl_asgi_body(PyObject *msg, PyObject *body_key, PyObject *more_key, PyObject **body, int *more) {
    *body = gl_asgi_get(msg, body_key);
    if (*body == NULL && PyErr_Occurred()) return -1;
    *more = gl_asgi_flag(msg, more_key);
    if (*more < 0) Py_CLEAR(*body);
    return *more < 0 ? -1 : 0;
}

/* A response start's status (an int from lo to 999) or -1 with an error; what: the message type. */
static inline long gl_asgi_status(PyObject *msg, PyObject *key, long lo, const char *what) {
    PyObject *o = gl_asgi_get(msg, key);
    if (o == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "status");
        return -1;
    }
    long status = PyLong_Check(o) ? PyLong_AsLong(o) : -2;
    Py_DECREF(o);
    if (status == -1 && PyErr_Occurred()) return -1;
    if (status < lo || status > 999) {
        PyErr_Format(PyExc_RuntimeError, "ASGI '%s' status must be an integer from 100 to 999", what);
        return -1;
    }
    return status;
}

/* d[k] = v, stealing v (NULL: an error already set). */
static inline int gl_set_new(PyObject *d, PyObject *k, PyObject *v) {
    if (v == NULL) return -1;
    int rc = PyDict_SetItem(d, k, v);
    Py_DECREF(v);
    return rc;
}

/* A growing byte buffer (PyMem's raw allocator: freed by a thread's exit without the GIL,
 * server_thread.c): gbuf_put appends (s NULL: n bytes of room, to fill), -1 with
 * MemoryError (asgi.c). */
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
                                (gl_asgi_header_lines); raw memory: freed without the GIL */
    GLAsgiSend *held_start;  /* the request whose http.response.start is held (borrowed: the
                                request lets go of it before it is freed, release_own_start) */
    void *wsgi;              /* a WSGI pool thread's caches (wsgi.c's wsgi_thread), owned by its
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

/* The server binding's interned strings, in one table (gl_init_asgi interns them):
 * GLS(name) is the str object of X(name, text). */
#define GL_ASGI_STRINGS(X) \
    X(type, "type") \
    X(http, "http") \
    X(asgi, "asgi") \
    X(http_version, "http_version") \
    X(method, "method") \
    X(scheme, "scheme") \
    X(path, "path") \
    X(raw_path, "raw_path") \
    X(query_string, "query_string") \
    X(root_path, "root_path") \
    X(headers, "headers") \
    X(client, "client") \
    X(server, "server") \
    X(state, "state") \
    X(status, "status") \
    X(body, "body") \
    X(more_body, "more_body") \
    X(trailers, "trailers") \
    X(http_request, "http.request") \
    X(http_disconnect, "http.disconnect") \
    X(response_start, "http.response.start") \
    X(response_body, "http.response.body") \
    X(create_task, "create_task") \
    X(create_future, "create_future") \
    X(call_soon, "call_soon") \
    X(set_result, "set_result") \
    X(set_exception, "set_exception") \
    X(done, "done") \
    X(v10, "1.0") \
    X(v11, "1.1") \
    X(v2, "2") \
    X(v3, "3") \
    X(copy, "copy") \
    X(extensions, "extensions") \
    X(websocket, "websocket") \
    X(https, "https") \
    X(ws, "ws") \
    X(wss, "wss") \
    X(subprotocols, "subprotocols") \
    X(subprotocol, "subprotocol") \
    X(bytes, "bytes") \
    X(text, "text") \
    X(code, "code") \
    X(reason, "reason") \
    X(t_connect, "websocket.connect") \
    X(t_receive, "websocket.receive") \
    X(t_disconnect, "websocket.disconnect") \
    X(t_accept, "websocket.accept") \
    X(t_send, "websocket.send") \
    X(t_close, "websocket.close") \
    X(t_http_start, "websocket.http.response.start") \
    X(t_http_body, "websocket.http.response.body") \
    X(empty, "") \
    X(more_trailers, "more_trailers") \
    X(t_trailers, "http.response.trailers") \
    X(t_pathsend, "http.response.pathsend") \
    X(tls, "tls") \
    X(file, "file") \
    X(offset, "offset") \
    X(count, "count") \
    X(tell, "tell") \
    X(t_zerocopysend, "http.response.zerocopysend")
typedef struct {
#define GL_ASGI_STR_FIELD(name, text) PyObject *name;
    GL_ASGI_STRINGS(GL_ASGI_STR_FIELD)
#undef GL_ASGI_STR_FIELD
} GLAsgiStrings;
extern GLAsgiStrings gl_asgi_str;
#define GLS(name) (gl_asgi_str.name)

/* What Go passes to start a request or a WebSocket session (asgi.go's head, asgi_ws.go):
 * its head, the connection's addresses, what a trusted proxy changed, the scope's extensions.
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
} GLAsgiHead;

/* Called by asgi.go. */
int gl_asgi_request(GLAsgiServer *srv, long rid, const GLAsgiHead *h);
/* The fields of h every scope has, into scope (a copy of the server's template). */
int gl_asgi_fill_scope(GLAsgiServer *srv, PyObject *scope, const GLAsgiHead *h);
int gl_asgi_wake(GLAsgiSend *s, int ws);
PyObject *gl_bytes(const char *p, Py_ssize_t n);
PyObject *gl_asgi_headers(const char *blob, const int32_t *ends, int nh);  /* the scope's headers */
PyObject *gl_asgi_addr(const char *host, Py_ssize_t hlen, int port, int is_unix);  /* (host, port|None) */
int gl_init_asgi(PyObject *m);
void gl_asgi_warn(const char *msg);
PyTypeObject *gl_asgi_server_type(void);
PyTypeObject *gl_asgi_loop_type(void);                /* _goloop.LoopCore */             /* AsgiServer (WsgiServer's base: wsgi.c) */
PyObject *gl_asgi_method(const char *p, Py_ssize_t n);  /* a method's str (interned when common) */
/* asgi_run.c */
PyObject *gl_asgi_run_new(PyObject *awaitable, GLAsgiSend *send, PyObject *on_error);
int gl_init_asgi_run(PyObject *m);
int gl_asgi_is_run(PyObject *o);
PyObject *gl_asgi_take_exception(void);  /* the exception being raised, with its traceback */
/* asgi_spec.c: http.response.trailers and http.response.pathsend; asgi.c's header lines */
int gl_asgi_start_trailers(GLAsgiSend *self, PyObject *msg);
PyObject *gl_asgi_send_ext(GLAsgiSend *self, PyObject *type, PyObject *msg);
int gl_asgi_ws_extensions(PyObject *scope, PyObject *http_ext);
PyObject *gl_asgi_tls_ext(GLAsgiServer *srv, const char *blob, const int32_t *ends, int nends, int version,
                          int cipher);
int gl_asgi_header_lines(PyObject *headers);
const char *gl_asgi_hdrbuf(Py_ssize_t *n);
/* asgi.c's helpers for asgi_ws.c and asgi_spec.c */
PyObject *gl_asgi_done(PyObject *value);
int gl_asgi_finish(GLAsgiSend *s, int failed);  /* the application returned (asgi_run.c): GL_ASGI_FINISH_* */
void gl_asgi_release_start(void);         /* a held http.response.start to Go now */
PyObject *gl_asgi_answer(GLAsgiSend *self, int rc);
PyObject *gl_asgi_receive(GLAsgiRecv *self, size_t nargsf, PyObject *kwnames, gl_asgi_message_fn message);
int gl_asgi_launch(GLAsgiServer *srv, long rid, PyObject *scope, const GLAsgiKind *kind, PyObject *app);

/* WebSocket (asgi_ws.c) */
int gl_asgi_ws_request(GLAsgiServer *srv, long rid, const GLAsgiHead *h);
PyObject *gl_asgi_ws_message(GLAsgiSend *s);  /* receive()'s message (a gl_asgi_message_fn) */
PyObject *gl_ws_text(const char *p, Py_ssize_t n);
int gl_init_asgi_ws(PyObject *m);
int gl_init_server_static(PyObject *m); /* server_static.c */

/* server_proxy_metrics.c: proxy headers, metrics, configuration (off the per-request path) */
int gl_asgi_proxy_scope(PyObject *scope, const char *enc, Py_ssize_t n);
PyObject *gl_asgi_srv_configure(GLAsgiServer *self, PyObject *args, PyObject *kwds);
PyObject *gl_asgi_srv_metrics(GLAsgiServer *self, PyObject *arg);

/* Go's answers to Start/Send (asgi.go) */
#define GL_ASGI_OK 0
#define GL_ASGI_PAUSED 1
#define GL_ASGI_ERR_DISCONNECTED (-2)
#define GL_ASGI_ERR_RUNTIME (-3)     /* message in a RuntimeError */
#define GL_ASGI_ERR_GONE (-4)        /* the request was released */
/* what the end of an application's call found (httpserver.Finish*) */
#define GL_ASGI_FINISH_OK 0
#define GL_ASGI_FINISH_LOST 1           /* the client went away */
#define GL_ASGI_FINISH_NOT_STARTED 2    /* no response started: answered 500 */
#define GL_ASGI_FINISH_INCOMPLETE 3     /* the response started and was cut */
/* receive states (httpserver.RecvState) */
#define GL_RECV_WAIT 0
#define GL_RECV_BODY 1
#define GL_RECV_LAST 2
#define GL_RECV_DISCONNECT 3

#endif
