// Package poller is goloop's readiness poller: a thin, allocation-free wrapper around
// epoll with an eventfd for wake-ups from other threads. It knows nothing of Python.
package poller

import (
	"errors"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Interest and readiness bits (the epoll ones).
const (
	Readable = unix.EPOLLIN
	Writable = unix.EPOLLOUT
	Error    = unix.EPOLLERR
	Hangup   = unix.EPOLLHUP
	RdHangup = unix.EPOLLRDHUP
)

// ErrClosed is returned by every method of a closed Poller.
var ErrClosed = errors.New("poller: closed")

// Event is one ready file descriptor.
type Event struct {
	Fd     int
	Events uint32
}

// Poller waits for readiness of registered descriptors. One goroutine (the loop's
// thread) calls Wait, Add, Mod and Del; Wake may be called from anywhere.
type Poller struct {
	epfd    int
	wakefd  int
	pending *atomic.Int32 // 1 while a wake-up is written and not yet drained; wakeClosed after Close
	wakeMu  sync.RWMutex  // Wake's write (read side) against Close (write side)
	raw     []unix.EpollEvent
	out     []Event
	closed  bool
	shared  bool // the wake-up descriptor and flag belong to the caller (NewSharedWake)
	own     atomic.Int32
}

// NewSharedWake creates a poller whose wake-ups come through an eventfd and a pending flag
// that the caller owns and writes itself, from code that is not Go (a thread of another
// runtime calling into Go costs a scheduler hand-off per call). The writer's protocol is
// Wake's: compare-and-swap pending from 0 to 1, and only if that succeeded write 1 to the
// eventfd (EAGAIN is a pending wake-up); pending == 2 means closed. The poller drains the
// eventfd and resets pending to 0 when Wait sees it; Close sets pending to 2 but neither
// closes the eventfd nor orders itself against the writer: the caller does both.
func NewSharedWake(maxEvents int, wakefd int, pending *atomic.Int32) (*Poller, error) {
	p, err := newPoller(maxEvents, wakefd, pending)
	if p != nil {
		p.shared = true
	}
	return p, err
}

// New creates a poller with room for maxEvents events per Wait.
func New(maxEvents int) (*Poller, error) {
	return newPoller(maxEvents, -1, nil)
}

// newPoller makes the epoll descriptor, then (wfd < 0) its own eventfd.
func newPoller(maxEvents int, wfd int, pending *atomic.Int32) (*Poller, error) {
	if maxEvents <= 0 {
		maxEvents = 256
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	own := wfd < 0
	if own {
		if wfd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
			unix.Close(epfd)
			return nil, err
		}
	}
	p := &Poller{epfd: epfd, wakefd: wfd, raw: make([]unix.EpollEvent, maxEvents), out: make([]Event, 0, maxEvents)}
	p.pending = pending
	if pending == nil {
		p.pending = &p.own
	}
	if err := p.ctl(unix.EPOLL_CTL_ADD, wfd, unix.EPOLLIN); err != nil {
		unix.Close(epfd)
		if own {
			unix.Close(wfd)
		}
		return nil, err
	}
	return p, nil
}

func (p *Poller) ctl(op, fd int, events uint32) error {
	ev := unix.EpollEvent{Events: events, Fd: int32(fd)}
	for {
		err := unix.EpollCtl(p.epfd, op, fd, &ev)
		if err != unix.EINTR {
			return err
		}
	}
}

// Add registers fd for the given interest bits (level-triggered).
func (p *Poller) Add(fd int, events uint32) error {
	if p.closed {
		return ErrClosed
	}
	err := p.ctl(unix.EPOLL_CTL_ADD, fd, events)
	if err == unix.EEXIST { // a stale registration of a reused descriptor number
		err = p.ctl(unix.EPOLL_CTL_MOD, fd, events)
	}
	return err
}

// Mod changes the interest bits of a registered fd (re-adding it if the kernel dropped it
// because the descriptor was closed and its number reused).
func (p *Poller) Mod(fd int, events uint32) error {
	if p.closed {
		return ErrClosed
	}
	err := p.ctl(unix.EPOLL_CTL_MOD, fd, events)
	if err == unix.ENOENT {
		err = p.ctl(unix.EPOLL_CTL_ADD, fd, events)
	}
	return err
}

// Check re-registers fd with the interest bits it is registered with, to ask the kernel
// whether that registration still exists. gone reports that it does not: the file it was
// made for was closed (epoll forgets a closed descriptor without a word) and the number may
// name another file now. Nothing is registered for fd then.
func (p *Poller) Check(fd int, events uint32) (gone bool, err error) {
	if p.closed {
		return false, ErrClosed
	}
	err = p.ctl(unix.EPOLL_CTL_MOD, fd, events)
	if err == unix.ENOENT {
		return true, nil
	}
	return false, err
}

// Del unregisters fd. A descriptor that is already closed or unknown is not an error.
func (p *Poller) Del(fd int) error {
	if p.closed {
		return ErrClosed
	}
	err := p.ctl(unix.EPOLL_CTL_DEL, fd, 0)
	if err == unix.ENOENT || err == unix.EBADF {
		return nil
	}
	return err
}

// Wait blocks for up to timeoutMs milliseconds (-1: forever, 0: just look) and returns the
// ready descriptors, not counting wake-ups, which it drains. woken reports that Wake was
// called. An interrupted wait (EINTR) returns unix.EINTR so the caller can check signals.
// The returned slice is reused by the next call.
func (p *Poller) Wait(timeoutMs int) (events []Event, woken bool, err error) {
	if timeoutMs == 0 {
		return p.WaitUsing(0, func(epfd int, raw []unix.EpollEvent, _ int) (int, error) {
			return EpollWait0(epfd, raw)
		})
	}
	return p.WaitUsing(timeoutMs, unix.EpollWait)
}

// WaitUsing is Wait with the epoll_wait call supplied by the caller (the CPython binding
// makes it in C, releasing the GIL around it, in one call from Go).
func (p *Poller) WaitUsing(timeoutMs int, wait func(epfd int, raw []unix.EpollEvent, timeoutMs int) (int, error)) (events []Event, woken bool, err error) {
	if p.closed {
		return nil, false, ErrClosed
	}
	n, err := wait(p.epfd, p.raw, timeoutMs)
	if err != nil {
		return nil, false, err
	}
	out := p.out[:0]
	for i := 0; i < n; i++ {
		ev := &p.raw[i]
		if int(ev.Fd) == p.wakefd {
			p.drain()
			woken = true
			continue
		}
		out = append(out, Event{Fd: int(ev.Fd), Events: ev.Events})
	}
	p.out = out
	return out, woken, nil
}

func (p *Poller) drain() {
	var buf [8]byte
	for {
		_, err := RawRead(p.wakefd, buf[:])
		if err != unix.EINTR {
			break
		}
	}
	p.pending.Store(0)
}

const wakeClosed = 2 // pending after Close: Wake returns ErrClosed

// Wake makes a concurrent or the next Wait return. Safe from any thread; repeated calls
// before the wait drains them cost one atomic operation each. After Close it returns
// ErrClosed and never writes to the (possibly reused) descriptor number.
func (p *Poller) Wake() error {
	if !p.pending.CompareAndSwap(0, 1) {
		if p.pending.Load() == wakeClosed {
			return ErrClosed
		}
		return nil
	}
	p.wakeMu.RLock()
	defer p.wakeMu.RUnlock()
	if p.pending.Load() == wakeClosed { // Close ran after our CAS
		return ErrClosed
	}
	one := [8]byte{1}
	for {
		_, err := unix.Write(p.wakefd, one[:])
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN { // counter saturated: a wake-up is pending anyway
			return nil
		}
		return err
	}
}

// Fd is the epoll descriptor (for diagnostics and tests).
func (p *Poller) Fd() int { return p.epfd }

// Close releases the epoll and eventfd descriptors. It is idempotent.
func (p *Poller) Close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	p.wakeMu.Lock() // waits out a Wake that is mid-write
	p.pending.Store(wakeClosed)
	p.wakeMu.Unlock()
	err1 := unix.Close(p.epfd)
	if p.shared {
		return err1
	}
	err2 := unix.Close(p.wakefd)
	if err1 != nil {
		return err1
	}
	return err2
}
