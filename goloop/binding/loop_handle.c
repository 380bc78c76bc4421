/* goloop's Handle and TimerHandle (asyncio.Handle's API): the types, making one, checking a
 * callback as asyncio's _check_callback does, and running one in its context (the one hot
 * routine of the ready queue: Go calls gl_handle_run_u for each handle it takes). */
#include "gl.h"

PyTypeObject *GL_HandleType;
PyTypeObject *GL_TimerHandleType;
static PyObject *py_format_callback_source, *empty_tuple;  /* set at module init */

/* ---------- lazy contexts ----------
 * asyncio gives every handle made without a context a copy of the current one
 * (contextvars.copy_context()): a new Context object per call_soon, sharing the current
 * context's immutable mapping of variables. On a GIL build goloop keeps only that mapping
 * (GLHandle.vars) and runs the callback in a Context of the loop (scratch_ctx) into which
 * it puts the mapping; what the callback sets goes back to the handle afterwards. The
 * callback cannot tell: it sees the same variables, its changes stay its own, and no code
 * can reach the Context it runs in (copy_context() copies it); were anything to keep a
 * reference to it (a context watcher), it becomes the handle's own Context (CTX_VARS:
 * gl.h). Free-threaded builds copy. */
#ifdef GL_LAZY_CONTEXT
static PyObject *empty_vars;  /* a new Context's mapping, for the scratch between uses */
#endif

/* The handle's Context, made from its saved variables the first time it is needed
 * (borrowed; NULL with an exception, or after tp_clear). */
static PyObject *handle_context(GLHandle *h) {
#ifdef GL_LAZY_CONTEXT
    if (h->context == NULL && h->vars != NULL) {
        PyObject *c = PyContext_New();
        if (c == NULL) return NULL;
        Py_SETREF(CTX_VARS(c), h->vars);
        h->vars = NULL;
        h->context = c;
    } else if (h->context == NULL && h->in_scratch) {
        /* asked while its callback runs: the Context it runs in becomes its own */
        h->context = Py_NewRef(((GLLoop *)h->loop)->scratch_ctx);
    }
#endif
    return h->context;
}

/* ---------- Handle ---------- */

static PyObject *handle_when(GLHandle *h, PyObject *Py_UNUSED(ignored));

static int handle_traverse(GLHandle *h, visitproc visit, void *arg) {
    Py_VISIT(h->callback);
    Py_VISIT(h->args);
    Py_VISIT(h->context);
    Py_VISIT(h->loop);
    Py_VISIT(h->repr);
    Py_VISIT(h->source_tb);
    Py_VISIT(h->when_obj);
    Py_VISIT(h->vars);
    return 0;
}

static int handle_clear(GLHandle *h) {
    Py_CLEAR(h->callback);
    Py_CLEAR(h->args);
    Py_CLEAR(h->context);
    Py_CLEAR(h->loop);
    Py_CLEAR(h->repr);
    Py_CLEAR(h->source_tb);
    Py_CLEAR(h->when_obj);
    Py_CLEAR(h->vars);
    return 0;
}

/* ---------- the free list ----------
 * Every call_soon makes a Handle and every run frees one (a Task's step, a Future's
 * callback, a timer): on GIL builds up to HANDLE_FREE_MAX freed Handles and TimerHandles
 * (one layout, both static types) wait here, chained through ->callback, and the next
 * gl_handle_new takes one instead of a round trip through the allocator. Only objects of
 * exactly those two types enter it (a Python subclass's instances are freed as usual), and
 * only once freed: refcount zero, untracked, every field cleared; no reference to them is
 * left, so none can be resurrected. The GIL guards the list. Free-threaded builds have no
 * list (they would need one per thread). */
#ifndef Py_GIL_DISABLED
#define GL_HANDLE_FREELIST 1
#define HANDLE_FREE_MAX 256
static GLHandle *handle_free;
static int handle_nfree;
#endif

static void handle_dealloc(GLHandle *h) {
    PyObject_GC_UnTrack(h);
    if (h->weakreflist != NULL) PyObject_ClearWeakRefs((PyObject *)h);
    handle_clear(h);
#ifdef GL_HANDLE_FREELIST
    if ((Py_IS_TYPE(h, GL_HandleType) || Py_IS_TYPE(h, GL_TimerHandleType)) && handle_nfree < HANDLE_FREE_MAX) {
        h->callback = (PyObject *)handle_free;
        handle_free = h;
        handle_nfree++;
        return;
    }
#endif
    PyObject_GC_Del(h);
}

/* A new, untracked object of type tp (GL_HandleType or GL_TimerHandleType) with a refcount
 * of one and its fields unset: from the free list, else from the allocator. */
static GLHandle *handle_alloc(PyTypeObject *tp) {
#ifdef GL_HANDLE_FREELIST
    GLHandle *h = handle_free;
    if (h != NULL) {
        handle_free = (GLHandle *)h->callback;
        handle_nfree--;
        /* (static types: PyObject_Init takes no reference to tp; a new reference count) */
        return (GLHandle *)PyObject_Init((PyObject *)h, tp);
    }
#endif
    return PyObject_GC_New(GLHandle, tp);
}

/* _goloop._handle_free_count(): how many freed handles the free list holds (tests). */
PyObject *gl_handle_free_count(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored)) {
#ifdef GL_HANDLE_FREELIST
    return PyLong_FromLong(handle_nfree);
#else
    return PyLong_FromLong(0);
#endif
}

static PyObject *handle_repr_info(GLHandle *h) {
    const char *kind = Py_IS_TYPE(h, GL_TimerHandleType) ? "TimerHandle" : "Handle";
    PyObject *src = NULL;
    if (h->callback != NULL) {
        /* asyncio's formatting of the running version (goloop._compat) */
        int debug = h->loop != NULL && ((GLLoop *)h->loop)->debug;
        src = PyObject_CallFunction(py_format_callback_source, "OOO", h->callback,
                                    h->args ? h->args : empty_tuple, debug ? Py_True : Py_False);
        if (src == NULL) return NULL;
    }
    PyObject *r = NULL, *when = NULL;
    if (src == NULL) src = PyUnicode_FromString("");
    if (src == NULL) return NULL;
    if (h->source_tb != NULL && PyList_Check(h->source_tb) && PyList_GET_SIZE(h->source_tb) > 0) {
        /* asyncio: "created at file:line" */
        PyObject *fr = PyList_GET_ITEM(h->source_tb, PyList_GET_SIZE(h->source_tb) - 1);
        PyObject *file = PySequence_GetItem(fr, 0), *line = PySequence_GetItem(fr, 1);
        if (file && line) {
            PyObject *s2 = PyUnicode_FromFormat("%U%screated at %S:%S", src,
                                                PyUnicode_GET_LENGTH(src) ? " " : "", file, line);
            if (s2) Py_SETREF(src, s2);
        }
        Py_XDECREF(file);
        Py_XDECREF(line);
        PyErr_Clear();
    }
    if (Py_IS_TYPE(h, GL_TimerHandleType)) {
        when = handle_when(h, NULL);
        if (when != NULL)
            r = PyUnicode_FromFormat("<%s%s when=%S%s%U>", kind, h->cancelled ? " cancelled" : "", when,
                                     PyUnicode_GET_LENGTH(src) ? " " : "", src);
    } else {
        r = PyUnicode_FromFormat("<%s%s%s%U>", kind, h->cancelled ? " cancelled" : "",
                                 PyUnicode_GET_LENGTH(src) ? " " : "", src);
    }
    Py_XDECREF(when);
    Py_DECREF(src);
    return r;
}

static PyObject *handle_repr(GLHandle *h) {
    if (h->repr != NULL) {
        Py_INCREF(h->repr);
        return h->repr;
    }
    return handle_repr_info(h);
}

static PyObject *handle_cancel(GLHandle *h, PyObject *Py_UNUSED(ignored)) {
    if (!h->cancelled) {
        h->cancelled = 1;
        if (Py_IS_TYPE(h, GL_TimerHandleType) && h->scheduled && h->loop != NULL)
            ((GLLoop *)h->loop)->timer_cancelled_count++;
        if (h->loop != NULL && ((GLLoop *)h->loop)->debug && h->repr == NULL) {
            h->cancelled = 0;
            PyObject *r = handle_repr_info(h);
            h->cancelled = 1;
            if (r == NULL) PyErr_Clear();
            else h->repr = r;
        }
        Py_CLEAR(h->callback);
        Py_CLEAR(h->args);
    }
    Py_RETURN_NONE;
}

static PyObject *handle_cancelled(GLHandle *h, PyObject *Py_UNUSED(ignored)) {
    return PyBool_FromLong(h->cancelled);
}

static PyObject *handle_get_context(GLHandle *h, PyObject *Py_UNUSED(ignored)) {
    PyObject *c = handle_context(h);
    if (c == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    return Py_NewRef(c);
}

static PyObject *handle_get_context_attr(GLHandle *h, void *closure) { return handle_get_context(h, NULL); }

static PyObject *handle_run(GLHandle *h, PyObject *Py_UNUSED(ignored)) {
    if (h->cancelled) Py_RETURN_NONE;
    Py_INCREF(h); /* gl_handle_run consumes a reference */
    if (gl_handle_run((PyObject *)h) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *handle_when(GLHandle *h, PyObject *Py_UNUSED(ignored)) {
    if (h->when_obj != NULL) return Py_NewRef(h->when_obj);
    return PyFloat_FromDouble(h->when);
}

static PyObject *handle_get_when(GLHandle *h, void *closure) {
    return handle_when(h, NULL);
}

static PyObject *timer_richcompare(PyObject *a, PyObject *b, int op) {
    if (!PyObject_TypeCheck(b, GL_TimerHandleType)) Py_RETURN_NOTIMPLEMENTED;
    GLHandle *x = (GLHandle *)a, *y = (GLHandle *)b;
    if (op == Py_EQ || op == Py_NE) {
        int eq = x->when == y->when && x->cancelled == y->cancelled;
        if (eq) {
            int r = PyObject_RichCompareBool(x->callback ? x->callback : Py_None,
                                             y->callback ? y->callback : Py_None, Py_EQ);
            if (r < 0) return NULL;
            eq = r;
        }
        if (eq) {
            int r = PyObject_RichCompareBool(x->args ? x->args : Py_None, y->args ? y->args : Py_None, Py_EQ);
            if (r < 0) return NULL;
            eq = r;
        }
        return PyBool_FromLong(op == Py_EQ ? eq : !eq);
    }
    Py_RETURN_RICHCOMPARE(x->when, y->when, op);
}

static Py_hash_t timer_hash(GLHandle *h) {
    PyObject *f = handle_when(h, NULL);
    if (f == NULL) return -1;
    Py_hash_t r = PyObject_Hash(f);
    Py_DECREF(f);
    return r;
}

static PyMethodDef handle_methods[] = {
    {"cancel", (PyCFunction)handle_cancel, METH_NOARGS, "Cancel the callback."},
    {"cancelled", (PyCFunction)handle_cancelled, METH_NOARGS, "Return True if the callback was cancelled."},
    {"get_context", (PyCFunction)handle_get_context, METH_NOARGS, "The contextvars.Context the callback runs in."},
    {"_run", (PyCFunction)handle_run, METH_NOARGS, NULL},
    {NULL}
};

static PyMethodDef timer_methods[] = {
    {"when", (PyCFunction)handle_when, METH_NOARGS, "The scheduled time, in loop time (float seconds)."},
    {NULL}
};

static PyMemberDef handle_members[] = {
    {"_callback", T_OBJECT, offsetof(GLHandle, callback), READONLY, NULL},
    {"_args", T_OBJECT, offsetof(GLHandle, args), READONLY, NULL},
    {"_loop", T_OBJECT, offsetof(GLHandle, loop), READONLY, NULL},
    {"_cancelled", T_BOOL, offsetof(GLHandle, cancelled), READONLY, NULL},
    {"_scheduled", T_BOOL, offsetof(GLHandle, scheduled), READONLY, NULL},
    {NULL}
};

static PyObject *handle_source_traceback(GLHandle *h, void *closure) {
    if (h->source_tb == NULL) Py_RETURN_NONE;
    Py_INCREF(h->source_tb);
    return h->source_tb;
}

static PyGetSetDef handle_getset[] = {
    {"_source_traceback", (getter)handle_source_traceback, NULL, NULL, NULL},
    {"_when", (getter)handle_get_when, NULL, NULL, NULL},
    {"_context", (getter)handle_get_context_attr, NULL, NULL, NULL},
    {NULL}
};

static PyTypeObject HandleType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop.Handle",
    .tp_basicsize = sizeof(GLHandle),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A callback scheduled by call_soon (goloop's asyncio.Handle).",
    .tp_dealloc = (destructor)handle_dealloc,
    .tp_traverse = (traverseproc)handle_traverse,
    .tp_clear = (inquiry)handle_clear,
    .tp_repr = (reprfunc)handle_repr,
    .tp_weaklistoffset = offsetof(GLHandle, weakreflist),
    .tp_methods = handle_methods,
    .tp_members = handle_members,
    .tp_getset = handle_getset,
};

static PyTypeObject TimerHandleType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop.TimerHandle",
    .tp_basicsize = sizeof(GLHandle),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A callback scheduled by call_later or call_at (goloop's asyncio.TimerHandle).",
    .tp_dealloc = (destructor)handle_dealloc,
    .tp_traverse = (traverseproc)handle_traverse,
    .tp_clear = (inquiry)handle_clear,
    .tp_repr = (reprfunc)handle_repr,
    .tp_richcompare = timer_richcompare,
    .tp_hash = (hashfunc)timer_hash,
    .tp_methods = timer_methods,
};

int gl_init_handle_types(PyObject *m) {
    HandleType.tp_new = NULL;
    TimerHandleType.tp_base = &HandleType;
    if (PyType_Ready(&HandleType) < 0 || PyType_Ready(&TimerHandleType) < 0) return -1;
    GL_HandleType = &HandleType;
    GL_TimerHandleType = &TimerHandleType;
    if (PyModule_AddObjectRef(m, "Handle", (PyObject *)&HandleType) < 0 ||
        PyModule_AddObjectRef(m, "TimerHandle", (PyObject *)&TimerHandleType) < 0)
        return -1;
    return gl_init_callback_check();
}

/* ---------- callbacks ---------- */

static PyObject *partial_type, *py_iscoroutine, *py_iscoroutinefunction, *py_is_coroutine_mark;

/* Imports what gl_check_callback and the handles' repr consult; called once at module init.
 * asyncio's names come from goloop._compat, the one place that knows them per version
 * (3.14 has no _is_coroutine mark: py_is_coroutine_mark is None there). */
int gl_init_callback_check(void) {
    PyObject *ft = PyImport_ImportModule("functools");
    PyObject *co = PyImport_ImportModule("goloop._compat");
    if (ft == NULL || co == NULL) {
        Py_XDECREF(ft);
        Py_XDECREF(co);
        return -1;
    }
    partial_type = PyObject_GetAttrString(ft, "partial");
    py_iscoroutine = PyObject_GetAttrString(co, "iscoroutine");
    py_iscoroutinefunction = PyObject_GetAttrString(co, "iscoroutinefunction");
    py_is_coroutine_mark = PyObject_GetAttrString(co, "IS_COROUTINE_MARK");
    py_format_callback_source = PyObject_GetAttrString(co, "format_callback_source");
    empty_tuple = PyTuple_New(0);
#ifdef GL_LAZY_CONTEXT
    PyObject *c = PyContext_New();
    if (c != NULL) {
        empty_vars = Py_NewRef(CTX_VARS(c));
        Py_DECREF(c);
    }
    if (empty_vars == NULL) empty_tuple = NULL; /* (fails the check below) */
#endif
    Py_DECREF(ft);
    Py_DECREF(co);
    return (partial_type && py_iscoroutine && py_iscoroutinefunction && py_is_coroutine_mark &&
            py_format_callback_source && empty_tuple) ? 0 : -1;
}

static int call_bool(PyObject *f, PyObject *arg) {
    PyObject *r = PyObject_Vectorcall(f, &arg, 1, NULL);
    if (r == NULL) return -1;
    int b = PyObject_IsTrue(r);
    Py_DECREF(r);
    return b;
}

/* asyncio's _check_callback: coroutines and coroutine functions (also behind bound methods
 * and functools.partial, or marked with asyncio's _is_coroutine, like AsyncMock) are refused,
 * and so is anything not callable. Plain functions, bound methods and builtins, the hot
 * cases, are decided without calling Python. */
/* A Python function is a coroutine function: its code says so, or asyncio's _is_coroutine
 * mark does (AsyncMock's functions). */
static int function_is_coro(PyObject *f) {
    PyObject *d = ((PyFunctionObject *)f)->func_dict;
    return (((PyCodeObject *)PyFunction_GET_CODE(f))->co_flags & CO_COROUTINE) ||
           (py_is_coroutine_mark != Py_None && d != NULL &&
            PyDict_GetItemString(d, "_is_coroutine") == py_is_coroutine_mark);
}

/* 1 when f is a Cython function (Cython 3 makes its type from a spec: a heap type with an
 * instance dict, which the walk below would hand to asyncio's iscoroutinefunction, ~4 µs of
 * inspect's Python) whose code object has no CO_COROUTINE flag and whose own dict is empty:
 * asyncio's answer for it is then "not a coroutine" (inspect reads the flag; the marks
 * asyncio and inspect set, _is_coroutine and _is_coroutine_marker, and functools'
 * __partialmethod__ would live in that dict). 0 when f is anything else or asyncio must
 * decide (a flagged or marked function, or one whose dict or code cannot be read). Such
 * functions are the done callbacks of Cython libraries (asyncpg's _on_waiter_completed,
 * once per query). */
static int cython_function_not_coro(PyObject *f) {
    PyTypeObject *t = Py_TYPE(f);
    if (!(t->tp_flags & Py_TPFLAGS_HEAPTYPE) || t->tp_dictoffset == 0) return 0;
    const char *name = strrchr(t->tp_name, '.');
    if (strcmp(name ? name + 1 : t->tp_name, "cython_function_or_method") != 0) return 0;
    PyObject *d = PyObject_GenericGetDict(f, NULL);
    if (d == NULL) {
        PyErr_Clear(); /* no dict to read: asyncio decides */
        return 0;
    }
    Py_ssize_t nd = PyDict_Check(d) ? PyDict_GET_SIZE(d) : -1;
    Py_DECREF(d);
    if (nd != 0) return 0;
    PyObject *code = PyObject_GetAttrString(f, "__code__");
    if (code == NULL) {
        PyErr_Clear();
        return 0;
    }
    int plain = PyCode_Check(code) && !(((PyCodeObject *)code)->co_flags & CO_COROUTINE);
    Py_DECREF(code);
    return plain;
}

int gl_check_callback(PyObject *cb, const char *method) {
    /* The common cases first, decided as the walk below would: a plain function, and C
     * callables (a Task's step and wakeup wrappers, a Future's bound set_result): an
     * instance of a callable type other than those the walk looks into, static or with no
     * instance dict (3.12+ make _asyncio's types on the heap; the walk asks asyncio only
     * about objects with a dict), is never a coroutine. */
    PyTypeObject *t = Py_TYPE(cb);
    int coro = 0;
    if (t == &PyFunction_Type) {
        coro = function_is_coro(cb);
        goto decided;
    }
    if ((!(t->tp_flags & Py_TPFLAGS_HEAPTYPE) || t->tp_dictoffset == 0) && t->tp_call != NULL &&
        t != &PyMethod_Type && t != &PyCoro_Type && (PyObject *)t != partial_type)
        return 0;
    coro = PyCoro_CheckExact(cb);
    PyObject *f = cb;
    Py_INCREF(f);
    while (!coro) {
        PyObject *inner = NULL;
        if (PyMethod_Check(f)) {
            inner = PyMethod_GET_FUNCTION(f);
            Py_INCREF(inner);
        } else if (partial_type != NULL &&
                   (Py_IS_TYPE(f, (PyTypeObject *)partial_type) ||
                    /* a subclass of partial is a Python class: a static type (a Task's
                     * step wrapper, a builtin) is decided without walking its MRO */
                    ((Py_TYPE(f)->tp_flags & Py_TPFLAGS_HEAPTYPE) &&
                     PyType_IsSubtype(Py_TYPE(f), (PyTypeObject *)partial_type)))) {
            inner = gl_getattr(f, "func");
            if (inner == NULL) {
                Py_DECREF(f);
                return -1;
            }
        } else {
            break;
        }
        Py_SETREF(f, inner);
    }
    if (!coro && PyFunction_Check(f)) {
        coro = function_is_coro(f);
    } else if (!coro && cython_function_not_coro(f)) {
        /* decided: not a coroutine function */
    } else if (!coro && (Py_TYPE(f)->tp_flags & Py_TPFLAGS_HEAPTYPE) && Py_TYPE(f)->tp_dictoffset != 0 &&
               py_iscoroutinefunction != NULL) {
        /* instances of Python classes (AsyncMock, custom awaitables): ask asyncio */
        int a = call_bool(py_iscoroutine, f);
        int b = a == 0 ? call_bool(py_iscoroutinefunction, f) : 0;
        if (a < 0 || b < 0) {
            Py_DECREF(f);
            return -1;
        }
        coro = a || b;
    }
    Py_DECREF(f);
decided:
    if (coro) {
        PyErr_Format(PyExc_TypeError, "coroutines cannot be used with %s()", method);
        return -1;
    }
    if (!PyCallable_Check(cb)) {
        PyErr_Format(PyExc_TypeError, "a callable object was expected by %s(), got %R", method, cb);
        return -1;
    }
    return 0;
}

PyObject *gl_handle_new(PyTypeObject *tp, PyObject *loop, PyObject *cb, PyObject *const *args,
                        Py_ssize_t nargs, PyObject *context, double when, int track) {
    GLHandle *h = handle_alloc(tp);
    if (h == NULL) return NULL;
    h->args = NULL;
    h->vars = NULL;
    h->in_scratch = 0;
    if (nargs > 0) {
        PyObject *t = PyTuple_New(nargs);
        if (t == NULL) {
            h->callback = h->context = h->loop = h->weakreflist = h->repr = h->source_tb = h->when_obj = NULL;
            Py_DECREF(h);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < nargs; i++) {
            Py_INCREF(args[i]);
            PyTuple_SET_ITEM(t, i, args[i]);
        }
        h->args = t;
    }
    PyObject *cur;
#ifdef GL_LAZY_CONTEXT
    if ((context == NULL || context == Py_None) && (cur = PyThreadState_Get()->context) != NULL &&
        PyContext_CheckExact(cur)) {
        h->vars = Py_NewRef(CTX_VARS(cur)); /* what copy_context() would share */
        h->context = NULL;
    } else
#endif
    if (context == NULL || context == Py_None) {
        (void)cur;
        h->context = PyContext_CopyCurrent();
        if (h->context == NULL) {
            h->callback = h->loop = h->weakreflist = h->repr = h->source_tb = h->when_obj = NULL;
            Py_DECREF(h);
            return NULL;
        }
    } else {
        Py_INCREF(context);
        h->context = context;
    }
    Py_INCREF(cb);
    h->callback = cb;
    Py_INCREF(loop);
    h->loop = loop;
    h->weakreflist = NULL;
    h->repr = NULL;
    h->source_tb = NULL;
    if (((GLLoop *)loop)->debug) {
        /* asyncio's Handle: remember where it was created (the caller's frame) */
        PyObject *fh = PyImport_ImportModule("asyncio.format_helpers");
        PyFrameObject *frame = PyEval_GetFrame();
        if (fh != NULL) {
            h->source_tb = gl_call_method1(fh, "extract_stack", frame ? (PyObject *)frame : Py_None);
            Py_DECREF(fh);
        }
        if (h->source_tb == NULL) PyErr_Clear();
    }
    h->when_obj = NULL;
    h->when = when;
    h->cancelled = 0;
    h->scheduled = 0;
    if (track) PyObject_GC_Track(h);
    return (PyObject *)h;
}

/* Reports the pending exception of a failed callback to the loop's exception handler, as
 * asyncio's Handle._run does. Returns -1 (exception left set) when it must propagate out of
 * run_forever: SystemExit, KeyboardInterrupt, or a failing handler. */
static int report_exception(PyObject *loop, PyObject *h) {
    if (gl_exc_is_fatal()) return -1;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL) PyException_SetTraceback(value, tb);
    PyObject *cargs[2] = {h, value ? value : Py_None};
    PyObject *r = gl_call_method(loop, "_handle_callback_exception", cargs, 2);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

static int run_gl_handle(GLHandle *h);

/* cb(*args) with ctx entered (args: a tuple, or NULL for none): the result, or NULL with the
 * callback's exception set (entering or leaving ctx can fail too). Both ways of running a
 * handle (in its own Context, or lazily in the loop's scratch) call it. */
static inline PyObject *call_in_context(PyObject *ctx, PyObject *cb, PyObject *args) {
    if (PyContext_Enter(ctx) < 0) return NULL;
    PyObject *res = args == NULL ? PyObject_CallNoArgs(cb)
        : PyObject_Vectorcall(cb, &PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args), NULL);
    if (res == NULL) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        PyContext_Exit(ctx);
        PyErr_Restore(t, v, tb);
    } else if (PyContext_Exit(ctx) < 0) {
        Py_CLEAR(res);
    }
    return res;
}

#ifdef GL_LAZY_CONTEXT
/* Runs h, which has no Context yet, in its loop's scratch Context holding h's variables
 * (see "lazy contexts"). Returns 1 when the scratch is in use (a callback running a handle
 * itself, or another thread's loop callback holding it while this thread has the GIL):
 * the caller then gives h its own Context. */
static int run_lazy(GLHandle *h) {
    GLLoop *loop = (GLLoop *)h->loop;
    if (loop->scratch_busy) return 1;
    PyObject *s = loop->scratch_ctx;
    if (s == NULL) {
        s = PyContext_New();
        if (s == NULL) return -1;
        loop->scratch_ctx = s;
    }
    PyObject *cb = h->callback, *args = h->args, *res = NULL;
    Py_SETREF(CTX_VARS(s), h->vars); /* h's reference passes to the scratch */
    h->vars = NULL;
    loop->scratch_busy = 1;
    h->in_scratch = 1;
    Py_INCREF(cb);
    Py_XINCREF(args);
    Py_INCREF(h);
    res = call_in_context(s, cb, args);
    loop->scratch_busy = 0;
    h->in_scratch = 0;
    /* the variables, with what the callback set, go back to h */
    if (Py_REFCNT(s) == 1 && h->context == NULL) {
        Py_XSETREF(h->vars, CTX_VARS(s));
        CTX_VARS(s) = Py_NewRef(empty_vars);
    } else {
        /* something kept the Context (or gave h one meanwhile): it is h's from now on */
        loop->scratch_ctx = NULL;
        if (h->context == NULL) h->context = s;
        else Py_DECREF(s);
    }
    Py_DECREF(cb);
    Py_XDECREF(args);
    if (res != NULL) {
        Py_DECREF(res);
        Py_DECREF(h);
        return 0;
    }
    int rc = report_exception(h->loop, (PyObject *)h);
    Py_DECREF(h);
    return rc;
}
#endif

static int run_gl_handle(GLHandle *h) {
#ifdef GL_LAZY_CONTEXT
    if (h->context == NULL && h->vars != NULL) {
        int rc = run_lazy(h);
        if (rc <= 0) return rc;
    }
#endif
    PyObject *cb = h->callback, *args = h->args, *ctx = handle_context(h), *res = NULL;
    if (ctx == NULL) return PyErr_Occurred() ? report_exception(h->loop, (PyObject *)h) : 0;
    Py_INCREF(cb);
    Py_XINCREF(args);
    Py_INCREF(ctx);
    res = call_in_context(ctx, cb, args);
    Py_DECREF(cb);
    Py_XDECREF(args);
    Py_DECREF(ctx);
    if (res != NULL) {
        Py_DECREF(res);
        return 0;
    }
    return report_exception(h->loop, (PyObject *)h);
}

/* Runs one handle taken from the ready queue and releases the queue's reference to it.
 * Returns 0, or -1 with an exception that must stop the loop. */
int gl_handle_run(PyObject *o) {
    int rc = 0;
    if (Py_IS_TYPE(o, GL_HandleType) || Py_IS_TYPE(o, GL_TimerHandleType)) {
        GLHandle *h = (GLHandle *)o;
        if (!h->cancelled) rc = run_gl_handle(h);
    } else {
        /* A foreign handle (asyncio.Handle, e.g. from _add_callback): honour _cancelled, call _run(). */
        PyObject *c = gl_getattr(o, "_cancelled");
        int cancelled = c ? PyObject_IsTrue(c) : -1;
        Py_XDECREF(c);
        if (cancelled < 0) {
            rc = -1;
        } else if (!cancelled) {
            PyObject *r = gl_call_method0(o, "_run");
            if (r == NULL) rc = -1;
            Py_XDECREF(r);
        }
    }
    gl_handle_release(o);
    return rc;
}

/* Drops the ready queue's reference to o, which left the queue: a Handle the queue held
 * out of the collector's lists (loop_core.c, stage) is tracked again if it lives on. */
void gl_handle_release(PyObject *o) {
#ifndef Py_GIL_DISABLED
    if (Py_REFCNT(o) > 1 && !PyObject_GC_IsTracked(o)) PyObject_GC_Track(o);
#endif
    Py_DECREF(o);
}

int gl_handle_run_u(uintptr_t h) { return gl_handle_run((PyObject *)h); }
