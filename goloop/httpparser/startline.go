package httpparser

// The start line grammar of llhttp (the parser httptools wraps), so that goloop accepts
// and rejects the same request and status lines, with the same error kinds. The scanners
// work on a complete line (line ending included) or on the beginning of one: an error in
// the beginning is reported at once, as llhttp, which reads byte by byte, would.

// protocol families of a method (bits)
const (
	protoHTTP uint8 = 1 << iota
	protoRTSP
	protoICE
)

// methodProtos returns the protocols a method known to llhttp may be used with (0: unknown).
func methodProtos(m []byte) uint8 {
	switch string(m) {
	case "GET", "POST":
		return protoHTTP | protoRTSP
	case "OPTIONS":
		return protoHTTP | protoRTSP
	case "SOURCE":
		return protoHTTP | protoICE
	case "DELETE", "HEAD", "PUT", "CONNECT", "TRACE", "COPY", "LOCK", "MKCOL", "MOVE",
		"PROPFIND", "PROPPATCH", "SEARCH", "UNLOCK", "BIND", "REBIND", "UNBIND", "ACL",
		"REPORT", "MKACTIVITY", "CHECKOUT", "MERGE", "M-SEARCH", "NOTIFY", "SUBSCRIBE",
		"UNSUBSCRIBE", "PATCH", "PURGE", "MKCALENDAR", "LINK", "UNLINK", "PRI", "QUERY":
		return protoHTTP
	case "DESCRIBE", "ANNOUNCE", "SETUP", "PLAY", "PAUSE", "TEARDOWN", "GET_PARAMETER",
		"SET_PARAMETER", "REDIRECT", "RECORD", "FLUSH":
		return protoRTSP
	}
	return 0
}

var methodNames = [...]string{
	"GET", "POST", "OPTIONS", "SOURCE", "DELETE", "HEAD", "PUT", "CONNECT", "TRACE", "COPY",
	"LOCK", "MKCOL", "MOVE", "PROPFIND", "PROPPATCH", "SEARCH", "UNLOCK", "BIND", "REBIND",
	"UNBIND", "ACL", "REPORT", "MKACTIVITY", "CHECKOUT", "MERGE", "M-SEARCH", "NOTIFY",
	"SUBSCRIBE", "UNSUBSCRIBE", "PATCH", "PURGE", "MKCALENDAR", "LINK", "UNLINK", "PRI",
	"QUERY", "DESCRIBE", "ANNOUNCE", "SETUP", "PLAY", "PAUSE", "TEARDOWN", "GET_PARAMETER",
	"SET_PARAMETER", "REDIRECT", "RECORD", "FLUSH",
}

// methodPrefix tells whether b is the beginning of a known method (b has no space).
func methodPrefix(b []byte) bool {
	for _, m := range methodNames {
		if len(b) <= len(m) && m[:len(b)] == string(b) {
			return true
		}
	}
	return false
}

// URL character classes (llhttp's strict URL_CHAR): path bytes are VCHAR but '#', '?';
// the query also takes '?', the fragment '?' and '#'.
func isURLChar(c byte) bool { return c > 0x20 && c < 0x7f && c != '#' && c != '?' }

func isAlpha(c byte) bool { return (c|0x20) >= 'a' && (c|0x20) <= 'z' }

// isServerChar: llhttp's USERINFO_CHARS and '[', ']' (the host of an absolute or
// authority-form target).
func isServerChar(c byte) bool {
	if isAlpha(c) || (c >= '0' && c <= '9') {
		return true
	}
	switch c {
	case '-', '_', '.', '!', '~', '*', '\'', '(', ')', '%', ';', ':', '&', '=', '+', '$', ',', '[', ']':
		return true
	}
	return false
}

// reqLine is the result of scanning a request line.
type reqLine struct {
	method       []byte
	url          []byte
	major, minor uint8
	http09       bool // no version: HTTP/0.9
	end          int  // index after the line ending
	frag         int  // index of the fragment's '#' in url, 0: none
}

// scanRequestLine scans b, a request line with its line ending (complete) or the beginning
// of one. It returns done=false with kind KindOK when b is a valid beginning, or the kind
// and message of the first error llhttp would report.
func (p *Parser) scanRequestLine(b []byte, complete bool, r *reqLine) (kind Kind, msg string) {
	n := len(b)
	i := 0
	for i < n && b[i] != ' ' {
		i++
	}
	if i == n {
		if !methodPrefix(b) {
			return KindInvalidMethod, "invalid method"
		}
		return KindOK, ""
	}
	m := b[:i]
	protos := methodProtos(m)
	if protos == 0 {
		return KindInvalidMethod, "invalid method"
	}
	r.method = m
	// An incomplete line (complete false) is scanned again with every piece: the unbounded
	// runs (spaces, the target) resume where the previous scan stopped (p.hint).
	if !complete {
		i, _, _ = p.resume(hintSpaces1, i, n)
	}
	for i < n && b[i] == ' ' {
		i++
	}
	if i == n {
		if !complete {
			p.hint = scanHint{tag: hintSpaces1, pos: i}
		}
		return KindOK, ""
	}
	us := i
	frag := 0
	connect := string(m) == "CONNECT"
	// the URL states
	const (
		uStart = iota
		uSchema
		uSlash1
		uSlash2
		uServer
		uServerAt
		uPath
		uQuery
		uFragment
	)
	st := uPath
	if connect {
		st = uServer
	} else {
		c := b[i]
		switch {
		case c == '/' || c == '*':
			st = uPath
			i++
		case isAlpha(c):
			st = uSchema
		default:
			return KindInvalidURL, "unexpected start char in url"
		}
	}
	if !complete && p.hint.tag == hintURL && p.hint.pos > i && p.hint.pos <= n {
		i, st = p.hint.pos, int(p.hint.st)
	}
urlLoop:
	for ; i < n; i++ {
		c := b[i]
		switch st {
		case uSchema:
			if isAlpha(c) {
				continue
			}
			if c == ':' {
				st = uSlash1
				continue
			}
			return KindInvalidURL, "unexpected char in url schema"
		case uSlash1, uSlash2:
			if c != '/' {
				return KindInvalidURL, "unexpected char in url schema"
			}
			if st == uSlash1 {
				st = uSlash2
			} else {
				st = uServer
			}
			continue
		case uServer, uServerAt:
			switch {
			case c == '/':
				st = uPath
			case c == '?':
				st = uQuery
			case c == '@':
				if st == uServerAt {
					return KindInvalidURL, "double @ in url"
				}
				st = uServerAt
			case isServerChar(c):
				st = uServer
			case c == ' ' || c == '\r' || c == '\n':
				break urlLoop
			default:
				return KindInvalidURL, "unexpected char in url server"
			}
			continue
		case uPath:
			if isURLChar(c) {
				continue
			}
			switch c {
			case '?':
				st = uQuery
				continue
			case '#':
				st = uFragment
				frag = i - us
				continue
			case ' ', '\r', '\n':
				break urlLoop
			}
			return KindInvalidURL, "invalid char in url path"
		case uQuery:
			if isURLChar(c) || c == '?' {
				continue
			}
			switch c {
			case '#':
				st = uFragment
				frag = i - us
				continue
			case ' ', '\r', '\n':
				break urlLoop
			}
			return KindInvalidURL, "invalid char in url query"
		case uFragment:
			if isURLChar(c) || c == '?' || c == '#' {
				continue
			}
			if c == ' ' || c == '\r' || c == '\n' {
				break urlLoop
			}
			return KindInvalidURL, "invalid char in url fragment"
		}
	}
	if i == n {
		if !complete {
			p.hint = scanHint{tag: hintURL, st: uint8(st), pos: i}
		}
		return KindOK, ""
	}
	r.url = b[us:i]
	r.frag = frag
	switch b[i] {
	case '\r':
		if i+1 == n {
			if complete && p.lenient&LenientOptionalLFAfterCR != 0 {
				r.http09, r.major, r.minor, r.end = true, 0, 9, n
			}
			return KindOK, ""
		}
		if b[i+1] != '\n' {
			return KindInvalidURL, "expected CRLF"
		}
		r.http09, r.major, r.minor, r.end = true, 0, 9, i+2
		return KindOK, ""
	case '\n': // llhttp (as httptools bundles it) takes a bare LF after the target as HTTP/0.9
		r.http09, r.major, r.minor, r.end = true, 0, 9, i+1
		return KindOK, ""
	}
	if b[i] == ' ' && i+1 < n && (b[i+1] == '\t' || b[i+1] == '\f') {
		// llhttp (as httptools 0.9 bundles it) takes HTAB or FF right after the
		// target's space as part of the target
		return KindInvalidURL, "invalid characters in url"
	}
	if !complete {
		i, _, _ = p.resume(hintSpaces2, i, n)
	}
	for i < n && b[i] == ' ' {
		i++
	}
	if i == n && !complete {
		p.hint = scanHint{tag: hintSpaces2, pos: i}
	}
	// protocol
	rest := b[i:]
	var want uint8
	var plen int
	switch {
	case hasPrefixPart(rest, "HTTP"):
		want, plen = protoHTTP, 4
	case hasPrefixPart(rest, "RTSP"):
		want, plen = protoRTSP, 4
	case hasPrefixPart(rest, "ICE"):
		want, plen = protoICE, 3
	default:
		return KindInvalidVersion, "expected HTTP/, RTSP/ or ICE/"
	}
	if len(rest) < plen {
		return KindOK, ""
	}
	if protos&want == 0 {
		return KindInvalidVersion, "invalid method for the protocol"
	}
	i += plen
	if i == n {
		return KindOK, ""
	}
	if b[i] != '/' {
		return KindInvalidVersion, "expected HTTP/, RTSP/ or ICE/"
	}
	i++
	if kind, msg := p.scanVersion(b, &i, &r.major, &r.minor); kind != KindOK || i == n {
		return kind, msg
	}
	if string(m) == "PRI" {
		return KindInvalidVersion, "HTTP/2 connection preface" // llhttp pauses (an error for httptools)
	}
	switch b[i] {
	case '\r':
		if i+1 == n {
			if complete && p.lenient&LenientOptionalLFAfterCR != 0 {
				r.end = n
			}
			return KindOK, ""
		}
		if b[i+1] != '\n' && p.lenient&LenientOptionalLFAfterCR == 0 {
			return KindInvalidVersion, "expected CRLF after version" // llhttp: INVALID_VERSION
		}
		r.end = i + 2
		if b[i+1] != '\n' {
			r.end = i + 1
		}
		return KindOK, ""
	case '\n':
		if p.lenient&LenientOptionalCRBeforeLF == 0 {
			return KindInvalidVersion, "expected CRLF after version"
		}
		r.end = i + 1
		return KindOK, ""
	}
	return KindInvalidVersion, "expected CRLF after version"
}

// scanVersion reads "<digit>.<digit>" at b[*i:] and checks it as llhttp does.
func (p *Parser) scanVersion(b []byte, i *int, major, minor *uint8) (Kind, string) {
	n := len(b)
	j := *i
	if j == n {
		return KindOK, ""
	}
	if b[j] < '0' || b[j] > '9' {
		return KindInvalidVersion, "invalid major version"
	}
	*major = b[j] - '0'
	j++
	if j == n {
		*i = j
		return KindOK, ""
	}
	if b[j] != '.' {
		return KindInvalidVersion, "expected dot"
	}
	j++
	if j == n {
		*i = j
		return KindOK, ""
	}
	if b[j] < '0' || b[j] > '9' {
		return KindInvalidVersion, "invalid minor version"
	}
	*minor = b[j] - '0'
	j++
	*i = j
	if p.lenient&LenientVersion == 0 {
		switch uint16(*major)<<8 | uint16(*minor) {
		case 0x0009, 0x0100, 0x0101, 0x0200:
		default:
			return KindInvalidVersion, "invalid HTTP version"
		}
	}
	return KindOK, ""
}

// hasPrefixPart: b starts with s, or b is a beginning of s.
func hasPrefixPart(b []byte, s string) bool {
	if len(b) >= len(s) {
		return string(b[:len(s)]) == s
	}
	return string(b) == s[:len(b)]
}

// scanStatusLine scans a status line (with its line ending) or the beginning of one.
// It returns the reason (hasReason false when the line has none) once complete.
func (p *Parser) scanStatusLine(b []byte, complete bool, major, minor *uint8, status *int,
	reason *[]byte, hasReason *bool, end *int) (Kind, string) {
	n := len(b)
	var plen int
	switch {
	case hasPrefixPart(b, "HTTP"), hasPrefixPart(b, "RTSP"):
		plen = 4
	case hasPrefixPart(b, "ICE"):
		plen = 3
	default:
		return KindInvalidVersion, "expected HTTP/, RTSP/ or ICE/"
	}
	if n <= plen {
		return KindOK, ""
	}
	if b[plen] != '/' {
		return KindInvalidVersion, "expected HTTP/, RTSP/ or ICE/"
	}
	i := plen + 1
	if kind, msg := p.scanVersion(b, &i, major, minor); kind != KindOK || i == n {
		return kind, msg
	}
	if b[i] != ' ' {
		return KindInvalidVersion, "expected space after version"
	}
	i++
	st := 0
	for k := 0; k < 3; k++ {
		if i == n {
			return KindOK, ""
		}
		c := b[i]
		if c < '0' || c > '9' {
			return KindInvalidStatus, "invalid status code"
		}
		st = st*10 + int(c-'0')
		i++
	}
	if i == n {
		return KindOK, ""
	}
	*status = st
	*hasReason = false
	*reason = nil
	switch b[i] {
	case ' ':
		i++
		s := i
		if !complete {
			i, _, _ = p.resume(hintReason, i, n)
		}
		for i < n && b[i] != '\r' && b[i] != '\n' {
			i++
		}
		if i == n {
			if !complete {
				p.hint = scanHint{tag: hintReason, pos: i}
			}
			return KindOK, ""
		}
		*reason, *hasReason = b[s:i], true
		if b[i] == '\n' {
			if p.lenient&LenientOptionalCRBeforeLF == 0 {
				return KindCRExpected, "missing expected CR after response line"
			}
			*end = i + 1
			return KindOK, ""
		}
	case '\r':
	case '\n':
		if p.lenient&LenientOptionalCRBeforeLF == 0 {
			return KindInvalidStatus, "invalid response status"
		}
		*end = i + 1
		return KindOK, ""
	default:
		return KindInvalidStatus, "invalid response status"
	}
	// b[i] == '\r'
	if i+1 == n {
		if complete && p.lenient&LenientOptionalLFAfterCR != 0 {
			*end = n
		}
		return KindOK, ""
	}
	if b[i+1] != '\n' {
		if p.lenient&LenientOptionalLFAfterCR == 0 {
			return KindLFExpected, "expected LF after CR"
		}
		*end = i + 1
		return KindOK, ""
	}
	*end = i + 2
	return KindOK, ""
}
