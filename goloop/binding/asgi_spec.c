/* goloop serve's binding: the ASGI messages of the spec's extensions,
 * http.response.trailers and http.response.pathsend (asgi_spec.go, goloop/asgi/spec.go).
 * Loop thread only. */
#include "asgi.h"
#include "_cgo_export.h"

static PyObject *s_trailers, *s_headers, *s_more_trailers, *s_path, *s_t_trailers, *s_t_pathsend;

static PyObject *answer(int rc) {
    if (rc == GL_ASGI_ERR_DISCONNECTED || rc == GL_ASGI_ERR_GONE) return gl_asgi_raise_disconnected();
    if (rc < 0) return NULL;
    return gl_asgi_done(Py_None);
}

/* After a successful http.response.start: tell Go if trailers follow. */
int gl_asgi_start_trailers(GLAsgiSend *self, PyObject *msg) {
    PyObject *t = gl_asgi_get(msg, s_trailers);
    if (t == NULL) return PyErr_Occurred() ? -1 : 0;
    int on = PyObject_IsTrue(t);
    Py_DECREF(t);
    if (on < 0) return -1;
    if (on) glAsgiStartTrailers(self->rid);
    return 0;
}

static PyObject *send_trailers(GLAsgiSend *self, PyObject *msg) {
    PyObject *headers = gl_asgi_get(msg, s_headers);
    if (headers == NULL && PyErr_Occurred()) return NULL;
    if (gl_asgi_header_lines(headers) < 0) return NULL;
    PyObject *more_o = gl_asgi_get(msg, s_more_trailers);
    if (more_o == NULL && PyErr_Occurred()) return NULL;
    int more = more_o ? PyObject_IsTrue(more_o) : 0;
    Py_XDECREF(more_o);
    if (more < 0) return NULL;
    Py_ssize_t n;
    const char *p = gl_asgi_hdrbuf(&n);
    return answer(glAsgiSendTrailers(self->rid, (char *)p, n, more));
}

static PyObject *send_path(GLAsgiSend *self, PyObject *msg) {
    PyObject *path = gl_asgi_get(msg, s_path);
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
    return answer(rc);
}

/* send() of a message other than http.response.start/body. */
PyObject *gl_asgi_send_ext(GLAsgiSend *self, PyObject *type, PyObject *msg) {
    if (gl_asgi_is(type, s_t_trailers)) return send_trailers(self, msg);
    if (gl_asgi_is(type, s_t_pathsend)) return send_path(self, msg);
    if (!PyErr_Occurred()) PyErr_Format(PyExc_RuntimeError, "Unexpected ASGI message '%S' sent.", type);
    return NULL;
}

/* A websocket scope's extensions (it copies the HTTP scope's template): the denial response. */
int gl_asgi_ws_extensions(PyObject *scope) {
    PyObject *e = Py_BuildValue("{s:{}}", "websocket.http.response");
    if (e == NULL) return -1;
    int rc = PyDict_SetItemString(scope, "extensions", e);
    Py_DECREF(e);
    return rc;
}

int gl_init_asgi_spec(void) {
#define INTERN(var, s) if ((var = PyUnicode_InternFromString(s)) == NULL) return -1
    INTERN(s_trailers, "trailers");
    INTERN(s_headers, "headers");
    INTERN(s_more_trailers, "more_trailers");
    INTERN(s_path, "path");
    INTERN(s_t_trailers, "http.response.trailers");
    INTERN(s_t_pathsend, "http.response.pathsend");
#undef INTERN
    return 0;
}
