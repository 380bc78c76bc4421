package poller

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Non-blocking I/O without the Go scheduler's system-call bookkeeping.
//
// goloop runs on a Python thread that entered Go through cgo. A regular syscall.Syscall
// marks the goroutine as in a system call, and the runtime's monitor thread may then hand
// its P to another thread: thread wake-ups and context switches on the loop's core, for a
// call that cannot block. These helpers use RawSyscall and are only for descriptors in
// non-blocking mode (and epoll_wait with a zero timeout). Blocking waits use Wait.

// RawRead reads from a non-blocking fd.
func RawRead(fd int, b []byte) (int, error) {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(p), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// RawWrite writes to a non-blocking fd.
func RawWrite(fd int, b []byte) (int, error) {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(p), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// RawWritev gathers iov into one write on a non-blocking fd.
func RawWritev(fd int, iov []unix.Iovec) (int, error) {
	if len(iov) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// EpollWait0 is epoll_wait(epfd, events, 0) as epoll_pwait with no signal mask, which the
// kernel treats as epoll_wait: arm64 (like every architecture added since) has no epoll_wait
// system call, only epoll_pwait, and one call on every architecture keeps one path tested.
// Raw: a wait that does not block needs none of the runtime's system-call bookkeeping
// (the loop's poll, asgi's PoolPoller).
func EpollWait0(epfd int, events []unix.EpollEvent) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])),
		uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// RawSend sends b on a non-blocking socket with send(2) (sendto without an address): the
// socket's own call, which skips the file layer that write(2) passes through on its way to
// the same code (bench/analysis/sockcall_cost.c measures both). MSG_NOSIGNAL: a peer that
// is gone is EPIPE, never a SIGPIPE, whatever the process does with that signal. A
// descriptor that is not a socket (ENOTSOCK) is written with write(2).
func RawSend(fd int, b []byte) (int, error) {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	n, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(p), uintptr(len(b)), unix.MSG_NOSIGNAL, 0, 0)
	if e == unix.ENOTSOCK {
		return RawWrite(fd, b)
	}
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// RawSendv gathers iov into one sendmsg(2) on a non-blocking socket (RawSend's reasons);
// writev(2) for a descriptor that is not a socket.
func RawSendv(fd int, iov []unix.Iovec) (int, error) {
	if len(iov) == 0 {
		return 0, nil
	}
	var msg unix.Msghdr
	msg.Iov = &iov[0]
	msg.SetIovlen(len(iov))
	n, _, e := unix.RawSyscall(unix.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), unix.MSG_NOSIGNAL)
	if e == unix.ENOTSOCK {
		return RawWritev(fd, iov)
	}
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
