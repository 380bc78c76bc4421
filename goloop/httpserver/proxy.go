package httpserver

import (
	"net/netip"
	"strings"
)

// Proxy headers (uvicorn's --proxy-headers / --forwarded-allow-ips): on a connection
// from a trusted peer, X-Forwarded-Proto sets the request's scheme and X-Forwarded-For
// its client (port 0), with uvicorn's rules. Off (no SetProxyHeaders) it costs one nil
// check per request; on, one header scan per request of a trusted connection.

// Proxy is what a request's proxy headers changed (nil: nothing).
type Proxy struct {
	Scheme string // X-Forwarded-Proto ("" unchanged)
	Client string // the client's host from X-Forwarded-For ("" unchanged)
	// Enc is "scheme\nclient": what the binding hands to C.
	Enc []byte
}

type proxyTrust struct {
	all      bool
	addrs    map[netip.Addr]bool
	nets     []netip.Prefix
	literals map[string]bool
}

// parseTrust parses a comma-separated list of IP addresses, networks (CIDR) and literals
// (e.g. a Unix socket's path); "*" trusts every peer.
func parseTrust(spec string) *proxyTrust {
	t := &proxyTrust{addrs: map[netip.Addr]bool{}, literals: map[string]bool{}}
	for _, h := range strings.Split(spec, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if h == "*" {
			t.all = true
			continue
		}
		if strings.Contains(h, "/") {
			if p, err := netip.ParsePrefix(h); err == nil {
				t.nets = append(t.nets, p.Masked())
				continue
			}
		}
		if a, err := netip.ParseAddr(h); err == nil {
			t.addrs[a] = true
			continue
		}
		t.literals[h] = true
	}
	return t
}

func (t *proxyTrust) trusts(host string) bool {
	if t.all {
		return true
	}
	if host == "" {
		return false
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return t.literals[host]
	}
	if t.addrs[a] {
		return true
	}
	for _, p := range t.nets {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientFrom is the client X-Forwarded-For names: the last host not trusted (each proxy
// appends the peer it saw), or the first if all are.
func (t *proxyTrust) clientFrom(xff string) string {
	var hosts []string
	for _, h := range strings.Split(xff, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	if len(hosts) == 0 {
		return ""
	}
	if t.all {
		return hosts[0]
	}
	for i := len(hosts) - 1; i >= 0; i-- {
		if !t.trusts(hosts[i]) {
			return hosts[i]
		}
	}
	return hosts[0]
}

// SetProxyHeaders turns proxy headers on, trusting the peers of spec (uvicorn's
// --forwarded-allow-ips). Call it before Serve.
func (s *Server) SetProxyHeaders(spec string) { s.proxy = parseTrust(spec) }

// connTrusted tells (once per connection) whether its peer is a trusted proxy.
func (c *Conn) connTrusted() bool {
	if c.trust == 0 {
		host := c.Remote.Host
		if c.Remote.Unix {
			host = "" // uvicorn's scope client is None on a Unix socket
		}
		c.trust = 2
		if c.s.proxy.trusts(host) {
			c.trust = 1
		}
	}
	return c.trust == 1
}

// applyProxy reads r's proxy headers if its connection is trusted (the last of each wins,
// as in uvicorn's dict(scope["headers"])).
func (c *Conn) applyProxy(r *Request) {
	if !c.connTrusted() {
		return
	}
	var proto, xff []byte
	found := false
	for i, n := 0, r.NumHeaders(); i < n; i++ {
		name, value := r.Header(i)
		switch {
		case len(name) == 17 && string(name) == "x-forwarded-proto":
			proto, found = value, true
		case len(name) == 15 && string(name) == "x-forwarded-for":
			xff, found = value, true
		}
	}
	if !found {
		return
	}
	p := &Proxy{}
	if proto != nil {
		switch v := strings.TrimSpace(string(proto)); v {
		case "http", "https", "ws", "wss":
			p.Scheme = v
		}
	}
	if xff != nil {
		p.Client = c.s.proxy.clientFrom(string(xff))
	}
	if p.Scheme == "" && p.Client == "" {
		return
	}
	p.Enc = append(append(append(p.Enc, p.Scheme...), '\n'), p.Client...)
	r.Proxy = p
}
