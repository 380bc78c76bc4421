/* goloop serve's WebSocket binding (C side): the websocket scope, and send/receive of a
 * WebSocket session as C callables (asgi_ws.go's exports do the work in Go). The objects
 * share asgi.c's GLAsgiSend layout (its wake-up machinery: glAsgiWait, EvWake). Loop
 * thread only. */
#include "asgi.h"
#include "_cgo_export.h"

static PyTypeObject WsSendType, WsRecvType;
static PyTypeObject *server_type;

static PyObject *s_type, *s_websocket, *s_scheme, *s_http, *s_https, *s_ws, *s_wss, *s_http_version, *s_v11,
    *s_path, *s_raw_path, *s_query_string, *s_headers, *s_client, *s_server, *s_state, *s_subprotocols,
    *s_subprotocol, *s_bytes, *s_text, *s_code, *s_reason, *s_status, *s_body, *s_more_body,
    *s_t_connect, *s_t_receive, *s_t_disconnect, *s_t_accept, *s_t_send, *s_t_close, *s_t_http_start,
    *s_t_http_body, *s_create_task, *s_create_future, *s_empty;

PyObject *gl_ws_text(const char *p, Py_ssize_t n) {
    if (n == 0) return Py_NewRef(s_empty);
    return PyUnicode_DecodeUTF8(p, n, "surrogateescape");
}

static PyObject *get(PyObject *msg, PyObject *key) {
    if (PyDict_CheckExact(msg)) return Py_XNewRef(PyDict_GetItemWithError(msg, key));
    PyObject *v = PyObject_GetItem(msg, key);
    if (v == NULL && PyErr_ExceptionMatches(PyExc_KeyError)) PyErr_Clear();
    return v;
}

static int is(PyObject *t, PyObject *s) {
    return t == s || (PyUnicode_Check(t) && PyUnicode_Compare(t, s) == 0);
}

static PyObject *raise_disconnected(void) {
    PyErr_SetString(gl_asgi_client_disconnected(), "the client disconnected");
    return NULL;
}

/* "name: value\r\n" lines of an ASGI headers iterable, checked as h11 checks them. */
static PyObject *header_lines(PyObject *headers) {
    PyObject *out = PyBytes_FromStringAndSize(NULL, 0);
    if (out == NULL || headers == NULL || headers == Py_None) return out;
    PyObject *it = PyObject_GetIter(headers), *pair;
    if (it == NULL) goto fail;
    while ((pair = PyIter_Next(it)) != NULL) {
        PyObject *seq = PySequence_Fast(pair, "ASGI headers must be [name, value] pairs");
        Py_DECREF(pair);
        if (seq == NULL) goto fail_it;
        if (PySequence_Fast_GET_SIZE(seq) != 2) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "ASGI headers must be [name, value] pairs");
            goto fail_it;
        }
        for (int part = 0; part < 2; part++) {
            PyObject *o = PySequence_Fast_GET_ITEM(seq, part);
            if (!PyBytes_Check(o)) {
                PyErr_Format(PyExc_TypeError, "ASGI header %s must be bytes, not %.100s", part ? "value" : "name",
                             Py_TYPE(o)->tp_name);
                Py_DECREF(seq);
                goto fail_it;
            }
            const char *p = PyBytes_AS_STRING(o);
            Py_ssize_t n = PyBytes_GET_SIZE(o);
            int bad = part == 0 && n == 0;
            for (Py_ssize_t i = 0; i < n && !bad; i++) {
                unsigned char c = (unsigned char)p[i];
                bad = c == '\r' || c == '\n' || c == 0 || (part == 0 && (c <= ' ' || c == ':' || c >= 0x7f));
            }
            if (bad) {
                PyErr_Format(PyExc_RuntimeError, "Invalid HTTP header %s.", part ? "value" : "name");
                Py_DECREF(seq);
                goto fail_it;
            }
            PyBytes_Concat(&out, o);
            if (out != NULL) {
                PyObject *sep = PyBytes_FromString(part ? "\r\n" : ": ");
                if (sep == NULL) Py_CLEAR(out); else PyBytes_ConcatAndDel(&out, sep);
            }
            if (out == NULL) {
                Py_DECREF(seq);
                goto fail_it;
            }
        }
        Py_DECREF(seq);
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) goto fail;
    return out;
fail_it:
    Py_DECREF(it);
fail:
    Py_XDECREF(out);
    return NULL;
}

static PyObject *new_future(GLAsgiSend *self, PyObject **slot) {
    PyObject *fut = PyObject_CallMethodNoArgs(self->srv->loop, s_create_future);
    if (fut == NULL) return NULL;
    Py_XSETREF(*slot, Py_NewRef(fut));
    glAsgiWait(self->srv->sid, self->rid, self);
    return fut;
}

/* Go's answer to a send: None (a finished awaitable), a Future (backpressure) or an error. */
static PyObject *answer(GLAsgiSend *self, int rc) {
    if (rc == GL_ASGI_ERR_DISCONNECTED || rc == GL_ASGI_ERR_GONE) return raise_disconnected();
    if (rc < 0) return NULL;
    if (rc == GL_ASGI_PAUSED) return new_future(self, &self->send_fut);
    return gl_asgi_done(Py_None);
}

static PyObject *ws_accept(GLAsgiSend *self, PyObject *msg) {
    PyObject *sp = get(msg, s_subprotocol);
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
    PyObject *h = get(msg, s_headers);
    if (h == NULL && PyErr_Occurred()) {
        Py_XDECREF(sp);
        return NULL;
    }
    PyObject *lines = header_lines(h);
    Py_XDECREF(h);
    if (lines == NULL) {
        Py_XDECREF(sp);
        return NULL;
    }
    int rc = glAsgiWsAccept(self->srv->sid, self->rid, (char *)spp, spn, PyBytes_AS_STRING(lines),
                            PyBytes_GET_SIZE(lines));
    Py_DECREF(lines);
    Py_XDECREF(sp);
    return answer(self, rc);
}

static PyObject *ws_send(GLAsgiSend *self, PyObject *msg) {
    PyObject *b = get(msg, s_bytes);
    if (b == NULL && PyErr_Occurred()) return NULL;
    int rc;
    if (b != NULL && b != Py_None) {
        Py_buffer view;
        if (PyObject_GetBuffer(b, &view, PyBUF_SIMPLE) < 0) {
            Py_DECREF(b);
            return NULL;
        }
        rc = glAsgiWsSend(self->srv->sid, self->rid, 0, view.buf, view.len);
        PyBuffer_Release(&view);
        Py_DECREF(b);
        return answer(self, rc);
    }
    Py_XDECREF(b);
    PyObject *t = get(msg, s_text);
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
    rc = glAsgiWsSend(self->srv->sid, self->rid, 1, (char *)p, n);
    Py_DECREF(t);
    return answer(self, rc);
}

static PyObject *ws_close(GLAsgiSend *self, PyObject *msg) {
    long code = 1000;
    PyObject *c = get(msg, s_code);
    if (c == NULL && PyErr_Occurred()) return NULL;
    if (c != NULL && c != Py_None) {
        code = PyLong_AsLong(c);
        if (code == -1 && PyErr_Occurred()) {
            Py_DECREF(c);
            return NULL;
        }
    }
    Py_XDECREF(c);
    PyObject *r = get(msg, s_reason);
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
    int rc = glAsgiWsClose(self->srv->sid, self->rid, (int)code, (char *)p, n);
    Py_XDECREF(r);
    return answer(self, rc);
}

static PyObject *ws_http_start(GLAsgiSend *self, PyObject *msg) {
    PyObject *st = get(msg, s_status);
    if (st == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "status");
        return NULL;
    }
    long status = PyLong_Check(st) ? PyLong_AsLong(st) : -2;
    Py_DECREF(st);
    if (status == -1 && PyErr_Occurred()) return NULL;
    if (status < 100 || status > 999) {
        PyErr_SetString(PyExc_RuntimeError, "ASGI 'websocket.http.response.start' status must be an integer from 100 to 999");
        return NULL;
    }
    PyObject *h = get(msg, s_headers);
    if (h == NULL && PyErr_Occurred()) return NULL;
    PyObject *lines = header_lines(h);
    Py_XDECREF(h);
    if (lines == NULL) return NULL;
    int rc = glAsgiWsDeny(self->srv->sid, self->rid, (int)status, PyBytes_AS_STRING(lines), PyBytes_GET_SIZE(lines));
    Py_DECREF(lines);
    return answer(self, rc);
}

static PyObject *ws_http_body(GLAsgiSend *self, PyObject *msg) {
    PyObject *body = get(msg, s_body);
    if (body == NULL && PyErr_Occurred()) return NULL;
    PyObject *m = get(msg, s_more_body);
    if (m == NULL && PyErr_Occurred()) {
        Py_XDECREF(body);
        return NULL;
    }
    int more = m ? PyObject_IsTrue(m) : 0;
    Py_XDECREF(m);
    if (more < 0) {
        Py_XDECREF(body);
        return NULL;
    }
    int rc;
    if (body != NULL && body != Py_None) {
        Py_buffer view;
        if (PyObject_GetBuffer(body, &view, PyBUF_SIMPLE) < 0) {
            Py_DECREF(body);
            return NULL;
        }
        rc = glAsgiWsDenyBody(self->srv->sid, self->rid, view.buf, view.len, more);
        PyBuffer_Release(&view);
    } else {
        rc = glAsgiWsDenyBody(self->srv->sid, self->rid, NULL, 0, more);
    }
    Py_XDECREF(body);
    return answer(self, rc);
}

static PyObject *ws_send_call(GLAsgiSend *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    GL_FORK_GUARD(NULL);
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "send() takes one message");
        return NULL;
    }
    if (self->rid < 0 || self->srv->sid < 0) return raise_disconnected();
    PyObject *msg = args[0];
    PyObject *t = get(msg, s_type);
    if (t == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "type");
        return NULL;
    }
    PyObject *r = NULL;
    if (is(t, s_t_send))
        r = ws_send(self, msg);
    else if (is(t, s_t_accept))
        r = ws_accept(self, msg);
    else if (is(t, s_t_close))
        r = ws_close(self, msg);
    else if (is(t, s_t_http_start))
        r = ws_http_start(self, msg);
    else if (is(t, s_t_http_body))
        r = ws_http_body(self, msg);
    else if (!PyErr_Occurred())
        PyErr_Format(PyExc_RuntimeError, "Unexpected ASGI message '%S' sent.", t);
    Py_DECREF(t);
    return r;
}

static PyObject *ws_done(GLAsgiSend *self, PyObject *Py_UNUSED(ignored)) {
    GL_FORK_GUARD(NULL);
    if (self->rid >= 0 && self->srv->sid >= 0) glAsgiWsDone(self->srv->sid, self->rid, 0);
    Py_RETURN_NONE;
}

static PyObject *ws_fail(GLAsgiSend *self, PyObject *Py_UNUSED(ignored)) {
    GL_FORK_GUARD(NULL);
    if (self->rid >= 0 && self->srv->sid >= 0) glAsgiWsDone(self->srv->sid, self->rid, 1);
    Py_RETURN_NONE;
}

static PyObject *ws_status(GLAsgiSend *self, PyObject *Py_UNUSED(ignored)) {
    GL_FORK_GUARD(NULL);
    return PyLong_FromLong(self->rid >= 0 ? glAsgiWsStatus(self->rid) : 0);
}

static void ws_send_dealloc(GLAsgiSend *self) {
    PyObject_GC_UnTrack(self);
    if (self->rid >= 0 && !gl_forked) glAsgiWsFree(self->rid);
    Py_CLEAR(self->recv_fut);
    Py_CLEAR(self->send_fut);
    Py_CLEAR(self->srv);
    PyObject_GC_Del(self);
}

static int ws_send_traverse(GLAsgiSend *self, visitproc visit, void *arg) {
    Py_VISIT(self->srv);
    Py_VISIT(self->recv_fut);
    Py_VISIT(self->send_fut);
    return 0;
}

static int ws_send_clear(GLAsgiSend *self) {
    Py_CLEAR(self->recv_fut);
    Py_CLEAR(self->send_fut);
    return 0;
}

static PyMethodDef ws_send_methods[] = {
    {"_done", (PyCFunction)ws_done, METH_NOARGS, "The application's call returned."},
    {"_fail", (PyCFunction)ws_fail, METH_NOARGS, "The application's call raised (an open session closes with 1011)."},
    {"_status", (PyCFunction)ws_status, METH_NOARGS, "101 accepted, the HTTP response's status, or 0."},
    {NULL}};

static PyTypeObject WsSendType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop._goloop.AsgiWebSocketSend",
    .tp_basicsize = sizeof(GLAsgiSend),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "The `send` callable of one ASGI WebSocket session.",
    .tp_dealloc = (destructor)ws_send_dealloc,
    .tp_traverse = (traverseproc)ws_send_traverse,
    .tp_clear = (inquiry)ws_send_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(GLAsgiSend, vectorcall),
    .tp_methods = ws_send_methods,
};

/* ---------- receive ---------- */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    GLAsgiSend *send;
} WsRecv;

/* Keep in step with asgi.WSKind. */
enum { K_WAIT, K_CONNECT, K_TEXT, K_BINARY, K_DISCONNECT };

static PyObject *message(PyObject *type, PyObject *k1, PyObject *v1, PyObject *k2, PyObject *v2) {
    PyObject *m = PyDict_New();
    if (m == NULL || PyDict_SetItem(m, s_type, type) < 0 || (k1 && PyDict_SetItem(m, k1, v1) < 0) ||
        (k2 && PyDict_SetItem(m, k2, v2) < 0))
        Py_CLEAR(m);
    return m;
}

/* The message receive() returns now, or NULL without an error: nothing yet. */
static PyObject *ws_recv_message(GLAsgiSend *s) {
    int kind = K_DISCONNECT, code = 1006;
    PyObject *reason = NULL, *data, *m = NULL;
    if (s->rid < 0) {
        PyObject *c = PyLong_FromLong(1006);
        m = c ? message(s_t_disconnect, s_code, c, s_reason, s_empty) : NULL;
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
        m = message(s_t_connect, NULL, NULL, NULL, NULL);
        break;
    case K_TEXT:
        m = message(s_t_receive, s_text, data, NULL, NULL);
        break;
    case K_BINARY:
        m = message(s_t_receive, s_bytes, data, NULL, NULL);
        break;
    case K_DISCONNECT: {
        PyObject *c = PyLong_FromLong(code);
        m = c && reason ? message(s_t_disconnect, s_code, c, s_reason, reason) : NULL;
        Py_XDECREF(c);
        break;
    }
    }
    Py_DECREF(data);
    Py_XDECREF(reason);
    return m;
}

static PyObject *ws_recv_call(WsRecv *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    GL_FORK_GUARD(NULL);
    if (PyVectorcall_NARGS(nargsf) != 0 || (kwnames && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "receive() takes no arguments");
        return NULL;
    }
    GLAsgiSend *s = self->send;
    if (s->recv_fut != NULL) return Py_NewRef(s->recv_fut);
    PyObject *m = ws_recv_message(s);
    if (m != NULL) {
        PyObject *d = gl_asgi_done(m);
        Py_DECREF(m);
        return d;
    }
    if (PyErr_Occurred()) return NULL;
    return new_future(s, &s->recv_fut);
}

static void ws_recv_dealloc(WsRecv *self) {
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->send);
    PyObject_GC_Del(self);
}

static int ws_recv_traverse(WsRecv *self, visitproc visit, void *arg) {
    Py_VISIT(self->send);
    return 0;
}

static PyTypeObject WsRecvType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop._goloop.AsgiWebSocketReceive",
    .tp_basicsize = sizeof(WsRecv),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "The `receive` callable of one ASGI WebSocket session.",
    .tp_dealloc = (destructor)ws_recv_dealloc,
    .tp_traverse = (traverseproc)ws_recv_traverse,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(WsRecv, vectorcall),
};

/* An EvWake for a session: resolve the Futures whose wait is over; 1 if one still waits. */
int gl_asgi_ws_wake(GLAsgiSend *s) {
    Py_INCREF(s);
    if (s->recv_fut != NULL) {
        PyObject *m = ws_recv_message(s);
        if (m != NULL) {
            PyObject *fut = s->recv_fut;
            s->recv_fut = NULL;
            gl_asgi_resolve(fut, m, 0);
            Py_DECREF(fut);
            Py_DECREF(m);
        } else if (PyErr_Occurred()) {
            PyErr_WriteUnraisable((PyObject *)s);
        }
    }
    if (s->send_fut != NULL && s->rid >= 0) {
        int rc = glAsgiSendReady(s->rid);
        if (rc != 0) {
            PyObject *fut = s->send_fut;
            s->send_fut = NULL;
            if (rc == GL_ASGI_ERR_DISCONNECTED) {
                PyObject *exc = PyObject_CallFunction(gl_asgi_client_disconnected(), "s", "the client disconnected");
                if (exc != NULL) {
                    gl_asgi_resolve(fut, exc, 1);
                    Py_DECREF(exc);
                } else {
                    PyErr_WriteUnraisable(fut);
                }
            } else {
                gl_asgi_resolve(fut, Py_None, 0);
            }
            Py_DECREF(fut);
        }
    }
    int waiting = s->recv_fut != NULL || s->send_fut != NULL;
    Py_DECREF(s);
    return waiting;
}

/* ---------- the session's scope and task ---------- */

static int set_new(PyObject *d, PyObject *k, PyObject *v) {
    if (v == NULL) return -1;
    int rc = PyDict_SetItem(d, k, v);
    Py_DECREF(v);
    return rc;
}

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

int gl_asgi_ws_request(GLAsgiServer *srv, long rid, const char *blob, const int32_t *ends, int nends,
                       const char *chost, Py_ssize_t chostlen, int cport, const char *shost,
                       Py_ssize_t shostlen, int sport, int is_unix, const char *protos, Py_ssize_t protolen,
                       const char *proxy, Py_ssize_t proxylen, PyObject *ext) {
    GLAsgiSend *send = NULL;
    WsRecv *recv = NULL;
    PyObject *scope = NULL, *coro = NULL, *task = NULL, *headers = NULL, *scheme;
    int nh = (nends - 4) / 2;
#define SEG(i) (blob + ((i) > 0 ? ends[(i) - 1] : 0)), (Py_ssize_t)(ends[i] - ((i) > 0 ? ends[(i) - 1] : 0))
    send = PyObject_GC_New(GLAsgiSend, &WsSendType);
    if (send == NULL) goto fail_norid;
    send->vectorcall = (vectorcallfunc)ws_send_call;
    send->rid = rid;
    send->srv = (GLAsgiServer *)Py_NewRef(srv);
    send->recv_fut = send->send_fut = NULL;
    PyObject_GC_Track(send);
    recv = PyObject_GC_New(WsRecv, &WsRecvType);
    if (recv == NULL) goto fail;
    recv->vectorcall = (vectorcallfunc)ws_recv_call;
    recv->send = (GLAsgiSend *)Py_NewRef(send);
    PyObject_GC_Track(recv);

    scope = PyDict_Copy(srv->template);
    if (scope == NULL) goto fail;
    scheme = PyDict_GetItemWithError(scope, s_scheme);  /* borrowed */
    scheme = (scheme != NULL && is(scheme, s_https)) ? s_wss : s_ws;
    headers = gl_asgi_headers(blob, ends, nh);
    if (headers == NULL) goto fail;
    if (PyDict_SetItem(scope, s_type, s_websocket) < 0 || PyDict_SetItem(scope, s_scheme, scheme) < 0 ||
        PyDict_SetItem(scope, s_http_version, s_v11) < 0 ||
        set_new(scope, s_path, PyUnicode_DecodeUTF8(SEG(nends - 1), "replace")) < 0 ||
        set_new(scope, s_raw_path, PyBytes_FromStringAndSize(SEG(nends - 3))) < 0 ||
        set_new(scope, s_query_string, PyBytes_FromStringAndSize(SEG(nends - 2))) < 0 ||
        PyDict_SetItem(scope, s_headers, headers) < 0 ||
        set_new(scope, s_subprotocols, split_protocols(protos, protolen)) < 0 ||
        gl_asgi_ws_extensions(scope, ext) < 0)
        goto fail;
    if (is_unix) {
        if (PyDict_SetItem(scope, s_client, Py_None) < 0 ||
            set_new(scope, s_server, gl_asgi_addr(shost, shostlen, 0, 1)) < 0)
            goto fail;
    } else if (set_new(scope, s_client, gl_asgi_addr(chost, chostlen, cport, 0)) < 0 ||
               set_new(scope, s_server, gl_asgi_addr(shost, shostlen, sport, 0)) < 0) {
        goto fail;
    }
    if (proxy != NULL) {
        /* a trusted proxy's X-Forwarded-For/-Proto, as uvicorn: https or wss -> wss, else ws */
        if (gl_asgi_proxy_scope(scope, proxy, proxylen) < 0) goto fail;
        PyObject *fwd = PyDict_GetItemWithError(scope, s_scheme);  /* borrowed */
        if (fwd == NULL) goto fail;
        int secure = PyUnicode_Check(fwd) && (PyUnicode_CompareWithASCIIString(fwd, "https") == 0 ||
                                              PyUnicode_CompareWithASCIIString(fwd, "wss") == 0);
        if (PyDict_SetItem(scope, s_scheme, secure ? s_wss : s_ws) < 0) goto fail;
    }
    if (srv->state != NULL && set_new(scope, s_state, PyDict_Copy(srv->state)) < 0) goto fail;
#undef SEG
    {
        PyObject *args[3] = {scope, (PyObject *)recv, (PyObject *)send};
        coro = PyObject_Vectorcall(srv->runner, args, 3, NULL);
    }
    if (coro == NULL) goto fail;
    task = PyObject_CallMethodOneArg(srv->loop, s_create_task, coro);
    if (task == NULL) goto fail;
    Py_DECREF(task);
    Py_DECREF(coro);
    Py_DECREF(headers);
    Py_DECREF(scope);
    Py_DECREF(recv);
    Py_DECREF(send);
    return 0;
fail:
    send->rid = -1;  /* Go answers 500 and forgets the request */
fail_norid:
    PyErr_WriteUnraisable(srv->runner);
    if (coro != NULL && PyCoro_CheckExact(coro)) {
        PyObject *r = PyObject_CallMethod(coro, "close", NULL);
        if (r == NULL) PyErr_Clear();
        Py_XDECREF(r);
    }
    Py_XDECREF(coro);
    Py_XDECREF(headers);
    Py_XDECREF(scope);
    Py_XDECREF(recv);
    Py_XDECREF(send);
    return -1;
}

/* _goloop._asgi_ws_config(server, disabled, max_size, max_queue, ping_interval, ping_timeout, deflate) */
static PyObject *ws_config(PyObject *mod, PyObject *args) {
    PyObject *srv;
    int disabled, deflate;
    long max_size, max_queue;
    double ping_interval, ping_timeout;
    GL_FORK_GUARD(NULL);
    if (!PyArg_ParseTuple(args, "O!pllddp", server_type, &srv, &disabled, &max_size, &max_queue, &ping_interval,
                          &ping_timeout, &deflate))
        return NULL;
    if (((GLAsgiServer *)srv)->sid < 0) {
        PyErr_SetString(PyExc_RuntimeError, "the ASGI server is closed");
        return NULL;
    }
    if (glAsgiWsConfig(((GLAsgiServer *)srv)->sid, disabled, max_size, max_queue, ping_interval, ping_timeout,
                       deflate) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef ws_functions[] = {
    {"_asgi_ws_config", (PyCFunction)ws_config, METH_VARARGS,
     "_asgi_ws_config(server, disabled, max_size, max_queue, ping_interval, ping_timeout, deflate)"},
    {NULL}};

int gl_init_asgi_ws(PyObject *m) {
#define INTERN(var, s) if ((var = PyUnicode_InternFromString(s)) == NULL) return -1
    INTERN(s_type, "type");
    INTERN(s_websocket, "websocket");
    INTERN(s_scheme, "scheme");
    INTERN(s_http, "http");
    INTERN(s_https, "https");
    INTERN(s_ws, "ws");
    INTERN(s_wss, "wss");
    INTERN(s_http_version, "http_version");
    INTERN(s_v11, "1.1");
    INTERN(s_path, "path");
    INTERN(s_raw_path, "raw_path");
    INTERN(s_query_string, "query_string");
    INTERN(s_headers, "headers");
    INTERN(s_client, "client");
    INTERN(s_server, "server");
    INTERN(s_state, "state");
    INTERN(s_subprotocols, "subprotocols");
    INTERN(s_subprotocol, "subprotocol");
    INTERN(s_bytes, "bytes");
    INTERN(s_text, "text");
    INTERN(s_code, "code");
    INTERN(s_reason, "reason");
    INTERN(s_status, "status");
    INTERN(s_body, "body");
    INTERN(s_more_body, "more_body");
    INTERN(s_t_connect, "websocket.connect");
    INTERN(s_t_receive, "websocket.receive");
    INTERN(s_t_disconnect, "websocket.disconnect");
    INTERN(s_t_accept, "websocket.accept");
    INTERN(s_t_send, "websocket.send");
    INTERN(s_t_close, "websocket.close");
    INTERN(s_t_http_start, "websocket.http.response.start");
    INTERN(s_t_http_body, "websocket.http.response.body");
    INTERN(s_create_task, "create_task");
    INTERN(s_create_future, "create_future");
    INTERN(s_empty, "");
#undef INTERN
    server_type = (PyTypeObject *)PyObject_GetAttrString(m, "AsgiServer");
    if (server_type == NULL) return -1;
    if (PyType_Ready(&WsSendType) < 0 || PyType_Ready(&WsRecvType) < 0) return -1;
    return PyModule_AddFunctions(m, ws_functions);
}
