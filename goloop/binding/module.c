/* The _goloop extension module: its init (which makes each part's types and module
 * functions: handle.c, loopcore.c, sockfast.c, transport.c, readpath.c, http.c, sslfast.c)
 * and the fork guard. */
#include "gl.h"
#include "asgi.h"
#include "_cgo_export.h"

int gl_forked = 0;

int gl_fork_error(void) {
    PyErr_SetString(PyExc_RuntimeError,
        "goloop cannot be used in a process forked after goloop's Go runtime started in its parent: "
        "use the 'spawn' or 'forkserver' multiprocessing start methods, or create goloop loops only "
        "in the child process");
    return -1;
}

static PyObject *mod_mark_forked(PyObject *m, PyObject *Py_UNUSED(ignored)) {
    gl_forked = 1;
    Py_RETURN_NONE;
}

static PyObject *mod_forked(PyObject *m, PyObject *Py_UNUSED(ignored)) {
    return PyBool_FromLong(gl_forked);
}

static PyMethodDef module_methods[] = {
    {"_mark_forked", mod_mark_forked, METH_NOARGS, "Called in a forked child: goloop refuses to run there."},
    {"_forked", mod_forked, METH_NOARGS, NULL},
    {NULL}
};

static struct PyModuleDef goloop_module = {
    PyModuleDef_HEAD_INIT, "_goloop", "goloop's engine, written in Go.", -1, module_methods,
};

/* Single-phase init, declared free of the GIL: multi-phase init (a Py_mod_gil slot) would
 * promise a module that can be created more than once, per interpreter, while goloop's types
 * are static and its Go runtime is one per process. Every piece of shared state is safe
 * without the GIL: the C statics are set here, once; the Go tables (loops, transports,
 * parsers) lock; a loop's inbox takes other threads' callbacks under its mutex; the rest
 * belongs to the thread running the loop. */
PyMODINIT_FUNC PyInit__goloop(void) {
    PyObject *m = PyModule_Create(&goloop_module);
    if (m == NULL) return NULL;
#ifdef Py_GIL_DISABLED
    if (PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED) < 0) goto fail;
#endif
    if (gl_init_handle_types(m) < 0 || gl_init_loopcore(m) < 0 || gl_init_sockfast(m) < 0 ||
        gl_init_readpath() < 0 || gl_init_transport_type(m) < 0 || gl_init_http(m) < 0 ||
        gl_init_ssl(m) < 0 || gl_init_asgi(m) < 0 || gl_init_asgi_ws(m) < 0)
        goto fail;
    /* Fork guard: a child forked after the Go runtime started must not call into Go. */
    PyObject *os = PyImport_ImportModule("os");
    if (os == NULL) goto fail;
    PyObject *hook = PyObject_GetAttrString(m, "_mark_forked");
    PyObject *reg = PyObject_GetAttrString(os, "register_at_fork");
    Py_DECREF(os);
    if (hook == NULL || reg == NULL) {
        Py_XDECREF(hook);
        Py_XDECREF(reg);
        goto fail;
    }
    PyObject *kw = Py_BuildValue("{s:O}", "after_in_child", hook);
    PyObject *empty = PyTuple_New(0);
    PyObject *r = (kw && empty) ? PyObject_Call(reg, empty, kw) : NULL;
    Py_XDECREF(kw);
    Py_XDECREF(empty);
    Py_DECREF(hook);
    Py_DECREF(reg);
    if (r == NULL) goto fail;
    Py_DECREF(r);
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
