package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The epoll engine drives every connection from one OS thread with raw
// non-blocking syscalls: a request costs one write, one read and a share of
// an epoll_wait, about a third less client CPU than a goroutine per
// connection (which reads once more to find EAGAIN and switches goroutines).
// With the client pinned to one core that headroom matters: the fastest
// Python servers otherwise measure the client.

type econn struct {
	id      int
	fd      int
	msg     []byte
	buf     []byte
	sent    int
	recvd   int
	seq     uint64
	t0      time.Time
	wantOut bool
	busy    bool // a request is in flight
	retryAt time.Time
	nextAt  time.Time // -rate: when its next request may start
	waiting bool      // -rate: its echo is back, the next request waits for nextAt
}

type epollClient struct {
	network, target string
	size            int
	epfd            int
	w               *worker
	warmEnd, end    time.Time
	interval        time.Duration // -rate: between one connection's request starts (0: none)
	tfd             int           // -rate: a timerfd in the epoll set, armed for the next start
}

func dialFD(network, target string) (int, error) {
	conn, err := net.DialTimeout(network, target, 2*time.Second)
	if err != nil {
		return -1, err
	}
	defer conn.Close()
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	sc, err := conn.(syscall.Conn).SyscallConn()
	if err != nil {
		return -1, err
	}
	nfd := -1
	var derr error
	if err := sc.Control(func(fd uintptr) { nfd, derr = syscall.Dup(int(fd)) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, derr
	}
	syscall.CloseOnExec(nfd)
	if err := syscall.SetNonblock(nfd, true); err != nil {
		syscall.Close(nfd)
		return -1, err
	}
	return nfd, nil
}

func (e *epollClient) connect(c *econn, now time.Time) {
	fd, err := dialFD(e.network, e.target)
	if err != nil {
		e.w.fail(err)
		c.retryAt = time.Now().Add(20 * time.Millisecond)
		return
	}
	c.fd = fd
	c.wantOut = false
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(c.id)}
	if err := syscall.EpollCtl(e.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		e.fail(c, err)
		return
	}
	e.next(c, now)
}

func (e *epollClient) fail(c *econn, err error) {
	e.w.fail(err)
	if c.fd >= 0 {
		syscall.Close(c.fd) // also leaves the epoll set
		c.fd = -1
	}
	c.busy = false
	c.retryAt = time.Now().Add(20 * time.Millisecond)
}

func (e *epollClient) setOut(c *econn, on bool) error {
	if c.wantOut == on {
		return nil
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(c.id)}
	if on {
		ev.Events |= syscall.EPOLLOUT
	}
	c.wantOut = on
	return syscall.EpollCtl(e.epfd, syscall.EPOLL_CTL_MOD, c.fd, &ev)
}

// next starts the connection's next request unless the run is over; with -rate, not
// before its time (the request then waits, see startDue).
func (e *epollClient) next(c *econn, now time.Time) {
	if !now.Before(e.end) {
		c.busy = false
		return
	}
	if e.interval > 0 {
		if now.Before(c.nextAt) {
			c.busy, c.waiting = false, true
			return
		}
		c.waiting = false
		c.nextAt = c.nextAt.Add(e.interval)
		if c.nextAt.Before(now) { // behind: no burst to catch up
			c.nextAt = now
		}
	}
	c.seq++
	if e.size >= 8 {
		binary.LittleEndian.PutUint64(c.msg, c.seq)
	} else {
		c.msg[0] = byte(c.seq)
	}
	c.sent, c.recvd, c.busy = 0, 0, true
	c.t0 = time.Now()
	e.flush(c)
}

func (e *epollClient) flush(c *econn) {
	for c.sent < e.size {
		n, err := syscall.Write(c.fd, c.msg[c.sent:])
		if err == syscall.EINTR {
			continue
		}
		if err == syscall.EAGAIN {
			if err := e.setOut(c, true); err != nil {
				e.fail(c, err)
			}
			return
		}
		if err != nil {
			e.fail(c, err)
			return
		}
		c.sent += n
	}
	if err := e.setOut(c, false); err != nil {
		e.fail(c, err)
	}
}

func (e *epollClient) readable(c *econn) {
	for c.fd >= 0 {
		n, err := syscall.Read(c.fd, c.buf[c.recvd:])
		if err == syscall.EINTR {
			continue
		}
		if err == syscall.EAGAIN {
			return
		}
		if err != nil {
			e.fail(c, err)
			return
		}
		if n == 0 {
			e.fail(c, io.ErrUnexpectedEOF)
			return
		}
		if !c.busy || c.recvd+n > c.sent {
			e.fail(c, errors.New("server sent bytes that were not sent to it"))
			return
		}
		c.recvd += n
		if c.recvd == e.size {
			now := time.Now()
			if !bytes.Equal(c.buf, c.msg) {
				e.fail(c, errors.New("echoed bytes differ from the message sent"))
				return
			}
			if !now.Before(e.warmEnd) && now.Before(e.end) {
				e.w.lat = append(e.w.lat, now.Sub(c.t0))
				e.w.bytes += int64(e.size)
			}
			e.next(c, now)
			return
		}
	}
}

// startDue starts the paced requests whose time has come and arms the timer for the next.
func (e *epollClient) startDue(conns []*econn) {
	now := time.Now()
	var first time.Time
	for _, c := range conns {
		if c.waiting && c.fd >= 0 {
			if !now.Before(c.nextAt) {
				e.next(c, now)
			} else if first.IsZero() || c.nextAt.Before(first) {
				first = c.nextAt
			}
		}
	}
	if !first.IsZero() {
		d := first.Sub(now)
		spec := unix.ItimerSpec{Value: unix.NsecToTimespec(max(int64(d), 1000))}
		unix.TimerfdSettime(e.tfd, 0, &spec, nil)
	}
}

func runEpoll(network, target string, nconns, size int, warmup, duration, timeout, rate float64) {
	runtime.LockOSThread()
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		fmt.Fprintln(os.Stderr, "echoclient: epoll_create1:", err)
		os.Exit(2)
	}
	start := time.Now()
	e := &epollClient{
		network: network, target: target, size: size, epfd: epfd,
		w:       &worker{lat: make([]time.Duration, 0, 1<<16)},
		warmEnd: start.Add(secs(warmup)),
	}
	e.end = e.warmEnd.Add(secs(duration))
	if rate > 0 {
		e.interval = time.Duration(float64(nconns) / rate * float64(time.Second))
		tfd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
		if err != nil {
			fmt.Fprintln(os.Stderr, "echoclient: timerfd_create:", err)
			os.Exit(2)
		}
		e.tfd = tfd
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(nconns)}
		if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, tfd, &ev); err != nil {
			fmt.Fprintln(os.Stderr, "echoclient: epoll_ctl timerfd:", err)
			os.Exit(2)
		}
	}

	conns := make([]*econn, nconns)
	for i := range conns {
		c := &econn{id: i, fd: -1, msg: make([]byte, size), buf: make([]byte, size)}
		for j := range c.msg {
			c.msg[j] = byte('a' + (i+j)%26)
		}
		conns[i] = c
		e.connect(c, time.Now())
	}

	events := make([]syscall.EpollEvent, nconns+1)
	var tbuf [8]byte
	for {
		now := time.Now()
		if !now.Before(e.end) {
			break
		}
		waitMs := int(e.end.Sub(now)/time.Millisecond) + 1
		if waitMs > 20 {
			waitMs = 20
		}
		n, err := syscall.EpollWait(epfd, events, waitMs)
		if err != nil && err != syscall.EINTR {
			fmt.Fprintln(os.Stderr, "echoclient: epoll_wait:", err)
			os.Exit(2)
		}
		for i := 0; i < n; i++ {
			ev := events[i]
			if int(ev.Fd) == nconns { // the -rate timer
				syscall.Read(e.tfd, tbuf[:])
				continue
			}
			c := conns[ev.Fd]
			if c.fd < 0 {
				continue
			}
			if ev.Events&syscall.EPOLLOUT != 0 && c.busy && c.sent < size {
				e.flush(c)
			}
			if c.fd >= 0 && ev.Events&(syscall.EPOLLIN|syscall.EPOLLERR|syscall.EPOLLHUP) != 0 {
				e.readable(c)
			}
		}
		if e.interval > 0 {
			e.startDue(conns)
		}
		now = time.Now()
		for _, c := range conns {
			if c.fd < 0 && now.Before(e.end) && !now.Before(c.retryAt) {
				e.connect(c, now)
			}
		}
	}
	// A request still outstanding long after it was sent means the server
	// stalled on that connection.
	stop := time.Now()
	for _, c := range conns {
		if c.fd >= 0 && c.busy && stop.Sub(c.t0) > secs(timeout) {
			e.w.fail(fmt.Errorf("no complete echo for %.1fs", stop.Sub(c.t0).Seconds()))
		}
		if c.fd >= 0 {
			syscall.Close(c.fd)
		}
	}
	report([]*worker{e.w}, nconns, size, e.end.Sub(e.warmEnd))
}
