/* goloop serve's binding: the ASGI messages of the spec's extensions,
 * http.response.trailers, http.response.pathsend and http.response.zerocopysend
 * (asgi_spec.go, goloop/httpserver/spec.go). Loop thread only. */
#include "asgi.h"
#include "_cgo_export.h"


/* msg[key] as a non-negative int into *out (absent or None: -1); -1 on error. */
static int opt_size(PyObject *msg, PyObject *key, long long *out) {
    *out = -1;
    PyObject *v = gl_asgi_get(msg, key);
    if (v == NULL) return PyErr_Occurred() ? -1 : 0;
    if (v != Py_None) {
        *out = PyLong_AsLongLong(v);
        if (*out < 0 && !PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "'%U' must not be negative", key);
    }
    Py_DECREF(v);
    return PyErr_Occurred() ? -1 : 0;
}

/* After a successful http.response.start: tell Go if trailers follow. */
int gl_asgi_start_trailers(GLAsgiSend *self, PyObject *msg) {
    int on = gl_asgi_flag(msg, GLS(trailers));
    if (on < 0) return -1;
    if (on) glAsgiStartTrailers(self->rid);
    return 0;
}

static PyObject *send_trailers(GLAsgiSend *self, PyObject *msg) {
    PyObject *headers = gl_asgi_get(msg, GLS(headers));
    if (headers == NULL && PyErr_Occurred()) return NULL;
    if (gl_asgi_header_lines(headers) < 0) return NULL;
    int more = gl_asgi_flag(msg, GLS(more_trailers));
    if (more < 0) return NULL;
    Py_ssize_t n;
    const char *p = gl_asgi_hdrbuf(&n);
    return gl_asgi_answer(self, glAsgiSendTrailers(self->rid, (char *)p, n, more));
}

static PyObject *send_path(GLAsgiSend *self, PyObject *msg) {
    PyObject *path = gl_asgi_get(msg, GLS(path));
    if (path == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "path");
        return NULL;
    }
    PyObject *b = NULL;
    if (!PyUnicode_FSConverter(path, &b)) {
        Py_DECREF(path);
        return NULL;
    }
    Py_DECREF(path);
    int rc = glAsgiSendFile(self->rid, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b));
    Py_DECREF(b);
    return gl_asgi_answer(self, rc);
}

/* http.response.zerocopysend: {file: a descriptor or a file object, offset, count, more_body}.
 * Without offset the part starts at the file's position, which moves past it: a file
 * object's own (tell/seek: a buffered file's differs from its descriptor's), a
 * descriptor's (lseek, in Go). */
static PyObject *send_zerocopy(GLAsgiSend *self, PyObject *msg) {
    PyObject *file = gl_asgi_get(msg, GLS(file)), *ret = NULL, *pos = NULL;
    long long offset, count, sent = 0;
    int fd, more, by_object, rc;
    if (file == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "file");
        return NULL;
    }
    if ((fd = PyObject_AsFileDescriptor(file)) < 0 || opt_size(msg, GLS(offset), &offset) < 0 ||
        opt_size(msg, GLS(count), &count) < 0 || (more = gl_asgi_flag(msg, GLS(more_body))) < 0)
        goto done;
    by_object = offset < 0 && !PyLong_Check(file);
    if (by_object) {
        if ((pos = PyObject_CallMethodNoArgs(file, GLS(tell))) == NULL) goto done;
        if ((offset = PyLong_AsLongLong(pos)) < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "the file's position is negative");
            goto done;
        }
    }
    rc = glAsgiSendFD(self->rid, fd, offset, count, more, &sent);
    if (rc >= 0 && by_object) {
        PyObject *where = PyLong_FromLongLong(offset + sent);
        PyObject *r = where ? gl_call_method1(file, "seek", where) : NULL;
        Py_XDECREF(where);
        if (r == NULL) goto done;
        Py_DECREF(r);
    }
    ret = gl_asgi_answer(self, rc);
done:
    Py_XDECREF(pos);
    Py_DECREF(file);
    return ret;
}

/* send() of a message other than http.response.start/body. */
PyObject *gl_asgi_send_ext(GLAsgiSend *self, PyObject *type, PyObject *msg) {
    if (gl_asgi_is(type, GLS(t_trailers))) return send_trailers(self, msg);
    if (gl_asgi_is(type, GLS(t_pathsend))) return send_path(self, msg);
    if (gl_asgi_is(type, GLS(t_zerocopysend))) return send_zerocopy(self, msg);
    if (!PyErr_Occurred()) PyErr_Format(PyExc_RuntimeError, "Unexpected ASGI message '%S' sent.", type);
    return NULL;
}

/* A websocket scope's extensions (it copies the HTTP scope's template): the denial response,
 * and over TLS the connection's "tls" (from http_ext, its HTTP scopes' extensions, or NULL). */
int gl_asgi_ws_extensions(PyObject *scope, PyObject *http_ext) {
    PyObject *e = Py_BuildValue("{s:{}}", "websocket.http.response");
    if (e == NULL) return -1;
    PyObject *tls = http_ext != NULL ? PyDict_GetItemWithError(http_ext, GLS(tls)) : NULL;  /* borrowed */
    int rc = (tls == NULL && PyErr_Occurred()) ? -1 : 0;
    if (rc == 0 && tls != NULL) rc = PyDict_SetItem(e, GLS(tls), tls);
    if (rc == 0) rc = PyDict_SetItemString(scope, "extensions", e);
    Py_DECREF(e);
    return rc;
}

/* The extensions of a TLS connection's HTTP scopes (server_tls.go keeps one per connection):
 * the template's and "tls" (https://asgi.readthedocs.io/en/latest/extensions.html#tls).
 * Segments of blob: the server's certificate (PEM, empty: None), the client certificate's
 * subject (RFC 4514, empty: None), then the client's chain (PEM each). */
PyObject *gl_asgi_tls_ext(GLAsgiServer *srv, const char *blob, const int32_t *ends, int nends, int version,
                          int cipher) {
#define SEG(i) (blob + ((i) > 0 ? ends[(i) - 1] : 0)), (Py_ssize_t)(ends[i] - ((i) > 0 ? ends[(i) - 1] : 0))
#define STR_OR_NONE(i) (ends[i] == ((i) > 0 ? ends[(i) - 1] : 0) ? Py_NewRef(Py_None) : PyUnicode_DecodeUTF8(SEG(i), "replace"))
    PyObject *base = PyDict_GetItemWithError(srv->template, GLS(extensions));  /* borrowed */
    if (base == NULL && PyErr_Occurred()) return NULL;
    PyObject *ext = base != NULL && PyDict_Check(base) ? PyDict_Copy(base) : PyDict_New();
    PyObject *chain = PyList_New(0);
    PyObject *tls = NULL;
    if (ext == NULL || chain == NULL) goto fail;
    for (int i = 2; i < nends; i++) {
        PyObject *pem = PyUnicode_DecodeUTF8(SEG(i), "replace");
        if (pem == NULL || PyList_Append(chain, pem) < 0) {
            Py_XDECREF(pem);
            goto fail;
        }
        Py_DECREF(pem);
    }
    tls = Py_BuildValue("{s:N,s:O,s:N,s:O,s:i,s:i}", "server_cert", STR_OR_NONE(0), "client_cert_chain", chain,
                        "client_cert_name", STR_OR_NONE(1), "client_cert_error", Py_None, "tls_version", version,
                        "cipher_suite", cipher);
    if (tls == NULL || PyDict_SetItem(ext, GLS(tls), tls) < 0) goto fail;
    Py_DECREF(tls);
    Py_DECREF(chain);
    return ext;
fail:
    Py_XDECREF(tls);
    Py_XDECREF(chain);
    Py_XDECREF(ext);
    return NULL;
#undef STR_OR_NONE
#undef SEG
}

