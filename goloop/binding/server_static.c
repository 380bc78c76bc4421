/* goloop serve's static files (server_static.go, goloop/httpserver/static.go): their configuration
 * and the access log's records of what Go answered, and the TLS controls beyond the files,
 * as module functions on an HttpServer (server.h: an AsgiServer or a WsgiServer). */
#include "server.h"
#include "_cgo_export.h"

static PyTypeObject *static_server_type;

static long static_sid(PyObject *srv) {
    long sid = ((GLServer *)srv)->sid;
    if (sid < 0) PyErr_SetString(PyExc_RuntimeError, "the server is closed");
    return sid;
}

/* _goloop._static_config(server, mounts_json, log): before listen */
static PyObject *static_config(PyObject *mod, PyObject *args) {
    PyObject *srv;
    const char *spec;
    Py_ssize_t n;
    int log;
    GL_FORK_GUARD(NULL);
    if (!PyArg_ParseTuple(args, "O!s#p:_static_config", static_server_type, &srv, &spec, &n, &log)) return NULL;
    long sid = static_sid(srv);
    if (sid < 0) return NULL;
    if (glServerStaticConfig(sid, (char *)spec, n, log) < 0) return NULL;
    Py_RETURN_NONE;
}

/* _goloop._static_log(server) -> str: JSON {"records": [[client, method, path, proto, status,
 * size, duration_ns, user_agent, referer], ...], "dropped": n}; loop thread */
static PyObject *static_log(PyObject *mod, PyObject *arg) {
    GL_FORK_GUARD(NULL);
    if (!PyObject_TypeCheck(arg, static_server_type)) {
        PyErr_SetString(PyExc_TypeError, "_static_log needs a goloop server");
        return NULL;
    }
    long sid = static_sid(arg);
    if (sid < 0) return NULL;
    return glServerStaticLog(sid);
}

/* _goloop._tls_extra(server, min_version, crl_path): "1.2"/"1.3" (or ""), a CRL file (or "");
 * before set_tls */
static PyObject *tls_extra(PyObject *mod, PyObject *args) {
    PyObject *srv;
    const char *minv, *crl;
    GL_FORK_GUARD(NULL);
    if (!PyArg_ParseTuple(args, "O!ss:_tls_extra", static_server_type, &srv, &minv, &crl)) return NULL;
    long sid = static_sid(srv);
    if (sid < 0) return NULL;
    if (glServerTLSExtra(sid, (char *)minv, (char *)crl) < 0) return NULL;
    Py_RETURN_NONE;
}

/* _goloop._serve_h3(server, host, port, max_streams) -> port: HTTP/3 on UDP, after set_tls */
static PyObject *serve_h3(PyObject *mod, PyObject *args) {
    PyObject *srv;
    const char *host;
    int port, streams;
    GL_FORK_GUARD(NULL);
    if (!PyArg_ParseTuple(args, "O!sii:_serve_h3", static_server_type, &srv, &host, &port, &streams)) return NULL;
    long sid = static_sid(srv);
    if (sid < 0) return NULL;
    int got = glServerH3(sid, (char *)host, port, streams);
    if (got < 0) return NULL;
    return PyLong_FromLong(got);
}

static PyMethodDef static_functions[] = {
    {"_serve_h3", (PyCFunction)serve_h3, METH_VARARGS,
     "_serve_h3(server, host, port, max_streams): HTTP/3 over QUIC on UDP, after set_tls; the port."},
    {"_tls_extra", (PyCFunction)tls_extra, METH_VARARGS,
     "_tls_extra(server, min_version, crl_path): the lowest TLS version and a CRL, before set_tls."},
    {"_static_config", (PyCFunction)static_config, METH_VARARGS,
     "_static_config(server, mounts_json, log): static files served by Go, before listen."},
    {"_static_log", (PyCFunction)static_log, METH_O,
     "_static_log(server): the static responses' access-log records since the last call (JSON str)."},
    {NULL}};

int gl_init_server_static(PyObject *m) {
    static_server_type = gl_server_type();
    return PyModule_AddFunctions(m, static_functions);
}
