package main

// goloop serve --interface wsgi (Go side): an httpserver.Server whose exchanges are answered by a
// pool of Python threads running a WSGI application (wsgi.c), not by tasks on the loop.
//
// The engine runs in Go without the GIL. Plain listeners are served by the loop driver
// over a poller of the server's own (httpserver.PoolPoller). By default one goroutine
// leads it for good and the pool threads take their requests from a C queue, calling into
// Go only for what a one-part answer does not need (the hand-off pool: wsgi_handoff.go,
// wsgi.h). With GOLOOP_WSGI_POOL=leader the pool threads run the poller themselves,
// leader/follower (what follows): a pool thread with no request to answer and nobody leading
// waits in its epoll_wait, runs the handlers of what came (accept, read, parse, write,
// deadlines), takes the server's queue and answers the first request itself; the others
// wait on their channels as followers. TLS listeners, HTTP/2 and the connections the loop
// driver hands over are read by the goroutine driver (Go's netpoller), whose pushes reach
// Notify, which routes the queue under the pool's mutex: a request to the ready list (and
// the leader is interrupted or a sleeping pool thread signalled), a wake-up to the channel
// of the pool thread that handles that request. GOLOOP_WSGI_DRIVER=goroutine serves every
// listener with the goroutine driver instead (every connection read by a goroutine).
// A pool thread blocks in glWsgiNext (GIL released) until a request is ready and leaves
// with its head in its own C memory (under load it ends its request and takes a ready one
// with the GIL kept instead: glWsgiTake, glWsgiSendEnd); its reads of the body, its sends
// (with the flush: the thread writes to the socket itself; a small part with the GIL held)
// and its waits for body or backpressure are Go calls (the waits with the GIL released,
// wsgi_input.c, wsgi_response.c); a wait leads the poller when nobody does. No Python
// object is touched by Go here (but the references to the large bodies it holds, which
// the loop thread releases: server_held.go): errors travel as codes and messages in the
// thread's C memory, which wsgi*.c raise.

/*
#include "wsgi.h"
*/
import "C"

import (
	"bytes"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/goloop/goloop/goloop/httpserver"
	"github.com/goloop/goloop/goloop/idtable"
)

type wsgiSrv struct {
	sv *httpSrv
	mu sync.Mutex
	// the idle threads, the last to go idle on top: it is woken first (its caches are warm)
	idle []*wsgiWorker
	// ready requests, in arrival order: ready[head:]
	ready   []*httpserver.Request
	head    int
	busy    int   // pool threads answering a request
	woken   int   // idle threads woken that have not taken a request yet
	claims  int   // threads taking the GIL to claim a ready request (glWsgiClaim)
	taken   int64 // requests taken by the pool so far
	stopped bool
	evs     []httpserver.Event
	// With the GIL, a request that arrives while a thread is busy is left for that thread
	// (it takes the next request when it finishes, with no wake-up and no fight for the
	// GIL) unless the pool makes no progress for wakeDelay: then an idle thread is woken
	// (the busy ones wait in I/O). eager (free-threaded, no GIL): woken at once.
	eager   bool
	timer   *time.Timer
	timerOn bool
	held    int       // answers written only with the next (endTake)
	heldAt  time.Time // when the first of them was
	mark    int64     // taken when the timer was armed

	// leader/follower (pp != nil): who leads the poller (nil: nobody; bk: the backup
	// goroutine, which leads while every pool thread is busy), how many times it was
	// taken (leads; lmark when the timer was armed), whether the leader is running
	// handlers (dispatching: Notify routes without waking anyone, the leader looks at the
	// ready list after its round) and whether it was interrupted since it last did.
	pp          *httpserver.PoolPoller
	leader      *wsgiWorker
	bk          *wsgiWorker
	leads       int64
	lmark       int64
	dispatching bool
	kicked      bool
	idleLead    bool // the leader is a pool thread with no request (glWsgiNext)

	// the parked responses (glWsgiPark): their requests (whose Tag is nil while parked)
	parked map[*httpserver.Request]*wsgiPark

	// the hand-off pool (wsgi_handoff.go), or nil
	ho *wsgiHandoff
}

// wsgiPark is a parked response: one whose output was over its bound, which its pool
// thread left (glWsgiPark) instead of waiting for the socket. rec is its C record (wsgi.c's
// wsgi_resp: the iterable, its iterator, the part being sent, the request's objects and
// contextvars.Context, strong references the record owns), which only the pool thread that
// resumes the response touches, with the GIL.
type wsgiPark struct {
	rec    unsafe.Pointer
	queued bool // on the ready list (an EvWake came: the output drained or the client went away)
}

// wakeDelay: how long requests wait for busy threads that make no progress before an idle
// thread is woken (GIL builds; scaled by scaleTimes: valgrind runs the server ~50x slower,
// and at 1 ms the timer would fire on every request there, where it almost never does at
// full speed).
var wakeDelay = time.Millisecond

// wsgiWorker is one pool thread's state: the request it answers (gen counts them, so
// that a C object of an earlier request, kept by the application, cannot reach a later
// one), its wake-up channel and its C memory.
type wsgiWorker struct {
	w    *wsgiSrv
	id   int
	r    *httpserver.Request
	gen  int64
	wake chan struct{} // an EvWake for its request
	run  chan struct{} // woken from the idle stack
	hb   headBuf
	rh   *C.GLHead      // the head that resumes a parked response (C memory; attachLocked)
	rbuf unsafe.Pointer // the body part glWsgiRecv passes (C memory)
	rcap int
	emsg *C.char // the message of the last GL_ERR_RUNTIME (C memory)

	takenAt time.Time // when it took its request (endTake holds only a quick one's answer)
}

var (
	wsgiServers idtable.Table[wsgiSrv]
	wsgiWorkers idtable.Table[wsgiWorker]
)

//export glWsgiServerNew
func glWsgiServerNew(py *C.GLServer, lp *C.GLLoop, maxHead, keepAliveMs, limitConc C.long,
	serverHdr, dateHdr C.int, headers *C.char, hlen C.Py_ssize_t, eager C.int, wsid *C.long, wq *unsafe.Pointer) (rc C.int) {
	defer recoverInt(&rc)
	l := getLoop(lp)
	if !l.checkClosed() {
		return -1
	}
	scaleTimes() // (wakeDelay as GOLOOP_TIME_SCALE leaves it)
	w := &wsgiSrv{eager: eager != 0}
	w.bk = &wsgiWorker{w: w, id: -1}
	w.timer = time.AfterFunc(time.Hour, w.progress)
	w.timer.Stop()
	if !wsgiGoroutineDriver() {
		pp, err := httpserver.NewPoolPoller()
		if err != nil {
			raiseErr(err)
			return -1
		}
		w.pp = pp
		if wsgiHandoffMode() {
			ho, err := newWsgiHandoff(pp)
			if err != nil {
				pp.Close()
				raiseErr(err)
				return -1
			}
			w.ho = ho
			*wq = unsafe.Pointer(ho.q)
			w.leader = w.bk // for good: the pool threads never lead
		}
	}
	id, _ := wsgiServers.Add(w)
	*wsid = C.long(id)
	cfg := serverConfig(maxHead, keepAliveMs, limitConc, serverHdr, dateHdr, headers, hlen)
	cfg.Notify = w.notify
	cfg.ReuseRequests = true // a pool thread drops its request at Done (glWsgiNext, glWsgiWorkerFree)
	// not the loop's poller: the loop thread has no part in a request (the pool leads pp)
	w.sv = newHttpSrv(py, l, cfg)
	if w.pp != nil {
		w.sv.s.SetLoop(w.pp)
	}
	if w.ho != nil && w.pp != nil {
		go w.ioLoop()
	}
	w.sv.onRelease = func() { // (the loop thread: the connections were aborted)
		l.removeHook(wsgiHook{w})
		w.stop()
		wsgiServers.Del(id)
	}
	l.addHook(wsgiHook{w})
	return 0
}

// wsgiGoroutineDriver: GOLOOP_WSGI_DRIVER=goroutine serves plain listeners with the
// goroutine driver too (no leader/follower poller; for A/B comparisons). C's getenv, as
// goroutineReaders.
func wsgiGoroutineDriver() bool {
	v := C.getenv(cWsgiDriverEnv)
	return v != nil && C.GoString(v) == "goroutine"
}

var cWsgiDriverEnv = C.CString("GOLOOP_WSGI_DRIVER")

// wsgiHook: the loop thread releases the held bodies the engine is done with; the loop's
// end releases the server (the pool threads leave their wait).
type wsgiHook struct{ w *wsgiSrv }

// take releases the held bodies and logs the engine's warnings (accept errors), which the
// loop thread logs for the pool.
func (h wsgiHook) take() {
	h.w.sv.dropHeld()
	if h.w.sv.s.HasWarnings() {
		h.w.sv.logWarnings()
	}
}
func (h wsgiHook) flush() {}
func (h wsgiHook) loopClosed() {
	h.w.sv.s.Abort()
	h.w.sv.release()
}

// notify is the engine's Notify: it takes the queue and routes its events (any goroutine,
// perhaps with a connection's lock held: it takes no connection's lock).
func (w *wsgiSrv) notify() {
	w.mu.Lock()
	n := w.routeLocked()
	if w.ho != nil {
		if n > 0 && !w.stopped {
			w.dispatchLocked()
		}
		w.mu.Unlock()
		return
	}
	switch {
	case n == 0 || w.dispatching: // the leader looks at the ready list after its round
	case w.leader != nil && w.idleLead:
		// a pool thread leads with nothing to answer: it takes the request (no follower
		// woken); free-threaded, idle threads take the others
		w.kickLocked()
		if w.eager {
			w.wakeLocked(n - 1)
		}
	default:
		w.wakeLocked(n)
	}
	w.mu.Unlock()
}

// kickLocked interrupts the leader's wait (once until its next round; w.mu held).
func (w *wsgiSrv) kickLocked() {
	if !w.kicked {
		w.kicked = true
		w.pp.Interrupt()
	}
}

// routeLocked takes the queue: requests to the ready list, wake-ups to their threads'
// channels (a leader waiting in the poller for its own request is interrupted). It
// returns how many requests it added (w.mu held).
func (w *wsgiSrv) routeLocked() int {
	w.evs = w.sv.s.Take(w.evs[:0])
	n := 0
	for i, ev := range w.evs {
		w.evs[i] = httpserver.Event{}
		switch ev.Kind {
		case httpserver.EvRequest:
			if w.stopped { // after the pool stopped: lost with the server (not under a Conn's lock)
				go ev.Req.Done(false)
				continue
			}
			w.ready = append(w.ready, ev.Req)
			n++
		case httpserver.EvWake:
			if wk := (*wsgiWorker)(ev.Req.Tag); wk != nil {
				select {
				case wk.wake <- struct{}{}:
				default:
				}
				if wk == w.leader && !w.dispatching {
					w.kickLocked()
				}
			} else if p := w.parked[ev.Req]; p != nil && !p.queued && !w.stopped {
				// a parked response's output drained (or its client went away): any
				// pool thread resumes it, as it takes a request
				p.queued = true
				w.ready = append(w.ready, ev.Req)
				n++
			}
		}
	}
	return n
}

// wakeLocked wakes idle threads for n new requests (w.mu held).
func (w *wsgiSrv) wakeLocked(n int) {
	if n <= 0 || len(w.idle) == 0 {
		return
	}
	if w.eager {
		for ; n > 0 && len(w.idle) > 0; n-- {
			w.wakeOneLocked()
		}
		return
	}
	if w.busy+w.woken+w.claims == 0 {
		// one thread, whatever n: with the GIL one runs Python at a time, and the one woken
		// takes the other requests in turn with no further wake-up (more threads woken at
		// once only fight for the GIL: measured, 2 context switches a request instead of
		// 0.8); the timer wakes another if it makes no progress
		w.wakeOneLocked()
		if n == 1 {
			return
		}
	}
	w.armLocked()
}

// wakeOneLocked wakes the idle thread on top of the stack (w.mu held, one is idle).
func (w *wsgiSrv) wakeOneLocked() {
	wk := w.idle[len(w.idle)-1]
	w.idle[len(w.idle)-1] = nil
	w.idle = w.idle[:len(w.idle)-1]
	w.woken++
	wk.run <- struct{}{} // buffered: never blocks (a thread is on the stack once)
}

// progress: the timer's check (its own goroutine): the pool stalled (no request taken
// since it was armed, nobody claiming one) and some wait: wake a thread; requests still
// waiting: check again later. With the poller: the pool stalled and nobody took its lead
// since it was armed while nobody leads (the last leader runs the application): an idle
// thread is woken to lead, or, every thread being busy, the backup goroutine leads
// (accepts, reads, answers 503 past --limit-concurrency, closes idle connections) until a
// pool thread is free. While the pool takes requests the lead stays vacant: the threads
// answer the requests read, in turn, and the first to find none left leads again (as one
// thread would; a thread woken then would only wait for the GIL).
func (w *wsgiSrv) progress() {
	held := false
	defer func() {
		if held { // answers a thread held: it did not come back to write them
			w.sv.s.Flush()
		}
	}()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timerOn = false
	held, w.held = w.held > 0, 0
	if w.stopped {
		return
	}
	waiting := len(w.ready) - w.head
	vacant := w.pp != nil && w.leader == nil
	// no request taken since it was armed, and no thread about to take one (it waits for
	// the GIL: one more woken would only wait for it too)
	stalled := w.taken == w.mark && w.claims == 0
	if waiting > 0 && stalled && len(w.idle) > 0 {
		w.wakeOneLocked()
	} else if vacant && stalled && w.leads == w.lmark && w.woken == 0 {
		if len(w.idle) > 0 {
			w.wakeOneLocked()
		} else {
			w.leader = w.bk
			w.leads++
			go w.backup()
			vacant = false
		}
	}
	if (waiting > 0 && len(w.idle) > 0) || vacant {
		w.armLocked()
	}
}

// armLocked arms the progress timer unless it is on (w.mu held).
func (w *wsgiSrv) armLocked() {
	if !w.timerOn {
		w.timerOn, w.mark, w.lmark = true, w.taken, w.leads
		w.timer.Reset(wakeDelay)
	}
}

// vacateLocked: the leader leaves the poller to answer a request, rem more waiting (w.mu
// held). Free-threaded: idle threads are woken at once, one to lead and one per request;
// with the GIL the leader comes back when it is done (no wake-up) unless the timer finds
// that nobody took the lead meanwhile.
func (w *wsgiSrv) vacateLocked(rem int) {
	w.leader = nil
	if w.eager && len(w.idle) > 0 {
		w.wakeLocked(rem + 1)
		return
	}
	w.armLocked()
}

// round is one turn of the poller's leader (self; w.mu held, released while it waits
// and runs the handlers): wait for events (until something happens), handle them,
// write the server's own answers, take the queue. The lead is kept; w.mu is held after.
func (w *wsgiSrv) round() {
	w.mu.Unlock()
	w.poll()
	w.mu.Lock()
	w.dispatching = false
	w.routeLocked()
}

// poll is round's part without w.mu. A panic ends the round, not the leader's thread
// (which would leave the lead taken for ever).
func (w *wsgiSrv) poll() {
	defer func() { recover() }()
	w.pp.Wait(-1)
	w.handleEvents()
}

// handleEvents runs the handlers of the poller's last wait (Notify routes without waking
// anyone meanwhile: dispatching) and writes the server's own answers.
func (w *wsgiSrv) handleEvents() {
	w.mu.Lock()
	w.dispatching, w.kicked = true, false
	w.mu.Unlock()
	w.pp.Dispatch()
	if w.sv.s.NeedFlush() {
		w.sv.s.Flush()
	}
}

// backup leads the poller while every pool thread is busy (progress starts it): the
// requests it reads wait for the threads; it leaves the lead to the first thread that
// is idle.
func (w *wsgiSrv) backup() {
	defer func() { recover() }()
	w.mu.Lock()
	for !w.stopped && len(w.idle) == 0 {
		w.round()
	}
	w.leader = nil
	if w.stopped {
		w.closePollLocked()
	} else {
		w.wakeLocked(len(w.ready) - w.head)
		if len(w.idle) > 0 && w.woken == 0 {
			w.wakeOneLocked() // to lead
		}
		w.armLocked()
	}
	w.mu.Unlock()
}

// await blocks the thread until ok (its body arrived, its output drained, its request
// ended): on its channel while another leads the poller, else leading it itself (with
// --threads 1 nobody else would read the body it waits for).
func (wk *wsgiWorker) await(ok func() bool) {
	w := wk.w
	if w.sv.s.NeedFlush() { // a 100 Continue the body waits for
		w.sv.s.Flush()
	}
	for !ok() {
		if w.pp == nil {
			<-wk.wake
			continue
		}
		w.mu.Lock()
		if w.leader != nil || w.stopped {
			w.mu.Unlock()
			<-wk.wake
			continue
		}
		select { // a wake-up already routed: look again first
		case <-wk.wake:
			w.mu.Unlock()
			continue
		default:
		}
		w.leader = wk
		w.leads++
		w.round()
		w.leader = nil
		if w.stopped {
			w.closePollLocked()
		} else {
			// requests it read are not its to answer: an idle thread is woken for them
			if p := len(w.ready) - w.head; p > 0 && w.eager {
				w.wakeLocked(p)
			} else if p > 0 && len(w.idle) > 0 && w.woken+w.claims == 0 {
				w.wakeOneLocked()
			}
			w.armLocked() // nobody leads now
		}
		w.mu.Unlock()
	}
}

// closePollLocked closes the poller once the pool stopped and nobody leads (w.mu held).
func (w *wsgiSrv) closePollLocked() {
	if w.pp != nil && w.leader == nil {
		w.pp.Close()
	}
}

// stop: the server is released; the pool threads return from next.
func (w *wsgiSrv) stop() {
	w.mu.Lock()
	w.stopped = true
	w.timer.Stop()
	held := w.held > 0 // the timer no longer writes them: written below
	w.held = 0
	var rest []*httpserver.Request
	for _, r := range w.ready[w.head:] {
		if w.parked[r] == nil { // (the parked ones are ended by the pool threads as they leave)
			rest = append(rest, r)
		}
	}
	w.ready, w.head = nil, 0
	if w.ho != nil {
		rest = append(rest, w.stopHandoffLocked()...)
	}
	for len(w.idle) > 0 {
		w.wakeOneLocked()
	}
	if w.pp != nil {
		if w.leader != nil {
			w.pp.Interrupt() // it closes the poller when it leaves
		} else {
			w.closePollLocked()
		}
	}
	w.mu.Unlock()
	for _, r := range rest {
		r.Done(false)
	}
	if held {
		w.sv.s.Flush()
	}
	if w.ho != nil {
		<-w.ho.done // (it frees nothing: the C queue stays until the server object goes)
	}
}

// glWsgiWorkerNew: a pool thread of server wsid starts (-1: the server is released).
//
//export glWsgiWorkerNew
func glWsgiWorkerNew(wsid C.long) (rc C.long) {
	defer func() {
		if recover() != nil {
			rc = -1
		}
	}()
	ws := wsgiServers.Get(int(wsid))
	if ws == nil {
		return -1
	}
	wk := &wsgiWorker{w: ws, wake: make(chan struct{}, 1), run: make(chan struct{}, 1),
		hb: newHeadBuf(), rh: (*C.GLHead)(C.calloc(1, C.sizeof_GLHead))}
	id, _ := wsgiWorkers.Add(wk)
	wk.id = id
	if ws.ho != nil {
		ensureProcsFor(int(runningLoops.Load()) + int(handoffThreads.Add(1)))
	}
	return C.long(id)
}

// handoffThreads counts the hand-off pools' threads (GOMAXPROCS is not lowered when they
// end). A thread that adopted a request keeps a P while it runs Python, as a system
// call (wsgi.h); with fewer Ps than such threads, the next one to call into Go waits until
// the runtime's monitor takes a P back, up to 10 ms later: a generator's answers at -c10 on
// one core, 4 threads, had a p99 of 8.7 ms with 1 or 2 Ps and 0.34 ms with 4. So each pool
// thread gets a P (ensureProcsFor: and one to spare); a detached request holds none.
var handoffThreads atomic.Int32

//export glWsgiWorkerFree
func glWsgiWorkerFree(wid C.long) {
	defer func() { recover() }()
	wk := wsgiWorkers.Get(int(wid))
	if wk == nil {
		return
	}
	if wk.r != nil {
		wk.r.Done(true)
		wk.r = nil
	}
	if wk.w.ho != nil {
		handoffThreads.Add(-1)
	}
	wk.hb.free()
	C.free(unsafe.Pointer(wk.rh))
	wk.rh = nil
	C.free(wk.rbuf)
	C.free(unsafe.Pointer(wk.emsg))
	wk.rbuf, wk.emsg = nil, nil
	wsgiWorkers.Del(int(wid))
}

func worker(wid C.long, gen C.long) *wsgiWorker {
	wk := wsgiWorkers.Get(int(wid))
	if wk == nil || wk.r == nil || wk.gen != int64(gen) {
		return nil
	}
	return wk
}

// glWsgiNext (GIL released) ends the thread's request (finish 1: answered, 2: the
// application failed) and waits for the next one: its head, or NULL when the pool stops or,
// *claim set, when a request is ready but other pool threads run the application (GIL
// builds): the thread takes the GIL, then the request with glWsgiClaim, so that no request
// waits on a thread that waits for the GIL.
//
//export glWsgiNext
func glWsgiNext(wid C.long, finish C.int, gen *C.long, claim *C.int) (h *C.GLHead) {
	defer recoverHead(&h)
	wk := wsgiWorkers.Get(int(wid))
	if wk == nil {
		return nil
	}
	w := wk.w
	busy := wk.end(finish)
	if busy == 1 { // its answer, with those held (w.held may then say more: a write comes early)
		w.sv.s.Flush()
	}
	w.mu.Lock()
	w.busy -= busy
	for !w.stopped {
		if w.head < len(w.ready) {
			if w.eager || w.busy+w.claims == 0 {
				return wk.takeLocked(gen) // nobody else runs Python for the pool
			}
			if w.claims == 0 {
				w.claims++
				w.mu.Unlock()
				*claim = 1
				return nil
			}
			// another thread is taking the GIL for the ready requests: it takes them in
			// turn (the timer wakes this one if the pool stalls)
			w.armLocked()
		} else if w.pp != nil && w.leader == nil {
			// lead: wait in the poller, handle what came, then answer the first request
			w.leader, w.idleLead = wk, true
			w.leads++
			for w.head == len(w.ready) && !w.stopped {
				w.round()
			}
			w.idleLead = false
			if w.stopped {
				w.leader = nil
				w.closePollLocked()
				break
			}
			w.vacateLocked(len(w.ready) - w.head - 1)
			continue
		}
		if w.leader == w.bk {
			w.kickLocked() // the backup leaves the lead to this thread
		}
		w.idle = append(w.idle, wk)
		w.mu.Unlock()
		<-wk.run
		w.mu.Lock()
		w.woken--
	}
	// the pool stopped: each thread, as it leaves, resumes the parked responses left (their
	// connections are gone: the response ends, its iterable's close() is called)
	for r, p := range w.parked {
		delete(w.parked, r)
		return wk.attachLocked(r, p.rec, gen)
	}
	w.mu.Unlock()
	return nil
}

// glWsgiTake (GIL held, non-blocking) is glWsgiNext's quick half, called first when a
// request ends: it ends the thread's request (finish as glWsgiNext's) and takes the first
// ready request at once, keeping the GIL (no release and take of the GIL, one call into Go
// per request fewer), when the thread may: free-threaded always, with the GIL when no other
// pool thread may want the GIL (none busy, woken or claiming: the rule glWsgiNext takes by,
// stricter; a thread leading the poller wants it only once it took a request, which it then
// finds taken). NULL: none taken (none ready, another thread may want the GIL, the pool
// stopped); the thread calls glWsgiNext, GIL released, to wait as before (its request is
// ended: wk.r is nil). Fairness: a thread that keeps the GIL from one request to the next
// runs the application's Python in between, where CPython drops the GIL after its switch
// interval when another thread asks for it (the loop thread, a thread of the application,
// a pool thread back from I/O), as it would within one long request.
//
//export glWsgiTake
func glWsgiTake(wid C.long, finish C.int, gen *C.long) (h *C.GLHead) {
	defer recoverHead(&h)
	wk := wsgiWorkers.Get(int(wid))
	if wk == nil {
		return nil
	}
	return wk.endTake(finish, gen)
}

// endTake ends wk's request (finish 1: answered, 2: failed; 0 or none: nothing to end) and
// takes the first ready request if wk may now (glWsgiTake's rule): its head, or NULL.
//
// The answer it ended is written now, or, when it takes the next request at once and more
// are ready after that one, with the answers of the requests it takes after: a run of
// answers leaves together (as a server loop writes what one turn of it made; bjoern writes
// its answers one turn later), so that their clients, woken by the first, find the others
// without a wake-up each (on loopback, a wake-up is the writer's CPU time: 4-6% of a Flask
// request's CPU under load, measured). Bounds: maxHeld answers, the first held maxHeldFor,
// held only after a quick request (quickApp: a slow application's answers are not held up);
// the run is written before the last ready request is taken (its clients' next requests
// then arrive before the thread next reads: written with the last one, they missed that
// read, and waited a round more: p99 +40%, measured), by any other send of the thread, and
// by the progress timer (armed here) if the thread does not come back (its application
// blocked).
func (wk *wsgiWorker) endTake(finish C.int, gen *C.long) *C.GLHead {
	w := wk.w
	busy := wk.end(finish)
	w.mu.Lock()
	w.busy -= busy
	take := !w.stopped && w.head < len(w.ready) && (w.eager || w.busy+w.woken+w.claims == 0)
	if take && busy == 1 && w.head+1 < len(w.ready) && w.held < maxHeld && wk.mayHold() {
		w.held++
		w.armLocked() // the writer if the thread does not come back
		return wk.takeLocked(gen)
	}
	flush := busy == 1 || w.held > 0
	w.held = 0
	var h *C.GLHead
	if take {
		h = wk.takeLocked(gen)
	} else {
		w.mu.Unlock()
	}
	if flush {
		w.sv.s.Flush()
	}
	return h
}

// maxHeld, maxHeldFor: how many answers a thread that takes request after request may
// hold before it writes them, and for how long the first; quickApp: an answer is held only
// if its request took less (from its take to its end: the next one, held up by it, likely
// takes as long; a slower application's answers leave one by one) (endTake).
const (
	maxHeld    = 16
	maxHeldFor = 2 * time.Millisecond
	quickApp   = time.Millisecond
)

// mayHold: wk's request, ending, was quick and the run held so far is young (w.mu held;
// the first answer of a run sets its start).
func (wk *wsgiWorker) mayHold() bool {
	w := wk.w
	now := time.Now()
	if now.Sub(wk.takenAt) >= quickApp || (w.held > 0 && now.Sub(w.heldAt) >= maxHeldFor) {
		return false
	}
	if w.held == 0 {
		w.heldAt = now
	}
	return true
}

// end ends wk's request (finish 1: answered, 2: the application failed), its output not yet
// written (the caller flushes): 1, or 0 if there was none to end (finish 0, or ended already).
func (wk *wsgiWorker) end(finish C.int) int {
	r := wk.r
	if r == nil || finish == 0 {
		return 0
	}
	wk.r = nil
	r.Done(finish == 2)
	return 1
}

// glWsgiClaim (GIL held: the thread glWsgiNext told to claim) takes the first ready
// request: its head, or NULL if there is none any more (or the pool stopped).
//
//export glWsgiClaim
func glWsgiClaim(wid C.long, gen *C.long) (h *C.GLHead) {
	defer recoverHead(&h)
	wk := wsgiWorkers.Get(int(wid))
	if wk == nil {
		return nil
	}
	w := wk.w
	w.mu.Lock()
	w.claims--
	if w.stopped || w.head == len(w.ready) {
		w.mu.Unlock()
		return nil
	}
	return wk.takeLocked(gen)
}

// recoverHead: a panic ends glWsgiNext or glWsgiClaim with no request.
func recoverHead(h **C.GLHead) {
	if recover() != nil {
		*h = nil
	}
}

// takeLocked takes the first ready request for wk (w.mu held, released after).
func (wk *wsgiWorker) takeLocked(gen *C.long) *C.GLHead {
	w := wk.w
	r := w.ready[w.head]
	w.ready[w.head] = nil
	w.head++
	if w.head == len(w.ready) {
		w.ready, w.head = w.ready[:0], 0
	}
	var rec unsafe.Pointer
	if len(w.parked) > 0 {
		if p := w.parked[r]; p != nil { // a parked response to resume
			delete(w.parked, r)
			rec = p.rec
		}
	}
	return wk.attachLocked(r, rec, gen)
}

// attachLocked makes r wk's request (w.mu held, released after): its head, or, rec not
// nil, the head that resumes r's parked response (rec).
func (wk *wsgiWorker) attachLocked(r *httpserver.Request, rec unsafe.Pointer, gen *C.long) *C.GLHead {
	w := wk.w
	r.Tag = unsafe.Pointer(wk)
	w.busy++
	w.taken++
	w.mu.Unlock()
	wk.takenAt = time.Now()
	select { // a wake-up left from the previous request
	case <-wk.wake:
	default:
	}
	wk.r = r
	wk.gen++
	*gen = C.long(wk.gen)
	if rec != nil {
		wk.rh.resume = rec
		return wk.rh
	}
	return wk.hb.fill(r, nil)
}

// glWsgiPark (GIL held) parks wk's response, whose last send found the output over its
// bound (GL_WSGI_PAUSED), instead of waiting for the socket: Go keeps rec (wsgi.c's record
// of the response) until an EvWake of the request (the output drained, the client went
// away) puts it on the ready list, where any pool thread takes it as it takes a request
// (takeLocked: a head whose resume is rec); the thread is free now (its request detached:
// its next glWsgiNext ends nothing). GL_OK: parked (Go has rec); GL_WSGI_RELEASE: the pool
// stopped (not parked: the thread waits, glWsgiSendWait); GL_ERR_GONE: no such request.
// A response is resumed by one thread at a time: it is on the ready list once (queued)
// and leaves it to one thread. Its connection's next request (HTTP/1.1 keep-alive,
// pipelining) waits for it as for any response not done. turn: the response had its turn
// (wsgi.c's GL_WSGI_TURN): parked only if requests wait for a thread, on the ready list at
// once, behind them (GL_WSGI_RELEASE: none waits, not parked).
//
//export glWsgiPark
func glWsgiPark(wid, gen C.long, rec unsafe.Pointer, turn C.int) (rc C.int) {
	defer wsgiRecover(wid, &rc)
	wk := worker(wid, gen)
	if wk == nil {
		return C.GL_ERR_GONE
	}
	w, r := wk.w, wk.r
	w.mu.Lock()
	if w.stopped || (turn != 0 && !w.waitingLocked()) {
		w.mu.Unlock()
		return C.GL_WSGI_RELEASE
	}
	if w.parked == nil {
		w.parked = make(map[*httpserver.Request]*wsgiPark)
	}
	p := &wsgiPark{rec: rec, queued: turn != 0}
	w.parked[r] = p
	r.Tag = nil // its EvWakes now find it in w.parked (routeLocked)
	wk.r = nil
	w.busy--
	if turn != 0 {
		w.ready = append(w.ready, r)
		if w.ho != nil {
			w.dispatchLocked()
		}
		w.mu.Unlock()
		return C.GL_OK
	}
	w.mu.Unlock()
	// a wake-up routed to wk before its Tag changed is lost to it: look at the output now
	// (not ready: SendReady asks for the EvWake that will find it parked)
	if ok, _ := r.SendReady(); ok {
		w.mu.Lock()
		if w.parked[r] == p && !p.queued && !w.stopped {
			p.queued = true
			w.ready = append(w.ready, r) // (this thread takes it, or another: glWsgiNext)
			if w.ho != nil {
				w.dispatchLocked()
			}
		}
		w.mu.Unlock()
	}
	return C.GL_OK
}

// glWsgiWaiting (GIL held): do requests (or resumed responses) wait for a pool thread?
//
//export glWsgiWaiting
func glWsgiWaiting(wid, gen C.long) (rc C.int) {
	defer func() {
		if recover() != nil {
			rc = 0
		}
	}()
	wk := worker(wid, gen)
	if wk == nil {
		return 0
	}
	w := wk.w
	w.mu.Lock()
	waiting := w.waitingLocked()
	w.mu.Unlock()
	return cbool(waiting)
}

// waitingLocked: requests (or resumed responses) wait for a pool thread (w.mu held): on the
// ready list, or in a hand-off pool's queue.
func (w *wsgiSrv) waitingLocked() bool {
	if w.ho != nil {
		return C.gl_wq_pending(w.ho.q) != 0
	}
	return w.head < len(w.ready)
}

// glWsgiReady (GIL held) looks at the output of the response the thread resumes: GL_OK
// (under its bound), GL_WSGI_PAUSED (still over it: a wake-up for something else; parked
// again), GL_ERR_DISCONNECTED (the client went away, or the pool stopped: the response
// ends) or GL_ERR_GONE.
//
//export glWsgiReady
func glWsgiReady(wid, gen C.long) (rc C.int) {
	defer wsgiRecover(wid, &rc)
	wk := worker(wid, gen)
	if wk == nil {
		return C.GL_ERR_GONE
	}
	w := wk.w
	w.mu.Lock()
	stopped := w.stopped
	w.mu.Unlock()
	ok, gone := wk.r.SendReady()
	switch {
	case gone != nil || stopped:
		return C.GL_ERR_DISCONNECTED
	case !ok:
		return C.GL_WSGI_PAUSED
	}
	return C.GL_OK
}

// glWsgiRecv takes the body received so far into the thread's C memory (*p, *n) and says
// what it found (GL_RECV_*); wait: block (GIL released) until there is something, else
// GL_RECV_WAIT. GL_ERR_GONE: the request is over.
//
//export glWsgiRecv
func glWsgiRecv(wid, gen C.long, wait C.int, p **C.char, n *C.Py_ssize_t) (rc C.int) {
	defer func() {
		if recover() != nil {
			rc = C.GL_ERR_GONE
		}
	}()
	var b []byte
	wk, rc := wsgiRecv(wid, gen, wait, func(r *httpserver.Request) (st httpserver.RecvState) {
		b, st = r.Receive()
		return st
	})
	if wk == nil {
		return rc
	}
	if len(b) > wk.rcap {
		C.free(wk.rbuf)
		wk.rcap = max(len(b), 2*wk.rcap, 16*1024)
		wk.rbuf = C.malloc(C.size_t(wk.rcap))
	}
	if len(b) > 0 {
		copy(unsafe.Slice((*byte)(wk.rbuf), len(b)), b)
	}
	wk.r.Release(b)
	*p, *n = (*C.char)(wk.rbuf), C.Py_ssize_t(len(b))
	return rc
}

// glWsgiRecvTo is glWsgiRecv copying into the caller's memory: up to room bytes at dst
// (*n of them); what does not fit stays for the next call (GL_RECV_BODY then). wsgi.input
// reads a body whose length it knows into the bytes object it returns: one copy.
//
//export glWsgiRecvTo
func glWsgiRecvTo(wid, gen C.long, wait C.int, dst *C.char, room C.Py_ssize_t, n *C.Py_ssize_t) (rc C.int) {
	defer func() {
		if recover() != nil {
			rc = C.GL_ERR_GONE
		}
	}()
	d := unsafe.Slice((*byte)(unsafe.Pointer(dst)), int(room))
	k := 0
	_, rc = wsgiRecv(wid, gen, wait, func(r *httpserver.Request) (st httpserver.RecvState) {
		k, st = r.ReceiveTo(d)
		return st
	})
	*n = C.Py_ssize_t(k)
	return rc
}

// wsgiRecv is glWsgiRecv's and glWsgiRecvTo's receive (recv: the request's Receive or
// ReceiveTo), waiting for something if wait: the worker when recv took something (rc its
// GL_RECV_BODY or GL_RECV_LAST), else nil and rc GL_RECV_WAIT, GL_RECV_DISCONNECT or
// GL_ERR_GONE.
func wsgiRecv(wid, gen C.long, wait C.int, recv func(*httpserver.Request) httpserver.RecvState) (*wsgiWorker, C.int) {
	wk := worker(wid, gen)
	if wk == nil {
		return nil, C.GL_ERR_GONE
	}
	st := recv(wk.r)
	if st == httpserver.RecvWait {
		if wait == 0 {
			return nil, C.GL_RECV_WAIT
		}
		wk.await(func() bool {
			st = recv(wk.r)
			return st != httpserver.RecvWait
		})
	}
	if st != httpserver.RecvBody && st != httpserver.RecvLast {
		return nil, C.int(st)
	}
	return wk, C.int(st)
}

// glWsgiSend starts the response if status > 0 (its header lines hdr), sends a body part
// (the last one unless more), writes the output if flush, and waits while the output is
// over its bound: GL_OK, GL_ERR_DISCONNECTED, GL_ERR_GONE or
// GL_ERR_RUNTIME (the message: glWsgiError). wait 0 (a small part, called with the
// GIL held: no release and take of the GIL for a send that does not block): instead of
// waiting it returns GL_WSGI_PAUSED (the part was taken), and glWsgiSendWait, GIL
// released, does the wait; and with the GIL, when another pool thread may want it (one
// busy or woken, or leading the poller), it returns GL_WSGI_RELEASE at once, nothing
// done: wsgi_response.c calls again with the GIL released, so that thread does not wait for the
// GIL through this write (nor does one claiming a ready request: glWsgiClaim). Sent with
// wait 0 when no request was ready (with the GIL), it returns GL_WSGI_SENT_IDLE for
// GL_OK: wsgi.c then skips glWsgiTake at the request's end (a call that would find
// none, at low load). wait 2 (GIL released; an iterable's part, which wsgi.c parks
// rather than wait: glWsgiPark): GL_WSGI_PAUSED instead of a wait.
//
//export glWsgiSend
func glWsgiSend(wid, gen C.long, status C.int, hdr *C.char, hn C.Py_ssize_t, body *C.char, n C.Py_ssize_t,
	more, flush, wait C.int) (rc C.int) {
	defer wsgiRecover(wid, &rc)
	wk := worker(wid, gen)
	if wk == nil {
		return C.GL_ERR_GONE
	}
	ready := true
	if wait == 0 {
		var alone bool
		if alone, ready = wk.alone(); !alone {
			return C.GL_WSGI_RELEASE
		}
	}
	flags, err := wk.put(status, hdr, hn, body, n, more != 0)
	if err == nil && wait != 1 && flags&httpserver.SendPaused != 0 {
		if flush != 0 {
			wk.w.sv.s.Flush()
		}
		return C.GL_WSGI_PAUSED
	}
	if rc = wk.sent(flags, err, flush != 0); rc == C.GL_OK && !ready {
		return C.GL_WSGI_SENT_IDLE
	}
	return rc
}

// put starts wk's response if status > 0 (its header lines hdr) and sends a body part (the
// last one unless more): Send's flags, or the error.
func (wk *wsgiWorker) put(status C.int, hdr *C.char, hn C.Py_ssize_t, body *C.char, n C.Py_ssize_t,
	more bool) (int, error) {
	r := wk.r
	if status > 0 {
		if err := wsgiStart(r, int(status), bytesFromC(hdr, hn)); err != nil {
			return 0, err
		}
	}
	return r.Send(bytesFromC(body, n), more)
}

// alone: wk, which holds the GIL, may keep it through a send (free-threaded: always; with
// the GIL while no other pool thread may want it: none busy, woken or claiming a request,
// nor leading the poller); and whether a request is ready (free-threaded: not looked at,
// true).
func (wk *wsgiWorker) alone() (alone, ready bool) {
	w := wk.w
	if w.eager {
		return true, true
	}
	w.mu.Lock()
	alone = w.busy <= 1 && w.woken+w.claims == 0 && (w.leader == nil || w.leader == w.bk)
	ready = w.head < len(w.ready)
	w.mu.Unlock()
	return alone, ready
}

// glWsgiSendEnd (GIL held) is glWsgiSend of a response's last part (more 0, flushed, a
// small part: wait 0) when the application is done with the request (a list or tuple
// answer: no close(), nothing after it can fail), followed by glWsgiTake (finish 1): the
// part sent, the request ended and the next ready one taken in one call into Go. The part
// sent (GL_OK), *next is the head of the request taken, or NULL (none taken: the
// thread waits in glWsgiNext, its request ended). Otherwise as glWsgiSend with wait 0,
// the request not ended: GL_WSGI_RELEASE (nothing done), GL_WSGI_PAUSED (the part taken,
// the output over its bound: glWsgiSendWait) or an error.
//
//export glWsgiSendEnd
func glWsgiSendEnd(wid, gen C.long, status C.int, hdr *C.char, hn C.Py_ssize_t, body *C.char, n C.Py_ssize_t,
	next **C.GLHead, ngen *C.long) (rc C.int) {
	defer wsgiRecover(wid, &rc)
	wk := worker(wid, gen)
	if wk == nil {
		return C.GL_ERR_GONE
	}
	if alone, _ := wk.alone(); !alone {
		return C.GL_WSGI_RELEASE
	}
	flags, err := wk.put(status, hdr, hn, body, n, false)
	if err != nil {
		return wk.err(err)
	}
	if flags&httpserver.SendPaused != 0 {
		wk.w.sv.s.Flush()
		return C.GL_WSGI_PAUSED
	}
	*next = wk.endTake(1, ngen)
	return C.GL_OK
}

// glWsgiSendWait (GIL released) waits, after glWsgiSend's GL_WSGI_PAUSED, until the
// output is under its bound: GL_OK, GL_ERR_DISCONNECTED or GL_ERR_GONE.
//
//export glWsgiSendWait
func glWsgiSendWait(wid, gen C.long) (rc C.int) {
	defer wsgiRecover(wid, &rc)
	wk := worker(wid, gen)
	if wk == nil {
		return C.GL_ERR_GONE
	}
	return wk.sent(httpserver.SendPaused, nil, false)
}

// glWsgiSendFD (GIL released) is glWsgiSend of count bytes (-1: to the end) of the regular
// file open as fd, from offset (wsgi.file_wrapper): the last part of the response, sent
// with sendfile(2) on plain HTTP/1.1 (httpserver.Request.SendFD).
//
//export glWsgiSendFD
func glWsgiSendFD(wid, gen C.long, status C.int, hdr *C.char, hn C.Py_ssize_t, fd C.int, offset, count C.longlong) (rc C.int) {
	defer wsgiRecover(wid, &rc)
	wk := worker(wid, gen)
	if wk == nil {
		return C.GL_ERR_GONE
	}
	var st syscall.Stat_t
	if syscall.Fstat(int(fd), &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return C.GL_WSGI_NOT_FILE
	}
	r := wk.r
	if status > 0 {
		if err := wsgiStart(r, int(status), bytesFromC(hdr, hn)); err != nil {
			return wk.err(err)
		}
	}
	flags, _, err := r.SendFD(int(fd), int64(offset), int64(count), false)
	// the response's last part, sent from the descriptor (nothing more is queued): the
	// thread does not wait for the socket (the minimum response rate drops a client that
	// does not read)
	return wk.sent(flags&^httpserver.SendPaused, err, true)
}

// wsgiStart starts r's response from start_response's head (wsgi_response.c): the status's reason
// phrase and "\r\n", then the header lines.
func wsgiStart(r *httpserver.Request, status int, head []byte) error {
	i := bytes.IndexByte(head, '\n')
	if i < 1 {
		return r.Start(status, head)
	}
	return r.StartReason(status, head[:i-1], head[i+1:])
}

func (wk *wsgiWorker) sent(flags int, err error, flush bool) C.int {
	if err != nil {
		return wk.err(err)
	}
	if flush {
		wk.w.sv.s.Flush()
	}
	if flags&httpserver.SendPaused == 0 {
		return C.GL_OK
	}
	var gone error
	wk.await(func() bool {
		var ok bool
		ok, gone = wk.r.SendReady()
		return ok || gone != nil
	})
	if gone != nil {
		return C.GL_ERR_DISCONNECTED
	}
	return C.GL_OK
}

// sentOrPaused is sent, or, park (an iterable's part, which wsgi.c parks rather than wait:
// glWsgiPark), GL_WSGI_PAUSED instead of a wait for the socket.
func (wk *wsgiWorker) sentOrPaused(flags int, err error, flush, park bool) C.int {
	if park && err == nil && flags&httpserver.SendPaused != 0 {
		if flush {
			wk.w.sv.s.Flush()
		}
		return C.GL_WSGI_PAUSED
	}
	return wk.sent(flags, err, flush)
}

func (wk *wsgiWorker) err(err error) C.int {
	if err == httpserver.ErrDisconnected {
		return C.GL_ERR_DISCONNECTED
	}
	C.free(unsafe.Pointer(wk.emsg))
	wk.emsg = C.CString(err.Error())
	return C.GL_ERR_RUNTIME
}

// wsgiRecover turns a panic of a call without the GIL into GL_ERR_RUNTIME.
func wsgiRecover(wid C.long, rc *C.int) {
	if p := recover(); p != nil {
		if wk := wsgiWorkers.Get(int(wid)); wk != nil {
			C.free(unsafe.Pointer(wk.emsg))
			wk.emsg = C.CString("goloop: internal error: " + anyString(p))
		}
		*rc = C.GL_ERR_RUNTIME
	}
}

func anyString(p any) string {
	switch v := p.(type) {
	case error:
		return v.Error()
	case string:
		return v
	}
	return "panic"
}

// glWsgiError is the message of the thread's last GL_ERR_RUNTIME (C memory, valid
// until its next call), or NULL.
//
//export glWsgiError
func glWsgiError(wid C.long) *C.char {
	if wk := wsgiWorkers.Get(int(wid)); wk != nil {
		return wk.emsg
	}
	return nil
}
