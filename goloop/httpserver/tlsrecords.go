package httpserver

// tlsrecords.go: the output of a TLS connection. tlsConn encrypts on the thread that flushes
// (the loop's) and writes the records with the same non-blocking write as a plain connection;
// tlsSink, the TCP connection under it, queues the records crypto/tls makes and has one owner
// of the socket's output at a time, so records leave in the order they were made. tls.go has
// the configuration and the handshake.

import (
	"crypto/tls"
	"net"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// tlsConn is a TLS connection whose records are written by the connection's flush: Flush
// encrypts the output on the calling thread (the loop's) and writes the records with the
// same non-blocking write as a plain connection; what the socket does not take is left to
// the writer goroutine. Its Close does not wait: tls.Conn.Close sends close_notify with a
// write that may block (up to 5 s on a peer that does not read), and the engine closes
// connections with its lock held, perhaps on the loop thread.
type tlsConn struct {
	*tls.Conn
	sink   *tlsSink
	ts     *tlsState
	s      *Server
	loaded *tlsLoaded // set by the handshake (configFor)
	cert   int        // the certificate it picked

	mu      sync.Mutex
	closed  bool
	tracked *Conn // TrackClose: an EvConnClosed is queued when it closes
}

func (t *tlsConn) Close() error {
	t.mu.Lock()
	tracked := t.tracked
	if t.closed {
		tracked = nil
	}
	t.closed = true
	t.mu.Unlock()
	if tracked != nil {
		t.s.push(Event{Kind: EvConnClosed, Req: &Request{c: tracked}})
	}
	go t.Conn.Close()
	return nil
}

// Write is the writer goroutine's (blocking): it owns the output while it encrypts p, a
// chunk at a time, and writes each chunk's records at once; they are on the socket when it
// returns.
func (t *tlsConn) Write(p []byte) (n int, err error) {
	k := t.sink
	for n < len(p) && err == nil {
		k.mu.Lock()
		for k.owned {
			k.cond.Wait()
		}
		k.owned = true
		k.mu.Unlock()
		m := min(len(p)-n, tlsChunk)
		_, err = t.Conn.Write(p[n : n+m]) // the records queue in pend
		n += m
		if werr := k.writeAll(); err == nil {
			err = werr
		}
	}
	return n, err
}

// tlsChunk is how much plaintext a non-blocking write encrypts before it tries the socket:
// the loop thread encrypts no more than about what the socket takes.
const tlsChunk = 64 << 10

// tryWrite encrypts plain (up to where the socket is full) and writes the records without
// blocking. n: the plaintext bytes taken; EAGAIN: records wait in the sink (the socket is
// full, or another writer owns it) and the writer goroutine must drain them.
func (t *tlsConn) tryWrite(plain []byte) (n int, err error) {
	k := t.sink
	if k.rc == nil { // no descriptor: everything goes through the writer goroutine
		return 0, unix.EAGAIN
	}
	k.mu.Lock()
	if k.owned { // a blocking write is under way (handshake, alert, close_notify)
		k.mu.Unlock()
		return 0, unix.EAGAIN
	}
	k.owned = true
	k.mu.Unlock()
	for {
		m := min(len(plain)-n, tlsChunk)
		if _, err = t.Conn.Write(plain[n : n+m]); err != nil { // records appended to k.pend
			k.mu.Lock()
			k.releaseLocked()
			k.mu.Unlock()
			return n, err
		}
		n += m
		last := n == len(plain)
		if err = k.writeSome(last); err != nil || last {
			return n, err
		}
	}
}

// tlsSink is the TCP connection under a TLS connection: crypto/tls reads the socket, and
// the records it writes queue in pend. Whoever owns the socket's output writes pend: the
// flush's non-blocking write, or a blocking writer (the writer goroutine; the reader
// goroutine for the handshake and alerts; Close for close_notify). A record written while
// the output is owned is left to the owner, which writes pend until it is empty before it
// lets go; so records leave in the order crypto/tls made them (its write lock orders the
// appends).
type tlsSink struct {
	net.Conn
	rc    syscall.RawConn
	mu    sync.Mutex
	cond  sync.Cond // the output was let go
	pend  []byte    // records not written yet
	owned bool
	err   error // a write failed: every later write fails
	conn  *Conn // the connection (nil until it has one): its minimum response rate's clock
}

// Write queues a record; if no one owns the output, the caller writes pend (blocking).
func (k *tlsSink) Write(p []byte) (int, error) {
	k.mu.Lock()
	if k.err != nil {
		err := k.err
		k.mu.Unlock()
		return 0, err
	}
	k.pend = append(k.pend, p...)
	if k.owned {
		k.mu.Unlock()
		return len(p), nil
	}
	k.owned = true
	k.mu.Unlock()
	if err := k.writeAll(); err != nil {
		return 0, err
	}
	return len(p), nil
}

// drain waits for the output to be free and writes pend (blocking).
func (k *tlsSink) drain() error {
	k.mu.Lock()
	for k.owned {
		k.cond.Wait()
	}
	if len(k.pend) == 0 || k.err != nil {
		err := k.err
		k.mu.Unlock()
		return err
	}
	k.owned = true
	k.mu.Unlock()
	return k.writeAll()
}

// writeAll writes pend with blocking writes and lets the output go (owner).
func (k *tlsSink) writeAll() error {
	k.mu.Lock()
	for len(k.pend) > 0 && k.err == nil {
		b := k.pend // appends made during the write land after b (or in a new array)
		k.mu.Unlock()
		n, err := k.Conn.Write(b)
		k.mu.Lock()
		if c := k.conn; c != nil {
			c.wrote(n)
			if err != nil && c.writeGoesOn(err) { // slow, within the minimum rate
				k.consumeLocked(n, nil)
				continue
			}
		}
		k.consumeLocked(len(b), err)
	}
	err := k.err
	k.releaseLocked()
	k.mu.Unlock()
	return err
}

// writeSome writes pend with non-blocking writes (owner). It lets the output go when pend
// is empty and release is set, or on an error (EAGAIN: the socket is full).
func (k *tlsSink) writeSome(release bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	for len(k.pend) > 0 {
		b := k.pend
		k.mu.Unlock()
		n, err := rawWrite(k.rc, b)
		k.mu.Lock()
		if err == nil && n < len(b) {
			err = unix.EAGAIN
		}
		if err == unix.EAGAIN {
			k.consumeLocked(n, nil)
			k.releaseLocked()
			return err
		}
		k.consumeLocked(n, err)
		if err != nil {
			k.releaseLocked()
			return err
		}
	}
	if release {
		k.releaseLocked()
	}
	return nil
}

// consumeLocked drops the first n bytes of pend, written; err: the socket failed.
func (k *tlsSink) consumeLocked(n int, err error) {
	switch {
	case err != nil:
		k.err, k.pend = err, nil
	case n >= len(k.pend):
		k.pend = k.pend[:0]
		if cap(k.pend) > tlsChunk*2 {
			k.pend = nil
		}
	default:
		m := copy(k.pend, k.pend[n:])
		k.pend = k.pend[:m]
	}
}

func (k *tlsSink) releaseLocked() {
	k.owned = false
	k.cond.Broadcast()
}

// CloseWrite shuts the TCP connection's write side (lingering close, HTTP/2's fatal GOAWAY).
func (k *tlsSink) CloseWrite() error {
	if cw, ok := k.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// shutWrite shuts c's write side (lingering close, HTTP/2's fatal GOAWAY); a TLS connection
// sends close_notify first (its records go out before the TCP connection's FIN).
func (c *Conn) shutWrite() {
	nc := c.nc
	if t, ok := nc.(*tlsConn); ok {
		t.Conn.CloseWrite() // close_notify (written like any record: the sink)
		nc = t.NetConn()
	}
	if cw, ok := nc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// drainTLS writes the records a flush left queued (the writer goroutine, before the rest
// of the output). An error: the connection failed.
func (c *Conn) drainTLS() error {
	if t, ok := c.nc.(*tlsConn); ok {
		return t.sink.drain()
	}
	return nil
}

// canBorrowLocked: a body part may be borrowed (not copied) for the length of its send,
// whose flush encrypts it at once: a TLS connection in HTTP/1.1 whose output is not being
// written by the writer goroutine, with no file queued (c.mu held).
func (c *Conn) canBorrowLocked() bool {
	_, ok := c.nc.(*tlsConn)
	// (no check for HTTP/2: over TLS, ALPN chose it before any HTTP/1.1 request)
	return ok && c.lp == nil && !c.writing && len(c.files) == 0
}
