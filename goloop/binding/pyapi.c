/* CPython macros and inline functions that cgo cannot call, as functions Go can: references,
 * None, raising (the one way a Go error becomes a Python exception: errors.go's raise and
 * raiseErr end here), attribute and method calls. No logic of goloop's own. */
#include <errno.h>
#include "gl.h"

PyObject *gl_none(void) { Py_RETURN_NONE; }
int gl_is_none(PyObject *o) { return o == Py_None; }
void gl_incref(PyObject *o) { Py_INCREF(o); }
void gl_decref(PyObject *o) { Py_DECREF(o); }
void gl_set_error(PyObject *type, const char *msg) { PyErr_SetString(type, msg); }
void gl_set_oserror(int err) { errno = err; PyErr_SetFromErrno(PyExc_OSError); }

int gl_exc_is_fatal(void) {
    return PyErr_ExceptionMatches(PyExc_SystemExit) || PyErr_ExceptionMatches(PyExc_KeyboardInterrupt);
}

PyObject *gl_call_method0(PyObject *self, const char *name) {
    return PyObject_CallMethod(self, name, NULL);
}

PyObject *gl_call_method1(PyObject *self, const char *name, PyObject *arg) {
    return PyObject_CallMethod(self, name, "O", arg);
}

int gl_visit(visitproc visit, PyObject *o, void *arg) { return o ? visit(o, arg) : 0; }

/* Visits the n objects at offset off of each stride-byte record of base (Go's timer heap,
 * whose items hold no Go pointer) in one call. */
int gl_visit_each(visitproc visit, void *arg, void *base, Py_ssize_t n, size_t stride, size_t off) {
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = *(PyObject **)((char *)base + (size_t)i * stride + off);
        if (o != NULL) {
            int rc = visit(o, arg);
            if (rc) return rc;
        }
    }
    return 0;
}

PyObject *gl_getattr(PyObject *o, const char *name) { return PyObject_GetAttrString(o, name); }
