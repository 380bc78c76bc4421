/* goloop._goloop.SocketTransportCore: the C type of goloop's stream transports, a subclass of
 * asyncio.Transport. Its methods normalize arguments and call the Go functions in
 * loop_transport.go; the transport's lifecycle is Python code in pyshim/goloop/_transports.py. */
#include "gl.h"
#include "_cgo_export.h"
#include <errno.h>
#include <sys/uio.h>
#include <unistd.h>

PyTypeObject *GL_TransportType;

/* write()'s fast path (gl.h, GLTransport.wstage): whether this write of len bytes may wait
 * in C for the end of the iteration. Only bytes objects (held by reference; a mutable
 * buffer is sent at once or copied, Go's path), only while Go's queue is empty (all that
 * is queued is staged here, so the order holds), below the high-water mark (past it Go sends
 * at once and may pause the protocol) and while nothing makes the flush call Python
 * (closing, a paused protocol). */
static inline int wstage_ok(GLTransport *self, Py_ssize_t len) {
    return self->wloop != NULL && self->nwstage < GL_WSTAGE &&
           (self->nwstage > 0 || self->write_size == 0) && !self->closing &&
           !self->protocol_paused && self->write_size + len <= self->high_water;
}

/* Stages data (a bytes object of len bytes at buf); 0, or -1 when the loop's list cannot
 * grow (no exception: the caller takes Go's path). */
static int wstage_push(GLTransport *self, PyObject *data, char *buf, Py_ssize_t len) {
    if (!self->wlisted) {
        GLLoop *loop = (GLLoop *)self->wloop;
        if (loop->nwdirty == loop->wdirty_cap) {
            Py_ssize_t cap = loop->wdirty_cap ? 2 * loop->wdirty_cap : 16;
            PyObject **p = PyMem_Realloc(loop->wdirty, (size_t)cap * sizeof(PyObject *));
            if (p == NULL) return -1;
            loop->wdirty = p;
            loop->wdirty_cap = cap;
        }
        loop->wdirty[loop->nwdirty++] = (PyObject *)self;
        self->wlisted = 1;
    }
    int i = self->nwstage++;
    Py_INCREF(data);
    self->wstage[i] = data;
    self->wstage_buf[i] = buf;
    self->wstage_len[i] = len;
    self->write_size += len;
    return 0;
}

/* Sends tr's staged data with one write/writev: 0 when all went, 1 when Go must take the
 * rest (EAGAIN, part sent) or the error (wstage_err). */
static int wstage_send(GLTransport *tr) {
    struct iovec iov[GL_WSTAGE];
    int n = tr->nwstage;
    for (int i = 0; i < n; i++) {
        iov[i].iov_base = tr->wstage_buf[i];
        iov[i].iov_len = (size_t)tr->wstage_len[i];
    }
    iov[0].iov_base = tr->wstage_buf[0] + tr->wstage_off;
    iov[0].iov_len -= (size_t)tr->wstage_off;
    ssize_t k = gl_sock_sendv(tr->sock_fd, iov, n);
    if (k < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) tr->wstage_err = errno;
        return 1;
    }
    tr->write_size -= k;
    int done = 0;
    while (done < n && (size_t)k >= iov[done].iov_len) {
        k -= (ssize_t)iov[done].iov_len;
        Py_DECREF(tr->wstage[done]);  /* bytes: no Python code runs */
        tr->wstage[done] = NULL;
        done++;
    }
    if (done == n) {
        tr->nwstage = 0;
        tr->wstage_off = 0;
        return 0;
    }
    tr->wstage_off = (done == 0 ? tr->wstage_off : 0) + k;
    for (int i = done; i < n; i++) {
        tr->wstage[i - done] = tr->wstage[i];
        tr->wstage_buf[i - done] = tr->wstage_buf[i];
        tr->wstage_len[i - done] = tr->wstage_len[i];
    }
    tr->nwstage = n - done;
    return 1;
}

/* Whether tr's staged data may leave now: nothing makes the send call Python (closing,
 * EOF, sendfile, a paused protocol: Go's flush does those) and no send failed (the error
 * waits for Go, wstage_err). */
static inline int wstage_sendable(GLTransport *tr) {
    return tr->conn != 0 && !tr->conn_lost && !tr->closing && !tr->eof && !tr->sendfile_busy &&
           !tr->protocol_paused && tr->wstage_err == 0;
}

Py_ssize_t gl_flush_staged(GLLoop *loop) {
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < loop->nwdirty; i++) {
        GLTransport *tr = (GLTransport *)loop->wdirty[i];
        if (tr == NULL) continue;  /* detached */
        if (tr->nwstage == 0) {    /* Go took them */
            tr->wlisted = 0;
            continue;
        }
        if (!wstage_sendable(tr) || wstage_send(tr) != 0)
            loop->wdirty[k++] = (PyObject *)tr;  /* Go's: still listed */
        else
            tr->wlisted = 0;
    }
    loop->nwdirty = k;
    return k;
}

Py_ssize_t gl_flush_staged_u(uintptr_t loop) { return gl_flush_staged((GLLoop *)loop); }

void gl_send_staged(GLTransport *tr) {
    /* still listed on the loop's wdirty: gl_flush_staged finds it sent (nwstage 0) */
    if (tr->nwstage > 0 && wstage_sendable(tr)) wstage_send(tr);
}

const char *const gl_msg_write_err = "Fatal write error on socket transport";

static PyObject *tr_write(GLTransport *self, PyObject *data) {
    if (!PyBytes_Check(data) && !PyByteArray_Check(data) && !PyMemoryView_Check(data)) {
#if PY_VERSION_HEX >= 0x030D0000 /* asyncio changed its message within 3.13 (gh-138703); 3.12 has the old */
        PyErr_Format(PyExc_TypeError,
                     "data argument must be a bytes, bytearray, or memoryview object, not '%.100s'",
                     Py_TYPE(data)->tp_name);
#else
        PyErr_Format(PyExc_TypeError, "data argument must be a bytes-like object, not '%.100s'",
                     Py_TYPE(data)->tp_name);
#endif
        return NULL;
    }
    if (self->eof) {
        PyErr_SetString(PyExc_RuntimeError, "Cannot call write() after write_eof()");
        return NULL;
    }
    if (self->sendfile_busy) {
        PyErr_SetString(PyExc_RuntimeError, "unable to write; sendfile is in progress");
        return NULL;
    }
    GL_FORK_GUARD(NULL);
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
        /* e.g. a non-contiguous memoryview: asyncio's send() fails the same way, and
         * asyncio reports it as a fatal write error rather than raising. */
        if (!PyErr_ExceptionMatches(PyExc_BufferError)) return NULL;
        if (gl_call_fatal((PyObject *)self, gl_msg_write_err) < 0) return NULL;
        Py_RETURN_NONE;
    }
    if (view.len == 0) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    if (self->conn_lost || self->conn == 0) {
        PyBuffer_Release(&view);
        return gl_call_method0((PyObject *)self, "_write_after_conn_lost");
    }
    char *buf = (char *)view.buf;
    Py_ssize_t len = view.len;
    int is_bytes = PyBytes_CheckExact(data);
    if (self->write_size == 0 && (!is_bytes || !wstage_ok(self, len))) {
        /* Nothing queued (nothing staged either: staged bytes count in write_size), and data
         * may not wait in C for the end of the iteration (a mutable buffer, as asyncpg's
         * memoryviews, which queueing would mean copying; or bytes past the high-water mark):
         * to the socket at once, as asyncio's write() does. Go's path takes what is left
         * (EAGAIN, part sent: a mutable buffer's rest is copied), or a failure of bytes (its
         * flush meets it again); a mutable buffer's failure is asyncio's fatal error here. */
        struct iovec iov = {.iov_base = buf, .iov_len = (size_t)len};
        ssize_t k = gl_sock_sendv(self->sock_fd, &iov, 1);
        if (k < 0 && !is_bytes && errno != EAGAIN && errno != EWOULDBLOCK) {
            PyBuffer_Release(&view);
            gl_set_oserror(errno);
            if (gl_call_fatal((PyObject *)self, gl_msg_write_err) < 0) return NULL;
            Py_RETURN_NONE;
        }
        if (k == len) {
            PyBuffer_Release(&view);
            Py_RETURN_NONE;
        }
        if (k > 0) buf += k, len -= k;
    }
    if (self->write_size == 0 && !self->fixed_ctx) {
        /* The context later sends of this data call back in (resume_writing, the drain after
         * close()): asyncio's writer handle, made by the write() that leaves data queued. */
        PyObject *ctx = PyContext_CopyCurrent();
        if (ctx == NULL) {
            PyBuffer_Release(&view);
            return NULL;
        }
        Py_XSETREF(self->wctx, ctx);
    }
    if (is_bytes && wstage_ok(self, len) && wstage_push(self, data, buf, len) == 0) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    int rc = glConnWrite(self, data, buf, len, is_bytes, 0);
    PyBuffer_Release(&view);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *s_write;  /* "write", made by gl_init_transport_type */

/* transport.write(b''.join(items)) for a list of non-empty bytes objects, without the join:
 * each is queued by reference, and Go checks the high-water mark (and may start sending)
 * after the last, so they leave together, with one writev. goloop's TLS protocol hands its
 * records over this way (loop_sslfast.c). Returns 0, -1 with an exception set, or 1 when tr is
 * not a goloop socket transport whose write() is this file's (nothing done: the caller
 * makes asyncio's write() call). */
int gl_transport_write_seq(PyObject *tr, PyObject *items) {
    GLTransport *self = (GLTransport *)tr;
    Py_ssize_t n = PyList_GET_SIZE(items);
    if (n == 0) return 0;
    if (GL_TransportType == NULL || !PyObject_TypeCheck(tr, GL_TransportType)) return 1;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyBytes_CheckExact(PyList_GET_ITEM(items, i))) return 1;
    /* a subclass, or the instance, may have replaced write() (a test's mock) */
    PyObject *w = PyObject_GetAttr(tr, s_write);
    if (w == NULL) return -1;
    int plain = PyCFunction_Check(w) && PyCFunction_GET_SELF(w) == tr &&
                PyCFunction_GET_FUNCTION(w) == (PyCFunction)tr_write;
    Py_DECREF(w);
    if (!plain) return 1;
    if (self->eof) {
        PyErr_SetString(PyExc_RuntimeError, "Cannot call write() after write_eof()");
        return -1;
    }
    if (self->sendfile_busy) {
        PyErr_SetString(PyExc_RuntimeError, "unable to write; sendfile is in progress");
        return -1;
    }
    GL_FORK_GUARD(-1);
    if (self->conn_lost || self->conn == 0) {  /* one write(), as asyncio's join would be */
        PyObject *r = gl_call_method0(tr, "_write_after_conn_lost");
        if (r == NULL) return -1;
        Py_DECREF(r);
        return 0;
    }
    if (self->write_size == 0 && !self->fixed_ctx) {  /* see tr_write */
        PyObject *ctx = PyContext_CopyCurrent();
        if (ctx == NULL) return -1;
        Py_XSETREF(self->wctx, ctx);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        /* the list is the caller's own: no Python code runs in between to change it */
        PyObject *b = PyList_GET_ITEM(items, i);
        if (glConnWrite(self, b, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b), 1, i < n - 1) < 0)
            return -1;
    }
    return 0;
}

static PyObject *tr_get_write_buffer_size(GLTransport *self, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromSsize_t(self->write_size);
}

static PyObject *tr_is_closing(GLTransport *self, PyObject *Py_UNUSED(ignored)) {
    return PyBool_FromLong(self->closing);
}

static PyObject *tr_core_attach(GLTransport *self, PyObject *const *args, Py_ssize_t nargs) {
    GL_FORK_GUARD(NULL);
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "_core_attach(loop, fd)");
        return NULL;
    }
    int fd = PyObject_AsFileDescriptor(args[1]);
    if (fd < 0) return NULL;
    if (glConnAttach(self, args[0], fd) < 0) return NULL;
    /* write()'s fast path stages on this loop's list (a GLLoop: glConnAttach checked it).
     * Borrowed: a strong reference here would hide a cycle (loop -> Go's attached
     * transports -> loop) from the collector; the loop detaches its transports (which
     * clears this) before it is freed. */
    self->wloop = args[0];
    Py_RETURN_NONE;
}

static PyObject *tr_core_set_protocol(GLTransport *self, PyObject *const *args, Py_ssize_t nargs) {
    GL_FORK_GUARD(NULL);
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "_core_set_protocol(protocol, buffered)");
        return NULL;
    }
    int buffered = PyObject_IsTrue(args[1]);
    if (buffered < 0) return NULL;
    if (glConnSetProtocol(self, args[0], buffered) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *tr_core_read(GLTransport *self, PyObject *flag) {
    GL_FORK_GUARD(NULL);
    int on = PyObject_IsTrue(flag);
    if (on < 0) return NULL;
    if (on && self->conn != 0 && !self->fixed_ctx) {
        /* Reading (re)starts: the reads run in a copy of this context from now on, as
         * asyncio's reader handle, made by _add_reader() here, would run them. */
        PyObject *ctx = PyContext_CopyCurrent();
        if (ctx == NULL) return NULL;
        Py_XSETREF(self->rctx, ctx);
    }
    if (glConnRead(self, on) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *tr_core_clear_write(GLTransport *self, PyObject *Py_UNUSED(ignored)) {
    GL_FORK_GUARD(NULL);
    if (glConnClearWrite(self) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *tr_core_flush(GLTransport *self, PyObject *Py_UNUSED(ignored)) {
    GL_FORK_GUARD(NULL);
    if (glConnFlush(self) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *tr_core_detach(GLTransport *self, PyObject *Py_UNUSED(ignored)) {
    if (gl_forked) Py_RETURN_NONE;
    if (glConnDetach(self) < 0) return NULL;
    Py_RETURN_NONE;
}

/* close() with data queued: if the queue only waits for the end of this loop iteration
 * (nothing has blocked), asyncio's write() would have sent it already and its close() would
 * schedule connection_lost in a copy of the current context; the drain calls it in that. */
static PyObject *tr_core_close_ctx(GLTransport *self, PyObject *Py_UNUSED(ignored)) {
    if (self->conn != 0 && self->write_size > 0 && !self->write_blocked && !self->fixed_ctx) {
        PyObject *ctx = PyContext_CopyCurrent();
        if (ctx == NULL) return NULL;
        Py_XSETREF(self->wctx, ctx);
    }
    Py_RETURN_NONE;
}

/* _core_set_context(ctx): every callback of this (attached) connection runs in the
 * contextvars.Context ctx itself from now on (asyncio 3.15's transports, made with
 * context=ctx): reads, and what the write queue calls back. */
static PyObject *tr_core_set_context(GLTransport *self, PyObject *ctx) {
    if (!PyContext_CheckExact(ctx)) {
        PyErr_Format(PyExc_TypeError, "a contextvars.Context was expected, got %.100s",
                     Py_TYPE(ctx)->tp_name);
        return NULL;
    }
    if (self->conn == 0) {
        PyErr_SetString(PyExc_RuntimeError, "_core_set_context: the transport is not attached");
        return NULL;
    }
    Py_INCREF(ctx);
    Py_XSETREF(self->rctx, ctx);
    Py_INCREF(ctx);
    Py_XSETREF(self->wctx, ctx);
    self->fixed_ctx = 1;
    Py_RETURN_NONE;
}

static PyObject *tr_core_events(GLTransport *self, PyObject *Py_UNUSED(ignored)) {
    GL_FORK_GUARD(NULL);
    return PyLong_FromLong(glConnEvents(self));
}

static PyMethodDef tr_methods[] = {
    {"write", (PyCFunction)tr_write, METH_O,
     "Queue data for sending; writes made in one loop iteration leave together."},
    {"get_write_buffer_size", (PyCFunction)tr_get_write_buffer_size, METH_NOARGS, NULL},
    {"is_closing", (PyCFunction)tr_is_closing, METH_NOARGS, NULL},
    {"_core_attach", (PyCFunction)(void (*)(void))tr_core_attach, METH_FASTCALL, NULL},
    {"_core_set_protocol", (PyCFunction)(void (*)(void))tr_core_set_protocol, METH_FASTCALL, NULL},
    {"_core_read", (PyCFunction)tr_core_read, METH_O, NULL},
    {"_core_clear_write", (PyCFunction)tr_core_clear_write, METH_NOARGS, NULL},
    {"_core_flush", (PyCFunction)tr_core_flush, METH_NOARGS, NULL},
    {"_core_detach", (PyCFunction)tr_core_detach, METH_NOARGS, NULL},
    {"_core_events", (PyCFunction)tr_core_events, METH_NOARGS, NULL},
    {"_core_close_ctx", (PyCFunction)tr_core_close_ctx, METH_NOARGS, NULL},
    {"_core_set_context", (PyCFunction)tr_core_set_context, METH_O, NULL},
    {NULL}
};

static PyMemberDef tr_members[] = {
    {"_sock_fd", T_INT, offsetof(GLTransport, sock_fd), 0, NULL},
    {"_conn_lost", T_PYSSIZET, offsetof(GLTransport, conn_lost), 0, NULL},
    {"_high_water", T_PYSSIZET, offsetof(GLTransport, high_water), 0, NULL},
    {"_low_water", T_PYSSIZET, offsetof(GLTransport, low_water), 0, NULL},
    {"_closing", T_BOOL, offsetof(GLTransport, closing), 0, NULL},
    {"_paused", T_BOOL, offsetof(GLTransport, paused), 0, NULL},
    {"_eof", T_BOOL, offsetof(GLTransport, eof), 0, NULL},
    {"_protocol_paused", T_BOOL, offsetof(GLTransport, protocol_paused), 0, NULL},
    {"_sendfile_busy", T_BOOL, offsetof(GLTransport, sendfile_busy), 0, NULL},
    {NULL}
};

static PyType_Slot tr_slots[] = {
    {Py_tp_doc, "The Go core of goloop's socket transports (an asyncio.Transport)."},
    {Py_tp_methods, tr_methods},
    {Py_tp_members, tr_members},
    {0, NULL},
};

/* Creates the type as a subclass of asyncio's _FlowControlMixin (from goloop._compat, the one
 * place of asyncio's private names); fails if that class's layout is not the one this file
 * was written for (the header and five slots). */
int gl_init_transport_type(PyObject *module) {
    s_write = PyUnicode_InternFromString("write");
    if (s_write == NULL) return -1;
    PyObject *compat = PyImport_ImportModule("goloop._compat");
    if (compat == NULL) return -1;
    PyObject *base = PyObject_GetAttrString(compat, "FlowControlMixin");
    Py_DECREF(compat);
    if (base == NULL) return -1;
    if (((PyTypeObject *)base)->tp_basicsize != (Py_ssize_t)offsetof(GLTransport, conn)) {
        PyErr_Format(PyExc_ImportError,
                     "goloop: asyncio's _FlowControlMixin layout (%zd bytes) is not the expected one (%zd)",
                     ((PyTypeObject *)base)->tp_basicsize, (Py_ssize_t)offsetof(GLTransport, conn));
        Py_DECREF(base);
        return -1;
    }
    PyType_Spec spec = {
        .name = "goloop._goloop.SocketTransportCore",
        .basicsize = sizeof(GLTransport),
        .itemsize = 0,
        .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
        .slots = tr_slots,
    };
    PyObject *bases = PyTuple_Pack(1, base);
    Py_DECREF(base);
    if (bases == NULL) return -1;
    PyObject *tp = PyType_FromSpecWithBases(&spec, bases);
    Py_DECREF(bases);
    if (tp == NULL) return -1;
    GL_TransportType = (PyTypeObject *)tp;
    Py_INCREF(tp);
    if (PyModule_AddObject(module, "SocketTransportCore", tp) < 0) {
        Py_DECREF(tp);
        return -1;
    }
    return 0;
}
