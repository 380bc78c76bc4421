package httpserver

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// wsLoopConn: a WebSocket session accepted on a loop-mode connection (benchConn); the
// caller is its application (w) and its client.
func wsLoopConn(tb testing.TB) (client int, w *WS) {
	s, h, client := benchConn(tb, Config{})
	_, err := unix.Write(client, []byte("GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"+
		"Connection: Upgrade\r\nSec-WebSocket-Key: "+wsKey+"\r\nSec-WebSocket-Version: 13\r\n\r\n"))
	require.NoError(tb, err)
	h(evIn)
	evs := s.Take(nil)
	require.Len(tb, evs, 1)
	w = evs[0].Req.WS()
	require.NotNil(tb, w)
	k, _, _, _ := w.Receive()
	require.Equal(tb, WSConnect, k)
	require.NoError(tb, w.Accept("", nil))
	s.Flush()
	buf := make([]byte, 4096)
	n, err := unix.Read(client, buf)
	require.NoError(tb, err)
	require.True(tb, strings.HasPrefix(string(buf[:n]), "HTTP/1.1 101 "), string(buf[:n]))
	return client, w
}

// wsSendRecv: the client sends frame, and the application waits for the message (the
// session's goroutine reads it: the loop hands an upgraded connection to one).
func wsSendRecv(tb testing.TB, client int, w *WS, frame []byte) (WSKind, []byte) {
	_, err := unix.Write(client, frame)
	require.NoError(tb, err)
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); {
		if k, data, _, _ := w.Receive(); k != WSWait {
			return k, data
		}
		runtime.Gosched()
	}
	tb.Fatal("no message")
	return 0, nil
}

// A large message's memory, released once the application copied it out, holds the next
// large message (whichever thread releases it); memory over 4 times a message's size is not
// used for it, and a small message's memory is not kept.
func TestWSMessageMemoryReleased(t *testing.T) {
	client, w := wsLoopConn(t)
	for len(wsMem) > 0 {
		<-wsMem
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	k, first := wsSendRecv(t, client, w, frameBytes(0x82, big, true))
	require.Equal(t, WSBinary, k)
	require.Equal(t, big, first)
	w.Release(first)
	k, second := wsSendRecv(t, client, w, frameBytes(0x81, big, true))
	require.Equal(t, WSText, k)
	require.Equal(t, big, second)
	require.Same(t, &first[0], &second[0], "the released message's memory")
	w.Release(second)
	_, third := wsSendRecv(t, client, w, frameBytes(0x82, big[:8192], true))
	require.Equal(t, big[:8192], third)
	require.NotSame(t, &second[0], &third[0], "64 KiB is over 4 times an 8 KiB message")
	_, small := wsSendRecv(t, client, w, frameBytes(0x82, []byte("hi"), true))
	require.Equal(t, "hi", string(small))
	w.Release(small)
	require.Len(t, wsMem, 1, "a small message's memory is not kept") // (second's)
	w.Release(make([]byte, wsMemMax+1))
	require.Len(t, wsMem, 1, "nor memory over wsMemMax")
}

// BenchmarkWSReceive: a client's binary messages, each received by an application that
// copies it out (as the ASGI binding copies it into Python) and then releases it, or not.
func BenchmarkWSReceive(b *testing.B) {
	for _, n := range []int{1 << 10, 64 << 10} {
		for _, release := range []bool{false, true} {
			b.Run(fmt.Sprintf("size=%d/release=%v", n, release), func(b *testing.B) {
				client, w := wsLoopConn(b)
				frame := frameBytes(0x82, bytes.Repeat([]byte("x"), n), true)
				out := make([]byte, n)
				b.SetBytes(int64(n))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					_, data := wsSendRecv(b, client, w, frame)
					copy(out, data)
					if release {
						w.Release(data)
					}
				}
			})
		}
	}
}

// unmask and unmaskAt equal the byte-by-byte XOR of RFC 6455 5.3 at every length around its
// 32- and 8-byte steps and at every offset into the key.
func TestUnmaskEveryLength(t *testing.T) {
	key := []byte{0x12, 0x9a, 0x00, 0xff}
	for n := 0; n <= 200; n++ {
		for off := 0; off < 4; off++ {
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(i*31 + n)
			}
			want := make([]byte, n)
			for i := range p {
				want[i] = p[i] ^ key[(off+i)&3]
			}
			unmaskAt(p, key, off)
			require.Equal(t, want, p, "n %d off %d", n, off)
		}
	}
}
