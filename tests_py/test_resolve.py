"""loop.getaddrinfo/getnameinfo: the socket module's results; numeric hosts answered without
an executor thread on goloop."""
import asyncio
import socket

import pytest

CASES = [
    ("127.0.0.1", 80, {}),
    ("127.0.0.1", "8080", {"type": socket.SOCK_STREAM}),
    ("::1", 443, {"family": socket.AF_INET6}),
    (None, 0, {"flags": socket.AI_PASSIVE}),
    ("0.0.0.0", None, {"type": socket.SOCK_DGRAM}),
    (b"127.0.0.1", 53, {"proto": socket.IPPROTO_UDP, "type": socket.SOCK_DGRAM}),
    ("localhost", 80, {"type": socket.SOCK_STREAM}),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("host,port,kw", CASES)
def test_getaddrinfo_matches_socket_module(loop, host, port, kw):
    expected = socket.getaddrinfo(host, port, kw.get("family", 0), kw.get("type", 0),
                                  kw.get("proto", 0), kw.get("flags", 0))
    got = loop.run_until_complete(loop.getaddrinfo(host, port, **kw))
    assert sorted(got) == sorted(expected)


@pytest.mark.timeout(60)
def test_getaddrinfo_errors_match(loop):
    with pytest.raises(socket.gaierror):
        loop.run_until_complete(loop.getaddrinfo("127.0.0.1", "not-a-port-xyz", flags=socket.AI_NUMERICSERV))


@pytest.mark.timeout(60)
def test_getnameinfo_matches_socket_module(loop):
    flags = socket.NI_NUMERICHOST | socket.NI_NUMERICSERV
    assert loop.run_until_complete(loop.getnameinfo(("127.0.0.1", 80), flags)) == \
        socket.getnameinfo(("127.0.0.1", 80), flags)


@pytest.mark.timeout(60)
def test_numeric_getaddrinfo_uses_no_thread(gloop):
    # goloop answers numeric hosts at once: the default executor is never started
    gloop.run_until_complete(gloop.getaddrinfo("127.0.0.1", 80))
    gloop.run_until_complete(gloop.getnameinfo(("127.0.0.1", 80), socket.NI_NUMERICHOST | socket.NI_NUMERICSERV))
    assert gloop._default_executor is None  # no executor was ever needed


@pytest.mark.timeout(60)
def test_getaddrinfo_on_closed_loop(loop):
    coro = loop.getaddrinfo("127.0.0.1", 80)
    loop.close()
    with pytest.raises(RuntimeError, match="closed"):
        coro.send(None)
    coro.close()
