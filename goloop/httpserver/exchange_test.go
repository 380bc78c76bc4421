package httpserver

import (
	"io"
	"strings"
	"testing"
)

// doneFailedApp ends every exchange through the binding's interface: Done(true) (the
// application raised), with Status read before and after.
func doneFailedApp(statuses chan [2]int) func(a *fakeApp, r *Request) {
	return func(a *fakeApp, r *Request) {
		var ex Exchange = r
		if w := r.WS(); w != nil {
			a.wsReceive(w) // websocket.connect
			if err := w.Accept("", nil); err != nil {
				panic(err)
			}
		}
		before := ex.Status()
		ex.Done(true)
		statuses <- [2]int{before, ex.Status()}
		a.s.Flush()
	}
}

// An application that raised before answering gets a 500, on HTTP/1.1 and on HTTP/2 alike,
// through the one finishing path; Status is 0 before it.
func TestExchangeDoneFailedAnswers500(t *testing.T) {
	statuses := make(chan [2]int, 2)
	_, addr := startServer(t, Config{}, doneFailedApp(statuses))
	c, br := dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body := readResp(t, br, "GET")
	if resp.StatusCode != 500 || body != "Internal Server Error" {
		t.Fatal("HTTP/1.1:", resp.Status, body)
	}
	if s := <-statuses; s != [2]int{0, 500} {
		t.Fatal("HTTP/1.1 statuses", s)
	}
	resp2, err := h2cClient().Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp2.Body)
	resp2.Body.Close()
	if resp2.ProtoMajor != 2 || resp2.StatusCode != 500 || string(b) != "Internal Server Error" {
		t.Fatal("HTTP/2:", resp2.Proto, resp2.Status, string(b))
	}
	if s := <-statuses; s != [2]int{0, 500} {
		t.Fatal("HTTP/2 statuses", s)
	}
}

// The same call on an accepted WebSocket session closes it with 1011 (its Status is 101).
func TestExchangeDoneFailedClosesWebSocket1011(t *testing.T) {
	statuses := make(chan [2]int, 1)
	_, addr := startServer(t, Config{}, doneFailedApp(statuses))
	_, br, head := wsDial(t, addr, "")
	if len(head) < 12 || head[:12] != "HTTP/1.1 101" {
		t.Fatalf("handshake: %q", head)
	}
	first, payload := readFrame(t, br)
	if first != 0x88 || closeCode(payload) != 1011 || string(payload[2:]) != "Internal Server Error" {
		t.Fatalf("frame %#x %q", first, payload)
	}
	if s := <-statuses; s != [2]int{101, 101} {
		t.Fatal("statuses", s)
	}
}

// A body shorter than its content-length: the last part's Send returns ErrTooShort (the
// application sees uvicorn's RuntimeError) and its return cuts the response (Finish says
// FinishIncomplete): HTTP/1.1 closes the connection after "abc", HTTP/2 resets the stream
// instead of ending it.
func TestExchangeShortBodyIsCut(t *testing.T) {
	got := make(chan [2]any, 2)
	_, addr := startServer(t, Config{}, func(a *fakeApp, r *Request) {
		r.Start(200, []byte("content-length: 10\r\n"))
		_, err := r.Send([]byte("abc"), false)
		got <- [2]any{err, r.Finish(false)}
		a.s.Flush()
	})
	c, br := dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	all, _ := io.ReadAll(br) // to the end of the connection
	if !strings.HasSuffix(string(all), "content-length: 10\r\n\r\nabc") {
		t.Fatalf("HTTP/1.1: %q", all)
	}
	if g := <-got; g != [2]any{ErrTooShort, FinishIncomplete} {
		t.Fatal("HTTP/1.1", g)
	}
	resp, err := h2cClient().Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil { // a stream reset, not a 10-byte body ended early
		t.Fatalf("HTTP/2: %q %v", b, err)
	}
	if g := <-got; g != [2]any{ErrTooShort, FinishIncomplete} {
		t.Fatal("HTTP/2", g)
	}
}
