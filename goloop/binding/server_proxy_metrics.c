/* goloop serve's operations hooks: the server's configure() (proxy headers, metrics, slow
 * clients) and metrics() methods, for both interfaces' servers. Nothing here runs per
 * request. Loop thread only. */
#include "server.h"
#include "_cgo_export.h"

PyObject *gl_server_configure(GLServer *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"proxy_headers", "metrics", "metrics_path", "metrics_fd", "metrics_slot",
                             "timeout_request_head", "min_request_body_rate", "h2_only",
                             "min_response_rate", "min_response_grace", NULL};
    const char *proxy = NULL, *path = NULL;
    Py_ssize_t plen = 0, pathlen = 0;
    int metrics = 0, mfd = -1, mslot = 0, h2only = 0;
    double head = -2; /* not given */
    long rate = 0, resp_rate = -2; /* not given */
    double resp_grace = 0;
    GL_FORK_GUARD(NULL);
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|z#pz#iidlpld:configure", kwlist, &proxy, &plen, &metrics, &path,
                                     &pathlen, &mfd, &mslot, &head, &rate, &h2only, &resp_rate, &resp_grace))
        return NULL;
    if (self->sid < 0) {
        PyErr_SetString(PyExc_RuntimeError, "the server is closed");
        return NULL;
    }
    if (head != -2) { /* slow clients and --http: before set_tls and listen */
        if (!(head >= 0 && head < 1e9) || rate < 0) {
            PyErr_SetString(PyExc_ValueError, "timeout_request_head and min_request_body_rate must be >= 0 (0: none)");
            return NULL;
        }
        if (glServerSlowClients(self->sid, (long long)(head * 1e9), rate, h2only) < 0) return NULL;
    }
    if (resp_rate != -2) { /* clients slow to read responses: before listen */
        if (resp_rate < 0 || !(resp_grace >= 0 && resp_grace < 1e9)) {
            PyErr_SetString(PyExc_ValueError, "min_response_rate and min_response_grace must be >= 0");
            return NULL;
        }
        if (glServerRespRate(self->sid, resp_rate, (long long)(resp_grace * 1e9)) < 0) return NULL;
    }
    if (glServerConfigure(self->sid, (char *)proxy, proxy ? plen : -1, metrics || path != NULL || mfd >= 0,
                        (char *)path, pathlen, mfd, mslot) < 0)
        return NULL;
    Py_RETURN_NONE;
}

PyObject *gl_server_metrics(GLServer *self, PyObject *arg) {
    GL_FORK_GUARD(NULL);
    if (self->sid < 0) {
        PyErr_SetString(PyExc_RuntimeError, "the server is closed");
        return NULL;
    }
    const char *fmt = PyUnicode_AsUTF8(arg);
    if (fmt == NULL) return NULL;
    int json;
    if (strcmp(fmt, "json") == 0) {
        json = 1;
    } else if (strcmp(fmt, "prometheus") == 0) {
        json = 0;
    } else {
        PyErr_SetString(PyExc_ValueError, "metrics format must be 'prometheus' or 'json'");
        return NULL;
    }
    return glServerMetrics(self->sid, json);
}

/* Logs msg (UTF-8) as a warning of the "goloop.error" logger: the engine's warnings for the
 * operator (an accept that failed: EMFILE ...). An error doing it is reported, not raised. */
void gl_server_warn(const char *msg) {
    PyObject *logging = PyImport_ImportModule("logging");
    PyObject *logger = logging ? PyObject_CallMethod(logging, "getLogger", "s", "goloop.error") : NULL;
    PyObject *r = logger ? PyObject_CallMethod(logger, "warning", "ss", "%s", msg) : NULL;
    if (r == NULL) PyErr_WriteUnraisable(logger);
    Py_XDECREF(r);
    Py_XDECREF(logger);
    Py_XDECREF(logging);
}
