"""start_tls on a server whose StreamReader already holds the start of the TLS stream.

A STARTTLS client may send its command and its ClientHello in one segment: the server's
StreamReader then buffers the ClientHello together with the command line. asyncio 3.13
(gh-142352) moves those bytes into the TLS protocol; goloop does so on every version.
"""
from __future__ import annotations

import asyncio
import socket
import ssl
import sys
import threading

import pytest

from loophelpers import is_goloop
from test_tls import certs, make_certs  # noqa: F401  (the session fixture)


def _client(port, ctx, out):
    """Blocking STARTTLS client: the command and the ClientHello in one sendall()."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            inc, outg = ssl.MemoryBIO(), ssl.MemoryBIO()
            obj = ctx.wrap_bio(inc, outg, server_hostname="localhost")
            try:
                obj.do_handshake()
            except ssl.SSLWantReadError:
                pass
            s.sendall(b"STARTTLS\n" + outg.read())
            while True:
                try:
                    obj.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    if outg.pending:
                        s.sendall(outg.read())
                    data = s.recv(65536)
                    if not data:
                        raise ConnectionError("server closed during the handshake")
                    inc.write(data)
            if outg.pending:
                s.sendall(outg.read())
            obj.write(b"hello over tls")
            s.sendall(outg.read())
            got = b""
            while not got:
                try:
                    got = obj.read(1024)
                except ssl.SSLWantReadError:
                    data = s.recv(65536)
                    if not data:
                        break
                    inc.write(data)
            out.append(got)
    except BaseException as e:  # reported by the test
        out.append(e)


def test_start_tls_takes_the_stream_readers_buffer(loop, certs):  # noqa: F811
    if not is_goloop(loop) and sys.version_info < (3, 13):
        pytest.skip("asyncio < 3.13 loses the buffered ClientHello (gh-142352)")

    async def handler(reader, writer):
        line = await reader.readline()
        assert line == b"STARTTLS\n"
        await writer.start_tls(certs.server_context())
        data = await reader.read(1024)
        writer.write(data.upper())
        await writer.drain()
        writer.close()

    async def main():
        srv = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        out = []
        t = threading.Thread(target=_client, args=(port, certs.client_context(), out))
        t.start()
        while t.is_alive():
            await asyncio.sleep(0.01)
        srv.close()
        return out

    out = loop.run_until_complete(asyncio.wait_for(main(), 20))
    assert out == [b"HELLO OVER TLS"]
