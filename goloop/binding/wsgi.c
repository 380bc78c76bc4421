/* goloop serve --interface wsgi (C side): the WsgiServer type, its pool threads' loop
 * (serve_thread) and each request's run: the application called with its environ
 * (wsgi_environ.c), wsgi.input (wsgi_input.c) and start_response (wsgi_response.c), and its
 * result sent. Each pool thread blocks in Go with the GIL released (wsgi.go's glWsgiNext)
 * until a request is ready (or, one being ready when it finishes the last, takes it with the
 * GIL kept: glWsgiTake), runs the application with the GIL, and sends through Go (the socket
 * is written by this thread, in Go; a part up to GL_WSGI_HOLD_MAX with the GIL held, the GIL
 * released for bigger ones and for waiting). Per-thread state is a pool thread's wsgi_thread
 * (wsgi.h; made and freed by its serve_thread, reached through the thread's gl_thread_state,
 * server.h): on a free-threaded build the threads run the application at once and share
 * nothing here but immutable objects. */
#include "wsgi.h"
#include "_cgo_export.h"

static PyTypeObject WsgiServerType;

/* interned strings (wsgi.h) */
GLWsgiStrings gl_wsgi_str;
static PyObject *empty_bytes;

/* ---------- one request ---------- */

/* Logs the exception being raised (the application's) with srv->on_error. */
static void log_error(GLWsgiServer *srv) {
    PyObject *exc = gl_take_exception();
    if (exc == NULL) return;
    PyObject *r = PyObject_CallOneArg(srv->on_error, exc);
    if (r == NULL) PyErr_WriteUnraisable(srv->on_error);
    Py_XDECREF(r);
    Py_DECREF(exc);
}

static int get_optional_attr(PyObject *o, PyObject *name, PyObject **res) {
    *res = PyObject_GetAttr(o, name);
    if (*res != NULL) return 1;
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
    PyErr_Clear();
    return 0;
}

/* A response being sent (handle's, on its pool thread's stack), or a parked one (on the heap,
 * Go's to keep until a pool thread resumes it: wsgi.go's glWsgiPark). Its references are
 * strong but st and in on the stack, which are the thread's (wsgi_thread's st and in); a
 * parked record takes over the thread's references to them (the thread makes new ones for
 * its next request), so that no other thread touches them while they are parked. Only the
 * thread that runs or resumes the response touches the record, with the GIL. */
typedef struct {
    PyObject *result;   /* the application's return value (NULL: it raised) */
    PyObject *it;       /* its iterator, or NULL (a list, a tuple or a file wrapper sent) */
    PyObject *part;     /* the part being sent (bytes), from off, or NULL */
    Py_ssize_t off;
    PyObject *env;      /* the environ (the access hook's), or NULL */
    PyObject *ctx;      /* the request's contextvars.Context, a copy of the thread's as it began */
    GLWsgiStart *st;
    GLWsgiInput *in;
    Py_ssize_t turn;    /* bytes sent since a thread took it (GL_WSGI_TURN) */
    int end;            /* gl_wsgi_send_part's end for its parts */
    int heap;           /* parked once: on the heap, owning st and in */
    int entered;        /* ctx is entered on the thread running it */
} wsgi_resp;

/* send_result's and iterate's answers: the output is over its bound (park the response);
 * the response sent GL_WSGI_TURN bytes in this turn (it yields to requests that wait) */
#define SENT_PAUSED 3
#define SENT_TURN 4
/* What a response sends before its thread looks for requests waiting for a thread: if some
 * do, the response goes behind them (parked, on the ready list at once). One client reading a
 * large body fast keeps its thread (nobody waits); many (200 clients whose kernel buffers
 * take ~4 MiB each before the output stops) take turns with the other clients' requests. */
#define GL_WSGI_TURN (256 * 1024)

/* A file wrapper around a regular file: sent from its position with sendfile(2) (on plain
 * HTTP/1.1; HTTP/2 and TLS read it in Go). 1: sent, 0: not a file (iterate it), -1: error
 * raised, -2: the client went away. */
static int send_wrapped_file(GLWsgiStart *st, PyObject *wrapper) {
    PyObject *f, *fdo, *pos = NULL;
    if (get_optional_attr(wrapper, WS(filelike), &f) <= 0) return PyErr_Occurred() ? -1 : 0;
    int has = get_optional_attr(f, WS(fileno), &fdo);
    if (has <= 0) {
        Py_DECREF(f);
        return has;
    }
    PyObject *fdv = PyObject_CallNoArgs(fdo);
    Py_DECREF(fdo);
    if (fdv == NULL) {  /* io.UnsupportedOperation and the like: not a file */
        Py_DECREF(f);
        PyErr_Clear();
        return 0;
    }
    long fd = PyLong_AsLong(fdv);
    Py_DECREF(fdv);
    long long off = -1;
    if (fd >= 0 && get_optional_attr(f, WS(tell), &pos) > 0) {  /* a buffered file's own position */
        PyObject *t = PyObject_CallNoArgs(pos);
        Py_DECREF(pos);
        off = t ? PyLong_AsLongLong(t) : -1;
        Py_XDECREF(t);
    }
    Py_DECREF(f);
    if (PyErr_Occurred() || fd < 0) {
        PyErr_Clear();
        return 0;
    }
    if (gl_wsgi_need_start(st) < 0) return -1;
    if (st->job != NULL && gl_wsgi_adopt(st->job) < 0) return -1;
    int rc, status = st->sent ? 0 : st->status;
    long wid = st->wid, gen = st->gen;
    Py_BEGIN_ALLOW_THREADS
    rc = glWsgiSendFD(wid, gen, status, st->hdr->p, st->hdr->n, (int)fd, off, -1);
    Py_END_ALLOW_THREADS
    if (rc == GL_WSGI_NOT_FILE) return 0;
    if (rc == GL_OK) {
        st->sent = 1;
        return 1;
    }
    if (rc == GL_ERR_DISCONNECTED) return -2;
    gl_wsgi_raise_send(st, rc);
    return -1;
}

/* Sends the parts of r's iterator from where it is (the rest of r->part first): 0 done, -1 the
 * application failed (raised), -2 the client went away, SENT_PAUSED: the output is over its
 * bound (the part being sent kept in r: the caller parks the response or waits). */
static int iterate(wsgi_resp *r) {
    GLWsgiStart *st = r->st;
    Py_ssize_t took;
    int rc;
    for (;;) {
        if (r->part != NULL) {
            Py_ssize_t n = PyBytes_GET_SIZE(r->part) - r->off;
            rc = gl_wsgi_send_part(st, PyBytes_AS_STRING(r->part) + r->off, n, 1, 1, r->end,
                                   r->off == 0 ? r->part : NULL, &took);
            if (rc == GL_OK || (rc == GL_WSGI_PAUSED && took == n)) {
                Py_CLEAR(r->part);
                r->off = 0;
            } else if (rc == GL_WSGI_PAUSED) {
                r->off += took;
            }
            if (rc == GL_WSGI_PAUSED) return SENT_PAUSED;
            if (rc == GL_ERR_DISCONNECTED) return -2;
            if (rc != GL_OK) {
                gl_wsgi_raise_send(st, rc);
                return -1;
            }
            if ((r->turn += took) >= GL_WSGI_TURN && !st->done) return SENT_TURN;
        }
        PyObject *b = PyIter_Next(r->it);
        if (b == NULL) break;
        if (!PyBytes_Check(b)) {
            PyErr_Format(PyExc_TypeError, "a WSGI response must yield bytes, not %.100s", Py_TYPE(b)->tp_name);
            Py_DECREF(b);
            return -1;
        }
        if (PyBytes_GET_SIZE(b) == 0) {  /* the head waits for the first non-empty part (PEP 3333) */
            Py_DECREF(b);
            continue;
        }
        r->part = b, r->off = 0;
        if (gl_wsgi_need_start(st) < 0) return -1;
    }
    if (PyErr_Occurred()) return -1;
    if (gl_wsgi_need_start(st) < 0) return -1;
    rc = gl_wsgi_send_part(st, NULL, 0, 0, 1, 0, NULL, &took);
    if (rc == GL_ERR_DISCONNECTED) return -2;
    if (rc != GL_OK) {
        gl_wsgi_raise_send(st, rc);
        return -1;
    }
    return 0;
}

/* Sends a list's or tuple's parts (seq: exact list or tuple): every part but the last with
 * more_body, the last flushed: a one-part answer gets its content-length and leaves in one
 * write. 0 done, -1 failed (raised), -2 the client went away. */
static int send_parts(GLWsgiStart *st, PyObject *seq) {
    int rc;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (gl_wsgi_need_start(st) < 0) return -1;
    for (Py_ssize_t i = 0; i < n || (n == 0 && i == 0); i++) {
        PyObject *b = n ? Py_NewRef(PySequence_Fast_GET_ITEM(seq, i)) : Py_NewRef(empty_bytes);
        if (!PyBytes_Check(b)) {
            PyErr_Format(PyExc_TypeError, "a WSGI response must be bytes, not %.100s", Py_TYPE(b)->tp_name);
            Py_DECREF(b);
            return -1;
        }
        int last = i >= n - 1;
        rc = (PyBytes_GET_SIZE(b) == 0 && !last)
                 ? GL_OK
                 : gl_wsgi_send_part(st, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b), !last, last, last, b, NULL);
        Py_DECREF(b);
        if (rc == GL_ERR_DISCONNECTED) return -2;
        if (rc != GL_OK) {
            gl_wsgi_raise_send(st, rc);
            return -1;
        }
    }
    return 0;
}

/* Sends the application's result (r->result): 0 done, -1 the application failed (raised), -2
 * the client went away, SENT_PAUSED (an iterable's: iterate's). result.close() is called by
 * the caller. */
static int send_result(GLWsgiServer *srv, wsgi_resp *r) {
    GLWsgiStart *st = r->st;
    PyObject *result = r->result;
    int rc;
    if (srv->file_wrapper != NULL && Py_TYPE(result) == (PyTypeObject *)srv->file_wrapper) {
        int r = send_wrapped_file(st, result);
        if (r != 0) return r == 1 ? 0 : r;
    }
    if (PyList_CheckExact(result) || PyTuple_CheckExact(result)) return send_parts(st, result);
    /* the part that completes the Content-Length ends the request (gl_wsgi_send_part's end) unless
     * the answer is a generator, whose code after its last yield (before its end) would
     * hold up the request taken with it */
    r->end = !PyGen_CheckExact(result);
    if ((r->it = PyObject_GetIter(result)) == NULL) return -1;
    /* A list's or tuple's own iterator with one part left (Django's HttpResponse iterates its
     * list of parts) never blocks: the part is taken at once and sent as a one-part list's, so
     * an answer without a Content-Length gets one and leaves in one write, not two (a chunked
     * part, then the last chunk). More parts go through iterate(), which parks rather than
     * hold the thread while a slow client reads. result.close() is still called (finish). */
    if (Py_IS_TYPE(r->it, &PyListIter_Type) || Py_IS_TYPE(r->it, &PyTupleIter_Type)) {
        Py_ssize_t left = PyObject_LengthHint(r->it, 2);  /* exact for these two types */
        if (left < 0) return -1;
        if (left > 1) return iterate(r);
        PyObject *parts = PySequence_List(r->it);
        Py_CLEAR(r->it);
        if (parts == NULL) return -1;
        rc = send_parts(st, parts);
        Py_DECREF(parts);
        return rc;
    }
    return iterate(r);
}

/* A pool thread's block for serve_thread, made now (with the GIL): 0, or -1 with an error. */
static int wsgi_thread_new(void) {
    gl_thread_state *ts = gl_thread();
    if (ts == NULL) return -1;
    if ((ts->wsgi = PyMem_Calloc(1, sizeof(wsgi_thread))) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* The thread's objects, its filled template and caches, released as it leaves the pool
 * (with the GIL: it owns them), and its block freed. */
static void wsgi_thread_free(void) {
    wsgi_thread *t = wt();
    Py_CLEAR(t->ctx);
    Py_CLEAR(t->base);
    Py_CLEAR(t->ftpl.tpl);
    Py_CLEAR(t->ftpl.src);
    t->ftpl.in = NULL;  /* (the template's) */
    gl_wsgi_release_start((GLWsgiStart *)t->st);
    t->st = NULL;
    Py_CLEAR(t->in);
    if (t->hc != NULL) {
        for (int i = 0; i < HKEY_SLOTS; i++) Py_XDECREF(t->hc->keys[i].key);
        for (int i = 0; i < HVAL_SLOTS; i++) Py_XDECREF(t->hc->vals[i].s);
        PyMem_Free(t->hc);
    }
    Py_CLEAR(t->c_remote.s);
    Py_CLEAR(t->c_server.s);
    for (int i = 0; i < PORT_SLOTS; i++) Py_CLEAR(t->ports[i].s);
    PyMem_RawFree(t->hdr.p);  /* (gbuf: raw) */
    gl_ts->wsgi = NULL;
    PyMem_Free(t);
}

/* Only the thread refers to its input (and its filled template, which holds it): reusable. */
static inline int input_unshared(GLWsgiInput *in) {
    return Py_REFCNT(in) == 1 + (wt()->ftpl.in == (PyObject *)in);
}

/* This thread's input and start_response for a new request (borrowed: the thread's), reset;
 * -1 with an error raised. Those of its last request are reused when nothing else refers to
 * them any more (no allocation and deallocation of three objects per request, ~350
 * instructions); an application that kept one gets new ones and its old ones stay ended (wid
 * -1: their calls fail). */
static int request_objects(GLWsgiInput **inp, GLWsgiStart **stp) {
    wsgi_thread *t = wt();
    GLWsgiInput *in = (GLWsgiInput *)t->in;
    if (in == NULL || !input_unshared(in)) {
        if ((in = PyObject_New(GLWsgiInput, &gl_wsgi_input_type)) == NULL) return -1;
        in->buf = NULL;
        Py_XSETREF(t->in, (PyObject *)in);
    }
    GLWsgiStart *st = (GLWsgiStart *)t->st;
    if (st == NULL || Py_REFCNT(st) != 1 + (st->write != NULL) || (st->write != NULL && Py_REFCNT(st->write) != 1)) {
        if ((st = PyObject_New(GLWsgiStart, &gl_wsgi_start_type)) == NULL) return -1;
        st->vectorcall = (vectorcallfunc)gl_wsgi_start_call;
        st->write = NULL;
        gl_wsgi_release_start((GLWsgiStart *)t->st);
        t->st = (PyObject *)st;
    }
    st->hdr = &t->hdr;
    t->hdr.n = 0;
    Py_CLEAR(in->buf);
    in->pos = 0, in->eof = 0, in->clen = -1, in->got = 0;
    *inp = in, *stp = st;
    return 0;
}

/* The response's end (done: send_result's or iterate's 0, -1 or -2): result.close() (always,
 * in the request's context: Flask's stream_with_context pops its context there), the access
 * hook, the request's objects ended (kept by the application: their calls fail), its context
 * left, a parked record's references released and its memory freed. 1 answered, 2 it failed. */
static int finish(GLWsgiServer *srv, wsgi_resp *r, int done) {
    GLWsgiStart *st = r->st;
    GLWsgiInput *in = r->in;
    int failed = done == -1;
    if (failed) log_error(srv);
    Py_CLEAR(r->part);
    Py_CLEAR(r->it);
    if (r->result != NULL && !PyList_CheckExact(r->result) && !PyTuple_CheckExact(r->result)) {
        PyObject *close;
        int has = get_optional_attr(r->result, WS(close), &close);
        if (has > 0) {
            PyObject *res = PyObject_CallNoArgs(close);
            Py_DECREF(close);
            if (res == NULL) {
                log_error(srv);
                failed = 1;
            }
            Py_XDECREF(res);
        } else if (has < 0) {
            log_error(srv);
        }
    }
    Py_CLEAR(r->result);
    if (srv->access != NULL && r->env != NULL) {  /* the access log, the request limit (goloop.serve.wsgi) */
        PyObject *code = PyLong_FromLong(st->sent ? st->status : 500);
        PyObject *res = code ? PyObject_CallFunctionObjArgs(srv->access, r->env, code, NULL) : NULL;
        if (res == NULL) PyErr_WriteUnraisable(srv->access);
        Py_XDECREF(res);
        Py_XDECREF(code);
    }
    st->wid = -1;  /* kept by the application: its calls now fail without reaching Go */
    in->wid = -1;
    Py_CLEAR(in->buf);  /* (its reads too, of a body that came with the head as well; and its */
    in->eof = 0;        /* last part is not held until the next request) */
    Py_CLEAR(r->env);
    if (r->entered && PyContext_Exit(r->ctx) < 0) PyErr_WriteUnraisable(NULL);
    Py_CLEAR(r->ctx);
    if (r->heap) {  /* the record's own references */
        gl_wsgi_release_start(st);
        Py_DECREF(in);
        PyMem_RawFree(r);
    }
    return failed ? 2 : 1;
}

/* A gbuf for the head of a parked response's start_response (its head was sent: never used;
 * its own thread's buffer may be freed while it is parked) */
static gbuf no_hdr;

/* r's output is over its bound (done SENT_PAUSED): the thread parks the response (Go keeps
 * it on the heap; a pool thread resumes it when the output drains or the client goes away)
 * and is free: 0. If it cannot (the pool stopped, no memory, its context not the current
 * one) it waits for the socket, GIL released, and goes on. r's turn is over (SENT_TURN):
 * parked the same way, but on the ready list at once, if requests wait for a thread; else
 * it goes on. When r's response ends: finish's 1 or 2. */
static int go_on(GLWsgiServer *srv, long wid, long gen, wsgi_resp *r, int done) {
    while (done == SENT_PAUSED || done == SENT_TURN) {
        int turn = done == SENT_TURN;
        gen = r->st->gen;  /* (a hand-off pool's request has its gen once adopted) */
        r->turn = 0;
        if (turn && !glWsgiWaiting(wid, gen)) {
            done = iterate(r);
            continue;
        }
        wsgi_resp *p = r->heap ? r : PyMem_RawMalloc(sizeof *p);
        if (p != NULL && PyContext_Exit(r->ctx) == 0) {
            r->entered = 0;
            r->st->wid = -1, r->in->wid = -1;  /* while parked: no thread's */
            r->st->hdr = &no_hdr;
            int first = !r->heap;
            if (first) *p = *r, p->heap = 1;
            if (glWsgiPark(wid, gen, p, turn) == GL_OK) {
                if (first) {  /* its st and in are the record's now */
                    wsgi_thread *t = wt();
                    t->st = NULL, t->in = NULL;
                }
                return 0;
            }
            if (first) p->heap = 0;  /* not parked: back as it was */
            r->st->wid = wid, r->in->wid = wid;
            r->st->hdr = &wt()->hdr;
            r->entered = PyContext_Enter(r->ctx) == 0;
        }
        PyErr_Clear();
        if (p != r) PyMem_RawFree(p);
        if (turn) {
            done = iterate(r);
            continue;
        }
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = glWsgiSendWait(wid, gen);
        Py_END_ALLOW_THREADS
        done = rc == GL_OK ? iterate(r) : rc == GL_ERR_DISCONNECTED ? -2 : (gl_wsgi_raise_send(r->st, rc), -1);
    }
    return finish(srv, r, done);
}

/* A new Context for a request (a new reference, or NULL with an error): a copy of the thread's
 * own (its variables as the thread began serving). On GIL builds the thread's one Context is
 * given those variables back (their mapping, immutable, shared), not a new Context made and
 * freed per request (a GC-tracked object); with its entry and exit ~60 instructions a request
 * (callgrind, bench/analysis/wsgi_instr.py --annotate). No code can reach the Context it runs
 * in (copy_context() copies it); one something kept (a parked response's record, a context
 * watcher) is left to it and the thread makes another. */
static PyObject *request_context(void) {
#ifdef GL_LAZY_CONTEXT
    wsgi_thread *t = wt();
    if (t->base == NULL) {  /* the thread's first request: its own variables */
        PyObject *cur = PyContext_CopyCurrent();
        if (cur == NULL) return NULL;
        t->base = Py_NewRef(CTX_VARS(cur));
        t->ctx = cur;
    } else if (Py_REFCNT(t->ctx) != 1) {
        PyObject *c = PyContext_New();
        if (c == NULL) return NULL;
        Py_SETREF(t->ctx, c);
    }
    Py_SETREF(CTX_VARS(t->ctx), Py_NewRef(t->base));
    return Py_NewRef(t->ctx);
#else
    return PyContext_CopyCurrent();
#endif
}

/* Runs the application for the request whose head is h, in a Context of its own (a copy of
 * the thread's: a response parked and resumed on another thread sees what it set, and
 * nothing it sets reaches the thread's next request): 1 answered, 2 it failed, 0 its
 * response was parked (go_on). */
static int handle(GLWsgiServer *srv, long wid, long gen, const GLHead *h) {
    wsgi_resp r = {0};
    if (request_objects(&r.in, &r.st) < 0) {
        log_error(srv);
        return 2;
    }
    GLWsgiInput *in = r.in;
    GLWsgiStart *st = r.st;
    in->wid = wid, in->gen = gen;
    st->wid = wid, st->gen = gen, st->status = 0, st->sent = 0, st->done = 0, st->clen = -1, st->body = 0;
    gl_wjob *j = wt()->job;  /* a hand-off pool's detached request (gen 0), or NULL */
    st->job = j, in->job = j;
    if (j != NULL) j->st = st, j->in = in;
    int done = -1;
    if (j != NULL && j->bodyn >= 0) {  /* its whole body came with it: wsgi.input has it, no call into Go */
        in->eof = 1;
        in->buf = j->bodyn > 0 ? PyBytes_FromStringAndSize(j->bigbody ? j->bigbody : j->small, j->bodyn) : NULL;
        if (j->bigbody != NULL) {  /* (the queue's memory, for the next large body) */
            gl_wq_body_put(j->q, j->bigbody);
            j->bigbody = NULL;
        }
        if (j->bodyn > 0 && in->buf == NULL) return go_on(srv, wid, gen, &r, done);
    }
    if ((r.ctx = request_context()) != NULL && (r.entered = PyContext_Enter(r.ctx) == 0) &&
        (r.env = gl_wsgi_environ(srv, h, (PyObject *)in)) != NULL) {
        PyObject *args[2] = {r.env, (PyObject *)st};
        if ((r.result = PyObject_Vectorcall(srv->app, args, 2, NULL)) != NULL) done = send_result(srv, &r);
    }
    return go_on(srv, wid, gen, &r, done);
}

/* Resumes the parked response r (glWsgiPark; the thread's request is its now): 1 or 2 when it
 * ends, 0 parked again (go_on). */
static int resume(GLWsgiServer *srv, long wid, long gen, wsgi_resp *r) {
    r->st->wid = wid, r->st->gen = gen;
    r->in->wid = wid, r->in->gen = gen;
    r->st->hdr = &wt()->hdr;
    r->turn = 0;
    if (!(r->entered = PyContext_Enter(r->ctx) == 0)) PyErr_WriteUnraisable(NULL);
    /* (a complete response, parked at its turn, has nothing to wait for: its client's loss
     * would not wake it) */
    int rc = r->st->done ? GL_OK : glWsgiReady(wid, gen);
    int done = rc == GL_OK ? iterate(r) : rc == GL_WSGI_PAUSED ? SENT_PAUSED : rc == GL_ERR_DISCONNECTED ? -2 : -1;
    if (done == -1 && rc != GL_OK) gl_wsgi_raise_send(r->st, rc);
    return go_on(srv, wid, gen, r, done);
}

/* ---------- the server ---------- */

/* serve_thread()'s loop in a hand-off pool (wsgi.h): take a request from the queue (GIL
 * released while it waits), answer it detached (gen 0: no call into Go) unless it adopts it. */
static void serve_handoff(GLWsgiServer *self, long wid) {
    wsgi_thread *t = wt();
    gl_wjob *j;
    while ((j = gl_wq_next(self->wq)) != NULL) {
        j->wid = wid, j->owner = t, j->st = NULL, j->in = NULL;
        t->job = j, t->adopted = 0;
        t->pass.ended = 0, t->pass.idle = 0, t->pass.next = NULL;
        int finish;
        if (j->head.resume != NULL) {  /* a parked response (glWsgiPark): the thread's in Go first */
            wsgi_resp *rec = j->head.resume;
            long gen = gl_wsgi_adopt(j);
            if (gen < 0) {  /* (not Go's any more: resumed with no request, it ends, its record freed) */
                PyErr_Clear();
                gen = 0;
            }
            finish = resume(self, wid, gen, rec);
        } else {
            finish = handle(self, wid, 0, &j->head);
        }
        if (t->job != NULL) {  /* nothing sent (the application failed, or sent nothing) */
            gl_wsgi_detached_fail(t->job, finish);
        } else if (t->adopted && !t->pass.ended) {
            long gen = 0;
            glWsgiTake(wid, finish, &gen);  /* ends it (a hand-off pool has no ready list: none taken) */
        }
        t->adopted = 0;
    }
}

/* serve_thread(): a pool thread's loop: wait for a request (GIL released), answer it; returns
 * when the server is released. */
static PyObject *srv_serve_thread(GLWsgiServer *self, PyObject *Py_UNUSED(ignored)) {
    GL_FORK_GUARD(NULL);
    if (self->base.sid < 0) Py_RETURN_NONE;
    if (wsgi_thread_new() < 0) return NULL;
    long wid = glWsgiWorkerNew(self->wsid);
    if (wid < 0) {
        wsgi_thread_free();
        Py_RETURN_NONE;
    }
    wsgi_thread *t = wt();
    int finish = 0;
    /* a hand-off pool's thread: until the pool stops; then, as any pool thread, it resumes
     * the parked responses left (glWsgiNext) */
    if (self->wq != NULL) serve_handoff(self, wid);
    for (;;) {
        GLHead *h = NULL;
        long gen = 0;
        int claim = 0;
        /* the request just answered ended and the next taken with the GIL kept when this
         * thread may (wsgi.go's glWsgiTake; in the call that sent the last part: pass);
         * else wait for one with the GIL released */
        if (t->pass.ended) {
            h = t->pass.next, gen = t->pass.gen;
        } else if (finish && !t->pass.idle) {
            h = glWsgiTake(wid, finish, &gen);
        }
        if (h == NULL) {
            Py_BEGIN_ALLOW_THREADS
            h = glWsgiNext(wid, finish, &gen, &claim);
            Py_END_ALLOW_THREADS
        }
        finish = 0, t->pass.ended = 0, t->pass.idle = 0, t->pass.next = NULL;
        /* a request is ready while other pool threads run the app: taken only now that this
         * thread holds the GIL (none if another thread took it first) */
        if (h == NULL && claim && (h = glWsgiClaim(wid, &gen)) == NULL) continue;
        if (h == NULL) break;
        /* the app is called with this thread's state; the objects of the request (the
         * input and start_response) may outlive it: they hold (wid, gen), which Go checks.
         * A parked response (its output over the bound) is resumed by any pool thread. */
        finish = h->resume != NULL ? resume(self, wid, gen, h->resume) : handle(self, wid, gen, h);
    }
    wsgi_thread_free();
    glWsgiWorkerFree(wid);
    Py_RETURN_NONE;
}

static int wsrv_init(GLWsgiServer *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"loop", "app", "environ", "max_head", "keep_alive_ms", "limit_concurrency",
                             "server_header", "date_header", "headers", "on_error", "file_wrapper", "root_path",
                             "access", NULL};
    PyObject *loop, *app, *env, *on_error, *file_wrapper, *access = Py_None;
    long max_head, ka, limit;
    int server_header, date_header;
    const char *headers, *root;
    Py_ssize_t hlen, rootlen;
    GL_FORK_GUARD(-1);
    if (self->base.sid >= 0) {
        PyErr_SetString(PyExc_RuntimeError, "WsgiServer already initialized");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO!lllppy#OOy#|O", kwlist, &loop, &app, &PyDict_Type, &env,
                                     &max_head, &ka, &limit, &server_header, &date_header, &headers, &hlen,
                                     &on_error, &file_wrapper, &root, &rootlen, &access))
        return -1;
    if (!PyObject_TypeCheck(loop, gl_loop_type())) {
        PyErr_SetString(PyExc_TypeError, "WsgiServer needs a goloop loop");
        return -1;
    }
    self->base.loop = Py_NewRef(loop);
    self->app = Py_NewRef(app);
    self->environ_tpl = Py_NewRef(env);
    self->on_error = Py_NewRef(on_error);
    self->file_wrapper = Py_NewRef(file_wrapper);
    if (access != Py_None) self->access = Py_NewRef(access);
    if (rootlen > 0) {
        if ((self->root = PyMem_Malloc(rootlen)) == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(self->root, root, rootlen);
        self->rootlen = rootlen;
    }
    int eager = 0;  /* no GIL (sys._is_gil_enabled() false): idle threads are woken at once */
#ifdef Py_GIL_DISABLED
    PyObject *f = PySys_GetObject("_is_gil_enabled"), *on = f ? PyObject_CallNoArgs(f) : NULL;
    if (on == NULL) PyErr_Clear();
    eager = on == Py_False;
    Py_XDECREF(on);
#endif
    if (glWsgiServerNew(&self->base, (GLLoop *)loop, max_head, ka, limit, server_header, date_header, (char *)headers,
                        hlen, eager, &self->wsid, (void **)&self->wq) < 0)
        return -1;
    return 0;
}

static int wsrv_traverse(GLWsgiServer *self, visitproc visit, void *arg) {
    Py_VISIT(self->app);
    Py_VISIT(self->environ_tpl);
    Py_VISIT(self->on_error);
    Py_VISIT(self->file_wrapper);
    Py_VISIT(self->access);
    return gl_server_traverse(&self->base, visit, arg);
}

static int wsrv_clear(GLWsgiServer *self) {
    Py_CLEAR(self->app);
    Py_CLEAR(self->environ_tpl);
    Py_CLEAR(self->on_error);
    Py_CLEAR(self->file_wrapper);
    Py_CLEAR(self->access);
    return 0;
}

static void wsrv_dealloc(GLWsgiServer *self) {
    PyObject_GC_UnTrack(self);
    gl_server_release(&self->base);
    gl_wq_free(self->wq);  /* (no pool thread runs: each holds this object; Go's leader left at the release) */
    self->wq = NULL;
    Py_CLEAR(self->app);
    Py_CLEAR(self->environ_tpl);
    Py_CLEAR(self->on_error);
    Py_CLEAR(self->file_wrapper);
    Py_CLEAR(self->access);
    PyMem_Free(self->root);
    self->root = NULL;
    gl_server_dealloc(&self->base);
}

/* handoff_counts(): a hand-off pool's (requests answered detached, requests adopted), or None */
static PyObject *srv_handoff_counts(GLWsgiServer *self, PyObject *Py_UNUSED(ignored)) {
    if (self->wq == NULL) Py_RETURN_NONE;
    return Py_BuildValue("(ll)", __atomic_load_n(&self->wq->ndetached, __ATOMIC_RELAXED),
                         __atomic_load_n(&self->wq->nadopted, __ATOMIC_RELAXED));
}

static PyMethodDef wsrv_methods[] = {
    {"serve_thread", (PyCFunction)srv_serve_thread, METH_NOARGS,
     "Answer requests in this thread until the server is released (a pool thread's run)."},
    {"handoff_counts", (PyCFunction)srv_handoff_counts, METH_NOARGS,
     "A hand-off pool's (requests answered with no call into Go, requests adopted), or None."},
    {NULL}};

static PyTypeObject WsgiServerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop._goloop.WsgiServer",
    .tp_basicsize = sizeof(GLWsgiServer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "goloop serve's WSGI server on a goloop loop: requests answered by pool threads (goloop.serve.wsgi).",
    .tp_init = (initproc)wsrv_init,
    .tp_dealloc = (destructor)wsrv_dealloc,
    .tp_traverse = (traverseproc)wsrv_traverse,
    .tp_clear = (inquiry)wsrv_clear,
    .tp_methods = wsrv_methods,
};

int gl_init_wsgi(PyObject *m) {
#define WSGI_INTERN(name, text) if ((WS(name) = PyUnicode_InternFromString(text)) == NULL) return -1;
    WSGI_STRINGS(WSGI_INTERN)
#undef WSGI_INTERN
    if ((empty_bytes = PyBytes_FromStringAndSize(NULL, 0)) == NULL) return -1;
    WsgiServerType.tp_base = gl_server_type();
    if (PyType_Ready(&WsgiServerType) < 0 || PyType_Ready(&gl_wsgi_start_type) < 0 || PyType_Ready(&gl_wsgi_write_type) < 0 ||
        PyType_Ready(&gl_wsgi_input_type) < 0)
        return -1;
    return PyModule_AddObjectRef(m, "WsgiServer", (PyObject *)&WsgiServerType);
}
