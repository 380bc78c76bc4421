/* goloop._goloop.SSLProtocolFast and SSLTransportFast: the per-record methods of goloop's
 * SSLProtocol and _SSLProtocolTransport (pyshim/goloop/_sslproto.py, goloop's copy of
 * asyncio's sslproto), ported to C one method at a time.
 *
 * Both types are mixins. _sslproto.py derives its classes from them and from its Python
 * classes PySSLProtocol and _PySSLProtocolTransport, which hold asyncio's code. Since that
 * code is goloop's own, it is the same on every CPython, and so is what each C method here
 * must do: the Python method of the same name in _sslproto.py. SSLProtocolFast holds the
 * attributes the record path reads in C slots under asyncio's names (member descriptors
 * take precedence over the instance dict), so the Python methods (handshake, shutdown, flow
 * control, errors) read and write the same state the C methods read, at a pointer's cost.
 * Each C method takes the path that carries application data and hands anything else
 * (other states, pauses, writelines) to the Python method, so the rare cases run asyncio's
 * code unchanged. Where a C method calls another ported method it calls the C function
 * directly: the classes are goloop's, and nothing overrides those methods.
 *
 * Two savings beyond the interpreter's: read() and write() of a plain ssl.SSLObject go
 * straight to its _ssl object (SSLObject's methods only forward to it), and the read that
 * could only raise SSLWantReadError is not made: in the WRAPPED state, with nothing left in
 * the incoming BIO and nothing decrypted inside OpenSSL (pending()), SSL_read can only ask
 * for more input, and raising that exception costs more than a whole record's decryption.
 * (OpenSSL reads a TLS record's bytes from the BIO only as it processes the record; CPython
 * never turns on read-ahead. Checked by reading anyway in a test build: in WRAPPED the skip
 * was right every time; while FLUSHING it was not, see sp_do_read_copied. uvloop's
 * sslproto.pyx loops on the same two checks, in every state.) And a write of more than a
 * record's plaintext goes to SSL_write one record at a time, the outgoing BIO read out after
 * each, so that OpenSSL's BIO buffer stays one record long (write_records).
 *
 * All of this runs on the loop thread with the GIL held; nothing here calls Go. */
#include "gl.h"

/* asyncio's SSLProtocol attributes, as slots. Any object may be stored (asyncio's code
 * assigns bools and ints); an unset one raises AttributeError like a missing attribute. */
typedef struct {
    PyObject_HEAD
    PyObject *state, *incoming, *outgoing, *sslobj, *ssl_buffer, *ssl_buffer_view,
        *app_protocol, *app_protocol_is_buffer, *app_reading_paused, *write_backlog,
        *write_buffer_size, *ssl_writing_paused, *transport, *outgoing_high_water,
        *outgoing_low_water, *app_writing_paused, *incoming_high_water, *incoming_low_water,
        *ssl_reading_paused;
    PyObject *inner;  /* what read/write/pending are called on: see set_sslobj */
} SP;

#define SP_FIELDS(X) X(state) X(incoming) X(outgoing) X(sslobj) X(ssl_buffer) \
    X(ssl_buffer_view) X(app_protocol) X(app_protocol_is_buffer) X(app_reading_paused) \
    X(write_backlog) X(write_buffer_size) X(ssl_writing_paused) X(transport) \
    X(outgoing_high_water) X(outgoing_low_water) X(app_writing_paused) \
    X(incoming_high_water) X(incoming_low_water) X(ssl_reading_paused) X(inner)

static PyTypeObject *ProtoFastType, *TransportFastType;

#define TLS_MAX_PLAINTEXT 16384  /* 2^14: the most plaintext one TLS record carries */
#define WRITE_CHUNK TLS_MAX_PLAINTEXT  /* the most plaintext write_records gives one SSL_write */

/* Set by _setup() from _sslproto.py's PySSLProtocol, its states and ssl. */
static PyObject *st_DO_HANDSHAKE, *st_WRAPPED, *st_FLUSHING, *st_SHUTDOWN;
static PyObject *again_errors;            /* _sslproto.SSLAgainErrors */
static PyTypeObject *sslobject_type;      /* ssl.SSLObject */
static PyObject *parent_get_buffer, *parent_buffer_updated, *parent_write_appdata,
    *parent_control_app_writing, *parent_control_ssl_reading;
static PyObject *msg_fatal;               /* 'Fatal error on SSL protocol' */
static PyObject *record_max;              /* TLS_MAX_PLAINTEXT as an int */

static PyObject *s_sslobj, *s_max_size, *s_pending, *s_read, *s_write, *s_data_received,
    *s_fatal_error, *s_call_eof_received, *s_start_shutdown, *s_do_read_buffered, *s_do_write,
    *s_do_handshake, *s_do_flush, *s_do_shutdown, *s_ssl_protocol, *s_append, *s_write_appdata;

static int ready(void) {
    if (st_WRAPPED == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "goloop: SSLProtocolFast._setup() has not been called");
        return 0;
    }
    return 1;
}

/* A slot's value (borrowed), or NULL with AttributeError when unset. */
static PyObject *need(PyObject *self, PyObject *v, const char *name) {
    if (v == NULL)
        PyErr_Format(PyExc_AttributeError, "'%.100s' object has no attribute '%s'",
                     Py_TYPE(self)->tp_name, name);
    return v;
}
#define NEED(self, f) need((self), ((SP *)(self))->f, "_" #f)

static int truth(PyObject *v) {
    if (v == Py_True) return 1;
    if (v == Py_False || v == Py_None) return 0;
    return PyObject_IsTrue(v);
}

/* A slot's truth value; -1 with an exception set (AttributeError when unset). */
static int flag(PyObject *self, PyObject *v, const char *name) {
    return need(self, v, name) == NULL ? -1 : truth(v);
}
#define FLAG(self, f) flag((self), ((SP *)(self))->f, "_" #f)

/* A BIO's pending count; -1 with an exception set. */
static Py_ssize_t bio_pending(PyObject *bio) {
    PyObject *v = PyObject_GetAttr(bio, s_pending);
    if (v == NULL) return -1;
    Py_ssize_t r = PyNumber_AsSsize_t(v, PyExc_OverflowError);
    Py_DECREF(v);
    return r;
}

/* `size >= mark` (op Py_GE) or `size <= mark` (Py_LE), Python's comparison for any mark. */
static int compare(Py_ssize_t size, PyObject *mark, int op) {
    if (PyLong_CheckExact(mark)) {
        int overflow;
        long long m = PyLong_AsLongLongAndOverflow(mark, &overflow);
        if (!overflow && !(m == -1 && PyErr_Occurred()))
            return op == Py_GE ? size >= m : size <= m;
        PyErr_Clear();
    }
    PyObject *v = PyLong_FromSsize_t(size);
    if (v == NULL) return -1;
    int r = PyObject_RichCompareBool(v, mark, op);
    Py_DECREF(v);
    return r;
}

static PyObject *call_parent(PyObject *fn, PyObject *self, PyObject *arg) {
    PyObject *args[2] = {self, arg};
    return PyObject_Vectorcall(fn, args, arg == NULL ? 1 : 2, NULL);
}

static PyObject *call_method0(PyObject *self, PyObject *name) {
    return PyObject_VectorcallMethod(name, &self, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

static PyObject *call_method1(PyObject *self, PyObject *name, PyObject *arg) {
    PyObject *args[2] = {self, arg};
    return PyObject_VectorcallMethod(name, args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* `except Exception as ex: self._fatal_error(ex, 'Fatal error on SSL protocol')` for the
 * exception currently set. Returns None when handled, NULL (still set) for a BaseException. */
static PyObject *fatal_from_current(PyObject *self) {
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return NULL;
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (tb != NULL) PyException_SetTraceback(v, tb);
    /* Inside `except`, sys.exc_info() is the exception (logging's exc_info=True reads it). */
    PyObject *ot, *ov, *otb;
    PyErr_GetExcInfo(&ot, &ov, &otb);
    Py_XINCREF(t);
    Py_XINCREF(v);
    Py_XINCREF(tb);
    PyErr_SetExcInfo(t, v, tb);
    PyObject *args[3] = {self, v, msg_fatal};
    PyObject *r = PyObject_VectorcallMethod(s_fatal_error, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    PyErr_SetExcInfo(ot, ov, otb);
    Py_XDECREF(t);
    Py_XDECREF(v);
    Py_XDECREF(tb);
    if (r == NULL) return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
}

/* ---- SSLProtocolFast ------------------------------------------------------------------- */

static PyObject *sp_control_app_writing(PyObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!ready()) return NULL;
    PyObject *outgoing = NEED(self, outgoing);
    if (outgoing == NULL) return NULL;
    Py_ssize_t size = bio_pending(outgoing);
    if (size == -1 && PyErr_Occurred()) return NULL;
    PyObject *backlog = NEED(self, write_buffer_size);
    if (backlog == NULL) return NULL;
    int paused = FLAG(self, app_writing_paused);
    if (paused < 0) return NULL;
    PyObject *mark = paused ? NEED(self, outgoing_low_water) : NEED(self, outgoing_high_water);
    if (mark == NULL) return NULL;
    int due;
    if (PyLong_CheckExact(backlog)) {
        Py_ssize_t b = PyLong_AsSsize_t(backlog);
        if (b == -1 && PyErr_Occurred()) return NULL;
        Py_INCREF(mark);  /* a mark of another type may run Python code to compare */
        due = compare(size + b, mark, paused ? Py_LE : Py_GE);
        Py_DECREF(mark);
        if (due < 0) return NULL;
    } else {
        due = 1;  /* not an int: let asyncio's code compute it */
    }
    if (due)  /* a pause_writing/resume_writing call is due */
        return call_parent(parent_control_app_writing, self, NULL);
    Py_RETURN_NONE;
}

static PyObject *sp_control_ssl_reading(PyObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!ready()) return NULL;
    PyObject *incoming = NEED(self, incoming);
    if (incoming == NULL) return NULL;
    Py_ssize_t size = bio_pending(incoming);
    if (size == -1 && PyErr_Occurred()) return NULL;
    int paused = FLAG(self, ssl_reading_paused);
    if (paused < 0) return NULL;
    PyObject *mark = paused ? NEED(self, incoming_low_water) : NEED(self, incoming_high_water);
    if (mark == NULL) return NULL;
    Py_INCREF(mark);
    int due = compare(size, mark, paused ? Py_LE : Py_GE);
    Py_DECREF(mark);
    if (due < 0) return NULL;
    if (due) return call_parent(parent_control_ssl_reading, self, NULL);
    Py_RETURN_NONE;
}

static PyObject *sp_process_outgoing(PyObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!ready()) return NULL;
    int paused = FLAG(self, ssl_writing_paused);
    if (paused < 0) return NULL;
    if (!paused) {
        PyObject *outgoing = NEED(self, outgoing);
        if (outgoing == NULL) return NULL;
        Py_INCREF(outgoing);
        Py_ssize_t pending = bio_pending(outgoing);
        if (pending == -1 && PyErr_Occurred()) {
            Py_DECREF(outgoing);
            return NULL;
        }
        if (pending > 0) {  /* read() of an empty BIO gives b'', which is not written */
            PyObject *data = call_method0(outgoing, s_read);
            Py_DECREF(outgoing);
            if (data == NULL) return NULL;
            Py_ssize_t n = PyObject_Size(data);
            PyObject *r = NULL;
            if (n > 0) {
                PyObject *transport = NEED(self, transport);
                if (transport != NULL) {
                    Py_INCREF(transport);
                    r = call_method1(transport, s_write, data);
                    Py_DECREF(transport);
                }
            } else if (n == 0) {
                r = Py_None;
                Py_INCREF(r);
            }
            Py_DECREF(data);
            if (r == NULL) return NULL;
            Py_DECREF(r);
        } else {
            Py_DECREF(outgoing);
        }
    }
    return sp_control_app_writing(self, NULL);
}

/* _do_read__copied's reads for a plain SSLObject: every record decrypted straight into one
 * bytes object, sized for all the ciphertext in the incoming BIO (plaintext is never longer:
 * Python's ssl turns compression off; should it be longer, the bytes grow), then shrunk to
 * what was read. asyncio makes a bytes per record (read(max_size)) and then copies them all
 * once more into the one it delivers (b''.join). Returns the bytes, None when nothing was
 * read, or NULL with an exception set; *closed = 1 when the read found close_notify. The
 * reads and the checks that skip the last one are sp_do_read_copied's. */
static PyObject *read_all(PyObject *sslobj, PyObject *incoming, int wrapped, int *closed) {
    PyObject *buf = NULL;
    Py_ssize_t size = 0, total = 0;
    for (;;) {
        Py_ssize_t left = bio_pending(incoming), inside = 0;
        if (left == -1 && PyErr_Occurred()) goto error;
        if (left == 0 || total == size) {
            PyObject *p = call_method0(sslobj, s_pending);
            if (p == NULL) goto error;
            inside = PyNumber_AsSsize_t(p, PyExc_OverflowError);
            Py_DECREF(p);
            if (inside == -1 && PyErr_Occurred()) goto error;
            if (left == 0 && inside == 0 && wrapped) break;  /* see sp_do_read_copied */
        }
        if (total == size) {  /* room for all there is (a read with no room reads nothing) */
            Py_ssize_t more = left + inside > 256 ? left + inside : 256;
            if (more > PY_SSIZE_T_MAX - size) {
                PyErr_NoMemory();
                goto error;
            }
            size += more;
            if (buf == NULL) {
                buf = PyBytes_FromStringAndSize(NULL, size);
                if (buf == NULL) goto error;
            } else if (_PyBytes_Resize(&buf, size) < 0) {
                goto error;  /* it freed buf */
            }
        }
        /* the bytes is this function's alone until it returns: written in place */
        PyObject *mv = PyMemoryView_FromMemory(PyBytes_AS_STRING(buf) + total, size - total,
                                               PyBUF_WRITE);
        /* _ssl takes the size as a C int on 3.11, and reads at most the buffer's length */
        PyObject *room = mv ? PyLong_FromSsize_t(size - total < (1 << 30) ? size - total : (1 << 30))
                            : NULL;
        PyObject *res = NULL;
        if (room != NULL) {
            PyObject *args[3] = {sslobj, room, mv};
            res = PyObject_VectorcallMethod(s_read, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        }
        Py_XDECREF(room);
        Py_XDECREF(mv);
        if (res == NULL) {
            if (PyErr_ExceptionMatches(again_errors)) {
                PyErr_Clear();
                break;
            }
            goto error;
        }
        Py_ssize_t count = PyNumber_AsSsize_t(res, PyExc_OverflowError);
        Py_DECREF(res);
        if (count == -1 && PyErr_Occurred()) goto error;
        if (count <= 0) {
            *closed = 1;  /* close_notify: read() gives 0 */
            break;
        }
        total += count < size - total ? count : size - total;
    }
    if (total == 0) {
        Py_XDECREF(buf);
        Py_RETURN_NONE;
    }
    if (total < size && _PyBytes_Resize(&buf, total) < 0) return NULL;
    return buf;
error:
    Py_XDECREF(buf);
    return NULL;
}

/* _do_read__copied: decrypt every complete record, one data_received with all of it. */
static PyObject *sp_do_read_copied(PyObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!ready()) return NULL;
    SP *sp = (SP *)self;
    if (NEED(self, sslobj) == NULL || NEED(self, incoming) == NULL) return NULL;
    PyObject *sslobj = sp->inner, *incoming = sp->incoming;
    Py_INCREF(sslobj);
    Py_INCREF(incoming);
    PyObject *max_size = NULL, *first = NULL, *list = NULL, *result = NULL;
    int nchunks = 0, closed = 0, all_bytes = 1, wrapped = sp->state == st_WRAPPED;
    if (Py_TYPE(sp->sslobj) == sslobject_type) {
        first = read_all(sslobj, incoming, wrapped, &closed);
        if (first == NULL) goto done;
        if (first == Py_None)
            Py_CLEAR(first);
        else
            nchunks = 1;
        goto deliver;
    }
    max_size = PyObject_GetAttr(self, s_max_size);
    if (max_size == NULL) goto done;
    /* asyncio reads with read(max_size), 256 KiB: _ssl allocates bytes of that size and
     * shrinks them to the record, and glibc serves 256 KiB with mmap (page faults, munmap)
     * unless a free of that size raised its threshold first (in asyncio, the failing read
     * does that by accident). SSL_read returns one record at most, and a record carries at
     * most 16 KiB of plaintext (RFC 8446 5.1), so read(16 KiB) returns the same chunks. */
    if (PyLong_CheckExact(max_size)) {
        Py_ssize_t m = PyLong_AsSsize_t(max_size);
        if (m == -1 && PyErr_Occurred()) goto done;
        if (m > TLS_MAX_PLAINTEXT) {
            Py_INCREF(record_max);
            Py_SETREF(max_size, record_max);
        }
    }
    for (;;) {
        Py_ssize_t left = bio_pending(incoming);
        if (left == -1 && PyErr_Occurred()) goto done;
        /* Would SSL_read only ask for more input? In WRAPPED, yes: no close_notify has been
         * read (that read returned b'' and left WRAPPED). While FLUSHING, OpenSSL may hold
         * one read by SSL_shutdown, and the read then returns b'' (eof_received is due):
         * that state keeps asyncio's read. */
        if (left == 0 && wrapped) {
            PyObject *p = call_method0(sslobj, s_pending);
            if (p == NULL) goto done;
            Py_ssize_t inside = PyNumber_AsSsize_t(p, PyExc_OverflowError);
            Py_DECREF(p);
            if (inside == -1 && PyErr_Occurred()) goto done;
            if (inside == 0) break;
        }
        PyObject *chunk = call_method1(sslobj, s_read, max_size);
        if (chunk == NULL) {
            if (PyErr_ExceptionMatches(again_errors)) {
                PyErr_Clear();
                break;
            }
            goto done;
        }
        /* `if not chunk: break`; a custom SSLObject's read() may return any object */
        int nonempty = PyBytes_CheckExact(chunk) ? PyBytes_GET_SIZE(chunk) > 0 : PyObject_IsTrue(chunk);
        if (nonempty <= 0) {
            Py_DECREF(chunk);
            if (nonempty < 0) goto done;
            closed = 1;  /* close_notify */
            break;
        }
        if (!PyBytes_CheckExact(chunk)) all_bytes = 0;
        if (nchunks == 0) {
            first = chunk;
        } else {
            if (list == NULL) {
                list = PyList_New(1);
                if (list == NULL) {
                    Py_DECREF(chunk);
                    goto done;
                }
                PyList_SET_ITEM(list, 0, first);
                first = NULL;
            }
            int rc = PyList_Append(list, chunk);
            Py_DECREF(chunk);
            if (rc < 0) goto done;
        }
        nchunks++;
    }
deliver:
    if (nchunks > 0) {
        PyObject *data = first;
        if (list != NULL && !all_bytes) {  /* b''.join(chunks), by bytes.join */
            PyObject *empty = PyBytes_FromStringAndSize(NULL, 0);
            data = empty ? gl_call_method1(empty, "join", list) : NULL;
            Py_XDECREF(empty);
            if (data == NULL) goto done;
        } else if (list != NULL) {  /* b''.join(chunks) */
            Py_ssize_t total = 0, n = PyList_GET_SIZE(list);
            for (Py_ssize_t i = 0; i < n; i++) total += PyBytes_GET_SIZE(PyList_GET_ITEM(list, i));
            data = PyBytes_FromStringAndSize(NULL, total);
            if (data == NULL) goto done;
            char *p = PyBytes_AS_STRING(data);
            for (Py_ssize_t i = 0; i < n; i++) {
                PyObject *c = PyList_GET_ITEM(list, i);
                memcpy(p, PyBytes_AS_STRING(c), PyBytes_GET_SIZE(c));
                p += PyBytes_GET_SIZE(c);
            }
        } else {
            Py_INCREF(data);
        }
        PyObject *app = NEED(self, app_protocol);
        PyObject *r = NULL;
        if (app != NULL) {
            Py_INCREF(app);
            r = call_method1(app, s_data_received, data);
            Py_DECREF(app);
        }
        Py_DECREF(data);
        if (r == NULL) goto done;
        Py_DECREF(r);
    }
    if (closed) {
        PyObject *r = call_method0(self, s_call_eof_received);
        if (r == NULL) goto done;
        Py_DECREF(r);
        r = call_method0(self, s_start_shutdown);
        if (r == NULL) goto done;
        Py_DECREF(r);
    }
    result = Py_None;
    Py_INCREF(result);
done:
    Py_DECREF(sslobj);
    Py_DECREF(incoming);
    Py_XDECREF(max_size);
    Py_XDECREF(first);
    Py_XDECREF(list);
    return result;
}

static PyObject *sp_do_read(PyObject *self, PyObject *Py_UNUSED(ignored)) {
    if (!ready()) return NULL;
    PyObject *state = NEED(self, state);
    if (state == NULL) return NULL;
    if (state != st_WRAPPED && state != st_FLUSHING) Py_RETURN_NONE;
    int paused = FLAG(self, app_reading_paused);
    if (paused < 0) goto error;
    if (!paused) {
        int buffered = FLAG(self, app_protocol_is_buffer);
        if (buffered < 0) goto error;
        PyObject *r = buffered ? call_method0(self, s_do_read_buffered) : sp_do_read_copied(self, NULL);
        if (r == NULL) goto error;
        Py_DECREF(r);
        PyObject *backlog = NEED(self, write_backlog);
        int more = backlog ? PyObject_IsTrue(backlog) : -1;
        if (more < 0) goto error;
        r = more ? call_method0(self, s_do_write) : sp_process_outgoing(self, NULL);
        if (r == NULL) goto error;
        Py_DECREF(r);
    }
    PyObject *r = sp_control_ssl_reading(self, NULL);
    if (r == NULL) goto error;
    Py_DECREF(r);
    Py_RETURN_NONE;
error:
    return fatal_from_current(self);
}

static PyObject *sp_get_buffer(PyObject *self, PyObject *n) {
    if (!ready()) return NULL;
    SP *sp = (SP *)self;
    if (!PyLong_CheckExact(n)) return call_parent(parent_get_buffer, self, n);
    Py_ssize_t want = PyLong_AsSsize_t(n);
    if (want == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return call_parent(parent_get_buffer, self, n);
    }
    PyObject *m = PyObject_GetAttr(self, s_max_size);
    if (m == NULL) return NULL;
    Py_ssize_t max = PyNumber_AsSsize_t(m, PyExc_OverflowError);
    Py_DECREF(m);
    if (max == -1 && PyErr_Occurred()) return NULL;
    if (want <= 0 || want > max) want = max;
    if (sp->ssl_buffer == NULL || !PyByteArray_CheckExact(sp->ssl_buffer) || sp->ssl_buffer_view == NULL ||
        PyByteArray_GET_SIZE(sp->ssl_buffer) < want)
        return call_parent(parent_get_buffer, self, n);  /* grows the buffer */
    Py_INCREF(sp->ssl_buffer_view);
    return sp->ssl_buffer_view;
}

static PyObject *sp_buffer_updated(PyObject *self, PyObject *nbytes) {
    if (!ready()) return NULL;
    if (!PyLong_CheckExact(nbytes)) return call_parent(parent_buffer_updated, self, nbytes);
    Py_ssize_t n = PyLong_AsSsize_t(nbytes);
    if (n == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return call_parent(parent_buffer_updated, self, nbytes);
    }
    PyObject *view = NEED(self, ssl_buffer_view);
    PyObject *incoming = NEED(self, incoming);
    if (view == NULL || incoming == NULL) return NULL;
    Py_buffer vb;
    if (PyObject_GetBuffer(view, &vb, PyBUF_SIMPLE) < 0) return NULL;
    if (n < 0 || n > vb.len) {  /* slicing semantics: leave them to asyncio's method */
        PyBuffer_Release(&vb);
        return call_parent(parent_buffer_updated, self, nbytes);
    }
    /* self._incoming.write(self._ssl_buffer_view[:nbytes]); MemoryBIO.write copies the bytes
     * and keeps no reference to its argument. */
    Py_INCREF(incoming);
    PyObject *mv = PyMemoryView_FromMemory((char *)vb.buf, n, PyBUF_READ);
    PyObject *r = mv ? call_method1(incoming, s_write, mv) : NULL;
    Py_XDECREF(mv);
    Py_DECREF(incoming);
    PyBuffer_Release(&vb);
    if (r == NULL) return NULL;
    Py_DECREF(r);

    PyObject *state = NEED(self, state);
    if (state == NULL) return NULL;
    if (state == st_DO_HANDSHAKE) return call_method0(self, s_do_handshake);
    if (state == st_WRAPPED) return sp_do_read(self, NULL);
    if (state == st_FLUSHING) return call_method0(self, s_do_flush);
    if (state == st_SHUTDOWN) return call_method0(self, s_do_shutdown);
    Py_RETURN_NONE;
}

static int append_backlog(PyObject *self, PyObject *data, Py_ssize_t len) {
    SP *sp = (SP *)self;
    PyObject *backlog = NEED(self, write_backlog);
    if (backlog == NULL) return -1;
    PyObject *r = call_method1(backlog, s_append, data);
    if (r == NULL) return -1;
    Py_DECREF(r);
    PyObject *size = NEED(self, write_buffer_size);
    if (size == NULL) return -1;
    PyObject *add = PyLong_FromSsize_t(len);
    PyObject *sum = add ? PyNumber_Add(size, add) : NULL;
    Py_XDECREF(add);
    if (sum == NULL) return -1;
    Py_XSETREF(sp->write_buffer_size, sum);
    return 0;
}

/* What write_records gives SSL_write, record after record: a read-only buffer over part of
 * the application's data, moved along between the calls. _ssl's write() takes the buffer
 * and releases it before it returns, so one object serves a whole write (a memoryview per
 * record cost two allocations each); it holds the data's own buffer until it is freed, so
 * a buffer of it kept by anyone stays valid, and it is never moved while one is out. */
typedef struct {
    PyObject_HEAD
    Py_buffer data;      /* the application data's buffer (PyBUF_SIMPLE) */
    char *buf;           /* what the next export gives: a part of data */
    Py_ssize_t len;
    Py_ssize_t exports;
} Slice;

static PyTypeObject *SliceType;

static int slice_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    Slice *sl = (Slice *)self;
    if (PyBuffer_FillInfo(view, self, sl->buf, sl->len, 1, flags) < 0) return -1;
    sl->exports++;
    return 0;
}

static void slice_releasebuffer(PyObject *self, Py_buffer *Py_UNUSED(view)) {
    ((Slice *)self)->exports--;
}

static void slice_dealloc(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyBuffer_Release(&((Slice *)self)->data);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static Py_ssize_t slice_length(PyObject *self) { return ((Slice *)self)->len; }

static PyType_Slot slice_slots[] = {
    {Py_sq_length, slice_length},  /* len(), for an SSLObject's write() in Python */
    {Py_bf_getbuffer, slice_getbuffer},
    {Py_bf_releasebuffer, slice_releasebuffer},
    {Py_tp_dealloc, slice_dealloc},
    {0, NULL},
};

/* A Slice over data's len bytes; NULL with no exception set when data is not one contiguous
 * run of len bytes (a memoryview of another format: len() counts its items), NULL with an
 * exception set on failure. */
static PyObject *slice_new(PyObject *data, Py_ssize_t len) {
    Slice *sl = PyObject_New(Slice, SliceType);
    if (sl == NULL) return NULL;
    sl->exports = 0;
    if (PyObject_GetBuffer(data, &sl->data, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        sl->data.obj = NULL;
        Py_DECREF(sl);
        return NULL;
    }
    if (sl->data.len != len) {
        Py_DECREF(sl);
        return NULL;
    }
    sl->buf = sl->data.buf;
    sl->len = 0;
    return (PyObject *)sl;
}

/* The transport's write() of the records read from the outgoing BIO, in order, as the one
 * write() asyncio's _process_outgoing makes of the BIO's whole content: goloop's socket
 * transport queues the bytes objects as they are (one writev, no join); any other transport
 * gets their join. Returns 0, or -1 with an exception set. */
static int hand_over(PyObject *self, PyObject *records) {
    Py_ssize_t n = PyList_GET_SIZE(records);
    if (n == 0) return 0;
    PyObject *transport = NEED(self, transport);
    if (transport == NULL) return -1;
    Py_INCREF(transport);
    int rc = n > 1 ? gl_transport_write_seq(transport, records) : 1;
    if (rc == 1) {
        PyObject *data;
        if (n == 1) {
            data = PyList_GET_ITEM(records, 0);
            Py_INCREF(data);
        } else {
            PyObject *empty = PyBytes_FromStringAndSize(NULL, 0);
            data = empty ? gl_call_method1(empty, "join", records) : NULL;
            Py_XDECREF(empty);
        }
        PyObject *r = data ? call_method1(transport, s_write, data) : NULL;
        Py_XDECREF(data);
        rc = r ? 0 : -1;
        Py_XDECREF(r);
    }
    Py_DECREF(transport);
    return rc;
}

/* The end of a write of application data that did not all go into SSL_write (an exception,
 * or a short count): backlog[0] = data[done:], as asyncio's _do_write leaves it. */
static int backlog_rest(PyObject *self, PyObject *data, Py_ssize_t done, Py_ssize_t len) {
    if (done == 0) return append_backlog(self, data, len);
    PyObject *rest = PySequence_GetSlice(data, done, PY_SSIZE_T_MAX);
    int rc = rest ? append_backlog(self, rest, len - done) : -1;
    Py_XDECREF(rest);
    return rc;
}

/* One write of application data, SSL_write by SSL_write, at most one TLS record's plaintext
 * (16 KiB) each, the outgoing BIO read out after each; then the records go to the transport
 * at once (hand_over) and _process_outgoing's flow control follows. The transport gets what
 * asyncio's single SSL_write + _process_outgoing gives it, in one write(), and the backlog
 * ends as asyncio's _do_write leaves it.
 *
 * Why: OpenSSL's memory BIO grows its buffer to hold all that one SSL_write makes, never
 * gives it back, and zeroes every part it appends to (BUF_MEM_grow_clean) before copying the
 * record in. One 1 MiB write left each connection holding a 1.3 MiB buffer for good (an
 * HTTPS server with 100 connections answering 1 MiB: 157 MB resident, 62 MB record by
 * record); and the memset and copies of a 100 KiB write run through memory no longer in the
 * cache. Record by record, the BIO's buffer stays one record long and warm: memset and
 * memmove fell from 14.8 % to 9.8 % of a 100 KiB HTTPS server's CPU, about what the calls
 * per record cost (CPU per response measured the same, within the measurement's noise).
 *
 * Returns Ellipsis when it does not apply (nothing done; the caller makes asyncio's one
 * write): a buffer that is not one contiguous run of len(data) bytes. */
static PyObject *write_records(PyObject *self, PyObject *data, Py_ssize_t len) {
    SP *sp = (SP *)self;
    PyObject *slice = slice_new(data, len);
    if (slice == NULL) {
        if (PyErr_Occurred()) return fatal_from_current(self);
        return Py_NewRef(Py_Ellipsis);
    }
    Slice *sl = (Slice *)slice;
    PyObject *outgoing = NEED(self, outgoing);
    PyObject *records = outgoing ? PyList_New(0) : NULL;
    /* bound once for all the records */
    PyObject *write = records ? PyObject_GetAttr(sp->inner, s_write) : NULL;
    PyObject *read = write ? PyObject_GetAttr(outgoing, s_read) : NULL;
    if (read == NULL) {
        Py_DECREF(slice);
        Py_XDECREF(records);
        Py_XDECREF(write);
        return fatal_from_current(self);
    }
    char *base = (char *)sl->data.buf;
    Py_ssize_t done = 0;
    int failed = 0;  /* 1: again (SSLWantReadError...), 2: another exception */
    while (done < len) {
        Py_ssize_t n = len - done < WRITE_CHUNK ? len - done : WRITE_CHUNK;
        if (sl->exports != 0) {  /* someone kept the last one's buffer: never moved under it */
            PyErr_SetString(PyExc_RuntimeError, "SSLObject.write() kept its buffer");
            failed = 2;
            break;
        }
        sl->buf = base + done;
        sl->len = n;
        PyObject *res = PyObject_Vectorcall(write, &slice, 1, NULL);
        if (res == NULL) {
            failed = PyErr_ExceptionMatches(again_errors) ? 1 : 2;
            break;
        }
        Py_ssize_t count = PyNumber_AsSsize_t(res, PyExc_OverflowError);
        Py_DECREF(res);
        if (count == -1 && PyErr_Occurred()) {
            failed = 2;
            break;
        }
        if (count > 0) done += count < n ? count : n;
        /* read() of an empty BIO gives b'' (a memory BIO's read returns bytes) */
        PyObject *out = PyObject_Vectorcall(read, NULL, 0, NULL);
        if (out == NULL) {
            failed = 2;
            break;
        }
        Py_ssize_t k = PyBytes_CheckExact(out) ? PyBytes_GET_SIZE(out) : PyObject_Size(out);
        int rc = k > 0 ? PyList_Append(records, out) : (int)k;
        Py_DECREF(out);
        if (rc < 0) {
            failed = 2;
            break;
        }
        if (count < n) break;  /* a short count: the rest to the backlog, as asyncio's */
    }
    Py_DECREF(write);
    Py_DECREF(read);
    Py_DECREF(slice);  /* releases data's buffer, unless someone kept the slice's */
    PyObject *r = NULL;
    if (failed == 2) {  /* as asyncio's: backlog holds the data, then _fatal_error */
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        if (backlog_rest(self, data, done, len) < 0) {
            Py_XDECREF(t);
            Py_XDECREF(v);
            Py_XDECREF(tb);
        } else {
            PyErr_Restore(t, v, tb);
        }
        goto fatal;
    }
    if (failed == 1) PyErr_Clear();
    if (done < len && backlog_rest(self, data, done, len) < 0) goto fatal;
    if (hand_over(self, records) < 0) goto fatal;
    Py_DECREF(records);
    r = sp_process_outgoing(self, NULL);  /* whatever is left (nothing), then flow control */
    if (r == NULL) return fatal_from_current(self);
    return r;
fatal:
    Py_DECREF(records);
    return fatal_from_current(self);
}

/* One write of application data (_SSLProtocolTransport.write -> _write_appdata((data,))) in
 * the WRAPPED state with nothing queued: straight to SSL_write, then _process_outgoing. The
 * backlog and its size end as asyncio's _do_write leaves them. More than a record's worth
 * goes record by record (write_records) unless the transport has paused this protocol
 * (_process_outgoing leaves the BIO alone then) or the SSLObject is not the plain one.
 * Anything else is asyncio's. */
static PyObject *write_one(PyObject *self, PyObject *data) {
    SP *sp = (SP *)self;
    PyObject *state = NEED(self, state);
    if (state == NULL) return NULL;
    int queued = 1;
    if (state == st_WRAPPED) {
        PyObject *backlog = NEED(self, write_backlog);
        queued = backlog ? PyObject_IsTrue(backlog) : -1;
        if (queued < 0) return NULL;
    }
    Py_ssize_t len = queued ? -1 : PyObject_Size(data);
    if (len < 0 || sp->sslobj == NULL) {
        PyErr_Clear();
        PyObject *tuple = PyTuple_Pack(1, data);
        if (tuple == NULL) return NULL;
        PyObject *r = call_parent(parent_write_appdata, self, tuple);
        Py_DECREF(tuple);
        return r;
    }
    if (len > TLS_MAX_PLAINTEXT && Py_TYPE(sp->sslobj) == sslobject_type) {
        int paused = FLAG(self, ssl_writing_paused);
        if (paused < 0) return fatal_from_current(self);
        if (!paused) {
            PyObject *r = write_records(self, data, len);
            if (r != Py_Ellipsis) return r;
            Py_DECREF(r);
        }
    }
    PyObject *sslobj = sp->inner;
    Py_INCREF(sslobj);
    PyObject *res = call_method1(sslobj, s_write, data);
    Py_DECREF(sslobj);
    if (res == NULL) {
        int again = PyErr_ExceptionMatches(again_errors);
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        if (append_backlog(self, data, len) < 0) {  /* a failure here would be asyncio's too */
            Py_XDECREF(t);
            Py_XDECREF(v);
            Py_XDECREF(tb);
            return fatal_from_current(self);
        }
        if (!again) {
            PyErr_Restore(t, v, tb);
            return fatal_from_current(self);
        }
        Py_XDECREF(t);
        Py_XDECREF(v);
        Py_XDECREF(tb);
    } else {
        Py_ssize_t count = PyNumber_AsSsize_t(res, PyExc_OverflowError);
        Py_DECREF(res);
        if (count == -1 && PyErr_Occurred()) return fatal_from_current(self);
        if (count < len && backlog_rest(self, data, count < 0 ? 0 : count, len) < 0)
            return fatal_from_current(self);
    }
    PyObject *r = sp_process_outgoing(self, NULL);
    if (r == NULL) return fatal_from_current(self);
    return r;
}

static PyObject *sp_write_appdata(PyObject *self, PyObject *list_of_data) {
    if (!ready()) return NULL;
    if (!PyTuple_CheckExact(list_of_data) || PyTuple_GET_SIZE(list_of_data) != 1)
        return call_parent(parent_write_appdata, self, list_of_data);
    return write_one(self, PyTuple_GET_ITEM(list_of_data, 0));
}

/* _sslobj: read, write and pending go to `inner`, the _ssl object behind a plain
 * ssl.SSLObject (whose methods only forward there); a context's sslobject_class may be a
 * subclass with its own methods, and that one is used as it is. */
static PyObject *sp_get_sslobj(PyObject *self, void *Py_UNUSED(closure)) {
    PyObject *v = NEED(self, sslobj);
    Py_XINCREF(v);
    return v;
}

static int sp_set_sslobj(PyObject *self, PyObject *value, void *Py_UNUSED(closure)) {
    SP *sp = (SP *)self;
    PyObject *inner = NULL;
    if (value != NULL) {
        if (Py_TYPE(value) == sslobject_type) {
            inner = PyObject_GetAttr(value, s_sslobj);
            if (inner == NULL) return -1;
        } else {
            inner = value;
            Py_INCREF(inner);
        }
        Py_INCREF(value);
    } else if (sp->sslobj == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_sslobj");
        return -1;
    }
    Py_XSETREF(sp->sslobj, value);
    Py_XSETREF(sp->inner, inner);
    return 0;
}

static int sp_traverse(PyObject *self, visitproc visit, void *arg) {
    SP *sp = (SP *)self;
    Py_VISIT(Py_TYPE(self));
#define V(f) Py_VISIT(sp->f);
    SP_FIELDS(V)
#undef V
    return 0;
}

static int sp_clear(PyObject *self) {
    SP *sp = (SP *)self;
#define C(f) Py_CLEAR(sp->f);
    SP_FIELDS(C)
#undef C
    return 0;
}

static void sp_dealloc(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    sp_clear(self);
    tp->tp_free(self);
    Py_DECREF(tp);  /* a heap type's instances own a reference to it */
}

static PyMemberDef sp_members[] = {
#define M(f) {"_" #f, T_OBJECT_EX, offsetof(SP, f), 0, NULL},
    M(state) M(incoming) M(outgoing) M(ssl_buffer) M(ssl_buffer_view) M(app_protocol)
    M(app_protocol_is_buffer) M(app_reading_paused) M(write_backlog) M(write_buffer_size)
    M(ssl_writing_paused) M(transport) M(outgoing_high_water) M(outgoing_low_water)
    M(app_writing_paused) M(incoming_high_water) M(incoming_low_water) M(ssl_reading_paused)
#undef M
    {NULL}
};

static PyGetSetDef sp_getset[] = {
    {"_sslobj", sp_get_sslobj, sp_set_sslobj, NULL, NULL},
    {NULL}
};

/* _setup(base, states, again_errors, sslobject_type): binds the mixins to the Python code
 * they port (pyshim/goloop/_sslproto.py): the class whose methods the C ones shadow and fall
 * back to, its state enum, the errors that mean "try again", and ssl.SSLObject. */
static PyObject *sp_setup(PyObject *Py_UNUSED(cls), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError,
                        "_setup(base_class, states, again_errors, sslobject_type)");
        return NULL;
    }
    /* Bound once (goloop._sslproto's import): replacing the values would free objects that
     * loops in other threads may be reading, without a GIL to wait for. */
    if (st_WRAPPED != NULL) Py_RETURN_NONE;
    PyObject *proto = args[0], *states = args[1], *again = args[2], *sslobject = args[3];
    if (!PyType_Check(proto) || !PyType_Check(sslobject)) {
        PyErr_SetString(PyExc_TypeError, "_setup: base_class and sslobject_type must be classes");
        return NULL;
    }
    PyObject *fields[9] = {
        PyObject_GetAttrString(states, "DO_HANDSHAKE"), PyObject_GetAttrString(states, "WRAPPED"),
        PyObject_GetAttrString(states, "FLUSHING"), PyObject_GetAttrString(states, "SHUTDOWN"),
        PyObject_GetAttrString(proto, "get_buffer"), PyObject_GetAttrString(proto, "buffer_updated"),
        PyObject_GetAttrString(proto, "_write_appdata"),
        PyObject_GetAttrString(proto, "_control_app_writing"),
        PyObject_GetAttrString(proto, "_control_ssl_reading"),
    };
    int ok = 1;
    for (int i = 0; i < 9; i++) ok &= fields[i] != NULL;
    if (!ok) {
        for (int i = 0; i < 9; i++) Py_XDECREF(fields[i]);
        return NULL;
    }
    Py_XSETREF(st_DO_HANDSHAKE, fields[0]);
    Py_XSETREF(st_WRAPPED, fields[1]);
    Py_XSETREF(st_FLUSHING, fields[2]);
    Py_XSETREF(st_SHUTDOWN, fields[3]);
    Py_XSETREF(parent_get_buffer, fields[4]);
    Py_XSETREF(parent_buffer_updated, fields[5]);
    Py_XSETREF(parent_write_appdata, fields[6]);
    Py_XSETREF(parent_control_app_writing, fields[7]);
    Py_XSETREF(parent_control_ssl_reading, fields[8]);
    Py_INCREF(again);
    Py_XSETREF(again_errors, again);
    Py_INCREF(sslobject);
    Py_XSETREF(sslobject_type, (PyTypeObject *)sslobject);
    Py_RETURN_NONE;
}

static PyMethodDef sp_methods[] = {
    {"get_buffer", (PyCFunction)sp_get_buffer, METH_O, NULL},
    {"buffer_updated", (PyCFunction)sp_buffer_updated, METH_O, NULL},
    {"_do_read", (PyCFunction)sp_do_read, METH_NOARGS, NULL},
    {"_do_read__copied", (PyCFunction)sp_do_read_copied, METH_NOARGS, NULL},
    {"_process_outgoing", (PyCFunction)sp_process_outgoing, METH_NOARGS, NULL},
    {"_control_app_writing", (PyCFunction)sp_control_app_writing, METH_NOARGS, NULL},
    {"_control_ssl_reading", (PyCFunction)sp_control_ssl_reading, METH_NOARGS, NULL},
    {"_write_appdata", (PyCFunction)sp_write_appdata, METH_O, NULL},
    {"_setup", (PyCFunction)(void (*)(void))sp_setup, METH_FASTCALL | METH_STATIC, NULL},
    {NULL}
};


/* ---- SSLTransportFast ------------------------------------------------------------------ */

static PyObject *tf_write(PyObject *self, PyObject *data) {
    if (!ready()) return NULL;
    if (!PyBytes_Check(data) && !PyByteArray_Check(data) && !PyMemoryView_Check(data)) {
        PyObject *name = PyType_GetName(Py_TYPE(data));
        if (name == NULL) return NULL;
        PyErr_Format(PyExc_TypeError, "data: expecting a bytes-like instance, got %U", name);
        Py_DECREF(name);
        return NULL;
    }
    int nonempty = PyObject_IsTrue(data);
    if (nonempty <= 0) {
        if (nonempty < 0) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *proto = PyObject_GetAttr(self, s_ssl_protocol);
    if (proto == NULL) return NULL;
    PyObject *r;
    if (PyObject_TypeCheck(proto, ProtoFastType)) {
        r = write_one(proto, data);
    } else {
        PyObject *tuple = PyTuple_Pack(1, data);
        r = tuple ? call_method1(proto, s_write_appdata, tuple) : NULL;
        Py_XDECREF(tuple);
    }
    Py_DECREF(proto);
    return r;
}

static PyMethodDef tf_methods[] = {
    {"write", (PyCFunction)tf_write, METH_O,
     "Write some data bytes to the transport (asyncio's contract)."},
    {NULL}
};

static PyType_Slot sp_slots[] = {
    {Py_tp_doc, "C methods of goloop's SSLProtocol (a mixin over goloop._sslproto.PySSLProtocol)."},
    {Py_tp_methods, sp_methods},
    {Py_tp_members, sp_members},
    {Py_tp_getset, sp_getset},
    {Py_tp_traverse, sp_traverse},
    {Py_tp_clear, sp_clear},
    {Py_tp_dealloc, sp_dealloc},
    {0, NULL},
};

static PyType_Slot tf_slots[] = {
    {Py_tp_doc, "C methods of goloop's SSL transport (a mixin over goloop._sslproto._PySSLProtocolTransport)."},
    {Py_tp_methods, tf_methods},
    {0, NULL},
};

int gl_init_ssl(PyObject *module) {
    struct { PyObject **slot; const char *name; } names[] = {
        {&s_sslobj, "_sslobj"}, {&s_max_size, "max_size"}, {&s_pending, "pending"},
        {&s_read, "read"}, {&s_write, "write"}, {&s_data_received, "data_received"},
        {&s_fatal_error, "_fatal_error"}, {&s_call_eof_received, "_call_eof_received"},
        {&s_start_shutdown, "_start_shutdown"}, {&s_do_read_buffered, "_do_read__buffered"},
        {&s_do_write, "_do_write"}, {&s_do_handshake, "_do_handshake"},
        {&s_do_flush, "_do_flush"}, {&s_do_shutdown, "_do_shutdown"},
        {&s_ssl_protocol, "_ssl_protocol"}, {&s_append, "append"},
        {&s_write_appdata, "_write_appdata"}, {&msg_fatal, "Fatal error on SSL protocol"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        *names[i].slot = PyUnicode_InternFromString(names[i].name);
        if (*names[i].slot == NULL) return -1;
    }
    record_max = PyLong_FromLong(TLS_MAX_PLAINTEXT);
    if (record_max == NULL) return -1;
    PyType_Spec sp_spec = {
        .name = "goloop._goloop.SSLProtocolFast",
        .basicsize = sizeof(SP),
        .itemsize = 0,
        .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
        .slots = sp_slots,
    };
    PyType_Spec tf_spec = {
        .name = "goloop._goloop.SSLTransportFast",
        .basicsize = 0,
        .itemsize = 0,
        .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
        .slots = tf_slots,
    };
    PyType_Spec slice_spec = {
        .name = "goloop._goloop._RecordSlice",
        .basicsize = sizeof(Slice),
        .itemsize = 0,
        .flags = Py_TPFLAGS_DEFAULT,
        .slots = slice_slots,
    };
    SliceType = (PyTypeObject *)PyType_FromSpec(&slice_spec);
    if (SliceType == NULL) return -1;
    ProtoFastType = (PyTypeObject *)PyType_FromSpec(&sp_spec);
    if (ProtoFastType == NULL) return -1;
    TransportFastType = (PyTypeObject *)PyType_FromSpec(&tf_spec);
    if (TransportFastType == NULL) return -1;
    Py_INCREF(ProtoFastType);
    if (PyModule_AddObject(module, "SSLProtocolFast", (PyObject *)ProtoFastType) < 0) {
        Py_DECREF(ProtoFastType);
        return -1;
    }
    Py_INCREF(TransportFastType);
    if (PyModule_AddObject(module, "SSLTransportFast", (PyObject *)TransportFastType) < 0) {
        Py_DECREF(TransportFastType);
        return -1;
    }
    return 0;
}
