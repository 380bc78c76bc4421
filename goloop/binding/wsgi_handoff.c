/* goloop serve --interface wsgi, the hand-off pool's C half (wsgi.h says what it is; Go's half
 * is wsgi_handoff.go): the queue of requests Go hands to the pool threads, the queue of
 * answers they hand back, and what a detached request does when it must call into Go after
 * all (gl_wsgi_adopt) or ends with its whole answer (gl_wsgi_detached_end). The queues are
 * C memory under one mutex: a pool thread takes and gives without entering Go's runtime. */
#include "wsgi.h"
#include "_cgo_export.h"

gl_wq *gl_wq_new(int efd) {
    gl_wq *q = calloc(1, sizeof *q);
    if (q == NULL) return NULL;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    q->efd = efd;
    return q;
}

static void wq_free_now(gl_wq *q);

/* The server object went: its queue goes now, or with the last held answer's release. */
void gl_wq_free(gl_wq *q) {
    if (q == NULL) return;
    pthread_mutex_lock(&q->mu);
    int later = q->held > 0;
    q->freed = 1;
    pthread_mutex_unlock(&q->mu);
    if (!later) wq_free_now(q);
}

void gl_wq_body_held(gl_wq *q, int d) {
    pthread_mutex_lock(&q->mu);
    q->held += d;
    pthread_mutex_unlock(&q->mu);
}

void gl_wq_body_release(gl_wq *q, char *b) {
    pthread_mutex_lock(&q->mu);
    int last = --q->held == 0 && q->freed;
    pthread_mutex_unlock(&q->mu);
    if (last) {
        free(b);
        wq_free_now(q);
        return;
    }
    gl_wq_body_put(q, b);
}

static void wq_free_now(gl_wq *q) {
    for (gl_wjob *j = q->all, *n; j != NULL; j = n) {
        n = j->all;
        free(j->scratch);
        free(j->small);
        free(j->bigbody);
        free(j->out);
        free(j->bigout);
        free(j);
    }
    for (int i = 0; i < q->nspare; i++) free(q->spare[i]);
    if (q->efd >= 0) close(q->efd);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

char *gl_wq_body_get(gl_wq *q) {
    pthread_mutex_lock(&q->mu);
    char *b = q->nspare > 0 ? q->spare[--q->nspare] : NULL;
    pthread_mutex_unlock(&q->mu);
    return b != NULL ? b : malloc(GL_WQ_BIG);
}

void gl_wq_body_put(gl_wq *q, char *b) {
    pthread_mutex_lock(&q->mu);
    int kept = q->nspare < GL_WQ_SPARE_BODIES;
    if (kept) q->spare[q->nspare++] = b;
    pthread_mutex_unlock(&q->mu);
    if (!kept) free(b);
}

gl_wjob *gl_wq_job_new(gl_wq *q) {
    gl_wjob *j = calloc(1, sizeof *j);
    if (j == NULL) return NULL;
    j->q = q;
    pthread_mutex_lock(&q->mu);
    j->token = q->njobs++;
    j->all = q->all;
    q->all = j;
    pthread_mutex_unlock(&q->mu);
    return j;
}

/* Wakes one waiting pool thread for the queued requests unless one is already on its way to
 * them (q->mu held). The woken thread takes a request only once it holds the GIL (wq_take):
 * a request never waits in a thread that waits for the GIL while another thread, holding it,
 * could answer it; and no more than one thread at a time waits for the GIL for the queue
 * (each such wait can cost the thread running Python its turn: CPython's switch interval). A
 * thread that takes a request and leaves more wakes the next (a chain: a thread that then
 * waits for its database, the GIL released, lets the next one run). */
static int wq_wake_one(gl_wq *q) {
    if (q->head == NULL || q->hunting + q->wakes > 0 || q->waiting <= q->wakes) return 0;
    q->wakes++;
    return 1;
}

void gl_wq_push(gl_wq *q, gl_wjob *j) {
    j->next = NULL;
    pthread_mutex_lock(&q->mu);
    if (q->tail != NULL) q->tail->next = j;
    else q->head = j;
    q->tail = j;
    int wake = wq_wake_one(q);
    pthread_mutex_unlock(&q->mu);
    if (wake) pthread_cond_signal(&q->cv);
}

/* The next request, taken by a thread holding the GIL (hunter: it was woken for it), or NULL:
 * none (*stopped 0) or the pool stopped (*stopped 1). */
static gl_wjob *wq_take(gl_wq *q, int hunter, int *stopped) {
    pthread_mutex_lock(&q->mu);
    if (hunter) q->hunting--;
    gl_wjob *j = q->stopped ? NULL : q->head;
    if (j != NULL && (q->head = j->next) == NULL) q->tail = NULL;
    int wake = wq_wake_one(q);
    *stopped = q->stopped;
    pthread_mutex_unlock(&q->mu);
    if (wake) pthread_cond_signal(&q->cv);
    if (j != NULL) j->next = NULL;
    return j;
}

/* Blocks (GIL released) until the thread is woken for a request or the pool stops: 1 woken.
 * A request pushed since the thread's last take, with no thread woken for it (the push saw
 * none waiting), wakes this one: the wake it grants is taken at once, with no signal. */
static int wq_wait(gl_wq *q) {
    pthread_mutex_lock(&q->mu);
    q->waiting++;
    wq_wake_one(q);
    while (q->wakes == 0 && !q->stopped) pthread_cond_wait(&q->cv, &q->mu);
    q->waiting--;
    int woken = q->wakes > 0 && !q->stopped;
    if (woken) q->wakes--, q->hunting++;
    pthread_mutex_unlock(&q->mu);
    return woken;
}

gl_wjob *gl_wq_next(gl_wq *q) {
    int hunter = 0, stopped;
    for (;;) {
        gl_wjob *j = wq_take(q, hunter, &stopped);
        if (j != NULL || stopped) return j;
        Py_BEGIN_ALLOW_THREADS
        hunter = wq_wait(q);
        Py_END_ALLOW_THREADS
    }
}

/* The thread is done with j (answered whole, or ended with nothing sent: j->status 0): to Go. */
void gl_wq_complete(gl_wq *q, gl_wjob *j) {
    j->next = NULL;
    pthread_mutex_lock(&q->mu);
    if (q->dtail != NULL) q->dtail->next = j;
    else q->done = j;
    q->dtail = j;
    int wake = q->go_sleeps;
    q->go_sleeps = 0;
    pthread_mutex_unlock(&q->mu);
    if (wake) gl_wq_wake(q);
}

void gl_wq_wake(gl_wq *q) {
    uint64_t one = 1;
    ssize_t rc;
    do rc = write(q->efd, &one, sizeof one);
    while (rc < 0 && errno == EINTR);  /* (EAGAIN: the counter is full, Go wakes anyway) */
}

int gl_wq_pending(gl_wq *q) {
    pthread_mutex_lock(&q->mu);
    int n = q->head != NULL;
    pthread_mutex_unlock(&q->mu);
    return n;
}

gl_wjob *gl_wq_done_take(gl_wq *q) {
    pthread_mutex_lock(&q->mu);
    gl_wjob *j = q->done;
    q->done = q->dtail = NULL;
    q->go_sleeps = j == NULL;
    pthread_mutex_unlock(&q->mu);
    return j;
}

gl_wjob *gl_wq_stop(gl_wq *q) {
    pthread_mutex_lock(&q->mu);
    q->stopped = 1;
    gl_wjob *j = q->head;
    q->head = q->tail = NULL;
    pthread_mutex_unlock(&q->mu);
    pthread_cond_broadcast(&q->cv);
    return j;
}

/* j's request leaves the detached state: its objects and thread no longer refer to j. */
static void detach(gl_wjob *j) {
    if (j->st != NULL) j->st->job = NULL;
    if (j->in != NULL) j->in->job = NULL;
    if (j->owner != NULL && j->owner->job == j) j->owner->job = NULL;
    j->st = NULL, j->in = NULL;
}

long gl_wsgi_adopt(gl_wjob *j) {
    GLWsgiStart *st = j->st;
    GLWsgiInput *in = j->in;
    wsgi_thread *owner = j->owner;
    long gen = 0;
    detach(j);  /* (Go may give j to another request once it returns) */
    __atomic_fetch_add(&j->q->nadopted, 1, __ATOMIC_RELAXED);
    int rc = glWsgiAdopt(j->wid, j, &gen);
    if (rc != GL_OK) {
        PyErr_SetString(PyExc_RuntimeError, "the WSGI request already ended");
        return -1;
    }
    if (st != NULL) st->gen = gen;
    if (in != NULL) in->gen = gen;
    if (owner != NULL) owner->adopted = 1;
    return gen;
}

int gl_wsgi_detached_end(GLWsgiStart *st, const char *p, Py_ssize_t n) {
    gl_wjob *j = st->job;
    /* a body other than its Content-Length: the adopted path raises the error (Go's) */
    if (st->clen >= 0 && st->body + n != st->clen) return 0;
    Py_ssize_t hn = st->hdr->n, need = hn + n;
    char *o = j->out;
    if (n > GL_WSGI_HOLD_MAX) {  /* a large one: in a buffer of the queue's */
        if (need > GL_WQ_BIG || (j->bigout == NULL && (j->bigout = gl_wq_body_get(j->q)) == NULL)) return 0;
        o = j->bigout;
    } else if (need > j->outcap) {
        Py_ssize_t cap = need < 4096 ? 4096 : need;
        if ((o = realloc(j->out, cap)) == NULL) return 0;  /* (the adopted path sends it from where it is) */
        j->out = o, j->outcap = cap;
    }
    if (hn > 0) memcpy(o, st->hdr->p, hn);
    if (n > 0) memcpy(o + hn, p, n);
    j->outn = need, j->hdrlen = hn;
    j->status = st->status, j->finish = 1;
    __atomic_fetch_add(&j->q->ndetached, 1, __ATOMIC_RELAXED);
    detach(j);
    gl_wq_complete(j->q, j);
    return 1;
}

void gl_wsgi_detached_fail(gl_wjob *j, int finish) {
    j->status = 0, j->outn = 0, j->hdrlen = 0;
    j->finish = finish;
    __atomic_fetch_add(&j->q->ndetached, 1, __ATOMIC_RELAXED);
    detach(j);
    gl_wq_complete(j->q, j);
}
