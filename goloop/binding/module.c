#define _GNU_SOURCE /* accept4 */
/* The _goloop extension module: type objects, method tables and the thin C wrappers that
 * normalize arguments and call into Go (the exported gl* functions in the .go files). */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "gl.h"
#include "_cgo_export.h"

PyTypeObject *GL_HandleType;
PyTypeObject *GL_TimerHandleType;
int gl_forked = 0;
int gl_init_transport_type(PyObject *module);
int gl_init_http(PyObject *module); /* http.c */
int gl_init_ssl(PyObject *module);  /* sslfast.c */

static int fork_error(void) {
    PyErr_SetString(PyExc_RuntimeError,
        "goloop cannot be used in a process forked after goloop's Go runtime started in its parent: "
        "use the 'spawn' or 'forkserver' multiprocessing start methods, or create goloop loops only "
        "in the child process");
    return -1;
}
#define GUARD_NULL() do { if (gl_forked) { fork_error(); return NULL; } } while (0)
#define GUARD_INT() do { if (gl_forked) return fork_error(); } while (0)

/* ---------- Handle ---------- */

static int handle_traverse(GLHandle *h, visitproc visit, void *arg) {
    Py_VISIT(h->callback);
    Py_VISIT(h->args);
    Py_VISIT(h->context);
    Py_VISIT(h->loop);
    Py_VISIT(h->repr);
    Py_VISIT(h->source_tb);
    return 0;
}

static int handle_clear(GLHandle *h) {
    Py_CLEAR(h->callback);
    Py_CLEAR(h->args);
    Py_CLEAR(h->context);
    Py_CLEAR(h->loop);
    Py_CLEAR(h->repr);
    Py_CLEAR(h->source_tb);
    return 0;
}

static void handle_dealloc(GLHandle *h) {
    PyObject_GC_UnTrack(h);
    if (h->weakreflist != NULL) PyObject_ClearWeakRefs((PyObject *)h);
    handle_clear(h);
    PyObject_GC_Del(h);
}

static PyObject *handle_repr_info(GLHandle *h) {
    const char *kind = Py_IS_TYPE(h, GL_TimerHandleType) ? "TimerHandle" : "Handle";
    PyObject *src = NULL;
    if (h->callback != NULL) {
        PyObject *fh = PyImport_ImportModule("asyncio.format_helpers");
        if (fh == NULL) return NULL;
        src = PyObject_CallMethod(fh, "_format_callback_source", "OO", h->callback,
                                  h->args ? h->args : Py_None);
        Py_DECREF(fh);
        if (src == NULL) return NULL;
    }
    PyObject *r = NULL, *when = NULL;
    if (src == NULL) src = PyUnicode_FromString("");
    if (src == NULL) return NULL;
    if (h->source_tb != NULL && PyList_Check(h->source_tb) && PyList_GET_SIZE(h->source_tb) > 0) {
        /* asyncio: "created at file:line" */
        PyObject *fr = PyList_GET_ITEM(h->source_tb, PyList_GET_SIZE(h->source_tb) - 1);
        PyObject *file = PySequence_GetItem(fr, 0), *line = PySequence_GetItem(fr, 1);
        if (file && line) {
            PyObject *s2 = PyUnicode_FromFormat("%U%screated at %S:%S", src,
                                                PyUnicode_GET_LENGTH(src) ? " " : "", file, line);
            if (s2) Py_SETREF(src, s2);
        }
        Py_XDECREF(file);
        Py_XDECREF(line);
        PyErr_Clear();
    }
    if (Py_IS_TYPE(h, GL_TimerHandleType)) {
        when = PyFloat_FromDouble(h->when);
        if (when != NULL)
            r = PyUnicode_FromFormat("<%s%s when=%R%s%U>", kind, h->cancelled ? " cancelled" : "", when,
                                     PyUnicode_GET_LENGTH(src) ? " " : "", src);
    } else {
        r = PyUnicode_FromFormat("<%s%s%s%U>", kind, h->cancelled ? " cancelled" : "",
                                 PyUnicode_GET_LENGTH(src) ? " " : "", src);
    }
    Py_XDECREF(when);
    Py_DECREF(src);
    return r;
}

static PyObject *handle_repr(GLHandle *h) {
    if (h->repr != NULL) {
        Py_INCREF(h->repr);
        return h->repr;
    }
    return handle_repr_info(h);
}

static PyObject *handle_cancel(GLHandle *h, PyObject *Py_UNUSED(ignored)) {
    if (!h->cancelled) {
        h->cancelled = 1;
        if (Py_IS_TYPE(h, GL_TimerHandleType) && h->scheduled && h->loop != NULL)
            ((GLLoop *)h->loop)->timer_cancelled_count++;
        if (h->loop != NULL && ((GLLoop *)h->loop)->debug && h->repr == NULL) {
            h->cancelled = 0;
            PyObject *r = handle_repr_info(h);
            h->cancelled = 1;
            if (r == NULL) PyErr_Clear();
            else h->repr = r;
        }
        Py_CLEAR(h->callback);
        Py_CLEAR(h->args);
    }
    Py_RETURN_NONE;
}

static PyObject *handle_cancelled(GLHandle *h, PyObject *Py_UNUSED(ignored)) {
    return PyBool_FromLong(h->cancelled);
}

static PyObject *handle_get_context(GLHandle *h, PyObject *Py_UNUSED(ignored)) {
    Py_INCREF(h->context);
    return h->context;
}

static PyObject *handle_run(GLHandle *h, PyObject *Py_UNUSED(ignored)) {
    if (h->cancelled) Py_RETURN_NONE;
    Py_INCREF(h); /* gl_handle_run consumes a reference */
    if (gl_handle_run((PyObject *)h) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *handle_when(GLHandle *h, PyObject *Py_UNUSED(ignored)) {
    return PyFloat_FromDouble(h->when);
}

static PyObject *timer_richcompare(PyObject *a, PyObject *b, int op) {
    if (!PyObject_TypeCheck(b, GL_TimerHandleType)) Py_RETURN_NOTIMPLEMENTED;
    GLHandle *x = (GLHandle *)a, *y = (GLHandle *)b;
    if (op == Py_EQ || op == Py_NE) {
        int eq = x->when == y->when && x->cancelled == y->cancelled;
        if (eq) {
            int r = PyObject_RichCompareBool(x->callback ? x->callback : Py_None,
                                             y->callback ? y->callback : Py_None, Py_EQ);
            if (r < 0) return NULL;
            eq = r;
        }
        if (eq) {
            int r = PyObject_RichCompareBool(x->args ? x->args : Py_None, y->args ? y->args : Py_None, Py_EQ);
            if (r < 0) return NULL;
            eq = r;
        }
        return PyBool_FromLong(op == Py_EQ ? eq : !eq);
    }
    Py_RETURN_RICHCOMPARE(x->when, y->when, op);
}

static Py_hash_t timer_hash(GLHandle *h) {
    PyObject *f = PyFloat_FromDouble(h->when);
    if (f == NULL) return -1;
    Py_hash_t r = PyObject_Hash(f);
    Py_DECREF(f);
    return r;
}

static PyMethodDef handle_methods[] = {
    {"cancel", (PyCFunction)handle_cancel, METH_NOARGS, "Cancel the callback."},
    {"cancelled", (PyCFunction)handle_cancelled, METH_NOARGS, "Return True if the callback was cancelled."},
    {"get_context", (PyCFunction)handle_get_context, METH_NOARGS, "The contextvars.Context the callback runs in."},
    {"_run", (PyCFunction)handle_run, METH_NOARGS, NULL},
    {NULL}
};

static PyMethodDef timer_methods[] = {
    {"when", (PyCFunction)handle_when, METH_NOARGS, "The scheduled time, in loop time (float seconds)."},
    {NULL}
};

static PyMemberDef handle_members[] = {
    {"_callback", T_OBJECT, offsetof(GLHandle, callback), READONLY, NULL},
    {"_args", T_OBJECT, offsetof(GLHandle, args), READONLY, NULL},
    {"_context", T_OBJECT, offsetof(GLHandle, context), READONLY, NULL},
    {"_loop", T_OBJECT, offsetof(GLHandle, loop), READONLY, NULL},
    {"_cancelled", T_BOOL, offsetof(GLHandle, cancelled), READONLY, NULL},
    {"_scheduled", T_BOOL, offsetof(GLHandle, scheduled), READONLY, NULL},
    {"_when", T_DOUBLE, offsetof(GLHandle, when), READONLY, NULL},
    {NULL}
};

static PyObject *handle_source_traceback(GLHandle *h, void *closure) {
    if (h->source_tb == NULL) Py_RETURN_NONE;
    Py_INCREF(h->source_tb);
    return h->source_tb;
}

static PyGetSetDef handle_getset[] = {
    {"_source_traceback", (getter)handle_source_traceback, NULL, NULL, NULL},
    {NULL}
};

static PyTypeObject HandleType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop.Handle",
    .tp_basicsize = sizeof(GLHandle),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A callback scheduled by call_soon (goloop's asyncio.Handle).",
    .tp_dealloc = (destructor)handle_dealloc,
    .tp_traverse = (traverseproc)handle_traverse,
    .tp_clear = (inquiry)handle_clear,
    .tp_repr = (reprfunc)handle_repr,
    .tp_weaklistoffset = offsetof(GLHandle, weakreflist),
    .tp_methods = handle_methods,
    .tp_members = handle_members,
    .tp_getset = handle_getset,
};

static PyTypeObject TimerHandleType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop.TimerHandle",
    .tp_basicsize = sizeof(GLHandle),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A callback scheduled by call_later or call_at (goloop's asyncio.TimerHandle).",
    .tp_dealloc = (destructor)handle_dealloc,
    .tp_traverse = (traverseproc)handle_traverse,
    .tp_clear = (inquiry)handle_clear,
    .tp_repr = (reprfunc)handle_repr,
    .tp_richcompare = timer_richcompare,
    .tp_hash = (hashfunc)timer_hash,
    .tp_methods = timer_methods,
};

/* ---------- LoopCore ---------- */

static PyTypeObject LoopCoreType;

static int parse_context(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                         PyObject **ctx) {
    *ctx = NULL;
    if (kwnames == NULL) return 0;
    Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < nk; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_CompareWithASCIIString(k, "context") != 0) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fname, k);
            return -1;
        }
        *ctx = args[nargs + i];
    }
    if (*ctx == Py_None) *ctx = NULL;
    if (*ctx != NULL && !PyContext_CheckExact(*ctx)) {
        PyErr_Format(PyExc_TypeError, "%s(): context must be a contextvars.Context, not %.100s", fname,
                     Py_TYPE(*ctx)->tp_name);
        return -1;
    }
    return 0;
}


enum { MODE_SOON = 0, MODE_THREADSAFE = 1, MODE_TIMER = 2 };

/* Queues h (taking over one reference) for Go's ready queue, from C. Only the thread that
 * runs the loop (its owner) stages: the array has no lock. */
static int stage(GLLoop *self, PyObject *h) {
    if (self->nstaged == self->staged_cap) {
        Py_ssize_t cap = self->staged_cap ? 2 * self->staged_cap : 64;
        PyObject **p = PyMem_Realloc(self->staged, (size_t)cap * sizeof(PyObject *));
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->staged = p;
        self->staged_cap = cap;
    }
    self->staged[self->nstaged++] = h;
    return 0;
}

/* Appends h (taking over one reference) to the inbox. Returns 1 if the inbox was empty
 * (the caller wakes the loop), 0 if not, -1 with MemoryError. The lock is held for a few
 * stores and never across a call into Python (libc realloc, not PyMem: the lock must not
 * be held where a free-threaded Python could stop the world). */
static int inbox_push(GLLoop *self, PyObject *h) {
    pthread_mutex_lock(&self->inbox_mu);
    if (self->inbox_head + self->inbox_len == self->inbox_cap) {
        if (self->inbox_head > 0 && self->inbox_head >= self->inbox_cap / 2) {
            memmove(self->inbox, self->inbox + self->inbox_head, (size_t)self->inbox_len * sizeof(PyObject *));
            self->inbox_head = 0;
        } else {
            Py_ssize_t cap = self->inbox_cap ? 2 * self->inbox_cap : 64;
            PyObject **p = realloc(self->inbox, (size_t)cap * sizeof(PyObject *));
            if (p == NULL) {
                pthread_mutex_unlock(&self->inbox_mu);
                PyErr_NoMemory();
                return -1;
            }
            self->inbox = p;
            self->inbox_cap = cap;
        }
    }
    self->inbox[self->inbox_head + self->inbox_len++] = h;
    GL_STORE(self->inbox_n, self->inbox_len);
    int was_empty = self->inbox_len == 1;
    pthread_mutex_unlock(&self->inbox_mu);
    return was_empty;
}

/* The owner takes up to max handles from the front of the inbox into self->taken (*out):
 * their references pass to the caller. Returns the count, or -1 with MemoryError. */
Py_ssize_t gl_inbox_take(GLLoop *self, Py_ssize_t max, PyObject ***out) {
    Py_ssize_t want = GL_LOAD(self->inbox_n);
    if (want > max) want = max;
    if (want > self->taken_cap) {  /* grown outside the lock; only the owner uses it */
        Py_ssize_t cap = self->taken_cap ? self->taken_cap : 64;
        while (cap < want) cap *= 2;
        PyObject **p = PyMem_Realloc(self->taken, (size_t)cap * sizeof(PyObject *));
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->taken = p;
        self->taken_cap = cap;
    }
    pthread_mutex_lock(&self->inbox_mu);
    Py_ssize_t k = self->inbox_len < want ? self->inbox_len : want;
    memcpy(self->taken, self->inbox + self->inbox_head, (size_t)k * sizeof(PyObject *));
    self->inbox_head += k;
    self->inbox_len -= k;
    if (self->inbox_len == 0) self->inbox_head = 0;
    GL_STORE(self->inbox_n, self->inbox_len);
    pthread_mutex_unlock(&self->inbox_mu);
    *out = self->taken;
    return k;
}

void gl_set_owner(GLLoop *self, unsigned long owner) { GL_STORE(self->owner, owner); }
void gl_set_closed(GLLoop *self) { GL_STORE(self->closed, 1); }

/* Queues h (taking over one reference) to run soon, from any thread: staged when the caller
 * is the thread running the loop (no lock, no wake-up needed), else into the inbox, waking
 * the loop when the inbox was empty (one wake-up per batch: the loop takes the whole batch). */
static int queue_soon(GLLoop *self, PyObject *h) {
    if (GL_LOAD(self->owner) == gl_thread_ident()) return stage(self, h);
    int rc = inbox_push(self, h);
    if (rc == 1 && glWake(self) < 0) {
        /* h is queued: the exception (the poller is closed) is the caller's only news */
        return -2;
    }
    return rc < 0 ? -1 : 0;
}

static int check_open(GLLoop *self) {
    if (GL_LOAD(self->closed)) {
        PyErr_SetString(PyExc_RuntimeError, "Event loop is closed");
        return -1;
    }
    return 0;
}

static PyObject *schedule(GLLoop *self, const char *fname, PyTypeObject *tp, double when, int mode,
                          PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, Py_ssize_t skip) {
    GUARD_NULL();
    PyObject *ctx;
    if (nargs < skip + 1) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument 'callback'", fname);
        return NULL;
    }
    if (parse_context(fname, args, nargs, kwnames, &ctx) < 0) return NULL;
    PyObject *cb = args[skip];
    if (gl_check_callback(cb, fname) < 0) return NULL;
    if (self->id < 0) {
        PyErr_SetString(PyExc_RuntimeError, "goloop: the loop was not initialized");
        return NULL;
    }
    if (check_open(self) < 0) return NULL;
    int debug = GL_LOAD(self->debug);
    /* Debug mode: asyncio's _check_thread for call_soon, call_later and call_at. */
    if (debug && mode != MODE_THREADSAFE && glCheckThread(self) < 0) return NULL;
    /* A timer goes straight to Go's heap from the thread running the loop, or while no
     * thread runs it; from another thread (asyncio does not allow it, but a free-threaded
     * Python must not crash for it) it travels through the inbox. */
    int direct_timer = mode == MODE_TIMER &&
        (GL_LOAD(self->owner) == 0 || GL_LOAD(self->owner) == gl_thread_ident());
    PyObject *h = gl_handle_new(tp, (PyObject *)self, cb, args + skip + 1, nargs - skip - 1, ctx, when);
    if (h == NULL) return NULL;
    Py_INCREF(h); /* the reference the ready queue (or the heap) keeps on success */
    int rc = direct_timer ? glSchedule(self, h, MODE_TIMER) : queue_soon(self, h);
    if (rc == -1) {
        Py_DECREF(h);
        Py_DECREF(h);
        return NULL;
    }
    if (rc == -2) {
        Py_DECREF(h);
        return NULL;
    }
    return h;
}

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static PyObject *loop_call_soon(GLLoop *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    return schedule(self, "call_soon", GL_HandleType, 0, MODE_SOON, args, nargs, kwnames, 0);
}

static PyObject *loop_call_soon_threadsafe(GLLoop *self, PyObject *const *args, Py_ssize_t nargs,
                                           PyObject *kwnames) {
    return schedule(self, "call_soon_threadsafe", GL_HandleType, 0, MODE_THREADSAFE, args, nargs, kwnames, 0);
}

static int to_seconds(PyObject *o, const char *what, double *out) {
    if (o == Py_None) {
        PyErr_Format(PyExc_TypeError, "%s must not be None", what);
        return -1;
    }
    double d = PyFloat_AsDouble(o);
    if (d == -1.0 && PyErr_Occurred()) return -1;
    if (d != d) {
        PyErr_Format(PyExc_ValueError, "%s must not be NaN", what);
        return -1;
    }
    *out = d;
    return 0;
}

static PyObject *loop_call_later(GLLoop *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    double d;
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "call_later() missing required argument 'delay'");
        return NULL;
    }
    if (to_seconds(args[0], "delay", &d) < 0) return NULL;
    return schedule(self, "call_later", GL_TimerHandleType, mono_now() + d, MODE_TIMER, args, nargs, kwnames, 1);
}

static PyObject *loop_call_at(GLLoop *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    double when;
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "call_at() missing required argument 'when'");
        return NULL;
    }
    if (to_seconds(args[0], "when", &when) < 0) return NULL;
    return schedule(self, "call_at", GL_TimerHandleType, when, MODE_TIMER, args, nargs, kwnames, 1);
}

static PyObject *tasks_module, *str_Task, *task_kwnames, *str_create_task_py;

/* create_task(coro, *, name=None, context=None): asyncio's BaseEventLoop.create_task, with
 * the common case (no task factory, not debug) done here: Task(coro, loop=self, name=name,
 * context=context). Anything else goes to the Python implementation. */
static PyObject *loop_create_task(GLLoop *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *name = Py_None, *context = Py_None;
    int fast = nargs == 1 && !self->debug && (self->task_factory == NULL || self->task_factory == Py_None);
    if (fast && kwnames != NULL) {
        Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t i = 0; i < nk && fast; i++) {
            PyObject *k = PyTuple_GET_ITEM(kwnames, i);
            if (PyUnicode_CompareWithASCIIString(k, "name") == 0) name = args[nargs + i];
            else if (PyUnicode_CompareWithASCIIString(k, "context") == 0) context = args[nargs + i];
            else fast = 0;
        }
    }
    if (!fast) {
        PyObject *meth = PyObject_GetAttr((PyObject *)self, str_create_task_py);
        if (meth == NULL) return NULL;
        PyObject *r = PyObject_Vectorcall(meth, args, nargs, kwnames);
        Py_DECREF(meth);
        return r;
    }
    if (self->closed) {
        PyErr_SetString(PyExc_RuntimeError, "Event loop is closed");
        return NULL;
    }
    PyObject *task_type = PyObject_GetAttr(tasks_module, str_Task);
    if (task_type == NULL) return NULL;
    PyObject *targs[4] = {args[0], (PyObject *)self, name, context};
    PyObject *task = PyObject_Vectorcall(task_type, targs, 1, task_kwnames);
    Py_DECREF(task_type);
    return task;
}

static PyObject *futures_module, *str_Future, *loop_kwnames;

/* create_future(): asyncio's `futures.Future(loop=self)`, without a Python frame (streams
 * and sock_* create one per wait). */
static PyObject *loop_create_future(GLLoop *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *fut_type = PyObject_GetAttr(futures_module, str_Future);
    if (fut_type == NULL) return NULL;
    PyObject *args[1] = {(PyObject *)self};
    PyObject *fut = PyObject_Vectorcall(fut_type, args, 0, loop_kwnames);
    Py_DECREF(fut_type);
    return fut;
}

static PyObject *loop_time(GLLoop *self, PyObject *Py_UNUSED(ignored)) {
    return PyFloat_FromDouble(mono_now());
}

static PyObject *loop_get_debug(GLLoop *self, PyObject *Py_UNUSED(ignored)) {
    return PyBool_FromLong(self->debug);
}

static PyObject *loop_stop(GLLoop *self, PyObject *Py_UNUSED(ignored)) {
    self->stopping = 1;
    Py_RETURN_NONE;
}

static PyObject *loop_run_core(GLLoop *self, PyObject *Py_UNUSED(ignored)) {
    GUARD_NULL();
    return glRunCore(self);
}

static PyObject *loop_close_core(GLLoop *self, PyObject *Py_UNUSED(ignored)) {
    GUARD_NULL();
    return glCloseCore(self);
}

static PyObject *add_io(GLLoop *self, const char *fname, int writer, PyObject *const *args, Py_ssize_t nargs) {
    GUARD_NULL();
    if (nargs < 2) {
        PyErr_Format(PyExc_TypeError, "%s() takes at least 2 arguments (fd, callback)", fname);
        return NULL;
    }
    int fd = PyObject_AsFileDescriptor(args[0]);
    if (fd < 0) return NULL;
    if (gl_check_callback(args[1], fname) < 0) return NULL;
    PyObject *h = gl_handle_new(GL_HandleType, (PyObject *)self, args[1], args + 2, nargs - 2, NULL, 0);
    if (h == NULL) return NULL;
    Py_INCREF(h);
    if (glAddIO(self, fd, h, writer) < 0) {
        Py_DECREF(h);
        Py_DECREF(h);
        return NULL;
    }
    return h;
}

static PyObject *loop_add_reader(GLLoop *self, PyObject *const *args, Py_ssize_t nargs) {
    return add_io(self, "add_reader", 0, args, nargs);
}

static PyObject *loop_add_writer(GLLoop *self, PyObject *const *args, Py_ssize_t nargs) {
    return add_io(self, "add_writer", 1, args, nargs);
}

static PyObject *remove_io(GLLoop *self, PyObject *fdobj, int writer) {
    GUARD_NULL();
    int fd = PyObject_AsFileDescriptor(fdobj);
    if (fd < 0) return NULL;
    return glRemoveIO(self, fd, writer);
}

static PyObject *loop_remove_reader(GLLoop *self, PyObject *fd) { return remove_io(self, fd, 0); }
static PyObject *loop_remove_writer(GLLoop *self, PyObject *fd) { return remove_io(self, fd, 1); }

static PyObject *set_result_unless_cancelled;

/* _wait_fd(fd, fut, writer): one-shot readiness wait for sock_recv() and friends: when fd is
 * ready, fut's result is set (unless it was cancelled) and the registration ends by itself;
 * asyncio's way costs a Handle, a functools.partial, a done callback and two epoll_ctl calls. */
static PyObject *loop_wait_fd(GLLoop *self, PyObject *const *args, Py_ssize_t nargs) {
    GUARD_NULL();
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_wait_fd(fd, fut, writer)");
        return NULL;
    }
    int fd = PyObject_AsFileDescriptor(args[0]);
    if (fd < 0) return NULL;
    int writer = PyObject_IsTrue(args[2]);
    if (writer < 0) return NULL;
    PyObject *cbargs[2] = {args[1], Py_None};
    PyObject *h = gl_handle_new(GL_HandleType, (PyObject *)self, set_result_unless_cancelled, cbargs, 2, NULL, 0);
    if (h == NULL) return NULL;
    Py_INCREF(h); /* the reference Go keeps on success; the caller gets the other */
    int rc = glWaitIO(self, fd, h, writer);
    if (rc == 0) return h;
    Py_DECREF(h);
    Py_DECREF(h);
    if (rc == -2) /* a transport owns fd: asyncio's check raises the error asyncio raises */
        return PyObject_CallMethod((PyObject *)self, "_ensure_fd_no_transport", "i", fd);
    return NULL;
}

static PyObject *loop_fd_key(GLLoop *self, PyObject *fdobj) {
    GUARD_NULL();
    int fd = PyObject_AsFileDescriptor(fdobj);
    if (fd < 0) return NULL;
    return glFdKey(self, fd);
}

static PyObject *loop_add_callback(GLLoop *self, PyObject *handle) {
    GUARD_NULL();
    if (self->id < 0 || check_open(self) < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "goloop: the loop was not initialized");
        return NULL;
    }
    Py_INCREF(handle);
    int rc = queue_soon(self, handle);
    if (rc == -1) Py_DECREF(handle);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *loop_stats(GLLoop *self, PyObject *Py_UNUSED(ignored)) {
    GUARD_NULL();
    return glStats(self);
}

static int loop_init(GLLoop *self, PyObject *args, PyObject *kwds) {
    GUARD_INT();
    if (self->id >= 0) return 0; /* already initialized */
    return glLoopInit(self);
}

static PyObject *loop_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    GLLoop *self = (GLLoop *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->id = -1;
    pthread_mutex_init(&self->inbox_mu, NULL);  /* cannot fail with default attributes */
    Py_INCREF(Py_None);
    self->thread_id = Py_None;
    self->slow_callback_duration = 0.1;
    struct timespec res;
    clock_getres(CLOCK_MONOTONIC, &res);
    self->clock_resolution = (double)res.tv_sec + (double)res.tv_nsec * 1e-9;
    return (PyObject *)self;
}

static void loop_dealloc(GLLoop *self) {
    PyObject_GC_UnTrack(self);
    if (self->id >= 0 && !gl_forked) glLoopFree(self);  /* drains the staged handles */
    PyMem_Free(self->staged);
    self->staged = NULL;
    /* what other threads queued after the loop's Go side let go (or never had it) */
    for (Py_ssize_t i = 0; i < self->inbox_len; i++) Py_DECREF(self->inbox[self->inbox_head + i]);
    free(self->inbox);
    self->inbox = NULL;
    self->inbox_len = self->inbox_n = 0;
    PyMem_Free(self->taken);
    self->taken = NULL;
    pthread_mutex_destroy(&self->inbox_mu);
    Py_CLEAR(self->thread_id);
    Py_CLEAR(self->task_factory);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The Go side's references (queued handles, reader/writer handles, attached transports)
 * are reported to the garbage collector, so an unclosed loop that nothing refers to is
 * collected (and warned about by asyncio's __del__), as asyncio's own loop is. */
static int loop_traverse(GLLoop *self, visitproc visit, void *arg) {
    Py_VISIT(self->thread_id);
    Py_VISIT(self->task_factory);
    for (Py_ssize_t i = 0; i < self->nstaged; i++) Py_VISIT(self->staged[i]);
    /* No lock: the collector runs with the world stopped (free-threaded) or holding the GIL,
     * and no thread stops inside inbox_push's critical section. */
    for (Py_ssize_t i = 0; i < self->inbox_len; i++) Py_VISIT(self->inbox[self->inbox_head + i]);
    if (self->id >= 0 && !gl_forked) return glLoopTraverse(self, visit, arg);
    return 0;
}

static int loop_clear(GLLoop *self) {
    Py_CLEAR(self->task_factory);
    if (self->id >= 0 && !gl_forked) glLoopRelease(self);
    return 0;
}

static PyObject *loop_get_debug_attr(GLLoop *self, void *closure) { return PyBool_FromLong(self->debug); }
static int loop_set_debug_attr(GLLoop *self, PyObject *v, void *closure) {
    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete _debug");
        return -1;
    }
    int b = PyObject_IsTrue(v);
    if (b < 0) return -1;
    GL_STORE(self->debug, (char)b);
    return 0;
}

/* _closed: read by call_soon_threadsafe in any thread, hence atomic. */
static PyObject *loop_get_closed_attr(GLLoop *self, void *closure) { return PyBool_FromLong(GL_LOAD(self->closed)); }
static int loop_set_closed_attr(GLLoop *self, PyObject *v, void *closure) {
    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete _closed");
        return -1;
    }
    if (!PyBool_Check(v)) {  /* what the T_BOOL member it replaces accepted */
        PyErr_SetString(PyExc_TypeError, "attribute value type must be bool");
        return -1;
    }
    GL_STORE(self->closed, (char)(v == Py_True));
    return 0;
}

/* _thread_id is set by the loop's thread and may be read by others (asyncio's debug-mode
 * _check_thread): on a free-threaded Python the object's critical section keeps a reader
 * from taking a reference to an int the writer is dropping. */
static PyObject *loop_get_thread_id(GLLoop *self, void *closure) {
    PyObject *r;
    Py_BEGIN_CRITICAL_SECTION(self);
    r = Py_NewRef(self->thread_id);
    Py_END_CRITICAL_SECTION();
    return r;
}
static int loop_set_thread_id(GLLoop *self, PyObject *v, void *closure) {
    if (v == NULL) v = Py_None;
    PyObject *old;
    Py_BEGIN_CRITICAL_SECTION(self);
    old = self->thread_id;
    self->thread_id = Py_NewRef(v);
    Py_END_CRITICAL_SECTION();
    Py_DECREF(old);
    return 0;
}

static PyGetSetDef loop_getset[] = {
    {"_debug", (getter)loop_get_debug_attr, (setter)loop_set_debug_attr, NULL, NULL},
    {"_closed", (getter)loop_get_closed_attr, (setter)loop_set_closed_attr, NULL, NULL},
    {"_thread_id", (getter)loop_get_thread_id, (setter)loop_set_thread_id, NULL, NULL},
    {NULL}
};

static PyMemberDef loop_members[] = {
    {"_stopping", T_BOOL, offsetof(GLLoop, stopping), 0, NULL},
    {"_timer_cancelled_count", T_PYSSIZET, offsetof(GLLoop, timer_cancelled_count), 0, NULL},
    {"slow_callback_duration", T_DOUBLE, offsetof(GLLoop, slow_callback_duration), 0, NULL},
    {"_clock_resolution", T_DOUBLE, offsetof(GLLoop, clock_resolution), 0, NULL},
    {"_task_factory", T_OBJECT, offsetof(GLLoop, task_factory), 0, NULL},
    {NULL}
};

static PyMethodDef loop_methods[] = {
    {"call_soon", (PyCFunction)(void (*)(void))loop_call_soon, METH_FASTCALL | METH_KEYWORDS,
     "call_soon(callback, *args, context=None): run callback(*args) on the next iteration."},
    {"call_soon_threadsafe", (PyCFunction)(void (*)(void))loop_call_soon_threadsafe, METH_FASTCALL | METH_KEYWORDS,
     "Like call_soon(), but safe to call from any thread; wakes the loop."},
    {"call_later", (PyCFunction)(void (*)(void))loop_call_later, METH_FASTCALL | METH_KEYWORDS,
     "call_later(delay, callback, *args, context=None) -> TimerHandle"},
    {"call_at", (PyCFunction)(void (*)(void))loop_call_at, METH_FASTCALL | METH_KEYWORDS,
     "call_at(when, callback, *args, context=None) -> TimerHandle"},
    {"time", (PyCFunction)loop_time, METH_NOARGS, "The loop's clock (time.monotonic())."},
    {"create_future", (PyCFunction)loop_create_future, METH_NOARGS,
     "create_future() -> asyncio.Future attached to this loop"},
    {"create_task", (PyCFunction)(void (*)(void))loop_create_task, METH_FASTCALL | METH_KEYWORDS,
     "create_task(coro, *, name=None, context=None) -> asyncio.Task"},
    {"get_debug", (PyCFunction)loop_get_debug, METH_NOARGS, NULL},
    {"stop", (PyCFunction)loop_stop, METH_NOARGS, "Stop the loop after the current iteration."},
    {"_run_core", (PyCFunction)loop_run_core, METH_NOARGS, NULL},
    {"_close_core", (PyCFunction)loop_close_core, METH_NOARGS, NULL},
    {"_add_reader", (PyCFunction)(void (*)(void))loop_add_reader, METH_FASTCALL, NULL},
    {"_add_writer", (PyCFunction)(void (*)(void))loop_add_writer, METH_FASTCALL, NULL},
    {"_remove_reader", (PyCFunction)loop_remove_reader, METH_O, NULL},
    {"_remove_writer", (PyCFunction)loop_remove_writer, METH_O, NULL},
    {"_fd_key", (PyCFunction)loop_fd_key, METH_O, NULL},
    {"_wait_fd", (PyCFunction)(void (*)(void))loop_wait_fd, METH_FASTCALL, NULL},
    {"_add_callback", (PyCFunction)loop_add_callback, METH_O, NULL},
    {"_stats", (PyCFunction)loop_stats, METH_NOARGS, NULL},
    {NULL}
};

static PyTypeObject LoopCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop._goloop.LoopCore",
    .tp_basicsize = sizeof(GLLoop),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The Go core of goloop.Loop: scheduling, timers and polling.",
    .tp_traverse = (traverseproc)loop_traverse,
    .tp_clear = (inquiry)loop_clear,
    .tp_new = loop_new,
    .tp_init = (initproc)loop_init,
    .tp_dealloc = (destructor)loop_dealloc,
    .tp_methods = loop_methods,
    .tp_members = loop_members,
    .tp_getset = loop_getset,
};

/* ---------- module ---------- */

static PyObject *mod_mark_forked(PyObject *m, PyObject *Py_UNUSED(ignored)) {
    gl_forked = 1;
    Py_RETURN_NONE;
}

static PyObject *mod_forked(PyObject *m, PyObject *Py_UNUSED(ignored)) {
    return PyBool_FromLong(gl_forked);
}

/* sock_recv's first attempt without an exception: asyncio's sock_recv calls sock.recv() and
 * catches BlockingIOError when nothing is there, and raising that costs more than the
 * receive (strerror, locale decoding, the exception). For a non-blocking socket.socket
 * (checked by the caller) one recv(2) says the same: the data, or None when it would block.
 * The GIL stays held: MSG_DONTWAIT keeps the call from blocking even if the descriptor was
 * made blocking behind the socket object's back. Errors raise OSError as socket.recv does;
 * arguments whose errors are socket's own to raise give NotImplemented (the caller then
 * calls the socket's method). */
#define TRY_RECV_BUF (256 * 1024)

/* Each thread that reads gets its own buffer (loops run in several threads at once on a
 * free-threaded Python), made on its first read and freed when the thread ends. */
typedef struct {
    Py_ssize_t last_got;  /* the size of this thread's last read (see mod_try_recv) */
    char buf[TRY_RECV_BUF];
} recv_state;
static pthread_key_t recv_key;

static void recv_state_free(void *p) { free(p); }

static recv_state *get_recv_state(void) {
    recv_state *st = pthread_getspecific(recv_key);
    if (st == NULL) {
        st = malloc(sizeof(recv_state));
        if (st == NULL || pthread_setspecific(recv_key, st) != 0) {
            free(st);
            PyErr_NoMemory();
            return NULL;
        }
        st->last_got = 0;
    }
    return st;
}

/* One recv(2) with MSG_DONTWAIT, retried on EINTR: the count, -2 when it would block, or
 * -1 with an exception set. */
static Py_ssize_t recv_nowait(int fd, char *buf, Py_ssize_t n) {
    for (;;) {
        ssize_t got = recv(fd, buf, (size_t)n, MSG_DONTWAIT);
        if (got >= 0) return got;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return -2;
        if (errno != EINTR) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        if (PyErr_CheckSignals() < 0) return -1;
    }
}

/* The descriptor of a (fd, arg) call; -1 when it is not one a recv can use. */
static int try_recv_fd(PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyLong_CheckExact(args[0])) return -1;
    long v = PyLong_AsLong(args[0]);
    if (v < 0 || v > INT_MAX) {
        PyErr_Clear();
        return -1;
    }
    return (int)v;
}

static PyObject *mod_try_recv(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    int fd = try_recv_fd(args, nargs);
    Py_ssize_t n = fd >= 0 && PyLong_CheckExact(args[1]) ? PyLong_AsSsize_t(args[1]) : -1;
    if (n <= 0) {  /* socket.recv returns b'' for 0 and raises its own errors for the rest */
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    /* Small reads land in a static buffer and are copied into bytes of their exact size: a
     * large n (asyncio code often asks for 64 KiB or more) then costs no large allocation,
     * which glibc would serve with mmap and page faults from 128 KiB on, nor a shrink.
     * Large reads go straight into the bytes: copying them again cost 7.5 % of a sock_*
     * echo server's CPU at 100 KiB a message. Which reads are large is judged by the last
     * one (the same code tends to read the same sizes); n must keep the bytes under glibc's
     * mmap threshold for the straight path (gl.h). */
    recv_state *st = get_recv_state();
    if (st == NULL) return NULL;
    if (n <= TRY_RECV_BUF && (st->last_got < GL_DIRECT_MIN || n > GL_DIRECT_MAX)) {
        Py_ssize_t got = recv_nowait(fd, st->buf, n);
        if (got == -2) Py_RETURN_NONE;
        if (got < 0) return NULL;
        st->last_got = got;
        return PyBytes_FromStringAndSize(st->buf, got);
    }
    PyObject *big = PyBytes_FromStringAndSize(NULL, n);
    if (big == NULL) return NULL;
    Py_ssize_t got = recv_nowait(fd, PyBytes_AS_STRING(big), n);
    if (got < 0) {
        Py_DECREF(big);
        if (got == -2) Py_RETURN_NONE;
        return NULL;
    }
    st->last_got = got;
    if (got != n && _PyBytes_Resize(&big, got) < 0) return NULL;
    return big;
}

static PyObject *mod_try_recv_into(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    int fd = try_recv_fd(args, nargs);
    Py_buffer view;
    if (fd < 0 || PyObject_GetBuffer(args[1], &view, PyBUF_WRITABLE) < 0) {
        PyErr_Clear();  /* not a writable buffer: socket.recv_into raises its own error */
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (view.len == 0) {  /* socket.recv_into returns 0 at once here */
        PyBuffer_Release(&view);
        Py_RETURN_NOTIMPLEMENTED;
    }
    Py_ssize_t got = recv_nowait(fd, view.buf, view.len);
    PyBuffer_Release(&view);
    if (got == -2) Py_RETURN_NONE;
    return got < 0 ? NULL : PyLong_FromSsize_t(got);
}

/* asyncio's accept loop calls sock._accept() until it raises BlockingIOError, then sets
 * the new socket non-blocking (an ioctl). Raising that exception (strerror, its decoding)
 * cost more than the accept itself, once per batch; with a connection per wake-up, once per
 * connection. _accept_inet(fd) makes one accept4(2) with SOCK_NONBLOCK | SOCK_CLOEXEC on an
 * AF_INET or AF_INET6 listening socket: (new fd, peer address as the socket module gives
 * it), None when no connection is waiting, or OSError as sock._accept() raises it. */
static PyObject *mod_accept_inet(PyObject *m, PyObject *arg) {
    long lfd = PyLong_AsLong(arg);
    if (lfd == -1 && PyErr_Occurred()) return NULL;
    if (lfd < 0 || lfd > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "negative file descriptor");
        return NULL;
    }
    struct sockaddr_storage ss;
    socklen_t len;
    int fd;
    for (;;) {
        len = sizeof(ss);
        memset(&ss, 0, sizeof(ss));
        fd = accept4((int)lfd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) break;
        if (errno == EAGAIN || errno == EWOULDBLOCK) Py_RETURN_NONE;
        if (errno != EINTR) return PyErr_SetFromErrno(PyExc_OSError);
        if (PyErr_CheckSignals() < 0) return NULL;
    }
    char host[INET6_ADDRSTRLEN];
    PyObject *addr = NULL;
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        if (inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host)) != NULL)
            addr = Py_BuildValue("(si)", host, ntohs(a->sin_port));
        else
            PyErr_SetFromErrno(PyExc_OSError);
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        if (inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host)) != NULL)
            addr = Py_BuildValue("(siII)", host, ntohs(a->sin6_port), ntohl(a->sin6_flowinfo),
                                 a->sin6_scope_id);
        else
            PyErr_SetFromErrno(PyExc_OSError);
    } else {
        PyErr_Format(PyExc_ValueError, "_accept_inet: not an AF_INET or AF_INET6 socket (family %d)",
                     (int)ss.ss_family);
    }
    if (addr == NULL) {
        close(fd);
        return NULL;
    }
    PyObject *r = Py_BuildValue("(iN)", fd, addr);
    if (r == NULL) close(fd);
    return r;
}

static PyMethodDef module_methods[] = {
    {"_mark_forked", mod_mark_forked, METH_NOARGS, "Called in a forked child: goloop refuses to run there."},
    {"_accept_inet", mod_accept_inet, METH_O,
     "_accept_inet(fd): one accept4(2) on a non-blocking AF_INET/AF_INET6 listening socket: "
     "(new non-blocking fd, peer address), None if no connection waits, OSError as "
     "socket.accept() raises it."},
    {"_try_recv", (PyCFunction)(void (*)(void))mod_try_recv, METH_FASTCALL,
     "_try_recv(fd, n): one recv(2) on a non-blocking socket: bytes, None if it would block, "
     "NotImplemented for what socket.recv must handle (n not a positive int)."},
    {"_try_recv_into", (PyCFunction)(void (*)(void))mod_try_recv_into, METH_FASTCALL,
     "_try_recv_into(fd, buffer): one recv(2) into buffer: the count, None if it would block, "
     "NotImplemented for what socket.recv_into must handle (not a writable buffer, empty)."},
    {"_forked", mod_forked, METH_NOARGS, NULL},
    {NULL}
};

static struct PyModuleDef goloop_module = {
    PyModuleDef_HEAD_INIT, "_goloop", "goloop's engine, written in Go.", -1, module_methods,
};

/* Single-phase init, declared free of the GIL: multi-phase init (a Py_mod_gil slot) would
 * promise a module that can be created more than once, per interpreter, while goloop's types
 * are static and its Go runtime is one per process. Every piece of shared state is safe
 * without the GIL: the C statics are set here, once; the Go tables (loops, transports,
 * parsers) lock; a loop's inbox takes other threads' callbacks under its mutex; the rest
 * belongs to the thread running the loop. */
PyMODINIT_FUNC PyInit__goloop(void) {
    static int key_made;
    if (!key_made) {  /* under the import lock: PyInit runs once per process */
        if (pthread_key_create(&recv_key, recv_state_free) != 0) return PyErr_NoMemory();
        key_made = 1;
    }
    HandleType.tp_new = NULL;
    TimerHandleType.tp_base = &HandleType;
    if (PyType_Ready(&HandleType) < 0 || PyType_Ready(&TimerHandleType) < 0 || PyType_Ready(&LoopCoreType) < 0)
        return NULL;
    GL_HandleType = &HandleType;
    GL_TimerHandleType = &TimerHandleType;
    PyObject *m = PyModule_Create(&goloop_module);
    if (m == NULL) return NULL;
#ifdef Py_GIL_DISABLED
    if (PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED) < 0) {
        Py_DECREF(m);
        return NULL;
    }
#endif
    Py_INCREF(&HandleType);
    Py_INCREF(&TimerHandleType);
    Py_INCREF(&LoopCoreType);
    if (PyModule_AddObject(m, "Handle", (PyObject *)&HandleType) < 0 ||
        PyModule_AddObject(m, "TimerHandle", (PyObject *)&TimerHandleType) < 0 ||
        PyModule_AddObject(m, "LoopCore", (PyObject *)&LoopCoreType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (gl_init_callback_check() < 0) goto fail;
    PyObject *futmod = PyImport_ImportModule("asyncio.futures");
    if (futmod == NULL) goto fail;
    set_result_unless_cancelled = PyObject_GetAttrString(futmod, "_set_result_unless_cancelled");
    Py_DECREF(futmod);
    if (set_result_unless_cancelled == NULL) goto fail;
    futures_module = PyImport_ImportModule("asyncio.futures");
    str_Future = PyUnicode_InternFromString("Future");
    loop_kwnames = Py_BuildValue("(s)", "loop");
    if (!futures_module || !str_Future || !loop_kwnames) goto fail;
    tasks_module = PyImport_ImportModule("asyncio.tasks");
    str_Task = PyUnicode_InternFromString("Task");
    str_create_task_py = PyUnicode_InternFromString("_create_task_py");
    task_kwnames = Py_BuildValue("(sss)", "loop", "name", "context");
    if (!tasks_module || !str_Task || !str_create_task_py || !task_kwnames) goto fail;
    if (gl_init_transport_type(m) < 0) goto fail;
    if (gl_init_http(m) < 0) goto fail;
    if (gl_init_ssl(m) < 0) goto fail;
    /* Fork guard: a child forked after the Go runtime started must not call into Go. */
    PyObject *os = PyImport_ImportModule("os");
    if (os == NULL) goto fail;
    PyObject *hook = PyObject_GetAttrString(m, "_mark_forked");
    PyObject *reg = PyObject_GetAttrString(os, "register_at_fork");
    Py_DECREF(os);
    if (hook == NULL || reg == NULL) {
        Py_XDECREF(hook);
        Py_XDECREF(reg);
        goto fail;
    }
    PyObject *kw = Py_BuildValue("{s:O}", "after_in_child", hook);
    PyObject *empty = PyTuple_New(0);
    PyObject *r = (kw && empty) ? PyObject_Call(reg, empty, kw) : NULL;
    Py_XDECREF(kw);
    Py_XDECREF(empty);
    Py_DECREF(hook);
    Py_DECREF(reg);
    if (r == NULL) goto fail;
    Py_DECREF(r);
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
