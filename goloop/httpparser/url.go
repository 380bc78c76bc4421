package httpparser

// URL is a parsed request-target. Absent parts are nil; Port is -1 when
// absent. The slices point into the parsed bytes.
type URL struct {
	Schema   []byte
	Host     []byte
	Port     int
	Path     []byte
	Query    []byte
	Fragment []byte
	Userinfo []byte
}

// URLError is returned by ParseURL.
type URLError struct {
	Msg string
}

func (e *URLError) Error() string { return "httpparser: invalid URL: " + e.Msg }

// url character classes (http_parser, non-strict: bytes >= 0x80 allowed)
const (
	uURL      = 1 << iota // path/query/fragment char except '?' and '#'
	uUserinfo             // userinfo char
	uHost                 // reg-name host char
	uAlpha
	uDigit
)

var utab = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		var v uint8
		if c > 0x20 && c != 0x7f && c != '#' && c != '?' {
			v |= uURL
		}
		alpha := (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		digit := c >= '0' && c <= '9'
		if alpha {
			v |= uAlpha
		}
		if digit {
			v |= uDigit
		}
		if alpha || digit {
			v |= uUserinfo | uHost
		}
		switch c {
		case '-', '_', '.', '!', '~', '*', '\'', '(', ')', '%', ';', ':', '&', '=', '+', '$', ',':
			v |= uUserinfo
		}
		switch c {
		case '.', '-', '_':
			v |= uHost
		}
		t[c] = v
	}
	return
}()

// ParseURL splits a request-target the way http_parser_parse_url (and so
// httptools.parse_url) does: origin-form ("/path?query#fragment"), "*",
// or absolute-form ("schema://[userinfo@]host[:port][/path][?query][#fragment]").
// An absolute URL must have a host; the port must be 0..65535.
func ParseURL(b []byte) (URL, error) {
	u := URL{Port: -1}
	if len(b) == 0 {
		return u, &URLError{"empty"}
	}
	i := 0
	n := len(b)
	if b[0] != '/' && b[0] != '*' {
		if utab[b[0]]&uAlpha == 0 {
			return u, &URLError{"must start with '/', '*' or a schema"}
		}
		for i < n && utab[b[i]]&uAlpha != 0 {
			i++
		}
		if n-i < 3 || b[i] != ':' || b[i+1] != '/' || b[i+2] != '/' {
			return u, &URLError{"invalid schema"}
		}
		u.Schema = b[:i]
		i += 3
		s := i
		for i < n && b[i] != '/' && b[i] != '?' {
			c := b[i]
			if utab[c]&uUserinfo == 0 && c != '@' && c != '[' && c != ']' {
				return u, &URLError{"invalid character in authority"}
			}
			i++
		}
		if err := parseAuthority(b[s:i], &u); err != nil {
			return u, err
		}
		if i == n {
			return u, nil
		}
	}
	// path
	if b[i] != '?' {
		s := i
		for i < n && utab[b[i]]&uURL != 0 {
			i++
		}
		if i < n && b[i] != '?' && b[i] != '#' {
			return u, &URLError{"invalid character in path"}
		}
		u.Path = b[s:i]
	}
	if i < n && b[i] == '?' {
		i++
		s := i
		for i < n && (utab[b[i]]&uURL != 0 || b[i] == '?') {
			i++
		}
		if i < n && b[i] != '#' {
			return u, &URLError{"invalid character in query"}
		}
		if i > s {
			u.Query = b[s:i]
		}
	}
	if i < n && b[i] == '#' {
		i++
		s := i
		for i < n && (utab[b[i]]&uURL != 0 || b[i] == '?' || b[i] == '#') {
			i++
		}
		if i < n {
			return u, &URLError{"invalid character in fragment"}
		}
		if i > s {
			u.Fragment = b[s:i]
		}
	}
	return u, nil
}

// parseAuthority parses [userinfo@]host[:port] (http_parse_host).
func parseAuthority(a []byte, u *URL) error {
	if at := indexByte(a, '@'); at >= 0 {
		ui := a[:at]
		if indexByte(a[at+1:], '@') >= 0 {
			return &URLError{"two '@' in authority"}
		}
		for _, c := range ui {
			if utab[c]&uUserinfo == 0 {
				return &URLError{"invalid character in userinfo"}
			}
		}
		if len(ui) > 0 {
			u.Userinfo = ui
		}
		a = a[at+1:]
	}
	if len(a) == 0 {
		return &URLError{"empty host"}
	}
	var rest []byte
	if a[0] == '[' {
		end := -1
		for j := 1; j < len(a); j++ {
			if a[j] == ']' {
				end = j
				break
			}
		}
		if end < 0 {
			return &URLError{"unterminated IPv6 address"}
		}
		h := a[1:end]
		if len(h) == 0 {
			return &URLError{"empty IPv6 address"}
		}
		zone := false
		for j, c := range h {
			switch {
			case zone:
				if utab[c]&(uAlpha|uDigit) == 0 && c != '%' && c != '.' && c != '-' && c != '_' && c != '~' {
					return &URLError{"invalid character in IPv6 zone"}
				}
			case c == '%':
				if j == 0 || j == len(h)-1 {
					return &URLError{"invalid IPv6 zone"}
				}
				zone = true
			case ctab[c]&cHex != 0, c == ':', c == '.':
			default:
				return &URLError{"invalid character in IPv6 address"}
			}
		}
		u.Host = h
		rest = a[end+1:]
	} else {
		j := 0
		for j < len(a) && utab[a[j]]&uHost != 0 {
			j++
		}
		if j == 0 {
			return &URLError{"empty host"}
		}
		u.Host = a[:j]
		rest = a[j:]
	}
	if len(rest) == 0 {
		return nil
	}
	if rest[0] != ':' {
		return &URLError{"invalid character in host"}
	}
	rest = rest[1:]
	if len(rest) == 0 {
		return &URLError{"empty port"}
	}
	port := 0
	for _, c := range rest {
		if c < '0' || c > '9' {
			return &URLError{"invalid port"}
		}
		port = port*10 + int(c-'0')
		if port > 65535 {
			return &URLError{"port out of range"}
		}
	}
	u.Port = port
	return nil
}

func indexByte(b []byte, c byte) int {
	for j := 0; j < len(b); j++ {
		if b[j] == c {
			return j
		}
	}
	return -1
}
