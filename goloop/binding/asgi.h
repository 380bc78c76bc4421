/* goloop serve's binding: the C objects of the ASGI server (asgi.c) and what asgi.go calls.
 * Everything here runs on the thread of the loop the server belongs to. */
#ifndef GOLOOP_ASGI_H
#define GOLOOP_ASGI_H
#include "gl.h"

/* _goloop.AsgiServer: Python's handle on a Go asgi.Server attached to a loop. */
typedef struct {
    PyObject_HEAD
    long sid;              /* Go server id; -1 once released */
    PyObject *loop;
    PyObject *runner;      /* runner(scope, receive, send) -> coroutine */
    PyObject *template;    /* the scope's constant items */
    PyObject *state;       /* lifespan state (dict) or NULL */
    PyObject *app;         /* set: an HTTP request calls app itself (not runner, which is still
                              the websocket's) and its coroutine runs in an AsgiRun (asgi_run.c) */
    PyObject *on_error;    /* with app: on_error(exc) logs an application's exception */
    /* the scope's last addresses, reused while they stay the same (asgi.c addr_cached) */
    PyObject *c_host, *s_addr;                  /* client host (str), server (host, port) */
    char c_key[64], s_key[64];
    Py_ssize_t c_keylen, s_keylen;
    int s_port;
} GLAsgiServer;

/* `send` of one request (and the state receive shares). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    long rid;              /* Go request id; -1 once released */
    GLAsgiServer *srv;
    PyObject *recv_fut;    /* the Future receive() returned, until resolved */
    PyObject *send_fut;    /* the Future send() returned (backpressure), until resolved */
} GLAsgiSend;

/* Called by asgi.go. */
int gl_asgi_request(GLAsgiServer *srv, long rid, const char *blob, const int32_t *ends, int nends,
                    int major, int minor, const char *chost, Py_ssize_t chostlen, int cport,
                    const char *shost, Py_ssize_t shostlen, int sport, int is_unix,
                    const char *proxy, Py_ssize_t proxylen, PyObject *ext);
int gl_asgi_wake(GLAsgiSend *s);
PyObject *gl_bytes(const char *p, Py_ssize_t n);
PyObject *gl_asgi_headers(const char *blob, const int32_t *ends, int nh);  /* the scope's headers */
PyObject *gl_asgi_addr(const char *host, Py_ssize_t hlen, int port, int is_unix);  /* (host, port|None) */
int gl_init_asgi(PyObject *m);
/* asgi_run.c */
PyObject *gl_asgi_run_new(PyObject *awaitable, GLAsgiSend *send, PyObject *on_error);
int gl_init_asgi_run(PyObject *m);
int gl_asgi_is_run(PyObject *o);
/* asgi_spec.c: http.response.trailers and http.response.pathsend; asgi.c's header lines */
int gl_asgi_start_trailers(GLAsgiSend *self, PyObject *msg);
PyObject *gl_asgi_send_ext(GLAsgiSend *self, PyObject *type, PyObject *msg);
int gl_init_asgi_spec(void);
int gl_asgi_ws_extensions(PyObject *scope, PyObject *http_ext);
PyObject *gl_asgi_tls_ext(GLAsgiServer *srv, const char *blob, const int32_t *ends, int nends, int version,
                          int cipher);
int gl_asgi_header_lines(PyObject *headers);
const char *gl_asgi_hdrbuf(Py_ssize_t *n);
/* asgi.c's helpers for asgi_ws.c */
PyObject *gl_asgi_done(PyObject *value);
void gl_asgi_resolve(PyObject *fut, PyObject *value, int is_exception);
PyObject *gl_asgi_client_disconnected(void);

/* WebSocket (asgi_ws.c) */
int gl_asgi_ws_request(GLAsgiServer *srv, long rid, const char *blob, const int32_t *ends, int nends,
                       const char *chost, Py_ssize_t chostlen, int cport, const char *shost,
                       Py_ssize_t shostlen, int sport, int is_unix, const char *protos, Py_ssize_t protolen,
                       const char *proxy, Py_ssize_t proxylen, PyObject *ext);
int gl_asgi_ws_wake(GLAsgiSend *s);
PyObject *gl_ws_text(const char *p, Py_ssize_t n);
int gl_init_asgi_ws(PyObject *m);

/* asgi_ops.c: proxy headers, metrics, configuration (off the per-request path) */
int gl_asgi_proxy_scope(PyObject *scope, const char *enc, Py_ssize_t n);
PyObject *gl_asgi_srv_configure(GLAsgiServer *self, PyObject *args, PyObject *kwds);
PyObject *gl_asgi_srv_metrics(GLAsgiServer *self, PyObject *arg);

/* Go's answers to Start/Send (asgi.go) */
#define GL_ASGI_OK 0
#define GL_ASGI_PAUSED 1
#define GL_ASGI_ERR_DISCONNECTED (-2)
#define GL_ASGI_ERR_RUNTIME (-3)     /* message in a RuntimeError */
#define GL_ASGI_ERR_GONE (-4)        /* the request was released */
/* receive states (asgi.RecvState) */
#define GL_RECV_WAIT 0
#define GL_RECV_BODY 1
#define GL_RECV_LAST 2
#define GL_RECV_DISCONNECT 3

#endif
