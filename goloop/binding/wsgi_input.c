/* goloop serve --interface wsgi: wsgi.input, the request body as the application reads it
 * (read, readline, readlines, iteration), taken from Go part by part (glWsgiRecv; a wait
 * for the client's next part releases the GIL), or, for a read of a body whose
 * Content-Length it knows, straight into the bytes the read returns (glWsgiRecvTo). One per
 * pool thread, reused from request to request while nothing else refers to it (wsgi.c,
 * request_objects). */
#include "wsgi.h"
#include "_cgo_export.h"

/* ---------- wsgi.input ---------- */

static void input_dealloc(GLWsgiInput *self) {
    Py_CLEAR(self->buf);
    PyObject_Free(self);
}

/* One take of the body from Go (a detached request adopted first; a wait for the client
 * releases the GIL): into dst, room bytes (glWsgiRecvTo), or, dst NULL, into the thread's
 * buffer at *p (glWsgiRecv); *n bytes, counted in got; the last part sets eof. GL_RECV_BODY
 * or GL_RECV_LAST, -1 with the error raised. */
static int input_recv(GLWsgiInput *self, char *dst, Py_ssize_t room, char **p, Py_ssize_t *n) {
    if (self->job != NULL && gl_wsgi_adopt(self->job) < 0) return -1;
    long wid = self->wid, gen = self->gen;
    int st = dst ? glWsgiRecvTo(wid, gen, 0, dst, room, n) : glWsgiRecv(wid, gen, 0, p, n);
    if (st == GL_RECV_WAIT) {
        Py_BEGIN_ALLOW_THREADS
        st = dst ? glWsgiRecvTo(wid, gen, 1, dst, room, n) : glWsgiRecv(wid, gen, 1, p, n);
        Py_END_ALLOW_THREADS
    }
    if (st == GL_ERR_GONE) {
        PyErr_SetString(PyExc_ValueError, "wsgi.input read after its request ended");
        return -1;
    }
    if (st == GL_RECV_DISCONNECT) {
        gl_raise_disconnected();
        return -1;
    }
    if (st == GL_RECV_LAST) self->eof = 1;
    self->got += *n;
    return st;
}

/* Takes the next body part into self->buf: 1, 0 at the end of the body, -1 with an error. */
static int input_fill(GLWsgiInput *self) {
    if (self->eof) return 0;
    char *p = NULL;
    Py_ssize_t n = 0;
    if (input_recv(self, NULL, 0, &p, &n) < 0) return -1;
    PyObject *b = gl_bytes(p, n);
    if (b == NULL) return -1;
    Py_XSETREF(self->buf, b);
    self->pos = 0;
    return n > 0 || !self->eof ? 1 : 0;
}

/* What a read of a body of known length makes at once before the body arrived: a client
 * claims a Content-Length, its memory grows past this only as the body arrives. */
#define GL_INPUT_PREALLOC (1 << 20)
/* A read of fewer bytes, not to the body's end, takes what came as one part (input_fill) and
 * is served from it: taken straight from Go, each would move the rest of what Go holds. */
#define GL_INPUT_DIRECT_MIN (64 * 1024)

/* input_fill for a read of want bytes of a body whose length it knows: they go from Go's
 * memory straight into one new part, which begins with *prefix's bytes (what the read took
 * before, a bytearray, or NULL; consumed): the bytes the read returns, one copy. to_end:
 * the read wants the whole rest of the body, want is that rest, the part ends with the
 * body's last. 1, 0 at the end of the body, -1 with an error. */
static int input_fill_to(GLWsgiInput *self, PyObject **prefix, Py_ssize_t want, int to_end) {
    Py_ssize_t have = *prefix ? PyByteArray_GET_SIZE(*prefix) : 0, room = want < GL_INPUT_PREALLOC ? want : GL_INPUT_PREALLOC;
    Py_ssize_t got = 0;
    PyObject *b = PyBytes_FromStringAndSize(NULL, have + room);
    if (b == NULL) return -1;
    if (have) memcpy(PyBytes_AS_STRING(b), PyByteArray_AS_STRING(*prefix), have);
    Py_CLEAR(*prefix);
    for (;;) {
        if (got == room && room < want) {  /* (grows as the body arrives, up to want) */
            room = want - room < room ? want : 2 * room;
            if (_PyBytes_Resize(&b, have + room) < 0) return -1;
        }
        /* (room - got == 0 once want arrived: the body's end, RecvLast, is still to come) */
        Py_ssize_t n = 0;
        if (input_recv(self, PyBytes_AS_STRING(b) + have + got, room - got, NULL, &n) < 0) {
            Py_DECREF(b);
            return -1;
        }
        got += n;
        if (self->eof) break;
        /* all it wants; or past the declared length (HTTP/2's peer): input_fill's parts go on */
        if (got == want && (!to_end || n == 0)) break;
    }
    if (have + got < PyBytes_GET_SIZE(b) && _PyBytes_Resize(&b, have + got) < 0) return -1;
    Py_XSETREF(self->buf, b);
    self->pos = 0;
    return have + got > 0 || !self->eof ? 1 : 0;
}

static Py_ssize_t input_avail(GLWsgiInput *self) {
    return self->buf ? PyBytes_GET_SIZE(self->buf) - self->pos : 0;
}

/* Reads up to size bytes (size < 0: to the end); line: stop after a newline. */
static PyObject *input_read_impl(GLWsgiInput *self, Py_ssize_t size, int line) {
    PyObject *out = NULL;  /* a bytearray once more than one part is needed */
    for (;;) {
        Py_ssize_t avail = input_avail(self);
        if (avail > 0) {
            const char *p = PyBytes_AS_STRING(self->buf) + self->pos;
            Py_ssize_t want = avail, have = out ? PyByteArray_GET_SIZE(out) : 0;
            if (size >= 0 && want > size - have) want = size - have;
            int stop = size >= 0 && have + want >= size;
            if (line) {
                const char *nl = memchr(p, '\n', want);
                if (nl != NULL) {
                    want = nl - p + 1;
                    stop = 1;
                }
            }
            /* one part: a slice of it (the whole part when it is all the rest of the body) */
            if (out == NULL && (stop || self->eof)) {
                PyObject *r = (self->pos == 0 && want == PyBytes_GET_SIZE(self->buf)) ? Py_NewRef(self->buf)
                                                                                      : PyBytes_FromStringAndSize(p, want);
                self->pos += want;
                return r;
            }
            if (out == NULL && (out = PyByteArray_FromStringAndSize(NULL, 0)) == NULL) return NULL;
            if (PyByteArray_Resize(out, have + want) < 0) goto fail;
            memcpy(PyByteArray_AS_STRING(out) + have, p, want);
            self->pos += want;
            if (stop) break;
        } else if (size == 0) {
            break;
        }
        int rc;
        long long rest = self->clen - self->got;  /* (a Content-Length's body yet to take) */
        Py_ssize_t have = out ? PyByteArray_GET_SIZE(out) : 0;
        int to_end = size < 0 || size - have >= rest;
        if (!line && rest > 0 && !self->eof && (to_end || size - have >= GL_INPUT_DIRECT_MIN)) {
            rc = input_fill_to(self, &out, to_end ? (Py_ssize_t)rest : size - have, to_end);
        } else {
            rc = input_fill(self);
        }
        if (rc < 0) goto fail;
        if (rc == 0) break;
    }
    if (out == NULL) return gl_bytes(NULL, 0);
    PyObject *r = PyBytes_FromStringAndSize(PyByteArray_AS_STRING(out), PyByteArray_GET_SIZE(out));
    Py_DECREF(out);
    return r;
fail:
    Py_XDECREF(out);
    return NULL;
}

static int size_arg(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t *size) {
    *size = -1;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "expected at most 1 argument");
        return -1;
    }
    if (nargs == 1 && args[0] != Py_None) {
        *size = PyNumber_AsSsize_t(args[0], PyExc_OverflowError);
        if (*size == -1 && PyErr_Occurred()) return -1;
    }
    return 0;
}

static PyObject *input_read(GLWsgiInput *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t size;
    if (size_arg(args, nargs, &size) < 0) return NULL;
    return input_read_impl(self, size, 0);
}

static PyObject *input_readline(GLWsgiInput *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t size;
    if (size_arg(args, nargs, &size) < 0) return NULL;
    return input_read_impl(self, size, 1);
}

static PyObject *input_readlines(GLWsgiInput *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t hint, total = 0;
    if (size_arg(args, nargs, &hint) < 0) return NULL;
    PyObject *lines = PyList_New(0);
    if (lines == NULL) return NULL;
    for (;;) {
        PyObject *l = input_read_impl(self, -1, 1);
        if (l == NULL) {
            Py_DECREF(lines);
            return NULL;
        }
        if (PyBytes_GET_SIZE(l) == 0) {
            Py_DECREF(l);
            break;
        }
        total += PyBytes_GET_SIZE(l);
        int rc = PyList_Append(lines, l);
        Py_DECREF(l);
        if (rc < 0) {
            Py_DECREF(lines);
            return NULL;
        }
        if (hint > 0 && total >= hint) break;
    }
    return lines;
}

static PyObject *input_next(GLWsgiInput *self) {
    PyObject *l = input_read_impl(self, -1, 1);
    if (l != NULL && PyBytes_GET_SIZE(l) == 0) {
        Py_DECREF(l);
        return NULL;  /* StopIteration */
    }
    return l;
}

static PyMethodDef input_methods[] = {
    {"read", (PyCFunction)(void (*)(void))input_read, METH_FASTCALL, "read(size=-1): up to size bytes of the body."},
    {"readline", (PyCFunction)(void (*)(void))input_readline, METH_FASTCALL, "readline(size=-1)"},
    {"readlines", (PyCFunction)(void (*)(void))input_readlines, METH_FASTCALL, "readlines(hint=-1)"},
    {NULL}};

PyTypeObject gl_wsgi_input_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop._goloop.WsgiInput",
    .tp_basicsize = sizeof(GLWsgiInput),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "wsgi.input: the request body, read from Go as the application reads it.",
    .tp_dealloc = (destructor)input_dealloc,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)input_next,
    .tp_methods = input_methods,
};
