package httpserver

// wsutf8.go: a streaming UTF-8 validator for text messages that arrive in frames: it fails
// as soon as the bytes so far cannot begin valid UTF-8 (RFC 6455 8.1), not only at the
// message's end.

import (
	"unicode/utf8"
)

// utf8Stream checks UTF-8 that arrives in pieces: a sequence cut by a piece's end is
// carried to the next one, and a piece fails as soon as its bytes cannot begin valid
// UTF-8 (RFC 6455 8.1: fail fast), not only at the message's end.
type utf8Stream struct {
	b [4]byte
	n int // bytes of an incomplete sequence carried from the last piece
}

// validPrefix tells whether b (a lead byte and fewer continuation bytes than it needs)
// can still become a valid sequence.
func validPrefix(b []byte) bool {
	if len(b) == 1 {
		return b[0] >= 0xc2 && b[0] <= 0xf4
	}
	var full [4]byte
	copy(full[:], b)
	need := 3
	if b[0] >= 0xf0 {
		need = 4
	}
	for i := len(b); i < need; i++ {
		full[i] = 0x80 // any continuation byte completes a valid second byte
	}
	return utf8.Valid(full[:need])
}

// feed checks the next piece; final: the message ends with it.
func (u *utf8Stream) feed(p []byte, final bool) bool {
	if u.n > 0 {
		need := 2
		if u.b[0] >= 0xf0 {
			need = 4
		} else if u.b[0] >= 0xe0 {
			need = 3
		}
		take := min(need-u.n, len(p))
		copy(u.b[u.n:], p[:take])
		u.n += take
		p = p[take:]
		if u.n < need {
			return !final && validPrefix(u.b[:u.n])
		}
		if !utf8.Valid(u.b[:need]) {
			return false
		}
		u.n = 0
	}
	// an incomplete sequence at the end: a lead byte among the last 3 that lacks bytes
	cut := len(p)
	for i := len(p) - 1; i >= 0 && i >= len(p)-3; i-- {
		if c := p[i]; c < 0x80 {
			break
		} else if c >= 0xc0 {
			if !utf8.FullRune(p[i:]) {
				cut = i
			}
			break
		}
	}
	if !utf8.Valid(p[:cut]) {
		return false
	}
	if tail := p[cut:]; len(tail) > 0 {
		if final || !validPrefix(tail) {
			return false
		}
		u.n = copy(u.b[:], tail)
	}
	return true
}
