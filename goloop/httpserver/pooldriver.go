package httpserver

// pooldriver.go: PoolPoller, a LoopPoller that no thread of its own runs. The loop driver
// (loopdriver.go) serves the server's plain listeners and connections through it, and
// whoever holds the poller's lead (goloop's WSGI pool: a pool thread with nothing to
// answer, see the binding's wsgi.go) waits in its epoll_wait and runs the handlers of
// what it found (accept, read and parse, write-ready, the deadline timer), one leader at a
// time: the thread that read a request can then answer it itself, with no other thread
// woken. Register, Modify and Unregister may be called from any thread (an application's
// thread finishing a response re-arms reading, closes the connection); the handlers run
// only on the leader, serially, so the loop driver's state that is the poller thread's
// (the server's read buffer, the timer's sweep list) has one user at a time.
//
// An epoll event carries the descriptor and its registration's generation: an event
// collected before a descriptor was closed (by another thread) and its number reused by
// a new registration is dropped instead of reaching the new handler.

import (
	"os"
	"sync"

	"github.com/goloop/goloop/goloop/poller"
	"golang.org/x/sys/unix"
)

// PoolPoller is an epoll set with handlers, run by Wait and Dispatch on the caller's thread.
type PoolPoller struct {
	epfd, evfd int
	mu         sync.Mutex
	slots      []poolSlot // by descriptor
	closed     bool
	evs        []unix.EpollEvent // the leader's
	n          int               // events of the last Wait
}

type poolSlot struct {
	gen uint32
	h   func(uint32)
}

// NewPoolPoller makes the epoll set and its wake-up eventfd (Interrupt).
func NewPoolPoller() (*PoolPoller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	evfd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(epfd)
		return nil, err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(evfd), Pad: -1}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(evfd)
		return nil, err
	}
	return &PoolPoller{epfd: epfd, evfd: evfd, evs: make([]unix.EpollEvent, 64)}, nil
}

// Register watches fd for events; h runs on the leader with the bits that were ready.
func (p *PoolPoller) Register(fd int, events uint32, h func(events uint32)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrServerClosed
	}
	if fd >= len(p.slots) {
		p.slots = append(p.slots, make([]poolSlot, fd+1-len(p.slots)+16)...)
	}
	s := &p.slots[fd]
	s.gen++
	s.h = h
	ev := unix.EpollEvent{Events: events, Fd: int32(fd), Pad: int32(s.gen)}
	if err := unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		s.h = nil
		return err
	}
	return nil
}

// Modify changes the events fd is watched for.
func (p *PoolPoller) Modify(fd int, events uint32) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || fd >= len(p.slots) || p.slots[fd].h == nil {
		return unix.EBADF
	}
	ev := unix.EpollEvent{Events: events, Fd: int32(fd), Pad: int32(p.slots[fd].gen)}
	return unix.EpollCtl(p.epfd, unix.EPOLL_CTL_MOD, fd, &ev)
}

// Unregister stops watching fd (before it is closed).
func (p *PoolPoller) Unregister(fd int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || fd >= len(p.slots) || p.slots[fd].h == nil {
		return
	}
	unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	p.slots[fd].h = nil
}

// Wait waits (blocking for ms milliseconds, -1: until something happens, Interrupt
// included) for events, which Dispatch then handles; it returns how many came. Only the
// leader calls it. A wait that would find events at once is made without the runtime's
// system-call bookkeeping (the usual case under load).
func (p *PoolPoller) Wait(ms int) int {
	n, err := poller.EpollWait0(p.epfd, p.evs)
	if err != nil || n == 0 {
		n = 0
		if ms != 0 {
			if k, err := unix.EpollWait(p.epfd, p.evs, ms); err == nil {
				n = k
			}
		}
	}
	p.n = n
	return n
}

// WaitPark is Wait(-1) for a goroutine that leads the poller for good: it blocks in
// epoll_wait for up to ms milliseconds, then, nothing having come, parks in Go's netpoller
// (an epoll set is readable when it has events) instead of blocking its thread any longer.
// A goroutine blocked in a system call keeps its P (a processor slot of Go's scheduler),
// which the runtime's monitor takes back once the call passes 10 ms, and every such take
// puts the monitor back to ticks 20 µs apart; parking holds no P, but costs a pass through
// the scheduler each way, which wakes the monitor from its sleep: under load (events
// within ms) the short blocking wait is the cheaper, and an idle server, parked, wakes for
// nothing. Only one goroutine calls it, and never Wait as well. park false: it only
// blocks, up to ms (0 events: none came). parked: it parked (the goroutine passed through
// the scheduler).
func (p *PoolPoller) WaitPark(ms int, park bool) (n int, parked bool) {
	n, err := poller.EpollWait0(p.epfd, p.evs)
	if err == nil && n > 0 {
		p.n = n
		return n, false
	}
	if ms > 0 || !park {
		k, err := unix.EpollWait(p.epfd, p.evs, ms)
		if err != nil || k < 0 {
			k = 0
		}
		if p.n = k; k > 0 || !park {
			return k, false
		}
	}
	// parked: a duplicate of epfd in Go's netpoller for the time of the wait (registered
	// for good, every event of the set would wake the netpoller's thread too)
	d, err := unix.FcntlInt(uintptr(p.epfd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return p.Wait(-1), false
	}
	unix.SetNonblock(d, true) // (the set's; epoll_wait does not look at it)
	f := os.NewFile(uintptr(d), "goloop-pool-epoll")
	defer f.Close() // (out of Go's netpoller, then closed)
	rc, err := f.SyscallConn()
	if err != nil {
		return p.Wait(-1), false
	}
	n = 0
	rc.Read(func(uintptr) bool {
		k, e := poller.EpollWait0(p.epfd, p.evs)
		if e == nil && k > 0 {
			n = k
			return true
		}
		return e != nil && e != unix.EINTR // (an error: back with none)
	})
	p.n = n
	return n, true
}

// Dispatch runs the handlers of the last Wait's events (the leader, serially) and
// reports whether Interrupt was among them.
func (p *PoolPoller) Dispatch() (interrupted bool) {
	n := p.n
	p.n = 0
	for i := 0; i < n; i++ {
		ev := p.evs[i]
		fd := int(ev.Fd)
		if ev.Pad == -1 && fd == p.evfd {
			var b [8]byte
			unix.Read(p.evfd, b[:])
			interrupted = true
			continue
		}
		p.mu.Lock()
		var h func(uint32)
		if fd < len(p.slots) && int32(p.slots[fd].gen) == ev.Pad {
			h = p.slots[fd].h
		}
		p.mu.Unlock()
		if h != nil {
			runHandler(h, ev.Events)
		}
	}
	return interrupted
}

// runHandler runs h; a panic ends the handler, not the leader's thread (whose caller
// holds the pool's state).
func runHandler(h func(uint32), ev uint32) {
	defer func() { recover() }()
	h(ev)
}

// Interrupt makes the leader's Wait return (any thread).
func (p *PoolPoller) Interrupt() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		b := [8]byte{1}
		unix.Write(p.evfd, b[:])
	}
}

// DupEventFd is a duplicate of the eventfd Interrupt writes (close-on-exec; the caller's to
// close): a writer outside Go (C) wakes the leader's Wait through it, and it stays valid
// after Close.
func (p *PoolPoller) DupEventFd() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return -1, ErrServerClosed
	}
	return unix.FcntlInt(uintptr(p.evfd), unix.F_DUPFD_CLOEXEC, 0)
}

// Close closes the epoll set (nobody waits in it any more); Register fails after it.
func (p *PoolPoller) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	unix.Close(p.epfd)
	unix.Close(p.evfd)
	p.slots = nil
}
