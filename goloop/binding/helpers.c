/* Small C helpers for the Go side: CPython macros and inline functions that cgo cannot
 * call, and the one hot C routine, running a handle (context enter, call, context exit). */
#include <unistd.h>
#include <sys/epoll.h>
#include <errno.h>
#include "gl.h"

PyObject *gl_none(void) { Py_RETURN_NONE; }
int gl_is_none(PyObject *o) { return o == Py_None; }
void gl_incref(PyObject *o) { Py_INCREF(o); }
void gl_decref(PyObject *o) { Py_DECREF(o); }
void gl_set_error(PyObject *type, const char *msg) { PyErr_SetString(type, msg); }
void gl_set_oserror(int err) { errno = err; PyErr_SetFromErrno(PyExc_OSError); }

int gl_exc_is_fatal(void) {
    return PyErr_ExceptionMatches(PyExc_SystemExit) || PyErr_ExceptionMatches(PyExc_KeyboardInterrupt);
}

PyObject *gl_call_method0(PyObject *self, const char *name) {
    return PyObject_CallMethod(self, name, NULL);
}

PyObject *gl_call_method1(PyObject *self, const char *name, PyObject *arg) {
    return PyObject_CallMethod(self, name, "O", arg);
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
    PyObject *r = PyObject_CallMethod(self, name, NULL);
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
}

static PyObject *partial_type, *py_iscoroutine, *py_iscoroutinefunction, *py_is_coroutine_mark;
static PyObject *minus_one;  /* gl_read_buffered_u's argument; set at module init */

/* Imports what gl_check_callback consults; called once at module init. */
int gl_init_callback_check(void) {
    if (minus_one == NULL && (minus_one = PyLong_FromLong(-1)) == NULL) return -1;
    PyObject *ft = PyImport_ImportModule("functools");
    PyObject *co = PyImport_ImportModule("asyncio.coroutines");
    if (ft == NULL || co == NULL) {
        Py_XDECREF(ft);
        Py_XDECREF(co);
        return -1;
    }
    partial_type = PyObject_GetAttrString(ft, "partial");
    py_iscoroutine = PyObject_GetAttrString(co, "iscoroutine");
    py_iscoroutinefunction = PyObject_GetAttrString(co, "iscoroutinefunction");
    py_is_coroutine_mark = PyObject_GetAttrString(co, "_is_coroutine");
    Py_DECREF(ft);
    Py_DECREF(co);
    return (partial_type && py_iscoroutine && py_iscoroutinefunction && py_is_coroutine_mark) ? 0 : -1;
}

static int call_bool(PyObject *f, PyObject *arg) {
    PyObject *r = PyObject_Vectorcall(f, &arg, 1, NULL);
    if (r == NULL) return -1;
    int b = PyObject_IsTrue(r);
    Py_DECREF(r);
    return b;
}

/* asyncio's _check_callback: coroutines and coroutine functions (also behind bound methods
 * and functools.partial, or marked with asyncio's _is_coroutine, like AsyncMock) are refused,
 * and so is anything not callable. Plain functions, bound methods and builtins, the hot
 * cases, are decided without calling Python. */
int gl_check_callback(PyObject *cb, const char *method) {
    int coro = PyCoro_CheckExact(cb);
    PyObject *f = cb;
    Py_INCREF(f);
    while (!coro) {
        PyObject *inner = NULL;
        if (PyMethod_Check(f)) {
            inner = PyMethod_GET_FUNCTION(f);
            Py_INCREF(inner);
        } else if (partial_type != NULL && PyObject_TypeCheck(f, (PyTypeObject *)partial_type)) {
            inner = PyObject_GetAttrString(f, "func");
            if (inner == NULL) {
                Py_DECREF(f);
                return -1;
            }
        } else {
            break;
        }
        Py_SETREF(f, inner);
    }
    if (!coro && PyFunction_Check(f)) {
        PyObject *d = ((PyFunctionObject *)f)->func_dict;
        coro = (((PyCodeObject *)PyFunction_GET_CODE(f))->co_flags & CO_COROUTINE) ||
               (d != NULL && PyDict_GetItemString(d, "_is_coroutine") == py_is_coroutine_mark);
    } else if (!coro && (Py_TYPE(f)->tp_flags & Py_TPFLAGS_HEAPTYPE) && Py_TYPE(f)->tp_dictoffset != 0 &&
               py_iscoroutinefunction != NULL) {
        /* instances of Python classes (AsyncMock, custom awaitables): ask asyncio */
        int a = call_bool(py_iscoroutine, f);
        int b = a == 0 ? call_bool(py_iscoroutinefunction, f) : 0;
        if (a < 0 || b < 0) {
            Py_DECREF(f);
            return -1;
        }
        coro = a || b;
    }
    Py_DECREF(f);
    if (coro) {
        PyErr_Format(PyExc_TypeError, "coroutines cannot be used with %s()", method);
        return -1;
    }
    if (!PyCallable_Check(cb)) {
        PyErr_Format(PyExc_TypeError, "a callable object was expected by %s(), got %R", method, cb);
        return -1;
    }
    return 0;
}

int gl_visit(visitproc visit, PyObject *o, void *arg) { return o ? visit(o, arg) : 0; }

PyObject *gl_handle_new(PyTypeObject *tp, PyObject *loop, PyObject *cb, PyObject *const *args,
                        Py_ssize_t nargs, PyObject *context, double when) {
    GLHandle *h = PyObject_GC_New(GLHandle, tp);
    if (h == NULL) return NULL;
    h->args = NULL;
    if (nargs > 0) {
        PyObject *t = PyTuple_New(nargs);
        if (t == NULL) {
            h->callback = h->context = h->loop = h->weakreflist = h->repr = h->source_tb = NULL;
            Py_DECREF(h);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < nargs; i++) {
            Py_INCREF(args[i]);
            PyTuple_SET_ITEM(t, i, args[i]);
        }
        h->args = t;
    }
    if (context == NULL || context == Py_None) {
        h->context = PyContext_CopyCurrent();
        if (h->context == NULL) {
            h->callback = h->loop = h->weakreflist = h->repr = h->source_tb = NULL;
            Py_DECREF(h);
            return NULL;
        }
    } else {
        Py_INCREF(context);
        h->context = context;
    }
    Py_INCREF(cb);
    h->callback = cb;
    Py_INCREF(loop);
    h->loop = loop;
    h->weakreflist = NULL;
    h->repr = NULL;
    h->source_tb = NULL;
    if (((GLLoop *)loop)->debug) {
        /* asyncio's Handle: remember where it was created (the caller's frame) */
        PyObject *fh = PyImport_ImportModule("asyncio.format_helpers");
        PyFrameObject *frame = PyEval_GetFrame();
        if (fh != NULL) {
            h->source_tb = PyObject_CallMethod(fh, "extract_stack", "O", frame ? (PyObject *)frame : Py_None);
            Py_DECREF(fh);
        }
        if (h->source_tb == NULL) PyErr_Clear();
    }
    h->when = when;
    h->cancelled = 0;
    h->scheduled = 0;
    PyObject_GC_Track(h);
    return (PyObject *)h;
}

/* Reports the pending exception of a failed callback to the loop's exception handler, as
 * asyncio's Handle._run does. Returns -1 (exception left set) when it must propagate out of
 * run_forever: SystemExit, KeyboardInterrupt, or a failing handler. */
static int report_exception(PyObject *loop, PyObject *h) {
    if (gl_exc_is_fatal()) return -1;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL) PyException_SetTraceback(value, tb);
    PyObject *r = PyObject_CallMethod(loop, "_handle_callback_exception", "OO", h, value ? value : Py_None);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

static int run_gl_handle(GLHandle *h) {
    PyObject *cb = h->callback, *args = h->args, *ctx = h->context, *res = NULL;
    Py_INCREF(cb);
    Py_XINCREF(args);
    Py_INCREF(ctx);
    if (PyContext_Enter(ctx) == 0) {
        if (args == NULL)
            res = PyObject_CallNoArgs(cb);
        else
            res = PyObject_Vectorcall(cb, &PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args), NULL);
        if (res == NULL) {
            PyObject *t, *v, *tb;
            PyErr_Fetch(&t, &v, &tb);
            PyContext_Exit(ctx);
            PyErr_Restore(t, v, tb);
        } else if (PyContext_Exit(ctx) < 0) {
            Py_CLEAR(res);
        }
    }
    Py_DECREF(cb);
    Py_XDECREF(args);
    Py_DECREF(ctx);
    if (res != NULL) {
        Py_DECREF(res);
        return 0;
    }
    return report_exception(h->loop, (PyObject *)h);
}

/* Runs one handle taken from the ready queue and releases the queue's reference to it.
 * Returns 0, or -1 with an exception that must stop the loop. */
int gl_handle_run(PyObject *o) {
    int rc = 0;
    if (Py_IS_TYPE(o, GL_HandleType) || Py_IS_TYPE(o, GL_TimerHandleType)) {
        GLHandle *h = (GLHandle *)o;
        if (!h->cancelled) rc = run_gl_handle(h);
    } else {
        /* A foreign handle (asyncio.Handle, e.g. from _add_callback): honour _cancelled, call _run(). */
        PyObject *c = PyObject_GetAttrString(o, "_cancelled");
        int cancelled = c ? PyObject_IsTrue(c) : -1;
        Py_XDECREF(c);
        if (cancelled < 0) {
            rc = -1;
        } else if (!cancelled) {
            PyObject *r = PyObject_CallMethod(o, "_run", NULL);
            if (r == NULL) rc = -1;
            Py_XDECREF(r);
        }
    }
    Py_DECREF(o);
    return rc;
}

/* data_received(bytes(buf[:n])): returns 0, or -1 with the callback's exception set. */
/* One Protocol read, in one call from Go: read(2) from the (non-blocking) socket and
 * data_received(bytes), called in the connection's read context ctx (NULL: the current
 * one). The method and ctx come as integers (see gl.h). Small reads land in the
 * loop's buffer rbuf and are copied into bytes of their size. After a large read (`last`,
 * the connection's previous count, of GL_DIRECT_MIN or more) the next goes straight into
 * a bytes object, shrunk to what came: copying 100 KiB out of rbuf again was ~8 % of an
 * echo server's CPU. That bytes object stays under glibc's mmap threshold (128 KiB), so
 * it never costs an mmap and its page faults. Returns the bytes delivered, 0 at EOF,
 * GL_RB_UPDATED with the exception data_received (or the allocation) raised, or
 * GL_RB_ERRNO - errno when read(2) failed. */
Py_ssize_t gl_read_deliver_u(uintptr_t meth_u, int fd, uintptr_t rbuf_u, Py_ssize_t rbuf_len,
                             Py_ssize_t last, uintptr_t ctx_u) {
    PyObject *meth = (PyObject *)meth_u, *b;
    ssize_t n;
    if (last >= GL_DIRECT_MIN) {
        b = PyBytes_FromStringAndSize(NULL, GL_DIRECT_MAX);
        if (b == NULL) return GL_RB_UPDATED;
        do {
            n = read(fd, PyBytes_AS_STRING(b), GL_DIRECT_MAX);
        } while (n < 0 && errno == EINTR);
        if (n <= 0) {
            int e = errno;
            Py_DECREF(b);
            return n == 0 ? 0 : GL_RB_ERRNO - e;
        }
        if (n != GL_DIRECT_MAX && _PyBytes_Resize(&b, n) < 0) return GL_RB_UPDATED;
    } else {
        do {
            n = read(fd, (char *)rbuf_u, (size_t)rbuf_len);
        } while (n < 0 && errno == EINTR);
        if (n <= 0) return n == 0 ? 0 : GL_RB_ERRNO - errno;
        b = PyBytes_FromStringAndSize((const char *)rbuf_u, n);
        if (b == NULL) return GL_RB_UPDATED;
    }
    PyObject *ctx = (PyObject *)ctx_u, *r = NULL;
    if (ctx_enter(ctx) == 0) {
        r = PyObject_Vectorcall(meth, &b, 1, NULL);
        if (ctx_exit(ctx, r == NULL) < 0) Py_CLEAR(r);
    }
    Py_DECREF(b);
    if (r == NULL) return GL_RB_UPDATED;
    Py_DECREF(r);
    return n;
}

/* Hands the pending exception to tr._fatal_error(exc, msg), as asyncio's transports do.
 * Returns -1 (exception set) if it must propagate: SystemExit, KeyboardInterrupt. */
int gl_call_fatal(PyObject *tr, const char *msg) {
    if (gl_exc_is_fatal()) return -1;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL) PyException_SetTraceback(value, tb);
    PyObject *r = PyObject_CallMethod(tr, "_fatal_error", "Os", value ? value : Py_None, msg);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    if (r == NULL) return gl_exc_is_fatal() ? -1 : (PyErr_WriteUnraisable(tr), 0);
    Py_DECREF(r);
    return 0;
}

PyObject *gl_getattr(PyObject *o, const char *name) { return PyObject_GetAttrString(o, name); }

/* One BufferedProtocol read, in one call from Go: buf = get_buffer(-1), read(2) from the
 * (non-blocking) socket straight into it, buffer_updated(n), in the connection's read
 * context ctx (NULL: the current one). The methods and ctx come as integers (see gl.h).
 * Returns the bytes delivered, 0 at EOF, GL_RB_GETBUF with a Python exception set by
 * get_buffer or its buffer, GL_RB_UPDATED with one set by buffer_updated, or
 * GL_RB_ERRNO - errno when read(2) failed. */
static Py_ssize_t read_buffered(PyObject *get_buffer, PyObject *buffer_updated, int fd);

Py_ssize_t gl_read_buffered_u(uintptr_t get_buffer_u, uintptr_t buffer_updated_u, int fd,
                              uintptr_t ctx_u) {
    PyObject *ctx = (PyObject *)ctx_u;
    if (ctx_enter(ctx) < 0) return GL_RB_GETBUF;
    Py_ssize_t n = read_buffered((PyObject *)get_buffer_u, (PyObject *)buffer_updated_u, fd);
    if (ctx_exit(ctx, n == GL_RB_GETBUF || n == GL_RB_UPDATED) < 0) return GL_RB_UPDATED;
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
    ssize_t n;
    do {
        n = read(fd, view.buf, (size_t)view.len);
    } while (n < 0 && errno == EINTR);
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

/* The loop's blocking poll, in one call from Go: release the GIL, epoll_wait, take the GIL
 * back, run Python's signal handlers (KeyboardInterrupt ...). Returns the event count, or
 * -1 with *err = errno (EINTR included), and sets *sig to -1 if a signal handler raised. */
int gl_blocking_wait(int epfd, void *events, int maxevents, int timeout, int *err, int *sig) {
    PyThreadState *ts = PyEval_SaveThread();
    int n = epoll_wait(epfd, (struct epoll_event *)events, maxevents, timeout);
    int e = errno;
    PyEval_RestoreThread(ts);
    if (n < 0) *err = e;
    *sig = PyErr_CheckSignals();
    return n;
}

int gl_handle_run_u(uintptr_t h) { return gl_handle_run((PyObject *)h); }

