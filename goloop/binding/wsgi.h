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
/* (wsgi.c) a body part past the response's Content-Length, once the body it declared was sent */
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

#endif
