package httpserver

import (
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// poolDriver: with loopDriver, startServerWith serves through a PoolPoller led in turn by
// poolLeaders goroutines (as goloop's WSGI pool threads lead it) instead of testPoller.
var poolDriver bool

const poolLeaders = 3

// poolRunner runs a PoolPoller leader/follower: each goroutine takes the lead (a mutex),
// waits, handles the events, writes the server's own answers, gives the lead up and
// tells the application to take the queue; so consecutive rounds run on different
// goroutines (threads), serially.
type poolRunner struct {
	p    *PoolPoller
	lead sync.Mutex
	done chan struct{}
	wg   sync.WaitGroup
}

func startPoolRunner(t *testing.T, s *Server, after func()) *poolRunner {
	p, err := NewPoolPoller()
	if err != nil {
		t.Fatal(err)
	}
	r := &poolRunner{p: p, done: make(chan struct{})}
	for i := 0; i < poolLeaders; i++ {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for {
				r.lead.Lock()
				select {
				case <-r.done:
					r.lead.Unlock()
					return
				default:
				}
				p.Wait(-1)
				p.Dispatch()
				if s.NeedFlush() {
					s.Flush()
				}
				r.lead.Unlock()
				after()
			}
		}()
	}
	return r
}

func (r *poolRunner) stop() {
	close(r.done)
	r.p.Interrupt()
	r.wg.Wait()
	r.p.Close()
}

// The loop driver's tests over a PoolPoller whose lead changes threads.
func TestPoolDriver(t *testing.T) {
	loopDriver, poolDriver = true, true
	defer func() { loopDriver, poolDriver = false, false }()
	for _, tc := range loopTests {
		if tc.name == "AcceptBackoff" { // holds testPoller's gate
			continue
		}
		t.Run(tc.name, tc.f)
	}
	t.Run("StaleEvent", testPoolStaleEvent)
}

// An event collected for a descriptor that was then unregistered, closed and its number
// registered again does not reach the new handler.
func testPoolStaleEvent(t *testing.T) {
	p, err := NewPoolPoller()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	old := 0
	if err := p.Register(fds[0], evIn, func(uint32) { old++ }); err != nil {
		t.Fatal(err)
	}
	unix.Write(fds[1], []byte("x"))
	if n := p.Wait(5000); n != 1 {
		t.Fatalf("%d events", n)
	}
	// before Dispatch: another thread closes the descriptor and its number comes back
	p.Unregister(fds[0])
	unix.Close(fds[0])
	nfd, err := unix.Dup(fds[1])
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(nfd)
	if nfd != fds[0] {
		t.Skipf("descriptor %d not reused (%d)", fds[0], nfd)
	}
	got := 0
	if err := p.Register(nfd, evIn, func(uint32) { got++ }); err != nil {
		t.Fatal(err)
	}
	if p.Dispatch() || old != 0 || got != 0 {
		t.Fatalf("stale event dispatched: old %d new %d", old, got)
	}
	p.Interrupt()
	if p.Wait(5000) < 1 || !p.Dispatch() {
		t.Fatal("Interrupt did not end the wait")
	}
}

// servePool is startServerWith's loop-driver setup with a PoolPoller.
func servePool(t *testing.T, s *Server, ln net.Listener, after func()) func() {
	r := startPoolRunner(t, s, after)
	s.SetLoop(r.p)
	serveLoop(t, s, ln)
	return func() {
		s.Abort()
		r.stop()
	}
}

// TestPoolWaitPark: a goroutine leading the poller for good parks in Go's netpoller when
// nothing is ready and comes back with the events that came (written by another goroutine
// after it began to wait, or before); the blocking-only wait comes back empty; the
// duplicate of the interrupt eventfd wakes the leader as Interrupt does, and stays valid
// after Close (a pool thread may write it after the server stopped).
func TestPoolWaitPark(t *testing.T) {
	p, err := NewPoolPoller()
	require.NoError(t, err)
	var fds [2]int
	require.NoError(t, unix.Pipe2(fds[:], unix.O_NONBLOCK|unix.O_CLOEXEC))
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	got := make(chan uint32, 8)
	require.NoError(t, p.Register(fds[0], unix.EPOLLIN|unix.EPOLLET, func(ev uint32) {
		var b [16]byte
		unix.Read(fds[0], b[:])
		got <- ev
	}))

	n, parked := p.WaitPark(1, false) // nothing ready: blocks 1 ms, comes back empty
	require.Equal(t, 0, n)
	require.False(t, parked)
	require.False(t, p.Dispatch())

	for round := 0; round < 20; round++ {
		go unix.Write(fds[1], []byte("x"))
		n = 0
		for n == 0 { // (an event may be one the netpoller saw late: no handler ran, wait again)
			n, _ = p.WaitPark(0, true)
		}
		p.Dispatch()
		select {
		case ev := <-got:
			require.NotZero(t, ev&unix.EPOLLIN)
		default:
			t.Fatalf("round %d: %d events, the pipe's handler did not run", round, n)
		}
	}

	d, err := p.DupEventFd()
	require.NoError(t, err)
	defer unix.Close(d)
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	go unix.Write(d, one)
	for {
		if n, _ = p.WaitPark(0, true); n > 0 && p.Dispatch() {
			break
		}
	}
	p.Close()
	_, err = unix.Write(d, one)
	require.NoError(t, err)
	_, err = p.DupEventFd()
	require.ErrorIs(t, err, ErrServerClosed)
}
