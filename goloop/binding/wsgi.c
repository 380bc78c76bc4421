/* goloop serve --interface wsgi (C side): the WsgiServer type, its pool threads' loop
 * (serve_thread), the environ of each request (built here from the head Go passes, keys
 * interned), wsgi.input, start_response and write. Each pool thread blocks in Go with the
 * GIL released (wsgi.go's glWsgiNext) until a request is ready (or, one being ready when it
 * finishes the last, takes it with the GIL kept: glWsgiTake), runs the application with
 * the GIL, and sends through Go (the socket is written by this thread, in Go; a part up to
 * GL_WSGI_HOLD_MAX with the GIL held, the GIL released for bigger ones and for waiting). Per-thread state is a pool
 * thread's wsgi_thread (made and freed by its serve_thread, reached through the thread's
 * gl_thread_state, asgi.h): on a free-threaded build the threads run the application at once
 * and share nothing here but immutable objects. */
#include "wsgi.h"
#include "_cgo_export.h"

static PyTypeObject WsgiServerType, StartType, WriteType, InputType;

/* interned strings */
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
static struct {
#define WSGI_FIELD(name, text) PyObject *name;
    WSGI_STRINGS(WSGI_FIELD)
#undef WSGI_FIELD
} ws;
#define WS(name) (ws.name)
static PyObject *empty_bytes;

/* ---------- per-thread caches ---------- */

/* A str of p[0:n] (latin-1): an ASCII one made directly (PyUnicode_DecodeLatin1 looks for the
 * widest character first: ~200 instructions for a Host header's value, ~100 this way). */
static PyObject *latin1_str(const char *p, Py_ssize_t n) {
    if (n <= 1) return PyUnicode_DecodeLatin1(p, n, NULL);  /* its cached one-character strs */
    uint64_t any = 0, x;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) memcpy(&x, p + i, 8), any |= x;
    for (; i < n; i++) any |= (unsigned char)p[i];
    if (any & 0x8080808080808080ULL) return PyUnicode_DecodeLatin1(p, n, NULL);
    PyObject *s = PyUnicode_New(n, 127);
    if (s != NULL) memcpy(PyUnicode_1BYTE_DATA(s), p, n);
    return s;
}

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
    GLAsgiHead *next;
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
} wsgi_thread;

/* The calling pool thread's block (only a pool thread, inside serve_thread, calls this). */
static inline wsgi_thread *wt(void) { return (wsgi_thread *)gl_ts->wsgi; }

static hcache *hcache_get(wsgi_thread *t) {
    hcache *c = t->hc;
    if (c == NULL && (c = t->hc = PyMem_Calloc(1, sizeof(hcache))) == NULL) PyErr_NoMemory();
    return c;
}

/* A slot's hash of p[0:n]: its first and last 8 bytes and its length (a byte loop would cost
 * ~7 instructions a byte); what it leaves out only makes two values share a slot. */
static inline unsigned short_hash(const char *p, Py_ssize_t n) {
    uint64_t a = 0, b = 0;
    if (n >= 8) {
        memcpy(&a, p, 8), memcpy(&b, p + n - 8, 8);
    } else {
        for (Py_ssize_t i = 0; i < n; i++) a = a << 8 | (unsigned char)p[i];
    }
    uint64_t h = a * 0x9E3779B97F4A7C15ULL ^ (b + (uint64_t)n) * 0xC2B2AE3D27D4EB4FULL;
    return (unsigned)(h >> 40);
}

/* The key of header name (lower-case bytes): a new reference, or NULL: an error raised, or none
 * (a name with '_': HTTP_X_Y would not say whether the client sent x-y or x_y: dropped, as
 * gunicorn and nginx do; looked for only when the name is not in the cache, which keeps none). */
static PyObject *header_key(hcache *c, const char *name, Py_ssize_t n) {
    hkey_entry *e = &c->keys[short_hash(name, n) % HKEY_SLOTS];
    if (e->key != NULL && e->len == n && memcmp(e->name, name, n) == 0) return Py_NewRef(e->key);
    if (memchr(name, '_', n) != NULL) return NULL;
    PyObject *k = PyUnicode_New(5 + n, 127);
    if (k == NULL) return NULL;
    Py_UCS1 *d = PyUnicode_1BYTE_DATA(k);
    memcpy(d, "HTTP_", 5);
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        d[5 + i] = c == '-' ? '_' : (c >= 'a' && c <= 'z') ? c - 32 : c >= 0x80 ? '?' : c;
    }
    PyUnicode_InternInPlace(&k);
    if (n <= HKEY_MAX) {
        Py_XSETREF(e->key, Py_NewRef(k));
        e->len = (unsigned char)n;
        memcpy(e->name, name, n);
    }
    return k;
}

/* The str of a header value: a new reference, or NULL with an error. */
static PyObject *header_value(hcache *c, const char *v, Py_ssize_t n) {
    if (n > HVAL_MAX) return latin1_str(v, n);
    hval_entry *e = &c->vals[short_hash(v, n) % HVAL_SLOTS];
    if (e->s != NULL && e->len == n && memcmp(e->v, v, n) == 0) return Py_NewRef(e->s);
    PyObject *s = latin1_str(v, n);
    if (s != NULL) {
        Py_XSETREF(e->s, Py_NewRef(s));
        e->len = n;
        memcpy(e->v, v, n);
    }
    return s;
}

static PyObject *cached_str(str_cache *c, const char *p, Py_ssize_t n) {
    if (c->s != NULL && c->len == n && (n == 0 || memcmp(c->key, p, n) == 0)) return Py_NewRef(c->s);
    PyObject *s = PyUnicode_DecodeLatin1(p ? p : "", n, NULL);
    if (s != NULL && n <= 64) {
        Py_XSETREF(c->s, Py_NewRef(s));
        if (n) memcpy(c->key, p, n);
        c->len = n;
    }
    return s;
}

static PyObject *port_str(int port) {
    unsigned v = port > 0 ? (unsigned)port : 0;
    port_entry *e = &wt()->ports[v % PORT_SLOTS];
    if (e->s != NULL && e->port == (int)v) return Py_NewRef(e->s);
    char d[10];
    int n = 0;
    do {
        d[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    PyObject *s = PyUnicode_New(n, 127);
    if (s == NULL) return NULL;
    Py_UCS1 *o = PyUnicode_1BYTE_DATA(s);
    for (int i = 0; i < n; i++) o[i] = (Py_UCS1)d[n - 1 - i];
    Py_XSETREF(e->s, Py_NewRef(s));
    e->port = port > 0 ? port : 0;
    return s;
}

/* ---------- wsgi.input ---------- */

typedef struct {
    PyObject_HEAD
    long wid, gen;
    PyObject *buf;     /* the body part being read (bytes) or NULL */
    Py_ssize_t pos;    /* read up to here in buf */
    char eof;          /* the last part was taken */
} GLWsgiInput;

static void input_dealloc(GLWsgiInput *self) {
    Py_CLEAR(self->buf);
    PyObject_Free(self);
}

/* Takes the next body part into self->buf: 1, 0 at the end of the body, -1 with an error. */
static int input_fill(GLWsgiInput *self) {
    if (self->eof) return 0;
    char *p = NULL;
    Py_ssize_t n = 0;
    int st = glWsgiRecv(self->wid, self->gen, 0, &p, &n);
    if (st == GL_RECV_WAIT) {
        Py_BEGIN_ALLOW_THREADS
        st = glWsgiRecv(self->wid, self->gen, 1, &p, &n);
        Py_END_ALLOW_THREADS
    }
    if (st == GL_ASGI_ERR_GONE) {
        PyErr_SetString(PyExc_ValueError, "wsgi.input read after its request ended");
        return -1;
    }
    if (st == GL_RECV_DISCONNECT) {
        gl_asgi_raise_disconnected();
        return -1;
    }
    if (st == GL_RECV_LAST) self->eof = 1;
    PyObject *b = gl_bytes(p, n);
    if (b == NULL) return -1;
    Py_XSETREF(self->buf, b);
    self->pos = 0;
    return n > 0 || !self->eof ? 1 : 0;
}

static Py_ssize_t input_avail(GLWsgiInput *self) {
    return self->buf ? PyBytes_GET_SIZE(self->buf) - self->pos : 0;
}

/* Reads up to size bytes (size < 0: to the end); line: stop after a newline. */
static PyObject *input_read_impl(GLWsgiInput *self, Py_ssize_t size, int line) {
    PyObject *out = NULL;  /* a bytearray once more than one part is needed */
    for (;;) {
        Py_ssize_t avail = input_avail(self);
        if (avail > 0) {
            const char *p = PyBytes_AS_STRING(self->buf) + self->pos;
            Py_ssize_t want = avail, have = out ? PyByteArray_GET_SIZE(out) : 0;
            if (size >= 0 && want > size - have) want = size - have;
            int stop = size >= 0 && have + want >= size;
            if (line) {
                const char *nl = memchr(p, '\n', want);
                if (nl != NULL) {
                    want = nl - p + 1;
                    stop = 1;
                }
            }
            if (out == NULL && stop) {  /* one part: a slice of it */
                PyObject *r = (self->pos == 0 && want == PyBytes_GET_SIZE(self->buf)) ? Py_NewRef(self->buf)
                                                                                      : PyBytes_FromStringAndSize(p, want);
                self->pos += want;
                return r;
            }
            if (out == NULL && (out = PyByteArray_FromStringAndSize(NULL, 0)) == NULL) return NULL;
            if (PyByteArray_Resize(out, have + want) < 0) goto fail;
            memcpy(PyByteArray_AS_STRING(out) + have, p, want);
            self->pos += want;
            if (stop) break;
        } else if (size == 0) {
            break;
        }
        int rc = input_fill(self);
        if (rc < 0) goto fail;
        if (rc == 0) break;
    }
    if (out == NULL) return Py_NewRef(empty_bytes);
    PyObject *r = PyBytes_FromStringAndSize(PyByteArray_AS_STRING(out), PyByteArray_GET_SIZE(out));
    Py_DECREF(out);
    return r;
fail:
    Py_XDECREF(out);
    return NULL;
}

static int size_arg(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t *size) {
    *size = -1;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "expected at most 1 argument");
        return -1;
    }
    if (nargs == 1 && args[0] != Py_None) {
        *size = PyNumber_AsSsize_t(args[0], PyExc_OverflowError);
        if (*size == -1 && PyErr_Occurred()) return -1;
    }
    return 0;
}

static PyObject *input_read(GLWsgiInput *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t size;
    if (size_arg(args, nargs, &size) < 0) return NULL;
    return input_read_impl(self, size, 0);
}

static PyObject *input_readline(GLWsgiInput *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t size;
    if (size_arg(args, nargs, &size) < 0) return NULL;
    return input_read_impl(self, size, 1);
}

static PyObject *input_readlines(GLWsgiInput *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t hint, total = 0;
    if (size_arg(args, nargs, &hint) < 0) return NULL;
    PyObject *lines = PyList_New(0);
    if (lines == NULL) return NULL;
    for (;;) {
        PyObject *l = input_read_impl(self, -1, 1);
        if (l == NULL) {
            Py_DECREF(lines);
            return NULL;
        }
        if (PyBytes_GET_SIZE(l) == 0) {
            Py_DECREF(l);
            break;
        }
        total += PyBytes_GET_SIZE(l);
        int rc = PyList_Append(lines, l);
        Py_DECREF(l);
        if (rc < 0) {
            Py_DECREF(lines);
            return NULL;
        }
        if (hint > 0 && total >= hint) break;
    }
    return lines;
}

static PyObject *input_next(GLWsgiInput *self) {
    PyObject *l = input_read_impl(self, -1, 1);
    if (l != NULL && PyBytes_GET_SIZE(l) == 0) {
        Py_DECREF(l);
        return NULL;  /* StopIteration */
    }
    return l;
}

static PyMethodDef input_methods[] = {
    {"read", (PyCFunction)(void (*)(void))input_read, METH_FASTCALL, "read(size=-1): up to size bytes of the body."},
    {"readline", (PyCFunction)(void (*)(void))input_readline, METH_FASTCALL, "readline(size=-1)"},
    {"readlines", (PyCFunction)(void (*)(void))input_readlines, METH_FASTCALL, "readlines(hint=-1)"},
    {NULL}};

static PyTypeObject InputType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop._goloop.WsgiInput",
    .tp_basicsize = sizeof(GLWsgiInput),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "wsgi.input: the request body, read from Go as the application reads it.",
    .tp_dealloc = (destructor)input_dealloc,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)input_next,
    .tp_methods = input_methods,
};

/* ---------- start_response and write ---------- */

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
                       * thread's buffer (wsgi_thread.hdr), used only while the request runs (wid >= 0):
                       * no allocation per request */
    PyObject *write;  /* the write callable start_response returns (made at its first call, kept
                       * with this object for the thread's next requests); it refers to this
                       * object too: the cycle is broken by release_start */
} GLWsgiStart;


typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    GLWsgiStart *st;
} GLWsgiWrite;

static void start_dealloc(GLWsgiStart *self) {
    Py_CLEAR(self->write);
    PyObject_Free(self);
}

static void write_dealloc(GLWsgiWrite *self) {
    Py_CLEAR(self->st);
    PyObject_Free(self);
}

/* latin1's error: o is not a str, or not a latin-1 one */
static __attribute__((noinline, cold)) int latin1_error(PyObject *o, const char *what) {
    if (!PyUnicode_Check(o))
        PyErr_Format(PyExc_TypeError, "WSGI %s must be a str, not %.100s", what, Py_TYPE(o)->tp_name);
    else
        PyErr_Format(PyExc_ValueError, "WSGI %s must be latin-1: %R", what, o);
    return -1;
}

/* a latin-1 str's bytes (ASCII/latin-1 compact strs only: PEP 3333's native strings); inline,
 * its errors apart (a call per string was ~27 instructions of start_response's five) */
static inline int latin1(PyObject *o, const char *what, const char **p, Py_ssize_t *n) {
    if (!PyUnicode_Check(o) || PyUnicode_KIND(o) != PyUnicode_1BYTE_KIND) return latin1_error(o, what);
    *p = (const char *)PyUnicode_1BYTE_DATA(o);
    *n = PyUnicode_GET_LENGTH(o);
    return 0;
}

/* Header checks a word (8 bytes) at a time: a name of token-ish bytes ('!'..'~' but ':'),
 * a value without CR, LF or NUL (the byte loops were ~300 of start_response's ~800
 * instructions for a response of two headers). Exact tests of "some byte of x is": */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
#define HAS_LESS(x, n) (((x) - ONES * (n)) & ~(x) & HIGHS)               /* < n (n <= 128) */
#define HAS_MORE(x, n) ((((x) + ONES * (127 - (n))) | (x)) & HIGHS)      /* > n (n <= 127) */
#define HAS_ZERO(x) HAS_LESS(x, 1)

static inline int name_word_bad(const char *p) {
    uint64_t x;
    memcpy(&x, p, 8);
    return (HAS_LESS(x, 0x21) | HAS_MORE(x, 0x7e) | HAS_ZERO(x ^ (ONES * ':'))) != 0;
}

static int name_ok(const char *p, Py_ssize_t n) {
    if (n < 8) {
        for (Py_ssize_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)p[i];
            if ((unsigned char)(c - 0x21) >= 0x7f - 0x21 || c == ':') return 0;
        }
        return n > 0;
    }
    for (Py_ssize_t i = 0; i + 8 < n; i += 8)
        if (name_word_bad(p + i)) return 0;
    return !name_word_bad(p + n - 8);  /* the last 8 bytes (overlapping): no byte loop for the tail */
}

/* No CR, LF or NUL in p[0:n] (n >= 8: a word at a time, the last one overlapping). */
static int value_ok(const char *p, Py_ssize_t n) {
    Py_ssize_t i = 0;
    if (n >= 8) {
        for (;; i += 8) {
            if (i + 8 > n) i = n - 8;
            uint64_t x;
            memcpy(&x, p + i, 8);
            if (HAS_LESS(x, 14)) break;  /* a control byte: looked at one by one from here */
            if (i + 8 == n) return 1;
        }
    }
    for (; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c < 14 && (c == '\r' || c == '\n' || c == 0)) return 0;
    }
    return 1;
}

/* The status's code ("200 OK": three digits, a space, a reason without control characters). */
static int parse_status(PyObject *status) {
    const char *p;
    Py_ssize_t n;
    if (latin1(status, "status", &p, &n) < 0) return -1;
    unsigned d0 = (unsigned char)p[0] - '0', d1 = n > 1 ? (unsigned char)p[1] - '0' : 10,
             d2 = n > 2 ? (unsigned char)p[2] - '0' : 10;
    int ok = n >= 4 && p[3] == ' ' && (d0 <= 9) & (d1 <= 9) & (d2 <= 9) && d0 > 0;
    Py_ssize_t i = 4;
    for (; ok && i + 8 <= n; i += 8) {
        uint64_t x;
        memcpy(&x, p + i, 8);
        ok = !(HAS_LESS(x, 0x20) | HAS_ZERO(x ^ (ONES * 0x7f)));
    }
    for (; ok && i < n; i++) ok = (unsigned char)p[i] >= ' ' && p[i] != 0x7f;
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "invalid WSGI status %R (\"NNN reason\")", status);
        return -1;
    }
    return (int)(d0 * 100 + d1 * 10 + d2);
}

/* name (14 bytes, a checked header name) is Content-Length in any case: two overlapping
 * words, lower-cased by OR 0x20 (which makes no other checked byte '-' or a letter) */
static inline int is_content_length(const char *name) {
    uint64_t a, b, wa, wb;
    memcpy(&a, name, 8), memcpy(&b, name + 6, 8);
    memcpy(&wa, "content-", 8), memcpy(&wb, "t-length", 8);
    return ((a | ONES * 0x20) == wa) & ((b | ONES * 0x20) == wb);
}

/* A Content-Length value: its number, or -2 (not one: Go's framing decides). */
static long long parse_clen(const char *p, Py_ssize_t n) {
    while (n > 0 && (*p == ' ' || *p == '\t')) p++, n--;
    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
    if (n == 0 || n > 18) return -2;
    long long v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return -2;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

/* n bytes at the end of b, to fill (gbuf_put's call only when b must grow), or NULL with an error */
static inline char *hdr_room(gbuf *b, Py_ssize_t n) {
    if (b->n + n > b->cap) return gbuf_put(b, NULL, n) < 0 ? NULL : b->p + b->n - n;
    char *o = b->p + b->n;
    b->n += n;
    return o;
}

/* The header lines of headers (a list of (name, value) str pairs), checked, appended to st's.
 * Names keep their case: HTTP/1.1 sends them as written (as gunicorn), HTTP/2 lower-cases them. */
static int put_headers(GLWsgiStart *st, PyObject *headers) {
    if (!PyList_Check(headers) && !PyTuple_Check(headers)) {
        PyErr_Format(PyExc_TypeError, "WSGI response headers must be a list, not %.100s", Py_TYPE(headers)->tp_name);
        return -1;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(headers);  /* (no Python code runs in the loop) */
    PyObject **items = PySequence_Fast_ITEMS(headers);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = items[i];
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "WSGI response headers must be (name, value) tuples");
            return -1;
        }
        const char *np, *vp;
        Py_ssize_t nn, vn;
        if (latin1(PyTuple_GET_ITEM(pair, 0), "header name", &np, &nn) < 0 ||
            latin1(PyTuple_GET_ITEM(pair, 1), "header value", &vp, &vn) < 0)
            return -1;
        if (!name_ok(np, nn)) goto bad_name;
        if (!value_ok(vp, vn)) {
            PyErr_Format(PyExc_ValueError, "invalid WSGI header value (CR, LF or NUL) for %R", PyTuple_GET_ITEM(pair, 0));
            return -1;
        }
        if (nn == 14 && is_content_length(np)) st->clen = st->clen == -1 ? parse_clen(vp, vn) : -2;
        char *o = hdr_room(st->hdr, nn + vn + 4);  /* "name: value\r\n", room made once */
        if (o == NULL) return -1;
        memcpy(o, np, nn);
        o[nn] = ':', o[nn + 1] = ' ';
        memcpy(o + nn + 2, vp, vn);
        o[nn + 2 + vn] = '\r', o[nn + 3 + vn] = '\n';
        continue;
    bad_name:
        PyErr_Format(PyExc_ValueError, "invalid WSGI header name %R", PyTuple_GET_ITEM(pair, 0));
        return -1;
    }
    return 0;
}

static PyObject *write_new(GLWsgiStart *st);

/* start_response(status, response_headers, exc_info=None) -> write */
static PyObject *start_call(GLWsgiStart *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *exc_info = NULL;
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) {
        if (PyTuple_GET_SIZE(kwnames) == 1 && nargs == 2 &&
            PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "exc_info") == 0) {
            exc_info = args[2];
        } else {
            PyErr_SetString(PyExc_TypeError, "start_response(status, response_headers, exc_info=None)");
            return NULL;
        }
    } else if (nargs == 3) {
        exc_info = args[2];
    } else if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "start_response(status, response_headers, exc_info=None)");
        return NULL;
    }
    if (exc_info != NULL && exc_info != Py_None) {
        if (self->sent) {  /* too late to change the response: raise the application's error again */
            if (!PyTuple_Check(exc_info) || PyTuple_GET_SIZE(exc_info) != 3 ||
                !PyExceptionInstance_Check(PyTuple_GET_ITEM(exc_info, 1))) {
                PyErr_SetString(PyExc_TypeError, "exc_info must be a sys.exc_info() tuple");
                return NULL;
            }
            PyObject *v = PyTuple_GET_ITEM(exc_info, 1), *tb = PyTuple_GET_ITEM(exc_info, 2);
            if (tb != Py_None) PyException_SetTraceback(v, tb);
            PyErr_SetObject((PyObject *)Py_TYPE(v), v);
            return NULL;
        }
    } else if (self->status != 0) {
        PyErr_SetString(PyExc_RuntimeError, "start_response() called again without exc_info");
        return NULL;
    }
    if (self->wid < 0) {
        PyErr_SetString(PyExc_RuntimeError, "start_response() called after its request ended");
        return NULL;
    }
    int code = parse_status(args[0]);
    gbuf *b = self->hdr;
    b->n = 0;
    self->clen = -1;
    char *o;
    if (code < 0 || (o = hdr_room(b, PyUnicode_GET_LENGTH(args[0]) - 2)) == NULL) goto fail;
    memcpy(o, (const char *)PyUnicode_1BYTE_DATA(args[0]) + 4, b->n - 2);
    o[b->n - 2] = '\r', o[b->n - 1] = '\n';
    if (put_headers(self, args[1]) < 0) goto fail;
    self->status = code;
    if (self->write == NULL && (self->write = write_new(self)) == NULL) goto fail;
    return Py_NewRef(self->write);
fail:
    self->status = 0;
    self->hdr->n = 0;
    return NULL;
}

static PyObject *raise_send(GLWsgiStart *st, int rc) {
    if (rc == GL_ASGI_ERR_DISCONNECTED) return gl_asgi_raise_disconnected();
    if (rc == GL_ASGI_ERR_GONE) {
        PyErr_SetString(PyExc_RuntimeError, "the WSGI request already ended");
        return NULL;
    }
    if (rc == GL_WSGI_TOO_LONG) {
        PyErr_SetString(PyExc_RuntimeError, "Response content longer than Content-Length");
        return NULL;
    }
    const char *m = glWsgiError(st->wid);
    PyErr_SetString(PyExc_RuntimeError, m ? m : "goloop: send failed");
    return NULL;
}

/* Sends a body part (the head with the first): GL_ASGI_OK or an error code (nothing raised).
 * The part that completes the body the application's Content-Length declared is sent as
 * the last (more 0): the response is complete in that one call and write, without the
 * empty last part the end of an iterable would send in another call (Werkzeug's and
 * Django's responses are iterables with a Content-Length); what comes after it, if
 * anything, is too long. end: the request may end with this part if it is the last (more 0
 * here): a list or tuple answer's last part, or an iterable's part that completes its
 * Content-Length (Werkzeug's and Django's answers; not a generator's): Go ends it and takes the next in the same
 * call (glWsgiSendEnd; one call into Go per request fewer than a glWsgiTake after close()).
 * What the application does after that no longer concerns the response: a part after it is
 * logged as too long, a close() that fails is logged (the connection stays: its response is
 * complete), and the request's objects fail as after its end. obj: the part's bytes object
 * (NULL: memory that may change after the call): a large part (over GL_WSGI_HOLD_MAX) may be
 * sent from it, Go keeping a reference until the socket took it (server_held.go); a large
 * part is otherwise copied a slice at a time as the socket takes the output. */
static int send_part(GLWsgiStart *st, const char *p, Py_ssize_t n, int more, int flush, int end, PyObject *obj) {
    if (st->done) return n > 0 ? GL_WSGI_TOO_LONG : GL_ASGI_OK;
    if (more && n > 0 && st->clen >= 0 && st->body + n == st->clen) more = 0, flush = 1;
    int status = st->sent ? 0 : st->status, rc;
    long wid = st->wid, gen = st->gen;
    wsgi_thread *t = gl_ts != NULL ? gl_ts->wsgi : NULL;  /* NULL: write() from another thread */
    pass_state other, *pass = t != NULL ? &t->pass : &other;
    rc = GL_WSGI_RELEASE;
    pass->idle = 0;
    if (n <= GL_WSGI_HOLD_MAX) {  /* with the GIL: one release and take fewer per response */
        if (!more && end) {  /* the request ends with this call, the next one taken */
            rc = glWsgiSendEnd(wid, gen, status, st->hdr->p, st->hdr->n, (char *)p, n, &pass->next, &pass->gen);
            pass->ended = rc == GL_ASGI_OK;
        } else {
            rc = glWsgiSend(wid, gen, status, st->hdr->p, st->hdr->n, (char *)p, n, more, flush, 0);
        }
        if ((pass->idle = rc == GL_WSGI_SENT_IDLE)) rc = GL_ASGI_OK;
        if (rc == GL_WSGI_PAUSED) {
            st->sent = 1;
            Py_BEGIN_ALLOW_THREADS
            rc = glWsgiSendWait(wid, gen);
            Py_END_ALLOW_THREADS
        }
    }
    if (rc == GL_WSGI_RELEASE && n > GL_WSGI_HOLD_MAX) {
        int held = 0;
        Py_XINCREF(obj);  /* Go's if it holds it (held), released by the loop thread */
        Py_BEGIN_ALLOW_THREADS
        rc = glWsgiSendLarge(wid, gen, status, st->hdr->p, st->hdr->n, (char *)p, n, more, flush, st->clen >= 0, obj,
                             &held);
        Py_END_ALLOW_THREADS
        if (!held) Py_XDECREF(obj);
    } else if (rc == GL_WSGI_RELEASE) {
        Py_BEGIN_ALLOW_THREADS
        rc = glWsgiSend(wid, gen, status, st->hdr->p, st->hdr->n, (char *)p, n, more, flush, 1);
        Py_END_ALLOW_THREADS
    }
    if (rc != GL_ASGI_ERR_RUNTIME && rc != GL_ASGI_ERR_GONE) st->sent = 1;
    if (rc == GL_ASGI_OK) {
        st->body += n;
        st->done = !more;
    }
    return rc;
}

static int need_start(GLWsgiStart *st) {
    if (st->status == 0) {
        PyErr_SetString(PyExc_RuntimeError, "the WSGI application did not call start_response()");
        return -1;
    }
    return 0;
}

/* write(data): the body part, sent now (it is in Go's output when write returns; a slow
 * client makes write wait). */
static PyObject *write_call(GLWsgiWrite *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "write() takes one bytes argument");
        return NULL;
    }
    GLWsgiStart *st = self->st;
    if (st->wid < 0) {
        PyErr_SetString(PyExc_RuntimeError, "write() called after its request ended");
        return NULL;
    }
    if (need_start(st) < 0) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    int rc = GL_ASGI_OK;
    if (view.len > 0) rc = send_part(st, view.buf, view.len, 1, 1, 0, PyBytes_CheckExact(args[0]) ? args[0] : NULL);
    PyBuffer_Release(&view);
    if (rc != GL_ASGI_OK) return raise_send(st, rc);
    Py_RETURN_NONE;
}

static PyObject *write_new(GLWsgiStart *st) {
    GLWsgiWrite *w = PyObject_New(GLWsgiWrite, &WriteType);
    if (w == NULL) return NULL;
    w->vectorcall = (vectorcallfunc)write_call;
    w->st = (GLWsgiStart *)Py_NewRef(st);
    return (PyObject *)w;
}

static PyTypeObject StartType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop._goloop.WsgiStartResponse",
    .tp_basicsize = sizeof(GLWsgiStart),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "start_response(status, response_headers, exc_info=None) of one WSGI request.",
    .tp_dealloc = (destructor)start_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(GLWsgiStart, vectorcall),
};

static PyTypeObject WriteType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop._goloop.WsgiWrite",
    .tp_basicsize = sizeof(GLWsgiWrite),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "The write(data) callable start_response returns.",
    .tp_dealloc = (destructor)write_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(GLWsgiWrite, vectorcall),
};

/* ---------- the environ ---------- */

#define SEG(i) (blob + ((i) > 0 ? ends[(i) - 1] : 0)), (Py_ssize_t)(ends[i] - ((i) > 0 ? ends[(i) - 1] : 0))

static inline int set_new(PyObject *d, PyObject *k, PyObject *v) { return gl_set_new(d, k, v); }

/* environ[key] = value (stolen), or joined to a value already there (a repeated header: ", ";
 * cookies, which HTTP/2 splits, "; "): one look-up of key when it is new (PyDict_SetDefault). */
static int set_header(PyObject *env, PyObject *key, PyObject *value) {
    if (value == NULL) return -1;
    Py_ssize_t had = PyDict_GET_SIZE(env);
    PyObject *old = PyDict_SetDefault(env, key, value);  /* borrowed */
    if (old == NULL || PyDict_GET_SIZE(env) > had) {  /* an error, or value is in */
        Py_DECREF(value);
        return old == NULL ? -1 : 0;
    }
    Py_ssize_t on = PyUnicode_GET_LENGTH(old), vn = PyUnicode_GET_LENGTH(value);
    int ascii = PyUnicode_IS_ASCII(old) && PyUnicode_IS_ASCII(value);
    PyObject *r = PyUnicode_New(on + 2 + vn, ascii ? 127 : 255);  /* (both latin-1: made from bytes) */
    if (r != NULL) {
        Py_UCS1 *d = PyUnicode_1BYTE_DATA(r);
        memcpy(d, PyUnicode_1BYTE_DATA(old), on);
        d[on] = key == WS(HTTP_COOKIE) ? ';' : ',', d[on + 1] = ' ';
        memcpy(d + on + 2, PyUnicode_1BYTE_DATA(value), vn);
    }
    Py_DECREF(value);
    return set_new(env, key, r);
}

static PyObject *protocol_str(const GLAsgiHead *h) {
    return h->major == 3 ? WS(p3) : h->major == 2 ? WS(p2) : (h->major == 1 && h->minor == 0) ? WS(p10) : WS(p11);
}

/* A TCP connection's SERVER_NAME, SERVER_PORT and REMOTE_ADDR in d: 0, or -1 with an error. */
static int set_tcp_items(PyObject *d, const GLAsgiHead *h) {
    wsgi_thread *t = wt();
    if (set_new(d, WS(SERVER_NAME), cached_str(&t->c_server, h->shost, h->shostlen)) < 0 ||
        set_new(d, WS(SERVER_PORT), port_str(h->sport)) < 0 ||
        set_new(d, WS(REMOTE_ADDR), cached_str(&t->c_remote, h->chost, h->chostlen)) < 0)
        return -1;
    return 0;
}

/* ftpl's template for h (TCP) if it fits it (borrowed), made now if it does not; NULL: none
 * (addresses too long to keep: the caller sets the items itself), or an error raised. */
static PyObject *filled_template(GLWsgiServer *srv, const GLAsgiHead *h, PyObject *input) {
    filled_tpl *f = &wt()->ftpl;
    int proto = h->major * 10 + h->minor;
    if (h->shostlen > (Py_ssize_t)sizeof f->shost || h->chostlen > (Py_ssize_t)sizeof f->chost) return NULL;
    if (f->tpl != NULL && f->src == srv->environ_tpl && f->sport == h->sport && f->proto == proto &&
        f->shostlen == h->shostlen && f->chostlen == h->chostlen &&
        (h->shostlen == 0 || memcmp(f->shost, h->shost, h->shostlen) == 0) &&
        (h->chostlen == 0 || memcmp(f->chost, h->chost, h->chostlen) == 0))
        goto fill_input;
    PyObject *d = PyDict_Copy(srv->environ_tpl);
    if (d == NULL) return NULL;
    if (PyDict_SetItem(d, WS(SERVER_PROTOCOL), protocol_str(h)) < 0 ||
        PyDict_SetItem(d, WS(REQUEST_METHOD), WS(GET)) < 0 || PyDict_SetItem(d, WS(PATH_INFO), WS(slash)) < 0 ||
        PyDict_SetItem(d, WS(QUERY_STRING), WS(empty)) < 0 || set_tcp_items(d, h) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    Py_XSETREF(f->tpl, d);
    Py_XSETREF(f->src, Py_NewRef(srv->environ_tpl));
    f->in = NULL, f->cport = -1;
    f->sport = h->sport, f->proto = proto, f->shostlen = h->shostlen, f->chostlen = h->chostlen;
    if (h->shostlen) memcpy(f->shost, h->shost, h->shostlen);
    if (h->chostlen) memcpy(f->chost, h->chost, h->chostlen);
fill_input:  /* the thread's input, the same request after request but when an application kept
              * one; the client's port, the same for the requests of a connection */
    if (f->in != input) {
        if (PyDict_SetItem(f->tpl, WS(input), input) < 0) return NULL;
        f->in = input;
    }
    if (f->cport != h->cport) {
        if (set_new(f->tpl, WS(REMOTE_PORT), port_str(h->cport)) < 0) return NULL;
        f->cport = h->cport;
    }
    return f->tpl;
}

static PyObject *environ_new(GLWsgiServer *srv, const GLAsgiHead *h, PyObject *input) {
    PyObject *tpl = h->is_unix ? NULL : filled_template(srv, h, input);
    if (tpl == NULL && PyErr_Occurred()) return NULL;
    PyObject *env = PyDict_Copy(tpl != NULL ? tpl : srv->environ_tpl);
    if (env == NULL) return NULL;
    const char *blob = h->blob;
    const int32_t *ends = h->ends;
    int nends = h->nends, nh = (nends - 4) / 2;
    const char *path = blob + ends[nends - 2];
    Py_ssize_t plen = ends[nends - 1] - ends[nends - 2];
    if (srv->rootlen > 0 && plen >= srv->rootlen && memcmp(path, srv->root, srv->rootlen) == 0 &&
        (plen == srv->rootlen || path[srv->rootlen] == '/')) {
        path += srv->rootlen;
        plen -= srv->rootlen;
    }
    /* the filled template has GET, "/", "" and the thread's input: set only when the request
     * differs (a dict's item set is ~180 instructions) */
    const char *m = blob + (nends > 4 ? ends[nends - 5] : 0);
    Py_ssize_t mlen = ends[nends - 4] - (m - blob), qlen = ends[nends - 2] - ends[nends - 3];
    int get = mlen == 3 && m[0] == 'G' && m[1] == 'E' && m[2] == 'T';
    if ((!(tpl && get) && set_new(env, WS(REQUEST_METHOD), get ? Py_NewRef(WS(GET)) : gl_asgi_method(m, mlen)) < 0) ||
        (!(tpl && plen == 1 && path[0] == '/') && set_new(env, WS(PATH_INFO), latin1_str(path, plen)) < 0) ||
        (!(tpl && qlen == 0) && set_new(env, WS(QUERY_STRING), latin1_str(SEG(nends - 2))) < 0) ||
        (tpl == NULL && PyDict_SetItem(env, WS(input), input) < 0))
        goto fail;
    if (tpl == NULL) {  /* (else the connection's items, its client's port too, are in the template) */
        if (PyDict_SetItem(env, WS(SERVER_PROTOCOL), protocol_str(h)) < 0) goto fail;
        if (h->is_unix) {
            if (set_new(env, WS(SERVER_NAME), cached_str(&wt()->c_server, h->shost, h->shostlen)) < 0 ||
                PyDict_SetItem(env, WS(SERVER_PORT), WS(zero)) < 0 || PyDict_SetItem(env, WS(REMOTE_ADDR), WS(empty)) < 0 ||
                PyDict_SetItem(env, WS(REMOTE_PORT), WS(zero)) < 0)
                goto fail;
        } else if (set_tcp_items(env, h) < 0 || set_new(env, WS(REMOTE_PORT), port_str(h->cport)) < 0) {
            goto fail;
        }
    }
    if (h->proxy != NULL) {  /* "scheme\nclient" from a trusted proxy's headers */
        const char *nl = memchr(h->proxy, '\n', h->proxylen);
        Py_ssize_t slen = nl ? nl - h->proxy : h->proxylen;
        if (slen > 0 && set_new(env, WS(url_scheme), PyUnicode_DecodeLatin1(h->proxy, slen, NULL)) < 0) goto fail;
        if (nl != NULL && h->proxylen - slen - 1 > 0 &&
            (set_new(env, WS(REMOTE_ADDR), PyUnicode_DecodeLatin1(nl + 1, h->proxylen - slen - 1, NULL)) < 0 ||
             PyDict_SetItem(env, WS(REMOTE_PORT), WS(zero)) < 0))
            goto fail;
    }
    hcache *hc = nh > 0 ? hcache_get(wt()) : NULL;
    if (nh > 0 && hc == NULL) goto fail;
    for (int i = 0; i < 2 * nh; i += 2) {
        int32_t a = i > 0 ? ends[i - 1] : 0, b = ends[i], c = ends[i + 1];
        const char *name = blob + a;
        Py_ssize_t nn = b - a;
        PyObject *key;
        if (nn == 12 && memcmp(name, "content-type", 12) == 0) {
            key = Py_NewRef(WS(CONTENT_TYPE));
        } else if (nn == 14 && memcmp(name, "content-length", 14) == 0) {
            key = Py_NewRef(WS(CONTENT_LENGTH));
        } else if ((key = header_key(hc, name, nn)) == NULL) {
            if (PyErr_Occurred()) goto fail;
            continue;  /* a name with '_' */
        }
        int rc = set_header(env, key, header_value(hc, blob + b, c - b));
        Py_DECREF(key);
        if (rc < 0) goto fail;
    }
    return env;
fail:
    Py_DECREF(env);
    return NULL;
}
#undef SEG

/* ---------- one request ---------- */

/* Logs the exception being raised (the application's) with srv->on_error. */
static void log_error(GLWsgiServer *srv) {
    PyObject *exc = gl_asgi_take_exception();
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
    if (need_start(st) < 0) return -1;
    int rc, status = st->sent ? 0 : st->status;
    long wid = st->wid, gen = st->gen;
    Py_BEGIN_ALLOW_THREADS
    rc = glWsgiSendFD(wid, gen, status, st->hdr->p, st->hdr->n, (int)fd, off, -1);
    Py_END_ALLOW_THREADS
    if (rc == GL_WSGI_NOT_FILE) return 0;
    if (rc == GL_ASGI_OK) {
        st->sent = 1;
        return 1;
    }
    if (rc == GL_ASGI_ERR_DISCONNECTED) return -2;
    raise_send(st, rc);
    return -1;
}

/* Sends the application's result: 0 done, -1 the application failed (raised), -2 the client
 * went away. result.close() is called by the caller. */
static int send_result(GLWsgiServer *srv, GLWsgiStart *st, PyObject *result) {
    int rc;
    if (srv->file_wrapper != NULL && Py_TYPE(result) == (PyTypeObject *)srv->file_wrapper) {
        int r = send_wrapped_file(st, result);
        if (r != 0) return r == 1 ? 0 : r;
    }
    if (PyList_CheckExact(result) || PyTuple_CheckExact(result)) {
        /* every part but the last with more_body, the last flushed: a one-part answer
         * gets its content-length and leaves in one write */
        Py_ssize_t n = PySequence_Fast_GET_SIZE(result);
        if (need_start(st) < 0) return -1;
        for (Py_ssize_t i = 0; i < n || (n == 0 && i == 0); i++) {
            PyObject *b = n ? Py_NewRef(PySequence_Fast_GET_ITEM(result, i)) : Py_NewRef(empty_bytes);
            if (!PyBytes_Check(b)) {
                PyErr_Format(PyExc_TypeError, "a WSGI response must be bytes, not %.100s", Py_TYPE(b)->tp_name);
                Py_DECREF(b);
                return -1;
            }
            int last = i >= n - 1;
            rc = (PyBytes_GET_SIZE(b) == 0 && !last)
                     ? GL_ASGI_OK
                     : send_part(st, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b), !last, last, last, b);
            Py_DECREF(b);
            if (rc == GL_ASGI_ERR_DISCONNECTED) return -2;
            if (rc != GL_ASGI_OK) {
                raise_send(st, rc);
                return -1;
            }
        }
        return 0;
    }
    /* the part that completes the Content-Length ends the request (send_part's end) unless
     * the answer is a generator, whose code after its last yield (before its end) would
     * hold up the request taken with it */
    int end = !PyGen_CheckExact(result);
    PyObject *it = PyObject_GetIter(result), *b;
    if (it == NULL) return -1;
    while ((b = PyIter_Next(it)) != NULL) {
        if (!PyBytes_Check(b)) {
            PyErr_Format(PyExc_TypeError, "a WSGI response must yield bytes, not %.100s", Py_TYPE(b)->tp_name);
            Py_DECREF(b);
            Py_DECREF(it);
            return -1;
        }
        rc = GL_ASGI_OK;
        if (PyBytes_GET_SIZE(b) > 0) {  /* the head waits for the first non-empty part (PEP 3333) */
            if (need_start(st) < 0) {
                Py_DECREF(b);
                Py_DECREF(it);
                return -1;
            }
            rc = send_part(st, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b), 1, 1, end, b);
        }
        Py_DECREF(b);
        if (rc != GL_ASGI_OK) {
            Py_DECREF(it);
            if (rc == GL_ASGI_ERR_DISCONNECTED) return -2;
            raise_send(st, rc);
            return -1;
        }
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) return -1;
    if (need_start(st) < 0) return -1;
    rc = send_part(st, NULL, 0, 0, 1, 0, NULL);
    if (rc == GL_ASGI_ERR_DISCONNECTED) return -2;
    if (rc != GL_ASGI_OK) {
        raise_send(st, rc);
        return -1;
    }
    return 0;
}

/* Drops a start_response the thread no longer reuses: the cycle with its write is broken
 * (a write the application kept still refers to it, and fails: wid is -1). */
static void release_start(GLWsgiStart *st) {
    if (st == NULL) return;
    Py_CLEAR(st->write);
    Py_DECREF((PyObject *)st);
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
    Py_CLEAR(t->ftpl.tpl);
    Py_CLEAR(t->ftpl.src);
    t->ftpl.in = NULL;  /* (the template's) */
    release_start((GLWsgiStart *)t->st);
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
        if ((in = PyObject_New(GLWsgiInput, &InputType)) == NULL) return -1;
        in->buf = NULL;
        Py_XSETREF(t->in, (PyObject *)in);
    }
    GLWsgiStart *st = (GLWsgiStart *)t->st;
    if (st == NULL || Py_REFCNT(st) != 1 + (st->write != NULL) || (st->write != NULL && Py_REFCNT(st->write) != 1)) {
        if ((st = PyObject_New(GLWsgiStart, &StartType)) == NULL) return -1;
        st->vectorcall = (vectorcallfunc)start_call;
        st->write = NULL;
        release_start((GLWsgiStart *)t->st);
        t->st = (PyObject *)st;
    }
    st->hdr = &t->hdr;
    t->hdr.n = 0;
    Py_CLEAR(in->buf);
    in->pos = 0, in->eof = 0;
    *inp = in, *stp = st;
    return 0;
}

/* Runs the application for the request whose head is h: 1 answered, 2 it failed. */
static int handle(GLWsgiServer *srv, long wid, long gen, const GLAsgiHead *h) {
    GLWsgiInput *in;
    GLWsgiStart *st;
    PyObject *env = NULL, *result = NULL;
    int failed = 1;
    if (request_objects(&in, &st) < 0) {
        log_error(srv);
        return 2;
    }
    in->wid = wid, in->gen = gen;
    st->wid = wid, st->gen = gen, st->status = 0, st->sent = 0, st->done = 0, st->clen = -1, st->body = 0;
    if ((env = environ_new(srv, h, (PyObject *)in)) != NULL) {
        PyObject *args[2] = {env, (PyObject *)st};
        result = PyObject_Vectorcall(srv->app, args, 2, NULL);
    }
    if (result == NULL) {
        log_error(srv);
    } else {
        failed = send_result(srv, st, result) == -1;
        if (failed) log_error(srv);
        if (!PyList_CheckExact(result) && !PyTuple_CheckExact(result)) {  /* close(), always */
            PyObject *close;
            int has = get_optional_attr(result, WS(close), &close);
            if (has > 0) {
                PyObject *r = PyObject_CallNoArgs(close);
                Py_DECREF(close);
                if (r == NULL) {
                    log_error(srv);
                    failed = 1;
                }
                Py_XDECREF(r);
            } else if (has < 0) {
                log_error(srv);
            }
        }
        Py_DECREF(result);
    }
    if (srv->access != NULL && env != NULL) {  /* the access log, the request limit (goloop.serve.wsgi) */
        PyObject *code = PyLong_FromLong(st->sent ? st->status : 500);
        PyObject *r = code ? PyObject_CallFunctionObjArgs(srv->access, env, code, NULL) : NULL;
        if (r == NULL) PyErr_WriteUnraisable(srv->access);
        Py_XDECREF(r);
        Py_XDECREF(code);
    }
    st->wid = -1;  /* kept by the application: its calls now fail without reaching Go */
    in->wid = -1;
    Py_XDECREF(env);
    if (input_unshared(in)) Py_CLEAR(in->buf);  /* not kept: its last part is not held until the next request */
    return failed ? 2 : 1;
}

/* ---------- the server ---------- */

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
    for (;;) {
        GLAsgiHead *h = NULL;
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
         * input and start_response) may outlive it: they hold (wid, gen), which Go checks */
        finish = handle(self, wid, gen, h);
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
    if (!PyObject_TypeCheck(loop, gl_asgi_loop_type())) {
        PyErr_SetString(PyExc_TypeError, "WsgiServer needs a goloop loop");
        return -1;
    }
    self->base.loop = Py_NewRef(loop);
    self->base.runner = Py_NewRef(Py_None);
    self->base.template = PyDict_New();
    if (self->base.template == NULL) return -1;
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
                        hlen, eager, &self->wsid) < 0)
        return -1;
    return 0;
}

static int wsrv_traverse(GLWsgiServer *self, visitproc visit, void *arg) {
    Py_VISIT(self->app);
    Py_VISIT(self->environ_tpl);
    Py_VISIT(self->on_error);
    Py_VISIT(self->file_wrapper);
    Py_VISIT(self->access);
    return gl_asgi_server_type()->tp_traverse((PyObject *)self, visit, arg);
}

static int wsrv_clear(GLWsgiServer *self) {
    Py_CLEAR(self->app);
    Py_CLEAR(self->environ_tpl);
    Py_CLEAR(self->on_error);
    Py_CLEAR(self->file_wrapper);
    Py_CLEAR(self->access);
    return gl_asgi_server_type()->tp_clear((PyObject *)self);
}

static void wsrv_dealloc(GLWsgiServer *self) {
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->app);
    Py_CLEAR(self->environ_tpl);
    Py_CLEAR(self->on_error);
    Py_CLEAR(self->file_wrapper);
    Py_CLEAR(self->access);
    PyMem_Free(self->root);
    self->root = NULL;
    gl_asgi_server_type()->tp_dealloc((PyObject *)self);
}

static PyMethodDef wsrv_methods[] = {
    {"serve_thread", (PyCFunction)srv_serve_thread, METH_NOARGS,
     "Answer requests in this thread until the server is released (a pool thread's run)."},
    {NULL}};

static PyTypeObject WsgiServerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop._goloop.WsgiServer",
    .tp_basicsize = sizeof(GLWsgiServer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "goloop serve's WSGI server: the ASGI server's engine, requests answered by pool threads (goloop.serve.wsgi).",
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
    WsgiServerType.tp_base = gl_asgi_server_type();
    if (PyType_Ready(&WsgiServerType) < 0 || PyType_Ready(&StartType) < 0 || PyType_Ready(&WriteType) < 0 ||
        PyType_Ready(&InputType) < 0)
        return -1;
    return PyModule_AddObjectRef(m, "WsgiServer", (PyObject *)&WsgiServerType);
}
