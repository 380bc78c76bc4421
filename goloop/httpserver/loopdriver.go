package httpserver

// loopdriver.go: the loop driver. With a LoopPoller (SetLoop), a plain (not TLS) listener
// is served by the thread that runs the poller (goloop's loop thread): no accept goroutine,
// no goroutine per connection. The listener is registered for reading and accepts until
// EAGAIN; a connection's readable event reads into one buffer of the server's and feeds the
// parser (the same Handler methods as the goroutine driver); the requests of a read are
// queued without Notify (the loop takes the queues after the poll's events). Output is
// written from the loop thread; what the socket does not take waits for the writable
// event (write interest is on only then). Keep-alive deadlines, the first-request grace of
// a closing server, the lingering close and the accept back-off are one timerfd's.
// What this driver does not do is handed to the goroutine driver on the same Conn: the
// descriptor becomes a net.Conn (h2c prior knowledge, sniffed on the first read; a
// WebSocket session, after its handshake request).
//
// A loop-mode Conn's state is under its mu like the rest of it, and its reader state (the
// parser, cur, batch) is only the read handler's: the engine stays race-free when the
// application's side runs on other goroutines (the tests), though goloop runs all of it on
// the loop thread.

import (
	"net"
	"os"
	"sync"
	"time"

	"github.com/goloop/goloop/goloop/poller"
	"golang.org/x/sys/unix"
)

// LoopPoller is the poller of the thread that runs the loop driver (goloop's loop: the
// binding implements it over its level-triggered epoll). Handlers run on that thread, with
// the epoll bits that were ready (errors and hang-ups included).
type LoopPoller interface {
	Register(fd int, events uint32, h func(events uint32)) error
	Modify(fd int, events uint32) error
	Unregister(fd int)
}

const (
	evIn   = unix.EPOLLIN
	evOut  = unix.EPOLLOUT
	evErrs = unix.EPOLLERR | unix.EPOLLHUP

	loopReadBuffer = 64 * 1024
	acceptBatch    = 64                     // accepts per readable event of a listener
	acceptBackoff  = 100 * time.Millisecond // after EMFILE and friends
)

// SetLoop makes the server's plain listeners (ListenFd, called after) loop-mode ones.
func (s *Server) SetLoop(p LoopPoller) { s.lp = p }

// loopListener is a listening socket served by the loop driver.
type loopListener struct {
	s     *Server
	mu    sync.Mutex
	fd    int       // -1 once closed
	retry time.Time // paused after an accept error until then
}

func (s *Server) listenLoop(fd int) error {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return err
	}
	// The timer is made now: the accept back-off needs it when no descriptor is left
	// (EMFILE), which is no time to make one.
	s.lt.mu.Lock()
	err := s.timerLocked()
	s.lt.mu.Unlock()
	if err != nil {
		unix.Close(fd)
		return err
	}
	ll := &loopListener{s: s, fd: fd}
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		unix.Close(fd)
		return ErrServerClosed
	}
	if s.rbuf == nil {
		s.rbuf = make([]byte, loopReadBuffer)
	}
	s.lls = append(s.lls, ll)
	s.mu.Unlock()
	ll.mu.Lock()
	defer ll.mu.Unlock()
	if err := s.lp.Register(fd, evIn, ll.onEvent); err != nil {
		ll.fd = -1
		unix.Close(fd)
		return err
	}
	return nil
}

func (ll *loopListener) close() {
	ll.mu.Lock()
	if ll.fd >= 0 {
		ll.s.lp.Unregister(ll.fd)
		unix.Close(ll.fd)
		ll.fd = -1
	}
	ll.mu.Unlock()
}

// onEvent accepts the connections waiting (up to acceptBatch: the loop has other work).
func (ll *loopListener) onEvent(uint32) {
	s := ll.s
	ll.mu.Lock()
	defer ll.mu.Unlock()
	for i := 0; i < acceptBatch && ll.fd >= 0; i++ {
		nfd, sa, err := unix.Accept4(ll.fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		switch err {
		case nil:
			s.acceptLoopConn(nfd, sa)
			continue
		case unix.EAGAIN:
			return
		case unix.EINTR, unix.ECONNABORTED:
			continue
		}
		// EMFILE and friends: stop watching the listener for a while (as the goroutine
		// driver sleeps); the timer resumes it.
		s.acceptFailed(os.NewSyscallError("accept4", err))
		ll.retry = time.Now().Add(acceptBackoff)
		s.lp.Modify(ll.fd, 0)
		s.deadlineSoon(ll.retry)
		return
	}
}

// resume watches a paused listener again once its back-off is over; it returns when to
// look again (zero: not paused).
func (ll *loopListener) resume(now time.Time) time.Time {
	ll.mu.Lock()
	defer ll.mu.Unlock()
	if ll.retry.IsZero() || ll.fd < 0 {
		return time.Time{}
	}
	if now.Before(ll.retry) {
		return ll.retry
	}
	ll.retry = time.Time{}
	ll.s.lp.Modify(ll.fd, evIn)
	return time.Time{}
}

func addrOfSockaddr(sa unix.Sockaddr) Addr {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return Addr{Host: net.IP(a.Addr[:]).String(), Port: a.Port}
	case *unix.SockaddrInet6:
		return Addr{Host: net.IP(a.Addr[:]).String(), Port: a.Port}
	case *unix.SockaddrUnix:
		return Addr{Host: a.Name, Unix: true}
	}
	return Addr{}
}

func (s *Server) acceptLoopConn(fd int, sa unix.Sockaddr) {
	c := &Conn{s: s, connLoop: connLoop{fd: fd, lp: s.lp}, Remote: addrOfSockaddr(sa)}
	switch sa.(type) {
	case *unix.SockaddrInet4, *unix.SockaddrInet6:
		unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	}
	if lsa, err := unix.Getsockname(fd); err == nil {
		c.Local = addrOfSockaddr(lsa)
	}
	c.init()
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		unix.Close(fd)
		return
	}
	s.addConnLocked(c)
	s.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lread, c.interest = true, evIn
	c.deadline = time.Now().Add(s.cfg.KeepAliveTimeout)
	if err := s.lp.Register(fd, evIn, c.onEvent); err != nil {
		c.interest = 0
		c.lostLocked()
		return
	}
	s.deadlineSoon(c.deadline)
}

// onEvent is a loop-mode connection's handler: write what waits, read what came.
func (c *Conn) onEvent(ev uint32) {
	defer c.guard()
	if ev&(evOut|evErrs) != 0 {
		c.mu.Lock()
		if c.writing && c.lp != nil {
			c.loopWriteLocked()
		}
		c.mu.Unlock()
	}
	if ev&(evIn|evErrs) != 0 {
		c.loopRead()
	}
	if ev&evErrs != 0 {
		// A hang-up or an error the reads did not end on (reading is off: paused, or
		// the request stopped it): the peer is gone both ways; level-triggered, it would
		// be reported again on every poll.
		c.mu.Lock()
		if c.lp != nil && c.fd >= 0 && !c.closed { // (closed: a lingering close reads on)
			c.lostLocked()
		}
		c.mu.Unlock()
	}
}

// loopRead reads and parses what the socket holds (up to a few buffers), queues the
// requests, and stops reading when the connection has no room.
func (c *Conn) loopRead() {
	s := c.s
	buf := s.rbuf
	for i := 0; i < 4; i++ {
		c.mu.Lock()
		if c.lp == nil || c.fd < 0 || !(c.lread && !c.paused || c.closed) {
			c.mu.Unlock()
			return
		}
		n, err := poller.RawRead(c.fd, buf) // non-blocking: no scheduler bookkeeping
		for err == unix.EINTR {
			n, err = poller.RawRead(c.fd, buf)
		}
		if c.closed { // a lingering close
			if n > 0 && c.lingerN > n && err == nil {
				c.lingerN -= n
				c.mu.Unlock()
				continue
			}
			if err != unix.EAGAIN {
				c.closeFdLocked() // the peer closed, or it sent more than we drop
			}
			c.mu.Unlock()
			return
		}
		if err == unix.EAGAIN {
			c.mu.Unlock()
			return
		}
		if n <= 0 || err != nil { // the peer closed or reset
			c.lostLocked()
			c.mu.Unlock()
			return
		}
		now := time.Now()
		c.mu.Unlock()
		data := buf[:n]
		if c.sniff {
			if c.sniff = false; h2Preface(data) {
				first := append([]byte(nil), data...)
				c.handOff(func() {
					if !c.startH2(first) {
						c.lost()
					}
				})
				return
			}
			if s.cfg.H2Only { // not HTTP/2: closed without an answer (RFC 9113 3.4)
				c.lost()
				return
			}
		}
		c.feed(data)
		c.pushBatch(false)
		c.mu.Lock()
		if !c.closed { // (closed: a lingering close's deadline)
			d, _ := c.readDeadlineLocked(now)
			d = minDeadline(d, c.writeDeadline())
			if d.Before(c.deadline) {
				s.deadlineSoon(d) // sooner than the timer may be armed for (a head's bound)
			}
			c.deadline = d
		}
		if c.stopRead {
			c.lread = false
			serve := c.upgraded()
			c.setInterestLocked()
			c.mu.Unlock()
			if serve != nil {
				c.handOff(serve) // a goroutine serves the protocol switched to
			}
			return
		}
		c.paused = c.fullLocked()
		c.setInterestLocked()
		c.mu.Unlock()
		if n < len(buf) {
			return
		}
	}
}

// loopRoomLocked: something changed that may give a paused connection room (c.mu held).
func (c *Conn) loopRoomLocked() {
	if !c.fullLocked() {
		c.paused = false
		c.setInterestLocked()
	}
}

// setInterestLocked registers the events the connection waits for (c.mu held).
func (c *Conn) setInterestLocked() {
	if c.fd < 0 {
		return
	}
	var want uint32
	if c.lread && !c.paused || c.closed { // closed: a lingering close
		want |= evIn
	}
	if c.writing {
		want |= evOut
	}
	if want != c.interest {
		c.interest = want
		c.lp.Modify(c.fd, want)
	}
}

// loopWriteLocked writes the output (bytes and held bodies with writev, files with
// sendfile(2)) until it is written or the socket is full; then the writable event goes on
// (c.mu held: the write never blocks, and no close can come between). Bytes are written
// loopWriteTurn at most a call: the rest on the next writable event (level-triggered: the
// poller's next round), so that many connections with large bodies take turns with the
// other events (accepts, reads) instead of each filling its kernel buffer (~4 MiB on
// loopback) before anything else is done.
func (c *Conn) loopWriteLocked() {
	turn := loopWriteTurn
	for !c.idleOutLocked() && !c.closed {
		if len(c.files) > 0 && c.files[0].at == 0 && c.files[0].f != nil { // a file is next
			again, ok := c.sendFileLoopLocked()
			if !ok {
				c.writing = false
				c.lostLocked()
				return
			}
			if again {
				c.waitWritableLocked()
				return
			}
			continue
		}
		n, want, err := c.writevLocked(turn)
		if err == unix.EAGAIN || (err == nil && n < want) {
			c.waitWritableLocked()
			return
		}
		if err != nil {
			c.writing = false
			c.lostLocked()
			return
		}
		if turn -= n; turn <= 0 && !c.idleOutLocked() {
			// its turn is over: the rest on the writable event. (The socket may be full
			// now, having taken the whole write: the response-rate clock starts, as on
			// EAGAIN; it stops when the output drains.)
			c.waitWritableLocked()
			return
		}
	}
	if c.writing {
		c.writing = false
		c.setInterestLocked()
	}
	if !c.closed {
		c.drainedLocked()
	}
}

// maxIov bounds the pieces of one writev (a response's head and held body, and those of
// a few pipelined responses).
const maxIov = 16

// loopWriteTurn is what loopWriteLocked writes at most a call (the output's bound).
const loopWriteTurn = 256 * 1024

// writevLocked writes the output up to the next file (bytes of out and held bodies) with
// one writev, at most max bytes (max > 0), consumes what the socket took and releases the
// held bodies it took whole.
func (c *Conn) writevLocked(max int) (n, want int, err error) {
	if len(c.files) == 0 && len(c.out) > 0 { // bytes only (the usual response): one write
		b := c.out[:min(len(c.out), max)]
		want = len(b)
		n, err = poller.RawWrite(c.fd, b)
		for err == unix.EINTR {
			n, err = poller.RawWrite(c.fd, b)
		}
		if n <= 0 {
			return 0, want, err
		}
		c.consumeLocked(n)
		return n, want, err
	}
	var iov [maxIov]unix.Iovec
	k, pos, all := 0, 0, true
	add := func(b []byte) { // (want < max)
		b = b[:min(len(b), max-want)]
		iov[k].Base = &b[0]
		iov[k].SetLen(len(b))
		k++
		want += len(b)
	}
	for _, fs := range c.files {
		if k >= maxIov-1 || want >= max {
			all = false
			break
		}
		if fs.at > pos {
			add(c.out[pos:fs.at])
			pos = fs.at
			if want >= max {
				all = false
				break
			}
		}
		if fs.f != nil {
			all = false
			break
		}
		add(fs.b)
	}
	if all && pos < len(c.out) && k < maxIov && want < max {
		add(c.out[pos:])
	}
	if k == 1 && len(c.files) == 0 {
		n, err = poller.RawWrite(c.fd, c.out[:want])
	} else {
		n, err = poller.RawWritev(c.fd, iov[:k])
	}
	for err == unix.EINTR {
		n, err = poller.RawWritev(c.fd, iov[:k])
	}
	if n <= 0 {
		return 0, want, err
	}
	// Consume n in the order written: out's bytes before each held body, the body.
	rem, outN, pos, drop := n, 0, 0, 0
	for i := range c.files {
		fs := &c.files[i]
		if d := fs.at - pos; d > 0 {
			t := min(d, rem)
			outN, rem, pos = outN+t, rem-t, pos+t
			if t < d {
				break
			}
		}
		if fs.f != nil || rem == 0 {
			break
		}
		t := min(len(fs.b), rem)
		c.wrote(t)
		fs.b, fs.n, c.heldN, rem = fs.b[t:], fs.n-int64(t), c.heldN-t, rem-t
		if len(fs.b) > 0 {
			break
		}
		fs.rel() // the kernel has the body: the caller may free it
		drop++
	}
	if drop > 0 {
		m := copy(c.files, c.files[drop:])
		clear(c.files[m:])
		c.files = c.files[:m]
	}
	c.consumeLocked(outN + rem) // rem: out's bytes after the last held body
	return n, want, err
}

// unholdLocked copies the held (and borrowed) bodies into out and releases them (a
// hand-off: the writer goroutine and the goroutine driver write only Go's memory).
func (c *Conn) unholdLocked() {
	if c.heldN == 0 {
		return
	}
	out := make([]byte, 0, len(c.out)+c.heldN)
	files, pos := c.files[:0], 0
	for _, fs := range c.files {
		out = append(out, c.out[pos:fs.at]...)
		pos = fs.at
		if fs.f != nil {
			fs.at = len(out)
			files = append(files, fs)
			continue
		}
		out = append(out, fs.b...)
		if fs.rel != nil { // nil: borrowed, the caller's to free
			fs.rel()
		}
	}
	out = append(out, c.out[pos:]...)
	clear(c.files[len(files):])
	c.files, c.out, c.heldN = files, out, 0
}

// waitWritableLocked: the socket is full; the rest is written on the writable event
// (the output is the writer's, as the goroutine driver's writer goroutine owns it).
func (c *Conn) waitWritableLocked() {
	if !c.writing {
		c.writing = true
		c.setInterestLocked()
	}
	if c.stall() { // the minimum response rate's clock (writerate.go)
		d := c.writeDeadline()
		if d.Before(c.deadline) || c.deadline.IsZero() {
			c.deadline = d
			c.s.deadlineSoon(d)
		}
	}
}

// sendFileLoopLocked sends the file at the front of the output with sendfile(2) at the
// segment's explicit offset (a zerocopysend file's position is the application's); again:
// the socket is full; !ok: the connection failed (or the file was cut short).
func (c *Conn) sendFileLoopLocked() (again, ok bool) {
	fs := &c.files[0]
	for fs.n > 0 {
		off := fs.off
		n, err := unix.Sendfile(c.fd, int(fs.f.Fd()), &off, int(min(fs.n, 1<<30)))
		if n > 0 {
			fs.n -= int64(n)
			fs.off += int64(n)
			c.wrote(n)
		}
		if err == unix.EAGAIN {
			return true, true
		}
		if err != unix.EINTR && (err != nil || n <= 0) {
			break // an error, or the file is shorter than it was
		}
	}
	ok = fs.n == 0
	fs.f.Close()
	c.popFileLocked()
	return false, ok
}

// loopCloseLocked closes a loop-mode connection whose work is done (closeLocked's):
// after the server's own error answers, a lingering close.
func (c *Conn) loopCloseLocked() {
	if c.fd < 0 {
		return
	}
	unix.Shutdown(c.fd, unix.SHUT_WR)
	if c.linger {
		c.lingerN = lingerMax
		c.deadline = time.Now().Add(lingerTime)
		c.s.deadlineSoon(c.deadline)
		c.setInterestLocked()
		return
	}
	c.closeFdLocked()
}

// loopLostLocked is lostLocked's end for a loop-mode connection: the descriptor is closed now.
func (c *Conn) loopLostLocked() {
	if !c.closed || c.fd >= 0 { // open, or a lingering close
		c.closed = true
		c.closeFdLocked()
	}
}

// closeFdLocked closes the descriptor (ending a lingering close) and forgets the connection.
func (c *Conn) closeFdLocked() {
	if c.fd >= 0 {
		c.lp.Unregister(c.fd)
		unix.Close(c.fd)
		c.fd = -1
	}
	c.s.forget(c)
}

// handOff gives the connection to the goroutine driver: its descriptor becomes a
// net.Conn (Go's netpoller) and run reads it in a goroutine (h2c, WebSocket).
func (c *Conn) handOff(run func()) {
	c.mu.Lock()
	if c.lp == nil || c.fd < 0 {
		c.mu.Unlock()
		return
	}
	lp, fd := c.lp, c.fd
	lp.Unregister(fd)
	c.lp, c.fd, c.interest = nil, -1, 0
	f := os.NewFile(uintptr(fd), "conn")
	nc, err := net.FileConn(f) // a duplicate
	f.Close()
	if err != nil { // the descriptor is closed: the connection is lost
		c.lp = lp
		c.lostLocked()
		c.mu.Unlock()
		return
	}
	c.setNetConn(nc)
	c.unholdLocked()
	if c.writing { // a write waits for room: the writer goroutine goes on with it
		go c.writer()
	}
	c.mu.Unlock()
	go func() {
		defer c.guard()
		run()
	}()
}

// loopTimer is the loop driver's timerfd: armed for the earliest deadline of the
// server's loop-mode connections and paused listeners.
type loopTimer struct {
	mu sync.Mutex
	fd int       // -1: not made yet; -2: stopped (Abort)
	at time.Time // armed for (zero: not armed)
}

// deadlineSoon arms the timer for t unless it is armed for earlier.
func (s *Server) deadlineSoon(t time.Time) {
	lt := &s.lt
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.fd == -2 || (!lt.at.IsZero() && !t.Before(lt.at)) {
		return
	}
	if s.timerLocked() != nil {
		return
	}
	lt.at = t
	d := max(time.Until(t), time.Microsecond)
	unix.TimerfdSettime(lt.fd, 0, &unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}, nil)
}

// timerLocked makes the server's timerfd if it has none yet (s.lt.mu held).
func (s *Server) timerLocked() error {
	lt := &s.lt
	if lt.fd >= 0 {
		return nil
	}
	if lt.fd == -2 {
		return ErrServerClosed
	}
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return err
	}
	if err := s.lp.Register(fd, evIn, s.onTimer); err != nil {
		unix.Close(fd)
		return err
	}
	lt.fd = fd
	return nil
}

// stopTimer closes the timer (Abort: no loop-mode connection is left).
func (s *Server) stopTimer() {
	lt := &s.lt
	lt.mu.Lock()
	if lt.fd >= 0 {
		s.lp.Unregister(lt.fd)
		unix.Close(lt.fd)
	}
	lt.fd, lt.at = -2, time.Time{}
	lt.mu.Unlock()
}

// onTimer: deadlines passed. An idle connection past its keep-alive deadline (or past the
// grace of a closing server) is closed, a busy one gets another period (as the goroutine
// driver's read deadline); a lingering close ends; paused listeners resume.
func (s *Server) onTimer(uint32) {
	lt := &s.lt
	lt.mu.Lock()
	if lt.fd < 0 {
		lt.mu.Unlock()
		return
	}
	var b [8]byte
	unix.Read(lt.fd, b[:])
	lt.at = time.Time{}
	lt.mu.Unlock()
	now := time.Now()
	s.mu.Lock()
	list := s.sweep[:0]
	for c := range s.conns {
		list = append(list, c)
	}
	lls := append([]*loopListener(nil), s.lls...)
	s.mu.Unlock()
	var next time.Time
	soonest := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for i, c := range list {
		list[i] = nil
		soonest(c.expire(now))
	}
	s.sweep = list[:0]
	for _, ll := range lls {
		soonest(ll.resume(now))
	}
	if !next.IsZero() {
		s.deadlineSoon(next)
	}
}

// expire handles a loop-mode connection whose deadline passed (deadline.go's rules; a
// lingering close ends) and returns its next deadline (zero: none).
func (c *Conn) expire(now time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lp == nil || c.fd < 0 {
		return time.Time{}
	}
	if c.deadline.IsZero() || now.Before(c.deadline) {
		return c.deadline
	}
	if c.closed { // a lingering close
		c.closeFdLocked()
		return time.Time{}
	}
	if c.writing && c.writeOverdue(now) { // a client reading too slowly (writerate.go)
		c.respTimedOutLocked()
		return time.Time{}
	}
	kind, next := c.overdueLocked(now)
	if kind != dlIdle {
		c.deadline = time.Time{}
		c.mu.Unlock()
		c.timedOut(kind) // the 408's lingering close sets the next deadline
		c.mu.Lock()
		if c.lp == nil || c.fd < 0 {
			return time.Time{}
		}
		c.lread = false
		c.setInterestLocked()
		if c.deadline.IsZero() && !c.closed { // the 408 waits for the socket: keep-alive's rules
			c.deadline = now.Add(c.s.cfg.KeepAliveTimeout)
		}
		return c.deadline
	}
	if next.IsZero() { // idle
		if c.lread && !c.paused && inputWaits(c.fd) {
			// Its next request came with the deadline and is not read yet (the timer's
			// event came first in the poll's batch, or the loop was busy): closing now
			// would reset the connection (a socket closed with unread input sends RST)
			// and lose the request. The readable event reads it.
			c.deadline = now.Add(c.s.cfg.KeepAliveTimeout)
			return c.deadline
		}
		c.lostLocked()
		return time.Time{}
	}
	c.deadline = minDeadline(next, c.writeDeadline())
	return c.deadline
}

// inputWaits: the socket holds input not read yet.
func inputWaits(fd int) bool {
	n, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
	return err == nil && n > 0
}
