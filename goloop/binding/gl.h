/* Shared declarations of goloop's CPython binding: the C object layouts that Go reads
 * and writes directly, and the small C helpers Go calls (for CPython macros and inline
 * functions that cgo cannot call). The logic lives in the Go files of this package. */
#ifndef GOLOOP_GL_H
#define GOLOOP_GL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

/* The C part of goloop.Loop. Python's Loop class derives from it and from asyncio's
 * unix selector loop; the fields below are exposed as the attributes asyncio's code
 * reads and writes (_closed, _stopping, _debug, _thread_id ...), so Go sees every change. */
typedef struct {
    PyObject_HEAD
    long id;                     /* index of the Go loop state; -1 before init/after free */
    char closed;
    char stopping;
    char debug;
    char running;                /* inside the Go run loop */
    PyObject *thread_id;         /* int while running, else None */
    Py_ssize_t timer_cancelled_count;
    double slow_callback_duration;
    double clock_resolution;
} GLLoop;

/* goloop's Handle and TimerHandle (one layout; the TimerHandle type adds when()). */
typedef struct {
    PyObject_HEAD
    PyObject *callback;          /* NULL once cancelled */
    PyObject *args;              /* tuple, or NULL for no arguments */
    PyObject *context;
    PyObject *loop;              /* strong reference */
    PyObject *weakreflist;
    PyObject *repr;              /* repr saved at cancel() in debug mode */
    double when;
    char cancelled;
    char scheduled;              /* timer: in the loop's heap */
} GLHandle;

extern PyTypeObject *GL_HandleType;
extern PyTypeObject *GL_TimerHandleType;
extern int gl_forked;

/* Helpers defined in helpers.c, called from Go. */
int gl_handle_run(PyObject *h);
PyObject *gl_none(void);
int gl_is_none(PyObject *o);
void gl_incref(PyObject *o);
void gl_decref(PyObject *o);
PyObject *gl_call_method0(PyObject *self, const char *name);
PyObject *gl_call_method1(PyObject *self, const char *name, PyObject *arg);
PyObject *gl_call_method2(PyObject *self, const char *name, PyObject *a, PyObject *b);
void gl_set_error(PyObject *type, const char *msg);
void gl_set_oserror(int err);
int gl_exc_is_fatal(void);
PyObject *gl_handle_new(PyTypeObject *tp, PyObject *loop, PyObject *cb, PyObject *const *args,
                        Py_ssize_t nargs, PyObject *context, double when);
int gl_check_callback(PyObject *cb, const char *method);
unsigned long gl_thread_ident(void);

#endif
