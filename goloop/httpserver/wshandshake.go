package httpserver

// wshandshake.go: the WebSocket handshake request (RFC 6455 4.2.1): wsCheck tells a valid
// upgrade from one to refuse (400, 426) and gives the request its WS; the extension it
// offers is negotiated by wsdeflate.go. The 101 response is WS.Accept's (ws.go).

import (
	"bytes"
	"encoding/base64"
	"strings"
)

// hasToken tells whether the comma-separated header value lists tok (case-insensitive):
// the protocols of an Upgrade header.
func hasToken(value []byte, tok string) bool {
	for _, t := range strings.Split(string(value), ",") {
		if strings.EqualFold(strings.TrimSpace(t), tok) {
			return true
		}
	}
	return false
}

// wsCheck is called for a request that asks for a protocol upgrade: if it is a WebSocket
// handshake the request gets its WS. A request that asks for `Upgrade: websocket` but is
// not a valid handshake (RFC 6455 4.2.1: a GET with a key and version 13) is refused: wsCheck returns the text of the answer
// and sets r.ownStatus, 400 (uvicorn's texts, naming the header) or 426 (a version we do
// not speak, RFC 6455 4.4); "" otherwise.
func (c *Conn) wsCheck(r *Request, method []byte) string {
	cfg := c.s.wsConfig()
	if cfg.Disabled || r.Major != 1 || r.Minor < 1 {
		return ""
	}
	var upgrade, version, otherVersion bool
	var key []byte
	var protos []string
	var exts []string
	for i := 0; i < r.NumHeaders(); i++ {
		name, value := r.Header(i)
		switch string(name) {
		case "upgrade":
			upgrade = upgrade || hasToken(value, "websocket")
		case "sec-websocket-key":
			key = bytes.TrimSpace(value)
		case "sec-websocket-version":
			version = string(bytes.TrimSpace(value)) == "13"
			otherVersion = !version
		case "sec-websocket-protocol":
			for _, t := range strings.Split(string(value), ",") {
				if t = strings.TrimSpace(t); t != "" {
					protos = append(protos, t)
				}
			}
		case "sec-websocket-extensions":
			exts = append(exts, string(value))
		}
	}
	if !upgrade {
		return ""
	}
	const failed = "Failed to open a WebSocket connection: "
	if string(method) != "GET" { // RFC 6455 4.1: a GET; uvicorn's answer (400, websockets' text)
		r.ownStatus = 400
		return failed + "did not receive a valid HTTP request; unsupported HTTP method: " + string(method) + ".\n"
	}
	if len(key) == 0 {
		r.ownStatus = 400
		return failed + "missing Sec-WebSocket-Key header.\n"
	}
	if k, err := base64.StdEncoding.DecodeString(string(key)); err != nil || len(k) != 16 {
		r.ownStatus = 400
		return failed + "invalid Sec-WebSocket-Key header: " + string(key) + ".\n"
	}
	if otherVersion {
		r.ownStatus = 426 // RFC 6455 4.4: the versions we speak, in sec-websocket-version
		return "Unsupported WebSocket version"
	}
	if !version {
		r.ownStatus = 400
		return failed + "missing Sec-WebSocket-Version header.\n"
	}
	w := &WS{r: r, c: c, key: append([]byte(nil), key...), Subprotocols: protos}
	if cfg.Deflate {
		w.zp, _ = negotiateDeflate(strings.Join(exts, ","))
	}
	r.ws = w
	r.x = w
	c.mu.Lock()
	c.next = w
	c.mu.Unlock()
	return ""
}
