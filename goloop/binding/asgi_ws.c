/* goloop serve's WebSocket binding (C side): the websocket scope, and send/receive of a
 * WebSocket session as C callables (asgi_ws.go's exports do the work in Go). The objects
 * are asgi.c's GLAsgiSend/GLAsgiRecv with their slots and wake-up machinery (glAsgiWait,
 * EvWake); what is the WebSocket's is send's messages and receive's. Loop thread only. */
#include "asgi.h"
#include "_cgo_export.h"

static PyTypeObject WsSendType, WsRecvType;


PyObject *gl_ws_text(const char *p, Py_ssize_t n) {
    if (n == 0) return Py_NewRef(GLS(empty));
    return PyUnicode_DecodeUTF8(p, n, "surrogateescape");
}

/* The header lines of an ASGI headers iterable (None or missing: none), checked, in asgi.c's
 * buffer (gl_asgi_hdrbuf, valid until the next call); -1 with an error. */
static int header_lines(PyObject *msg) {
    PyObject *h = gl_asgi_get(msg, GLS(headers));
    if (h == NULL && PyErr_Occurred()) return -1;
    if (h == Py_None) Py_CLEAR(h);
    return gl_asgi_header_lines(h);
}

static PyObject *ws_accept(GLAsgiSend *self, PyObject *msg) {
    PyObject *sp = gl_asgi_get(msg, GLS(subprotocol));
    if (sp == NULL && PyErr_Occurred()) return NULL;
    const char *spp = NULL;
    Py_ssize_t spn = 0;
    if (sp != NULL && sp != Py_None) {
        if (!PyUnicode_Check(sp) || (spp = PyUnicode_AsUTF8AndSize(sp, &spn)) == NULL) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "websocket.accept: subprotocol must be a str");
            Py_DECREF(sp);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < spn; i++) {
            unsigned char c = (unsigned char)spp[i];
            if (c <= ' ' || c >= 0x7f || c == ',') {
                Py_DECREF(sp);
                PyErr_SetString(PyExc_RuntimeError, "websocket.accept: invalid subprotocol");
                return NULL;
            }
        }
    }
    Py_ssize_t hn;
    const char *hp;
    if (header_lines(msg) < 0) {
        Py_XDECREF(sp);
        return NULL;
    }
    hp = gl_asgi_hdrbuf(&hn);
    int rc = glAsgiWsAccept(self->srv->base.sid, self->rid, (char *)spp, spn, (char *)hp, hn);
    Py_XDECREF(sp);
    return gl_asgi_answer(self, rc);
}

static PyObject *ws_send(GLAsgiSend *self, PyObject *msg) {
    PyObject *b = gl_asgi_get(msg, GLS(bytes));
    if (b == NULL && PyErr_Occurred()) return NULL;
    int rc;
    if (b != NULL && b != Py_None) {
        Py_buffer view;
        char *p;
        Py_ssize_t n;
        rc = gl_asgi_view(b, &view, &p, &n);  /* -1: an error, which gl_asgi_answer returns */
        if (rc == 0) {
            rc = glAsgiWsSend(self->srv->base.sid, self->rid, 0, p, n);
            PyBuffer_Release(&view);
        }
        Py_DECREF(b);
        return gl_asgi_answer(self, rc);
    }
    Py_XDECREF(b);
    PyObject *t = gl_asgi_get(msg, GLS(text));
    if (t == NULL && PyErr_Occurred()) return NULL;
    if (t == NULL || t == Py_None) {
        Py_XDECREF(t);
        PyErr_SetString(PyExc_RuntimeError, "Expected ASGI message 'websocket.send' to have 'bytes' or 'text'.");
        return NULL;
    }
    Py_ssize_t n;
    const char *p = PyUnicode_Check(t) ? PyUnicode_AsUTF8AndSize(t, &n) : NULL;
    if (p == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "websocket.send: text must be a str");
        Py_DECREF(t);
        return NULL;
    }
    rc = glAsgiWsSend(self->srv->base.sid, self->rid, 1, (char *)p, n);
    Py_DECREF(t);
    return gl_asgi_answer(self, rc);
}

static PyObject *ws_close(GLAsgiSend *self, PyObject *msg) {
    long code = 1000;
    PyObject *c = gl_asgi_get(msg, GLS(code));
    if (c == NULL && PyErr_Occurred()) return NULL;
    if (c != NULL && c != Py_None) {
        code = PyLong_AsLong(c);
        if (code == -1 && PyErr_Occurred()) {
            Py_DECREF(c);
            return NULL;
        }
    }
    Py_XDECREF(c);
    PyObject *r = gl_asgi_get(msg, GLS(reason));
    if (r == NULL && PyErr_Occurred()) return NULL;
    const char *p = NULL;
    Py_ssize_t n = 0;
    if (r != NULL && r != Py_None) {
        p = PyUnicode_Check(r) ? PyUnicode_AsUTF8AndSize(r, &n) : NULL;
        if (p == NULL) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "websocket.close: reason must be a str");
            Py_DECREF(r);
            return NULL;
        }
    }
    if (code < 0 || code > 65535) code = 0;  /* invalid: Go says so */
    int rc = glAsgiWsClose(self->srv->base.sid, self->rid, (int)code, (char *)p, n);
    Py_XDECREF(r);
    return gl_asgi_answer(self, rc);
}

static PyObject *ws_http_start(GLAsgiSend *self, PyObject *msg) {
    long status = gl_asgi_status(msg, GLS(status), 100, "websocket.http.response.start");
    if (status < 0) return NULL;
    Py_ssize_t hn;
    if (header_lines(msg) < 0) return NULL;
    const char *hp = gl_asgi_hdrbuf(&hn);
    int rc = glAsgiWsDeny(self->srv->base.sid, self->rid, (int)status, (char *)hp, hn);
    return gl_asgi_answer(self, rc);
}

static PyObject *ws_http_body(GLAsgiSend *self, PyObject *msg) {
    PyObject *body;
    int more, rc;
    if (gl_asgi_body(msg, GLS(body), GLS(more_body), &body, &more) < 0) return NULL;
    if (body == Py_None) Py_CLEAR(body);
    Py_buffer view;
    char *p;
    Py_ssize_t n;
    rc = gl_asgi_view(body, &view, &p, &n);  /* -1: an error, which gl_asgi_answer returns */
    if (rc == 0) {
        rc = glAsgiWsDenyBody(self->srv->base.sid, self->rid, p, n, more);
        PyBuffer_Release(&view);
    }
    Py_XDECREF(body);
    return gl_asgi_answer(self, rc);
}

static PyObject *ws_send_call(GLAsgiSend *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    PyObject *t = gl_asgi_send_type(self, args, nargsf, kwnames, GLS(type)), *msg;
    if (t == NULL) return NULL;
    msg = args[0];
    PyObject *r = NULL;
    if (gl_asgi_is(t, GLS(t_send)))
        r = ws_send(self, msg);
    else if (gl_asgi_is(t, GLS(t_accept)))
        r = ws_accept(self, msg);
    else if (gl_asgi_is(t, GLS(t_close)))
        r = ws_close(self, msg);
    else if (gl_asgi_is(t, GLS(t_http_start)))
        r = ws_http_start(self, msg);
    else if (gl_asgi_is(t, GLS(t_http_body)))
        r = ws_http_body(self, msg);
    else if (!PyErr_Occurred())
        PyErr_Format(PyExc_RuntimeError, "Unexpected ASGI message '%S' sent.", t);
    Py_DECREF(t);
    return r;
}

static PyTypeObject WsSendType =
    GL_ASGI_SEND_TYPE("goloop._goloop.AsgiWebSocketSend", "The `send` callable of one ASGI WebSocket session.");

/* ---------- receive ---------- */

/* Keep in step with httpserver.WSKind. */
enum { K_WAIT, K_CONNECT, K_TEXT, K_BINARY, K_DISCONNECT };

static PyObject *message(PyObject *type, PyObject *k1, PyObject *v1, PyObject *k2, PyObject *v2) {
    PyObject *m = PyDict_New();
    if (m == NULL || PyDict_SetItem(m, GLS(type), type) < 0 || (k1 && PyDict_SetItem(m, k1, v1) < 0) ||
        (k2 && PyDict_SetItem(m, k2, v2) < 0))
        Py_CLEAR(m);
    return m;
}

/* The message receive() returns now, or NULL without an error: nothing yet. */
PyObject *gl_asgi_ws_message(GLAsgiSend *s) {
    int kind = K_DISCONNECT, code = 1006;
    PyObject *reason = NULL, *data, *m = NULL;
    if (s->rid < 0) {
        PyObject *c = PyLong_FromLong(1006);
        m = c ? message(GLS(t_disconnect), GLS(code), c, GLS(reason), GLS(empty)) : NULL;
        Py_XDECREF(c);
        return m;
    }
    data = glAsgiWsRecv(s->rid, &kind, &code, &reason);
    if (data == NULL) {
        Py_XDECREF(reason);
        return NULL;
    }
    switch (kind) {
    case K_CONNECT:
        m = message(GLS(t_connect), NULL, NULL, NULL, NULL);
        break;
    case K_TEXT:
        m = message(GLS(t_receive), GLS(text), data, NULL, NULL);
        break;
    case K_BINARY:
        m = message(GLS(t_receive), GLS(bytes), data, NULL, NULL);
        break;
    case K_DISCONNECT: {
        PyObject *c = PyLong_FromLong(code);
        m = c && reason ? message(GLS(t_disconnect), GLS(code), c, GLS(reason), reason) : NULL;
        Py_XDECREF(c);
        break;
    }
    }
    Py_DECREF(data);
    Py_XDECREF(reason);
    return m;
}

static PyObject *ws_recv_call(GLAsgiRecv *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    return gl_asgi_receive(self, nargsf, kwnames, gl_asgi_ws_message);
}

static PyTypeObject WsRecvType = GL_ASGI_RECV_TYPE(
    "goloop._goloop.AsgiWebSocketReceive", "The `receive` callable of one ASGI WebSocket session.");

/* ---------- the session's scope and task ---------- */

static PyObject *split_protocols(const char *p, Py_ssize_t n) {
    PyObject *l = PyList_New(0);
    Py_ssize_t start = 0;
    for (Py_ssize_t i = 0; l != NULL && i <= n; i++) {
        if (i == n || p[i] == ',') {
            if (i > start) {
                PyObject *s = PyUnicode_DecodeUTF8(p + start, i - start, "replace");
                if (s == NULL || PyList_Append(l, s) < 0) Py_CLEAR(l);
                Py_XDECREF(s);
            }
            start = i + 1;
        }
    }
    return l;
}

/* The scope of a WebSocket session, or NULL with an error. */
static PyObject *ws_scope(GLAsgiServer *srv, const GLHead *h) {
    PyObject *scope = PyDict_Copy(srv->template), *scheme;
    if (scope == NULL) return NULL;
    if (PyDict_SetItem(scope, GLS(type), GLS(websocket)) < 0 || PyDict_SetItem(scope, GLS(http_version), GLS(v11)) < 0 ||
        gl_asgi_fill_scope(srv, scope, h) < 0 ||
        gl_set_new(scope, GLS(subprotocols), split_protocols(h->protos, h->protolen)) < 0 ||
        gl_asgi_ws_extensions(scope, h->ext) < 0)
        goto fail;
    /* the template's scheme, or a trusted proxy's X-Forwarded-Proto (as uvicorn: https or
     * wss -> wss, else ws) */
    scheme = PyDict_GetItemWithError(scope, GLS(scheme));  /* borrowed */
    if (scheme == NULL) goto fail;
    int secure = PyUnicode_Check(scheme) && (PyUnicode_CompareWithASCIIString(scheme, "https") == 0 ||
                                             PyUnicode_CompareWithASCIIString(scheme, "wss") == 0);
    if (PyDict_SetItem(scope, GLS(scheme), secure ? GLS(wss) : GLS(ws)) < 0) goto fail;
    return scope;
fail:
    Py_DECREF(scope);
    return NULL;
}

static const GLAsgiKind ws_kind = {&WsSendType, &WsRecvType, (vectorcallfunc)ws_send_call,
                                   (vectorcallfunc)ws_recv_call};

int gl_asgi_ws_request(GLAsgiServer *srv, long rid, const GLHead *h) {
    return gl_asgi_launch(srv, rid, ws_scope(srv, h), &ws_kind, NULL);
}

/* _goloop._asgi_ws_config(server, disabled, max_size, max_queue, ping_interval, ping_timeout, deflate):
 * the Go server's WebSocket settings (any HttpServer: a WSGI server's turn WebSocket off) */
static PyObject *ws_config(PyObject *mod, PyObject *args) {
    PyObject *srv;
    int disabled, deflate;
    long max_size, max_queue;
    double ping_interval, ping_timeout;
    GL_FORK_GUARD(NULL);
    if (!PyArg_ParseTuple(args, "O!pllddp", gl_server_type(), &srv, &disabled, &max_size, &max_queue, &ping_interval,
                          &ping_timeout, &deflate))
        return NULL;
    if (((GLServer *)srv)->sid < 0) {
        PyErr_SetString(PyExc_RuntimeError, "the server is closed");
        return NULL;
    }
    if (glAsgiWsConfig(((GLServer *)srv)->sid, disabled, max_size, max_queue, ping_interval, ping_timeout,
                       deflate) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef ws_functions[] = {
    {"_asgi_ws_config", (PyCFunction)ws_config, METH_VARARGS,
     "_asgi_ws_config(server, disabled, max_size, max_queue, ping_interval, ping_timeout, deflate)"},
    {NULL}};

int gl_init_asgi_ws(PyObject *m) {
    if (PyType_Ready(&WsSendType) < 0 || PyType_Ready(&WsRecvType) < 0) return -1;
    return PyModule_AddFunctions(m, ws_functions);
}
