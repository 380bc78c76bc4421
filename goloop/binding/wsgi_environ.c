/* goloop serve --interface wsgi: the environ of each request, built from the head Go passes
 * (GLHead) on the server's template, with the pool thread's caches (wsgi.h's wsgi_thread):
 * header keys and values, addresses and ports (a client sends the same ones on every
 * request), and a filled copy of the template per connection's constant items. */
#include "wsgi.h"
#include "_cgo_export.h"

/* ---------- the pool thread's caches ---------- */

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

static PyObject *protocol_str(const GLHead *h) {
    return h->major == 3 ? WS(p3) : h->major == 2 ? WS(p2) : (h->major == 1 && h->minor == 0) ? WS(p10) : WS(p11);
}

/* A TCP connection's SERVER_NAME, SERVER_PORT and REMOTE_ADDR in d: 0, or -1 with an error. */
static int set_tcp_items(PyObject *d, const GLHead *h) {
    wsgi_thread *t = wt();
    if (set_new(d, WS(SERVER_NAME), cached_str(&t->c_server, h->shost, h->shostlen)) < 0 ||
        set_new(d, WS(SERVER_PORT), port_str(h->sport)) < 0 ||
        set_new(d, WS(REMOTE_ADDR), cached_str(&t->c_remote, h->chost, h->chostlen)) < 0)
        return -1;
    return 0;
}

/* ftpl's template for h (TCP) if it fits it (borrowed), made now if it does not; NULL: none
 * (addresses too long to keep: the caller sets the items itself), or an error raised. */
static PyObject *filled_template(GLWsgiServer *srv, const GLHead *h, PyObject *input) {
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

/* A Content-Length's value (digits only, as the parser checked them), -1 if not one. */
static long long parse_clen(const char *p, Py_ssize_t n) {
    long long v = 0;
    if (n == 0 || n > 18) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

PyObject *gl_wsgi_environ(GLWsgiServer *srv, const GLHead *h, PyObject *input) {
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
    if ((!(tpl && get) && set_new(env, WS(REQUEST_METHOD), get ? Py_NewRef(WS(GET)) : gl_method(m, mlen)) < 0) ||
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
            if (Py_IS_TYPE(input, &gl_wsgi_input_type)) ((GLWsgiInput *)input)->clen = parse_clen(blob + b, c - b);
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
