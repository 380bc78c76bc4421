/* The per-event Python calls of goloop's stream transports, each one C call from Go: reading a
 * socket into bytes for data_received or into a BufferedProtocol's buffer, EOF and error
 * delivery to the transport's lifecycle code, each in the connection's contextvars context. */
#include <unistd.h>
#include <errno.h>
#include "gl.h"

static PyObject *minus_one;  /* gl_read_buffered_u's argument */

int gl_init_readpath(void) {
    minus_one = PyLong_FromLong(-1);
    return minus_one ? 0 : -1;
}

/* Enters the contextvars context ctx (none: NULL) for one protocol callback, as the handle
 * asyncio's transports register with its selector would, keeping a reference while inside
 * (the transport may replace its context meanwhile). No exception may be pending. */
static inline int ctx_enter(PyObject *ctx) {
    if (ctx == NULL) return 0;
    Py_INCREF(ctx);
    if (PyContext_Enter(ctx) < 0) {
        Py_DECREF(ctx);
        return -1;
    }
    return 0;
}

/* Leaves ctx. failed: the callback left an exception pending, which stays as it was.
 * Returns -1 only if leaving failed on its own, with that error set. */
static inline int ctx_exit(PyObject *ctx, int failed) {
    if (ctx == NULL) return 0;
    int rc = 0;
    if (failed) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        if (PyContext_Exit(ctx) < 0) PyErr_Clear();
        PyErr_Restore(t, v, tb);
    } else {
        rc = PyContext_Exit(ctx);
    }
    Py_DECREF(ctx);
    return rc;
}

PyObject *gl_call_method0_in(PyObject *self, const char *name, PyObject *ctx) {
    if (ctx_enter(ctx) < 0) return NULL;
    PyObject *r = gl_call_method0(self, name);
    if (ctx_exit(ctx, r == NULL) < 0) Py_CLEAR(r);
    return r;
}

/* gl_call_fatal in ctx; the exception it reports is pending on entry (rare paths). */
int gl_call_fatal_in(PyObject *tr, const char *msg, PyObject *ctx) {
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    if (ctx_enter(ctx) < 0) {
        Py_XDECREF(t);
        Py_XDECREF(v);
        Py_XDECREF(tb);
        return gl_exc_is_fatal() ? -1 : (PyErr_WriteUnraisable(tr), 0);
    }
    PyErr_Restore(t, v, tb);
    int rc = gl_call_fatal(tr, msg);
    if (ctx_exit(ctx, PyErr_Occurred() != NULL) < 0)
        rc = gl_exc_is_fatal() ? -1 : (PyErr_WriteUnraisable(tr), 0);
    return rc;
}

void gl_tr_clear_ctx(GLTransport *tr) {
    Py_CLEAR(tr->rctx);
    Py_CLEAR(tr->wctx);
    /* write()'s staging (loop_transport.c): Go's detach emptied it (absorb, clearWrite); off the
     * loop's list, which does not own its entries */
    for (int i = 0; i < tr->nwstage; i++) Py_CLEAR(tr->wstage[i]);
    tr->nwstage = 0;
    tr->wstage_off = 0;
    GLLoop *loop = (GLLoop *)tr->wloop;
    if (tr->wlisted && loop != NULL) {
        for (Py_ssize_t i = 0; i < loop->nwdirty; i++)
            if (loop->wdirty[i] == (PyObject *)tr) loop->wdirty[i] = NULL;
    }
    tr->wlisted = 0;
    tr->wloop = NULL;  /* borrowed (loop_transport.c, tr_core_attach) */
}

/* One Protocol read, in one call from Go: recv(2) from the (non-blocking) socket and
 * data_received(bytes), called in the connection's read context ctx (NULL: the current
 * one), then what it wrote is sent (gl_send_staged). The method, ctx and the transport tr
 * come as integers (see gl.h). Small reads land in the
 * loop's buffer rbuf and are copied into bytes of their size. After a large read (`last`,
 * the connection's previous count, of GL_DIRECT_MIN or more) the next goes straight into
 * a bytes object, shrunk to what came: copying 100 KiB out of rbuf again was ~8 % of an
 * echo server's CPU. That bytes object stays under glibc's mmap threshold (128 KiB), so
 * it never costs an mmap and its page faults. Returns the bytes delivered, 0 at EOF,
 * GL_RB_UPDATED with the exception data_received (or the allocation) raised, or
 * GL_RB_ERRNO - errno when recv(2) failed. */
Py_ssize_t gl_read_deliver_u(uintptr_t meth_u, int fd, uintptr_t rbuf_u, Py_ssize_t rbuf_len,
                             Py_ssize_t last, uintptr_t ctx_u, uintptr_t tr_u) {
    PyObject *meth = (PyObject *)meth_u, *b;
    ssize_t n;
    if (last >= GL_DIRECT_MIN) {
        b = PyBytes_FromStringAndSize(NULL, GL_DIRECT_MAX);
        if (b == NULL) return GL_RB_UPDATED;
        n = gl_sock_recv(fd, PyBytes_AS_STRING(b), GL_DIRECT_MAX);
        if (n <= 0) {
            int e = errno;
            Py_DECREF(b);
            return n == 0 ? 0 : GL_RB_ERRNO - e;
        }
        if (n != GL_DIRECT_MAX && _PyBytes_Resize(&b, n) < 0) return GL_RB_UPDATED;
    } else {
        n = gl_sock_recv(fd, (char *)rbuf_u, (size_t)rbuf_len);
        if (n <= 0) return n == 0 ? 0 : GL_RB_ERRNO - errno;
        b = PyBytes_FromStringAndSize((const char *)rbuf_u, n);
        if (b == NULL) return GL_RB_UPDATED;
    }
    PyObject *ctx = (PyObject *)ctx_u, *r = NULL, *tr = (PyObject *)tr_u;
    Py_INCREF(tr);  /* the send after the callback needs it whatever the callback did */
    if (ctx_enter(ctx) == 0) {
        r = PyObject_Vectorcall(meth, &b, 1, NULL);
        if (ctx_exit(ctx, r == NULL) < 0) Py_CLEAR(r);
    }
    Py_DECREF(b);
    if (r != NULL) {
        Py_DECREF(r);
        gl_send_staged((GLTransport *)tr);
    }
    Py_DECREF(tr);
    return r == NULL ? GL_RB_UPDATED : n;
}

/* Hands the pending exception to tr._fatal_error(exc, msg), as asyncio's transports do.
 * Returns -1 (exception set) if it must propagate: SystemExit, KeyboardInterrupt. */
int gl_call_fatal(PyObject *tr, const char *msg) {
    if (gl_exc_is_fatal()) return -1;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL) PyException_SetTraceback(value, tb);
    PyObject *m = PyUnicode_FromString(msg), *r = NULL;
    if (m != NULL) {
        PyObject *fargs[2] = {value ? value : Py_None, m};
        r = gl_call_method(tr, "_fatal_error", fargs, 2);
        Py_DECREF(m);
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    if (r == NULL) return gl_exc_is_fatal() ? -1 : (PyErr_WriteUnraisable(tr), 0);
    Py_DECREF(r);
    return 0;
}

/* One BufferedProtocol read, in one call from Go: buf = get_buffer(-1), recv(2) from the
 * (non-blocking) socket straight into it, buffer_updated(n), in the connection's read
 * context ctx (NULL: the current one), then what it wrote is sent (gl_send_staged). The
 * methods, ctx and the transport tr come as integers (see gl.h). Returns the bytes
 * delivered, 0 at EOF, GL_RB_GETBUF with a Python exception set by get_buffer or its
 * buffer, GL_RB_UPDATED with one set by buffer_updated, or GL_RB_ERRNO - errno when
 * recv(2) failed. */
static Py_ssize_t read_buffered(PyObject *get_buffer, PyObject *buffer_updated, int fd);

Py_ssize_t gl_read_buffered_u(uintptr_t get_buffer_u, uintptr_t buffer_updated_u, int fd,
                              uintptr_t ctx_u, uintptr_t tr_u) {
    PyObject *ctx = (PyObject *)ctx_u, *tr = (PyObject *)tr_u;
    if (ctx_enter(ctx) < 0) return GL_RB_GETBUF;
    Py_INCREF(tr);  /* as in gl_read_deliver_u */
    Py_ssize_t n = read_buffered((PyObject *)get_buffer_u, (PyObject *)buffer_updated_u, fd);
    if (ctx_exit(ctx, n == GL_RB_GETBUF || n == GL_RB_UPDATED) < 0) n = GL_RB_UPDATED;
    if (n > 0) gl_send_staged((GLTransport *)tr);
    Py_DECREF(tr);
    return n;
}

static Py_ssize_t read_buffered(PyObject *get_buffer, PyObject *buffer_updated, int fd) {
    PyObject *buf = PyObject_Vectorcall(get_buffer, &minus_one, 1, NULL);
    if (buf == NULL) return GL_RB_GETBUF;
    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE | PyBUF_SIMPLE) < 0) {
        Py_DECREF(buf);
        return GL_RB_GETBUF;
    }
    if (view.len == 0) {
        PyBuffer_Release(&view);
        Py_DECREF(buf);
        PyErr_SetString(PyExc_RuntimeError, "get_buffer() returned an empty buffer");
        return GL_RB_GETBUF;
    }
    ssize_t n = gl_sock_recv(fd, view.buf, (size_t)view.len);
    int e = errno;
    PyBuffer_Release(&view);
    Py_DECREF(buf);
    if (n < 0) return GL_RB_ERRNO - e;
    if (n == 0) return 0;
    PyObject *num = PyLong_FromSsize_t(n);
    if (num == NULL) return GL_RB_UPDATED;
    PyObject *r = PyObject_Vectorcall(buffer_updated, &num, 1, NULL);
    Py_DECREF(num);
    if (r == NULL) return GL_RB_UPDATED;
    Py_DECREF(r);
    return n;
}
