package main

// goloop.http (the parser binding, doc.go): httptools' HttpRequestParser/HttpResponseParser
// and parse_url over goloop/httpparser. feed_data parses in Go and records the events in a C
// batch that parser.c then delivers to the protocol's callbacks.

/*
#include "parser.h"
#include <stdlib.h>
*/
import "C"

import (
	"unsafe"

	"github.com/goloop/goloop/goloop/httpparser"
	"github.com/goloop/goloop/goloop/idtable"
)

// hparser is the Go state behind one goloop.http parser object. It is the parser's
// Handler: each event is recorded into the C batch of the current feed_data (with the
// state the getters must return at that point); C dispatches the batch to the protocol's
// callbacks once Go has returned, so parsing needs no Go->C call per event.
type hparser struct {
	p        *httpparser.Parser
	self     *C.GLHttpParser
	response bool
	b        *C.GLHttpBatch // batch of the feed_data in progress
	base     uintptr        // the input of that feed_data
	end      uintptr
	// h.p.StateKey() when sword was computed, and state() then
	skey, sword uint64
}

// httpParsers maps GLHttpParser.id to its Go state; parsers of several threads use it at once.
var httpParsers idtable.Table[hparser]

func hparserOf(self *C.GLHttpParser) *hparser {
	return httpParsers.Get(int(self.id))
}

const evSize = C.sizeof_GLHttpEvent

// place returns where the bytes of s are for C: in the input (an offset from its start),
// or copied to the batch's arena (inArena). The parser's own buffers are reused by later
// lines of the same feed, so their bytes must be copied before C reads them.
func (h *hparser) place(s []byte) (off, n C.Py_ssize_t, inArena bool) {
	ptr := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	if ptr-h.base < h.end-h.base && ptr+uintptr(len(s)) <= h.end {
		return C.Py_ssize_t(ptr - h.base), C.Py_ssize_t(len(s)), false
	}
	return h.copyToArena(s), C.Py_ssize_t(len(s)), true
}

func (h *hparser) copyToArena(s []byte) C.Py_ssize_t {
	b := h.b
	need := b.alen + C.Py_ssize_t(len(s))
	if need > b.acap {
		c := 2 * b.acap
		if c < 1024 {
			c = 1024
		}
		for c < need {
			c *= 2
		}
		a := C.realloc(unsafe.Pointer(b.arena), C.size_t(c))
		if a == nil {
			panic("out of memory")
		}
		b.arena, b.acap = (*C.char)(a), c
	}
	off := b.alen
	copy(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(b.arena), off)), len(s)), s)
	b.alen = need
	return off
}

// event appends an event with the parser's current state to the batch.
func (h *hparser) event(kind uint64) *C.GLHttpEvent {
	b := h.b
	n := b.nev
	if n == b.evcap {
		h.growEvents()
	}
	ev := (*C.GLHttpEvent)(unsafe.Add(unsafe.Pointer(b.ev), uintptr(n)*evSize))
	b.nev = n + 1
	// The first 16 bytes (kind, major, minor, keep_alive, upgrade, arena; status) in two
	// stores: field by field they cost several narrow stores each.
	if k := h.p.StateKey(); k != h.skey {
		h.skey, h.sword = k, h.state()
	}
	w := (*[2]uint64)(unsafe.Pointer(ev))
	w[0] = kind | h.sword
	w[1] = h.skey >> 32 // the status (and zero padding)
	return ev
}

// state packs major, minor, keep_alive and upgrade as GLHttpEvent's bytes 1-4.
func (h *hparser) state() uint64 {
	p := h.p
	s := uint64(p.Major())<<8 | uint64(p.Minor())<<16
	if p.ShouldKeepAlive() {
		s |= 1 << 24
	}
	if p.ShouldUpgrade() {
		s |= 1 << 32
	}
	return s
}

func (h *hparser) growEvents() {
	b := h.b
	c := 2 * b.evcap
	if c < 64 {
		c = 64
	}
	e := C.realloc(unsafe.Pointer(b.ev), C.size_t(c)*evSize)
	if e == nil {
		panic("out of memory")
	}
	b.ev, b.evcap = (*C.GLHttpEvent)(e), c
}

// push records an event and its data (s1, s2 may be empty).
func (h *hparser) push(kind uint64, s1, s2 []byte) {
	ev := h.event(kind)
	var arena C.uchar
	var in bool
	ev.off1, ev.len1, ev.off2, ev.len2 = 0, 0, 0, 0
	if len(s1) > 0 {
		if ev.off1, ev.len1, in = h.place(s1); in {
			arena = 1
		}
	}
	if len(s2) > 0 {
		if ev.off2, ev.len2, in = h.place(s2); in {
			arena |= 2
		}
	}
	ev.arena = arena
}

// push1 records an event with one piece of data.
func (h *hparser) push1(kind uint64, s []byte) {
	ev := h.event(kind)
	ev.off2, ev.len2 = 0, 0
	if len(s) == 0 {
		ev.off1, ev.len1 = 0, 0
		return
	}
	var in bool
	if ev.off1, ev.len1, in = h.place(s); in {
		ev.arena = 1
	}
}

func (h *hparser) push0(kind uint64) { h.event(kind) }

func (h *hparser) OnMessageBegin() error { h.push0(C.GL_HCB_MESSAGE_BEGIN); return nil }

// OnURL is always wanted by a request parser: its event carries the method to C (in the
// event itself when it has at most 8 bytes, the usual case).
func (h *hparser) OnURL(url []byte) error {
	m := h.p.Method()
	if len(m) > 8 {
		h.push(C.GL_HCB_URL, url, m)
		return nil
	}
	ev := h.event(C.GL_HCB_URL | 4<<40)
	var packed uint64
	for i := len(m) - 1; i >= 0; i-- {
		packed = packed<<8 | uint64(m[i])
	}
	ev.off2, ev.len2 = C.Py_ssize_t(packed), C.Py_ssize_t(len(m))
	ev.off1, ev.len1 = 0, 0
	if len(url) > 0 {
		var in bool
		if ev.off1, ev.len1, in = h.place(url); in {
			ev.arena = 1 | 4
		}
	}
	return nil
}
func (h *hparser) OnStatus(reason []byte) error { h.push1(C.GL_HCB_STATUS, reason); return nil }
func (h *hparser) OnHeader(name, value []byte) error {
	// The usual case inline: both in the input (event leaves arena 0).
	np := uintptr(unsafe.Pointer(unsafe.SliceData(name)))
	vp := uintptr(unsafe.Pointer(unsafe.SliceData(value)))
	base, end := h.base, h.end
	if np-base < end-base && np+uintptr(len(name)) <= end && vp-base < end-base &&
		vp+uintptr(len(value)) <= end {
		ev := h.event(C.GL_HCB_HEADER)
		ev.off1, ev.len1 = C.Py_ssize_t(np-base), C.Py_ssize_t(len(name))
		ev.off2, ev.len2 = C.Py_ssize_t(vp-base), C.Py_ssize_t(len(value))
		return nil
	}
	h.push(C.GL_HCB_HEADER, name, value)
	return nil
}
func (h *hparser) OnHeadersComplete() error  { h.push0(C.GL_HCB_HEADERS_COMPLETE); return nil }
func (h *hparser) OnBody(chunk []byte) error { h.push1(C.GL_HCB_BODY, chunk); return nil }
func (h *hparser) OnMessageComplete() error  { h.push0(C.GL_HCB_MESSAGE_COMPLETE); return nil }
func (h *hparser) OnChunkHeader() error      { h.push0(C.GL_HCB_CHUNK_HEADER); return nil }
func (h *hparser) OnChunkComplete() error    { h.push0(C.GL_HCB_CHUNK_COMPLETE); return nil }

// final writes the state after the feed into the batch. The method is copied only after
// an error: otherwise it is the one the last URL event carried (a request line sets it and
// then yields a URL event or fails), or unchanged.
func (h *hparser) final(b *C.GLHttpBatch, err error) {
	p := h.p
	s := h.state()
	b.major = C.uchar(s >> 8)
	b.minor = C.uchar(s >> 16)
	b.keep_alive = C.uchar(s >> 24)
	b.upgrade = C.uchar(s >> 32)
	b.status = C.int(p.StatusCode())
	if err == nil {
		b.method_len = 254
		return
	}
	m := p.Method()
	if len(m) > C.GL_HTTP_METHOD_MAX {
		b.method_len = 255
		return
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&b.method[0])), C.GL_HTTP_METHOD_MAX), m)
	b.method_len = C.uchar(len(m))
}

func (h *hparser) setWant(want C.uint) {
	w := httpparser.Want(want) & httpparser.WantAll
	if !h.response {
		w |= httpparser.WantURL
	}
	h.p.Want = w
}

// glHttpInit creates (or, on a second __init__, resets) the Go parser of self. want holds
// a bit per callback slot the protocol has (httpparser.Want's bits).
//
//export glHttpInit
func glHttpInit(self *C.GLHttpParser, want C.uint) (rc C.int) {
	defer recoverInt(&rc)
	h := hparserOf(self)
	if h == nil {
		h = &hparser{self: self, response: self.response != 0}
		if h.response {
			h.p = httpparser.NewResponseParser(h)
		} else {
			h.p = httpparser.NewRequestParser(h)
		}
		id, _ := httpParsers.Add(h)
		self.id = C.long(id)
	} else {
		h.p.Reset()
		h.p.SetLeniencies(0)
	}
	h.p.UpgradeSkipsBody = true // httptools: an upgrade ends the message with its headers
	h.setWant(want)
	return 0
}

// glHttpSetMaxHeaderSize sets the limit of the header section (<= 0: no limit).
//
//export glHttpSetMaxHeaderSize
func glHttpSetMaxHeaderSize(self *C.GLHttpParser, n C.Py_ssize_t) (rc C.int) {
	defer recoverInt(&rc)
	h := hparserOf(self)
	if h == nil {
		raise(C.PyExc_RuntimeError, "the HTTP parser is not initialized (__init__ was not called)")
		return -1
	}
	h.p.MaxHeaderSize = int(n)
	return 0
}

// glHttpFree drops the Go state of self (from tp_dealloc).
//
//export glHttpFree
func glHttpFree(self *C.GLHttpParser) {
	defer func() { recover() }()
	h := hparserOf(self)
	if h == nil {
		return
	}
	h.self = nil
	httpParsers.Del(int(self.id))
	self.id = -1
}

// glHttpFeed parses buf[:n], recording the events and the outcome in b for C to
// dispatch. It returns 0, or -1 with a Python exception set (internal errors only).
//
//export glHttpFeed
func glHttpFeed(self *C.GLHttpParser, b *C.GLHttpBatch, buf *C.char, n C.Py_ssize_t) (rc C.int) {
	defer recoverInt(&rc)
	h := hparserOf(self)
	if h == nil {
		raise(C.PyExc_RuntimeError, "the HTTP parser is not initialized (__init__ was not called)")
		return -1
	}
	var data []byte
	if n > 0 {
		data = unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	}
	h.b = b
	h.base = uintptr(unsafe.Pointer(buf))
	h.end = h.base + uintptr(n)
	b.nev, b.alen, b.err_exc = 0, 0, -1
	err := h.p.Feed(data)
	h.b, h.base, h.end = nil, 0, 0
	h.final(b, err)
	if err != nil {
		setOutcome(b, err)
	}
	return 0
}

func setOutcome(b *C.GLHttpBatch, err error) {
	exc := C.int(C.GL_HEXC_ERROR)
	msg := err.Error()
	switch e := err.(type) {
	case *httpparser.UpgradeError:
		exc = C.GL_HEXC_UPGRADE
		b.upgrade_offset = C.Py_ssize_t(e.Offset)
	case *httpparser.Error:
		switch e.Kind {
		case httpparser.KindInvalidStatus:
			exc = C.GL_HEXC_STATUS
		case httpparser.KindInvalidMethod:
			exc = C.GL_HEXC_METHOD
		case httpparser.KindInvalidURL:
			exc = C.GL_HEXC_URL
		case httpparser.KindCallback: // the handler never fails; kept for completeness
			exc = C.GL_HEXC_CALLBACK
		}
		msg = e.Kind.String() + ": " + e.Msg
	}
	b.err_exc = exc
	dst := unsafe.Slice((*byte)(unsafe.Pointer(&b.err_msg[0])), len(b.err_msg))
	k := copy(dst[:len(dst)-1], msg)
	dst[k] = 0
}

// glHttpSetLenient turns the lenient flags in set on and those in clear off.
//
//export glHttpSetLenient
func glHttpSetLenient(self *C.GLHttpParser, set, clear C.uint) (rc C.int) {
	defer recoverInt(&rc)
	h := hparserOf(self)
	if h == nil {
		raise(C.PyExc_RuntimeError, "the HTTP parser is not initialized (__init__ was not called)")
		return -1
	}
	l := h.p.Leniencies()
	l = (l | httpparser.Lenient(set)) &^ httpparser.Lenient(clear)
	h.p.SetLeniencies(l & httpparser.LenientAll)
	return 0
}

// glHttpMethod returns the request method as bytes (for methods too long for the C mirror).
//
//export glHttpMethod
func glHttpMethod(self *C.GLHttpParser) (ret *C.PyObject) {
	defer recoverObj(&ret)
	h := hparserOf(self)
	if h == nil {
		return C.PyBytes_FromStringAndSize(nil, 0)
	}
	m := h.p.Method()
	if len(m) == 0 {
		return C.PyBytes_FromStringAndSize(nil, 0)
	}
	return C.PyBytes_FromStringAndSize((*C.char)(unsafe.Pointer(unsafe.SliceData(m))), C.Py_ssize_t(len(m)))
}

// glParseURL splits buf[:n] into out: 0, or 1 if it is not a valid URL.
//
//export glParseURL
func glParseURL(buf *C.char, n C.Py_ssize_t, out *C.GLURLParts) (rc C.int) {
	defer recoverInt(&rc)
	var data []byte
	if n > 0 {
		data = unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	}
	u, err := httpparser.ParseURL(data)
	if err != nil {
		return 1
	}
	base := uintptr(unsafe.Pointer(buf))
	for i, part := range [6][]byte{u.Schema, u.Host, u.Path, u.Query, u.Fragment, u.Userinfo} {
		if part == nil {
			out.off[i], out.len[i] = 0, -1
			continue
		}
		out.off[i] = C.Py_ssize_t(uintptr(unsafe.Pointer(unsafe.SliceData(part))) - base)
		out.len[i] = C.Py_ssize_t(len(part))
	}
	out.port = C.int(u.Port)
	return 0
}
