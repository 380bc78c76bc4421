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

/* Attributes and methods named by a C string go through the interned str of the name, never
 * PyObject_GetAttrString/PyObject_CallMethod: those make a new str per call, and CPython's
 * type attribute cache (typeobject.c, 3.11-3.15) records each lookup with a strong reference
 * to its name in a slot picked by the name's address. A new name object a call therefore
 * misses the cache (an MRO walk) and leaves one more string parked in it, up to its 4096
 * slots: a reference and a block kept per lookup until the cache fills. The interned name
 * is one object: found in the cache from the second call on. (Interning looks the name up
 * in the interpreter's table: no new object once it is there.) */
PyObject *gl_name(const char *name) { return PyUnicode_InternFromString(name); }

PyObject *gl_getattr(PyObject *o, const char *name) {
    PyObject *n = gl_name(name);
    if (n == NULL) return NULL;
    PyObject *r = PyObject_GetAttr(o, n);
    Py_DECREF(n);
    return r;
}

PyObject *gl_call_method(PyObject *self, const char *name, PyObject *const *args, size_t nargs) {
    PyObject *n = gl_name(name);
    if (n == NULL) return NULL;
    PyObject *stack[5];  /* stack[0]: the slot PY_VECTORCALL_ARGUMENTS_OFFSET lends the callee */
    if (nargs > 3) {
        Py_DECREF(n);
        PyErr_SetString(PyExc_SystemError, "gl_call_method: more than 3 arguments");
        return NULL;
    }
    stack[1] = self;
    for (size_t i = 0; i < nargs; i++) stack[i + 2] = args[i];
    PyObject *r = PyObject_VectorcallMethod(n, stack + 1, (nargs + 1) | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(n);
    return r;
}

PyObject *gl_call_method0(PyObject *self, const char *name) { return gl_call_method(self, name, NULL, 0); }

PyObject *gl_call_method1(PyObject *self, const char *name, PyObject *arg) {
    return gl_call_method(self, name, &arg, 1);
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

