/* goloop.http: the C layout of the HTTP parser objects, read and written by http.go, and
 * the C helpers (http.c) that Go calls to deliver parser events to Python. */
#ifndef GOLOOP_HTTP_H
#define GOLOOP_HTTP_H

#include "gl.h"

/* Callback slots, in the order of httpparser's Want bits (WantMessageBegin = 1 << 0 ...). */
enum {
    GL_HCB_MESSAGE_BEGIN = 0,
    GL_HCB_URL,
    GL_HCB_STATUS,
    GL_HCB_HEADER,
    GL_HCB_HEADERS_COMPLETE,
    GL_HCB_BODY,
    GL_HCB_MESSAGE_COMPLETE,
    GL_HCB_CHUNK_HEADER,
    GL_HCB_CHUNK_COMPLETE,
    GL_HCB_COUNT
};

/* Exception classes, indexes of gl_http_exc. */
enum {
    GL_HEXC_ERROR = 0,      /* HttpParserError */
    GL_HEXC_CALLBACK,       /* HttpParserCallbackError */
    GL_HEXC_STATUS,         /* HttpParserInvalidStatusError */
    GL_HEXC_METHOD,         /* HttpParserInvalidMethodError */
    GL_HEXC_URL,            /* HttpParserInvalidURLError */
    GL_HEXC_UPGRADE,        /* HttpParserUpgrade */
    GL_HEXC_COUNT
};

#define GL_HTTP_METHOD_MAX 32

/* goloop's HttpRequestParser / HttpResponseParser. The protocol's callbacks live here (so
 * tp_traverse is plain C); the parser's state lives in Go (httpParsers[id]). Go mirrors the
 * values the getters return into the fields below before each callback and at the end of
 * each feed_data, so the getters never cross into Go. */
typedef struct {
    PyObject_HEAD
    long id;                       /* index of the Go state; -1 when none */
    PyObject *cb[GL_HCB_COUNT];    /* strong references, NULL when the protocol lacks one */
    int status;
    unsigned char major, minor;
    unsigned char keep_alive, upgrade;
    unsigned char response;        /* a response parser */
    unsigned char busy;            /* inside feed_data */
    unsigned char method_len;
    char method[GL_HTTP_METHOD_MAX];
} GLHttpParser;

/* The parts of a parsed URL: offsets and lengths into the input (len -1: absent). */
typedef struct {
    Py_ssize_t off[6];             /* schema, host, path, query, fragment, userinfo */
    Py_ssize_t len[6];
    int port;                      /* -1: absent */
} GLURLParts;

extern PyObject *gl_http_exc[GL_HEXC_COUNT];

/* Helpers in http.c, called from Go. They return 0, or -1 with the callback's exception set. */
int gl_http_call0(GLHttpParser *self, int slot);
int gl_http_call_bytes(GLHttpParser *self, int slot, const char *p, Py_ssize_t n);
int gl_http_call_bytes2(GLHttpParser *self, int slot, const char *p1, Py_ssize_t n1,
                        const char *p2, Py_ssize_t n2);
void gl_http_raise(int exc, const char *msg);
void gl_http_raise_callback(const char *msg);
void gl_http_raise_upgrade(Py_ssize_t offset);

#endif
