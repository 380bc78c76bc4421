/* goloop.http: the HTTP/1.1 parser's Python types (httptools' API). The C side holds the
 * type and method tables, the protocol's cached callbacks (so GC traversal is plain C) and
 * the helpers Go calls to deliver events; the parser and its state live in parser.go. */
#include "parser.h"
#include "_cgo_export.h"

PyObject *gl_http_exc[GL_HEXC_COUNT];


/* ---------- event batches ---------- */

static GLHttpBatch *batch_free_list;
static int batch_free_count;
#ifdef Py_GIL_DISABLED
/* Parsers of several threads share the free list: without the GIL it needs its own lock. */
#include <pthread.h>
static pthread_mutex_t batch_mu = PTHREAD_MUTEX_INITIALIZER;
#define BATCH_LOCK() pthread_mutex_lock(&batch_mu)
#define BATCH_UNLOCK() pthread_mutex_unlock(&batch_mu)
#else
#define BATCH_LOCK()
#define BATCH_UNLOCK()
#endif

static GLHttpBatch *batch_acquire(void) {
    BATCH_LOCK();
    GLHttpBatch *b = batch_free_list;
    if (b != NULL) {
        batch_free_list = b->next;
        batch_free_count--;
    }
    BATCH_UNLOCK();
    if (b != NULL) {
        b->next = NULL;
        return b;
    }
    b = PyMem_RawCalloc(1, sizeof(GLHttpBatch));
    if (b == NULL) PyErr_NoMemory();
    return b;
}

static void batch_release(GLHttpBatch *b) {
    /* Go grows the arrays with realloc: give back what one huge feed needed. */
    if (b->evcap > 4096) {
        free(b->ev);
        b->ev = NULL;
        b->evcap = 0;
    }
    if (b->acap > 256 * 1024) {
        free(b->arena);
        b->arena = NULL;
        b->acap = 0;
    }
    b->nev = 0;
    BATCH_LOCK();
    if (batch_free_count < 8) {
        b->next = batch_free_list;
        batch_free_list = b;
        batch_free_count++;
        b = NULL;
    }
    BATCH_UNLOCK();
    if (b != NULL) {
        free(b->ev);
        free(b->arena);
        PyMem_RawFree(b);
    }
}

static const char *const cb_names[GL_HCB_COUNT] = {
    "on_message_begin", "on_url", "on_status", "on_header", "on_headers_complete",
    "on_body", "on_message_complete", "on_chunk_header", "on_chunk_complete",
};

/* Raises HttpParserCallbackError with the pending exception (the callback's) as its
 * __context__ and __cause__. Without a pending exception (a later feed_data on a parser that
 * failed) it raises a bare HttpParserCallbackError, as httptools does. */
static void raise_callback_error(int slot) {
    PyObject *type = NULL, *value = NULL, *tb = NULL;
    PyErr_Fetch(&type, &value, &tb);
    if (type != NULL) {
        PyErr_NormalizeException(&type, &value, &tb);
        if (tb != NULL && value != NULL) PyException_SetTraceback(value, tb);
    }
    PyObject *exc = NULL, *msg = PyUnicode_FromFormat("`%s` callback error", cb_names[slot]);
    if (msg != NULL) {
        exc = PyObject_CallOneArg(gl_http_exc[GL_HEXC_CALLBACK], msg);
        Py_DECREF(msg);
    }
    if (exc == NULL) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return;
    }
    if (value != NULL) {
        Py_INCREF(value);
        PyException_SetContext(exc, value); /* steals the reference just made */
        PyException_SetCause(exc, value);   /* steals the one PyErr_Fetch gave */
        value = NULL;
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    /* PyErr_Restore, unlike PyErr_SetObject, leaves __context__ alone when feed_data runs
     * inside an except block. */
    Py_INCREF(Py_TYPE(exc));
    PyErr_Restore((PyObject *)Py_TYPE(exc), exc, NULL);
}

static void raise_outcome(GLHttpBatch *b) {
    if (b->err_exc == GL_HEXC_UPGRADE) {
        PyObject *o = PyLong_FromSsize_t(b->upgrade_offset);
        if (o == NULL) return;
        PyErr_SetObject(gl_http_exc[GL_HEXC_UPGRADE], o);
        Py_DECREF(o);
    } else {
        PyErr_SetString(gl_http_exc[b->err_exc], b->err_msg);
    }
}

static inline void set_method(GLHttpParser *self, const char *p, Py_ssize_t n) {
    if (n > GL_HTTP_METHOD_MAX) {
        self->method_len = 255;
        return;
    }
    memcpy(self->method, p, n);
    self->method_len = (unsigned char)n;
}

/* a[:n] == b[:n], inline for the short strings of request lines and headers (no call). */
static inline int same_bytes(const char *a, const char *b, Py_ssize_t n) {
    uint64_t x, y;
    if (n >= 8) {
        Py_ssize_t i = 0;
        for (; i + 8 <= n; i += 8) {
            memcpy(&x, a + i, 8);
            memcpy(&y, b + i, 8);
            if (x != y) return 0;
        }
        if (i == n) return 1;
        memcpy(&x, a + n - 8, 8); /* the tail, overlapping */
        memcpy(&y, b + n - 8, 8);
        return x == y;
    }
    if (n >= 4) {
        uint32_t u, v, w, z;
        memcpy(&u, a, 4);
        memcpy(&v, b, 4);
        memcpy(&w, a + n - 4, 4);
        memcpy(&z, b + n - 4, 4);
        return u == v && w == z;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* New reference to bytes(p[:n]), or to *slot if it holds the same bytes (then kept). */
static inline PyObject *cached_bytes(PyObject **slot, const char *p, Py_ssize_t n) {
    PyObject *o = *slot;
    if (o != NULL && PyBytes_GET_SIZE(o) == n && same_bytes(PyBytes_AS_STRING(o), p, n)) {
        Py_INCREF(o);
        return o;
    }
    o = PyBytes_FromStringAndSize(p, n);
    if (o != NULL && n <= GL_HCACHE_MAXLEN) {
        Py_INCREF(o);
        Py_XSETREF(*slot, o);
    }
    return o;
}

/* Calls the protocol's callbacks for the events of b, in order; stops at the first that
 * raises (leaving the parser failed, as httptools does). Returns 0 or -1 (exception set). */
static int dispatch(GLHttpParser *self, GLHttpBatch *b, const char *input) {
    GLHttpEvent *ev = b->ev, *end = b->ev + b->nev;
    for (; ev < end; ev++) {
        int slot = ev->kind;
        memcpy(&self->major, &ev->major, 4); /* major, minor, keep_alive, upgrade */
        self->status = ev->status;
        /* An event without data (message begin, headers complete...) leaves off1 unwritten
         * (whatever the reused event array held): the address is formed only for the events
         * that read data, since pointer arithmetic past the buffer is undefined behaviour
         * even when nothing reads through it (UBSan's pointer-overflow check). */
#define EV_DATA1() (((ev->arena & 1) ? b->arena : input) + ev->off1)
        if (slot == GL_HCB_URL || slot == GL_HCB_STATUS) {
            self->hidx = 0;
            if (slot == GL_HCB_URL) {
                if (ev->arena & 4) set_method(self, (const char *)&ev->off2, ev->len2);
                else set_method(self, ((ev->arena & 2) ? b->arena : input) + ev->off2, ev->len2);
            }
        }
        PyObject *fn = self->fn[slot], *r;
        if (fn == NULL) continue;
        /* args[0] is self for a bound method, else the slot vectorcall may use. */
        PyObject *args[3] = {self->fself[slot], NULL, NULL};
        Py_ssize_t nargs = 0;
        switch (slot) {
        case GL_HCB_URL:
        case GL_HCB_STATUS:
            args[1] = cached_bytes(&self->line_cache, EV_DATA1(), ev->len1);
            if (args[1] == NULL) goto failed;
            nargs = 1;
            break;
        case GL_HCB_BODY:
            args[1] = PyBytes_FromStringAndSize(EV_DATA1(), ev->len1);
            if (args[1] == NULL) goto failed;
            nargs = 1;
            break;
        case GL_HCB_HEADER: {
            const char *p1 = EV_DATA1(), *p2 = ((ev->arena & 2) ? b->arena : input) + ev->off2;
            unsigned int i = self->hidx++;
            if (i < GL_HCACHE) {
                args[1] = cached_bytes(&self->hcache[i][0], p1, ev->len1);
                args[2] = args[1] ? cached_bytes(&self->hcache[i][1], p2, ev->len2) : NULL;
            } else {
                args[1] = PyBytes_FromStringAndSize(p1, ev->len1);
                args[2] = args[1] ? PyBytes_FromStringAndSize(p2, ev->len2) : NULL;
            }
            if (args[2] == NULL) {
                Py_XDECREF(args[1]);
                goto failed;
            }
            nargs = 2;
            break;
        }
        }
        /* fn and fself are borrowed from self->cb[slot], which nothing can release during the
         * call (re-initializing is refused while busy; the caller owns self). fn is held all
         * the same: the call reads it anyway, where cb would be one more cold line. */
        Py_INCREF(fn);
        if (args[0] != NULL)
            r = PyObject_Vectorcall(fn, args, nargs + 1, NULL);
        else
            r = PyObject_Vectorcall(fn, args + 1, nargs | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        Py_DECREF(fn);
        Py_XDECREF(args[1]);
        Py_XDECREF(args[2]);
        if (r == NULL) goto failed;
        Py_DECREF(r);
        continue;
    failed:
        self->failed = (unsigned char)(1 + slot);
        raise_callback_error(slot);
        return -1;
    }
    self->major = b->major;
    self->minor = b->minor;
    self->keep_alive = b->keep_alive;
    self->upgrade = b->upgrade;
    self->status = b->status;
    if (!self->response) {
        if (b->method_len == 255) self->method_len = 255;
        else if (b->method_len != 254) set_method(self, b->method, b->method_len);
    }
    if (b->err_exc >= 0) {
        raise_outcome(b);
        return -1;
    }
    return 0;
}
#undef EV_DATA1

/* ---------- HttpRequestParser / HttpResponseParser ---------- */

static PyTypeObject RequestParserType, ResponseParserType;

static PyObject *hp_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    GLHttpParser *self = (GLHttpParser *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->id = -1;
    self->response = PyType_IsSubtype(type, &ResponseParserType) ? 1 : 0;
    return (PyObject *)self;
}

static int hp_traverse(GLHttpParser *self, visitproc visit, void *arg) {
    for (int i = 0; i < GL_HCB_COUNT; i++) Py_VISIT(self->cb[i]);
    return 0;
}

static int hp_clear(GLHttpParser *self) {
    for (int i = 0; i < GL_HCB_COUNT; i++) {
        self->fn[i] = self->fself[i] = NULL;
        Py_CLEAR(self->cb[i]);
    }
    return 0;
}

static void clear_caches(GLHttpParser *self) {
    Py_CLEAR(self->line_cache);
    for (int i = 0; i < GL_HCACHE; i++) {
        Py_CLEAR(self->hcache[i][0]);
        Py_CLEAR(self->hcache[i][1]);
    }
    self->hidx = 0;
}

static void hp_dealloc(GLHttpParser *self) {
    PyObject_GC_UnTrack(self);
    hp_clear(self);
    clear_caches(self);
    if (self->id >= 0 && !gl_forked) glHttpFree(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* protocol.<callback slot>: 1 with *res set, 0 with *res NULL when the protocol has no such
 * attribute, -1 with an exception. A protocol usually lacks a few callbacks, and raising and
 * clearing an AttributeError for each cost ~0.4 us, most of a parser's construction (a
 * parser per connection): the lookup that does not raise is public API from Python 3.13
 * (PyObject_GetOptionalAttr) and _PyObject_LookupAttr, its name before, until then. */
static PyObject *cb_name_objs[GL_HCB_COUNT];  /* set at module init (gl_init_http) */

static int getattr_optional(PyObject *obj, int slot, PyObject **res) {
#if PY_VERSION_HEX >= 0x030D0000
    return PyObject_GetOptionalAttr(obj, cb_name_objs[slot], res);
#else
    return _PyObject_LookupAttr(obj, cb_name_objs[slot], res);
#endif
}

static int hp_init(GLHttpParser *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"protocol", "max_header_size", NULL};
    PyObject *protocol, *maxh = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|$O:HttpParser", kwlist, &protocol, &maxh)) return -1;
    /* max_header_size: the limit of the start line plus header section, of the trailer
     * section and of a chunk-size line, in bytes; None: no limit (httptools/llhttp). */
    Py_ssize_t max_header = GL_HTTP_DEFAULT_MAX_HEADER;
    if (maxh == Py_None) {
        max_header = 0;
    } else if (maxh != NULL) {
        max_header = PyNumber_AsSsize_t(maxh, PyExc_OverflowError);
        if (max_header == -1 && PyErr_Occurred()) return -1;
        if (max_header <= 0) {
            PyErr_SetString(PyExc_ValueError, "max_header_size must be a positive int or None");
            return -1;
        }
    }
    GL_FORK_GUARD(-1);
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "cannot re-initialize an HTTP parser from its callback");
        return -1;
    }
    PyObject *cbs[GL_HCB_COUNT] = {NULL};
    unsigned int want = 0;
    for (int i = 0; i < GL_HCB_COUNT; i++) {
        if ((i == GL_HCB_URL && self->response) || (i == GL_HCB_STATUS && !self->response)) continue;
        PyObject *cb;
        if (getattr_optional(protocol, i, &cb) < 0) {
            for (int j = 0; j < i; j++) Py_XDECREF(cbs[j]);
            return -1;
        }
        if (cb == NULL) continue;
        if (cb == Py_None) {
            Py_DECREF(cb);
            continue;
        }
        cbs[i] = cb;
        want |= 1u << i;
    }
    PyObject *old[GL_HCB_COUNT];
    for (int i = 0; i < GL_HCB_COUNT; i++) {
        old[i] = self->cb[i];
        PyObject *cb = self->cb[i] = cbs[i];
        if (cb != NULL && PyMethod_Check(cb)) {
            self->fn[i] = PyMethod_GET_FUNCTION(cb);
            self->fself[i] = PyMethod_GET_SELF(cb);
        } else {
            self->fn[i] = cb;
            self->fself[i] = NULL;
        }
    }
    for (int i = 0; i < GL_HCB_COUNT; i++) Py_XDECREF(old[i]);
    clear_caches(self);
    self->failed = 0;
    self->major = self->minor = self->keep_alive = self->upgrade = 0;
    self->status = 0;
    self->method_len = 0;
    if (glHttpInit(self, want) < 0) return -1;
    return glHttpSetMaxHeaderSize(self, max_header);
}

static PyObject *hp_feed_data(GLHttpParser *self, PyObject *data) {
    GL_FORK_GUARD(NULL);
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "feed_data() called from one of the parser's callbacks");
        return NULL;
    }
    Py_buffer view;
    const char *buf;
    Py_ssize_t len;
    int owned = 0;
    if (PyBytes_CheckExact(data)) {
        buf = PyBytes_AS_STRING(data);
        len = PyBytes_GET_SIZE(data);
    } else {
        if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) return NULL;
        buf = (const char *)view.buf;
        len = view.len;
        owned = 1;
    }
    int rc = -1;
    if (self->failed) {
        raise_callback_error(self->failed - 1);
    } else {
        GLHttpBatch *b = batch_acquire();
        if (b != NULL) {
            self->busy = 1;
            rc = glHttpFeed(self, b, (char *)buf, len);
            if (rc == 0) rc = dispatch(self, b, buf);
            self->busy = 0;
            batch_release(b);
        }
    }
    if (owned) PyBuffer_Release(&view);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *version_cache[10][10];  /* set at module init (gl_init_http) */

static PyObject *hp_get_http_version(GLHttpParser *self, PyObject *Py_UNUSED(ignored)) {
    unsigned a = self->major, b = self->minor;
    if (a < 10 && b < 10) {
        PyObject *s = version_cache[a][b];
        Py_INCREF(s);
        return s;
    }
    return PyUnicode_FromFormat("%u.%u", a, b);
}

static PyObject *hp_should_keep_alive(GLHttpParser *self, PyObject *Py_UNUSED(ignored)) {
    return PyBool_FromLong(self->keep_alive);
}

static PyObject *hp_should_upgrade(GLHttpParser *self, PyObject *Py_UNUSED(ignored)) {
    return PyBool_FromLong(self->upgrade);
}

static PyObject *hp_get_method(GLHttpParser *self, PyObject *Py_UNUSED(ignored)) {
    if (self->method_len > GL_HTTP_METHOD_MAX) {
        GL_FORK_GUARD(NULL);
        return glHttpMethod(self);
    }
    return PyBytes_FromStringAndSize(self->method, self->method_len);
}

static PyObject *hp_get_status_code(GLHttpParser *self, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromLong(self->status);
}

/* httptools' keyword order, and llhttp's flag bit of each. */
static const unsigned int lenient_bits[10] = {
    1u << 0, /* lenient_headers */
    1u << 1, /* lenient_chunked_length */
    1u << 2, /* lenient_keep_alive */
    1u << 3, /* lenient_transfer_encoding */
    1u << 4, /* lenient_version */
    1u << 5, /* lenient_data_after_close */
    1u << 6, /* lenient_optional_lf_after_cr */
    1u << 8, /* lenient_optional_cr_before_lf */
    1u << 7, /* lenient_optional_crlf_after_chunk */
    1u << 9, /* lenient_spaces_after_chunk_size */
};

static PyObject *hp_set_dangerous_leniencies(GLHttpParser *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {
        "lenient_headers", "lenient_chunked_length", "lenient_keep_alive",
        "lenient_transfer_encoding", "lenient_version", "lenient_data_after_close",
        "lenient_optional_lf_after_cr", "lenient_optional_cr_before_lf",
        "lenient_optional_crlf_after_chunk", "lenient_spaces_after_chunk_size", NULL};
    PyObject *v[10] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OOOOOOOOOO:set_dangerous_leniencies", kwlist,
                                     &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]))
        return NULL;
    unsigned int set = 0, clear = 0;
    for (int i = 0; i < 10; i++) {
        if (v[i] == NULL || v[i] == Py_None) continue;
        int t = PyObject_IsTrue(v[i]);
        if (t < 0) return NULL;
        if (t) set |= lenient_bits[i];
        else clear |= lenient_bits[i];
    }
    GL_FORK_GUARD(NULL);
    if (glHttpSetLenient(self, set, clear) < 0) return NULL;
    Py_RETURN_NONE;
}

#define COMMON_METHODS \
    {"feed_data", (PyCFunction)hp_feed_data, METH_O, \
     "feed_data($self, data, /)\n--\n\nFeed data (bytes, bytearray, memoryview) to the parser.\n\n" \
     "Calls the protocol's callbacks. On an HTTP upgrade, raises HttpParserUpgrade whose\n" \
     "args[0] is the offset of the non-HTTP data in data."}, \
    {"get_http_version", (PyCFunction)hp_get_http_version, METH_NOARGS, \
     "get_http_version($self, /)\n--\n\nThe HTTP version of the current message, e.g. '1.1'."}, \
    {"should_keep_alive", (PyCFunction)hp_should_keep_alive, METH_NOARGS, \
     "should_keep_alive($self, /)\n--\n\nTrue if the connection may be reused after this message."}, \
    {"should_upgrade", (PyCFunction)hp_should_upgrade, METH_NOARGS, \
     "should_upgrade($self, /)\n--\n\nTrue if the message upgrades the connection (valid from on_headers_complete)."}, \
    {"set_dangerous_leniencies", (PyCFunction)(void (*)(void))hp_set_dangerous_leniencies, \
     METH_VARARGS | METH_KEYWORDS, \
     "set_dangerous_leniencies($self, /, lenient_headers=None, lenient_chunked_length=None, " \
     "lenient_keep_alive=None, lenient_transfer_encoding=None, lenient_version=None, " \
     "lenient_data_after_close=None, lenient_optional_lf_after_cr=None, " \
     "lenient_optional_cr_before_lf=None, lenient_optional_crlf_after_chunk=None, " \
     "lenient_spaces_after_chunk_size=None)\n--\n\n" \
     "Relax parsing rules (llhttp's leniencies); None leaves a flag unchanged."}

static PyMethodDef request_methods[] = {
    COMMON_METHODS,
    {"get_method", (PyCFunction)hp_get_method, METH_NOARGS,
     "get_method($self, /)\n--\n\nThe request method, as bytes."},
    {NULL}
};

static PyMethodDef response_methods[] = {
    COMMON_METHODS,
    {"get_status_code", (PyCFunction)hp_get_status_code, METH_NOARGS,
     "get_status_code($self, /)\n--\n\nThe response status code."},
    {NULL}
};

static PyTypeObject RequestParserType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop.http.HttpRequestParser",
    .tp_basicsize = sizeof(GLHttpParser),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "HttpRequestParser(protocol)\n--\n\n"
              "Parses HTTP requests (server side), calling the protocol's on_* callbacks.",
    .tp_new = hp_new,
    .tp_init = (initproc)hp_init,
    .tp_dealloc = (destructor)hp_dealloc,
    .tp_traverse = (traverseproc)hp_traverse,
    .tp_clear = (inquiry)hp_clear,
    .tp_methods = request_methods,
};

static PyTypeObject ResponseParserType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop.http.HttpResponseParser",
    .tp_basicsize = sizeof(GLHttpParser),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "HttpResponseParser(protocol)\n--\n\n"
              "Parses HTTP responses (client side), calling the protocol's on_* callbacks.",
    .tp_new = hp_new,
    .tp_init = (initproc)hp_init,
    .tp_dealloc = (destructor)hp_dealloc,
    .tp_traverse = (traverseproc)hp_traverse,
    .tp_clear = (inquiry)hp_clear,
    .tp_methods = response_methods,
};

/* ---------- URL and parse_url ---------- */

typedef struct {
    PyObject_HEAD
    PyObject *schema, *host, *port, *path, *query, *fragment, *userinfo;
} GLURL;

static PyTypeObject URLType;

static void url_dealloc(GLURL *u) {
    Py_XDECREF(u->schema);
    Py_XDECREF(u->host);
    Py_XDECREF(u->port);
    Py_XDECREF(u->path);
    Py_XDECREF(u->query);
    Py_XDECREF(u->fragment);
    Py_XDECREF(u->userinfo);
    Py_TYPE(u)->tp_free((PyObject *)u);
}

static PyObject *url_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"schema", "host", "port", "path", "query", "fragment", "userinfo", NULL};
    PyObject *v[7];
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOO:URL", kwlist,
                                     &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6]))
        return NULL;
    GLURL *u = (GLURL *)type->tp_alloc(type, 0);
    if (u == NULL) return NULL;
    PyObject **f[7] = {&u->schema, &u->host, &u->port, &u->path, &u->query, &u->fragment, &u->userinfo};
    for (int i = 0; i < 7; i++) {
        Py_INCREF(v[i]);
        *f[i] = v[i];
    }
    return (PyObject *)u;
}

static PyObject *url_repr(GLURL *u) {
    return PyUnicode_FromFormat(
        "<URL schema: %R, host: %R, port: %R, path: %R, query: %R, fragment: %R, userinfo: %R>",
        u->schema, u->host, u->port, u->path, u->query, u->fragment, u->userinfo);
}

static PyMemberDef url_members[] = {
    {"schema", T_OBJECT, offsetof(GLURL, schema), READONLY, NULL},
    {"host", T_OBJECT, offsetof(GLURL, host), READONLY, NULL},
    {"port", T_OBJECT, offsetof(GLURL, port), READONLY, NULL},
    {"path", T_OBJECT, offsetof(GLURL, path), READONLY, NULL},
    {"query", T_OBJECT, offsetof(GLURL, query), READONLY, NULL},
    {"fragment", T_OBJECT, offsetof(GLURL, fragment), READONLY, NULL},
    {"userinfo", T_OBJECT, offsetof(GLURL, userinfo), READONLY, NULL},
    {NULL}
};

static PyTypeObject URLType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop.http.URL",
    .tp_basicsize = sizeof(GLURL),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "URL(schema, host, port, path, query, fragment, userinfo)\n--\n\n"
              "A URL split by parse_url(); absent parts are None.",
    .tp_new = url_new,
    .tp_dealloc = (destructor)url_dealloc,
    .tp_repr = (reprfunc)url_repr,
    .tp_members = url_members,
};

#define MAX_URL_LENGTH 65535 /* http_parser's limit, which httptools enforces */

static PyObject *mod_parse_url(PyObject *m, PyObject *url) {
    GL_FORK_GUARD(NULL);
    Py_buffer view;
    if (PyObject_GetBuffer(url, &view, PyBUF_SIMPLE) < 0) return NULL;
    if (view.len > MAX_URL_LENGTH) {
        PyErr_Format(gl_http_exc[GL_HEXC_URL],
                     "url is too long: url length of %zd bytes exceeds the maximum of %d bytes",
                     view.len, MAX_URL_LENGTH);
        PyBuffer_Release(&view);
        return NULL;
    }
    GLURLParts parts;
    int rc = glParseURL((char *)view.buf, view.len, &parts);
    if (rc != 0) {
        if (rc > 0) PyErr_Format(gl_http_exc[GL_HEXC_URL], "invalid url %R", url);
        PyBuffer_Release(&view);
        return NULL;
    }
    GLURL *u = (GLURL *)URLType.tp_alloc(&URLType, 0);
    if (u == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    /* parts order: schema, host, path, query, fragment, userinfo */
    PyObject **f[6] = {&u->schema, &u->host, &u->path, &u->query, &u->fragment, &u->userinfo};
    const char *buf = (const char *)view.buf;
    for (int i = 0; i < 6; i++) {
        if (parts.len[i] < 0) {
            Py_INCREF(Py_None);
            *f[i] = Py_None;
        } else if ((*f[i] = PyBytes_FromStringAndSize(buf + parts.off[i], parts.len[i])) == NULL) {
            goto fail;
        }
    }
    if (parts.port < 0) {
        Py_INCREF(Py_None);
        u->port = Py_None;
    } else if ((u->port = PyLong_FromLong(parts.port)) == NULL) {
        goto fail;
    }
    PyBuffer_Release(&view);
    return (PyObject *)u;
fail:
    PyBuffer_Release(&view);
    Py_DECREF(u);
    return NULL;
}

static PyMethodDef http_functions[] = {
    {"parse_url", mod_parse_url, METH_O,
     "parse_url($module, url, /)\n--\n\nSplit a request-target (bytes-like) into a URL object; "
     "raises HttpParserInvalidURLError."},
    {NULL}
};

/* ---------- module init ---------- */

int gl_init_http(PyObject *module) {
    /* Caches shared by every thread's parsers: made here, once, not on first use. */
    for (int i = 0; i < GL_HCB_COUNT; i++)
        if (cb_name_objs[i] == NULL && (cb_name_objs[i] = PyUnicode_InternFromString(cb_names[i])) == NULL)
            return -1;
    for (unsigned a = 0; a < 10; a++)
        for (unsigned b = 0; b < 10; b++)
            if (version_cache[a][b] == NULL &&
                (version_cache[a][b] = PyUnicode_FromFormat("%u.%u", a, b)) == NULL)
                return -1;
    static const struct { const char *name; int base; const char *doc; } excs[GL_HEXC_COUNT] = {
        {"goloop.http.HttpParserError", -1, "The input is not valid HTTP/1.x."},
        {"goloop.http.HttpParserCallbackError", GL_HEXC_ERROR,
         "A protocol callback raised; the callback's exception is the __cause__ (and __context__)."},
        {"goloop.http.HttpParserInvalidStatusError", GL_HEXC_ERROR, "Invalid status line."},
        {"goloop.http.HttpParserInvalidMethodError", GL_HEXC_ERROR, "Invalid request method."},
        {"goloop.http.HttpParserInvalidURLError", GL_HEXC_ERROR, "Invalid request-target / URL."},
        {"goloop.http.HttpParserUpgrade", -1,
         "The connection switches protocols; args[0] is the offset of the first byte after the "
         "upgrade request in the data passed to feed_data. Not a subclass of HttpParserError."},
    };
    static const char *short_names[GL_HEXC_COUNT] = {
        "HttpParserError", "HttpParserCallbackError", "HttpParserInvalidStatusError",
        "HttpParserInvalidMethodError", "HttpParserInvalidURLError", "HttpParserUpgrade",
    };
    for (int i = 0; i < GL_HEXC_COUNT; i++) {
        if (gl_http_exc[i] == NULL) {
            PyObject *base = excs[i].base < 0 ? PyExc_Exception : gl_http_exc[excs[i].base];
            gl_http_exc[i] = PyErr_NewExceptionWithDoc(excs[i].name, excs[i].doc, base, NULL);
            if (gl_http_exc[i] == NULL) return -1;
        }
        Py_INCREF(gl_http_exc[i]);
        if (PyModule_AddObject(module, short_names[i], gl_http_exc[i]) < 0) {
            Py_DECREF(gl_http_exc[i]);
            return -1;
        }
    }
    if (PyType_Ready(&RequestParserType) < 0 || PyType_Ready(&ResponseParserType) < 0 ||
        PyType_Ready(&URLType) < 0)
        return -1;
    PyTypeObject *types[3] = {&RequestParserType, &ResponseParserType, &URLType};
    const char *names[3] = {"HttpRequestParser", "HttpResponseParser", "URL"};
    for (int i = 0; i < 3; i++) {
        Py_INCREF(types[i]);
        if (PyModule_AddObject(module, names[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(types[i]);
            return -1;
        }
    }
    return PyModule_AddFunctions(module, http_functions);
}
