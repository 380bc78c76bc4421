/* goloop serve --interface wsgi: the C objects of the WSGI server (wsgi.c) and what wsgi.go
 * calls. A WsgiServer is an HttpServer (server.h: its listening, TLS, limits, proxy headers,
 * metrics, close/abort/stats are the Go server's) whose requests are answered by a pool of
 * Python threads, each in WsgiServer.serve_thread(). */
#ifndef GOLOOP_WSGI_H
#define GOLOOP_WSGI_H
#include "server.h"

typedef struct {
    GLServer base;
    long wsid;               /* Go pool id (wsgi.go) */
    PyObject *app;           /* the WSGI application */
    PyObject *environ_tpl;   /* the environ's constant items, and None for each per-request key */
    PyObject *on_error;      /* on_error(exc): logs an application's exception */
    PyObject *file_wrapper;  /* the wsgi.file_wrapper class (sent with SendFD when it wraps a file) */
    PyObject *access;        /* access(environ, status) after each request (access log, request limit), or NULL */
    char *root;              /* --root-path as latin-1 bytes (PyMem), stripped from PATH_INFO */
    Py_ssize_t rootlen;
    struct gl_wq *wq;        /* the hand-off pool's queues (wsgi_handoff.c), or NULL: leader/follower */
} GLWsgiServer;

int gl_init_wsgi(PyObject *m);

/* Go's answer to a file wrapper that is not a regular file: iterate it instead */
#define GL_WSGI_NOT_FILE (-5)
/* (wsgi_response.c) a body part past the response's Content-Length, once the body it declared was sent */
#define GL_WSGI_TOO_LONG (-6)
/* glWsgiSend with wait 0 or 2, glWsgiSendLarge with park: the part was taken (or *taken bytes
 * of it), the output is over its bound (glWsgiSendWait, or wsgi.c parks the response) */
#define GL_WSGI_PAUSED (-7)
/* glWsgiSend with wait 0: another pool thread may want the GIL: nothing done, call again
 * with the GIL released */
#define GL_WSGI_RELEASE (-8)
/* glWsgiSend with wait 0: GL_OK, and no request was ready (glWsgiTake would find none) */
#define GL_WSGI_SENT_IDLE (-9)
/* a body part up to this size is sent with the GIL held while no other pool thread runs (the
 * socket is written, the thread waits only if the output is over its bound: then without
 * the GIL) */
#define GL_WSGI_HOLD_MAX (16 * 1024)
/* a hand-off pool's request body up to this size that arrived whole with its head goes to the
 * pool thread with the request (the server's BodyBuffer by default: what a request's reading
 * holds unread before it pauses) */
#define GL_WSGI_BODY_MAX (64 * 1024)
/* a detached answer (wsgi.h's hand-off pool) of a body up to this size: one part of up to
 * GL_WSGI_BODY_MAX with its head lines, in a buffer of GL_WQ_BIG bytes */
#define GL_WQ_BIG (GL_WSGI_BODY_MAX + GL_WSGI_HOLD_MAX)
/* how many such buffers (a large body's, a large answer's) a hand-off pool keeps for the next
 * ones (gl_wq.spare) */
#define GL_WQ_SPARE_BODIES 8

/* ---------- shared by wsgi*.c (the C files of the WSGI interface) ---------- */

/* The environ's interned strings: WS(name) is the str of X(name, text). */
#define WSGI_STRINGS(X)                        \
    X(REQUEST_METHOD, "REQUEST_METHOD")        \
    X(SCRIPT_NAME, "SCRIPT_NAME")              \
    X(PATH_INFO, "PATH_INFO")                  \
    X(QUERY_STRING, "QUERY_STRING")            \
    X(CONTENT_TYPE, "CONTENT_TYPE")            \
    X(CONTENT_LENGTH, "CONTENT_LENGTH")        \
    X(SERVER_NAME, "SERVER_NAME")              \
    X(SERVER_PORT, "SERVER_PORT")              \
    X(SERVER_PROTOCOL, "SERVER_PROTOCOL")      \
    X(REMOTE_ADDR, "REMOTE_ADDR")              \
    X(REMOTE_PORT, "REMOTE_PORT")              \
    X(HTTP_COOKIE, "HTTP_COOKIE")              \
    X(url_scheme, "wsgi.url_scheme")           \
    X(input, "wsgi.input")                     \
    X(p10, "HTTP/1.0")                         \
    X(p11, "HTTP/1.1")                         \
    X(p2, "HTTP/2")                            \
    X(p3, "HTTP/3")                            \
    X(close, "close")                          \
    X(fileno, "fileno")                        \
    X(tell, "tell")                            \
    X(filelike, "filelike")                    \
    X(empty, "")                               \
    X(zero, "0")                               \
    X(GET, "GET")                              \
    X(slash, "/")
typedef struct {
#define WSGI_FIELD(name, text) PyObject *name;
    WSGI_STRINGS(WSGI_FIELD)
#undef WSGI_FIELD
} GLWsgiStrings;
extern GLWsgiStrings gl_wsgi_str;  /* wsgi.c interns them (gl_init_wsgi) */
#define WS(name) (gl_wsgi_str.name)

/* The pool thread's caches of a header's environ key ("HTTP_USER_AGENT" for user-agent) and
 * of its values (a client sends the same Host, Accept, User-Agent, ... on every request: the
 * str of the last value of a slot is used again, not made and freed per request). */
#define HKEY_SLOTS 128
#define HKEY_MAX 40
#define HVAL_SLOTS 64
#define HVAL_MAX 64
typedef struct {
    unsigned char len;
    char name[HKEY_MAX];
    PyObject *key;
} hkey_entry;
typedef struct {
    Py_ssize_t len;
    PyObject *s;
    char v[HVAL_MAX];
} hval_entry;
typedef struct {
    hkey_entry keys[HKEY_SLOTS];
    hval_entry vals[HVAL_SLOTS];
} hcache;

/* A str of host (latin-1/ASCII), the last one of this slot when host is the same. */
typedef struct {
    PyObject *s;
    char key[64];
    Py_ssize_t len;
} str_cache;

/* The str of a port number (SERVER_PORT, REMOTE_PORT), from the thread's table (wsgi_thread.ports) by the port
 * modulo a prime: a keep-alive connection's requests find their client's port there (no
 * printf: PyUnicode_FromFormat("%d") was ~1,300 instructions a request, snprintf ~700). Linux
 * gives a client's connections ports two apart: modulo 64 they used half the slots, and ten
 * connections of one client shared slots in turn (~20% misses in a -c10 run), modulo 67 none. */
#define PORT_SLOTS 67
typedef struct {
    int port;
    PyObject *s;
} port_entry;

/* The server's template with the items a TCP connection keeps from request to request
 * filled in (SERVER_NAME, SERVER_PORT, SERVER_PROTOCOL, REMOTE_ADDR), per pool thread, made
 * again when they change: copying it costs what copying the template costs, and each
 * request sets four items fewer (~600 instructions). Cleared when the thread leaves. */
typedef struct {
    PyObject *src;  /* the template it was made from (strong: its address cannot be reused) */
    PyObject *tpl;
    PyObject *in;   /* the thread's wsgi.input that tpl holds (borrowed: tpl's), or NULL */
    int cport;      /* the REMOTE_PORT tpl holds (its last request's), -1: none */
    int sport, proto;
    Py_ssize_t shostlen, chostlen;
    char shost[64], chost[64];
} filled_tpl;

/* A pool thread's request handed on from the end of one request to its loop (serve_thread):
 * ended: send_part's part with more 0 and end (a list or tuple answer's last part, an
 * iterable's part that completes its Content-Length) ended the request in the same call
 * (glWsgiSendEnd), next (gen): the request it took then, or NULL (its head is in the
 * thread's head buffer, where the ended request's was: neither handle nor send_result reads
 * its head after its first send); idle: the last part sent found no request ready (glWsgiSend's
 * GL_WSGI_SENT_IDLE): glWsgiTake is not called. */
typedef struct {
    int ended, idle;
    GLHead *next;
    long gen;
} pass_state;

/* A pool thread's own objects and caches: made by its serve_thread() as it starts (PyMem,
 * with the GIL), found through the thread's gl_thread_state (one thread-local load, where a
 * _Thread_local variable of a shared library costs a __tls_get_addr call), and released by
 * serve_thread() as it returns, with the GIL (wsgi_thread_free): the objects it refers to are
 * its own strong references (in, st, hc's and the caches' strs, ftpl's src and tpl). */
typedef struct {
    hcache *hc;          /* made at the first header (PyMem) */
    PyObject *in, *st;   /* its last request's wsgi.input and start_response (request_objects) */
    gbuf hdr;            /* the head of its response (GLWsgiStart's hdr) */
    str_cache c_remote, c_server;
    port_entry ports[PORT_SLOTS];
    filled_tpl ftpl;
    pass_state pass;
    /* The Context its requests run in (wsgi.c's request_context; GIL builds): made once and
     * given back the thread's own variables (base) at each request, unless something else
     * kept it (a parked response: its record's now); free-threaded: NULL (a copy a request) */
    PyObject *ctx, *base;
    /* hand-off pool (wsgi_handoff.c): the request taken from the queue while it is detached
     * (no Go call made for it), and whether it was adopted (Go made it the thread's) */
    struct gl_wjob *job;
    int adopted;
} wsgi_thread;

/* The calling pool thread's block (only a pool thread, inside serve_thread, calls this). */
static inline wsgi_thread *wt(void) { return (wsgi_thread *)gl_ts->wsgi; }

/* wsgi_input.c: wsgi.input */
struct gl_wjob;
typedef struct {
    PyObject_HEAD
    long wid, gen;
    struct gl_wjob *job; /* hand-off pool: the request while no Go call was made for it (gen 0) */
    PyObject *buf;     /* the body part being read (bytes) or NULL */
    Py_ssize_t pos;    /* read up to here in buf */
    long long clen;    /* the request's Content-Length (-1: none; wsgi_environ.c sets it) */
    long long got;     /* body bytes taken from Go so far */
    char eof;          /* the last part was taken */
} GLWsgiInput;
extern PyTypeObject gl_wsgi_input_type;

/* wsgi_response.c: start_response (one per pool thread, reused) and the write callable */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    long wid, gen;
    struct gl_wjob *job; /* as GLWsgiInput's */
    int status;       /* start_response's status; 0: not called */
    char sent;        /* the head went to Go */
    char done;        /* the body went to Go whole (its last part: nothing more is sent) */
    long long clen;   /* the application's Content-Length (-1: none, or not one number) */
    long long body;   /* body bytes sent */
    gbuf *hdr;        /* the status's reason and "\r\n", then the header lines ("name: value\r\n",
                       * names as the application wrote them): glWsgiSend's hdr. The pool
                       * thread's buffer (wsgi_thread.hdr), used only while the request runs (wid >= 0):
                       * no allocation per request */
    PyObject *write;  /* the write callable start_response returns (made at its first call, kept
                       * with this object for the thread's next requests); it refers to this
                       * object too: the cycle is broken by gl_wsgi_release_start */
} GLWsgiStart;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    GLWsgiStart *st;
} GLWsgiWrite;
extern PyTypeObject gl_wsgi_start_type, gl_wsgi_write_type;
PyObject *gl_wsgi_start_call(GLWsgiStart *self, PyObject *const *args, size_t nargsf, PyObject *kwnames);
PyObject *gl_wsgi_raise_send(GLWsgiStart *st, int rc);  /* a send's error code raised: NULL */
int gl_wsgi_send_part(GLWsgiStart *st, const char *p, Py_ssize_t n, int more, int flush, int end, PyObject *obj,
                      Py_ssize_t *taken);
int gl_wsgi_need_start(GLWsgiStart *st);
void gl_wsgi_release_start(GLWsgiStart *st);  /* drops a start_response and its write */

/* wsgi_handoff.c: the hand-off pool (the default; GOLOOP_WSGI_POOL=leader: the
 * leader/follower pool, wsgi.go). A goroutine reads and parses (wsgi_handoff.go's ioLoop);
 * each request goes to the pool threads through a C queue (gl_wq_push: its head copied into
 * the job's own C memory), a thread takes it holding the GIL (gl_wq_next: it waits with the
 * GIL released, one thread at a time woken for the queue; wsgi_handoff.c's wq_wake_one) and
 * runs the application with no call into Go (detached, gen 0): a response that ends in one
 * part of up to GL_WSGI_BODY_MAX bytes (a list or tuple answer, a part completing its
 * Content-Length) is copied into the job, which goes back to Go through a second queue
 * (gl_wq_complete: the poller's eventfd wakes the goroutine when it sleeps), and Go writes
 * it. An HTTP/1.1 body of up to GL_WSGI_BODY_MAX bytes that arrived whole before the request
 * was handed over goes in the job too (httpserver.Request.TakeWhole): wsgi.input reads it
 * there. Anything else (reading a body still arriving, or a larger one, a response in parts,
 * write(), a file, a large part,
 * a length other than its Content-Length, a parked response resumed) adopts the request
 * first (gl_wsgi_adopt: Go makes it the thread's as a leader/follower pool's, and the calls
 * go on as there). Why: a thread
 * that called into Go keeps a P of Go's runtime, as a system call, while it runs Python and
 * waits for its database, and Go's monitor takes such Ps back on its ticks, 20 µs apart
 * while it finds them (docs/bounds.md, "WSGI"). */
typedef struct gl_wjob {
    struct gl_wjob *next;    /* in the queue it is on */
    struct gl_wjob *all;     /* every job of its queue (freed with it) */
    struct gl_wq *q;
    GLHead head;             /* filled by Go (wsgi_handoff.go); its strings in scratch */
    void *scratch;           /* (malloc, Go's headBuf memory) */
    long scratchlen;
    long token;              /* Go's index of the request it carries */
    long wid;                /* the pool thread that took it */
    wsgi_thread *owner;      /* that thread's block (gl_wsgi_adopt sets its adopted) */
    GLWsgiStart *st;         /* the request's objects while detached (borrowed) */
    GLWsgiInput *in;
    /* The request's whole body when Go took it with the head (bodyn >= 0; -1: Go keeps it):
     * wsgi.input reads it with no call into Go. Up to GL_WSGI_HOLD_MAX bytes in the job's own
     * memory (small, smallcap bytes, malloc: it grows to the largest it carried), a larger one
     * in a buffer of the queue's (bigbody, gl_wq_body_get), given back once the thread made
     * its bytes (wsgi.c's handle) or when Go reuses the job (takeBody); as out and bigout. */
    Py_ssize_t bodyn;
    char *small, *bigbody;
    Py_ssize_t smallcap;
    int status;              /* the response's status; 0: none (Go ends the request with finish) */
    int finish;              /* 1 answered, 2 the application failed */
    char *out;               /* status reason and header lines (hdrlen bytes), then the body (malloc;
                              * answers of a body up to GL_WSGI_HOLD_MAX), or NULL */
    Py_ssize_t outn, outcap, hdrlen;
    char *bigout;            /* or a larger answer's, in a buffer of the queue's, or NULL: Go gives it
                              * back once Send copied it (gl_wq_body_put), or, held by the connection
                              * (SendHeld, no copy), once the kernel took it (gl_wq_body_release) */
} gl_wjob;

typedef struct gl_wq {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    gl_wjob *head, *tail;    /* requests for the pool */
    gl_wjob *done, *dtail;   /* answered, for Go */
    gl_wjob *all;
    long njobs;
    int waiting;             /* pool threads waiting in gl_wq_next */
    int wakes;               /* of them, woken for a request and not yet running (wq_wake_one) */
    int hunting;             /* threads woken for a request, on their way to the GIL to take it */
    int stopped;
    int go_sleeps;           /* Go's leader found nothing: the next completion writes efd */
    int efd;                 /* a duplicate of the poller's eventfd, which wakes the leader (the queue's:
                              * it stays valid after the poller is closed) */
    long ndetached, nadopted;  /* requests answered detached, adopted (WsgiServer.handoff_counts) */
    /* the memory of bodies and answers over GL_WSGI_HOLD_MAX (GL_WQ_BIG bytes each) given back,
     * kept for the next ones: memory freed and taken again per request would be faulted in
     * again */
    char *spare[GL_WQ_SPARE_BODIES];
    int nspare;
    /* answers' buffers Go's connections hold until the kernel took them (gl_wq_body_held):
     * gl_wq_free leaves the queue to the last one's release (freed: gl_wq_free was called) */
    int held, freed;
} gl_wq;

gl_wq *gl_wq_new(int efd);                    /* NULL: no memory */
char *gl_wq_body_get(gl_wq *q);               /* a big body's or answer's memory (GL_WQ_BIG bytes), NULL: none */
void gl_wq_body_put(gl_wq *q, char *b);       /* its memory back (kept for the next, or freed) */
void gl_wq_body_held(gl_wq *q, int d);        /* d answers' buffers more (or less) held by connections, */
void gl_wq_body_release(gl_wq *q, char *b);   /* ... one of which gives its back (any thread) */
void gl_wq_free(gl_wq *q);                    /* its jobs, efd (no thread uses it any more) */
gl_wjob *gl_wq_job_new(gl_wq *q);             /* Go: a new job (its token the next), NULL: no memory */
void gl_wq_push(gl_wq *q, gl_wjob *j);        /* Go: a request for the pool */
gl_wjob *gl_wq_next(gl_wq *q);                 /* a pool thread (GIL held): the next request, waiting for it
                                                 without the GIL; NULL: the pool stopped */
void gl_wq_complete(gl_wq *q, gl_wjob *j);     /* a pool thread: j answered (or ended), to Go */
gl_wjob *gl_wq_done_take(gl_wq *q);           /* Go: the answered (a list), or NULL (and go_sleeps) */
gl_wjob *gl_wq_stop(gl_wq *q);                /* Go: no more requests; the ones not taken (a list) */
void gl_wq_wake(gl_wq *q);                    /* wakes the leader (efd) */
long gl_wsgi_adopt(gl_wjob *j);               /* the request made the thread's in Go: its gen, -1 raised */
int gl_wq_pending(gl_wq *q);                  /* Go: requests wait in the queue */
int gl_wsgi_detached_end(GLWsgiStart *st, const char *p, Py_ssize_t n);  /* 1 handed to Go, 0 adopt instead */
void gl_wsgi_detached_fail(gl_wjob *j, int finish);  /* ended with nothing sent: to Go (finish 1 or 2) */

/* wsgi_environ.c: the environ */
PyObject *gl_wsgi_environ(GLWsgiServer *srv, const GLHead *h, PyObject *input);

#endif
