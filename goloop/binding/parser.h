/* goloop.http: the C layouts shared by parser.c and parser.go: the parser object, the batch of
 * events Go records during one feed_data (C then calls the protocol's callbacks from it),
 * and parse_url's result. */
#ifndef GOLOOP_PARSER_H
#define GOLOOP_PARSER_H

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
#define GL_HTTP_DEFAULT_MAX_HEADER (80 * 1024) /* httpparser.DefaultMaxHeaderSize */
#define GL_HCACHE 32            /* headers cached per parser */
#define GL_HCACHE_MAXLEN 512    /* longest name or value cached */

/* One parser event, recorded by Go while it parses a feed_data's data and dispatched by C
 * afterwards (no Go->C call per event). It carries the state the getters return at that
 * point of the parse. Data: (off, len) into the input, or into the batch's arena when the
 * bytes live in the parser (a line split across feed_data calls); arena bit 1/2 tells. */
typedef struct {
    /* Go writes the first 16 bytes with two 8-byte stores: keep this layout. */
    unsigned char kind;            /* GL_HCB_* */
    unsigned char major, minor, keep_alive, upgrade;
    unsigned char arena;           /* 4: off2 holds the method's bytes (len2 <= 8) */
    unsigned char pad[2];
    int status;
    int pad2;
    Py_ssize_t off1, len1;         /* url, reason, header name, body */
    Py_ssize_t off2, len2;         /* header value; the method with GL_HCB_URL */
} GLHttpEvent;

/* The events of one feed_data and its outcome. Batches come from a small free list (GIL
 * protected) so a callback may feed another parser. Go grows ev and arena with realloc. */
typedef struct GLHttpBatch {
    GLHttpEvent *ev;
    Py_ssize_t nev, evcap;
    char *arena;
    Py_ssize_t alen, acap;
    /* the state after the whole feed */
    int status;
    unsigned char major, minor, keep_alive, upgrade;
    unsigned char method_len;      /* 255: longer than GL_HTTP_METHOD_MAX; 254: as the last
                                      URL event said (or unchanged when there was none) */
    char method[GL_HTTP_METHOD_MAX];
    /* outcome: err_exc is -1, or the GL_HEXC_* class to raise after the events */
    int err_exc;
    Py_ssize_t upgrade_offset;
    char err_msg[160];
    struct GLHttpBatch *next;
} GLHttpBatch;

/* goloop's HttpRequestParser / HttpResponseParser. The protocol's callbacks live here (so
 * tp_traverse is plain C); the parser lives in Go (httpParsers[id]). The fields below are
 * what the getters return, set from each event before its callback and from the batch's
 * final state after the last one, so the getters never cross into Go. */
typedef struct {
    PyObject_HEAD
    long id;                       /* index of the Go state; -1 when none */
    PyObject *cb[GL_HCB_COUNT];    /* strong references, NULL when the protocol lacks one */
    PyObject *fn[GL_HCB_COUNT];    /* for a bound method cb: its function and self (borrowed */
    PyObject *fself[GL_HCB_COUNT]; /* from cb), called directly; else fn = cb, fself = NULL */
    /* The bytes handed to the callbacks for the previous message's URL (or reason) and
     * headers, by position: a keep-alive client repeats most of them, and equal bytes are
     * handed out again instead of being allocated and copied. */
    PyObject *line_cache;
    PyObject *hcache[GL_HCACHE][2];
    unsigned int hidx;             /* position of the next header in the current message */
    int status;
    unsigned char major, minor;    /* these four in this order: copied from an event as one */
    unsigned char keep_alive, upgrade;
    unsigned char response;        /* a response parser */
    unsigned char busy;            /* inside feed_data */
    unsigned char failed;          /* 1 + slot of the callback that raised; 0 if none */
    unsigned char method_len;      /* 255: longer than GL_HTTP_METHOD_MAX, ask Go */
    char method[GL_HTTP_METHOD_MAX];
} GLHttpParser;

/* The parts of a parsed URL: offsets and lengths into the input (len -1: absent). */
typedef struct {
    Py_ssize_t off[6];             /* schema, host, path, query, fragment, userinfo */
    Py_ssize_t len[6];
    int port;                      /* -1: absent */
} GLURLParts;

extern PyObject *gl_http_exc[GL_HEXC_COUNT];

#endif
