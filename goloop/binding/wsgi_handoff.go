package main

// goloop serve --interface wsgi, the hand-off pool's Go half (the default; the C half and
// the why: wsgi.h, wsgi_handoff.c). One goroutine leads the server's poller for good
// (ioLoop: accept, read, parse, the deadlines, the writes); notify and ioLoop hand each
// request to the pool threads through the C queue (dispatchLocked); the answers the threads
// complete come back through the other C queue, whose eventfd (a duplicate of the poller's)
// wakes ioLoop, which writes them and ends their requests (answer). A request a thread
// adopts (glWsgiAdopt) is then the thread's as in the leader/follower pool (wsgi.go), and
// its calls into Go go on as there; so does a parked response, which a thread adopts as it
// takes it.

/*
#include "wsgi.h"
*/
import "C"

import (
	"runtime"
	"time"
	"unsafe"

	"github.com/goloop/goloop/goloop/httpserver"
	"golang.org/x/sys/unix"
)

// wsgiHandoff is a hand-off pool's state (wsgiSrv.ho). The jobs are C memory that the queue
// owns (gl_wq_free frees them with it, when the server object goes: a pool thread may hold
// one until then); Go keeps the free ones and the request each job carries.
type wsgiHandoff struct {
	q         *C.gl_wq
	free      []*C.gl_wjob          // (w.mu)
	reqs      []*httpserver.Request // the request of each job handed over, by its token (w.mu)
	inflight  int                   // requests handed over and not answered nor adopted (w.mu)
	done      chan struct{}         // closed when ioLoop leaves
	answering []*httpserver.Request // answer's (only ioLoop answers)
	batch     []*C.gl_wjob          // ioLoop's
}

// wsgiHandoffMode: the hand-off pool, unless GOLOOP_WSGI_POOL=leader (the leader/follower
// pool) or GOLOOP_WSGI_DRIVER=goroutine (which has no poller to lead). C's getenv, as
// wsgiGoroutineDriver.
func wsgiHandoffMode() bool {
	v := C.getenv(cWsgiPoolEnv)
	return v == nil || C.GoString(v) != "leader"
}

var cWsgiPoolEnv = C.CString("GOLOOP_WSGI_POOL")

// newWsgiHandoff: the queues of a hand-off pool whose leader goroutine waits in pp: the
// pool threads' answers wake it through pp's eventfd.
func newWsgiHandoff(pp *httpserver.PoolPoller) (*wsgiHandoff, error) {
	fd, err := pp.DupEventFd()
	if err != nil {
		return nil, err
	}
	q := C.gl_wq_new(C.int(fd))
	if q == nil {
		unix.Close(fd)
		return nil, unix.ENOMEM
	}
	return &wsgiHandoff{q: q, done: make(chan struct{})}, nil
}

// ioLoop is the hand-off pool's leader (pp): it waits for the connections' events and the
// pool threads' answers, reads and parses (the handlers), hands the requests over, writes
// the answers, until the pool stops. It passes through Go's scheduler at least every
// leadTick.
func (w *wsgiSrv) ioLoop() {
	defer close(w.ho.done)
	yielded := time.Now()
	for w.leadRound(&yielded) {
	}
}

// leadRound is one turn of ioLoop: false once the pool stopped (the poller closed). A panic
// ends the turn, not the leader (every lock is released by a defer).
func (w *wsgiSrv) leadRound(yielded *time.Time) (more bool) {
	defer func() {
		if recover() != nil {
			more = true
		}
	}()
	ho := w.ho
	if j := C.gl_wq_done_take(ho.q); j != nil {
		batch := ho.batch[:0]
		for ; j != nil; j = j.next {
			batch = append(batch, j)
		}
		ho.batch = batch
		w.answer(batch)
		return true
	}
	stopped, idle := w.leadState()
	if stopped {
		return false
	}
	// the wait ends within leadTick of the last pass through the scheduler
	now := time.Now()
	budget := leadTick - now.Sub(*yielded)
	if budget < time.Millisecond {
		runtime.Gosched()
		*yielded, budget = now, leadTick
	}
	// (a pool thread's answer from now on writes the eventfd: go_sleeps)
	if w.pollPark(int(budget/time.Millisecond), idle) {
		*yielded = time.Now()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dispatching = false
	if w.routeLocked() > 0 && !w.stopped {
		w.dispatchLocked()
	}
	return true
}

// leadState: whether the pool stopped (then the leader leaves: the poller is closed), and
// whether no request handed over is unanswered.
func (w *wsgiSrv) leadState() (stopped, idle bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		w.leader = nil
		w.closePollLocked()
		return true, false
	}
	return false, w.ho.inflight == 0
}

// dispatchLocked hands the ready requests to the pool threads (w.mu held): each in a job
// whose C memory gets a copy of its head.
func (w *wsgiSrv) dispatchLocked() {
	ho := w.ho
	for _, r := range w.ready[w.head:] {
		var j *C.gl_wjob
		if n := len(ho.free); n > 0 {
			j = ho.free[n-1]
			ho.free = ho.free[:n-1]
		} else if j = C.gl_wq_job_new(ho.q); j == nil {
			go r.Done(true) // no memory (not under a Conn's lock)
			continue
		}
		tok := int(j.token)
		for len(ho.reqs) <= tok {
			ho.reqs = append(ho.reqs, nil)
		}
		ho.reqs[tok] = r
		if p := w.parkedOf(r); p != nil {
			// a parked response to resume (glWsgiPark): the thread adopts it at once
			delete(w.parked, r)
			j.head.resume = p.rec
		} else {
			j.head.resume = nil
			hb := headBuf{hd: &j.head, scratch: j.scratch, scratchLen: int(j.scratchlen)}
			hb.fill(r, nil)
			j.scratch, j.scratchlen = hb.scratch, C.long(hb.scratchLen)
			j.bodyn = takeBody(j, r)
		}
		w.taken++
		ho.inflight++
		C.gl_wq_push(ho.q, j)
	}
	clear(w.ready)
	w.ready, w.head = w.ready[:0], 0
}

// takeBody copies r's whole body into j when it arrived whole with the head and is at
// most GL_WSGI_BODY_MAX bytes (httpserver.Request.TakeWhole): into j's own memory up to
// GL_WSGI_HOLD_MAX (it grows to the body), a larger one into a buffer of the queue's
// (bigbody). Its length, or -1: Go keeps it.
func takeBody(j *C.gl_wjob, r *httpserver.Request) C.Py_ssize_t {
	if j.bigbody != nil { // (a job that went back unread: a request ended before a thread took it)
		C.gl_wq_body_put(j.q, j.bigbody)
		j.bigbody = nil
	}
	n, ok := r.TakeWhole(unsafe.Slice((*byte)(unsafe.Pointer(j.small)), int(j.smallcap)))
	switch {
	case ok || n <= int(j.smallcap) || n > C.GL_WSGI_BODY_MAX:
	case n <= C.GL_WSGI_HOLD_MAX:
		grown := min(max(n, 2*int(j.smallcap), 1024), C.GL_WSGI_HOLD_MAX)
		if p := C.realloc(unsafe.Pointer(j.small), C.size_t(grown)); p != nil {
			j.small, j.smallcap = (*C.char)(p), C.Py_ssize_t(grown)
			n, ok = r.TakeWhole(unsafe.Slice((*byte)(p), grown))
		}
	default:
		if p := C.gl_wq_body_get(j.q); p != nil {
			if n, ok = r.TakeWhole(unsafe.Slice((*byte)(unsafe.Pointer(p)), C.GL_WSGI_BODY_MAX)); ok {
				j.bigbody = p
			} else {
				C.gl_wq_body_put(j.q, p)
			}
		}
	}
	if !ok {
		return -1
	}
	return C.Py_ssize_t(n)
}

// parkedOf: r's parked response, or nil (w.mu held).
func (w *wsgiSrv) parkedOf(r *httpserver.Request) *wsgiPark {
	if len(w.parked) == 0 {
		return nil
	}
	return w.parked[r]
}

// leadTick: ioLoop's wait blocks its thread (PoolPoller.WaitPark) until at most leadTick
// after the goroutine last passed through Go's scheduler (parked, or runtime.Gosched
// before the wait when that is over leadTick - 1 ms ago), then parks in Go's netpoller. A
// goroutine whose P stands 10 ms in one system call, or on one scheduler tick, has the P
// taken by Go's monitor, which then ticks 20 µs apart for a while; each park and wake is a
// pass through the scheduler that wakes the monitor from its sleep (tens of ticks), and each
// Gosched wakes a thread to look for work: so the wait blocks as long as it safely can, it
// parks only when no request handed over is still unanswered (a loaded server's gaps
// between events pass 8 ms often: a Django request making 20 queries takes ~7 ms of CPU),
// and an idle server parks within 8 ms and wakes for nothing. While requests run it wakes
// every 8 ms at most (a request that runs for minutes costs ~125 such wake-ups a second).
const leadTick = 8 * time.Millisecond

// pollPark is poll for the hand-off pool's leader: its waits park the goroutine in Go's
// netpoller (PoolPoller.WaitPark). A panic ends the round, not the leader.
func (w *wsgiSrv) pollPark(ms int, park bool) (parked bool) {
	defer func() { recover() }()
	_, parked = w.pp.WaitPark(ms, park)
	w.handleEvents()
	return parked
}

// answer writes the answers of batch and ends their requests. A panic loses the batch's
// answers (their requests end as failed), not the leader.
func (w *wsgiSrv) answer(batch []*C.gl_wjob) {
	ho := w.ho
	reqs := ho.answering[:0]
	for range batch {
		reqs = append(reqs, nil)
	}
	ho.answering = reqs
	w.mu.Lock()
	for i, j := range batch {
		reqs[i], ho.reqs[j.token] = ho.reqs[j.token], nil
	}
	ho.inflight -= len(batch)
	w.mu.Unlock()
	defer func() {
		if recover() != nil {
			for _, r := range reqs {
				if r != nil {
					r.Done(true)
				}
			}
		}
		for _, j := range batch {
			if j.bigout != nil { // (Send copied it, or it was not sent)
				C.gl_wq_body_put(ho.q, j.bigout)
				j.bigout = nil
			}
		}
		w.mu.Lock()
		ho.free = append(ho.free, batch...)
		w.mu.Unlock()
		w.sv.s.Flush()
	}()
	for i, j := range batch {
		r := reqs[i]
		if r == nil {
			continue
		}
		failed := j.finish == 2
		if j.status > 0 {
			o := j.out
			if j.bigout != nil {
				o = j.bigout
			}
			out := unsafe.Slice((*byte)(unsafe.Pointer(o)), int(j.outn))
			err := wsgiStart(r, int(j.status), out[:j.hdrlen])
			switch {
			case err != nil:
			case j.bigout != nil: // held, not copied, when the socket may take it from there
				// (counted before: the release may come before SendHeld returns; the
				// queue outlives the server object until the last release)
				buf, q := j.bigout, ho.q
				C.gl_wq_body_held(q, 1)
				var held bool
				_, held, err = r.SendHeld(out[j.hdrlen:], false, func() { C.gl_wq_body_release(q, buf) })
				if held {
					j.bigout = nil // (the release gives it back)
				} else {
					C.gl_wq_body_held(q, -1)
				}
			default:
				_, err = r.Send(out[j.hdrlen:], false)
			}
			failed = failed || err != nil
		}
		reqs[i] = nil
		r.Done(failed)
	}
}

// glWsgiAdopt makes the detached request of job j the calling pool thread's (as a
// leader/follower pool's thread takes one): its gen (*gen) for the calls that follow. j is
// Go's again (its head no longer read). GL_ERR_GONE: the pool stopped.
//
//export glWsgiAdopt
func glWsgiAdopt(wid C.long, j *C.gl_wjob, gen *C.long) (rc C.int) {
	defer wsgiRecover(wid, &rc)
	wk := wsgiWorkers.Get(int(wid))
	if wk == nil || wk.w.ho == nil {
		return C.GL_ERR_GONE
	}
	w, ho := wk.w, wk.w.ho
	w.mu.Lock()
	r := ho.reqs[j.token]
	ho.reqs[j.token] = nil
	ho.free = append(ho.free, j)
	ho.inflight--
	if r == nil {
		w.mu.Unlock()
		return C.GL_ERR_GONE
	}
	r.Tag = unsafe.Pointer(wk)
	w.busy++
	w.mu.Unlock()
	select { // a wake-up left from the previous request
	case <-wk.wake:
	default:
	}
	wk.r = r // (takenAt is the leader/follower pool's: an adopted answer is never held)
	wk.gen++
	*gen = C.long(wk.gen)
	return C.GL_OK
}

// stopHandoffLocked (w.mu held, after stopped is set): the threads leave gl_wq_next, the requests
// not taken are returned (ended by the caller), the parked responses not taken are parked
// again (the threads, as they leave, resume them: glWsgiNext) and the leader is woken to
// leave.
func (w *wsgiSrv) stopHandoffLocked() (rest []*httpserver.Request) {
	ho := w.ho
	for j := C.gl_wq_stop(ho.q); j != nil; j = j.next {
		if r := ho.reqs[j.token]; r != nil {
			ho.reqs[j.token] = nil
			if j.head.resume != nil {
				if w.parked == nil {
					w.parked = make(map[*httpserver.Request]*wsgiPark)
				}
				w.parked[r] = &wsgiPark{rec: j.head.resume, queued: true}
			} else {
				rest = append(rest, r)
			}
		}
		j.head.resume = nil
		ho.inflight--
		ho.free = append(ho.free, j)
	}
	C.gl_wq_wake(ho.q)
	return rest
}
