/* goloop serve's binding (C side): the ASGI scope of each request, and receive/send as C
 * callables. asgi.go calls gl_asgi_request for each request the loop takes from the Go
 * server's queue; send and receive call back into Go (asgi.go's exports). All of it runs on
 * the thread running the server's loop. */
#include "asgi.h"
#include "_cgo_export.h"

static void release_own_start(GLAsgiSend *s);
static PyTypeObject DoneType, SendType, RecvType, ServerType;

/* interned strings */
GLAsgiStrings gl_asgi_str;  /* asgi.h: GL_ASGI_STRINGS */
static PyObject *msg_disconnect;      /* {"type": "http.disconnect"} (copied for each use) */

/* ---------- a finished awaitable: `await x` returns x's value at once ---------- */

typedef struct {
    PyObject_HEAD
    PyObject *value;
} GLDone;

static GLDone *done_none;  /* the one for None: send()'s usual answer */

static PyObject *done_new(PyObject *value) {
    if (value == Py_None) return Py_NewRef((PyObject *)done_none);
    GLDone *d = PyObject_New(GLDone, &DoneType);
    if (d == NULL) return NULL;
    d->value = Py_NewRef(value);
    return (PyObject *)d;
}

static void done_dealloc(GLDone *d) {
    Py_XDECREF(d->value);
    PyObject_Free(d);
}

static PyObject *done_await(PyObject *self) { return Py_NewRef(self); }

static PyObject *done_next(GLDone *d) {
    if (d->value == Py_None) return NULL;  /* StopIteration(None) */
    PyObject *exc = PyObject_CallOneArg(PyExc_StopIteration, d->value);
    if (exc != NULL) {
        PyErr_SetObject(PyExc_StopIteration, exc);
        Py_DECREF(exc);
    }
    return NULL;
}

static PySendResult done_send(GLDone *d, PyObject *arg, PyObject **result) {
    *result = Py_NewRef(d->value);
    return PYGEN_RETURN;
}

static PyObject *done_send_meth(GLDone *d, PyObject *arg) { return done_next(d); }

static PyObject *done_throw(GLDone *d, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "throw expected at least 1 argument");
        return NULL;
    }
    PyObject *typ = args[0];
    if (PyExceptionInstance_Check(typ)) {
        PyErr_SetObject((PyObject *)Py_TYPE(typ), typ);
    } else {
        PyErr_SetObject(typ, nargs > 1 ? args[1] : NULL);
    }
    return NULL;
}

static PyObject *done_close(GLDone *d, PyObject *Py_UNUSED(ignored)) { Py_RETURN_NONE; }

static PyMethodDef done_methods[] = {
    {"send", (PyCFunction)done_send_meth, METH_O, NULL},
    {"throw", (PyCFunction)(void (*)(void))done_throw, METH_FASTCALL, NULL},
    {"close", (PyCFunction)done_close, METH_NOARGS, NULL},
    {NULL}};

static PyAsyncMethods done_async = {.am_await = done_await, .am_send = (sendfunc)done_send};

static PyTypeObject DoneType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop._Done",
    .tp_basicsize = sizeof(GLDone),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An awaitable that is already finished (what goloop serve's send and receive return).",
    .tp_dealloc = (destructor)done_dealloc,
    .tp_as_async = &done_async,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)done_next,
    .tp_methods = done_methods,
};

/* ---------- the server object: an HttpServer (server.c) whose requests are tasks ---------- */

static int srv_init(GLAsgiServer *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"loop", "runner", "template", "state", "max_head", "keep_alive_ms",
                             "limit_concurrency", "server_header", "date_header", "headers", "on_error", "app", "access",
                             NULL};
    PyObject *loop, *runner, *template, *state, *on_error = Py_None, *app = Py_None, *access = Py_None;
    long max_head, ka, limit;
    int server_header, date_header;
    const char *headers;
    Py_ssize_t hlen;
    GL_FORK_GUARD(-1);
    if (self->base.sid >= 0) {
        PyErr_SetString(PyExc_RuntimeError, "AsgiServer already initialized");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO!Olllppy#|OOO", kwlist, &loop, &runner, &PyDict_Type,
                                     &template, &state, &max_head, &ka, &limit, &server_header,
                                     &date_header, &headers, &hlen, &on_error, &app, &access))
        return -1;
    if (!PyObject_TypeCheck(loop, gl_loop_type())) {
        PyErr_SetString(PyExc_TypeError, "AsgiServer needs a goloop loop");
        return -1;
    }
    self->base.loop = Py_NewRef(loop);
    self->runner = Py_NewRef(runner);
    if (on_error != Py_None && app != Py_None) {
        self->on_error = Py_NewRef(on_error);
        self->app = Py_NewRef(app);
        if (access != Py_None) self->access = Py_NewRef(access);
    }
    self->template = Py_NewRef(template);
    self->state = (state == Py_None) ? NULL : Py_NewRef(state);
    if (glAsgiServerNew(self, (GLLoop *)loop, max_head, ka, limit, server_header, date_header,
                        (char *)headers, hlen) < 0)
        return -1;
    return 0;
}

static int srv_traverse(GLAsgiServer *self, visitproc visit, void *arg) {
    Py_VISIT(self->runner);
    Py_VISIT(self->on_error);
    Py_VISIT(self->app);
    Py_VISIT(self->access);
    Py_VISIT(self->c_host);
    Py_VISIT(self->s_addr);
    Py_VISIT(self->template);
    Py_VISIT(self->scope_tpl);
    Py_VISIT(self->state);
    return gl_server_traverse(&self->base, visit, arg);
}

static int srv_clear(GLAsgiServer *self) {
    Py_CLEAR(self->runner);
    Py_CLEAR(self->on_error);
    Py_CLEAR(self->app);
    Py_CLEAR(self->access);
    Py_CLEAR(self->c_host);
    Py_CLEAR(self->s_addr);
    Py_CLEAR(self->template);
    Py_CLEAR(self->scope_tpl);
    Py_CLEAR(self->state);
    return 0;
}

static void srv_dealloc(GLAsgiServer *self) {
    PyObject_GC_UnTrack(self);
    gl_server_release(&self->base);  /* (Go finished the pending requests: fin is empty) */
    PyMem_RawFree(self->fin);
    self->fin = NULL;
    self->nfin = self->capfin = 0;
    srv_clear(self);
    gl_server_dealloc(&self->base);
}

static PyObject *srv_set_state(GLAsgiServer *self, PyObject *state) {
    Py_XSETREF(self->state, state == Py_None ? NULL : Py_NewRef(state));
    Py_RETURN_NONE;
}

static PyMethodDef srv_methods[] = {
    {"set_state", (PyCFunction)srv_set_state, METH_O, "The lifespan state copied into each scope."},
    {NULL}};

static PyTypeObject ServerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop._goloop.AsgiServer",
    .tp_basicsize = sizeof(GLAsgiServer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "goloop serve's ASGI server on a goloop loop (see goloop.serve.server).",
    .tp_init = (initproc)srv_init,
    .tp_dealloc = (destructor)srv_dealloc,
    .tp_traverse = (traverseproc)srv_traverse,
    .tp_clear = (inquiry)srv_clear,
    .tp_methods = srv_methods,
};

/* ---------- send and receive: the slots of HTTP's and the WebSocket's types ---------- */

void gl_asgi_send_dealloc(GLAsgiSend *self) {
    PyObject_GC_UnTrack(self);
    release_own_start(self);
    if (self->rid >= 0 && !gl_forked) glAsgiReqFree(self->rid);
    Py_CLEAR(self->recv_fut);
    Py_CLEAR(self->send_fut);
    Py_CLEAR(self->srv);
    PyObject_GC_Del(self);
}

int gl_asgi_send_traverse(GLAsgiSend *self, visitproc visit, void *arg) {
    Py_VISIT(self->srv);
    Py_VISIT(self->recv_fut);
    Py_VISIT(self->send_fut);
    return 0;
}

int gl_asgi_send_clear(GLAsgiSend *self) {
    Py_CLEAR(self->recv_fut);
    Py_CLEAR(self->send_fut);
    return 0;
}

void gl_asgi_recv_dealloc(GLAsgiRecv *self) {
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->send);
    PyObject_GC_Del(self);
}

int gl_asgi_recv_traverse(GLAsgiRecv *self, visitproc visit, void *arg) {
    Py_VISIT(self->send);
    return 0;
}

/* ---------- send ---------- */


/* The response head's buffer (hdrbuf) and the request whose http.response.start is held
 * (held_start: GLAsgiSend.held_status, its header lines in hdrbuf until its first body part
 * or until hdrbuf is needed for something else) are the thread's (gl_thread_state): loops
 * of several threads serve at once (3.13t). */

/* Give the held start, if any, to Go now (before hdrbuf is reused, or before an operation
 * of its request that needs Go to know the response started). A client that went away
 * meanwhile is reported by that request's next send. */
void gl_asgi_release_start(void) {
    gl_thread_state *t = gl_ts;
    GLAsgiSend *s = t != NULL ? t->held_start : NULL;
    if (s == NULL) return;
    t->held_start = NULL;
    int status = s->held_status;
    s->held_status = 0;
    if (gl_forked || s->rid < 0 || s->srv->base.sid < 0) return;
    int rc = glAsgiStart(s->srv->base.sid, s->rid, status, t->hdrbuf.p, t->hdrbuf.n);
    if (rc == GL_ERR_DISCONNECTED || rc == GL_ERR_GONE) s->start_lost = 1;
    else if (rc < 0) PyErr_WriteUnraisable((PyObject *)s);  /* cannot happen: checked when held */
}

/* The held start of s, if s has one, to Go (see gl_asgi_release_start). */
static void release_own_start(GLAsgiSend *s) {
    if (s->held_status != 0 && gl_ts != NULL && gl_ts->held_start == s) gl_asgi_release_start();
}


/* What a byte may not be in a header name (HB_NAME: a control, space, ':', DEL and above,
 * so CR, LF and NUL too) or in a value (HB_VALUE: CR, LF, NUL): h11's checks, one table
 * look-up per byte (set up by gl_init_asgi). */
#define HB_VALUE 1
#define HB_NAME 2
static unsigned char hdr_bad[256];

static void hdr_bad_init(void) {
    for (int c = 0; c < 256; c++) {
        hdr_bad[c] = (unsigned char)(((c <= ' ' || c == ':' || c >= 0x7f) ? HB_NAME : 0) |
                                     ((c == '\r' || c == '\n' || c == 0) ? HB_VALUE : 0));
    }
}

/* bytes of a header name or value, checked the way h11 checks them (no CR, LF, NUL; a
 * name is a non-empty token without ':' or whitespace). */
static int header_part(PyObject *o, int is_name, const char **p, Py_ssize_t *n) {
    if (!PyBytes_Check(o)) {
        PyErr_Format(PyExc_TypeError, "ASGI header %s must be bytes, not %.100s", is_name ? "name" : "value",
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(o);
    Py_ssize_t len = PyBytes_GET_SIZE(o);
    unsigned char acc = 0;
    for (Py_ssize_t i = 0; i < len; i++) acc |= hdr_bad[b[i]];
    *p = (const char *)b;
    *n = len;
    if ((acc & (is_name ? HB_NAME : HB_VALUE)) == 0 && (len > 0 || !is_name)) return 0;
    PyErr_Format(PyExc_RuntimeError, "Invalid HTTP header %s.", is_name ? "name" : "value");
    return -1;
}

/* The header lines ("name: value\r\n" each) of an ASGI headers iterable (NULL: none) into
 * hdrbuf (gl_asgi_hdrbuf), checked; steals the reference to headers. */
int gl_asgi_header_lines(PyObject *headers) {
    gl_thread_state *t = gl_thread();
    if (t == NULL) {
        Py_XDECREF(headers);
        return -1;
    }
    gbuf *hdrbuf = &t->hdrbuf;
    gl_asgi_release_start();  /* hdrbuf holds a start not yet in Go */
    hdrbuf->n = 0;
    if (headers != NULL) {
        /* a list or tuple is indexed: no iterator object (one GC allocation less per
         * response). The size is read at each step and the item referenced, so Python code
         * a pair runs (a sequence's __iter__) may change the list. Free-threaded builds
         * iterate lists (another thread may change one). */
#ifdef Py_GIL_DISABLED
        int indexed = PyTuple_CheckExact(headers);
#else
        int indexed = PyList_CheckExact(headers) || PyTuple_CheckExact(headers);
#endif
        PyObject *it = indexed ? Py_NewRef(headers) : PyObject_GetIter(headers);
        Py_DECREF(headers);
        if (it == NULL) return -1;
        PyObject *pair;
        Py_ssize_t i = 0;
        while ((pair = !indexed ? PyIter_Next(it)
                                : i < PySequence_Fast_GET_SIZE(it) ? Py_NewRef(PySequence_Fast_GET_ITEM(it, i++))
                                                                   : NULL) != NULL) {
            PyObject *name, *value;
            const char *np, *vp;
            Py_ssize_t nn, vn;
            int bad;
            if (PyTuple_CheckExact(pair) && PyTuple_GET_SIZE(pair) == 2) {
                name = Py_NewRef(PyTuple_GET_ITEM(pair, 0));
                value = Py_NewRef(PyTuple_GET_ITEM(pair, 1));
            } else {
                PyObject *seq = PySequence_Fast(pair, "ASGI headers must be [name, value] pairs");
                if (seq == NULL || PySequence_Fast_GET_SIZE(seq) != 2) {
                    if (seq != NULL) PyErr_SetString(PyExc_TypeError, "ASGI headers must be [name, value] pairs");
                    Py_XDECREF(seq);
                    Py_DECREF(pair);
                    Py_DECREF(it);
                    return -1;
                }
                name = Py_NewRef(PySequence_Fast_GET_ITEM(seq, 0));
                value = Py_NewRef(PySequence_Fast_GET_ITEM(seq, 1));
                Py_DECREF(seq);
            }
            Py_DECREF(pair);
            bad = header_part(name, 1, &np, &nn) < 0 || header_part(value, 0, &vp, &vn) < 0 ||
                  gbuf_put(hdrbuf, NULL, nn + vn + 4) < 0;  /* the line's room, filled below */
            if (!bad) {
                char *w = hdrbuf->p + hdrbuf->n - (nn + vn + 4);
                memcpy(w, np, nn);
                memcpy(w + nn, ": ", 2);
                memcpy(w + nn + 2, vp, vn);
                memcpy(w + nn + 2 + vn, "\r\n", 2);
            }
            Py_DECREF(name);
            Py_DECREF(value);
            if (bad) {
                Py_DECREF(it);
                return -1;
            }
        }
        Py_DECREF(it);
        if (PyErr_Occurred()) return -1;
    }
    return 0;
}

const char *gl_asgi_hdrbuf(Py_ssize_t *n) {
    gl_thread_state *t = gl_ts;  /* made by gl_asgi_header_lines, which fills it */
    *n = t != NULL ? t->hdrbuf.n : 0;
    return t != NULL ? t->hdrbuf.p : NULL;
}

/* A second http.response.start: the error Go gives it (send_start refuses one itself when
 * the first was held; send_after_finish when the request was let go). */
#define START_TWICE "Unexpected ASGI message 'http.response.start' sent, after response already started."

static PyObject *send_start(GLAsgiSend *self, PyObject *msg) {
    if (self->started) {
        PyErr_SetString(PyExc_RuntimeError, START_TWICE);
        return NULL;
    }
    long status = gl_asgi_status(msg, GLS(status), 100, "http.response.start");
    if (status < 0) return NULL;
    PyObject *headers = gl_asgi_get(msg, GLS(headers));
    if (headers == NULL && PyErr_Occurred()) return NULL;
    if (gl_asgi_header_lines(headers) < 0) return NULL;
    PyObject *tr = PyDict_CheckExact(msg) ? PyDict_GetItemWithError(msg, GLS(trailers)) : NULL;
    if (tr == NULL && PyErr_Occurred()) return NULL;
    if (PyDict_CheckExact(msg) && tr == NULL) {
        /* held until the first body part, which takes it to Go in the same call (Go writes
         * nothing before it anyway); a second start is refused here as Go would */
        self->held_status = self->status = (int)status;
        self->started = 1;
        gl_ts->held_start = self;  /* (made by gl_asgi_header_lines) */
        return Py_NewRef((PyObject *)done_none);
    }
    int rc = glAsgiStart(self->srv->base.sid, self->rid, status, gl_ts->hdrbuf.p, gl_ts->hdrbuf.n);
    if (rc == GL_ERR_DISCONNECTED || rc == GL_ERR_GONE) return gl_raise_disconnected();
    if (rc < 0) return NULL;
    self->started = 1;
    self->status = (int)status;
    if (gl_asgi_start_trailers(self, msg) < 0) return NULL; /* trailers: True (asgi_spec.c) */
    return Py_NewRef((PyObject *)done_none);
}

static PyObject *new_future(GLAsgiSend *self, PyObject **slot) {
    PyObject *fut = PyObject_CallMethodNoArgs(self->srv->base.loop, GLS(create_future));
    if (fut == NULL) return NULL;
    Py_XSETREF(*slot, Py_NewRef(fut));
    glAsgiWait(self->srv->base.sid, self->rid, self);
    return fut;
}

/* Go's answer to a send: None (a finished awaitable), a Future (backpressure) or an error. */
static inline PyObject *answer(GLAsgiSend *self, int rc) {
    if (rc == GL_ERR_DISCONNECTED || rc == GL_ERR_GONE) return gl_raise_disconnected();
    if (rc < 0) return NULL;
    if (rc == GL_PAUSED) return new_future(self, &self->send_fut);
    return Py_NewRef((PyObject *)done_none);
}

PyObject *gl_asgi_answer(GLAsgiSend *self, int rc) { return answer(self, rc); }

static PyObject *send_body(GLAsgiSend *self, PyObject *msg) {
    PyObject *body;
    int more, rc;
    if (gl_asgi_body(msg, GLS(body), GLS(more_body), &body, &more) < 0) return NULL;
    Py_buffer view;
    char *p;
    Py_ssize_t n;
    rc = gl_asgi_view(body, &view, &p, &n);  /* -1: an error, which answer() returns */
    /* an exact bytes object is immutable: Go may hold it instead of copying a large body */
    PyObject *keep = body != NULL && PyBytes_CheckExact(body) ? body : NULL;
    if (rc == 0) {
        if (self->start_lost) {
            rc = GL_ERR_DISCONNECTED;
        } else if (self->held_status != 0) {  /* the held start and this part: one call */
            int status = self->held_status;
            self->held_status = 0;
            gl_thread_state *t = gl_thread();  /* (made when the start was held) */
            if (t == NULL) {
                rc = -1;
            } else {
                t->held_start = NULL;
                rc = glAsgiStartSend(self->srv->base.sid, self->rid, status, t->hdrbuf.p, t->hdrbuf.n, p, n, more, keep);
            }
        } else {
            rc = glAsgiSend(self->srv->base.sid, self->rid, p, n, more, keep);
        }
        PyBuffer_Release(&view);
        if (rc >= 0 && !more) self->complete = 1;
    }
    Py_XDECREF(body);
    return answer(self, rc);
}

/* send() after the application returned: what Go answers then (AppDone started and completed
 * the response), raised without Go (the request was let go). */
static PyObject *send_after_finish(PyObject *msg) {
    PyObject *type = gl_asgi_get(msg, GLS(type));
    if (type == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "type");
        return NULL;
    }
    int start = PyUnicode_Check(type) && PyUnicode_Compare(type, GLS(response_start)) == 0;
    if (start)
        PyErr_SetString(PyExc_RuntimeError, START_TWICE);
    else if (!PyErr_Occurred())
        PyErr_Format(PyExc_RuntimeError, "Unexpected ASGI message %R sent, after response already completed.", type);
    Py_DECREF(type);
    return NULL;
}

static PyObject *send_call(GLAsgiSend *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (self->finished && PyVectorcall_NARGS(nargsf) == 1 && !(kwnames && PyTuple_GET_SIZE(kwnames)))
        return send_after_finish(args[0]);
    PyObject *type = gl_asgi_send_type(self, args, nargsf, kwnames, GLS(type)), *msg;
    if (type == NULL) return NULL;
    msg = args[0];
    PyObject *r;
    /* the same objects usually (interned): both compared by identity before by value */
    int body = type == GLS(response_body), start = !body && type == GLS(response_start);
    if (!body && !start && PyUnicode_Check(type)) {
        body = PyUnicode_Compare(type, GLS(response_body)) == 0;
        start = !body && PyUnicode_Compare(type, GLS(response_start)) == 0;
    }
    if (body) {
        r = send_body(self, msg);
    } else if (start) {
        r = send_start(self, msg);
    } else if (!PyErr_Occurred()) {
        release_own_start(self);
        r = self->start_lost ? gl_raise_disconnected()
                             : gl_asgi_send_ext(self, type, msg); /* trailers, pathsend (asgi_spec.c) */
    } else {
        r = NULL;
    }
    Py_DECREF(type);
    return r;
}

/* _done(), _fail(): what Go found (GL_ASGI_FINISH_*: the runner logs it). */
static PyObject *app_done(GLAsgiSend *self, int failed) {
    GL_FORK_GUARD(NULL);
    release_own_start(self);
    int found = GL_ASGI_FINISH_OK;
    if (self->rid >= 0 && self->srv->base.sid >= 0) found = glAsgiDone(self->srv->base.sid, self->rid, failed);
    if (found < 0) return NULL;
    return PyLong_FromLong(found);
}

static PyObject *send_done(GLAsgiSend *self, PyObject *Py_UNUSED(ignored)) { return app_done(self, 0); }

static PyObject *send_fail(GLAsgiSend *self, PyObject *Py_UNUSED(ignored)) { return app_done(self, 1); }

static PyObject *send_status(GLAsgiSend *self, PyObject *Py_UNUSED(ignored)) {
    GL_FORK_GUARD(NULL);
    if (self->status != 0) return PyLong_FromLong(self->status);  /* an HTTP start (kept here) */
    release_own_start(self);
    return PyLong_FromLong(self->rid >= 0 ? glAsgiStatus(self->rid) : 0);
}

/* The methods of HTTP's and the WebSocket's send (GL_ASGI_SEND_TYPE). */
PyMethodDef gl_asgi_send_methods[] = {
    {"_done", (PyCFunction)send_done, METH_NOARGS,
     "The application's call returned: 0, or 1 the client went away, 2 no response was started (a 500), "
     "3 the response was incomplete."},
    {"_fail", (PyCFunction)send_fail, METH_NOARGS,
     "The application's call raised (a 500 closes the connection; an open WebSocket session closes with "
     "1011): 0, or 1 the client went away."},
    {"_status", (PyCFunction)send_status, METH_NOARGS,
     "The response's status (101: a WebSocket session accepted; 0: not started)."},
    {NULL}};

static PyTypeObject SendType =
    GL_ASGI_SEND_TYPE("goloop._goloop.AsgiSend", "The `send` callable of one ASGI request.");

/* ---------- receive ---------- */

/* The message receive() returns now, or NULL without an error: nothing yet. */
static PyObject *recv_message(GLAsgiSend *s) {
    int state;
    if (s->rid < 0) return PyDict_Copy(msg_disconnect);
    PyObject *body = glAsgiRecv(s->rid, &state);
    if (body == NULL) return NULL;
    if (state == GL_RECV_WAIT) {
        Py_DECREF(body);
        return NULL;
    }
    if (state == GL_RECV_DISCONNECT) {
        Py_DECREF(body);
        return PyDict_Copy(msg_disconnect);
    }
    PyObject *m = PyDict_New();
    if (m == NULL || PyDict_SetItem(m, GLS(type), GLS(http_request)) < 0 || PyDict_SetItem(m, GLS(body), body) < 0 ||
        PyDict_SetItem(m, GLS(more_body), state == GL_RECV_BODY ? Py_True : Py_False) < 0) {
        Py_XDECREF(m);
        m = NULL;
    }
    Py_DECREF(body);
    return m;
}

/* receive(): the message now (a finished awaitable) or a Future; message is the kind's
 * (inlined here for HTTP: a constant; gl_asgi_receive for the WebSocket). */
static inline PyObject *receive(GLAsgiRecv *self, size_t nargsf, PyObject *kwnames, gl_asgi_message_fn message) {
    GL_FORK_GUARD(NULL);
    if (PyVectorcall_NARGS(nargsf) != 0 || (kwnames && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "receive() takes no arguments");
        return NULL;
    }
    GLAsgiSend *s = self->send;
    if (s->recv_fut != NULL) return Py_NewRef(s->recv_fut);  /* a receive() already waits */
    PyObject *m = message(s);
    if (m != NULL) {
        PyObject *d = done_new(m);
        Py_DECREF(m);
        return d;
    }
    if (PyErr_Occurred()) return NULL;
    return new_future(s, &s->recv_fut);
}

PyObject *gl_asgi_receive(GLAsgiRecv *self, size_t nargsf, PyObject *kwnames, gl_asgi_message_fn message) {
    return receive(self, nargsf, kwnames, message);
}

static PyObject *recv_call(GLAsgiRecv *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    return receive(self, nargsf, kwnames, recv_message);
}

static PyTypeObject RecvType =
    GL_ASGI_RECV_TYPE("goloop._goloop.AsgiReceive", "The `receive` callable of one ASGI request.");

/* fut.set_result(v) unless fut is done (cancelled); errors are reported, not raised. */
static void resolve(PyObject *fut, PyObject *meth, PyObject *v) {
    PyObject *d = PyObject_CallMethodNoArgs(fut, GLS(done));
    if (d == NULL) {
        PyErr_WriteUnraisable(fut);
        return;
    }
    int done = PyObject_IsTrue(d);
    Py_DECREF(d);
    if (done) return;
    PyObject *r = PyObject_CallMethodOneArg(fut, meth, v);
    if (r == NULL)
        PyErr_WriteUnraisable(fut);
    else
        Py_DECREF(r);
}

/* An EvWake for s (ws: a WebSocket session's): resolve the Futures whose wait is over.
 * Returns 1 if one still waits. */
int gl_asgi_wake(GLAsgiSend *s, int ws) {
    Py_INCREF(s);
    if (s->recv_fut != NULL) {
        PyObject *m = ws ? gl_asgi_ws_message(s) : recv_message(s);
        if (m != NULL) {
            PyObject *fut = s->recv_fut;
            s->recv_fut = NULL;
            resolve(fut, GLS(set_result), m);
            Py_DECREF(fut);
            Py_DECREF(m);
        } else if (PyErr_Occurred()) {
            PyErr_WriteUnraisable((PyObject *)s);
        }
    }
    if (s->send_fut != NULL && s->rid >= 0) {
        int rc = glAsgiSendReady(s->rid);
        if (rc != 0) {
            PyObject *fut = s->send_fut;
            s->send_fut = NULL;
            if (rc == GL_ERR_DISCONNECTED) {
                PyObject *exc = gl_disconnected_error();
                if (exc != NULL) {
                    resolve(fut, GLS(set_exception), exc);
                    Py_DECREF(exc);
                } else {
                    PyErr_WriteUnraisable(fut);
                }
            } else {
                resolve(fut, GLS(set_result), Py_None);
            }
            Py_DECREF(fut);
        }
    }
    int waiting = s->recv_fut != NULL || s->send_fut != NULL;
    Py_DECREF(s);
    return waiting;
}

/* ---------- the request: scope, receive, send, and the application's task ---------- */

/* The scope's headers: a list of (name, value) bytes pairs, from the request's blob and the
 * ends of its segments (names and values alternate from segment 0). */
PyObject *gl_asgi_headers(const char *blob, const int32_t *ends, int nh) {
    PyObject *headers = PyList_New(nh);
    if (headers == NULL) return NULL;
    for (int i = 0; i < 2 * nh; i += 2) {
        int32_t a = i > 0 ? ends[i - 1] : 0, b = ends[i], c = ends[i + 1];
        PyObject *n = PyBytes_FromStringAndSize(blob + a, b - a);
        PyObject *v = n ? PyBytes_FromStringAndSize(blob + b, c - b) : NULL;
        PyObject *t = v ? PyTuple_New(2) : NULL;
        if (t == NULL) {
            Py_XDECREF(n);
            Py_XDECREF(v);
            Py_DECREF(headers);
            return NULL;
        }
        PyTuple_SET_ITEM(t, 0, n);
        PyTuple_SET_ITEM(t, 1, v);
        PyObject_GC_UnTrack(t);  /* two bytes: never in a cycle (the collector would untrack it later) */
        PyList_SET_ITEM(headers, i / 2, t);
    }
    return headers;
}

PyObject *gl_asgi_addr(const char *host, Py_ssize_t hlen, int port, int is_unix) {
    PyObject *h = PyUnicode_DecodeUTF8(host ? host : "", hlen, "replace");
    if (h == NULL) return NULL;
    PyObject *p = is_unix ? Py_NewRef(Py_None) : PyLong_FromLong(port);
    if (p == NULL) {
        Py_DECREF(h);
        return NULL;
    }
    PyObject *t = PyTuple_Pack(2, h, p);
    Py_DECREF(h);
    Py_DECREF(p);
    return t;
}

/* The host as a str, the one of the last call when host is the same (*slot caches it). */
static PyObject *host_cached(PyObject **slot, char *key, Py_ssize_t *keylen, const char *host, Py_ssize_t hlen) {
    if (*slot != NULL && *keylen == hlen && (hlen == 0 || memcmp(key, host, hlen) == 0)) return Py_NewRef(*slot);
    PyObject *h = PyUnicode_DecodeUTF8(host ? host : "", hlen, "replace");
    if (h != NULL && hlen <= 64) {
        Py_XSETREF(*slot, Py_NewRef(h));
        if (hlen) memcpy(key, host, hlen);
        *keylen = hlen;
    }
    return h;
}

/* scope["client"]: (host, port), the host str reused from the previous request. */
static PyObject *client_tuple(GLAsgiServer *srv, const char *host, Py_ssize_t hlen, int port) {
    PyObject *h = host_cached(&srv->c_host, srv->c_key, &srv->c_keylen, host, hlen);
    if (h == NULL) return NULL;
    PyObject *p = PyLong_FromLong(port);
    if (p == NULL) {
        Py_DECREF(h);
        return NULL;
    }
    PyObject *t = PyTuple_New(2);
    if (t == NULL) {
        Py_DECREF(h);
        Py_DECREF(p);
        return NULL;
    }
    PyTuple_SET_ITEM(t, 0, h);
    PyTuple_SET_ITEM(t, 1, p);
    PyObject_GC_UnTrack(t);  /* a str and an int: never in a cycle */
    return t;
}

/* scope["server"] for TCP: the tuple of the previous request when the address is the same. */
static PyObject *server_tuple(GLAsgiServer *srv, const char *host, Py_ssize_t hlen, int port) {
    if (srv->s_addr != NULL && srv->s_port == port && srv->s_keylen == hlen &&
        (hlen == 0 || memcmp(srv->s_key, host, hlen) == 0))
        return Py_NewRef(srv->s_addr);
    PyObject *t = gl_asgi_addr(host, hlen, port, 0);
    if (t != NULL && hlen <= 64) {
        Py_XSETREF(srv->s_addr, Py_NewRef(t));
        if (hlen) memcpy(srv->s_key, host, hlen);
        srv->s_keylen = hlen;
        srv->s_port = port;
    }
    return t;
}


/* A new HTTP scope: a copy of srv->scope_tpl, the template with every key a request sets
 * already there (None). Copying a compact dict is one copy of its key table, and the
 * request's items then replace values: no insertion, no resize. */
static PyObject *scope_copy(GLAsgiServer *srv) {
    char want_state = srv->state != NULL;
    if (srv->scope_tpl == NULL || srv->scope_tpl_state != want_state) {
        PyObject *keys[] = {GLS(http_version), GLS(method), GLS(path), GLS(raw_path), GLS(query_string), GLS(headers),
                            GLS(client), GLS(server), GLS(state)};
        PyObject *t = PyDict_Copy(srv->template);
        if (t == NULL) return NULL;
        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]) - !want_state; i++) {
            if (PyDict_SetDefault(t, keys[i], Py_None) == NULL) {
                Py_DECREF(t);
                return NULL;
            }
        }
        Py_XSETREF(srv->scope_tpl, t);
        srv->scope_tpl_state = want_state;
    }
    return PyDict_Copy(srv->scope_tpl);
}

/* The scope of an HTTP request, or NULL with an error. */
int gl_asgi_fill_scope(GLAsgiServer *srv, PyObject *scope, const GLHead *h) {
    const char *blob = h->blob;
    const int32_t *ends = h->ends;
    int nends = h->nends;
#define SEG(i) (blob + ((i) > 0 ? ends[(i) - 1] : 0)), (Py_ssize_t)(ends[i] - ((i) > 0 ? ends[(i) - 1] : 0))
    if (gl_set_new(scope, GLS(path), PyUnicode_DecodeUTF8(SEG(nends - 1), "replace")) < 0 ||
        gl_set_new(scope, GLS(raw_path), PyBytes_FromStringAndSize(SEG(nends - 3))) < 0 ||
        gl_set_new(scope, GLS(query_string), PyBytes_FromStringAndSize(SEG(nends - 2))) < 0 ||
        gl_set_new(scope, GLS(headers), gl_asgi_headers(blob, ends, (nends - 4) / 2)) < 0)
        return -1;
#undef SEG
    if (h->is_unix) {
        if (PyDict_SetItem(scope, GLS(client), Py_None) < 0 ||
            gl_set_new(scope, GLS(server), gl_asgi_addr(h->shost, h->shostlen, 0, 1)) < 0)
            return -1;
    } else if (gl_set_new(scope, GLS(client), client_tuple(srv, h->chost, h->chostlen, h->cport)) < 0 ||
               gl_set_new(scope, GLS(server), server_tuple(srv, h->shost, h->shostlen, h->sport)) < 0) {
        return -1;
    }
    if (h->proxy != NULL && gl_asgi_proxy_scope(scope, h->proxy, h->proxylen) < 0) return -1;
    if (srv->state != NULL && gl_set_new(scope, GLS(state), PyDict_Copy(srv->state)) < 0) return -1;
    return 0;
}

/* The scope of an HTTP request, or NULL with an error. */
static PyObject *http_scope(GLAsgiServer *srv, const GLHead *h) {
    PyObject *scope = scope_copy(srv);
    if (scope == NULL) return NULL;
    const char *blob = h->blob;
    const int32_t *ends = h->ends;
    int nends = h->nends, major = h->major, minor = h->minor;
#define SEG(i) (blob + ((i) > 0 ? ends[(i) - 1] : 0)), (Py_ssize_t)(ends[i] - ((i) > 0 ? ends[(i) - 1] : 0))
    if (PyDict_SetItem(scope, GLS(http_version), major == 3 ? GLS(v3) : major == 2 ? GLS(v2) : (major == 1 && minor == 0) ? GLS(v10) : GLS(v11)) < 0 ||
        gl_set_new(scope, GLS(method), gl_method(SEG(nends - 4))) < 0 || gl_asgi_fill_scope(srv, scope, h) < 0)
        goto fail;
#undef SEG
    if (h->ext != NULL && PyDict_SetItem(scope, GLS(extensions), h->ext) < 0) goto fail;  /* TLS: with "tls" */
    return scope;
fail:
    Py_DECREF(scope);
    return NULL;
}

#if PY_VERSION_HEX < 0x030C0000
/* A name for a request's Task, "goloop-request-N". 3.11's Task formats its default name
 * ("Task-N") with PyUnicode_FromFormat when it is created (~4% of a pipelined hello world's
 * CPU); this one is made from a digit string. 3.12 names tasks lazily: no name passed there. */
static PyObject *task_name(void) {
    static unsigned long long counter;
    static const char prefix[] = "goloop-request-";
    char digits[24];
    int nd = 0;
    unsigned long long n = ++counter;
    do {
        digits[sizeof(digits) - 1 - nd++] = (char)('0' + n % 10);
        n /= 10;
    } while (n);
    Py_ssize_t np = sizeof(prefix) - 1;
    PyObject *u = PyUnicode_New(np + nd, 127);
    if (u == NULL) return NULL;
    memcpy(PyUnicode_1BYTE_DATA(u), prefix, np);
    memcpy(PyUnicode_1BYTE_DATA(u) + np, digits + sizeof(digits) - nd, nd);
    return u;
}
#endif

/* loop.create_task(coro) for a request, its Task started eagerly (loop_core.c: 3.12+
 * always, 3.11 past 64 queued handles): NULL with the exception if the Task could not be
 * made or its first step raised out of it. */
static PyObject *create_task(GLAsgiServer *srv, PyObject *coro) {
#if PY_VERSION_HEX < 0x030C0000
    PyObject *name = task_name();
    if (name == NULL) return NULL;
    PyObject *task = gl_loop_create_task_named((GLLoop *)srv->base.loop, coro, name);
    Py_DECREF(name);
    return task;
#else
    return gl_loop_create_task_eager((GLLoop *)srv->base.loop, coro);
#endif
}

/* raise exc (a callback of the loop's) */
static PyObject *reraise(PyObject *Py_UNUSED(self), PyObject *exc) {
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    return NULL;
}

static PyMethodDef reraise_def = {"reraise", reraise, METH_O, NULL};
static PyObject *reraise_fn;

/* The error of starting a request: reported (unraisable), except SystemExit and
 * KeyboardInterrupt (an application's, from the Task's eager first step), raised
 * again by a callback of the loop as from a Task's step (asyncio's Handle._run rule): out
 * of run_forever. */
static void report_error(GLAsgiServer *srv) {
    if (!gl_exc_is_fatal()) {
        /* the application's call raised at once (direct calls: on_error logs it as any
         * application exception, "Exception in ASGI application") */
        PyObject *exc = srv->on_error != NULL ? gl_take_exception() : NULL;
        PyObject *x = NULL;
        if (exc != NULL) {
            PyObject *zero = PyLong_FromLong(0);
            if (zero != NULL) {
                PyObject *args[2] = {exc, zero};
                x = PyObject_Vectorcall(srv->on_error, args, 2, NULL);
                Py_DECREF(zero);
            }
            Py_DECREF(exc);
        }
        if (x == NULL) PyErr_WriteUnraisable(srv->runner);
        Py_XDECREF(x);
        return;
    }
    PyObject *exc = gl_take_exception(), *h = NULL;
    if (exc != NULL) h = PyObject_CallMethodObjArgs(srv->base.loop, GLS(call_soon), reraise_fn, exc, NULL);
    if (h == NULL) PyErr_WriteUnraisable(srv->runner);
    Py_XDECREF(h);
    Py_XDECREF(exc);
}

/* Request rid's send and receive (of kind's types), and app(scope, receive, send) (app NULL:
 * srv->runner(...)) as a task of the loop: app's coroutine runs in an AsgiRun. Takes the
 * reference to scope (NULL: the error of making it). -1 (reported): Go answers 500 and
 * forgets the request. */
int gl_asgi_launch(GLAsgiServer *srv, long rid, PyObject *scope, const GLAsgiKind *kind, PyObject *app) {
    GLAsgiSend *send = NULL;
    GLAsgiRecv *recv = NULL;
    PyObject *coro = NULL, *task;
    int called = 0;  /* app was called (an access line is owed even when it raised at once) */
    if (scope == NULL) goto fail;
    send = PyObject_GC_New(GLAsgiSend, kind->send_type);
    if (send == NULL) goto fail;
    send->vectorcall = kind->send_call;
    send->rid = -1;  /* until all is made: the request stays Go's to forget */
    send->srv = (GLAsgiServer *)Py_NewRef(srv);
    send->recv_fut = send->send_fut = NULL;
    send->finished = send->started = send->start_lost = send->complete = 0;
    send->held_status = send->status = 0;
    PyObject_GC_Track(send);
    recv = PyObject_GC_New(GLAsgiRecv, kind->recv_type);
    if (recv == NULL) goto fail;
    recv->vectorcall = kind->recv_call;
    recv->send = (GLAsgiSend *)Py_NewRef(send);
    PyObject_GC_Track(recv);
    send->rid = rid;
    {
        PyObject *args[3] = {scope, (PyObject *)recv, (PyObject *)send};
        coro = PyObject_Vectorcall(app != NULL ? app : srv->runner, args, 3, NULL);
        called = app != NULL;
    }
    if (coro == NULL) goto fail;
    if (app != NULL) {  /* the application's own coroutine, run in an AsgiRun */
        PyObject *run = gl_asgi_run_new(coro, send, srv->on_error, scope);
        if (run == NULL) goto fail;
        Py_SETREF(coro, run);
    }
    task = create_task(srv, coro);
    if (task == NULL && send->rid < 0) {
        /* the application ran in the Task's eager first step, ended and raised
         * through it (KeyboardInterrupt, SystemExit); Go forgot the request already, its id
         * may be another's now: nothing to undo */
        report_error(srv);
        task = Py_NewRef(Py_None);
    }
    if (task == NULL) goto fail;
    Py_DECREF(task);
    Py_DECREF(coro);
    Py_DECREF(scope);
    Py_DECREF(recv);
    Py_DECREF(send);
    return 0;
fail:
    if (send != NULL) send->rid = -1;  /* Go answers 500 and forgets the request */
    report_error(srv);
    if (called && coro == NULL && srv->access != NULL) gl_asgi_access(srv->access, scope, 500);
    if (coro != NULL && (PyCoro_CheckExact(coro) || gl_asgi_is_run(coro))) {
        PyObject *r = gl_call_method0(coro, "close");
        if (r == NULL) PyErr_Clear();
        Py_XDECREF(r);
    }
    Py_XDECREF(coro);
    Py_XDECREF(scope);
    Py_XDECREF(recv);
    Py_XDECREF(send);
    return -1;
}

static const GLAsgiKind http_kind = {&SendType, &RecvType, (vectorcallfunc)send_call, (vectorcallfunc)recv_call};

int gl_asgi_request(GLAsgiServer *srv, long rid, const GLHead *h) {
    return gl_asgi_launch(srv, rid, http_scope(srv, h), &http_kind, srv->app);
}

/* ---------- a trusted proxy's changes ---------- */

/* enc is "scheme\nclient" (either part may be empty: unchanged). */
int gl_asgi_proxy_scope(PyObject *scope, const char *enc, Py_ssize_t n) {
    const char *nl = memchr(enc, '\n', (size_t)n);
    Py_ssize_t slen = nl ? nl - enc : n;
    if (slen > 0) {
        PyObject *v = PyUnicode_DecodeLatin1(enc, slen, NULL);
        if (v == NULL) return -1;
        int rc = PyDict_SetItem(scope, GLS(scheme), v);
        Py_DECREF(v);
        if (rc < 0) return -1;
    }
    if (nl != NULL && n - slen - 1 > 0) {
        PyObject *v = Py_BuildValue("(Ni)", PyUnicode_DecodeLatin1(nl + 1, n - slen - 1, NULL), 0);
        if (v == NULL) return -1;
        int rc = PyDict_SetItem(scope, GLS(client), v);
        Py_DECREF(v);
        if (rc < 0) return -1;
    }
    return 0;
}

/* ---------- init ---------- */

int gl_init_asgi(PyObject *m) {
    hdr_bad_init();
#define GL_ASGI_INTERN(name, text) if ((GLS(name) = PyUnicode_InternFromString(text)) == NULL) return -1;
    GL_ASGI_STRINGS(GL_ASGI_INTERN)
#undef GL_ASGI_INTERN
    if ((reraise_fn = PyCFunction_New(&reraise_def, NULL)) == NULL) return -1;
    if ((msg_disconnect = PyDict_New()) == NULL || PyDict_SetItem(msg_disconnect, GLS(type), GLS(http_disconnect)) < 0)
        return -1;
    ServerType.tp_base = gl_server_type();
    if (PyType_Ready(&DoneType) < 0 || PyType_Ready(&SendType) < 0 || PyType_Ready(&RecvType) < 0 ||
        PyType_Ready(&ServerType) < 0 || gl_init_asgi_run(m) < 0)
        return -1;
    done_none = PyObject_New(GLDone, &DoneType);
    if (done_none == NULL) return -1;
    done_none->value = Py_NewRef(Py_None);
    if (PyModule_AddObjectRef(m, "AsgiServer", (PyObject *)&ServerType) < 0)
        return -1;
    return 0;
}

/* ---------- for asgi_ws.c (WebSocket), asgi_spec.c and asgi_run.c ---------- */

PyObject *gl_asgi_done(PyObject *value) { return done_new(value); }

/* The application's call returned (asgi_run.c): Go answers a response not started with a
 * 500 and forgets the request now, in the one call the send object's dealloc would make
 * (glAsgiFinish); send() then raises as Go would, receive() gives http.disconnect. */
int gl_asgi_finish(GLAsgiSend *s, int failed) {
    release_own_start(s);
    if (gl_forked || s->rid < 0) return GL_ASGI_FINISH_OK;
    if (s->srv->base.sid < 0) return GL_ASGI_FINISH_OK;  /* released: the dealloc frees the id */
    int found = glAsgiFinish(s->rid, failed);
    s->rid = -1;
    s->finished = 1;
    if (found < 0) {  /* a Go panic, reported as a SystemError */
        PyErr_WriteUnraisable((PyObject *)s);
        found = GL_ASGI_FINISH_OK;
    }
    return found;
}

/* The application's call ended normally (asgi_run.c): gl_asgi_finish, except that a request
 * whose response is complete (its last body part given to Go, nothing held) is only let go
 * of here and its id queued for Go, which finishes it at the server's next take or flush
 * (both in the loop's same iteration) or release: one call into Go fewer per request.
 * What Go would find then (FinishOK, or FinishLost: the client went away) is nothing the
 * caller reports. */
int gl_asgi_finish_done(GLAsgiSend *s) {
    GLAsgiServer *srv = s->srv;
    if (!s->complete || s->held_status != 0 || gl_forked || s->rid < 0 || srv->base.sid < 0 ||
        !PyObject_TypeCheck((PyObject *)srv, &ServerType))
        return gl_asgi_finish(s, 0);
    if (srv->nfin == srv->capfin) {
        int cap = srv->capfin ? 2 * srv->capfin : 64;
        long *p = PyMem_RawRealloc(srv->fin, (size_t)cap * sizeof(long));
        if (p == NULL) return gl_asgi_finish(s, 0);
        srv->fin = p;
        srv->capfin = cap;
    }
    srv->fin[srv->nfin++] = s->rid;
    s->rid = -1;
    s->finished = 1;
    return GL_ASGI_FINISH_OK;
}
