#define _GNU_SOURCE /* accept4 */
/* Socket fast paths of goloop.Loop's sock_* and accept code: one system call each, answering
 * None where the socket module would raise BlockingIOError (raising costs more than the
 * call). Module-level functions of goloop._goloop. */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "gl.h"

/* sock_recv's first attempt without an exception: asyncio's sock_recv calls sock.recv() and
 * catches BlockingIOError when nothing is there, and raising that costs more than the
 * receive (strerror, locale decoding, the exception). For a non-blocking socket.socket
 * (checked by the caller) one recv(2) says the same: the data, or None when it would block.
 * The GIL stays held: MSG_DONTWAIT keeps the call from blocking even if the descriptor was
 * made blocking behind the socket object's back. Errors raise OSError as socket.recv does;
 * arguments whose errors are socket's own to raise give NotImplemented (the caller then
 * calls the socket's method). */
#define TRY_RECV_BUF (256 * 1024)

/* Each thread that reads gets its own buffer (loops run in several threads at once on a
 * free-threaded Python), made on its first read and freed when the thread ends. */
typedef struct {
    Py_ssize_t last_got;  /* the size of this thread's last read (see mod_try_recv) */
    char buf[TRY_RECV_BUF];
} recv_state;
static pthread_key_t recv_key;

static void recv_state_free(void *p) { free(p); }

static recv_state *get_recv_state(void) {
    recv_state *st = pthread_getspecific(recv_key);
    if (st == NULL) {
        st = malloc(sizeof(recv_state));
        if (st == NULL || pthread_setspecific(recv_key, st) != 0) {
            free(st);
            PyErr_NoMemory();
            return NULL;
        }
        st->last_got = 0;
    }
    return st;
}

/* One recv(2) with MSG_DONTWAIT, retried on EINTR: the count, -2 when it would block, or
 * -1 with an exception set. */
static Py_ssize_t recv_nowait(int fd, char *buf, Py_ssize_t n) {
    for (;;) {
        ssize_t got = recv(fd, buf, (size_t)n, MSG_DONTWAIT);
        if (got >= 0) return got;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return -2;
        if (errno != EINTR) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        if (PyErr_CheckSignals() < 0) return -1;
    }
}

/* The descriptor of a (fd, arg) call; -1 when it is not one a recv can use. */
static int try_recv_fd(PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyLong_CheckExact(args[0])) return -1;
    long v = PyLong_AsLong(args[0]);
    if (v < 0 || v > INT_MAX) {
        PyErr_Clear();
        return -1;
    }
    return (int)v;
}

static PyObject *mod_try_recv(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    int fd = try_recv_fd(args, nargs);
    Py_ssize_t n = fd >= 0 && PyLong_CheckExact(args[1]) ? PyLong_AsSsize_t(args[1]) : -1;
    if (n <= 0) {  /* socket.recv returns b'' for 0 and raises its own errors for the rest */
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    /* Small reads land in a static buffer and are copied into bytes of their exact size: a
     * large n (asyncio code often asks for 64 KiB or more) then costs no large allocation,
     * which glibc would serve with mmap and page faults from 128 KiB on, nor a shrink.
     * Large reads go straight into the bytes: copying them again cost 7.5 % of a sock_*
     * echo server's CPU at 100 KiB a message. Which reads are large is judged by the last
     * one (the same code tends to read the same sizes); n must keep the bytes under glibc's
     * mmap threshold for the straight path (gl.h). */
    recv_state *st = get_recv_state();
    if (st == NULL) return NULL;
    if (n <= TRY_RECV_BUF && (st->last_got < GL_DIRECT_MIN || n > GL_DIRECT_MAX)) {
        Py_ssize_t got = recv_nowait(fd, st->buf, n);
        if (got == -2) Py_RETURN_NONE;
        if (got < 0) return NULL;
        st->last_got = got;
        return PyBytes_FromStringAndSize(st->buf, got);
    }
    PyObject *big = PyBytes_FromStringAndSize(NULL, n);
    if (big == NULL) return NULL;
    Py_ssize_t got = recv_nowait(fd, PyBytes_AS_STRING(big), n);
    if (got < 0) {
        Py_DECREF(big);
        if (got == -2) Py_RETURN_NONE;
        return NULL;
    }
    st->last_got = got;
    if (got != n && _PyBytes_Resize(&big, got) < 0) return NULL;
    return big;
}

static PyObject *mod_try_recv_into(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    int fd = try_recv_fd(args, nargs);
    Py_buffer view;
    if (fd < 0 || PyObject_GetBuffer(args[1], &view, PyBUF_WRITABLE) < 0) {
        PyErr_Clear();  /* not a writable buffer: socket.recv_into raises its own error */
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (view.len == 0) {  /* socket.recv_into returns 0 at once here */
        PyBuffer_Release(&view);
        Py_RETURN_NOTIMPLEMENTED;
    }
    Py_ssize_t got = recv_nowait(fd, view.buf, view.len);
    PyBuffer_Release(&view);
    if (got == -2) Py_RETURN_NONE;
    return got < 0 ? NULL : PyLong_FromSsize_t(got);
}

/* asyncio's accept loop calls sock._accept() until it raises BlockingIOError, then sets
 * the new socket non-blocking (an ioctl). Raising that exception (strerror, its decoding)
 * cost more than the accept itself, once per batch; with a connection per wake-up, once per
 * connection. _accept_inet(fd) makes one accept4(2) with SOCK_NONBLOCK | SOCK_CLOEXEC on an
 * AF_INET or AF_INET6 listening socket: (new fd, peer address as the socket module gives
 * it), None when no connection is waiting, or OSError as sock._accept() raises it. */
static PyObject *mod_accept_inet(PyObject *m, PyObject *arg) {
    long lfd = PyLong_AsLong(arg);
    if (lfd == -1 && PyErr_Occurred()) return NULL;
    if (lfd < 0 || lfd > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "negative file descriptor");
        return NULL;
    }
    struct sockaddr_storage ss;
    socklen_t len;
    int fd;
    for (;;) {
        len = sizeof(ss);
        memset(&ss, 0, sizeof(ss));
        fd = accept4((int)lfd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) break;
        if (errno == EAGAIN || errno == EWOULDBLOCK) Py_RETURN_NONE;
        if (errno != EINTR) return PyErr_SetFromErrno(PyExc_OSError);
        if (PyErr_CheckSignals() < 0) return NULL;
    }
    char host[INET6_ADDRSTRLEN];
    PyObject *addr = NULL;
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        if (inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host)) != NULL)
            addr = Py_BuildValue("(si)", host, ntohs(a->sin_port));
        else
            PyErr_SetFromErrno(PyExc_OSError);
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        if (inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host)) != NULL)
            addr = Py_BuildValue("(siII)", host, ntohs(a->sin6_port), ntohl(a->sin6_flowinfo),
                                 a->sin6_scope_id);
        else
            PyErr_SetFromErrno(PyExc_OSError);
    } else {
        PyErr_Format(PyExc_ValueError, "_accept_inet: not an AF_INET or AF_INET6 socket (family %d)",
                     (int)ss.ss_family);
    }
    if (addr == NULL) {
        close(fd);
        return NULL;
    }
    PyObject *r = Py_BuildValue("(iN)", fd, addr);
    if (r == NULL) close(fd);
    return r;
}

static PyMethodDef sockfast_methods[] = {
    {"_accept_inet", mod_accept_inet, METH_O,
     "_accept_inet(fd): one accept4(2) on a non-blocking AF_INET/AF_INET6 listening socket: "
     "(new non-blocking fd, peer address), None if no connection waits, OSError as "
     "socket.accept() raises it."},
    {"_try_recv", (PyCFunction)(void (*)(void))mod_try_recv, METH_FASTCALL,
     "_try_recv(fd, n): one recv(2) on a non-blocking socket: bytes, None if it would block, "
     "NotImplemented for what socket.recv must handle (n not a positive int)."},
    {"_try_recv_into", (PyCFunction)(void (*)(void))mod_try_recv_into, METH_FASTCALL,
     "_try_recv_into(fd, buffer): one recv(2) into buffer: the count, None if it would block, "
     "NotImplemented for what socket.recv_into must handle (not a writable buffer, empty)."},
    {NULL}
};

int gl_init_sockfast(PyObject *m) {
    static int key_made;
    if (!key_made) {  /* under the import lock: PyInit runs once per process */
        if (pthread_key_create(&recv_key, recv_state_free) != 0) {
            PyErr_NoMemory();
            return -1;
        }
        key_made = 1;
    }
    return PyModule_AddFunctions(m, sockfast_methods);
}
