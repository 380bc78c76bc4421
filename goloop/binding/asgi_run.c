/* goloop serve: the coroutine a request's Task runs when no request limit or access-log
 * format needs Python around the application (asgi.c). It delegates to the application's
 * awaitable as `await app(scope, receive, send)` would and does what serve/server.py's Python
 * wrapper did: tell Go the application returned (a response not started becomes a 500),
 * log an Exception through on_error and end normally, let other BaseExceptions through, and
 * with the access log on, call access(scope, status, head) last (uvicorn's line, server.py;
 * head: the line up to its status, made here for the common scope).
 * One C object instead of a Python coroutine frame per request. */
#include "asgi.h"
#include "_cgo_export.h"

typedef struct {
    PyObject_HEAD
    PyObject *it;          /* the application's awaitable iterator; NULL once finished */
    PyObject *ended;       /* it once finished (its names for a Task's repr), or NULL */
    GLAsgiSend *send;      /* the request */
    PyObject *on_error;    /* on_error(exc) logs an application's exception */
    PyObject *scope;       /* with the server's access: the request's scope, until the call that
                              ended it gave it to access (run_access) */
    char finished;
} GLAsgiRun;

static PyTypeObject RunType;

/* Raise exc again (steals the reference; 3.12's PyErr_SetRaisedException). */
static void PyErr_SetRaisedException_compat(PyObject *exc) {
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    PyObject *tb = PyException_GetTraceback(exc);
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, tb);
#endif
}

/* o.name, or *res = NULL without an error when it has none (3.13's PyObject_GetOptionalAttr). */
static int get_optional_attr(PyObject *o, const char *name, PyObject **res) {
    *res = gl_getattr(o, name);
    if (*res != NULL) return 1;
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
    PyErr_Clear();
    return 0;
}

PyObject *gl_asgi_run_new(PyObject *awaitable, GLAsgiSend *send, PyObject *on_error, PyObject *scope) {
    PyObject *it;
    if (PyCoro_CheckExact(awaitable)) {
        it = Py_NewRef(awaitable);
    } else {
        unaryfunc getter = Py_TYPE(awaitable)->tp_as_async ? Py_TYPE(awaitable)->tp_as_async->am_await : NULL;
        if (getter == NULL) {
            PyErr_Format(PyExc_TypeError, "the ASGI application returned %.100s, not an awaitable",
                         Py_TYPE(awaitable)->tp_name);
            return NULL;
        }
        it = getter(awaitable);
        if (it == NULL) return NULL;
    }
    GLAsgiRun *r = PyObject_GC_New(GLAsgiRun, &RunType);
    if (r == NULL) {
        Py_DECREF(it);
        return NULL;
    }
    r->it = it;
    r->ended = NULL;
    r->send = (GLAsgiSend *)Py_NewRef(send);
    r->on_error = Py_NewRef(on_error);
    r->scope = send->srv->access != NULL ? Py_NewRef(scope) : NULL;
    r->finished = 0;
    PyObject_GC_Track(r);
    return (PyObject *)r;
}

/* The application's call ended (failed: it raised; ok: it returned, from a step): what Go
 * found (GL_ASGI_FINISH_*). */
static int run_app_end(GLAsgiRun *r, int failed, int ok) {
    if (r->it != NULL) {
        Py_XSETREF(r->ended, r->it);
        r->it = NULL;
    }
    if (r->finished) return GL_ASGI_FINISH_OK;
    r->finished = 1;
    return ok ? gl_asgi_finish_done(r->send) : gl_asgi_finish(r->send, failed);
}

/* A character urllib's quote() leaves as it is (letters, digits, _.-~ and its safe /). */
static int quote_safe(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '-' || c == '~' || c == '/';
}

/* Appends the ASCII str o to buf at *n (cap bytes); 0 where o is not an exact ASCII str, or
 * (quoted) has a character quote() would change, or does not fit. */
static int head_put(char *buf, size_t *n, size_t cap, PyObject *o, int quoted) {
    if (o == NULL || !PyUnicode_CheckExact(o) || !PyUnicode_IS_ASCII(o)) return 0;
    Py_ssize_t len = PyUnicode_GET_LENGTH(o);
    const unsigned char *p = PyUnicode_1BYTE_DATA(o);
    if ((size_t)len > cap - *n) return 0;
    if (quoted)
        for (Py_ssize_t i = 0; i < len; i++)
            if (!quote_safe(p[i])) return 0;
    memcpy(buf + *n, p, (size_t)len);
    *n += (size_t)len;
    return 1;
}

static int head_lit(char *buf, size_t *n, size_t cap, const char *s) {
    size_t len = strlen(s);
    if (len > cap - *n) return 0;
    memcpy(buf + *n, s, len);
    *n += len;
    return 1;
}

/* scope[key] as a strong reference (1), or *v = NULL without (0) or with an error (-1):
 * 3.13's PyDict_GetItemRef. */
static int scope_get(PyObject *scope, PyObject *key, PyObject **v) {
#if PY_VERSION_HEX >= 0x030D0000
    return PyDict_GetItemRef(scope, key, v);
#else
    *v = Py_XNewRef(PyDict_GetItemWithError(scope, key));
    return *v != NULL ? 1 : PyErr_Occurred() ? -1 : 0;
#endif
}

/* Appends client's "host:port" (uvicorn's "%s:%d" % client) to buf at *n; 0 where client is
 * not a tuple of an ASCII str and an int that fit. */
static int head_client(char *buf, size_t *n, size_t cap, PyObject *client) {
    if (!PyTuple_CheckExact(client) || PyTuple_GET_SIZE(client) != 2 || !PyLong_CheckExact(PyTuple_GET_ITEM(client, 1)))
        return 0;
    int overflow;
    long port = PyLong_AsLongAndOverflow(PyTuple_GET_ITEM(client, 1), &overflow);
    if (overflow || (port == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    if (!head_put(buf, n, cap, PyTuple_GET_ITEM(client, 0), 0)) return 0;
    int k = snprintf(buf + *n, cap - *n, ":%ld", port);
    if (k < 0 || (size_t)k >= cap - *n) return 0;
    *n += (size_t)k;
    return 1;
}

/* uvicorn's access line up to its status, as server.py's _HEAD makes it
 * ('127.0.0.1:50000 - "GET /path?q HTTP/1.1" 200'), for the common scope: a client of an
 * ASCII str host and an int port (or none), ASCII method and version, a path quote() leaves
 * as it is, an ASCII query. Else None (server.py makes the line), and NULL for an error. */
static PyObject *access_head(PyObject *scope, int status) {
    enum { CLIENT, METHOD, ROOT, PATH, QS, VERSION, NKEYS };
    PyObject *keys[NKEYS] = {GLS(client), GLS(method), GLS(root_path), GLS(path), GLS(query_string),
                             GLS(http_version)};
    PyObject *v[NKEYS] = {NULL}, *head = NULL;
    char buf[2048];
    size_t n = 0, cap = sizeof buf;
    for (int i = 0; i < NKEYS; i++) {
        if (scope_get(scope, keys[i], &v[i]) < 0) goto done;  /* (head NULL: the error) */
        if (v[i] == NULL && i != CLIENT) goto none;  /* (server.py raises the KeyError) */
    }
    if (v[CLIENT] != NULL && v[CLIENT] != Py_None && !head_client(buf, &n, cap, v[CLIENT])) goto none;
    if (!head_lit(buf, &n, cap, " - \"") || !head_put(buf, &n, cap, v[METHOD], 0) ||
        !head_lit(buf, &n, cap, " ") || !head_put(buf, &n, cap, v[ROOT], 1) ||
        !head_put(buf, &n, cap, v[PATH], 1) || !PyBytes_CheckExact(v[QS]))
        goto none;
    Py_ssize_t qlen = PyBytes_GET_SIZE(v[QS]);
    if (qlen > 0) {
        const unsigned char *q = (const unsigned char *)PyBytes_AS_STRING(v[QS]);
        if ((size_t)qlen + 1 > cap - n) goto none;
        buf[n++] = '?';
        for (Py_ssize_t i = 0; i < qlen; i++) {
            if (q[i] >= 0x80) goto none;  /* (decoded with "replace" in server.py) */
            buf[n++] = (char)q[i];
        }
    }
    if (!head_lit(buf, &n, cap, " HTTP/") || !head_put(buf, &n, cap, v[VERSION], 0) || cap - n < 16) goto none;
    n += (size_t)snprintf(buf + n, cap - n, "\" %d", status);
    head = PyUnicode_DecodeASCII(buf, (Py_ssize_t)n, NULL);
    goto done;
none:
    head = Py_NewRef(Py_None);
done:
    for (int i = 0; i < NKEYS; i++) Py_XDECREF(v[i]);
    return head;
}

/* access(scope, status, head) for the access log (head: access_head's), keeping any
 * exception set; an error of its own is reported (unraisable). */
void gl_asgi_access(PyObject *access, PyObject *scope, int status) {
    PyObject *exc = gl_take_exception();
    PyObject *st = PyLong_FromLong(status), *x = NULL;
    PyObject *head = st != NULL ? access_head(scope, status) : NULL;
    if (head != NULL) {
        PyObject *args[3] = {scope, st, head};
        x = PyObject_Vectorcall(access, args, 3, NULL);
        Py_DECREF(head);
    }
    Py_XDECREF(st);
    if (x == NULL) PyErr_WriteUnraisable(access);
    Py_XDECREF(x);
    if (exc != NULL) PyErr_SetRaisedException_compat(exc);
}

/* The access line of the call that ended (once: after what run_report logs, as the Python
 * wrapper's `finally` came after its `except`); the status is the application's start's
 * (none: Go answered 500). */
static void run_access(GLAsgiRun *r) {
    PyObject *scope = r->scope, *access = r->send->srv->access;
    if (scope == NULL) return;
    r->scope = NULL;
    if (access != NULL) gl_asgi_access(access, scope, r->send->status ? r->send->status : 500);
    Py_DECREF(scope);
}

static int run_app_done(GLAsgiRun *r, int failed) { return run_app_end(r, failed, 0); }

/* on_error(exc or None, what Go found): the server logs it (serve/server.py _on_app_end). */
static void run_report(GLAsgiRun *r, PyObject *exc, int found) {
    PyObject *f = PyLong_FromLong(found), *x = NULL;
    if (f != NULL) {
        PyObject *args[2] = {exc, f};
        x = PyObject_Vectorcall(r->on_error, args, 2, NULL);
        Py_DECREF(f);
    }
    if (x == NULL) PyErr_WriteUnraisable(r->on_error);
    Py_XDECREF(x);
}

/* The application's call ended with status (and *result): Go finishes the request, what went
 * wrong is logged, an Exception ends the call normally. */
static PySendResult run_ended(GLAsgiRun *r, PySendResult status, PyObject **result) {
    if (status == PYGEN_RETURN) {
        int found = run_app_end(r, 0, 1);
        Py_SETREF(*result, Py_NewRef(Py_None));
        if (found == GL_ASGI_FINISH_NOT_STARTED || found == GL_ASGI_FINISH_INCOMPLETE)
            run_report(r, Py_None, found);
        return PYGEN_RETURN;
    }
    PyObject *exc = gl_take_exception();  /* kept aside while Go finishes the request */
    int found = run_app_done(r, 1);
    if (exc == NULL) return PYGEN_ERROR;
    if (!PyObject_TypeCheck(exc, (PyTypeObject *)PyExc_Exception)) {  /* CancelledError, exit */
        PyErr_SetRaisedException_compat(exc);
        return PYGEN_ERROR;
    }
    run_report(r, exc, found);
    Py_DECREF(exc);
    *result = Py_NewRef(Py_None);
    return PYGEN_RETURN;
}

/* The step's outcome after the application's iterator gave status (and *result). */
static PySendResult run_outcome(GLAsgiRun *r, PySendResult status, PyObject **result) {
    if (status == PYGEN_NEXT) return status;
    status = run_ended(r, status, result);
    run_access(r);  /* (keeps the error being raised, if any) */
    return status;
}

static PySendResult run_am_send(GLAsgiRun *r, PyObject *arg, PyObject **result) {
    *result = NULL;
    if (r->it == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited coroutine");
        return PYGEN_ERROR;
    }
    PySendResult st = PyIter_Send(r->it, arg, result);
    return run_outcome(r, st, result);
}

/* A Python-level result of a step: the yielded value, or NULL with StopIteration / the error. */
static PyObject *run_result(PySendResult st, PyObject *result) {
    if (st == PYGEN_NEXT) return result;
    if (st == PYGEN_RETURN) {
        Py_DECREF(result);  /* always None */
        PyErr_SetNone(PyExc_StopIteration);
    }
    return NULL;
}

static PyObject *run_send(GLAsgiRun *r, PyObject *arg) {
    PyObject *result;
    PySendResult st = run_am_send(r, arg, &result);
    return run_result(st, result);
}

static PyObject *run_next(GLAsgiRun *r) { return run_send(r, Py_None); }

static PyObject *run_throw(GLAsgiRun *r, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "throw expected 1 to 3 arguments");
        return NULL;
    }
    if (r->it == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited coroutine");
        return NULL;
    }
    PyObject *meth;
    if (get_optional_attr(r->it, "throw", &meth) < 0) return NULL;
    PyObject *result = NULL;
    if (meth != NULL) {
        result = PyObject_Vectorcall(meth, args, nargs, NULL);
        Py_DECREF(meth);
    } else {  /* an iterator without throw: the exception is raised here (as `yield from`) */
        PyObject *typ = args[0];
        if (PyExceptionInstance_Check(typ)) PyErr_SetObject((PyObject *)Py_TYPE(typ), typ);
        else PyErr_SetObject(typ, nargs > 1 ? args[1] : NULL);
    }
    PySendResult st;
    if (result != NULL) {
        st = PYGEN_NEXT;
    } else if (PyErr_ExceptionMatches(PyExc_StopIteration)) {
        PyErr_Clear();
        result = Py_NewRef(Py_None);
        st = PYGEN_RETURN;
    } else {
        st = PYGEN_ERROR;
    }
    st = run_outcome(r, st, &result);
    return run_result(st, result);
}

static PyObject *run_close(GLAsgiRun *r, PyObject *Py_UNUSED(ignored)) {
    PyObject *it = r->it;
    if (it != NULL) {
        r->it = NULL;
        PyObject *x = gl_call_method0(it, "close");
        if (x == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) PyErr_Clear();
        Py_XDECREF(x);
        Py_XSETREF(r->ended, it);
        run_app_done(r, 1);  /* ended by GeneratorExit: as by any BaseException */
        run_access(r);
        if (PyErr_Occurred()) return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *run_await(PyObject *self) { return Py_NewRef(self); }

static int run_traverse(GLAsgiRun *r, visitproc visit, void *arg) {
    Py_VISIT(r->it);
    Py_VISIT(r->ended);
    Py_VISIT(r->send);
    Py_VISIT(r->on_error);
    Py_VISIT(r->scope);
    return 0;
}

static int run_clear(GLAsgiRun *r) {
    Py_CLEAR(r->it);
    Py_CLEAR(r->ended);
    Py_CLEAR(r->on_error);
    Py_CLEAR(r->scope);
    return 0;
}

static void run_dealloc(GLAsgiRun *r) {
    PyObject_GC_UnTrack(r);
    run_clear(r);
    Py_CLEAR(r->send);  /* its dealloc tells Go, if this was the last reference */
    PyObject_GC_Del(r);
}

static PyMethodDef run_methods[] = {
    {"send", (PyCFunction)run_send, METH_O, NULL},
    {"throw", (PyCFunction)(void (*)(void))run_throw, METH_FASTCALL, NULL},
    {"close", (PyCFunction)run_close, METH_NOARGS, NULL},
    {NULL}};

static PyObject *str_asgi_run;  /* "AsgiRun": the name where the awaitable has none */

/* The application's coroutine's attribute name (also once it finished), or dflt (borrowed)
 * where it has none (an awaitable without it). cr_frame is its frame (Task.get_stack,
 * print_stack); asyncio's repr of a Task names its coroutine by __qualname__, cr_code and
 * cr_running (coroutines._format_coroutine): with them a request's Task shows the
 * application's coroutine and where it runs, as on a server whose Task runs the application
 * in a Python coroutine, instead of "<AsgiRun without __name__>()". */
static PyObject *run_delegate(GLAsgiRun *r, const char *name, PyObject *dflt) {
    PyObject *it = r->it != NULL ? r->it : r->ended, *v = NULL;
    if (it != NULL && get_optional_attr(it, name, &v) < 0) return NULL;
    return v != NULL ? v : Py_NewRef(dflt);
}

static PyObject *run_get_frame(GLAsgiRun *r, void *closure) { return run_delegate(r, "cr_frame", Py_None); }

static PyObject *run_get_name(GLAsgiRun *r, void *closure) {
    return run_delegate(r, (const char *)closure, str_asgi_run);
}

static PyObject *run_get_code(GLAsgiRun *r, void *closure) { return run_delegate(r, "cr_code", Py_None); }

/* (an awaitable's generator has gi_running) */
static PyObject *run_get_running(GLAsgiRun *r, void *closure) {
    PyObject *v = run_delegate(r, "cr_running", Py_None);
    if (v != Py_None) return v;
    Py_DECREF(v);
    return run_delegate(r, "gi_running", Py_False);
}

static PyGetSetDef run_getset[] = {
    {"cr_frame", (getter)run_get_frame, NULL, NULL, NULL},
    {"cr_code", (getter)run_get_code, NULL, NULL, NULL},
    {"cr_running", (getter)run_get_running, NULL, NULL, NULL},
    {"__name__", (getter)run_get_name, NULL, NULL, "__name__"},
    {"__qualname__", (getter)run_get_name, NULL, NULL, "__qualname__"},
    {NULL}};

static PyAsyncMethods run_async = {.am_await = run_await, .am_send = (sendfunc)run_am_send};

static PyTypeObject RunType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "goloop._goloop.AsgiRun",
    .tp_basicsize = sizeof(GLAsgiRun),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The coroutine of one goloop serve request: the application's, and its end.",
    .tp_dealloc = (destructor)run_dealloc,
    .tp_traverse = (traverseproc)run_traverse,
    .tp_clear = (inquiry)run_clear,
    .tp_as_async = &run_async,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)run_next,
    .tp_methods = run_methods,
    .tp_getset = run_getset,
};

int gl_asgi_is_run(PyObject *o) { return Py_IS_TYPE(o, &RunType); }

/* Ready the type and register it as a collections.abc.Coroutine (asyncio.Task takes it). */
int gl_init_asgi_run(PyObject *m) {
    if (PyType_Ready(&RunType) < 0) return -1;
    if (str_asgi_run == NULL && (str_asgi_run = PyUnicode_InternFromString("AsgiRun")) == NULL) return -1;
    if (PyModule_AddObjectRef(m, "AsgiRun", (PyObject *)&RunType) < 0) return -1;
    PyObject *abc = PyImport_ImportModule("collections.abc");
    if (abc == NULL) return -1;
    PyObject *r, *coro = PyObject_GetAttrString(abc, "Coroutine");
    Py_DECREF(abc);
    if (coro == NULL) return -1;
    r = PyObject_CallMethod(coro, "register", "O", (PyObject *)&RunType);
    Py_DECREF(coro);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}
