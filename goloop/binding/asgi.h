/* goloop serve's ASGI interface (asgi*.c): the server's ASGI subtype, a request's send and
 * receive, the scope's strings and helpers, and what asgi.go calls. Everything here runs on
 * the thread of the loop the server belongs to. What WSGI shares is server.h's. */
#ifndef GOLOOP_ASGI_H
#define GOLOOP_ASGI_H
#include "server.h"

/* _goloop.AsgiServer (an HttpServer, server.h): requests answered by tasks on the loop. */
typedef struct {
    GLServer base;
    PyObject *runner;      /* runner(scope, receive, send) -> coroutine */
    PyObject *template;    /* the scope's constant items */
    PyObject *scope_tpl;   /* template + every key an HTTP request sets (None): what a scope copies */
    char scope_tpl_state;  /* scope_tpl has "state" */
    PyObject *state;       /* lifespan state (dict) or NULL */
    PyObject *app;         /* set: an HTTP request calls app itself (not runner, which is still
                              the websocket's) and its coroutine runs in an AsgiRun (asgi_run.c) */
    PyObject *on_error;    /* with app: on_error(exc) logs an application's exception */
    PyObject *access;      /* with app, or NULL: access(scope, status, head) after each HTTP
                              request (the access log: serve/server.py's access line) */
    /* the scope's last addresses, reused while they stay the same (asgi.c addr_cached) */
    PyObject *c_host, *s_addr;                  /* client host (str), server (host, port) */
    char c_key[64], s_key[64];
    Py_ssize_t c_keylen, s_keylen;
    int s_port;
    /* ids of requests whose application returned after completing its response, for Go
     * to finish at the server's next take, flush or release (asgi.go finishPending) instead
     * of one call into Go each (gl_asgi_finish_done); raw memory, the loop thread's */
    long *fin;
    int nfin, capfin;
} GLAsgiServer;

/* `send` of one request (and the state receive shares). */
typedef struct GLAsgiSend {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    long rid;              /* Go request id; -1 once released */
    GLAsgiServer *srv;
    PyObject *recv_fut;    /* the Future receive() returned, until resolved */
    PyObject *send_fut;    /* the Future send() returned (backpressure), until resolved */
    char finished;         /* the application returned and the request was let go (asgi_run.c) */
    char started;          /* http.response.start was accepted (held or given to Go) */
    char start_lost;       /* a held start reached Go after the client went away */
    char complete;         /* the last body part was given to Go (more_body false) */
    int held_status;       /* http.response.start held in C (its header lines in hdrbuf) until
                              the first body part takes it to Go in the same call; 0: none */
    int status;            /* the status of the http.response.start accepted (0: none yet): the
                              access line's, read without a call into Go (asgi_run.c, _status) */
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
    if (self->rid < 0 || self->srv->base.sid < 0) return gl_raise_disconnected();
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

/* what the end of an application's call found (httpserver.Finish*) */
#define GL_ASGI_FINISH_OK 0
#define GL_ASGI_FINISH_LOST 1           /* the client went away */
#define GL_ASGI_FINISH_NOT_STARTED 2    /* no response started: answered 500 */
#define GL_ASGI_FINISH_INCOMPLETE 3     /* the response started and was cut */

/* Called by asgi.go. */
int gl_asgi_request(GLAsgiServer *srv, long rid, const GLHead *h);
/* The fields of h every scope has, into scope (a copy of the server's template). */
int gl_asgi_fill_scope(GLAsgiServer *srv, PyObject *scope, const GLHead *h);
int gl_asgi_wake(GLAsgiSend *s, int ws);
PyObject *gl_asgi_headers(const char *blob, const int32_t *ends, int nh);  /* the scope's headers */
PyObject *gl_asgi_addr(const char *host, Py_ssize_t hlen, int port, int is_unix);  /* (host, port|None) */
int gl_init_asgi(PyObject *m);
/* asgi_run.c */
PyObject *gl_asgi_run_new(PyObject *awaitable, GLAsgiSend *send, PyObject *on_error, PyObject *scope);
void gl_asgi_access(PyObject *access, PyObject *scope, int status);  /* the access log's call */
int gl_init_asgi_run(PyObject *m);
int gl_asgi_is_run(PyObject *o);
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
int gl_asgi_finish_done(GLAsgiSend *s);   /* ... and ended normally (asgi_run.c): GL_ASGI_FINISH_* */
void gl_asgi_release_start(void);         /* a held http.response.start to Go now */
PyObject *gl_asgi_answer(GLAsgiSend *self, int rc);
PyObject *gl_asgi_receive(GLAsgiRecv *self, size_t nargsf, PyObject *kwnames, gl_asgi_message_fn message);
int gl_asgi_launch(GLAsgiServer *srv, long rid, PyObject *scope, const GLAsgiKind *kind, PyObject *app);

/* WebSocket (asgi_ws.c) */
int gl_asgi_ws_request(GLAsgiServer *srv, long rid, const GLHead *h);
PyObject *gl_asgi_ws_message(GLAsgiSend *s);  /* receive()'s message (a gl_asgi_message_fn) */
PyObject *gl_ws_text(const char *p, Py_ssize_t n);
int gl_init_asgi_ws(PyObject *m);

/* what a trusted proxy's headers changed, applied to a scope (asgi.go passes it then) */
int gl_asgi_proxy_scope(PyObject *scope, const char *enc, Py_ssize_t n);

#endif
