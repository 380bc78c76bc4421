"""goloop serve (WebSocket): the `websockets` library as the client, raw sockets for bad
frames, against goloop.serve.server.Server on a goloop loop in a thread (test_serve_http's
`serving`)."""
import asyncio
import base64
import json
import os
import socket
import struct
import sys
import threading
import zlib

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_serve_http import serving  # noqa: E402

websockets = pytest.importorskip("websockets")
from websockets.exceptions import ConnectionClosed, InvalidStatus  # noqa: E402
from websockets.sync.client import connect as ws_connect  # noqa: E402


def url(server, path="/ws"):
    return f"ws://127.0.0.1:{server.port}{path}"


def client(server, path="/ws", **kw):
    kw.setdefault("proxy", None)
    kw.setdefault("open_timeout", 10)
    kw.setdefault("close_timeout", 10)
    return ws_connect(url(server, path), **kw)


events = []


async def echo_app(scope, receive, send):
    """Accepts (with the last offered subprotocol), echoes; 'close:CODE:REASON' closes."""
    if scope["type"] != "websocket":
        return
    msg = await receive()
    assert msg == {"type": "websocket.connect"}
    sub = scope["subprotocols"][-1] if scope["subprotocols"] else None
    await send({"type": "websocket.accept", "subprotocol": sub, "headers": [(b"x-app", b"yes")]})
    while True:
        msg = await receive()
        events.append(msg)
        if msg["type"] == "websocket.disconnect":
            return
        if msg.get("text", "").startswith("close:"):
            _, code, reason = msg["text"].split(":", 2)
            await send({"type": "websocket.close", "code": int(code), "reason": reason})
            continue
        if msg.get("text") == "scope":
            sc = {k: v for k, v in scope.items() if k not in ("headers", "state")}
            sc["raw_path"] = scope["raw_path"].decode()
            sc["query_string"] = scope["query_string"].decode()
            sc["headers"] = [[n.decode(), v.decode()] for n, v in scope["headers"]]
            await send({"type": "websocket.send", "text": json.dumps(sc)})
            continue
        if "text" in msg and msg["text"] is not None:
            await send({"type": "websocket.send", "text": msg["text"]})
        else:
            await send({"type": "websocket.send", "bytes": msg["bytes"]})


def last_disconnect(timeout=10):
    """The websocket.disconnect the app received last (waits for it)."""
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in reversed(events):
            if m["type"] == "websocket.disconnect":
                return m
        time.sleep(0.01)
    raise AssertionError("no websocket.disconnect")


@pytest.fixture(autouse=True)
def _clear_events():
    events.clear()


def test_echo_text_and_bytes_and_scope():
    with serving(echo_app) as server:
        with client(server, "/ws/p%20x?a=1", subprotocols=["one", "two"]) as ws:
            assert ws.subprotocol == "two"
            assert ws.response.headers["x-app"] == "yes"
            ws.send("héllo")
            assert ws.recv() == "héllo"
            ws.send(b"\x00\x01bin")
            assert ws.recv() == b"\x00\x01bin"
            ws.send("scope")
            sc = json.loads(ws.recv())
    assert sc["type"] == "websocket" and sc["scheme"] == "ws" and sc["http_version"] == "1.1"
    assert sc["path"] == "/ws/p x" and sc["raw_path"] == "/ws/p%20x" and sc["query_string"] == "a=1"
    assert sc["subprotocols"] == ["one", "two"] and sc["root_path"] == ""
    assert sc["asgi"] == {"version": "3.0", "spec_version": "2.4"}
    assert sc["client"][0] == "127.0.0.1" and sc["server"][1] == server.port
    assert ["upgrade", "websocket"] in [[n, v.lower()] for n, v in sc["headers"]]
    assert last_disconnect()["code"] == 1000


def test_no_subprotocol():
    with serving(echo_app) as server:
        with client(server) as ws:
            assert ws.subprotocol is None
            ws.send("x")
            assert ws.recv() == "x"


def test_app_closes_with_code_and_reason():
    with serving(echo_app) as server:
        with client(server) as ws:
            ws.send("close:4321:going away")
            with pytest.raises(ConnectionClosed) as ei:
                ws.recv()
            assert ei.value.rcvd.code == 4321 and ei.value.rcvd.reason == "going away"


def test_client_close_code_reaches_app():
    with serving(echo_app) as server:
        with client(server) as ws:
            ws.send("x")
            ws.recv()
            ws.close(4002, "bye now")
        d = last_disconnect()
        assert d["code"] == 4002 and d.get("reason") == "bye now"


def test_denial_response_and_403():
    async def app(scope, receive, send):
        assert (await receive())["type"] == "websocket.connect"
        if scope["path"] == "/deny":
            await send({"type": "websocket.http.response.start", "status": 401,
                        "headers": [(b"content-type", b"text/plain"), (b"x-why", b"token")]})
            await send({"type": "websocket.http.response.body", "body": b"no ", "more_body": True})
            await send({"type": "websocket.http.response.body", "body": b"entry"})
        elif scope["path"] == "/close":
            await send({"type": "websocket.close"})
        elif scope["path"] == "/error":
            raise RuntimeError("boom")
        # /none: returns without answering

    with serving(app) as server:
        with pytest.raises(InvalidStatus) as ei:
            client(server, "/deny")
        r = ei.value.response
        assert r.status_code == 401 and r.headers["x-why"] == "token" and r.body == b"no entry"
        with pytest.raises(InvalidStatus) as ei:
            client(server, "/close")
        assert ei.value.response.status_code == 403
        for path in ("/none", "/error"):
            with pytest.raises(InvalidStatus) as ei:
                client(server, path)
            assert ei.value.response.status_code == 500


def test_send_before_accept_and_after_close_errors():
    seen = {}

    async def app(scope, receive, send):
        await receive()
        try:
            await send({"type": "websocket.send", "text": "early"})
        except RuntimeError as exc:
            seen["early"] = str(exc)
        await send({"type": "websocket.accept"})
        msg = await receive()
        seen["msg"] = msg
        msg = await receive()
        seen["disconnect"] = msg
        try:
            await send({"type": "websocket.send", "text": "late"})
        except OSError as exc:
            seen["late"] = type(exc).__name__

    with serving(app) as server:
        with client(server) as ws:
            ws.send("a")
        import time
        for _ in range(500):
            if "late" in seen:
                break
            time.sleep(0.01)
    assert "before 'websocket.accept'" in seen["early"]
    assert seen["msg"] == {"type": "websocket.receive", "text": "a"}
    assert seen["disconnect"]["type"] == "websocket.disconnect" and seen["disconnect"]["code"] == 1000
    assert seen["late"] == "ClientDisconnected"


def test_app_error_after_accept_closes_1011():
    async def app(scope, receive, send):
        await receive()
        await send({"type": "websocket.accept"})
        await receive()
        raise ValueError("app bug")

    with serving(app) as server:
        with client(server) as ws:
            ws.send("x")
            with pytest.raises(ConnectionClosed) as ei:
                ws.recv()
            assert ei.value.rcvd.code == 1011


def test_max_size_closes_1009():
    with serving(echo_app, ws_max_size=1000) as server:
        with client(server) as ws:
            ws.send(b"x" * 1000)
            assert ws.recv() == b"x" * 1000
            ws.send(b"x" * 1001)
            with pytest.raises(ConnectionClosed) as ei:
                ws.recv()
            assert ei.value.rcvd.code == 1009
        assert last_disconnect()["code"] == 1009


# ---------- raw sockets ----------

def raw_upgrade(server, extra=b""):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    key = base64.b64encode(os.urandom(16))
    s.sendall(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n" + extra + b"\r\n")
    f = s.makefile("rb")
    head = b""
    while True:
        line = f.readline()
        assert line, head
        head += line
        if line == b"\r\n":
            break
    assert head.startswith(b"HTTP/1.1 101 "), head
    return s, f, head


def frame(first, payload, mask=True):
    n = len(payload)
    mbit = 0x80 if mask else 0
    if n < 126:
        h = bytes([first, mbit | n])
    elif n < 65536:
        h = bytes([first, mbit | 126]) + struct.pack("!H", n)
    else:
        h = bytes([first, mbit | 127]) + struct.pack("!Q", n)
    if not mask:
        return h + payload
    key = os.urandom(4)
    return h + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def read_frame(f):
    h = f.read(2)
    assert len(h) == 2, "connection closed"
    n = h[1] & 0x7f
    if n == 126:
        n = struct.unpack("!H", f.read(2))[0]
    elif n == 127:
        n = struct.unpack("!Q", f.read(8))[0]
    return h[0], f.read(n)


def test_invalid_utf8_closes_1007():
    with serving(echo_app) as server:
        s, f, _ = raw_upgrade(server)
        s.sendall(frame(0x81, b"ok"))
        assert read_frame(f) == (0x81, b"ok")
        s.sendall(frame(0x81, b"\xc3\x28"))
        first, p = read_frame(f)
        assert first == 0x88 and struct.unpack("!H", p[:2])[0] == 1007
        f.close()
        s.close()
        assert last_disconnect()["code"] == 1007


def masked_parts(first, payload, cuts):
    """One masked frame cut at the payload offsets in cuts (TCP chops): the pieces before
    the last cut (the frame's rest is not sent)."""
    whole = frame(first, payload)
    head = len(whole) - len(payload)
    bounds = [0] + [head + c for c in cuts]
    return [whole[a:b] for a, b in zip(bounds, bounds[1:])]


# RFC 6455 8.1 (Autobahn 6.4.*): invalid UTF-8 fails the connection in the frame, or the
# part of a frame, where it occurs: the server's 1007 arrives while the message's rest
# is still unsent (read before sending it)
_VALID = "κόσμε".encode()
_INVALID = b"\xf4\x90\x80\x80"  # 0x110000: out of Unicode's range


@pytest.mark.parametrize("parts", [
    # fragments: a valid one, then one holding the invalid sequence (6.4.1)
    [frame(0x01, _VALID), frame(0x00, _INVALID)],
    # ... then only up to the byte that makes it invalid (6.4.2: F4 90 cannot start UTF-8)
    [frame(0x01, _VALID), frame(0x00, _INVALID[:2])],
    # one frame whose payload arrives in chops: the chop with the invalid bytes (6.4.3/4)
    masked_parts(0x81, _VALID + _INVALID + b"edited", [len(_VALID), len(_VALID) + 4]),
    masked_parts(0x81, _VALID + _INVALID + b"edited", [len(_VALID), len(_VALID) + 2]),
    # a sequence split across fragments that turns out invalid in the next one
    [frame(0x01, b"ok\xe0"), frame(0x00, b"\x80\x80")],
    # a surrogate
    [frame(0x01, b"ok"), frame(0x00, b"\xed\xa0\x80")],
], ids=["fragment", "fragment-up-to-the-byte", "chop", "chop-up-to-the-byte",
        "split-sequence", "surrogate"])
def test_invalid_utf8_fails_fast(parts):
    with serving(echo_app) as server:
        s, f, _ = raw_upgrade(server)
        for part in parts:  # never the message's end
            s.sendall(part)
        first, p = read_frame(f)
        assert first == 0x88 and struct.unpack("!H", p[:2])[0] == 1007
        f.close()
        s.close()
        assert last_disconnect()["code"] == 1007


def _long_range(n):
    """A message that deflate compresses with back-references about n bytes long: random
    blocks (of 16 letters: Huffman codes shrink them too), each repeated after n bytes."""
    import random
    rnd = random.Random(n)
    blocks = [bytes(rnd.choice(b"abcdefghijklmnop") for _ in range(64)) for _ in range(max(n // 64, 1) + 1)]
    return b"".join(blocks) * 4


def inflate_within(p, bits):
    """Inflates p (a message's deflate data) as a peer whose window is 2^bits bytes: in
    steps of 32 output bytes, so that every back-reference is read from zlib's window of
    that size ("invalid distance too far back" otherwise; within one call's output zlib
    does not check the window)."""
    d = zlib.decompressobj(wbits=-bits)
    out = []
    buf = p + b"\x00\x00\xff\xff"
    while buf:
        out.append(d.decompress(buf, 32))
        buf = d.unconsumed_tail
    return b"".join(out)


def test_permessage_deflate_window_bits():
    """server_max_window_bits=N and client_max_window_bits=N (RFC 7692 7.1.2), N = 8..15:
    accepted and answered, the client's messages compressed with an N-bit window are read,
    and the server's compressed echo never refers farther back than 2^N bytes."""
    with serving(echo_app) as server:
        for bits in range(8, 16):
            cbits = max(bits, 9)  # zlib's deflate has no 8-bit window (it uses 9)
            ext = f"permessage-deflate; server_max_window_bits={bits}; client_max_window_bits={cbits}"
            s, f, head = raw_upgrade(server, b"Sec-WebSocket-Extensions: " + ext.encode() + b"\r\n")
            ext_line = [ln for ln in head.lower().split(b"\r\n") if ln.startswith(b"sec-websocket-extensions:")]
            assert ext_line == [b"sec-websocket-extensions: permessage-deflate; server_no_context_takeover; "
                                b"server_max_window_bits=%d; client_max_window_bits=%d" % (bits, cbits)], head
            comp = zlib.compressobj(wbits=-cbits)
            for msg in (_long_range(1 << bits), _long_range(1 << (bits - 2)), b"short " * 30):
                z = comp.compress(msg) + comp.flush(zlib.Z_SYNC_FLUSH)
                s.sendall(frame(0xc2, z[:-4]))
                first, p = read_frame(f)
                assert first == 0xc2, (bits, hex(first), p)  # compressed
                assert len(p) < len(msg)
                assert inflate_within(p, bits) == msg, bits
            s.sendall(frame(0x88, struct.pack("!H", 1000)))
            assert read_frame(f)[0] == 0x88
            f.close()
            s.close()


def test_permessage_deflate_negotiation():
    """RFC 7692 7.1: the first valid offer is taken; the response answers its parameters."""
    cases = [
        ("permessage-deflate; server_max_window_bits=10; client_no_context_takeover",
         "permessage-deflate; server_no_context_takeover; server_max_window_bits=10; client_no_context_takeover"),
        ("permessage-deflate; client_max_window_bits",  # no value: nothing to answer
         "permessage-deflate; server_no_context_takeover"),
        ('permessage-deflate; client_max_window_bits="12"',
         "permessage-deflate; server_no_context_takeover; client_max_window_bits=12"),
        # invalid offers are skipped: a window out of range, a missing value, a leading zero
        ("permessage-deflate; server_max_window_bits=7, permessage-deflate; server_max_window_bits, "
         "permessage-deflate; server_max_window_bits=09, permessage-deflate; server_max_window_bits=11",
         "permessage-deflate; server_no_context_takeover; server_max_window_bits=11"),
        ("permessage-deflate; client_max_window_bits=16", None),
    ]
    with serving(echo_app) as server:
        for offer, want in cases:
            s, f, head = raw_upgrade(server, b"Sec-WebSocket-Extensions: " + offer.encode() + b"\r\n")
            got = [ln.split(b": ", 1)[1].decode() for ln in head.lower().split(b"\r\n")
                   if ln.startswith(b"sec-websocket-extensions:")]
            assert got == ([want] if want else []), offer
            f.close()
            s.close()


def test_permessage_deflate_window_bits_with_websockets_client():
    """The websockets library asks for small windows both ways: messages go through."""
    from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory
    with serving(echo_app) as server:
        for bits in (9, 12):
            factory = ClientPerMessageDeflateFactory(server_max_window_bits=bits, client_max_window_bits=bits)
            with client(server, extensions=[factory], compression=None, max_size=None) as ws:
                ext = ws.protocol.extensions[0]
                assert ext.name == "permessage-deflate" and ext.remote_max_window_bits == bits
                for msg in (json.dumps({"items": [{"id": i, "name": f"n{i}"} for i in range(500)]}),
                            _long_range(1 << bits)):
                    ws.send(msg)
                    assert ws.recv() == msg


@pytest.mark.parametrize("data,code", [
    (frame(0x81, b"x", mask=False), 1002),           # client frames must be masked
    (frame(0x83, b"x"), 1002),                       # reserved opcode
    (frame(0x80, b"x"), 1002),                       # continuation without a start
    (frame(0x09, b"x"), 1002),                       # fragmented control frame
    (frame(0x89, b"x" * 126), 1002),                 # control frame too long
    (frame(0x88, b"\x03\xed"), 1002),                # close code 1005 on the wire
    (frame(0x88, b"\x03\xe8\xff"), 1007),            # close reason not UTF-8
], ids=["unmasked", "reserved-opcode", "lone-continuation", "fragmented-control",
        "long-control", "close-1005", "close-reason-not-utf8"])
def test_protocol_errors(data, code):
    with serving(echo_app) as server:
        s, f, _ = raw_upgrade(server)
        s.sendall(data)
        first, p = read_frame(f)
        assert first == 0x88 and struct.unpack("!H", p[:2])[0] == code
        f.close()
        s.close()


def test_fragments_with_interleaved_control_frames():
    """Autobahn 5.x basics: a text message in fragments with pings between them."""
    with serving(echo_app) as server:
        s, f, _ = raw_upgrade(server)
        text = "fragmentiert ✓".encode()
        s.sendall(frame(0x01, text[:5]) + frame(0x89, b"ping1") + frame(0x00, text[5:13]))
        assert read_frame(f) == (0x8a, b"ping1")
        s.sendall(frame(0x8a, b"unsolicited pong") + frame(0x80, text[13:]))
        assert read_frame(f) == (0x81, text)
        # a split UTF-8 sequence across fragments is fine
        s.sendall(frame(0x01, "✓".encode()[:1]) + frame(0x80, "✓".encode()[1:]))
        assert read_frame(f) == (0x81, "✓".encode())
        # empty messages
        s.sendall(frame(0x81, b"") + frame(0x82, b""))
        assert read_frame(f) == (0x81, b"")
        assert read_frame(f) == (0x82, b"")
        # close handshake: echoed, then the server closes the TCP connection
        s.sendall(frame(0x88, struct.pack("!H", 1000)))
        first, p = read_frame(f)
        assert first == 0x88 and struct.unpack("!H", p[:2])[0] == 1000
        assert f.read(1) == b""
        f.close()
        s.close()


def test_permessage_deflate_raw():
    with serving(echo_app) as server:
        s, f, head = raw_upgrade(server, b"Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n")
        assert b"sec-websocket-extensions: permessage-deflate" in head.lower()
        msg = ("compressible " * 5000).encode()
        comp = zlib.compressobj(wbits=-15)
        for i in range(3):  # the client keeps its context across messages
            z = comp.compress(msg) + comp.flush(zlib.Z_SYNC_FLUSH)
            assert z.endswith(b"\x00\x00\xff\xff")
            s.sendall(frame(0xc1, z[:-4]))
            first, p = read_frame(f)
            assert first == 0xc1, hex(first)  # compressed (RSV1)
            assert len(p) < len(msg) // 10
            d = zlib.decompressobj(wbits=-15)
            assert d.decompress(p + b"\x00\x00\xff\xff") == msg
        f.close()
        s.close()


def test_permessage_deflate_with_websockets_client():
    with serving(echo_app) as server:
        with client(server, compression="deflate", max_size=None) as ws:
            assert ws.protocol.extensions and ws.protocol.extensions[0].name == "permessage-deflate"
            big = "goloop " * 300_000  # 2.1 MB, compressible
            ws.send(big)
            assert ws.recv() == big
            blob = bytes(range(256)) * 4000
            ws.send(blob)
            assert ws.recv() == blob
    with serving(echo_app, ws_per_message_deflate=False) as server:
        with client(server, compression="deflate") as ws:
            assert not ws.protocol.extensions
            ws.send("plain")
            assert ws.recv() == "plain"


def test_many_concurrent_connections():
    n = 100

    async def main():
        from websockets.asyncio.client import connect
        async def one(i):
            async with connect(url(server), proxy=None, open_timeout=20) as ws:
                for j in range(5):
                    await ws.send(f"{i}-{j}")
                    assert await ws.recv() == f"{i}-{j}"
                await ws.send(bytes([i % 256]) * 1000)
                assert await ws.recv() == bytes([i % 256]) * 1000
        await asyncio.gather(*(one(i) for i in range(n)))

    with serving(echo_app) as server:
        asyncio.run(main())
        import time
        for _ in range(500):
            if server.stats()[0] == 0:
                break
            time.sleep(0.01)
        assert server.stats()[0] == 0  # every connection closed
    assert sum(m["type"] == "websocket.disconnect" for m in events) == n


def test_ping_pong_both_ways():
    with serving(echo_app, ws_ping_interval=0.05, ws_ping_timeout=5) as server:
        # the server's keep-alive pings are answered by the client (websockets does it)
        with client(server, ping_interval=None) as ws:
            ws.ping(b"client-ping").wait(10)  # the server answers the client's ping
            import time
            time.sleep(0.3)  # several server pings answered meanwhile
            ws.send("still open")
            assert ws.recv() == "still open"
    # a client that never answers is closed with 1011
    with serving(echo_app, ws_ping_interval=0.05, ws_ping_timeout=0.2) as server:
        s, f, _ = raw_upgrade(server)
        assert read_frame(f)[0] == 0x89
        while True:
            first, p = read_frame(f)
            if first == 0x88:
                break
        assert struct.unpack("!H", p[:2])[0] == 1011
        f.close()
        s.close()


def test_backpressure_large_sends():
    async def app(scope, receive, send):
        await receive()
        await send({"type": "websocket.accept"})
        for i in range(50):
            await send({"type": "websocket.send", "bytes": bytes([i]) * 200_000})
        await send({"type": "websocket.close", "code": 1000})

    with serving(app, ws_per_message_deflate=False) as server:
        with client(server, max_size=None) as ws:
            import time
            time.sleep(0.2)  # the server's output fills the socket meanwhile
            for i in range(50):
                assert ws.recv() == bytes([i]) * 200_000


def test_ws_none_is_plain_http():
    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": scope["type"].encode()})

    with serving(app, ws="none") as server:
        with pytest.raises(InvalidStatus) as ei:
            client(server)
        assert ei.value.response.status_code == 200 and ei.value.response.body == b"http"


def test_starlette_websocket_endpoint():
    pytest.importorskip("starlette")
    from starlette.applications import Starlette
    from starlette.routing import WebSocketRoute
    from starlette.websockets import WebSocketDisconnect

    got = {}

    async def chat(websocket):
        await websocket.accept(subprotocol="chat")
        name = websocket.path_params["name"]
        try:
            while True:
                data = await websocket.receive_json()
                await websocket.send_json({"hello": name, "echo": data})
        except WebSocketDisconnect as exc:
            got["code"] = exc.code

    async def bytes_ep(websocket):
        await websocket.accept()
        data = await websocket.receive_bytes()
        await websocket.send_bytes(data[::-1])
        await websocket.close(code=4000, reason="done")

    app = Starlette(routes=[WebSocketRoute("/chat/{name}", chat), WebSocketRoute("/bytes", bytes_ep)])
    with serving(app) as server:
        with client(server, "/chat/ann", subprotocols=["chat"]) as ws:
            assert ws.subprotocol == "chat"
            ws.send(json.dumps({"n": 1}))
            assert json.loads(ws.recv()) == {"hello": "ann", "echo": {"n": 1}}
            ws.close(1001)
        with client(server, "/bytes") as ws:
            ws.send(b"abc")
            assert ws.recv() == b"cba"
            with pytest.raises(ConnectionClosed) as ei:
                ws.recv()
            assert ei.value.rcvd.code == 4000 and ei.value.rcvd.reason == "done"
        with pytest.raises(InvalidStatus) as ei:  # no route: Starlette closes before accept
            client(server, "/nowhere")
        assert ei.value.response.status_code == 403
        import time
        for _ in range(500):
            if "code" in got:
                break
            time.sleep(0.01)
        assert got["code"] == 1001


def test_cli_ws_options():
    from goloop.serve import server as _serve
    p = _serve._parser()
    a = p.parse_args(["x:app", "--ws-max-size", "10", "--ws-ping-interval", "1.5", "--ws-per-message-deflate", "false",
                      "--ws", "none"])
    assert a.ws_max_size == 10 and a.ws_ping_interval == 1.5 and a.ws_per_message_deflate is False
    assert a.ws == "none"
    with pytest.raises(_serve.ConfigError):
        _serve.Server(echo_app, ws="bogus")


async def scope_app(scope, receive, send):
    if scope["type"] != "websocket":
        return
    await receive()
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.send", "text": json.dumps({"scheme": scope["scheme"], "client": scope["client"]})})
    await send({"type": "websocket.close"})


@pytest.mark.parametrize("proto,want", [("https", "wss"), ("http", "ws"), ("wss", "wss")])
def test_proxy_headers_reach_the_websocket_scope(proto, want):
    """A trusted proxy's X-Forwarded-For/-Proto set the websocket scope's client and scheme
    (https -> wss), as uvicorn's proxy middleware does; untrusted, they do not."""
    hdrs = {"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": proto}
    with serving(scope_app) as server:  # on by default, 127.0.0.1 trusted
        with client(server, additional_headers=hdrs) as ws:
            got = json.loads(ws.recv(timeout=10))
        assert got == {"scheme": want, "client": ["203.0.113.7", 0]}
    with serving(scope_app, proxy_headers=False) as server:
        with client(server, additional_headers=hdrs) as ws:
            got = json.loads(ws.recv(timeout=10))
        assert got["scheme"] == "ws" and got["client"][0] == "127.0.0.1" and got["client"][1] > 0
