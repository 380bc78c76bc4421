/* The loop's shared declarations, included by every C file of goloop's CPython binding: the
 * C object layouts of LoopCore, Handle and the socket transports, which C and Go both read
 * and write; the loop's C functions Go calls (the ready ring and running handles, read
 * delivery, staged writes, the wake-up); and small helpers for CPython macros cgo cannot
 * call. The work is split between the two languages: C has the per-callback paths (the
 * ready ring, handles, reads into bytes, writes staged per iteration, TLS records), Go the
 * poller, timers, descriptors and write queues. The rules every C file follows (reference
 * ownership, which thread may touch Python, the `_u` entry points) are in doc.go. */
#ifndef GOLOOP_GL_H
#define GOLOOP_GL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <pthread.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* Relaxed atomic loads and stores, for fields one thread writes and others read (a loop's
 * flags and owner, read by call_soon_threadsafe from any thread). On x86-64 and arm64 they
 * compile to plain loads and stores; they make the accesses well defined on a
 * free-threaded Python, where no GIL orders them. */
#define GL_LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define GL_STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

#ifndef Py_BEGIN_CRITICAL_SECTION  /* before 3.13: the GIL is the critical section */
#define Py_BEGIN_CRITICAL_SECTION(op) {
#define Py_END_CRITICAL_SECTION() }
#endif

/* The C part of goloop.Loop. Python's Loop class derives from it and from asyncio's
 * unix selector loop; the fields below are exposed as the attributes asyncio's code
 * reads and writes (_closed, _stopping, _debug, _thread_id ...), so Go sees every change. */
typedef struct {
    PyObject_HEAD
    long id;                     /* index of the Go loop state; -1 before init/after free */
    char closed;
    char stopping;
    char debug;
    char running;                /* inside the Go run loop */
    PyObject *thread_id;         /* int while running, else None */
    Py_ssize_t timer_cancelled_count;
    double slow_callback_duration;
    double clock_resolution;
    PyObject *task_factory;      /* asyncio's _task_factory; NULL reads as None */
    /* The ready queue, a ring of ready_cap (a power of two) handles, ready_len of them
     * queued from ready_head: call_soon appends in C (no C->Go call), Go appends in place
     * (loop.go, readyPush: due timers, I/O callbacks, the inbox) and C runs them
     * (gl_run_ready). Only the thread that runs the loop (owner) touches it, or any thread
     * while no thread runs the loop. */
    PyObject **ready;
    Py_ssize_t ready_head, ready_len, ready_cap;
    /* gl_run_ready may run further iterations by itself (each: the handles ready at its
     * start) while CLOCK_MONOTONIC is below run_until (ns; read every few iterations, and
     * at the next one after run_until was lowered) and nothing else waits for Go:
     * Go sets it before the run phase (the next poll, timer, yield) and lowers it when
     * something Go must handle between iterations appears (a timer pushed, a transport's
     * writes to flush: loop.go, endFastRun). 0: one iteration, then back to Go. */
    int64_t run_until;
    /* TimerHandles call_later and call_at made on the owner thread (or while no thread
     * runs the loop), in order, for Go's timer heap (loop.go, drainTimers). */
    PyObject **tstaged;
    Py_ssize_t ntstaged, tstaged_cap;
    /* GIL builds: the contextvars.Context the handles without one of their own run in
     * (loop_handle.c, run_lazy), and whether a callback is running in it now. */
    PyObject *scratch_ctx;
    int scratch_busy;
    /* 3.11: the loop's bound call_soon while it runs (loop_core.c, "call_soon, bound once") */
    PyObject *call_soon_bound;
    /* The thread running the loop (PyThread_get_thread_ident), 0 when it is not running.
     * Written by that thread (GL_STORE), read by any (GL_LOAD). */
    unsigned long owner;
    /* The inbox: handles queued by threads other than the owner (call_soon_threadsafe,
     * or anything queued while the loop is not running), in order, under inbox_mu. The
     * owner takes them at the start of an iteration (gl_inbox_take). inbox_n mirrors
     * inbox_len for lock-free readers (GL_LOAD). */
    pthread_mutex_t inbox_mu;
    PyObject **inbox;
    Py_ssize_t inbox_head, inbox_len, inbox_cap, inbox_n;
    PyObject **taken;            /* the owner's copy of what it took from the inbox */
    Py_ssize_t taken_cap;
    /* The loop's wake-up, written by other threads in C (gl_wake) rather than by a call into
     * Go, which from a thread Go did not make (a server's native threads) hands a Go P
     * around per call. wake_fd is an eventfd the loop's poller watches; wake_pending is the
     * poller's flag (0 idle, 1 written and not drained, 2 closed; poller.NewSharedWake);
     * wake_mu orders the writers (read side) against close (write side), so no write reaches
     * a closed, reused descriptor number. */
    int wake_fd;
    int32_t wake_pending;
    pthread_rwlock_t wake_mu;
    /* Transports (GLTransport *, borrowed: a listed transport is attached, and detaching
     * takes it off, gl_tr_clear_ctx) whose write() staged data in C this iteration
     * (GLTransport.wstage): gl_flush_staged sends them at the iteration's end; a NULL entry
     * was detached. Loop thread only. */
    PyObject **wdirty;
    Py_ssize_t nwdirty, wdirty_cap;
} GLLoop;

/* goloop's Handle and TimerHandle (one layout; the TimerHandle type adds when()). */
typedef struct {
    PyObject_HEAD
    PyObject *callback;          /* NULL once cancelled */
    PyObject *args;              /* tuple, or NULL for no arguments */
    PyObject *context;
    PyObject *loop;              /* strong reference */
    PyObject *weakreflist;
    PyObject *repr;              /* repr saved at cancel() in debug mode */
    PyObject *source_tb;         /* debug mode: where the handle was created */
    PyObject *when_obj;          /* call_at's `when` when it was not a float (asyncio keeps it
                                  * as given: an int stays an int in when()), else NULL */
    double when;
    char cancelled;
    char scheduled;              /* timer: in the loop's heap */
    /* GIL builds: a handle made without a context keeps, instead of a copy of the current
     * context, that context's variables (the immutable mapping a copy would share); its
     * Context is made from them when asked for (get_context(), _context), and until then
     * the callback runs in the loop's scratch context holding them (loop_handle.c). */
    PyObject *vars;
    char in_scratch;             /* its callback is running in the loop's scratch Context */
} GLHandle;

/* The C part of goloop's socket transports. The Python class derives from it, and it derives
 * from asyncio.transports._FlowControlMixin (an asyncio.Transport, as asyncio's own socket
 * transports are, which sendfile's fallback requires). Those classes' instance fields are
 * their __slots__, which occupy `slots` (the layout is checked at module init); goloop's
 * member descriptors of the same names take precedence for the flow-control fields.
 * The flags are the attributes of asyncio's _SelectorSocketTransport, shared by the Python
 * lifecycle code and Go's hot paths. */
#define GL_WSTAGE 8

typedef struct {
    PyObject_HEAD
    PyObject *slots[5];          /* _extra; _loop, _protocol_paused, _high_water, _low_water */
    long conn;                   /* Go connection id + 1; 0 when not attached */
    int sock_fd;
    Py_ssize_t conn_lost;
    Py_ssize_t high_water;
    Py_ssize_t low_water;
    Py_ssize_t write_size;       /* bytes queued in Go, not yet sent */
    char closing;
    char paused;
    char eof;
    char protocol_paused;
    char sendfile_busy;
    char write_blocked;          /* the last send left data queued (EAGAIN) */
    char fixed_ctx;              /* asyncio 3.15's connection context: rctx and wctx are that
                                  * one context (_core_set_context), never replaced */
    /* contextvars contexts of the connection's callbacks, as asyncio's reader and writer
     * handles hold them; set only while attached (conn != 0), cleared by Go's detach:
     * rctx, copied when reading starts or resumes: data_received, get_buffer/buffer_updated,
     *   eof_received and read errors run in it;
     * wctx, copied by the write() that found the queue empty: what the queue's later
     *   sending calls (resume_writing, the drain after close()/write_eof(), write errors)
     *   runs in; a close() while the queue only waits for the end of the iteration
     *   (asyncio would have sent it already) replaces it with a copy of its own context.
     * With fixed_ctx (3.15+: asyncio's transports run every callback of a connection in the
     * context given when the connection is made) both are that context, as given. */
    PyObject *rctx;
    PyObject *wctx;
    /* write()'s fast path (loop_transport.c, wstage_push): while Go's queue is empty, up to
     * GL_WSTAGE bytes objects (strong references, with their data and length) wait here,
     * counted in write_size, for the end of the read callback that wrote them
     * (gl_send_staged) or else of the loop iteration, when one C call (gl_flush_staged)
     * sends them with one send/sendmsg: no call into Go per write. Anything Go
     * does to the queue first moves them into it (loop_transport.go, absorb); a send that leaves
     * data (EAGAIN, part sent: wstage_off bytes of the first gone) or fails (wstage_err) is
     * handed to Go the same way. wlisted: on the loop's wdirty list. wloop: the GLLoop,
     * while attached (borrowed: the loop detaches its transports before it is freed). */
    int nwstage;
    int wstage_err;
    char wlisted;
    Py_ssize_t wstage_off;
    PyObject *wloop;
    PyObject *wstage[GL_WSTAGE];
    char *wstage_buf[GL_WSTAGE];
    Py_ssize_t wstage_len[GL_WSTAGE];
} GLTransport;

extern PyTypeObject *GL_HandleType;
extern PyTypeObject *GL_TimerHandleType;

/* The fork guard, the one place that knows it: set (by os.register_at_fork's child hook)
 * in a process forked after the Go runtime started, where any call into Go could hang.
 * Every C entry point that would call into Go starts with GL_FORK_GUARD(its error value):
 * gl_fork_error() raises the RuntimeError that names the fix. */
extern int gl_forked;
int gl_fork_error(void);
#define GL_FORK_GUARD(ret) do { if (gl_forked) { gl_fork_error(); return ret; } } while (0)

/* C helpers Go calls: handles (loop_handle.c), CPython macros and errors (pyapi.c), buffered reads
 * (loop_readpath.c). */
int gl_handle_run(PyObject *h);
void gl_handle_release(PyObject *h);
Py_ssize_t gl_run_ready(GLLoop *self, Py_ssize_t ntodo);
Py_ssize_t gl_run_ready_u(uintptr_t self, Py_ssize_t ntodo);  /* (no cgo pointer check) */
int gl_ready_grow(GLLoop *self);
/* The same for Go's hot loops: C pointers passed as integers, which cgo does not inspect
 * (its pointer check costs more than these calls' own work). */
int gl_handle_run_u(uintptr_t h);
PyObject *gl_none(void);
int gl_is_none(PyObject *o);
void gl_incref(PyObject *o);
void gl_decref(PyObject *o);
/* pyapi.c: by the interned name (never a new str per call: see there) */
PyObject *gl_name(const char *name);
PyObject *gl_call_method(PyObject *self, const char *name, PyObject *const *args, size_t nargs);
PyObject *gl_call_method0(PyObject *self, const char *name);
PyObject *gl_call_method1(PyObject *self, const char *name, PyObject *arg);
void gl_set_error(PyObject *type, const char *msg);
void gl_set_oserror(int err);
int gl_exc_is_fatal(void);
/* track: 0 leaves the new handle out of the collector's lists (one the ready ring takes at
 * once, loop_core.c: queue_soon tracks it if it goes elsewhere) */
PyObject *gl_handle_new(PyTypeObject *tp, PyObject *loop, PyObject *cb, PyObject *const *args,
                        Py_ssize_t nargs, PyObject *context, double when, int track);
Py_ssize_t gl_read_buffered_u(uintptr_t get_buffer, uintptr_t buffer_updated, int fd, uintptr_t ctx,
                              uintptr_t tr);
/* How glSchedule queues a handle (loop_core.c passes, loop.go switches on it). */
#define GL_MODE_SOON 0        /* the ready queue */
#define GL_MODE_THREADSAFE 1  /* the ready queue, from any thread, waking the loop */
#define GL_MODE_TIMER 2       /* the timer heap */
#define GL_RB_GETBUF (-1)   /* gl_read_buffered_u's failures */
#define GL_RB_UPDATED (-2)
#define GL_RB_ERRNO (-1000) /* minus errno */
/* The loop thread's state, read by Go (no call) to see whether other Python threads exist:
 * NULL on free-threaded builds, which have no GIL to hand over. */
static inline PyThreadState *gl_gil_tstate(void) {
#ifdef Py_GIL_DISABLED
    return NULL;
#else
    return PyThreadState_Get();
#endif
}
int gl_wake(GLLoop *self);
int gl_wake_init(GLLoop *self);
void gl_wake_close(GLLoop *self);
int gl_blocking_wait(int epfd, void *events, int maxevents, int timeout, int *err, int *sig);
Py_ssize_t gl_read_deliver_u(uintptr_t meth, int fd, uintptr_t rbuf, Py_ssize_t rbuf_len,
                             Py_ssize_t last, uintptr_t ctx, uintptr_t tr);
/* The stream transports' system calls on their sockets (loop_readpath.c, loop_transport.c;
 * Go's are goloop/poller's RawSend and RawSendv): recv(2), send(2) and sendmsg(2), the socket's
 * own calls, rather than read(2), write(2) and writev(2), which reach the same code through the
 * file layer (bench/analysis/sockcall_cost.c measures both). Each retries EINTR; a send never
 * raises SIGPIPE (MSG_NOSIGNAL: a peer that is gone is EPIPE); a descriptor that is not a
 * socket (ENOTSOCK) is read or written as a file. -1 with errno set on failure. */
static inline ssize_t gl_sock_recv(int fd, void *buf, size_t len) {
    ssize_t n;
    do {
        n = recv(fd, buf, len, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && errno == ENOTSOCK) {
        do {
            n = read(fd, buf, len);
        } while (n < 0 && errno == EINTR);
    }
    return n;
}

static inline ssize_t gl_sock_sendv(int fd, struct iovec *iov, int niov) {
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
    ssize_t n;
    do {
        n = niov == 1 ? send(fd, iov[0].iov_base, iov[0].iov_len, MSG_NOSIGNAL)
                      : sendmsg(fd, &mh, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && errno == ENOTSOCK) {
        do {
            n = writev(fd, iov, niov);
        } while (n < 0 && errno == EINTR);
    }
    return n;
}
#define GL_DIRECT_MIN (16 * 1024)        /* reads this large go straight into bytes next */
#define GL_DIRECT_MAX (128 * 1024 - 64)  /* their size: under glibc's mmap threshold */
int gl_call_fatal(PyObject *tr, const char *msg);
extern const char *const gl_msg_write_err;  /* asyncio's "Fatal write error on socket transport" (loop_transport.c) */
/* The same two calls made inside the contextvars context ctx (none: NULL). */
PyObject *gl_call_method0_in(PyObject *self, const char *name, PyObject *ctx);
int gl_call_fatal_in(PyObject *tr, const char *msg, PyObject *ctx);
void gl_tr_clear_ctx(GLTransport *tr);
/* loop_transport.c: sends the writes transports staged in C (GLTransport.wstage) this iteration.
 * Returns how many transports Go must see to (left at the head of the loop's wdirty: data
 * left unsent, a send error in wstage_err, or a state whose flush makes calls: closing, EOF,
 * sendfile, paused protocol); never runs Python code. */
Py_ssize_t gl_flush_staged(GLLoop *loop);
Py_ssize_t gl_flush_staged_u(uintptr_t loop);  /* (no cgo pointer check) */
/* Sends what tr's write() staged, now, if nothing holds it back (loop_transport.c): after a
 * read's protocol callback (loop_readpath.c), so the peer has the answer while the loop
 * reads its other sockets. What stays (EAGAIN, an error) is the iteration end's. */
void gl_send_staged(GLTransport *tr);
/* loop_transport.c: the socket transports' C type, and their write() of a list of bytes objects
 * without joining them (loop_sslfast.c hands its TLS records over with it). */
extern PyTypeObject *GL_TransportType;
int gl_transport_write_seq(PyObject *tr, PyObject *items);
PyObject *gl_getattr(PyObject *o, const char *name);
int gl_check_callback(PyObject *cb, const char *method);
PyObject *gl_handle_free_count(PyObject *m, PyObject *ignored);  /* loop_handle.c (tests) */
int gl_init_callback_check(void);
/* Each C file's part of the module's init (module.c calls them in order). */
int gl_init_handle_types(PyObject *m);  /* loop_handle.c */
int gl_init_loopcore(PyObject *m);      /* loop_core.c */
#if PY_VERSION_HEX >= 0x030C0000
PyObject *gl_loop_create_task_eager(GLLoop *self, PyObject *coro);  /* loop_core.c */
#else
PyObject *gl_loop_create_task_named(GLLoop *self, PyObject *coro, PyObject *name);  /* loop_core.c */
#endif
int gl_init_sockfast(PyObject *m);      /* loop_sockfast.c */
int gl_init_readpath(void);             /* loop_readpath.c */
int gl_init_transport_type(PyObject *m);/* loop_transport.c */
int gl_init_http(PyObject *m);          /* parser.c */
int gl_init_ssl(PyObject *m);           /* loop_sslfast.c */
int gl_visit(visitproc visit, PyObject *o, void *arg);
int gl_visit_each(visitproc visit, void *arg, void *base, Py_ssize_t n, size_t stride, size_t off);
Py_ssize_t gl_inbox_take(GLLoop *self, Py_ssize_t max, PyObject ***out);
void gl_set_owner(GLLoop *self, unsigned long owner);
void gl_set_closed(GLLoop *self);
/* PyThread_get_thread_ident() without its call: on Linux it is pthread_self(), which
 * call_soon asks on every call (is the caller the thread running the loop?). */
static inline unsigned long gl_thread_ident(void) { return (unsigned long)pthread_self(); }

/* A Context's mapping of variables, read and replaced in place (GIL builds): loop_handle.c's
 * lazy contexts, wsgi.c's per-request Context. This relies on PyContext's layout
 * (Include/internal/pycore_context.h, the same in 3.11-3.15): the mapping is the second field
 * after the object header. Free-threaded builds copy Contexts instead. */
#ifndef Py_GIL_DISABLED
#define GL_LAZY_CONTEXT 1
typedef struct {
    PyObject_HEAD
    PyObject *ctx_prev;
    PyObject *ctx_vars;
} GLContextHead;
#define CTX_VARS(c) (((GLContextHead *)(c))->ctx_vars)
#endif

#endif
