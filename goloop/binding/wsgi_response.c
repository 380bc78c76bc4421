/* goloop serve --interface wsgi: start_response and write. start_response checks the status
 * and headers (a word at a time) and keeps the head's lines in the pool thread's buffer;
 * the first body part takes the head to Go in the same call (gl_wsgi_send_part), and the
 * part that completes a declared Content-Length ends the request there (glWsgiSendEnd). */
#include "wsgi.h"
#include "_cgo_export.h"

/* ---------- start_response and write ---------- */

static void start_dealloc(GLWsgiStart *self) {
    Py_CLEAR(self->write);
    PyObject_Free(self);
}

static void write_dealloc(GLWsgiWrite *self) {
    Py_CLEAR(self->st);
    PyObject_Free(self);
}

/* latin1's error: o is not a str, or not a latin-1 one */
static __attribute__((noinline, cold)) int latin1_error(PyObject *o, const char *what) {
    if (!PyUnicode_Check(o))
        PyErr_Format(PyExc_TypeError, "WSGI %s must be a str, not %.100s", what, Py_TYPE(o)->tp_name);
    else
        PyErr_Format(PyExc_ValueError, "WSGI %s must be latin-1: %R", what, o);
    return -1;
}

/* a latin-1 str's bytes (ASCII/latin-1 compact strs only: PEP 3333's native strings); inline,
 * its errors apart (a call per string was ~27 instructions of start_response's five); on an
 * error *p and *n are set too, so no caller reads them unset */
static inline int latin1(PyObject *o, const char *what, const char **p, Py_ssize_t *n) {
    if (!PyUnicode_Check(o) || PyUnicode_KIND(o) != PyUnicode_1BYTE_KIND) {
        *p = NULL, *n = 0;
        return latin1_error(o, what);
    }
    *p = (const char *)PyUnicode_1BYTE_DATA(o);
    *n = PyUnicode_GET_LENGTH(o);
    return 0;
}

/* Header checks a word (8 bytes) at a time: a name of token-ish bytes ('!'..'~' but ':'),
 * a value without CR, LF or NUL (the byte loops were ~300 of start_response's ~800
 * instructions for a response of two headers). Exact tests of "some byte of x is": */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
#define HAS_LESS(x, n) (((x) - ONES * (n)) & ~(x) & HIGHS)               /* < n (n <= 128) */
#define HAS_MORE(x, n) ((((x) + ONES * (127 - (n))) | (x)) & HIGHS)      /* > n (n <= 127) */
#define HAS_ZERO(x) HAS_LESS(x, 1)

static inline int name_word_bad(const char *p) {
    uint64_t x;
    memcpy(&x, p, 8);
    return (HAS_LESS(x, 0x21) | HAS_MORE(x, 0x7e) | HAS_ZERO(x ^ (ONES * ':'))) != 0;
}

static int name_ok(const char *p, Py_ssize_t n) {
    if (n < 8) {
        for (Py_ssize_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)p[i];
            if ((unsigned char)(c - 0x21) >= 0x7f - 0x21 || c == ':') return 0;
        }
        return n > 0;
    }
    for (Py_ssize_t i = 0; i + 8 < n; i += 8)
        if (name_word_bad(p + i)) return 0;
    return !name_word_bad(p + n - 8);  /* the last 8 bytes (overlapping): no byte loop for the tail */
}

/* No CR, LF or NUL in p[0:n] (n >= 8: a word at a time, the last one overlapping). */
static int value_ok(const char *p, Py_ssize_t n) {
    Py_ssize_t i = 0;
    if (n >= 8) {
        for (;; i += 8) {
            if (i + 8 > n) i = n - 8;
            uint64_t x;
            memcpy(&x, p + i, 8);
            if (HAS_LESS(x, 14)) break;  /* a control byte: looked at one by one from here */
            if (i + 8 == n) return 1;
        }
    }
    for (; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c < 14 && (c == '\r' || c == '\n' || c == 0)) return 0;
    }
    return 1;
}

/* The status's code ("200 OK": three digits, a space, a reason without control characters). */
static int parse_status(PyObject *status) {
    const char *p;
    Py_ssize_t n;
    if (latin1(status, "status", &p, &n) < 0) return -1;
    unsigned d0 = (unsigned char)p[0] - '0', d1 = n > 1 ? (unsigned char)p[1] - '0' : 10,
             d2 = n > 2 ? (unsigned char)p[2] - '0' : 10;
    int ok = n >= 4 && p[3] == ' ' && (d0 <= 9) & (d1 <= 9) & (d2 <= 9) && d0 > 0;
    Py_ssize_t i = 4;
    for (; ok && i + 8 <= n; i += 8) {
        uint64_t x;
        memcpy(&x, p + i, 8);
        ok = !(HAS_LESS(x, 0x20) | HAS_ZERO(x ^ (ONES * 0x7f)));
    }
    for (; ok && i < n; i++) ok = (unsigned char)p[i] >= ' ' && p[i] != 0x7f;
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "invalid WSGI status %R (\"NNN reason\")", status);
        return -1;
    }
    return (int)(d0 * 100 + d1 * 10 + d2);
}

/* name (14 bytes, a checked header name) is Content-Length in any case: two overlapping
 * words, lower-cased by OR 0x20 (which makes no other checked byte '-' or a letter) */
static inline int is_content_length(const char *name) {
    uint64_t a, b, wa, wb;
    memcpy(&a, name, 8), memcpy(&b, name + 6, 8);
    memcpy(&wa, "content-", 8), memcpy(&wb, "t-length", 8);
    return ((a | ONES * 0x20) == wa) & ((b | ONES * 0x20) == wb);
}

/* A Content-Length value: its number, or -2 (not one: Go's framing decides). */
static long long parse_clen(const char *p, Py_ssize_t n) {
    while (n > 0 && (*p == ' ' || *p == '\t')) p++, n--;
    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
    if (n == 0 || n > 18) return -2;
    long long v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return -2;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

/* n bytes at the end of b, to fill (gbuf_put's call only when b must grow), or NULL with an error */
static inline char *hdr_room(gbuf *b, Py_ssize_t n) {
    if (b->n + n > b->cap) return gbuf_put(b, NULL, n) < 0 ? NULL : b->p + b->n - n;
    char *o = b->p + b->n;
    b->n += n;
    return o;
}

/* The header lines of headers (a list of (name, value) str pairs), checked, appended to st's.
 * Names keep their case: HTTP/1.1 sends them as written (as gunicorn), HTTP/2 lower-cases them. */
static int put_headers(GLWsgiStart *st, PyObject *headers) {
    if (!PyList_Check(headers) && !PyTuple_Check(headers)) {
        PyErr_Format(PyExc_TypeError, "WSGI response headers must be a list, not %.100s", Py_TYPE(headers)->tp_name);
        return -1;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(headers);  /* (no Python code runs in the loop) */
    PyObject **items = PySequence_Fast_ITEMS(headers);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = items[i];
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "WSGI response headers must be (name, value) tuples");
            return -1;
        }
        const char *np, *vp;
        Py_ssize_t nn, vn;
        if (latin1(PyTuple_GET_ITEM(pair, 0), "header name", &np, &nn) < 0 ||
            latin1(PyTuple_GET_ITEM(pair, 1), "header value", &vp, &vn) < 0)
            return -1;
        if (!name_ok(np, nn)) goto bad_name;
        if (!value_ok(vp, vn)) {
            PyErr_Format(PyExc_ValueError, "invalid WSGI header value (CR, LF or NUL) for %R", PyTuple_GET_ITEM(pair, 0));
            return -1;
        }
        if (nn == 14 && is_content_length(np)) st->clen = st->clen == -1 ? parse_clen(vp, vn) : -2;
        char *o = hdr_room(st->hdr, nn + vn + 4);  /* "name: value\r\n", room made once */
        if (o == NULL) return -1;
        memcpy(o, np, nn);
        o[nn] = ':', o[nn + 1] = ' ';
        memcpy(o + nn + 2, vp, vn);
        o[nn + 2 + vn] = '\r', o[nn + 3 + vn] = '\n';
        continue;
    bad_name:
        PyErr_Format(PyExc_ValueError, "invalid WSGI header name %R", PyTuple_GET_ITEM(pair, 0));
        return -1;
    }
    return 0;
}

static PyObject *write_new(GLWsgiStart *st);

/* start_response(status, response_headers, exc_info=None) -> write */
PyObject *gl_wsgi_start_call(GLWsgiStart *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *exc_info = NULL;
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) {
        if (PyTuple_GET_SIZE(kwnames) == 1 && nargs == 2 &&
            PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "exc_info") == 0) {
            exc_info = args[2];
        } else {
            PyErr_SetString(PyExc_TypeError, "start_response(status, response_headers, exc_info=None)");
            return NULL;
        }
    } else if (nargs == 3) {
        exc_info = args[2];
    } else if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "start_response(status, response_headers, exc_info=None)");
        return NULL;
    }
    if (exc_info != NULL && exc_info != Py_None) {
        if (self->sent) {  /* too late to change the response: raise the application's error again */
            if (!PyTuple_Check(exc_info) || PyTuple_GET_SIZE(exc_info) != 3 ||
                !PyExceptionInstance_Check(PyTuple_GET_ITEM(exc_info, 1))) {
                PyErr_SetString(PyExc_TypeError, "exc_info must be a sys.exc_info() tuple");
                return NULL;
            }
            PyObject *v = PyTuple_GET_ITEM(exc_info, 1), *tb = PyTuple_GET_ITEM(exc_info, 2);
            if (tb != Py_None) PyException_SetTraceback(v, tb);
            PyErr_SetObject((PyObject *)Py_TYPE(v), v);
            return NULL;
        }
    } else if (self->status != 0) {
        PyErr_SetString(PyExc_RuntimeError, "start_response() called again without exc_info");
        return NULL;
    }
    if (self->wid < 0) {
        PyErr_SetString(PyExc_RuntimeError, "start_response() called after its request ended");
        return NULL;
    }
    int code = parse_status(args[0]);
    gbuf *b = self->hdr;
    b->n = 0;
    self->clen = -1;
    char *o;
    if (code < 0 || (o = hdr_room(b, PyUnicode_GET_LENGTH(args[0]) - 2)) == NULL) goto fail;
    memcpy(o, (const char *)PyUnicode_1BYTE_DATA(args[0]) + 4, b->n - 2);
    o[b->n - 2] = '\r', o[b->n - 1] = '\n';
    if (put_headers(self, args[1]) < 0) goto fail;
    self->status = code;
    if (self->write == NULL && (self->write = write_new(self)) == NULL) goto fail;
    return Py_NewRef(self->write);
fail:
    self->status = 0;
    self->hdr->n = 0;
    return NULL;
}

PyObject *gl_wsgi_raise_send(GLWsgiStart *st, int rc) {
    if (rc == GL_ERR_DISCONNECTED) return gl_raise_disconnected();
    if (rc == GL_ERR_GONE) {
        PyErr_SetString(PyExc_RuntimeError, "the WSGI request already ended");
        return NULL;
    }
    if (rc == GL_WSGI_TOO_LONG) {
        PyErr_SetString(PyExc_RuntimeError, "Response content longer than Content-Length");
        return NULL;
    }
    const char *m = glWsgiError(st->wid);
    PyErr_SetString(PyExc_RuntimeError, m ? m : "goloop: send failed");
    return NULL;
}

/* Sends a body part (the head with the first): GL_OK or an error code (nothing raised).
 * The part that completes the body the application's Content-Length declared is sent as
 * the last (more 0): the response is complete in that one call and write, without the
 * empty last part the end of an iterable would send in another call (Werkzeug's and
 * Django's responses are iterables with a Content-Length); what comes after it, if
 * anything, is too long. end: the request may end with this part if it is the last (more 0
 * here): a list or tuple answer's last part, or an iterable's part that completes its
 * Content-Length (Werkzeug's and Django's answers; not a generator's): Go ends it and takes the next in the same
 * call (glWsgiSendEnd; one call into Go per request fewer than a glWsgiTake after close()).
 * What the application does after that no longer concerns the response: a part after it is
 * logged as too long, a close() that fails is logged (the connection stays: its response is
 * complete), and the request's objects fail as after its end. obj: the part's bytes object
 * (NULL: memory that may change after the call): a large part (over GL_WSGI_HOLD_MAX) may be
 * sent from it, Go keeping a reference until the socket took it (server_held.go); a large
 * part is otherwise copied a slice at a time as the socket takes the output. taken: NULL,
 * the thread waits for the socket while the output is over its bound (GIL released); else
 * (an iterable's part: wsgi.c parks the response rather than wait) it does not wait:
 * GL_WSGI_PAUSED, *taken bytes of the part taken (all, or up to a slice boundary of a large
 * copied part); GL_OK for the response's last part (nothing more is queued after it). */
int gl_wsgi_send_part(GLWsgiStart *st, const char *p, Py_ssize_t n, int more, int flush, int end, PyObject *obj,
                      Py_ssize_t *taken) {
    Py_ssize_t took = n;
    if (taken != NULL) *taken = n;
    if (st->done) return n > 0 ? GL_WSGI_TOO_LONG : GL_OK;
    if (more && n > 0 && st->clen >= 0 && st->body + n == st->clen) more = 0, flush = 1;
    wsgi_thread *t = gl_ts != NULL ? gl_ts->wsgi : NULL;  /* NULL: write() from another thread */
    pass_state other, *pass = t != NULL ? &t->pass : &other;
    if (st->job != NULL) {  /* a hand-off pool's detached request (wsgi.h) */
        if (!more && end && n <= GL_WSGI_BODY_MAX && gl_wsgi_detached_end(st, p, n)) {
            st->sent = 1, st->done = 1, st->body += n;
            pass->ended = 1, pass->idle = 0, pass->next = NULL;
            return GL_OK;
        }
        if (gl_wsgi_adopt(st->job) < 0) {
            PyErr_Clear();
            return GL_ERR_GONE;
        }
    }
    int status = st->sent ? 0 : st->status, rc;
    long wid = st->wid, gen = st->gen;
    rc = GL_WSGI_RELEASE;
    pass->idle = 0;
    if (n <= GL_WSGI_HOLD_MAX) {  /* with the GIL: one release and take fewer per response */
        if (!more && end) {  /* the request ends with this call, the next one taken */
            rc = glWsgiSendEnd(wid, gen, status, st->hdr->p, st->hdr->n, (char *)p, n, &pass->next, &pass->gen);
            pass->ended = rc == GL_OK;
        } else {
            rc = glWsgiSend(wid, gen, status, st->hdr->p, st->hdr->n, (char *)p, n, more, flush, 0);
        }
        if ((pass->idle = rc == GL_WSGI_SENT_IDLE)) rc = GL_OK;
        if (rc == GL_WSGI_PAUSED && taken == NULL) {
            st->sent = 1;
            Py_BEGIN_ALLOW_THREADS
            rc = glWsgiSendWait(wid, gen);
            Py_END_ALLOW_THREADS
        }
    }
    if (rc == GL_WSGI_RELEASE && n > GL_WSGI_HOLD_MAX) {
        int held = 0;
        Py_XINCREF(obj);  /* Go's if it holds it (held), released by the loop thread */
        Py_BEGIN_ALLOW_THREADS
        rc = glWsgiSendLarge(wid, gen, status, st->hdr->p, st->hdr->n, (char *)p, n, more, flush, st->clen >= 0, obj,
                             &held, taken != NULL, &took);
        Py_END_ALLOW_THREADS
        if (!held) Py_XDECREF(obj);
    } else if (rc == GL_WSGI_RELEASE) {
        Py_BEGIN_ALLOW_THREADS
        rc = glWsgiSend(wid, gen, status, st->hdr->p, st->hdr->n, (char *)p, n, more, flush, taken != NULL ? 2 : 1);
        Py_END_ALLOW_THREADS
    }
    if (rc != GL_ERR_RUNTIME && rc != GL_ERR_GONE) st->sent = 1;
    if (rc == GL_OK || rc == GL_WSGI_PAUSED) {
        st->body += took;
        st->done = !more && took == n;
        if (taken != NULL) *taken = took;
        if (st->done) rc = GL_OK;  /* the last part: nothing waits for the socket */
    }
    return rc;
}

int gl_wsgi_need_start(GLWsgiStart *st) {
    if (st->status == 0) {
        PyErr_SetString(PyExc_RuntimeError, "the WSGI application did not call start_response()");
        return -1;
    }
    return 0;
}

/* write(data): the body part, sent now (it is in Go's output when write returns; a slow
 * client makes write wait). */
static PyObject *write_call(GLWsgiWrite *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "write() takes one bytes argument");
        return NULL;
    }
    GLWsgiStart *st = self->st;
    if (st->wid < 0) {
        PyErr_SetString(PyExc_RuntimeError, "write() called after its request ended");
        return NULL;
    }
    if (gl_wsgi_need_start(st) < 0) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    int rc = GL_OK;
    if (view.len > 0)
        rc = gl_wsgi_send_part(st, view.buf, view.len, 1, 1, 0, PyBytes_CheckExact(args[0]) ? args[0] : NULL, NULL);
    PyBuffer_Release(&view);
    if (rc != GL_OK) return gl_wsgi_raise_send(st, rc);
    Py_RETURN_NONE;
}

static PyObject *write_new(GLWsgiStart *st) {
    GLWsgiWrite *w = PyObject_New(GLWsgiWrite, &gl_wsgi_write_type);
    if (w == NULL) return NULL;
    w->vectorcall = (vectorcallfunc)write_call;
    w->st = (GLWsgiStart *)Py_NewRef(st);
    return (PyObject *)w;
}

PyTypeObject gl_wsgi_start_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop._goloop.WsgiStartResponse",
    .tp_basicsize = sizeof(GLWsgiStart),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "start_response(status, response_headers, exc_info=None) of one WSGI request.",
    .tp_dealloc = (destructor)start_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(GLWsgiStart, vectorcall),
};

PyTypeObject gl_wsgi_write_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop._goloop.WsgiWrite",
    .tp_basicsize = sizeof(GLWsgiWrite),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "The write(data) callable start_response returns.",
    .tp_dealloc = (destructor)write_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(GLWsgiWrite, vectorcall),
};

/* Drops a start_response the thread no longer reuses: the cycle with its write is broken
 * (a write the application kept still refers to it, and fails: wid is -1). */
void gl_wsgi_release_start(GLWsgiStart *st) {
    if (st == NULL) return;
    Py_CLEAR(st->write);
    Py_DECREF((PyObject *)st);
}
