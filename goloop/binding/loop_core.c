/* goloop._goloop.LoopCore, the C part of goloop.Loop: call_soon and friends (argument
 * handling, making the handle, queueing it), the queues Python-facing calls fill without a
 * call into Go (the ready queue the owner thread's call_soon appends to and the run phase
 * takes from, other threads' inbox), the
 * wrappers of the Go loop's exports (run, timers, readers/writers), asyncio's attributes as
 * C fields Go reads, and the blocking poll that releases the GIL. */
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <stdint.h>
#include <errno.h>
#include "gl.h"
#include "_cgo_export.h"

/* ---------- LoopCore ---------- */

static PyTypeObject LoopCoreType;

static PyObject *str_context;  /* "context", interned */

static int parse_context(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                         PyObject **ctx) {
    *ctx = NULL;
    if (kwnames == NULL) return 0;
    Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < nk; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i);
        /* Identity first (keyword names are interned as a rule, but not 3.11's C Task's:
         * asyncio's own "context" is a string of its own), then the seven ASCII bytes. */
        if (k != str_context && !(PyUnicode_Check(k) && PyUnicode_IS_COMPACT_ASCII(k) &&
                                  PyUnicode_GET_LENGTH(k) == 7 && memcmp(PyUnicode_DATA(k), "context", 7) == 0)) {
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



/* Doubles the ready ring (or makes its first 64 slots), keeping the handles' order.
 * Returns -1 with MemoryError. */
int gl_ready_grow(GLLoop *self) {
    Py_ssize_t cap = self->ready_cap ? 2 * self->ready_cap : 64;
    PyObject **p = PyMem_Malloc((size_t)cap * sizeof(PyObject *));
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < self->ready_len; i++)
        p[i] = self->ready[(self->ready_head + i) & (self->ready_cap - 1)];
    PyMem_Free(self->ready);
    self->ready = p;
    self->ready_head = 0;
    self->ready_cap = cap;
    return 0;
}

/* Queues h (taking over one reference) at the tail of the ready queue, from C. Only the
 * thread that runs the loop (its owner) stages: the ring has no lock. */
static int stage(GLLoop *self, PyObject *h) {
    if (self->ready_len == self->ready_cap && gl_ready_grow(self) < 0) return -1;
    self->ready[(self->ready_head + self->ready_len++) & (self->ready_cap - 1)] = h;
#ifndef Py_GIL_DISABLED
    /* Queued, a Handle leaves the collector's lists: a million queued handles (a fan-out)
     * would be walked by every collection. While queued it is the ring's, and the loop's
     * traverse reports what it refers to (loop_traverse); it is tracked again when it
     * leaves the ring with another owner (gl_handle_run, gl_handle_release). */
    if (Py_IS_TYPE(h, GL_HandleType) && PyObject_GC_IsTracked(h)) PyObject_GC_UnTrack(h);
#endif
    return 0;
}

Py_ssize_t gl_run_ready_u(uintptr_t self, Py_ssize_t ntodo) { return gl_run_ready((GLLoop *)self, ntodo); }

/* Queues timer h (taking over one reference) for Go's heap, from C (the owner thread, or
 * any while no thread runs the loop), and ends a fast run phase (gl_run_ready) before
 * the iteration in which h falls due. */
static int stage_timer(GLLoop *self, PyObject *h) {
    if (self->ntstaged == self->tstaged_cap) {
        Py_ssize_t cap = self->tstaged_cap ? 2 * self->tstaged_cap : 64;
        PyObject **p = PyMem_Realloc(self->tstaged, (size_t)cap * sizeof(PyObject *));
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->tstaged = p;
        self->tstaged_cap = cap;
    }
    self->tstaged[self->ntstaged++] = h;
    GLHandle *t = (GLHandle *)h;
    t->scheduled = 1;
    /* due in the iteration where when < now + clock_resolution (loop.go's runOnce) */
    double d = (t->when - self->clock_resolution) * 1e9;
    int64_t until = d <= 0 ? 0 : d >= 4e18 ? (int64_t)4e18 : (int64_t)d;
    if (until < self->run_until) self->run_until = until;
    return 0;
}

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The run phase (loop.go, runOnce): runs the ntodo handles at the head of the ready queue,
 * in order, each in its context, releasing the queue's references. Then, while
 * self->run_until allows it (see gl.h), it runs further iterations here, without a return
 * to Go: each takes the handles ready at its start (those the previous one queued), as
 * asyncio's _run_once does, and one begins only if the loop is not stopping, not in debug
 * mode, no other thread queued handles (the inbox) and run_until is still ahead. What Go
 * does between iterations has nothing to do then: no poll is due (nothing blocks: handles
 * are ready), no timer is due, no transport has writes to flush. Returns 0; or, when a
 * callback switched debug mode on, the number of handles of its iteration left to run
 * (Go runs them, each through _run_handle_debug); or -1 with an exception that must stop
 * the loop (the handles not run stay queued, in order).
 *
 * The clock: a clock_gettime per iteration was 5-9 % of a `sleep(0)` (~50 ns on a VM's
 * TSC). So it is read every `stride` iterations, stride chosen from the iterations timed so
 * far so that they span about RUN_CLOCK_SLACK_NS (at most RUN_CLOCK_MAX of them): the run
 * ends at most about that much after run_until (a quarter of the 20 us poll interval;
 * asyncio's own timers are late by up to a millisecond) while iterations keep their pace. It is read at
 * the very next boundary whenever run_until was lowered meanwhile (a timer made by a
 * callback: one already due runs in the next iteration, as before), and every other
 * condition is checked at every boundary. */
#define RUN_CLOCK_SLACK_NS 5000
#define RUN_CLOCK_MAX 8

Py_ssize_t gl_run_ready(GLLoop *self, Py_ssize_t ntodo) {
    int64_t last = 0, until = self->run_until;  /* the last clock reading; run_until then */
    int stride = 1, n = 0;                      /* iterations per reading; since the last */
    for (;;) {
        for (; ntodo > 0; ntodo--) {
            if (self->debug) return ntodo; /* switched on by a callback: Go's debug path */
            PyObject *h = self->ready[self->ready_head];
            self->ready_head = (self->ready_head + 1) & (self->ready_cap - 1);
            self->ready_len--;
            if (gl_handle_run(h) < 0) return -1;
        }
        /* the end of an iteration: what write() staged in C leaves now (loop_transport.c); what
         * Go must see to sends Go (runOnce's flushDirty) */
        if (self->nwdirty > 0 && gl_flush_staged(self) > 0) return 0;
        if (self->ready_len == 0 || self->run_until == 0 || self->stopping || self->debug ||
            GL_LOAD(self->inbox_n) != 0)
            return 0;
        if (++n >= stride || self->run_until != until) {
            int64_t now = mono_ns();
            if (now >= self->run_until) return 0;
            if (last != 0) {
                int64_t per = (now - last) / n;  /* ns per iteration, lately */
                stride = per * RUN_CLOCK_MAX <= RUN_CLOCK_SLACK_NS ? RUN_CLOCK_MAX
                       : per >= RUN_CLOCK_SLACK_NS ? 1 : (int)(RUN_CLOCK_SLACK_NS / per);
            }
            last = now;
            until = self->run_until;
            n = 0;
        }
        ntodo = self->ready_len;
    }
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
    /* Sequentially consistent, not relaxed: this store and gl_wake's compare-and-swap of
     * wake_pending pair with the loop thread's reset of wake_pending (poller.drain, Go's
     * atomic Store) and its later read of inbox_n (inboxLen, Go's atomic Load), as in
     * Dekker's algorithm: either the CAS sees the reset and writes the eventfd, or the loop's
     * read sees this count and polls without blocking. With a relaxed store (and the mutex,
     * which the reader does not take) C11 allows both to miss. The hardware happened to
     * order it: x86-64's locked CAS drains the store buffer, and on arm64 the unlock's
     * release orders the store before the CAS's load-acquire; only SC is the language's
     * guarantee, and it keeps a compiler from sinking the store past the CAS. Costs a
     * store-release on arm64 (an xchg on x86-64), inside a lock already taken. */
    __atomic_store_n(&self->inbox_n, self->inbox_len, __ATOMIC_SEQ_CST);
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

/* The loop's eventfd, made before its Go side (which registers it with the poller). */
int gl_wake_init(GLLoop *self) {
    if (self->wake_fd >= 0) return 0;
    self->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->wake_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

/* Ends a poll in progress, or makes the next one return at once, from any thread: the
 * poller's protocol (poller.NewSharedWake). Raises RuntimeError once the loop is closed. */
int gl_wake(GLLoop *self) {
    int32_t seen = 0;
    if (!__atomic_compare_exchange_n(&self->wake_pending, &seen, 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
        if (seen != 2) return 0; /* a wake-up is written and not yet drained */
        PyErr_SetString(PyExc_RuntimeError, "Event loop is closed");
        return -1;
    }
    pthread_rwlock_rdlock(&self->wake_mu);
    int err = 0;
    if (self->wake_fd < 0) {
        err = -1; /* closed after our compare-and-swap */
    } else {
        uint64_t one = 1;
        while (write(self->wake_fd, &one, sizeof one) < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN) err = errno; /* EAGAIN: the counter is full, a wake-up is pending */
            break;
        }
    }
    pthread_rwlock_unlock(&self->wake_mu);
    if (err == -1) {
        PyErr_SetString(PyExc_RuntimeError, "Event loop is closed");
        return -1;
    }
    if (err != 0) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

/* Closes the eventfd once no writer is between its check and its write (loop close; the
 * poller has set wake_pending to 2, so no new writer gets that far). */
void gl_wake_close(GLLoop *self) {
    __atomic_store_n(&self->wake_pending, 2, __ATOMIC_SEQ_CST);
    pthread_rwlock_wrlock(&self->wake_mu);
    int fd = self->wake_fd;
    self->wake_fd = -1;
    pthread_rwlock_unlock(&self->wake_mu);
    if (fd >= 0) close(fd);
}

void gl_set_owner(GLLoop *self, unsigned long owner) { GL_STORE(self->owner, owner); }
void gl_set_closed(GLLoop *self) { GL_STORE(self->closed, 1); }

/* Queues h (taking over one reference) to run soon, from any thread: staged when the caller
 * is the thread running the loop (no lock, no wake-up needed), else into the inbox, waking
 * the loop when the inbox was empty (one wake-up per batch: the loop takes the whole batch). */
static int queue_soon(GLLoop *self, PyObject *h) {
    unsigned long owner = GL_LOAD(self->owner);
    if (owner == gl_thread_ident()) return stage(self, h);
#ifndef Py_GIL_DISABLED
    /* No thread runs the loop, and the GIL, which this thread holds, is held by whichever
     * thread sets the owner or touches the ring: stage too (in order with everything
     * queued so far; the loop takes it all when it starts). */
    if (owner == 0) return stage(self, h);
#endif
#ifndef Py_GIL_DISABLED
    if (PyObject_IS_GC(h) && !PyObject_GC_IsTracked(h)) PyObject_GC_Track(h);  /* (schedule's) */
#endif
    int rc = inbox_push(self, h);
    if (rc == 1 && gl_wake(self) < 0) {
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

/* The scheduling calls' check: the loop was initialized and is not closed. */
static int check_usable(GLLoop *self) {
    if (self->id < 0) {
        PyErr_SetString(PyExc_RuntimeError, "goloop: the loop was not initialized");
        return -1;
    }
    return check_open(self);
}

/* What a scheduling call returns once h went to the queue with rc (queue_soon's or
 * stage_timer's; the caller added the queue's reference before): h, or NULL with the error
 * (-1: not queued, the queue's reference is dropped too; -2: queued, the error is news). */
static PyObject *queued(PyObject *h, int rc) {
    if (rc == -1) Py_DECREF(h);
    if (rc < 0) {
        Py_DECREF(h);
        return NULL;
    }
    return h;
}

static PyObject *schedule(GLLoop *self, const char *fname, PyTypeObject *tp, double when, int mode,
                          PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, Py_ssize_t skip) {
    GL_FORK_GUARD(NULL);
    PyObject *ctx;
    if (nargs < skip + 1) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument 'callback'", fname);
        return NULL;
    }
    if (parse_context(fname, args, nargs, kwnames, &ctx) < 0) return NULL;
    PyObject *cb = args[skip];
    if (gl_check_callback(cb, fname) < 0) return NULL;
    if (check_usable(self) < 0) return NULL;
    int debug = GL_LOAD(self->debug);
    /* Debug mode: asyncio's _check_thread for call_soon, call_later and call_at. */
    if (debug && mode != GL_MODE_THREADSAFE && glCheckThread(self) < 0) return NULL;
    /* A timer goes straight to Go's heap from the thread running the loop, or while no
     * thread runs it; from another thread (asyncio does not allow it, but a free-threaded
     * Python must not crash for it) it travels through the inbox. */
    int direct_timer = mode == GL_MODE_TIMER &&
        (GL_LOAD(self->owner) == 0 || GL_LOAD(self->owner) == gl_thread_ident());
    /* (a Handle the ring takes is untracked there: not tracked at all on GIL builds) */
    int track = 1;
#ifndef Py_GIL_DISABLED
    track = mode == GL_MODE_TIMER || tp != GL_HandleType;
#endif
    PyObject *h = gl_handle_new(tp, (PyObject *)self, cb, args + skip + 1, nargs - skip - 1, ctx, when, track);
    if (h == NULL) return NULL;
    Py_INCREF(h); /* the reference the ready queue (or the heap) keeps: before it can run */
    return queued(h, direct_timer ? stage_timer(self, h) : queue_soon(self, h));
}

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static PyObject *loop_call_soon(GLLoop *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    return schedule(self, "call_soon", GL_HandleType, 0, GL_MODE_SOON, args, nargs, kwnames, 0);
}

#if PY_VERSION_HEX >= 0x030E0000
static PyObject *threadsafe_handle_type;  /* asyncio's events._ThreadSafeHandle (goloop._compat) */
static PyObject *str_source_traceback;

/* 3.14+: call_soon_threadsafe returns asyncio's own events._ThreadSafeHandle, a Handle with a
 * lock around _run, cancel and cancelled (a cancel() from another thread waits for the callback
 * while it runs). Go's ready queue runs it as any foreign handle (gl_handle_run: its _run()). */
static PyObject *call_soon_threadsafe_314(GLLoop *self, PyObject *const *args, Py_ssize_t nargs,
                                          PyObject *kwnames) {
    GL_FORK_GUARD(NULL);
    PyObject *ctx;
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "call_soon_threadsafe() missing required argument 'callback'");
        return NULL;
    }
    if (parse_context("call_soon_threadsafe", args, nargs, kwnames, &ctx) < 0) return NULL;
    if (gl_check_callback(args[0], "call_soon_threadsafe") < 0) return NULL;
    if (check_usable(self) < 0) return NULL;
    PyObject *cbargs = PyTuple_New(nargs - 1);
    if (cbargs == NULL) return NULL;
    for (Py_ssize_t i = 1; i < nargs; i++) PyTuple_SET_ITEM(cbargs, i - 1, Py_NewRef(args[i]));
    PyObject *hargs[4] = {args[0], cbargs, (PyObject *)self, ctx ? ctx : Py_None};
    PyObject *h = PyObject_Vectorcall(threadsafe_handle_type, hargs, 4, NULL);
    Py_DECREF(cbargs);
    if (h == NULL) return NULL;
    if (GL_LOAD(self->debug)) {
        /* asyncio drops the frames of its call_soon_threadsafe and of the handle's __init__;
         * called from C, only the latter is there */
        PyObject *tb = PyObject_GetAttr(h, str_source_traceback);
        if (tb == NULL || (PyList_Check(tb) && PyList_GET_SIZE(tb) > 0 &&
                           PyList_SetSlice(tb, PyList_GET_SIZE(tb) - 1, PyList_GET_SIZE(tb), NULL) < 0)) {
            Py_XDECREF(tb);
            Py_DECREF(h);
            return NULL;
        }
        Py_DECREF(tb);
    }
    Py_INCREF(h); /* the ready queue's reference: before it can run */
    return queued(h, queue_soon(self, h));
}
#endif

static PyObject *loop_call_soon_threadsafe(GLLoop *self, PyObject *const *args, Py_ssize_t nargs,
                                           PyObject *kwnames) {
#if PY_VERSION_HEX >= 0x030E0000
    return call_soon_threadsafe_314(self, args, nargs, kwnames);
#else
    return schedule(self, "call_soon_threadsafe", GL_HandleType, 0, GL_MODE_THREADSAFE, args, nargs, kwnames, 0);
#endif
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
    return schedule(self, "call_later", GL_TimerHandleType, mono_now() + d, GL_MODE_TIMER, args, nargs, kwnames, 1);
}

static PyObject *loop_call_at(GLLoop *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    double when;
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "call_at() missing required argument 'when'");
        return NULL;
    }
    if (to_seconds(args[0], "when", &when) < 0) return NULL;
    PyObject *h = schedule(self, "call_at", GL_TimerHandleType, when, GL_MODE_TIMER, args, nargs, kwnames, 1);
    if (h != NULL && !PyFloat_CheckExact(args[0])) /* asyncio's when() returns `when` as given */
        ((GLHandle *)h)->when_obj = Py_NewRef(args[0]);
    return h;
}

static PyObject *tasks_module, *str_Task, *task_kwnames, *str_create_task_py;
static PyObject *loop_kwnames;  /* ("loop",) */

/* Whether a Task or Future made now with no loop given finds this one as asyncio's running
 * loop, cheaply: 3.12+, on the thread running it (run_forever set it as the running loop
 * before the thread became the owner). A call with no keywords makes no dict and skips
 * their parsing (~300 instructions a Task). 3.11's running-loop lookup calls getpid(), a
 * system call, each time: there the loop is always given. */
static inline int finds_running_loop(GLLoop *self) {
#if PY_VERSION_HEX >= 0x030C0000
    return GL_LOAD(self->owner) == gl_thread_ident();
#else
    (void)self;
    return 0;
#endif
}

/* Task(args[0], **kwnames' args), asyncio's Task (the C one unless asyncio's was replaced). */
static PyObject *new_task(GLLoop *self, PyObject *const *args, PyObject *kwnames) {
    if (self->closed) {
        PyErr_SetString(PyExc_RuntimeError, "Event loop is closed");
        return NULL;
    }
    PyObject *task_type = PyObject_GetAttr(tasks_module, str_Task);
    if (task_type == NULL) return NULL;
    PyObject *task = PyObject_Vectorcall(task_type, args, 1, kwnames);
    Py_DECREF(task_type);
    return task;
}

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
    PyObject *targs[4] = {args[0], (PyObject *)self, name, context};
    /* Task(coro, loop=self) when name and context are None (their defaults): a type call
     * makes a dict of the keywords, and the Task's __init__ parses each one; Task(coro)
     * where it finds the loop for itself (finds_running_loop) */
    if (name != Py_None || context != Py_None) return new_task(self, targs, task_kwnames);
    return new_task(self, targs, finds_running_loop(self) ? NULL : loop_kwnames);
}

static PyObject *str_create_task, *core_create_task;  /* "create_task", LoopCore's */

#ifndef Py_GIL_DISABLED
/* The last type own_create_task found keeping LoopCore's create_task, and its version tag
 * then: a tag is given to one type only and dropped when the type (or a base) changes, so
 * the same valid tag means the same answer without the lookup (~200 instructions a request). */
static PyTypeObject *own_type;
static unsigned int own_tag;
#endif

/* type(self).create_task is LoopCore's (a subclass did not replace it). */
static int own_create_task(GLLoop *self) {
    PyTypeObject *t = Py_TYPE(self);
#ifndef Py_GIL_DISABLED
    if (t == own_type && own_tag != 0 && t->tp_version_tag == own_tag && PyType_HasFeature(t, Py_TPFLAGS_VALID_VERSION_TAG))
        return 1;
#endif
    PyObject *m = PyObject_GetAttr((PyObject *)t, str_create_task);
    if (m == NULL) {
        PyErr_Clear();
        return 0;
    }
    /* LoopCore's descriptor, or a copy of it made for a subclass by _own_methods (module.c):
     * the same C function */
    int own = m == core_create_task ||
              (Py_IS_TYPE(m, &PyMethodDescr_Type) && Py_IS_TYPE(core_create_task, &PyMethodDescr_Type) &&
               ((PyMethodDescrObject *)m)->d_method == ((PyMethodDescrObject *)core_create_task)->d_method);
    Py_DECREF(m);
#ifndef Py_GIL_DISABLED
    if (own && PyType_HasFeature(t, Py_TPFLAGS_VALID_VERSION_TAG)) {
        own_type = t;
        own_tag = t->tp_version_tag;
    }
#endif
    return own;
}

#if PY_VERSION_HEX >= 0x030C0000
static PyObject *eager_kwnames;  /* ("loop", "eager_start") */

/* loop.create_task(coro) for goloop serve's requests (asgi.c), with the Task started eagerly
 * (3.12's eager_start): the coroutine's first step runs now, inside the call, instead of on
 * the loop's next run phase; a request whose application never suspends ends here. Only
 * where create_task would make a plain Task (no task factory, not debug, LoopCore's own
 * create_task): anything else calls loop.create_task(coro). */
PyObject *gl_loop_create_task_eager(GLLoop *self, PyObject *coro) {
    if (self->debug || (self->task_factory != NULL && self->task_factory != Py_None) ||
        !own_create_task(self)) {
        return PyObject_CallMethodOneArg((PyObject *)self, str_create_task, coro);
    }
    /* (the loop given even where the Task would find it, as create_task does: 3.12's
     * Task.__init__ asks the loop it was given whether it runs, None if none) */
    PyObject *targs[3] = {coro, (PyObject *)self, Py_True};
    return new_task(self, targs, eager_kwnames);
}
#else
static PyObject *c_task_type;   /* _asyncio.Task (NULL: no C Task) */
static PyObject *step_wrapper_type;  /* _asyncio.TaskStepMethWrapper, once seen (strong) */
static PyObject *named_kw;      /* {"loop": ..., "name": ...}, refilled by each call */
static PyObject *str_loop, *str_name, *named_kwnames;  /* "loop", "name", ("name",) */
static int named_busy;          /* named_kw is in use (a Task's __init__ ran Python that made a Task) */

/* 3.11's _asyncio.TaskStepMethWrapper, the callback a C Task's __init__ schedules for its
 * first step: its task is the field after the object's head (Modules/_asynciomodule.c,
 * 3.11; a version that only gets security fixes). */
typedef struct {
    PyObject_HEAD
    PyObject *sw_task;
    PyObject *sw_arg;
} StepWrapper;

/* Whether cb is a TaskStepMethWrapper. _asyncio does not export the type: it is known by
 * its name and size the first time one is seen, then by identity. */
static int is_step_wrapper(PyObject *cb) {
    PyTypeObject *t = Py_TYPE(cb);
    if ((PyObject *)t == step_wrapper_type) return 1;
    if (step_wrapper_type != NULL || t->tp_basicsize != (Py_ssize_t)sizeof(StepWrapper) ||
        strcmp(t->tp_name, "TaskStepMethWrapper") != 0)
        return 0;
    step_wrapper_type = Py_NewRef((PyObject *)t);
    return 1;
}

/* 3.12's eager start for goloop serve's requests on 3.11 (whose Task has no eager_start),
 * once the ready queue is long: the first step of task, which its __init__ just queued with
 * call_soon, is taken back from the queue's tail and run now, so a request whose
 * application never suspends ends inside the call. What it bounds is memory in flight: with
 * every step queued, a read of many requests (16 pipelined on each of 64 connections) kept
 * every one's scope, Task and coroutine alive until the run phase, the collector's young
 * generations filled with them and promoted them: FastAPI's plaintext row ran a full
 * collection every ~9,000 requests, 4 % of the server's CPU. Up to EAGER_AFTER queued
 * handles the steps stay queued: a batch's applications then run one after another in the
 * run phase, which cost 1-3 % less CPU per request than running each as it is read
 * (Starlette JSON, 64 connections); 64 requests in flight stay under a young collection's
 * 700 objects. Only when the queue's tail is that step (a Task has one step queued at a
 * time: a step wrapper of this task at the tail is it), the loop is not in debug mode (Go's
 * debug path times each handle) and this thread runs it. Returns 0 (run, or left queued), or
 * -1 with the exception a step raises out of a handle (SystemExit, KeyboardInterrupt: the
 * caller hands it to the loop, as for 3.12's eager Task). */
#define EAGER_AFTER 64
static int first_step_now(GLLoop *self, PyObject *task) {
    if (self->ready_len <= EAGER_AFTER || self->debug || GL_LOAD(self->owner) != gl_thread_ident()) return 0;
    PyObject *h = self->ready[(self->ready_head + self->ready_len - 1) & (self->ready_cap - 1)];
    PyObject *cb = Py_IS_TYPE(h, GL_HandleType) ? ((GLHandle *)h)->callback : NULL;  /* NULL: cancelled */
    if (cb == NULL || !is_step_wrapper(cb) || ((StepWrapper *)cb)->sw_task != task) return 0;
    self->ready_len--;
    return gl_handle_run(h);
}

/* loop.create_task(coro, name=name) for goloop serve's requests on 3.11 (asgi.c), where a
 * Task takes its loop and name only as keywords: a type call makes a new dict of them for
 * each Task (~800 instructions), and create_task is found by an attribute lookup. Where
 * create_task would make a plain Task (no task factory, not debug, LoopCore's own
 * create_task) and asyncio's Task is the C one under type's own call, the Task is made
 * as type's call makes it (tp_new, then tp_init) with one keyword dict refilled each time
 * (3.11 has the GIL: one thread at a time runs this); anything else calls
 * loop.create_task(coro, name=name). The caller owns name and self for the call, so the
 * dict's borrowed values stay alive even if a nested call refills it; the loop is taken
 * out of the dict after each call. Past EAGER_AFTER queued handles the Task made here has
 * its first step run at once (first_step_now). */
PyObject *gl_loop_create_task_named(GLLoop *self, PyObject *coro, PyObject *name) {
    PyTypeObject *tt = NULL;
    int fast = !self->debug && (self->task_factory == NULL || self->task_factory == Py_None) && !named_busy &&
               c_task_type != NULL && own_create_task(self);
    /* asyncio.tasks.Task from the module's dict (borrowed; c_task_type holds the C one) */
    PyObject *task_type = fast ? PyDict_GetItemWithError(PyModule_GetDict(tasks_module), str_Task) : NULL;
    if (task_type == NULL && PyErr_Occurred()) return NULL;
    if (task_type == c_task_type && Py_TYPE(task_type)->tp_call == PyType_Type.tp_call) tt = (PyTypeObject *)task_type;
    if (tt == NULL || tt->tp_new == NULL || tt->tp_init == NULL) {
        PyObject *args[3] = {(PyObject *)self, coro, name};
        return PyObject_VectorcallMethod(str_create_task, args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, named_kwnames);
    }
    if (self->closed) {
        PyErr_SetString(PyExc_RuntimeError, "Event loop is closed");
        return NULL;
    }
    PyObject *args = PyTuple_Pack(1, coro);
    if (args == NULL || PyDict_SetItem(named_kw, str_loop, (PyObject *)self) < 0 ||
        PyDict_SetItem(named_kw, str_name, name) < 0) {
        Py_XDECREF(args);
        return NULL;
    }
    named_busy = 1;
    PyObject *task = tt->tp_new(tt, args, named_kw);
    if (task != NULL && PyObject_TypeCheck(task, tt) && tt->tp_init(task, args, named_kw) < 0) Py_CLEAR(task);
    named_busy = 0;
    Py_DECREF(args);
    /* the dict keeps no loop alive between requests (its name, a short str, may stay) */
    if (PyDict_SetItem(named_kw, str_loop, Py_None) < 0) Py_CLEAR(task);
    if (task != NULL && first_step_now(self, task) < 0) Py_CLEAR(task);
    return task;
}
#endif

static PyObject *futures_module, *str_Future;

/* create_future(): asyncio's `futures.Future(loop=self)`, without a Python frame (streams
 * and sock_* create one per wait). */
static PyObject *loop_create_future(GLLoop *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *fut_type = PyObject_GetAttr(futures_module, str_Future);
    if (fut_type == NULL) return NULL;
    PyObject *args[1] = {(PyObject *)self};
    PyObject *fut = PyObject_Vectorcall(fut_type, args, 0, finds_running_loop(self) ? NULL : loop_kwnames);
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
    GL_FORK_GUARD(NULL);
    PyObject *r = glRunCore(self);
    Py_CLEAR(self->call_soon_bound);  /* (3.11: kept only while the loop runs) */
    return r;
}

#if PY_VERSION_HEX < 0x030C0000
/* ---------- call_soon, bound once (3.11) ----------
 * 3.11's C Task and Future schedule a step or a done callback that has a context with
 * `getattr(loop, "call_soon")(cb, context=ctx)` (3.12+ call it as a method): a bound method
 * object made and freed for every Task step, on a Python subclass after a miss in the
 * instance's dict. On 3.11 LoopCore's call_soon is this descriptor around the method
 * descriptor: while the loop runs, an instance gets the loop's one bound method, made the
 * first time (GLLoop.call_soon_bound, dropped when run_forever returns: no lasting cycle);
 * otherwise, and on the class (Loop.call_soon), what the method descriptor gives. It is a
 * non-data descriptor like the one it wraps: an instance attribute or a subclass's method
 * still takes precedence, and its other attributes are the method descriptor's. */
typedef struct {
    PyObject_HEAD
    PyObject *meth;
    vectorcallfunc vectorcall;
    PyTypeObject *loop_type;  /* the last class of loop called through it (strong) */
} GLBoundOnce;

/* Called as a method descriptor (descr(loop, *args), LOAD_METHOD's call): call_soon itself
 * when args[0] is a loop of a class seen before (d->loop_type, a strong reference), else the
 * method descriptor's own call, which checks the type and raises its TypeError. */
static PyObject *bound_once_vectorcall(GLBoundOnce *d, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs >= 1) {
        PyTypeObject *tp = Py_TYPE(args[0]);
        if (tp == d->loop_type)
            return loop_call_soon((GLLoop *)args[0], args + 1, nargs - 1, kwnames);
        if (PyType_IsSubtype(tp, &LoopCoreType)) {
            Py_XSETREF(d->loop_type, (PyTypeObject *)Py_NewRef(tp));
            return loop_call_soon((GLLoop *)args[0], args + 1, nargs - 1, kwnames);
        }
    }
    return PyObject_Vectorcall(d->meth, args, nargsf, kwnames);
}

static PyObject *bound_once_get(GLBoundOnce *d, PyObject *obj, PyObject *type) {
    descrgetfunc get = Py_TYPE(d->meth)->tp_descr_get;
    if (obj == NULL || obj == Py_None || !PyObject_TypeCheck(obj, &LoopCoreType) || !((GLLoop *)obj)->running)
        return get(d->meth, obj, type);
    GLLoop *l = (GLLoop *)obj;
    if (l->call_soon_bound == NULL && (l->call_soon_bound = get(d->meth, obj, type)) == NULL) return NULL;
    return Py_NewRef(l->call_soon_bound);
}

static PyObject *bound_once_getattro(GLBoundOnce *d, PyObject *name) { return PyObject_GetAttr(d->meth, name); }
static PyObject *bound_once_repr(GLBoundOnce *d) { return PyObject_Repr(d->meth); }

static void bound_once_dealloc(GLBoundOnce *d) {
    Py_XDECREF(d->meth);
    Py_XDECREF(d->loop_type);
    PyObject_Free(d);
}

static PyTypeObject BoundOnceType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop._goloop._BoundOnce",
    .tp_basicsize = sizeof(GLBoundOnce),
    /* A method descriptor to the interpreter (descr.__get__(loop)(*a) == descr(loop, *a)):
     * `loop.call_soon(cb)` then takes LOAD_METHOD's specialized path, which pushes the
     * descriptor and calls it with the loop, without a bound method or a call of
     * bound_once_get; C's getattr(loop, "call_soon") still gets the loop's one bound method. */
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_METHOD_DESCRIPTOR | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(GLBoundOnce, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = (destructor)bound_once_dealloc,
    .tp_descr_get = (descrgetfunc)bound_once_get,
    .tp_getattro = (getattrofunc)bound_once_getattro,
    .tp_repr = (reprfunc)bound_once_repr,
};

static int install_bound_once(void) {
    if (PyType_Ready(&BoundOnceType) < 0) return -1;
    PyObject *meth = PyDict_GetItemString(LoopCoreType.tp_dict, "call_soon");  /* borrowed */
    if (meth == NULL) return -1;
    GLBoundOnce *d = PyObject_New(GLBoundOnce, &BoundOnceType);
    if (d == NULL) return -1;
    d->meth = Py_NewRef(meth);
    d->vectorcall = (vectorcallfunc)bound_once_vectorcall;
    d->loop_type = NULL;
    int rc = PyDict_SetItemString(LoopCoreType.tp_dict, "call_soon", (PyObject *)d);
    Py_DECREF(d);
    PyType_Modified(&LoopCoreType);
    return rc;
}
#endif

static PyObject *loop_close_core(GLLoop *self, PyObject *Py_UNUSED(ignored)) {
    GL_FORK_GUARD(NULL);
    return glCloseCore(self);
}

/* asyncio's selectors._fileobj_lookup: the descriptor of fileobj, or, when its fileno() is
 * no longer valid (a socket closed since it was registered: -1), the descriptor of the
 * registration made with that very object. -1 with asyncio's ValueError when neither. */
static int fileobj_lookup(GLLoop *self, PyObject *fileobj) {
    int fd = PyObject_AsFileDescriptor(fileobj);
    if (fd >= 0 || !PyErr_ExceptionMatches(PyExc_ValueError)) return fd;
    PyErr_Clear();
    if (!PyLong_Check(fileobj) && self->id >= 0 && (fd = glFdOf(self, fileobj)) >= 0)
        return fd;
    /* asyncio's error (selectors._fileobj_to_fd) */
    PyObject *n = PyLong_Check(fileobj) ? Py_NewRef(fileobj) : gl_call_method0(fileobj, "fileno");
    if (n != NULL && PyLong_Check(n)) {
        PyErr_Format(PyExc_ValueError, "Invalid file descriptor: %R", n);
    } else {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "Invalid file object: %R", fileobj);
    }
    Py_XDECREF(n);
    return -1;
}

/* _add_reader/_add_writer(fd, callback, *args, context=None): the callback runs in context
 * (asyncio 3.15's transports pass their connection's), else in a copy of the current one. */
static PyObject *add_io(GLLoop *self, const char *fname, int writer, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames) {
    GL_FORK_GUARD(NULL);
    PyObject *ctx;
    if (parse_context(fname, args, nargs, kwnames, &ctx) < 0) return NULL;
    if (nargs < 2) {
        PyErr_Format(PyExc_TypeError, "%s() takes at least 2 arguments (fd, callback)", fname);
        return NULL;
    }
    int fd = fileobj_lookup(self, args[0]);
    if (fd < 0) return NULL;
    if (gl_check_callback(args[1], fname) < 0) return NULL;
    PyObject *h = gl_handle_new(GL_HandleType, (PyObject *)self, args[1], args + 2, nargs - 2, ctx, 0, 1);
    if (h == NULL) return NULL;
    Py_INCREF(h);
    /* the object is remembered (not a number: asyncio finds registrations by identity) */
    if (glAddIO(self, fd, h, writer, PyLong_Check(args[0]) ? NULL : args[0]) < 0) {
        Py_DECREF(h);
        Py_DECREF(h);
        return NULL;
    }
    return h;
}

static PyObject *loop_add_reader(GLLoop *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    return add_io(self, "add_reader", 0, args, nargs, kwnames);
}

static PyObject *loop_add_writer(GLLoop *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    return add_io(self, "add_writer", 1, args, nargs, kwnames);
}

static PyObject *remove_io(GLLoop *self, PyObject *fdobj, int writer) {
    GL_FORK_GUARD(NULL);
    if (self->closed) Py_RETURN_FALSE;  /* asyncio's answer, before it looks fdobj up */
    int fd = fileobj_lookup(self, fdobj);
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
    GL_FORK_GUARD(NULL);
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_wait_fd(fd, fut, writer)");
        return NULL;
    }
    int fd = PyObject_AsFileDescriptor(args[0]);
    if (fd < 0) return NULL;
    int writer = PyObject_IsTrue(args[2]);
    if (writer < 0) return NULL;
    PyObject *cbargs[2] = {args[1], Py_None};
    PyObject *h = gl_handle_new(GL_HandleType, (PyObject *)self, set_result_unless_cancelled, cbargs, 2, NULL, 0, 1);
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
    GL_FORK_GUARD(NULL);
    int fd = fileobj_lookup(self, fdobj);
    if (fd < 0) return NULL;
    return glFdKey(self, fd);
}

static PyObject *loop_add_callback(GLLoop *self, PyObject *handle) {
    GL_FORK_GUARD(NULL);
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
    GL_FORK_GUARD(NULL);
    return glStats(self);
}

static int loop_init(GLLoop *self, PyObject *args, PyObject *kwds) {
    GL_FORK_GUARD(-1);
    if (self->id >= 0) return 0; /* already initialized */
    if (gl_wake_init(self) < 0) return -1;
    return glLoopInit(self);
}

static PyObject *loop_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    /* object.__new__ rather than tp_alloc alone: for a Python subclass (goloop.Loop) it also
     * readies the instance's inline attribute values (a managed __dict__). Without them the
     * first attribute stored makes a dict, and LOAD_METHOD on the loop (loop.call_later(...))
     * loses its specialized paths that need the inline values (3.11, 3.12, 3.14; CPython
     * 3.13 gives inline values only to types whose instances have no C fields, which
     * LoopCore's have: there goloop.Loop keeps its attributes in slots, so no __dict__ is
     * made and the lookup is still specialized: pyshim/goloop/_compat.py, instance_slots). */
    PyObject *noargs = PyTuple_New(0);  /* the empty tuple: a shared constant */
    if (noargs == NULL) return NULL;
    GLLoop *self = (GLLoop *)PyBaseObject_Type.tp_new(type, noargs, NULL);
    Py_DECREF(noargs);
    if (self == NULL) return NULL;
    self->id = -1;
    pthread_mutex_init(&self->inbox_mu, NULL);  /* cannot fail with default attributes */
    pthread_rwlock_init(&self->wake_mu, NULL);
    self->wake_fd = -1;
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
    if (self->id >= 0 && !gl_forked) glLoopFree(self);  /* drains the ready queue */
    PyMem_Free(self->ready);
    self->ready = NULL;
    self->ready_len = self->ready_cap = 0;
    PyMem_Free(self->tstaged);
    self->tstaged = NULL;
    self->ntstaged = self->tstaged_cap = 0;
    PyMem_Free(self->wdirty);  /* borrowed entries, all detached by now */
    self->wdirty = NULL;
    self->nwdirty = self->wdirty_cap = 0;
    /* what other threads queued after the loop's Go side let go (or never had it) */
    for (Py_ssize_t i = 0; i < self->inbox_len; i++) Py_DECREF(self->inbox[self->inbox_head + i]);
    free(self->inbox);
    self->inbox = NULL;
    self->inbox_len = self->inbox_n = 0;
    PyMem_Free(self->taken);
    self->taken = NULL;
    pthread_mutex_destroy(&self->inbox_mu);
    if (self->wake_fd >= 0 && !gl_forked) gl_wake_close(self);
    pthread_rwlock_destroy(&self->wake_mu);
    Py_CLEAR(self->thread_id);
    Py_CLEAR(self->task_factory);
    Py_CLEAR(self->scratch_ctx);
    Py_CLEAR(self->call_soon_bound);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The Go side's references (queued handles, reader/writer handles, attached transports)
 * are reported to the garbage collector, so an unclosed loop that nothing refers to is
 * collected (and warned about by asyncio's __del__), as asyncio's own loop is. */
static int loop_traverse(GLLoop *self, visitproc visit, void *arg) {
    Py_VISIT(self->thread_id);
    Py_VISIT(self->task_factory);
    Py_VISIT(self->scratch_ctx);
    Py_VISIT(self->call_soon_bound);
    for (Py_ssize_t i = 0; i < self->ready_len; i++) {
        PyObject *h = self->ready[(self->ready_head + i) & (self->ready_cap - 1)];
#ifndef Py_GIL_DISABLED
        if (!PyObject_GC_IsTracked(h)) {
            /* a queued Handle out of the collector's lists (stage): if the ring is its only
             * owner it is part of the loop, so what it refers to is the loop's to report (a
             * dropped, unclosed loop with callbacks queued stays collectable). If anything
             * else holds it too, nothing is reported: what it refers to counts as held from
             * outside (kept alive), never as garbage another holder could still reach. */
            if (Py_REFCNT(h) == 1) {
                int r = Py_TYPE(h)->tp_traverse(h, visit, arg);
                if (r) return r;
            }
            continue;
        }
#endif
        Py_VISIT(h);
    }
    for (Py_ssize_t i = 0; i < self->ntstaged; i++) Py_VISIT(self->tstaged[i]);
    /* No lock: the collector runs with the world stopped (free-threaded) or holding the GIL,
     * and no thread stops inside inbox_push's critical section. */
    for (Py_ssize_t i = 0; i < self->inbox_len; i++) Py_VISIT(self->inbox[self->inbox_head + i]);
    if (self->id >= 0 && !gl_forked) return glLoopTraverse(self, visit, arg);
    return 0;
}

static int loop_clear(GLLoop *self) {
    Py_CLEAR(self->task_factory);
    Py_CLEAR(self->scratch_ctx);
    Py_CLEAR(self->call_soon_bound);
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

/* is_running(): asyncio's BaseEventLoop.is_running (`self._thread_id is not None`) without
 * its Python frame: 3.12+'s eager Tasks (goloop serve's requests) ask it of each one. */
static PyObject *loop_is_running(GLLoop *self, PyObject *Py_UNUSED(ignored)) {
    int r;
    Py_BEGIN_CRITICAL_SECTION(self);
    r = self->thread_id != Py_None;
    Py_END_CRITICAL_SECTION();
    return PyBool_FromLong(r);
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
    {"is_running", (PyCFunction)loop_is_running, METH_NOARGS, "Whether a thread runs the loop now."},
    {"stop", (PyCFunction)loop_stop, METH_NOARGS, "Stop the loop after the current iteration."},
    {"_run_core", (PyCFunction)loop_run_core, METH_NOARGS, NULL},
    {"_close_core", (PyCFunction)loop_close_core, METH_NOARGS, NULL},
    {"_add_reader", (PyCFunction)(void (*)(void))loop_add_reader, METH_FASTCALL | METH_KEYWORDS, NULL},
    {"_add_writer", (PyCFunction)(void (*)(void))loop_add_writer, METH_FASTCALL | METH_KEYWORDS, NULL},
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

/* A tuple of interned keyword names (a NULL-terminated list of up to 4): the callee's parser
 * finds an interned name by identity, a copy by comparing its characters. */
static PyObject *names_tuple(const char *n0, ...) {
    const char *names[4];
    Py_ssize_t n = 0;
    va_list ap;
    va_start(ap, n0);
    for (const char *p = n0; p != NULL && n < 4; p = va_arg(ap, const char *)) names[n++] = p;
    va_end(ap);
    PyObject *t = PyTuple_New(n);
    for (Py_ssize_t i = 0; i < n && t != NULL; i++) {
        PyObject *s = PyUnicode_InternFromString(names[i]);
        if (s == NULL) Py_CLEAR(t);
        else PyTuple_SET_ITEM(t, i, s);
    }
    return t;
}

int gl_init_loopcore(PyObject *m) {
    if (PyType_Ready(&LoopCoreType) < 0) return -1;
#if PY_VERSION_HEX < 0x030C0000
    if (install_bound_once() < 0) return -1;
#endif
    if (PyModule_AddObjectRef(m, "LoopCore", (PyObject *)&LoopCoreType) < 0) return -1;
    /* what create_future and create_task make, and sock_recv's waiter callback: from asyncio
     * (futures, tasks) and goloop._compat (the one place of asyncio's private names) */
    PyObject *compat = PyImport_ImportModule("goloop._compat");
    if (compat == NULL) return -1;
    set_result_unless_cancelled = PyObject_GetAttrString(compat, "set_result_unless_cancelled");
#if PY_VERSION_HEX >= 0x030E0000
    threadsafe_handle_type = PyObject_GetAttrString(compat, "ThreadSafeHandle");
    str_source_traceback = PyUnicode_InternFromString("_source_traceback");
    if (threadsafe_handle_type == NULL || str_source_traceback == NULL) {
        Py_DECREF(compat);
        return -1;
    }
#endif
    Py_DECREF(compat);
    if (set_result_unless_cancelled == NULL) return -1;
    str_context = PyUnicode_InternFromString("context");
    if (str_context == NULL) return -1;
    futures_module = PyImport_ImportModule("asyncio.futures");
    str_Future = PyUnicode_InternFromString("Future");
    loop_kwnames = names_tuple("loop", NULL);
    if (!futures_module || !str_Future || !loop_kwnames) return -1;
    tasks_module = PyImport_ImportModule("asyncio.tasks");
    str_Task = PyUnicode_InternFromString("Task");
    str_create_task_py = PyUnicode_InternFromString("_create_task_py");
    task_kwnames = names_tuple("loop", "name", "context", NULL);
    if (!tasks_module || !str_Task || !str_create_task_py || !task_kwnames) return -1;
    str_create_task = PyUnicode_InternFromString("create_task");
    if (!str_create_task) return -1;
    core_create_task = PyObject_GetAttr((PyObject *)&LoopCoreType, str_create_task);
    if (core_create_task == NULL) return -1;
#if PY_VERSION_HEX >= 0x030C0000
    eager_kwnames = names_tuple("loop", "eager_start", NULL);
    if (!eager_kwnames) return -1;
#else
    str_loop = PyUnicode_InternFromString("loop");
    str_name = PyUnicode_InternFromString("name");
    named_kwnames = names_tuple("name", NULL);
    named_kw = PyDict_New();
    if (!str_loop || !str_name || !named_kwnames || !named_kw) return -1;
    {
        PyObject *aio = PyImport_ImportModule("_asyncio");  /* no C Task: the plain call */
        c_task_type = aio != NULL ? PyObject_GetAttr(aio, str_Task) : NULL;
        Py_XDECREF(aio);
        if (c_task_type == NULL) PyErr_Clear();
    }
#endif
    return 0;
}
