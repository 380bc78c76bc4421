/* The server binding's per-thread state (gl_thread_state, server.h): the one thread-local
 * variable of the C code, a pointer. Its block is made with the raw allocator at the
 * thread's first use and freed by a pthread key's destructor when the thread exits, where
 * the thread may no longer hold the GIL: it holds no Python object (a WSGI pool thread's
 * caches, which do, are released by its serve_thread() before it returns, wsgi.c).
 *
 * The pointer is initial-exec: one load from the thread pointer, where a global-dynamic
 * variable (the default for -fPIC) costs a __tls_get_addr call. The library's thread-local
 * segment is in the static TLS block anyway (Go's runtime reaches its own variable, the
 * current goroutine, initial-exec), so the model costs no more static TLS than the size. */
#include "server.h"
#include <errno.h>
#include <pthread.h>

__thread gl_thread_state *gl_ts __attribute__((tls_model("initial-exec")));

static pthread_key_t ts_key;
static int ts_key_made;

/* The key's destructor, at the exit of a thread that made a state (no GIL: raw memory only). */
static void ts_free(void *p) {
    gl_thread_state *t = p;
    gl_ts = NULL;
    PyMem_RawFree(t->hdrbuf.p);
    PyMem_RawFree(t);
}

/* Called once, at the module's init (with the GIL): 0, or -1 with an error. */
int gl_init_thread_state(void) {
    if (ts_key_made) return 0;
    int e = pthread_key_create(&ts_key, ts_free);
    if (e != 0) {
        errno = e;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    ts_key_made = 1;
    return 0;
}

/* gl_thread()'s slow path: the calling thread's state, made now; NULL with MemoryError. */
gl_thread_state *gl_thread_state_new(void) {
    gl_thread_state *t = PyMem_RawCalloc(1, sizeof *t);
    if (t == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    if (pthread_setspecific(ts_key, t) != 0) {
        PyMem_RawFree(t);
        PyErr_NoMemory();
        return NULL;
    }
    gl_ts = t;
    return t;
}
