package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
)

// wsPath is -ws: the WebSocket path to echo on ("" : raw TCP echo).
var wsPath string

// wsConn is one client WebSocket session: its reader (the handshake may read past the
// response's head) and the frame it writes, made once.
type wsConn struct {
	c     net.Conn
	br    *bufio.Reader
	frame []byte
}

// wsOpen makes the handshake on c for messages of size bytes.
func wsOpen(c net.Conn, host string, size int) (*wsConn, error) {
	if _, err := io.WriteString(c, "GET "+wsPath+" HTTP/1.1\r\nHost: "+host+"\r\nUpgrade: websocket\r\n"+
		"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"); err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(c, size+64)
	status, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(status, "HTTP/1.1 101 ") {
		return nil, fmt.Errorf("websocket handshake: %q", strings.TrimSpace(status))
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		if line == "\r\n" {
			break
		}
	}
	return &wsConn{c: c, br: br, frame: make([]byte, 0, size+14)}, nil
}

// roundTrip sends msg as one binary message (masked with the key 0, as a client may) and
// reads the echo, one unmasked binary frame, into buf (len(msg) bytes).
func (w *wsConn) roundTrip(msg, buf []byte) error {
	f := append(w.frame[:0], 0x82)
	switch n := len(msg); {
	case n < 126:
		f = append(f, 0x80|byte(n))
	case n < 1<<16:
		f = append(f, 0x80|126, byte(n>>8), byte(n))
	default:
		f = append(f, 0x80|127)
		f = binary.BigEndian.AppendUint64(f, uint64(n))
	}
	f = append(append(f, 0, 0, 0, 0), msg...)
	w.frame = f
	if _, err := w.c.Write(f); err != nil {
		return err
	}
	var h [2]byte
	if _, err := io.ReadFull(w.br, h[:]); err != nil {
		return err
	}
	if h[0] != 0x82 || h[1]&0x80 != 0 {
		return fmt.Errorf("websocket: frame 0x%02x 0x%02x, want one unmasked binary frame", h[0], h[1])
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var x [2]byte
		if _, err := io.ReadFull(w.br, x[:]); err != nil {
			return err
		}
		n = uint64(binary.BigEndian.Uint16(x[:]))
	case 127:
		var x [8]byte
		if _, err := io.ReadFull(w.br, x[:]); err != nil {
			return err
		}
		n = binary.BigEndian.Uint64(x[:])
	}
	if n != uint64(len(buf)) {
		return errors.New("websocket: the echo's length differs from the message's")
	}
	_, err := io.ReadFull(w.br, buf)
	return err
}
