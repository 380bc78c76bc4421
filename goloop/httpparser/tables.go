package httpparser

// Character classes, one bit each.
const (
	cToken    = 1 << iota // tchar (RFC 9110)
	cValue                // field-vchar / SP / HTAB / obs-text
	cTarget               // allowed in a request-target (no SP, no CTL, no DEL)
	cReason               // reason-phrase: HTAB / SP / VCHAR / obs-text
	cHex                  // hex digit
	cLenValue             // header value byte accepted by LenientHeaders (all but LF)
	cURLFast              // request-target byte of the fast path: VCHAR but '#'
)

var ctab = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		var v uint8
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
			v |= cToken
		}
		switch c {
		case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
			v |= cToken
		}
		if c == '\t' || (c >= 0x20 && c != 0x7f) {
			v |= cValue | cReason
		}
		if c > 0x20 && c != 0x7f {
			v |= cTarget
		}
		if (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') {
			v |= cHex
		}
		if c != '\n' {
			v |= cLenValue
		}
		if c > 0x20 && c < 0x7f && c != '#' {
			v |= cURLFast
		}
		t[c] = v
	}
	return
}()

func isToken(c byte) bool { return ctab[c]&cToken != 0 }

func isOWS(c byte) bool { return c == ' ' || c == '\t' }

func trimLeftOWS(b []byte) []byte {
	for len(b) > 0 && isOWS(b[0]) {
		b = b[1:]
	}
	return b
}

func trimOWS(b []byte) []byte {
	s, e := 0, len(b)
	for s < e && isOWS(b[s]) {
		s++
	}
	for e > s && isOWS(b[e-1]) {
		e--
	}
	return b[s:e]
}

// eqFoldLower compares a token b with a lower-case ASCII string made of
// letters and '-'.
func eqFoldLower(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

func hexVal(c byte) uint64 {
	switch {
	case c >= '0' && c <= '9':
		return uint64(c - '0')
	case c >= 'a' && c <= 'f':
		return uint64(c-'a') + 10
	default:
		return uint64(c-'A') + 10
	}
}
