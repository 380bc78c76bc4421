package main

// The loop (the package's parts: doc.go): the Go state behind one goloop.Loop, its
// run_forever iterations (runOnce), timers, add_reader/add_writer and the descriptor table.
// Every exported function runs on a Python thread holding the GIL (on a free-threaded
// Python: attached to the interpreter). A loop's state belongs to the thread running it;
// what other threads reach is safe without the GIL: the id tables of loops, transports,
// parsers and servers (goloop/idtable), the loop's inbox (call_soon_threadsafe,
// loop_core.c) and its poller's Wake. Parts riding on the loop (goloop serve's servers)
// register hooks (loopHook) that runOnce calls at fixed points of an iteration.

/*
#include "gl.h"
#include <stdlib.h>
*/
import "C"

import (
	"math"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
	_ "unsafe" // go:linkname

	"github.com/goloop/goloop/goloop/idtable"
	"github.com/goloop/goloop/goloop/poller"
	"github.com/goloop/goloop/goloop/sched"
	"golang.org/x/sys/unix"
)

func main() {}

//go:linkname nanotime runtime.nanotime
func nanotime() int64

// monotonic is the loop's clock: CLOCK_MONOTONIC in seconds, the clock of time.monotonic().
func monotonic() float64 { return float64(nanotime()) * 1e-9 }

const (
	modeSoon       = C.GL_MODE_SOON // gl.h: the values loop_core.c passes to glSchedule
	modeThreadsafe = C.GL_MODE_THREADSAFE
	modeTimer      = C.GL_MODE_TIMER

	maxSelectTimeout       = 24 * 3600.0 // asyncio's MAXIMUM_SELECT_TIMEOUT
	minScheduledTimers     = 100         // asyncio's _MIN_SCHEDULED_TIMER_HANDLES
	minCancelledTimersFrac = 0.5         // asyncio's _MIN_CANCELLED_TIMER_HANDLES_FRACTION
)

type pyObj = *C.PyObject

// fdEntry is what the loop watches on one descriptor: add_reader/add_writer handles.
type fdEntry struct {
	reader, writer pyObj
	conn           *conn  // a transport attached to the descriptor
	registered     uint32 // interest registered with epoll: union of the handles' and the transport's
	idle           bool   // still registered for reading, though nothing wants it (see sync)
	oneshot        uint32 // Readable/Writable: that handle is dropped once it fires (_wait_fd)

	// obj is the object the registration was made with (a strong reference, dropped with the
	// last handle), as asyncio's SelectorKey.fileobj: the object of the add_reader/add_writer
	// that found no handle on the descriptor. remove_reader(sock) after sock.close() finds
	// the registration by it (glFdOf). nil for a descriptor number (an int) and _wait_fd.
	obj pyObj

	// drv is the Go handler of a descriptor goloop serve's loop driver owns (asgi.go's
	// drvPoller: listeners, connections, its timer); such an entry has nothing else.
	drv func(events uint32)
}

// fdTable maps descriptors to their entries: a slice indexed by fd (descriptors are small
// integers), cheaper than a map on the per-event path.
type fdTable struct {
	s []*fdEntry
}

func (t *fdTable) get(fd int) *fdEntry {
	if uint(fd) < uint(len(t.s)) {
		return t.s[fd]
	}
	return nil
}

func (t *fdTable) set(fd int, e *fdEntry) {
	if fd >= len(t.s) {
		ns := make([]*fdEntry, max(fd+1, 2*len(t.s), 64))
		copy(ns, t.s)
		t.s = ns
	}
	t.s[fd] = e
}

func (t *fdTable) del(fd int) {
	if uint(fd) < uint(len(t.s)) {
		t.s[fd] = nil
	}
}

// each calls f for every entry until f returns false, and reports whether it stopped early.
func (t *fdTable) each(f func(fd int, e *fdEntry) bool) bool {
	for fd, e := range t.s {
		if e != nil && !f(fd, e) {
			return true
		}
	}
	return false
}

// sync registers with epoll the interest fd needs now (add_reader/add_writer handles and
// the transport's reading/writing), and forgets the entry when nothing is left.
func (l *loop) sync(fd int, e *fdEntry) error {
	var want uint32
	if e.reader != nil {
		want |= poller.Readable
	}
	if e.writer != nil {
		want |= poller.Writable
	}
	if e.conn != nil {
		want |= e.conn.want()
	}
	// The registration's object goes with its last handle; released last (a socket's
	// finalizer may run), once the entry is consistent.
	var obj pyObj
	if e.reader == nil && e.writer == nil && e.obj != nil {
		obj, e.obj = e.obj, nil
	}
	var err error
	switch {
	case want == 0 && e.registered == poller.Readable && e.conn == nil:
		// Lazy removal of read interest: sock_recv() and friends add and remove a reader
		// around every wait, two epoll_ctl calls each time. The registration stays; an event
		// that finds nobody interested removes it then (dispatch), and the next add
		// revalidates it with one EPOLL_CTL_MOD, which re-adds a descriptor that was
		// closed and reused meanwhile. Write interest is dropped at once: a writable socket
		// would report itself on every poll.
		e.idle = true
		if obj != nil {
			C.gl_decref(obj)
		}
		return nil
	case e.idle:
		e.idle = false
		if want == 0 {
			err = l.poll.Del(fd)
		} else {
			err = l.poll.Mod(fd, want)
		}
		if err == nil {
			e.registered = want
		}
	case want != e.registered:
		switch {
		case e.registered == 0:
			err = l.poll.Add(fd, want)
		case want == 0:
			err = l.poll.Del(fd)
		default:
			err = l.poll.Mod(fd, want)
		}
		if err == nil {
			e.registered = want
		}
	}
	if e.reader == nil && e.writer == nil && e.conn == nil && e.registered == 0 {
		l.fds.del(fd)
	}
	if obj != nil {
		C.gl_decref(obj)
	}
	return err
}

// claim readies entry e of fd for a new registration: an add_reader/add_writer or _wait_fd
// handle (made with obj, nil for a descriptor number; bit: the interest it adds) or a
// transport (bit 0). The registrations already on e may be stale: their socket was closed
// without remove_reader/remove_writer (epoll forgets a closed descriptor without a word)
// and the number now names the new socket. Their kernel registration is gone then, and
// sync, which calls epoll_ctl only when the interest changes, would never arm the new
// socket; an interest it did change would re-add the number with the old callbacks on it,
// called for the new socket's events. So unless e is idle (sync's MOD re-adds it: nothing
// is on it), has nothing registered (sync adds) or was made with this same object (a
// socket that is not closed: fileno() gave fd), the kernel is asked: one EPOLL_CTL_MOD,
// with the interest the new registration wants, which sync then has nothing left to do
// for. If the kernel no longer knows fd, every handle on e is dropped (cancelled) and sync
// adds fd afresh. A transport's registration is left alone (it is the transport's to end;
// asyncio refuses add_reader on its descriptor until it closes).
func (l *loop) claim(fd int, e *fdEntry, obj pyObj, bit uint32) {
	if e.idle || e.registered == 0 || (obj != nil && obj == e.obj) {
		return
	}
	gone, err := l.poll.Check(fd, e.registered|bit)
	if err != nil { // EBADF (fd is not open): what follows raises it as before
		return
	}
	if !gone {
		e.registered |= bit
		return
	}
	e.registered = 0
	e.oneshot = 0
	for _, slot := range []*pyObj{&e.reader, &e.writer} {
		if h := *slot; h != nil {
			*slot = nil
			cancelHandle(h)
			C.gl_decref(h)
		}
	}
	if obj := e.obj; obj != nil {
		e.obj = nil
		C.gl_decref(obj)
	}
}

// dropIdle forgets an idle registration (an event arrived that nobody wants).
func (l *loop) dropIdle(fd int, e *fdEntry) {
	l.poll.Del(fd)
	e.idle = false
	e.registered = 0
	l.fds.del(fd)
}

// loop is the Go state behind one goloop.Loop.
type loop struct {
	self *C.GLLoop // its ready queue is C's (GLLoop.ready): readyPush, readyPop
	// The timer heap holds the handles as integers (objOf): Go's garbage collector then
	// has no pointers to scan in it, and C's call_later stages its timers (GLLoop.tstaged)
	// for drainTimers to push.
	timers sched.TimerHeap[uintptr]
	poll   *poller.Poller
	fds    fdTable

	conns map[*conn]struct{}
	dirty []*conn // connections with writes queued this iteration
	rbuf  []byte  // read buffer shared by the loop's connections (C memory)

	hooks []loopHook // parts riding on the loop (goloop serve's servers, asgi.go, wsgi.go)

	lastPoll     int64            // nanotime of the last poll
	tstate       *C.PyThreadState // the running thread's state (nil: no GIL to share)
	lastYield    int64            // nanotime of the last runtime.Gosched
	blockingWait func(epfd int, raw []unix.EpollEvent, ms int) (int, error)
	sig          C.int // PyErr_CheckSignals() after the last blocking wait
	errno        C.int
}

// loopHook is a part that rides on the loop and has work at fixed points of its iterations:
// each goloop serve server (asgi.go, wsgi.go) registers one (addHook) for as long as it exists.
// runOnce calls them only when there are some: a loop without hooks pays one length test.
type loopHook interface {
	take()       // start the work queued for the loop (iteration start; after a poll with events)
	flush()      // send the output the iteration produced (after take at the start; after the run phase)
	loopClosed() // the loop closes (the hook is already removed)
}

func (l *loop) addHook(h loopHook) { l.hooks = append(l.hooks, h) }

func (l *loop) removeHook(h loopHook) {
	for i, x := range l.hooks {
		if x == h {
			l.hooks = append(l.hooks[:i], l.hooks[i+1:]...)
			return
		}
	}
}

// takeHooks and flushHooks run each hook's part (a hook's Python code may remove hooks).
func (l *loop) takeHooks() {
	for i := 0; i < len(l.hooks); i++ {
		l.hooks[i].take()
	}
}

func (l *loop) flushHooks() {
	for _, h := range l.hooks {
		h.flush()
	}
}

// pollEvery bounds how long a loop whose ready queue never empties may go without looking
// for I/O. Below it, an iteration with callbacks already queued skips the non-blocking
// epoll_wait, which would otherwise cost a system call per iteration (a third of the time
// of a call_soon chain). While other Python threads exist the loop polls on every
// iteration anyway, with the GIL released, so they get their turn (otherThreads).
var pollEvery int64 = 20_000 // ns (scaled by scaleTimes)

// inboxBatch bounds what one iteration takes from the inbox (handles other threads
// queued): of those queued when the iteration began, at most this many. Timers and I/O
// then get their turn every iteration however fast other threads queue callbacks; a batch
// this large keeps the per-iteration costs (a lock, a non-blocking poll every 20 µs) small.
const inboxBatch = 1024

// loops maps GLLoop.id to its Go state; any thread may look a loop up.
var loops idtable.Table[loop]

func getLoop(self *C.GLLoop) *loop {
	l := loops.Get(int(self.id))
	if l == nil {
		panic("goloop: loop object without Go state")
	}
	return l
}

// runningLoops counts the loops inside run_forever, in any thread.
var (
	runningLoops atomic.Int32
	procsMu      sync.Mutex
)

// ensureProcsFor keeps a P for each running loop and one to spare. A loop thread runs Go
// code between its calls into Python; with fewer Ps than loops running at once (several
// threads of a free-threaded Python), a thread coming back from Python into Go waits until
// the runtime's monitor takes a P from another loop's thread, up to 10 ms later.
func ensureProcsFor(running int) {
	procsMu.Lock()
	defer procsMu.Unlock()
	if want := min(running+1, 256); runtime.GOMAXPROCS(0) < want {
		runtime.GOMAXPROCS(want)
	}
}

func asHandle(h pyObj) *C.GLHandle { return (*C.GLHandle)(unsafe.Pointer(h)) }

// objOf is the object whose address the timer heap keeps; ptrOf the reverse.
func objOf(p uintptr) pyObj { return *(*pyObj)(unsafe.Pointer(&p)) }
func ptrOf(h pyObj) uintptr { return uintptr(unsafe.Pointer(h)) }

// drainTimers pushes the timers C's call_later and call_at staged (GLLoop.tstaged) onto
// the heap, in order. Every use of the heap starts with it.
func (l *loop) drainTimers() {
	s := l.self
	n := int(s.ntstaged)
	if n == 0 {
		return
	}
	for _, h := range unsafe.Slice((*pyObj)(unsafe.Pointer(s.tstaged)), n) {
		l.timers.Push(float64(asHandle(h).when), ptrOf(h))
	}
	s.ntstaged = 0
}

// ensureProcs gives the runtime at least two Ps. A loop thread blocked in epoll_wait is in a
// system call holding its P; with a single P (GOMAXPROCS=1, e.g. under taskset -c 0) the
// runtime's monitor hands that P to a freshly woken thread every time the wait exceeds
// 20 µs (a context switch per idle period), and a call_soon_threadsafe from another Python
// thread waits for that hand-off. A second, idle P avoids both.
//
// It also starts the Go runtime's own poller (an epoll fd and an eventfd, made the first
// time a runtime timer is armed, e.g. by the garbage collector's scavenger) now, with the
// first loop, instead of at some later, unpredictable moment: a program counting its
// descriptors sees them appear once, here.
func ensureProcs() {
	scaleTimes()
	if runtime.GOMAXPROCS(0) < 2 {
		runtime.GOMAXPROCS(2)
	}
	time.Sleep(time.Microsecond) // arms a runtime timer: the runtime poller starts here
}

//export glLoopInit
func glLoopInit(self *C.GLLoop) (rc C.int) {
	defer recoverInt(&rc)
	procsOnce.Do(ensureProcs)
	// The wake-up's eventfd and flag are C's: other threads write them without calling Go.
	p, err := poller.NewSharedWake(512, int(self.wake_fd), (*atomic.Int32)(unsafe.Pointer(&self.wake_pending)))
	if err != nil {
		raiseErr(err)
		return -1
	}
	l := &loop{self: self, poll: p, conns: make(map[*conn]struct{})}
	l.rbuf = unsafe.Slice((*byte)(C.malloc(readBufSize)), readBufSize)
	l.blockingWait = l.cBlockingWait // one method value per loop, not a closure per wait
	id, _ := loops.Add(l)
	self.id = C.long(id)
	return 0
}

var procsOnce sync.Once

//export glLoopFree
func glLoopFree(self *C.GLLoop) {
	defer func() { recover() }()
	l := getLoop(self)
	l.release()
	loops.Del(int(self.id))
	self.id = -1
}

// readyRing is the ready queue's ring (GLLoop.ready), C memory.
func (l *loop) readyRing() []pyObj {
	s := l.self
	return unsafe.Slice((*pyObj)(unsafe.Pointer(s.ready)), int(s.ready_cap))
}

// readyPush appends h (taking over one reference) to the ready queue, in place: C's
// call_soon appends to the same ring, so handles keep the order in which they were
// scheduled, whichever side queued them.
func (l *loop) readyPush(h pyObj) {
	s := l.self
	if s.ready_len == s.ready_cap && C.gl_ready_grow(s) < 0 {
		C.PyErr_Clear()
		panic("goloop: out of memory for the ready queue")
	}
	l.readyRing()[(s.ready_head+s.ready_len)&(s.ready_cap-1)] = h
	s.ready_len++
}

// readyPop takes the handle at the head of the ready queue (which must not be empty).
func (l *loop) readyPop() pyObj {
	s := l.self
	h := l.readyRing()[s.ready_head]
	s.ready_head = (s.ready_head + 1) & (s.ready_cap - 1)
	s.ready_len--
	return h
}

func (l *loop) readyLen() int { return int(l.self.ready_len) }

// endFastRun makes the run phase return to Go after its current iteration (gl.h,
// run_until): something Go must do between iterations has appeared.
func (l *loop) endFastRun() { l.self.run_until = 0 }

// inboxLen is the number of handles waiting in the inbox (any thread may be adding more).
func (l *loop) inboxLen() int {
	return int(atomic.LoadInt64((*int64)(unsafe.Pointer(&l.self.inbox_n))))
}

// takeInbox moves up to max handles from the inbox to the ready queue, in their order,
// after the staged ones. A TimerHandle in the inbox was made by call_later or call_at in
// another thread: it goes to the timer heap. False means an exception is set.
func (l *loop) takeInbox(max int) bool {
	if l.inboxLen() == 0 {
		return true
	}
	var out **C.PyObject
	n := int(C.gl_inbox_take(l.self, C.Py_ssize_t(max), &out))
	if n < 0 {
		return false
	}
	timerType := C.GL_TimerHandleType
	for _, h := range unsafe.Slice((*pyObj)(unsafe.Pointer(out)), n) {
		if h.ob_type == timerType { // Py_IS_TYPE, without a call into C per handle
			hh := asHandle(h)
			if hh.cancelled != 0 {
				C.gl_decref(h)
				continue
			}
			hh.scheduled = 1
			l.drainTimers()
			l.timers.Push(float64(hh.when), ptrOf(h))
			continue
		}
		l.readyPush(h)
	}
	return true
}

func (l *loop) checkClosed() bool {
	if l.self.closed != 0 {
		raise(C.PyExc_RuntimeError, "Event loop is closed")
		return false
	}
	return true
}

// glSchedule queues handle h (taking over one reference) on the ready queue or the timer
// heap. Only the thread running the loop calls it, or any thread while none runs it:
// module.c sends the handles of other threads through the inbox.
//
//export glSchedule
func glSchedule(self *C.GLLoop, h pyObj, mode C.int) (rc C.int) {
	defer recoverInt(&rc)
	l := getLoop(self)
	if !l.checkClosed() {
		return -1
	}
	switch mode {
	case modeSoon, modeThreadsafe:
		l.readyPush(h)
	case modeTimer:
		hh := asHandle(h)
		hh.scheduled = 1
		l.drainTimers()
		l.timers.Push(float64(hh.when), ptrOf(h))
		// a timer made by a callback of the run phase may be due before its end
		if until := l.timerDeadline(float64(hh.when)); until < int64(self.run_until) {
			self.run_until = C.int64_t(until)
		}
	}
	return 0
}

// glCheckThread is asyncio's _check_thread, done in debug mode by call_soon, call_later
// and call_at (any thread may call it).
//
//export glCheckThread
func glCheckThread(self *C.GLLoop) (rc C.int) {
	defer recoverInt(&rc)
	owner := C.ulong(atomic.LoadUint64((*uint64)(unsafe.Pointer(&self.owner))))
	if owner != 0 && C.gl_thread_ident() != owner {
		raise(C.PyExc_RuntimeError, "Non-thread-safe operation invoked on an event loop other than the current one")
		return -1
	}
	return 0
}

//export glRunCore
func glRunCore(self *C.GLLoop) (ret pyObj) {
	defer recoverObj(&ret)
	l := getLoop(self)
	if !l.checkClosed() {
		return nil
	}
	// From here this thread owns the loop: its call_soon stages without a lock, other
	// threads' handles go to the inbox. What was queued before the loop started is taken
	// whole: the bound of an iteration's batch is for handles that arrive while it runs.
	C.gl_set_owner(self, C.gl_thread_ident())
	self.running = 1
	l.tstate = C.gl_gil_tstate()
	defer func() {
		self.running = 0
		C.gl_set_owner(self, 0)
		runningLoops.Add(-1)
	}()
	if n := int(runningLoops.Add(1)); n >= runtime.GOMAXPROCS(0) {
		ensureProcsFor(n)
	}
	if !l.takeInbox(math.MaxInt32) {
		return nil
	}
	for {
		if !l.runOnce() {
			return nil
		}
		if self.stopping != 0 {
			return C.gl_none()
		}
	}
}

// otherThreads tells whether another Python thread exists that may wait for the GIL: the
// interpreter's thread states form a doubly linked list, so this thread's state has a
// neighbour iff there is another (threading's threads, executors, and foreign threads while
// they hold or wait for the GIL through PyGILState_Ensure). Two loads, no call into C.
func (l *loop) otherThreads() bool {
	ts := l.tstate
	return ts != nil && (ts.prev != nil || ts.next != nil)
}

// cBlockingWait is the epoll_wait of a blocking poll, made in C with the GIL released.
func (l *loop) cBlockingWait(epfd int, raw []unix.EpollEvent, ms int) (int, error) {
	n := C.gl_blocking_wait(C.int(epfd), unsafe.Pointer(&raw[0]), C.int(len(raw)), C.int(ms), &l.errno, &l.sig)
	if n < 0 {
		return 0, unix.Errno(l.errno)
	}
	return int(n), nil
}

func (l *loop) purgeTimers() {
	n := l.timers.Len()
	if n > minScheduledTimers && float64(l.self.timer_cancelled_count)/float64(n) > minCancelledTimersFrac {
		l.timers.Filter(func(h uintptr) bool { return asHandle(objOf(h)).cancelled == 0 }, func(h uintptr) {
			asHandle(objOf(h)).scheduled = 0
			C.gl_decref(objOf(h))
		})
		l.self.timer_cancelled_count = 0
		return
	}
	for {
		t, ok := l.timers.Peek()
		if !ok || asHandle(objOf(t.Item)).cancelled == 0 {
			return
		}
		l.timers.Pop()
		l.self.timer_cancelled_count--
		asHandle(objOf(t.Item)).scheduled = 0
		C.gl_decref(objOf(t.Item))
	}
}

// runOnce is one iteration of the loop, asyncio's _run_once: poll for I/O (blocking only if
// nothing is ready), queue the callbacks of ready descriptors and due timers, then run the
// callbacks that were ready at the start of the run phase. It returns false with a Python
// exception set when one must propagate out of run_forever.
func (l *loop) runOnce() bool {
	self := l.self
	if (len(l.dirty) > 0 || self.nwdirty > 0) && !l.flushDirty() { // writes made while the loop was not running
		return false
	}
	// Other threads' handles: those queued when the iteration began, up to inboxBatch.
	if !l.takeInbox(inboxBatch) {
		return false
	}
	if len(l.hooks) > 0 {
		// work queued for the hooks, then the output queued while the loop was not running
		// and by what they just started (a request's Task starts eagerly: what answers at
		// once is written here, or the poll would block with it unwritten)
		l.takeHooks()
		l.flushHooks()
	}
	l.drainTimers()
	l.purgeTimers()

	timeout := -1
	// The inbox is read after the ready queue: a handle queued after this check finds the
	// inbox empty and wakes the poll.
	if l.readyLen() > 0 || self.stopping != 0 || l.inboxLen() > 0 {
		timeout = 0
	} else if t, ok := l.timers.Peek(); ok {
		d := math.Min(math.Max(0, t.When-monotonic()), maxSelectTimeout)
		timeout = int(math.Ceil(d * 1e3))
	}
	var events []poller.Event
	var err error
	if timeout == 0 {
		now := nanotime()
		if l.otherThreads() {
			// Another Python thread may be waiting for the GIL: poll with the GIL released on
			// every iteration, as asyncio's loop and uvloop do, so it gets its turn now
			// rather than after the 5 ms switch interval.
			l.lastPoll = now
			events, _, err = l.poll.WaitUsing(0, l.blockingWait)
			if l.sig < 0 {
				return false
			}
		} else if now-l.lastPoll >= pollEvery || self.stopping != 0 {
			l.lastPoll = now
			events, _, err = l.poll.Wait(0)
		}
		l.yieldSometimes(now)
	} else {
		// One call into C releases the GIL around epoll_wait and then runs Python's signal
		// handlers (KeyboardInterrupt, asyncio.Runner's SIGINT) as soon as the wait ends.
		events, _, err = l.poll.WaitUsing(timeout, l.blockingWait)
		l.lastPoll = nanotime()
		if l.sig < 0 {
			return false
		}
		l.yieldSometimes(l.lastPoll)
	}
	if err != nil && err != unix.EINTR {
		raiseErr(err)
		return false
	}
	for _, ev := range events {
		if !l.dispatch(ev) {
			return false
		}
	}
	if len(events) > 0 && len(l.hooks) > 0 {
		// the events queued work for the hooks (goloop serve's loop driver read requests):
		// it starts in this iteration's run phase
		l.takeHooks()
	}

	l.drainTimers() // (the callbacks of dispatch may have made timers)
	if l.timers.Len() > 0 {
		end := monotonic() + float64(self.clock_resolution)
		for {
			t, ok := l.timers.Peek()
			if !ok || t.When >= end {
				break
			}
			l.timers.Pop()
			h := asHandle(objOf(t.Item))
			h.scheduled = 0
			if h.cancelled != 0 {
				self.timer_cancelled_count--
				C.gl_decref(objOf(t.Item))
				continue
			}
			l.readyPush(objOf(t.Item))
		}
	}

	ntodo := l.readyLen()
	// One call into C runs the iteration's handles, and the iterations after it while
	// nothing but ready handles needs the loop: until the next poll, timer or yield.
	// In debug mode, which asyncio looks at before each handle, Go runs each handle
	// through _run_handle_debug (the slow-callback warning); C hands back the rest of its
	// iteration when a callback turns debug mode on.
	self.run_until = 0
	if ntodo > 0 && self.debug == 0 && len(l.hooks) == 0 && len(l.dirty) == 0 && !l.otherThreads() {
		until := min(l.lastPoll+pollEvery, l.lastYield+yieldEvery)
		if t, ok := l.timers.Peek(); ok {
			until = min(until, l.timerDeadline(t.When))
		}
		self.run_until = C.int64_t(until)
	}
	for ntodo > 0 {
		if self.debug == 0 {
			n := C.gl_run_ready_u(C.uintptr_t(uintptr(unsafe.Pointer(self))), C.Py_ssize_t(ntodo))
			if n < 0 {
				return false
			}
			ntodo = int(n)
			continue
		}
		h := l.readyPop()
		ntodo--
		r := C.gl_call_method1((*C.PyObject)(unsafe.Pointer(self)), cRunHandleDebug, h)
		C.gl_handle_release(h)
		if r == nil {
			return false
		}
		C.gl_decref(r)
	}
	if len(l.hooks) > 0 {
		l.flushHooks() // the output the run phase produced (goloop serve's responses)
	}
	return l.flushDirty()
}

var cRunHandleDebug = C.CString("_run_handle_debug")

// timerDeadline is the nanotime from which a timer due at when (loop time) is due in an
// iteration (runOnce's test: when < monotonic() + clock_resolution).
func (l *loop) timerDeadline(when float64) int64 {
	d := (when - float64(l.self.clock_resolution)) * 1e9
	if d <= 0 {
		return 0
	}
	if d >= math.MaxInt64/2 {
		return math.MaxInt64 / 2
	}
	return int64(d)
}

// yieldEvery bounds how long the loop's goroutine runs without passing through Go's
// scheduler. It never does otherwise: run_forever is one long call from C into Go, on a
// goroutine locked to Python's thread. Go's sysmon then takes it for a goroutine that has
// run for over 10 ms, every 10 ms: it signals the thread (SIGURG), hands its P off and
// polls again every 20 µs for the next millisecond. Measured on an HTTPS server, that was
// ~3,000 context switches per second on the loop's core and 5 % of a core in sysmon; one
// runtime.Gosched every few milliseconds ends it. That Gosched is not free either: the
// goroutine is locked to its thread, so the runtime hands the P to another thread and back,
// two context switches and four futex calls, whatever the load (at 4,000 echoes a second
// they were 0.2 futex calls and 0.1 context switches per echo). So it comes as seldom as
// sysmon allows with a margin for a poll that comes late (a long callback): every 8 ms.
var yieldEvery int64 = 8e6 // ns (scaled by scaleTimes)

// scaleTimes multiplies pollEvery, yieldEvery and the WSGI pool's wakeDelay by
// GOLOOP_TIME_SCALE (a whole number, once, before the first loop or WSGI server). Only for
// instruction counts: valgrind runs the loop ~100x slower (the create_task + await bench:
// 1.65 µs per operation natively, 192 under callgrind), so these wall-clock periods would
// come ~100x more often per operation than at full speed and the counts would carry polls,
// yields and wake-ups a real run does not make (bench/analysis/sched_cost.py and
// wsgi_instr.py set it). The hand-off pool's leadTick is not scaled: it keeps the leader
// under the runtime's own 10 ms rules, which valgrind does not stretch. C's getenv, as
// wsgiGoroutineDriver.
func scaleTimes() {
	timeScaleOnce.Do(func() {
		v := C.getenv(cTimeScaleEnv)
		if v == nil {
			return
		}
		if k, err := strconv.ParseInt(C.GoString(v), 10, 64); err == nil && k > 1 && k <= 10_000 {
			pollEvery *= k
			yieldEvery *= k
			wakeDelay *= time.Duration(k)
		}
	})
}

var timeScaleOnce sync.Once

var cTimeScaleEnv = C.CString("GOLOOP_TIME_SCALE")

// glLoopPeriods reports pollEvery, yieldEvery and wakeDelay (ns) as scaleTimes left them
// (_goloop._loop_periods, for tests).
//
//export glLoopPeriods
func glLoopPeriods(poll, yield, wake *C.longlong) {
	defer func() { recover() }()
	*poll, *yield, *wake = C.longlong(pollEvery), C.longlong(yieldEvery), C.longlong(wakeDelay)
}

// glProcs is runtime.GOMAXPROCS (_goloop._procs, for tests).
//
//export glProcs
func glProcs() C.long {
	defer func() { recover() }()
	return C.long(runtime.GOMAXPROCS(0))
}

// yieldSometimes passes through Go's scheduler when yieldEvery has elapsed (now: nanotime).
func (l *loop) yieldSometimes(now int64) {
	if now-l.lastYield > yieldEvery {
		l.lastYield = now
		runtime.Gosched()
	}
}

// dispatch queues the add_reader/add_writer callbacks of one ready descriptor, as
// asyncio's _process_events does (errors and hang-ups wake both directions).
func (l *loop) dispatch(ev poller.Event) bool {
	e := l.fds.get(ev.Fd)
	if e == nil {
		return true
	}
	if e.drv != nil {
		e.drv(ev.Events)
		return true
	}
	if e.idle {
		l.dropIdle(ev.Fd, e)
		return true
	}
	if c := e.conn; c != nil && !c.onEvent(ev.Events) {
		return false
	}
	if e = l.fds.get(ev.Fd); e == nil {
		return true
	}
	errs := ev.Events&(poller.Error|poller.Hangup) != 0
	if e.reader != nil && (ev.Events&poller.Readable != 0 || errs) {
		l.fire(ev.Fd, e, &e.reader, poller.Readable)
	}
	if e = l.fds.get(ev.Fd); e != nil && e.writer != nil && (ev.Events&poller.Writable != 0 || errs) {
		l.fire(ev.Fd, e, &e.writer, poller.Writable)
	}
	return true
}

// fire queues the reader or writer handle in *slot; a one-shot one leaves the descriptor
// with its reference.
func (l *loop) fire(fd int, e *fdEntry, slot *pyObj, bit uint32) {
	h := *slot
	if asHandle(h).cancelled != 0 {
		l.removeIO(fd, bit == poller.Writable)
		return
	}
	if e.oneshot&bit != 0 {
		e.oneshot &^= bit
		*slot = nil
		l.readyPush(h)
		l.sync(fd, e)
		return
	}
	C.gl_incref(h)
	l.readyPush(h)
}

// glWaitIO installs h as a one-shot reader (or writer) of fd. It returns -2 when a
// transport owns the descriptor (the caller raises asyncio's error).
//
//export glWaitIO
func glWaitIO(self *C.GLLoop, fd C.int, h pyObj, writer C.int) (rc C.int) {
	defer recoverInt(&rc)
	l := getLoop(self)
	if !l.checkClosed() {
		return -1
	}
	if e := l.fds.get(int(fd)); e != nil && e.conn != nil && e.conn.tr.closing == 0 {
		return -2
	}
	if rc = glAddIO(self, fd, h, writer, nil); rc == 0 {
		bit := uint32(poller.Readable)
		if writer != 0 {
			bit = poller.Writable
		}
		l.fds.get(int(fd)).oneshot |= bit
	}
	return rc
}

// cancelHandle cancels a goloop handle the way Handle.cancel() does.
func cancelHandle(h pyObj) {
	r := C.gl_call_method0(h, cCancel)
	if r == nil {
		C.PyErr_Clear()
		return
	}
	C.gl_decref(r)
}

var cCancel = C.CString("cancel")

// glAddIO installs h as the reader (or writer) of fd, replacing (and cancelling) the one
// there; obj is the object add_reader/add_writer got (nil: a descriptor number).
//
//export glAddIO
func glAddIO(self *C.GLLoop, fd C.int, h pyObj, writer C.int, obj pyObj) (rc C.int) {
	defer recoverInt(&rc)
	l := getLoop(self)
	if !l.checkClosed() {
		return -1
	}
	e := l.fds.get(int(fd))
	if e == nil {
		e = &fdEntry{}
		l.fds.set(int(fd), e)
	}
	slot, bit := &e.reader, uint32(poller.Readable)
	if writer != 0 {
		slot, bit = &e.writer, poller.Writable
	}
	l.claim(int(fd), e, obj, bit)
	if e.reader == nil && e.writer == nil && obj != e.obj { // the registration starts here
		if obj != nil {
			C.gl_incref(obj)
		}
		if old := e.obj; old != nil { // (sync drops it with the last handle: not expected)
			C.gl_decref(old)
		}
		e.obj = obj
	}
	old := *slot
	*slot = h
	if writer != 0 {
		e.oneshot &^= poller.Writable
	} else {
		e.oneshot &^= poller.Readable
	}
	if err := l.sync(int(fd), e); err != nil {
		*slot = old
		l.sync(int(fd), e)
		raiseErr(err)
		return -1
	}
	if old != nil {
		cancelHandle(old)
		C.gl_decref(old)
	}
	return 0
}

// removeIO stops watching one direction of fd and reports whether a callback was registered.
func (l *loop) removeIO(fd int, writer bool) bool {
	e := l.fds.get(fd)
	if e == nil {
		return false
	}
	slot := &e.reader
	if writer {
		slot = &e.writer
	}
	h := *slot
	*slot = nil
	l.sync(fd, e)
	if h == nil {
		return false
	}
	cancelHandle(h)
	C.gl_decref(h)
	return true
}

// glFdOf is the descriptor whose registration was made with obj (see fdEntry.obj), or -1.
//
//export glFdOf
func glFdOf(self *C.GLLoop, obj pyObj) (fd C.int) {
	defer func() {
		if recover() != nil {
			fd = -1
		}
	}()
	fd = -1
	getLoop(self).fds.each(func(n int, e *fdEntry) bool {
		if e.obj == obj {
			fd = C.int(n)
			return false
		}
		return true
	})
	return fd
}

//export glRemoveIO
func glRemoveIO(self *C.GLLoop, fd C.int, writer C.int) (ret pyObj) {
	defer recoverObj(&ret)
	l := getLoop(self)
	if self.closed != 0 {
		return C.PyBool_FromLong(0)
	}
	if l.removeIO(int(fd), writer != 0) {
		return C.PyBool_FromLong(1)
	}
	return C.PyBool_FromLong(0)
}

// glFdKey answers the selector-style question "what is registered for fd": None, or
// (events, reader, writer, fd, fileobj) with selectors.EVENT_READ=1 and EVENT_WRITE=2 and
// fileobj the object the registration was made with (fdEntry.obj; else the number).
//
//export glFdKey
func glFdKey(self *C.GLLoop, fd C.int) (ret pyObj) {
	defer recoverObj(&ret)
	l := getLoop(self)
	e := l.fds.get(int(fd))
	if e == nil || e.idle {
		return C.gl_none()
	}
	mask := 0
	if e.reader != nil {
		mask |= 1
	}
	if e.writer != nil {
		mask |= 2
	}
	if mask == 0 {
		return C.gl_none()
	}
	t := C.PyTuple_New(5)
	if t == nil {
		return nil
	}
	C.PyTuple_SetItem(t, 0, C.PyLong_FromLong(C.long(mask)))
	for i, h := range []pyObj{e.reader, e.writer} {
		if h == nil {
			h = C.gl_none()
		} else {
			C.gl_incref(h)
		}
		C.PyTuple_SetItem(t, C.Py_ssize_t(i+1), h)
	}
	C.PyTuple_SetItem(t, 3, C.PyLong_FromLong(C.long(fd)))
	if obj := e.obj; obj != nil {
		C.gl_incref(obj)
		C.PyTuple_SetItem(t, 4, obj)
	} else {
		C.PyTuple_SetItem(t, 4, C.PyLong_FromLong(C.long(fd)))
	}
	return t
}

// release drops every reference the Go side holds and closes the poller.
func (l *loop) release() {
	for l.inboxLen() > 0 && l.takeInbox(math.MaxInt32) {
	}
	for l.readyLen() > 0 {
		C.gl_handle_release(l.readyPop())
	}
	l.drainTimers()
	for l.timers.Len() > 0 {
		t, _ := l.timers.Pop()
		asHandle(objOf(t.Item)).scheduled = 0
		C.gl_decref(objOf(t.Item))
	}
	l.self.timer_cancelled_count = 0
	for c := range l.conns {
		c.detach()
	}
	for len(l.hooks) > 0 {
		h := l.hooks[0]
		l.removeHook(h)
		h.loopClosed()
	}
	l.fds.each(func(fd int, _ *fdEntry) bool {
		l.removeIO(fd, false)
		l.removeIO(fd, true)
		return true
	})
	l.poll.Close()          // wake_pending = 2: no new writer
	C.gl_wake_close(l.self) // then the eventfd, once no writer is mid-write
	if l.rbuf != nil {
		C.free(unsafe.Pointer(&l.rbuf[0]))
		l.rbuf = nil
	}
}

// glLoopTraverse reports every Python object the Go side holds for this loop to the
// garbage collector (tp_traverse).
//
//export glLoopTraverse
func glLoopTraverse(self *C.GLLoop, visit C.visitproc, arg unsafe.Pointer) (rc C.int) {
	defer func() {
		if recover() != nil {
			rc = 0
		}
	}()
	l := getLoop(self)
	v := func(o pyObj) bool {
		if o != nil {
			rc = C.gl_visit(visit, o, arg)
		}
		return rc == 0
	}
	// (the ready queue is C's: loop_traverse visits it)
	// (C's staged timers too; the heap's in one call: gl_visit_each)
	if ts := l.timers.Items(); len(ts) > 0 {
		var t sched.Timer[uintptr]
		rc = C.gl_visit_each(visit, arg, unsafe.Pointer(&ts[0]), C.Py_ssize_t(len(ts)),
			C.size_t(unsafe.Sizeof(t)), C.size_t(unsafe.Offsetof(t.Item)))
		if rc != 0 {
			return rc
		}
	}
	if l.fds.each(func(_ int, e *fdEntry) bool { return v(e.reader) && v(e.writer) && v(e.obj) }) {
		return rc
	}
	for c := range l.conns {
		if !v(trObj(c.tr)) || !v(c.onData) || !v(c.getBuffer) || !v(c.bufferUpdated) ||
			!v(c.tr.rctx) || !v(c.tr.wctx) {
			return
		}
	}
	return rc
}

// glLoopRelease drops the Go side's references (tp_clear of a loop in a garbage cycle).
//
//export glLoopRelease
func glLoopRelease(self *C.GLLoop) {
	defer func() { recover() }()
	getLoop(self).release()
}

//export glCloseCore
func glCloseCore(self *C.GLLoop) (ret pyObj) {
	defer recoverObj(&ret)
	l := getLoop(self)
	C.gl_set_closed(self) // first: call_soon_threadsafe then refuses, in any thread
	l.release()
	return C.gl_none()
}

// glStats reports the Go side's bookkeeping, for tests: (ready, timers, fds).
//
//export glStats
func glStats(self *C.GLLoop) (ret pyObj) {
	defer recoverObj(&ret)
	l := getLoop(self)
	nfds := 0
	l.fds.each(func(_ int, e *fdEntry) bool {
		if !e.idle {
			nfds++
		}
		return true
	})
	l.drainTimers()
	vals := []int{l.readyLen() + l.inboxLen(), l.timers.Len(), nfds}
	t := C.PyTuple_New(C.Py_ssize_t(len(vals)))
	for i, v := range vals {
		C.PyTuple_SetItem(t, C.Py_ssize_t(i), C.PyLong_FromLong(C.long(v)))
	}
	return t
}
