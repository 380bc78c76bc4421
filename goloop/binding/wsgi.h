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
} GLWsgiServer;

int gl_init_wsgi(PyObject *m);

/* Go's answer to a file wrapper that is not a regular file: iterate it instead */
#define GL_WSGI_NOT_FILE (-5)
/* (wsgi_response.c) a body part past the response's Content-Length, once the body it declared was sent */
#define GL_WSGI_TOO_LONG (-6)
/* glWsgiSend with wait 0: the part was taken, the output is over its bound (glWsgiSendWait) */
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

/* ---------- shared by wsgi*.c (the C files of the WSGI interface) ---------- */

/* The address of a thread-local, computed once: GCC otherwise calls __tls_get_addr again (~15
 * instructions in a shared library) at each use of the variable in a function. */
#define TLS_PTR(var) ({ __typeof__(&(var)) p_ = &(var); __asm__("" : "+r"(p_)); p_; })

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

/* wsgi_input.c: wsgi.input */
typedef struct {
    PyObject_HEAD
    long wid, gen;
    PyObject *buf;     /* the body part being read (bytes) or NULL */
    Py_ssize_t pos;    /* read up to here in buf */
    char eof;          /* the last part was taken */
} GLWsgiInput;
extern PyTypeObject gl_wsgi_input_type;

/* wsgi_response.c: start_response (one per pool thread, reused) and the write callable */
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
} GLWsgiPass;
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    long wid, gen;
    int status;       /* start_response's status; 0: not called */
    char sent;        /* the head went to Go */
    char done;        /* the body went to Go whole (its last part: nothing more is sent) */
    long long clen;   /* the application's Content-Length (-1: none, or not one number) */
    long long body;   /* body bytes sent */
    gbuf *hdr;        /* the status's reason and "\r\n", then the header lines ("name: value\r\n",
                       * names as the application wrote them): glWsgiSend's hdr. The pool
                       * thread's buffer (wsgi.c's tobj.hdr), used only while the request runs (wid >= 0):
                       * no allocation per request */
    GLWsgiPass *pass; /* the pool thread's (wsgi.c): what its last send ended or took */
    PyObject *write;  /* the write callable start_response returns (made at its first call, kept
                       * with this object for the thread's next requests); it refers to this
                       * object too: the cycle is broken by wsgi.c's release_start */
} GLWsgiStart;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    GLWsgiStart *st;
} GLWsgiWrite;
extern PyTypeObject gl_wsgi_start_type, gl_wsgi_write_type;
PyObject *gl_wsgi_start_call(GLWsgiStart *self, PyObject *const *args, size_t nargsf, PyObject *kwnames);
PyObject *gl_wsgi_raise_send(GLWsgiStart *st, int rc);  /* a send's error code raised: NULL */
int gl_wsgi_send_part(GLWsgiStart *st, const char *p, Py_ssize_t n, int more, int flush, int end, PyObject *obj);
int gl_wsgi_need_start(GLWsgiStart *st);

/* wsgi_environ.c: the environ */
PyObject *gl_wsgi_environ(GLWsgiServer *srv, const GLHead *h, PyObject *input);
int gl_wsgi_environ_holds(PyObject *in);
void gl_wsgi_environ_release(void);

#endif
