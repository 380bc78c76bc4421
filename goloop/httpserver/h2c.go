package httpserver

// h2c.go: `Upgrade: h2c` (RFC 7540 3.2; deprecated by RFC 9113 but still sent by clients
// such as curl --http2). An HTTP/1.1 request on a plain connection with `Upgrade: h2c` and
// one `HTTP2-Settings` header is read whole (its body too, up to a stream window), then
// answered 101 and becomes stream 1 of an HTTP/2 connection (half-closed by the client):
// the server's preface follows the 101 and the client's preface the request.
// Over TLS, with Config.NoH2, with a larger or chunked body or `Expect: 100-continue`,
// the upgrade is declined and the request served as HTTP/1.1 (its body read, the
// connection closed after it, as for any other upgrade that is not WebSocket's).

import (
	"encoding/base64"
	"encoding/binary"
	"strconv"
	"strings"

	"golang.org/x/net/http2"
)

// h2cUpgrade is an accepted upgrade whose request is being read (Conn.next).
type h2cUpgrade struct {
	r        *Request
	settings []http2.Setting // the client's, from HTTP2-Settings
	rest     []byte          // what followed the request in the last read (the client's preface)
}

// serve switches to HTTP/2 once the request is read (serveH2c).
func (up *h2cUpgrade) serve() { up.r.c.serveH2c() }

func (up *h2cUpgrade) input(b []byte)      { up.rest = append(up.rest, b...) }
func (up *h2cUpgrade) drainedLocked() bool { return false }
func (up *h2cUpgrade) lostLocked()         {}

var switching101 = []byte("HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: h2c\r\n\r\n")

// upgradeBody is called for a request that asks for an upgrade other than WebSocket's:
// its body is read before the upgrade point. True: it is an h2c upgrade taken up (the
// request is not dispatched as HTTP/1.1: serveH2c makes it stream 1 after its body).
func (c *Conn) upgradeBody(r *Request) bool {
	c.p.ReadUpgradeBody()
	c.stopRead = false // the parser stops at the upgrade point, after the body
	up := c.h2cCheck(r)
	if up == nil {
		return false
	}
	c.next = up
	return true
}

// h2cCheck returns the upgrade if r is an h2c upgrade the server takes up.
func (c *Conn) h2cCheck(r *Request) *h2cUpgrade {
	if c.s.cfg.NoH2 || c.TLS() || r.Major != 1 || r.Minor != 1 || r.expect100 || c.s.closed.Load() {
		return nil
	}
	h2c, nSettings := false, 0
	var settings string
	for i := 0; i < r.NumHeaders(); i++ {
		name, value := r.Header(i)
		switch string(name) {
		case "upgrade":
			h2c = h2c || hasToken(value, "h2c")
		case "http2-settings":
			nSettings++
			settings = strings.TrimRight(strings.TrimSpace(string(value)), "=")
		case "content-length": // the body is held until the switch: a stream window at most
			if n, err := strconv.ParseInt(string(value), 10, 64); err != nil || n > h2StreamWindow {
				return nil
			}
		case "transfer-encoding":
			return nil
		}
	}
	if !h2c || nSettings != 1 { // RFC 7540 3.2.1: exactly one HTTP2-Settings
		return nil
	}
	b, err := base64.RawURLEncoding.DecodeString(settings)
	if err != nil || len(b)%6 != 0 {
		return nil
	}
	up := &h2cUpgrade{r: r}
	for ; len(b) > 0; b = b[6:] {
		s := http2.Setting{ID: http2.SettingID(binary.BigEndian.Uint16(b)), Val: binary.BigEndian.Uint32(b[2:])}
		if s.Valid() != nil {
			return nil
		}
		up.settings = append(up.settings, s)
	}
	return up
}

// serveH2c switches the connection to HTTP/2 once the upgrade's request is read: 101, the
// server's preface, the request as stream 1, then the HTTP/2 reader.
func (c *Conn) serveH2c() {
	up := c.next.(*h2cUpgrade)
	r := up.r
	h := c.newH2(up.rest)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.next = h
	c.served = true
	c.out = append(c.out, switching101...)
	for _, s := range up.settings {
		h.settingLocked(s)
	}
	h.writePrefaceLocked()
	r.filterHeaders(func(name, value []byte) bool { // what HTTP/2 would not have carried
		n := string(name)
		return !connSpecific(n) && n != "http2-settings" && (n != "te" || string(value) == "trailers")
	})
	r.Major, r.Minor = 2, 0
	r.keepAlive = true
	// the body came before flow control: taking it gives no window back
	h.connUnacked = -int64(len(r.body))
	st := h.newStream(1, r)
	h.maxID = 1
	h.openLocked(st, true)
	c.mu.Unlock()
	h.pushBatch()
	c.flush()
	h.serve()
}

// filterHeaders keeps the request's headers for which keep is true.
func (r *Request) filterHeaders(keep func(name, value []byte) bool) {
	nh := r.NumHeaders()
	blob, ends := r.Blob[:0:0], r.Ends[:0:0]
	for i := 0; i < len(r.Ends); i += 2 {
		if i/2 < nh {
			if name, value := r.Header(i / 2); !keep(name, value) {
				continue
			}
		}
		for j := i; j < min(i+2, len(r.Ends)); j++ {
			blob = append(blob, r.seg(j)...)
			ends = append(ends, int32(len(blob)))
		}
	}
	r.Blob, r.Ends = blob, ends
}
