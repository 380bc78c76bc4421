package httpserver

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// reuseConn serves one loop-mode connection (benchConn's) with the handler called by hand.
type reuseConn struct {
	t      *testing.T
	s      *Server
	h      func(uint32)
	client int
	evs    []Event
	rbuf   []byte
}

func newReuseConn(t *testing.T, reuse bool) *reuseConn {
	s, h, client := benchConn(t, Config{ReuseRequests: reuse})
	return &reuseConn{t: t, s: s, h: h, client: client, rbuf: make([]byte, 4096)}
}

// send writes raw, runs the read handler and returns the events it queued.
func (rc *reuseConn) send(raw string) []Event {
	_, err := unix.Write(rc.client, []byte(raw))
	require.NoError(rc.t, err)
	rc.h(evIn)
	rc.evs = rc.s.Take(rc.evs[:0])
	return rc.evs
}

// answer completes r as the WSGI pool does and returns the response the client got.
func (rc *reuseConn) answer(r *Request, body string) string {
	require.NoError(rc.t, r.StartReason(200, []byte("OK"), []byte("Content-Type: text/plain\r\n")))
	_, err := r.Send([]byte(body), false)
	require.NoError(rc.t, err)
	r.Done(false)
	rc.s.Flush()
	n, err := unix.Read(rc.client, rc.rbuf)
	require.NoError(rc.t, err)
	return string(rc.rbuf[:n])
}

func heads(r *Request) []string {
	var hs []string
	for i := 0; i < r.NumHeaders(); i++ {
		n, v := r.Header(i)
		hs = append(hs, string(n)+"="+string(v))
	}
	return append(hs, string(r.Method()), string(r.RawPath()), string(r.Query()), string(r.Path()))
}

// With ReuseRequests (the WSGI pool's), a keep-alive connection's next request is its
// finished one, made new: nothing of the previous request shows (head, body, response
// state, Tag), and a request cycle allocates nothing. A request an EvWake was queued for
// (it may still be in the queue) is not reused; without ReuseRequests none is.
func TestReuseRequests(t *testing.T) {
	rc := newReuseConn(t, true)
	evs := rc.send("GET /a%20b?x=1 HTTP/1.1\r\nHost: one\r\nX-One: 1\r\n\r\n")
	require.Len(t, evs, 1)
	r1 := evs[0].Req
	require.Equal(t, []string{"host=one", "x-one=1", "GET", "/a%20b", "x=1", "/a b"}, heads(r1))
	r1.Tag = unsafe.Pointer(rc) // the binding's state
	resp := rc.answer(r1, "first")
	require.True(t, strings.HasPrefix(resp, "HTTP/1.1 200 OK\r\n"), resp)
	require.True(t, strings.HasSuffix(resp, "\r\n\r\nfirst"), resp)

	evs = rc.send("POST /b HTTP/1.1\r\nHost: two\r\nContent-Length: 3\r\n\r\nabc")
	require.Len(t, evs, 1)
	r2 := evs[0].Req
	require.Same(t, r1, r2, "reused")
	require.Nil(t, r2.Tag)
	require.Equal(t, []string{"host=two", "content-length=3", "POST", "/b", "", "/b"}, heads(r2))
	require.Equal(t, 0, r2.Status())
	b, st := r2.Receive()
	require.Equal(t, "abc", string(b))
	require.Equal(t, RecvLast, st)
	resp = rc.answer(r2, "second!")
	require.True(t, strings.HasSuffix(resp, "content-length: 7\r\n\r\nsecond!"), resp)

	// the application waits for the body: an EvWake is queued, so the request is not reused
	evs = rc.send("POST /c HTTP/1.1\r\nHost: three\r\nContent-Length: 2\r\n\r\n")
	require.Len(t, evs, 1)
	r3 := evs[0].Req
	require.Same(t, r1, r3)
	_, st = r3.Receive()
	require.Equal(t, RecvWait, st)
	evs = rc.send("hi")
	require.Len(t, evs, 1)
	require.Equal(t, EvWake, evs[0].Kind)
	b, st = r3.Receive()
	require.Equal(t, "hi", string(b))
	require.Equal(t, RecvLast, st)
	rc.answer(r3, "third")
	evs = rc.send("GET /d HTTP/1.1\r\nHost: four\r\n\r\n")
	require.Len(t, evs, 1)
	r4 := evs[0].Req
	require.NotSame(t, r3, r4)
	rc.answer(r4, "fourth")

	req := []byte("GET / HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n\r\n")
	reason, hdr, body := []byte("OK"), []byte("Content-Length: 13\r\n"), []byte("Hello, World!")
	allocs := testing.AllocsPerRun(100, func() {
		unix.Write(rc.client, req)
		rc.h(evIn)
		rc.evs = rc.s.Take(rc.evs[:0])
		r := rc.evs[0].Req
		rc.evs[0] = Event{}
		r.StartReason(200, reason, hdr)
		r.Send(body, false)
		r.Done(false)
		rc.s.Flush()
		unix.Read(rc.client, rc.rbuf)
	})
	require.Zero(t, allocs, "allocations per keep-alive request")

	plain := newReuseConn(t, false)
	p1 := plain.send(string(req))[0].Req
	plain.answer(p1, "x")
	p2 := plain.send(string(req))[0].Req
	require.NotSame(t, p1, p2)
	plain.answer(p2, "y")
}

// Without ReuseRequests, a request finished by FinishReleased (the ASGI binding's, when the
// application's call ends and nothing refers to the request) is reused as with it; one
// finished by Finish, or one an EvWake was queued for, is not.
func TestFinishReleasedReuses(t *testing.T) {
	rc := newReuseConn(t, false)
	finish := func(r *Request, body string, released bool) string {
		require.NoError(t, r.StartReason(200, []byte("OK"), []byte("Content-Type: text/plain\r\n")))
		_, err := r.Send([]byte(body), false)
		require.NoError(t, err)
		if released {
			require.Equal(t, FinishOK, r.FinishReleased(false))
		} else {
			require.Equal(t, FinishOK, r.Finish(false))
		}
		rc.s.Flush()
		n, err := unix.Read(rc.client, rc.rbuf)
		require.NoError(t, err)
		return string(rc.rbuf[:n])
	}
	r1 := rc.send("GET /a HTTP/1.1\r\nHost: one\r\nX-One: 1\r\n\r\n")[0].Req
	require.True(t, strings.HasSuffix(finish(r1, "first", true), "\r\n\r\nfirst"))
	r2 := rc.send("GET /b?q HTTP/1.1\r\nHost: two\r\n\r\n")[0].Req
	require.Same(t, r1, r2, "reused")
	require.Equal(t, []string{"host=two", "GET", "/b", "q", "/b"}, heads(r2))
	require.Equal(t, 0, r2.Status())
	require.True(t, strings.HasSuffix(finish(r2, "second", false), "\r\n\r\nsecond"))
	r3 := rc.send("GET /c HTTP/1.1\r\nHost: three\r\n\r\n")[0].Req
	require.NotSame(t, r2, r3, "Finish: not reused")

	// the application waited for the body: an EvWake was queued, FinishReleased does not reuse
	require.True(t, strings.HasSuffix(finish(r3, "third", true), "\r\n\r\nthird"))
	r4 := rc.send("POST /d HTTP/1.1\r\nHost: four\r\nContent-Length: 2\r\n\r\n")[0].Req
	require.Same(t, r3, r4)
	_, st := r4.Receive()
	require.Equal(t, RecvWait, st)
	evs := rc.send("hi")
	require.Equal(t, EvWake, evs[0].Kind)
	r4.Receive()
	finish(r4, "fourth", true)
	r5 := rc.send("GET /e HTTP/1.1\r\nHost: five\r\n\r\n")[0].Req
	require.NotSame(t, r4, r5)
	finish(r5, "fifth", true)
}

// TakeWhole takes an HTTP/1.1 body only once all of it arrived, into room enough for it
// (or says how much room it needs), never waits for the connection's lock, and a head that
// announced no body has an empty one.
func TestTakeWhole(t *testing.T) {
	rc := newReuseConn(t, false)
	evs := rc.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	require.Len(t, evs, 1)
	n, ok := evs[0].Req.TakeWhole(nil)
	require.Equal(t, 0, n)
	require.True(t, ok)
	rc.answer(evs[0].Req, "get")

	evs = rc.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nabc")
	require.Len(t, evs, 1)
	r := evs[0].Req
	dst := make([]byte, 16)
	n, ok = r.TakeWhole(dst)
	require.False(t, ok, "not all of it arrived")
	require.Equal(t, 0, n)
	require.Empty(t, rc.send("def"), "nobody waits for it: no wake-up")
	n, ok = r.TakeWhole(dst[:4])
	require.False(t, ok)
	require.Equal(t, 6, n, "the room it needs")
	r.c.mu.Lock()
	n, ok = r.TakeWhole(dst)
	r.c.mu.Unlock()
	require.False(t, ok, "the connection's lock is busy")
	require.Equal(t, 0, n)
	n, ok = r.TakeWhole(dst)
	require.True(t, ok)
	require.Equal(t, "abcdef", string(dst[:n]))
	n, ok = r.TakeWhole(dst)
	require.False(t, ok, "taken once")
	require.Equal(t, 0, n)
	_, st := r.Receive()
	require.Equal(t, RecvWait, st, "nothing more to receive")
	rc.answer(r, "post")

	evs = rc.send("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
	require.Len(t, evs, 2)
	require.Equal(t, Event{Kind: EvWake, Req: r}, evs[0], "the receiver told its response ended")
	n, ok = evs[1].Req.TakeWhole(dst)
	require.True(t, ok)
	require.Equal(t, "abc", string(dst[:n]))
	rc.answer(evs[1].Req, "chunked")

	// the memory a taken body was read into goes to a next body (sync.Pool: when no garbage
	// collection came between, and on the same P; pinned here by locking the thread)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for bodyMem.Get() != nil { // (the bodies taken above)
	}
	b := make([]byte, 0, 64)
	bodyMem.Put(&b)
	evs = rc.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nxy")
	require.Len(t, evs, 1)
	r.c.mu.Lock()
	got := &evs[0].Req.body[0]
	r.c.mu.Unlock()
	if !raceOn {
		require.Same(t, &b[:1][0], got)
	}
	n, ok = evs[0].Req.TakeWhole(dst)
	require.True(t, ok)
	require.Equal(t, "xy", string(dst[:n]))
	rc.answer(evs[0].Req, "again")
}

// A client that pipelines more requests in one write than MaxPipeline: the application gets
// MaxPipeline of them, the others one by one as answered ones leave; those it never got
// leave the in-flight count when the client goes.
func TestPipelineDeferred(t *testing.T) {
	rc := newReuseConn(t, false)
	max := rc.s.cfg.MaxPipeline
	var raw strings.Builder
	for i := 0; i < max+8; i++ {
		fmt.Fprintf(&raw, "GET /%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
	}
	evs := append([]Event(nil), rc.send(raw.String())...)
	require.Len(t, evs, max)
	require.EqualValues(t, max+8, rc.s.inflight.Load())
	first := evs[0].Req
	require.Equal(t, "/0", string(first.Path()))
	rc.answer(first, "zero")
	evs = rc.s.Take(nil)
	require.Len(t, evs, 1, "one more handed over")
	require.Equal(t, EvRequest, evs[0].Kind)
	require.Equal(t, fmt.Sprintf("/%d", max), string(evs[0].Req.Path()))

	unix.Shutdown(rc.client, unix.SHUT_RDWR) // the client goes: 7 never handed over (reading is paused: a hang-up)
	rc.h(evIn | unix.EPOLLHUP)
	require.Empty(t, rc.s.Take(nil))
	require.EqualValues(t, max, rc.s.inflight.Load(), "those the application has")
}

// A deferred request dropped before the application got it (a body's timeout drops the
// request being read) leaves the in-flight count and is never handed over.
func TestPipelineDeferredDropped(t *testing.T) {
	rc := newReuseConn(t, false)
	max := rc.s.cfg.MaxPipeline
	var raw strings.Builder
	for i := 0; i < max; i++ {
		fmt.Fprintf(&raw, "GET /%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
	}
	raw.WriteString("POST /late HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab")
	evs := append([]Event(nil), rc.send(raw.String())...)
	require.Len(t, evs, max)
	c := evs[0].Req.c
	c.mu.Lock()
	require.Len(t, c.deferred, 1)
	late := c.deferred[0]
	c.dropLocked(late)
	c.mu.Unlock()
	require.Equal(t, "/late", string(late.Path()))
	require.True(t, late.appDone)
	require.EqualValues(t, max, rc.s.inflight.Load())
	rc.answer(evs[0].Req, "zero")
	require.Empty(t, rc.s.Take(nil), "the dropped one is not handed over")
}

// A body part Receive returned and the caller released holds the next part read (any
// connection's): a body read in parts does not take new memory for each.
func TestReceiveRelease(t *testing.T) {
	rc := newReuseConn(t, false)
	runtime.LockOSThread() // (sync.Pool: the same P, as in TestTakeWhole)
	defer runtime.UnlockOSThread()
	evs := rc.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nabc")
	require.Len(t, evs, 1)
	r := evs[0].Req
	for bodyMem.Get() != nil {
	}
	b, st := r.Receive()
	require.Equal(t, RecvBody, st)
	require.Equal(t, "abc", string(b))
	first := &b[:1][0]
	r.Release(b)
	_, st = r.Receive()
	require.Equal(t, RecvWait, st)
	evs = rc.send("def")
	require.Equal(t, []Event{{Kind: EvWake, Req: r}}, evs)
	r.c.mu.Lock()
	got := &r.body[0]
	r.c.mu.Unlock()
	if !raceOn {
		require.Same(t, first, got, "the released part's memory")
	}
	b, st = r.Receive()
	require.Equal(t, RecvLast, st)
	require.Equal(t, "def", string(b))
	r.Release(b)

	huge := make([]byte, 0, 2*(rc.s.cfg.BodyBuffer+loopReadBuffer)+1)
	r.Release(huge)
	if b, _ := bodyMem.Get().(*[]byte); !raceOn {
		require.NotNil(t, b, "the last part's memory")
		require.NotEqual(t, cap(huge), cap(*b), "more than a body read without pausing grows to is not kept")
	}
	rc.answer(r, "ok")
}

// ReceiveTo copies what fits and keeps the rest for the next call; the last part is
// RecvLast only once all of the body was taken.
func TestReceiveTo(t *testing.T) {
	rc := newReuseConn(t, false)
	evs := rc.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabcdef")
	require.Len(t, evs, 1)
	r := evs[0].Req
	dst := make([]byte, 4)
	n, st := r.ReceiveTo(dst)
	require.Equal(t, RecvBody, st)
	require.Equal(t, "abcd", string(dst[:n]))
	n, st = r.ReceiveTo(dst)
	require.Equal(t, RecvBody, st)
	require.Equal(t, "ef", string(dst[:n]))
	n, st = r.ReceiveTo(dst)
	require.Equal(t, RecvWait, st)
	require.Zero(t, n)
	require.Equal(t, []Event{{Kind: EvWake, Req: r}}, rc.send("ghij"))
	n, st = r.ReceiveTo(dst[:3])
	require.Equal(t, RecvBody, st, "a byte left: not the last part yet")
	require.Equal(t, "ghi", string(dst[:n]))
	n, st = r.ReceiveTo(dst[:0])
	require.Equal(t, RecvBody, st, "no room: nothing taken")
	require.Zero(t, n)
	n, st = r.ReceiveTo(dst)
	require.Equal(t, RecvLast, st)
	require.Equal(t, "j", string(dst[:n]))
	n, st = r.ReceiveTo(dst)
	require.Equal(t, RecvWait, st)
	rc.answer(r, "ok")
}
