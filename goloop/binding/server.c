/* goloop serve's binding, the part both application interfaces share: the HttpServer type
 * (the Go server's handle: listen, close, abort, release, stats, TLS; configure and metrics
 * are server_proxy_metrics.c's), whose subtypes are AsgiServer (asgi.c) and WsgiServer
 * (wsgi.c), and the helpers both use: byte buffers, bytes and method strs, ClientDisconnected
 * and the exception being raised. A server's methods run on the thread of its loop. */
#include "server.h"
#include "_cgo_export.h"

static PyTypeObject ServerType;
static PyTypeObject *loopcore_type;  /* _goloop.LoopCore */
static PyObject *ClientDisconnected;
static PyObject *empty_bytes;
#define NMETHODS 9
static const char *method_names[NMETHODS] = {"GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH",
                                             "CONNECT", "TRACE"};
static PyObject *method_objs[NMETHODS];

/* ---------- helpers ---------- */

PyObject *gl_bytes(const char *p, Py_ssize_t n) {
    if (n == 0) return Py_NewRef(empty_bytes);
    return PyBytes_FromStringAndSize(p, n);
}

PyObject *gl_method(const char *p, Py_ssize_t n) {
    for (int i = 0; i < NMETHODS; i++) {
        if ((Py_ssize_t)strlen(method_names[i]) == n && memcmp(method_names[i], p, n) == 0)
            return Py_NewRef(method_objs[i]);
    }
    return PyUnicode_DecodeLatin1(p, n, NULL);
}

int gbuf_put(gbuf *b, const char *s, Py_ssize_t n) {
    if (b->n + n > b->cap) {
        Py_ssize_t cap = b->cap * 2 + n + 256;
        char *p = PyMem_RawRealloc(b->p, cap);
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->p = p;
        b->cap = cap;
    }
    if (s != NULL) memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

PyObject *gl_raise_disconnected(void) {
    PyErr_SetString(ClientDisconnected, "the client disconnected");
    return NULL;
}

PyObject *gl_disconnected_error(void) {
    return PyObject_CallFunction(ClientDisconnected, "s", "the client disconnected");
}

/* The exception being raised, as one object with its traceback (3.12's PyErr_GetRaisedException). */
PyObject *gl_take_exception(void) {
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (tb != NULL && v != NULL) PyException_SetTraceback(v, tb);
    Py_XDECREF(t);
    Py_XDECREF(tb);
    return v;
#endif
}

/* ---------- the server object ---------- */

PyTypeObject *gl_server_type(void) { return &ServerType; }
PyTypeObject *gl_loop_type(void) { return loopcore_type; }

static PyObject *srv_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (type == &ServerType) {
        PyErr_SetString(PyExc_TypeError, "HttpServer is made as an AsgiServer or a WsgiServer");
        return NULL;
    }
    GLServer *self = (GLServer *)type->tp_alloc(type, 0);
    if (self != NULL) self->sid = -1;
    return (PyObject *)self;
}

int gl_server_traverse(GLServer *self, visitproc visit, void *arg) {
    Py_VISIT(self->loop);
    return 0;
}

void gl_server_release(GLServer *self) {
    if (self->sid >= 0 && !gl_forked) glServerRelease(self->sid);
}

void gl_server_dealloc(GLServer *self) {
    gl_server_release(self);
    Py_CLEAR(self->loop);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

#define SRV_CHECK(self) do { GL_FORK_GUARD(NULL); if ((self)->sid < 0) { \
    PyErr_SetString(PyExc_RuntimeError, "the server is closed"); return NULL; } } while (0)

static PyObject *srv_listen(GLServer *self, PyObject *arg) {
    SRV_CHECK(self);
    long fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred()) return NULL;
    if (fd < 0 || fd > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "invalid file descriptor");
        return NULL;
    }
    if (glServerListen(self->sid, fd) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *srv_close(GLServer *self, PyObject *Py_UNUSED(ignored)) {
    SRV_CHECK(self);
    if (glServerClose(self->sid, 0) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *srv_abort(GLServer *self, PyObject *Py_UNUSED(ignored)) {
    SRV_CHECK(self);
    if (glServerClose(self->sid, 1) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *srv_release(GLServer *self, PyObject *Py_UNUSED(ignored)) {
    GL_FORK_GUARD(NULL);
    if (self->sid >= 0) glServerRelease(self->sid);
    Py_RETURN_NONE;
}

static PyObject *srv_stats(GLServer *self, PyObject *Py_UNUSED(ignored)) {
    SRV_CHECK(self);
    long conns, inflight, requests;
    if (glServerStats(self->sid, &conns, &inflight, &requests) < 0) return NULL;
    return Py_BuildValue("(lll)", conns, inflight, requests);
}

static PyObject *srv_flush(GLServer *self, PyObject *Py_UNUSED(ignored)) {
    GL_FORK_GUARD(NULL);
    if (self->sid >= 0 && glServerFlush(self->sid) < 0) return NULL;
    Py_RETURN_NONE;
}

/* set_tls(pairs, password, ca_certs, cert_reqs): TLS for every connection accepted from now
 * on (server_tls.go); pairs is b"cert\0key\0cert\0key..." (file system encoding; an empty key:
 * in the cert's file). */
static PyObject *srv_set_tls(GLServer *self, PyObject *args) {
    SRV_CHECK(self);
    const char *pairs, *pw, *ca;
    Py_ssize_t plen;
    int reqs;
    if (!PyArg_ParseTuple(args, "y#zzi:set_tls", &pairs, &plen, &pw, &ca, &reqs)) return NULL;
    if (glServerSetTLS(self->sid, (char *)pairs, plen, (char *)pw, (char *)ca, reqs) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *srv_reload_tls(GLServer *self, PyObject *Py_UNUSED(ignored)) {
    SRV_CHECK(self);
    if (glServerReloadTLS(self->sid) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef srv_methods[] = {
    {"set_tls", (PyCFunction)srv_set_tls, METH_VARARGS,
     "set_tls(pairs, password, ca_certs, cert_reqs): TLS (and h2 by ALPN); pairs: b'cert\\0key\\0...'."},
    {"reload_tls", (PyCFunction)srv_reload_tls, METH_NOARGS,
     "Read the TLS files again: the next handshakes use them (the old ones stay on error)."},
    {"listen", (PyCFunction)srv_listen, METH_O, "listen(fd): serve the listening socket fd (a duplicate)."},
    {"close", (PyCFunction)srv_close, METH_NOARGS,
     "Stop accepting; idle connections close now, busy ones after their responses."},
    {"abort", (PyCFunction)srv_abort, METH_NOARGS, "Close every connection now."},
    {"release", (PyCFunction)srv_release, METH_NOARGS,
     "Abort and detach from the loop, dropping every reference Go holds (loop thread)."},
    {"stats", (PyCFunction)srv_stats, METH_NOARGS, "(connections, requests in flight, requests so far)"},
    {"_flush", (PyCFunction)srv_flush, METH_NOARGS, NULL},
    {"configure", (PyCFunction)(void (*)(void))gl_server_configure, METH_VARARGS | METH_KEYWORDS,
     "configure(proxy_headers=None, metrics=False, metrics_path=None, timeout_request_head=None, "
     "min_request_body_rate=0, h2_only=False, min_response_rate=240, min_response_grace=0), before set_tls "
     "and listen (server_proxy_metrics.c)."},
    {"metrics", (PyCFunction)gl_server_metrics, METH_O, "metrics(fmt): 'prometheus' (str) or 'json' (str)."},
    {NULL}};

static PyTypeObject ServerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop._goloop.HttpServer",
    .tp_basicsize = sizeof(GLServer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "goloop serve's HTTP server on a goloop loop: what AsgiServer and WsgiServer share.",
    .tp_new = srv_new,
    .tp_dealloc = (destructor)gl_server_dealloc,
    .tp_traverse = (traverseproc)gl_server_traverse,
    .tp_methods = srv_methods,
};

/* ---------- init ---------- */

int gl_init_server(PyObject *m) {
    if (gl_init_thread_state() < 0) return -1;
    for (int i = 0; i < NMETHODS; i++)
        if ((method_objs[i] = PyUnicode_InternFromString(method_names[i])) == NULL) return -1;
    if ((empty_bytes = PyBytes_FromStringAndSize(NULL, 0)) == NULL) return -1;
    loopcore_type = (PyTypeObject *)PyObject_GetAttrString(m, "LoopCore");
    if (loopcore_type == NULL || PyType_Ready(&ServerType) < 0) return -1;
    /* goloop.ClientDisconnected is the package's (defined in Python: importing goloop does not
     * load this library); a copy of its own only if this module was loaded without it */
    PyObject *pkg = PyImport_ImportModule("goloop");
    if (pkg != NULL) {
        ClientDisconnected = PyObject_GetAttrString(pkg, "ClientDisconnected");
        Py_DECREF(pkg);
    }
    if (ClientDisconnected == NULL || !PyExceptionClass_Check(ClientDisconnected) ||
        !PyObject_IsSubclass(ClientDisconnected, PyExc_OSError)) {
        PyErr_Clear();
        Py_XDECREF(ClientDisconnected);
        ClientDisconnected = PyErr_NewExceptionWithDoc(
            "goloop.ClientDisconnected", "send() on a request whose client went away (ASGI 2.4: an OSError).",
            PyExc_OSError, NULL);
    }
    if (ClientDisconnected == NULL) return -1;
    if (PyModule_AddObjectRef(m, "ClientDisconnected", ClientDisconnected) < 0 ||
        PyModule_AddObjectRef(m, "HttpServer", (PyObject *)&ServerType) < 0)
        return -1;
    return 0;
}
