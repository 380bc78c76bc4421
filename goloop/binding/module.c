/* The _goloop extension module: its init (which makes each part's types and module
 * functions: the loop's loop_handle.c, loop_core.c, loop_sockfast.c, loop_readpath.c, loop_transport.c and
 * loop_sslfast.c; the goloop.http parser's parser.c; the server's server.c (the type both
 * interfaces share), ASGI's asgi.c (which inits asgi_run.c and interns the scope's strings)
 * and asgi_ws.c, WSGI's wsgi.c), the fork guard and the exit-time signal stack. */
#include <signal.h>
#include "gl.h"
#include "asgi.h"
#include "wsgi.h"
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

/* The signal stack of the thread that finalizes the interpreter, made permanent (an atexit
 * callback, so it runs before faulthandler's finalization).
 *
 * Go's runtime takes a thread's alternate signal stack as its own the first time the thread
 * calls into Go, when the thread has one: that is faulthandler's on the main thread whenever
 * faulthandler was enabled first (-X faulthandler, PYTHONFAULTHANDLER, pytest). Interpreter
 * finalization then frees faulthandler's stack and disables sigaltstack on that thread
 * (_PyFaulthandler_Fini), and only afterwards clears the interpreter state, whose last garbage
 * collection traverses and frees the loops still alive there: Go code running on that thread.
 * A signal Go handles arriving then (SIGURG, Go's preemption, sent to that thread by Go's own
 * scheduler or garbage collector) finds no signal stack, and Go aborts the process with
 * "fatal error: non-Go code disabled sigaltstack". Installing this never-freed stack in place
 * of faulthandler's before that: faulthandler sees that its stack is no longer the current one
 * and leaves this one installed, and Go's signal handler accepts the current alternate stack. */
static PyObject *mod_keep_signal_stack(PyObject *m, PyObject *Py_UNUSED(ignored)) {
    static char stack[64 * 1024] __attribute__((aligned(64)));
    stack_t cur;
    if (sigaltstack(NULL, &cur) == 0 && !(cur.ss_flags & SS_DISABLE) && cur.ss_sp != stack) {
        stack_t st = {.ss_sp = stack, .ss_size = sizeof stack, .ss_flags = 0};
        sigaltstack(&st, NULL);
    }
    Py_RETURN_NONE;
}

/* _own_methods(cls, base, names): gives cls, a Python subclass of the C type base, its own
 * method descriptor for each of base's C methods named in names (that cls does not
 * override): the same C function, with cls as its class. CPython's specialized calls of a
 * method descriptor (`loop.call_later(...)`, `transport.write(data)`) require the instance's
 * type to be exactly the descriptor's class; with base's own descriptors every call on a
 * cls instance took the generic path instead (~150 instructions more per call). */
static PyObject *mod_own_methods(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyType_Check(args[0]) || !PyType_Check(args[1]) || !PyTuple_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "_own_methods(cls, base, names: tuple)");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[0], *base = (PyTypeObject *)args[1];
    if (!PyType_IsSubtype(cls, base) || base->tp_methods == NULL) {
        PyErr_SetString(PyExc_TypeError, "_own_methods: cls must derive from a C type with methods");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args[2]); i++) {
        PyObject *name = PyTuple_GET_ITEM(args[2], i);
        const char *cname = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
        if (cname == NULL) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "_own_methods: names are strings");
            return NULL;
        }
        PyMethodDef *def = base->tp_methods;
        while (def->ml_name != NULL && strcmp(def->ml_name, cname) != 0) def++;
        if (def->ml_name == NULL) {
            PyErr_Format(PyExc_AttributeError, "%s has no C method %R", base->tp_name, name);
            return NULL;
        }
        /* only where cls resolves name to base's own method descriptor (not overridden, nor
         * another kind of descriptor: 3.11's call_soon, loop_core.c) */
        PyObject *found = PyObject_GetAttr((PyObject *)cls, name);
        if (found == NULL) return NULL;
        int plain = Py_IS_TYPE(found, &PyMethodDescr_Type) && ((PyMethodDescrObject *)found)->d_method == def &&
                    PyDescr_TYPE(found) == base;
        Py_DECREF(found);
        if (!plain) continue;
        PyObject *descr = PyDescr_NewMethod(cls, def);
        if (descr == NULL) return NULL;
        int rc = PyObject_SetAttr((PyObject *)cls, name, descr);
        Py_DECREF(descr);
        if (rc < 0) return NULL;
    }
    Py_RETURN_NONE;
}

/* _goloop._loop_periods(): (poll, yield, wake) in ns, the loop's wall-clock periods and the
 * WSGI pool's wake delay as GOLOOP_TIME_SCALE left them when the first loop was made (tests). */
static PyObject *mod_loop_periods(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
    GL_FORK_GUARD(NULL);
    long long poll = 0, yield = 0, wake = 0;
    glLoopPeriods(&poll, &yield, &wake);
    return Py_BuildValue("(LLL)", poll, yield, wake);
}

/* _goloop._procs(): the Go runtime's GOMAXPROCS (tests; it starts the runtime). */
static PyObject *mod_procs(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
    GL_FORK_GUARD(NULL);
    return PyLong_FromLong(glProcs());
}

static PyMethodDef module_methods[] = {
    {"_own_methods", (PyCFunction)(void (*)(void))mod_own_methods, METH_FASTCALL,
     "_own_methods(cls, base, names): cls's own descriptors of base's C methods (faster calls)."},
    {"_mark_forked", mod_mark_forked, METH_NOARGS, "Called in a forked child: goloop refuses to run there."},
    {"_keep_signal_stack", mod_keep_signal_stack, METH_NOARGS,
     "At exit: a signal stack that outlives faulthandler's for the finalizing thread."},
    {"_forked", mod_forked, METH_NOARGS, NULL},
    {"_handle_free_count", gl_handle_free_count, METH_NOARGS, NULL},
    {"_loop_periods", mod_loop_periods, METH_NOARGS, NULL},
    {"_procs", mod_procs, METH_NOARGS, NULL},
    {NULL}
};

static struct PyModuleDef goloop_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_goloop",
    .m_doc = "goloop's engine, written in Go and C.",
    .m_size = -1,
    .m_methods = module_methods,
};

/* Registers the module function `hook` with registrar(hook) (kwname NULL) or
 * registrar(kwname=hook), registrar being module.name. */
static int register_hook(PyObject *m, const char *hook_name, const char *module,
                         const char *name, const char *kwname) {
    PyObject *mod = PyImport_ImportModule(module);
    if (mod == NULL) return -1;
    PyObject *reg = PyObject_GetAttrString(mod, name);
    Py_DECREF(mod);
    PyObject *hook = reg != NULL ? PyObject_GetAttrString(m, hook_name) : NULL;
    PyObject *kw = hook != NULL && kwname != NULL ? Py_BuildValue("{s:O}", kwname, hook) : NULL;
    PyObject *r = hook != NULL && (kwname == NULL || kw != NULL)
                      ? PyObject_VectorcallDict(reg, kw ? NULL : &hook, kw ? 0 : 1, kw)
                      : NULL;
    Py_XDECREF(kw);
    Py_XDECREF(hook);
    Py_XDECREF(reg);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

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
        gl_init_ssl(m) < 0 || gl_init_server(m) < 0 || gl_init_asgi(m) < 0 || gl_init_asgi_ws(m) < 0 ||
        gl_init_wsgi(m) < 0 || gl_init_server_static(m) < 0)
        goto fail;
    /* Fork guard: a child forked after the Go runtime started must not call into Go. */
    if (register_hook(m, "_mark_forked", "os", "register_at_fork", "after_in_child") < 0)
        goto fail;
    if (register_hook(m, "_keep_signal_stack", "atexit", "register", NULL) < 0) goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
