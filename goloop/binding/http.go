package main

/*
#include "http.h"
#include <stdlib.h>
*/
import "C"

import (
	"errors"
	"unsafe"

	"github.com/goloop/goloop/goloop/httpparser"
)

// hparser is the Go state behind one goloop.http parser object: the pure Go parser and
// the C object whose cached callbacks receive its events. It is its own Handler: each
// event is one Go->C call that builds the arguments and calls the protocol's callback.
type hparser struct {
	p      *httpparser.Parser
	self   *C.GLHttpParser
	failed int // callback slot whose Python callback raised
}

// httpParsers maps GLHttpParser.id to its Go state. Only threads holding the GIL touch it.
var (
	httpParsers []*hparser
	httpFree    []int
)

// errPy says a Python callback raised; the exception is pending in the thread state.
var errPy = errors.New("python callback raised")

func hparserOf(self *C.GLHttpParser) *hparser {
	id := int(self.id)
	if id < 0 || id >= len(httpParsers) || httpParsers[id] == nil {
		return nil
	}
	return httpParsers[id]
}

var cbNames = [...]string{
	C.GL_HCB_MESSAGE_BEGIN:    "on_message_begin",
	C.GL_HCB_URL:              "on_url",
	C.GL_HCB_STATUS:           "on_status",
	C.GL_HCB_HEADER:           "on_header",
	C.GL_HCB_HEADERS_COMPLETE: "on_headers_complete",
	C.GL_HCB_BODY:             "on_body",
	C.GL_HCB_MESSAGE_COMPLETE: "on_message_complete",
	C.GL_HCB_CHUNK_HEADER:     "on_chunk_header",
	C.GL_HCB_CHUNK_COMPLETE:   "on_chunk_complete",
}

func b2c(b bool) C.uchar {
	if b {
		return 1
	}
	return 0
}

// sync mirrors what the getters return into the C object.
func (h *hparser) sync() {
	s, p := h.self, h.p
	s.major = C.uchar(p.Major())
	s.minor = C.uchar(p.Minor())
	s.keep_alive = b2c(p.ShouldKeepAlive())
	s.upgrade = b2c(p.ShouldUpgrade())
	if s.response != 0 {
		s.status = C.int(p.StatusCode())
		return
	}
	m := p.Method()
	if len(m) > C.GL_HTTP_METHOD_MAX {
		s.method_len = 255 // get_method asks Go
		return
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&s.method[0])), C.GL_HTTP_METHOD_MAX), m)
	s.method_len = C.uchar(len(m))
}

func cbytes(b []byte) (*C.char, C.Py_ssize_t) {
	if len(b) == 0 {
		return nil, 0
	}
	return (*C.char)(unsafe.Pointer(unsafe.SliceData(b))), C.Py_ssize_t(len(b))
}

func (h *hparser) call0(slot C.int) error {
	h.sync()
	if C.gl_http_call0(h.self, slot) < 0 {
		h.failed = int(slot)
		return errPy
	}
	return nil
}

func (h *hparser) callBytes(slot C.int, b []byte) error {
	h.sync()
	p, n := cbytes(b)
	if C.gl_http_call_bytes(h.self, slot, p, n) < 0 {
		h.failed = int(slot)
		return errPy
	}
	return nil
}

func (h *hparser) OnMessageBegin() error      { return h.call0(C.GL_HCB_MESSAGE_BEGIN) }
func (h *hparser) OnURL(url []byte) error     { return h.callBytes(C.GL_HCB_URL, url) }
func (h *hparser) OnStatus(reason []byte) error { return h.callBytes(C.GL_HCB_STATUS, reason) }
func (h *hparser) OnHeadersComplete() error   { return h.call0(C.GL_HCB_HEADERS_COMPLETE) }
func (h *hparser) OnBody(chunk []byte) error  { return h.callBytes(C.GL_HCB_BODY, chunk) }
func (h *hparser) OnMessageComplete() error   { return h.call0(C.GL_HCB_MESSAGE_COMPLETE) }
func (h *hparser) OnChunkHeader() error       { return h.call0(C.GL_HCB_CHUNK_HEADER) }
func (h *hparser) OnChunkComplete() error     { return h.call0(C.GL_HCB_CHUNK_COMPLETE) }

func (h *hparser) OnHeader(name, value []byte) error {
	h.sync()
	p1, n1 := cbytes(name)
	p2, n2 := cbytes(value)
	if C.gl_http_call_bytes2(h.self, C.GL_HCB_HEADER, p1, n1, p2, n2) < 0 {
		h.failed = C.GL_HCB_HEADER
		return errPy
	}
	return nil
}

// glHttpInit creates (or, on a second __init__, resets) the Go parser of self. want holds
// a bit per callback slot the protocol has (httpparser.Want's bits).
//
//export glHttpInit
func glHttpInit(self *C.GLHttpParser, want C.uint) (rc C.int) {
	defer recoverInt(&rc)
	h := hparserOf(self)
	if h == nil {
		h = &hparser{self: self}
		if self.response != 0 {
			h.p = httpparser.NewResponseParser(h)
		} else {
			h.p = httpparser.NewRequestParser(h)
		}
		if n := len(httpFree); n > 0 {
			id := httpFree[n-1]
			httpFree = httpFree[:n-1]
			httpParsers[id] = h
			self.id = C.long(id)
		} else {
			httpParsers = append(httpParsers, h)
			self.id = C.long(len(httpParsers) - 1)
		}
	} else {
		h.p.Reset()
		h.p.SetLeniencies(0)
	}
	h.p.Want = httpparser.Want(want) & httpparser.WantAll
	h.sync()
	return 0
}

// glHttpFree drops the Go state of self (from tp_dealloc).
//
//export glHttpFree
func glHttpFree(self *C.GLHttpParser) {
	defer func() { recover() }()
	id := int(self.id)
	if id < 0 || id >= len(httpParsers) || httpParsers[id] == nil {
		return
	}
	httpParsers[id].self = nil
	httpParsers[id] = nil
	httpFree = append(httpFree, id)
	self.id = -1
}

// glHttpFeed parses buf[:n]: 0, or -1 with an exception set (HttpParserError and its
// subclasses, HttpParserCallbackError chained to the callback's exception, HttpParserUpgrade).
//
//export glHttpFeed
func glHttpFeed(self *C.GLHttpParser, buf *C.char, n C.Py_ssize_t) (rc C.int) {
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
	err := h.p.Feed(data)
	h.sync()
	if err == nil {
		return 0
	}
	raiseParseError(h, err)
	return -1
}

func raiseParseError(h *hparser, err error) {
	switch e := err.(type) {
	case *httpparser.UpgradeError:
		C.gl_http_raise_upgrade(C.Py_ssize_t(e.Offset))
		return
	case *httpparser.Error:
		if e.Kind == httpparser.KindCallback {
			cs := C.CString("`" + cbNames[h.failed] + "` callback error")
			C.gl_http_raise_callback(cs)
			C.free(unsafe.Pointer(cs))
			return
		}
		exc := C.int(C.GL_HEXC_ERROR)
		switch e.Kind {
		case httpparser.KindInvalidStatus:
			exc = C.GL_HEXC_STATUS
		case httpparser.KindInvalidMethod:
			exc = C.GL_HEXC_METHOD
		case httpparser.KindInvalidURL:
			exc = C.GL_HEXC_URL
		}
		cs := C.CString(e.Kind.String() + ": " + e.Msg)
		C.gl_http_raise(exc, cs)
		C.free(unsafe.Pointer(cs))
		return
	}
	cs := C.CString(err.Error())
	C.gl_http_raise(C.GL_HEXC_ERROR, cs)
	C.free(unsafe.Pointer(cs))
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
	p, n := cbytes(h.p.Method())
	return C.PyBytes_FromStringAndSize(p, n)
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
