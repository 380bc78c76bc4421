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
}

type epollClient struct {
	network, target string
	size            int
	epfd            int
	w               *worker
	warmEnd, end    time.Time
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

// next starts the connection's next request unless the run is over.
func (e *epollClient) next(c *econn, now time.Time) {
	if !now.Before(e.end) {
		c.busy = false
		return
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

func runEpoll(network, target string, nconns, size int, warmup, duration, timeout float64) {
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

	conns := make([]*econn, nconns)
	for i := range conns {
		c := &econn{id: i, fd: -1, msg: make([]byte, size), buf: make([]byte, size)}
		for j := range c.msg {
			c.msg[j] = byte('a' + (i+j)%26)
		}
		conns[i] = c
		e.connect(c, time.Now())
	}

	events := make([]syscall.EpollEvent, nconns)
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
