"""TLS on goloop: asyncio's SSLProtocol over goloop's Go socket transport, for
create_connection/create_server/create_unix_*, streams and start_tls; asyncio's own loop is
the oracle. Test certificates (a CA, server and client certificates) are made here, with the
`cryptography` package if installed, else the openssl command line tool."""
from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import ssl
import subprocess
from dataclasses import dataclass


@dataclass
class CertSet:
    dir: str
    ca_cert: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    other_ca_cert: str  # a CA that signed nothing here: verification must fail with it

    def server_context(self, *, require_client_cert: bool = False) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.server_cert, self.server_key)
        if require_client_cert:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(self.ca_cert)
        return ctx

    def client_context(self, *, ca: str | None = None, with_cert: bool = False) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(ca or self.ca_cert)
        if with_cert:
            ctx.load_cert_chain(self.client_cert, self.client_key)
        return ctx


def make_certs(directory: str) -> CertSet:
    try:
        import cryptography  # noqa: F401
    except ImportError:
        return _make_with_openssl(directory)
    return _make_with_cryptography(directory)


def _paths(d: str) -> CertSet:
    j = lambda n: os.path.join(d, n)  # noqa: E731
    return CertSet(d, j("ca.pem"), j("server.pem"), j("server.key"), j("client.pem"),
                   j("client.key"), j("other-ca.pem"))


def _make_with_cryptography(d: str) -> CertSet:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    paths = _paths(d)

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn),
                          x509.NameAttribute(NameOID.ORGANIZATION_NAME, "goloop tests")])

    def write_key(key, path):
        with open(path, "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))

    def write_cert(cert, path):
        with open(path, "wb") as f:
            f.write(cert.public_bytes(serialization.Encoding.PEM))

    def make_ca(cn):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(name(cn))
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=30))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                             crl_sign=True, content_commitment=False,
                                             key_encipherment=False, data_encipherment=False,
                                             key_agreement=False, encipher_only=False,
                                             decipher_only=False), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                               critical=False)
                .sign(key, hashes.SHA256()))
        return key, cert

    def make_leaf(ca_key, ca_cert, cn, sans, eku):
        key = ec.generate_private_key(ec.SECP256R1())
        b = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(ca_cert.subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(days=1))
             .not_valid_after(now + datetime.timedelta(days=30))
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.ExtendedKeyUsage([eku]), critical=False)
             .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                 ca_key.public_key()), critical=False))
        if sans:
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return key, b.sign(ca_key, hashes.SHA256())

    ca_key, ca_cert = make_ca("goloop test CA")
    _, other_ca = make_ca("goloop other CA")
    skey, scert = make_leaf(ca_key, ca_cert, "localhost",
                            [x509.DNSName("localhost"),
                             x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                             x509.IPAddress(ipaddress.ip_address("::1"))],
                            ExtendedKeyUsageOID.SERVER_AUTH)
    ckey, ccert = make_leaf(ca_key, ca_cert, "goloop client", [],
                            ExtendedKeyUsageOID.CLIENT_AUTH)
    write_cert(ca_cert, paths.ca_cert)
    write_cert(other_ca, paths.other_ca_cert)
    write_cert(scert, paths.server_cert)
    write_key(skey, paths.server_key)
    write_cert(ccert, paths.client_cert)
    write_key(ckey, paths.client_key)
    return paths


def _make_with_openssl(d: str) -> CertSet:  # pragma: no cover - when cryptography is absent
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("neither the cryptography package nor openssl is available")
    paths = _paths(d)

    def sh(*args):
        subprocess.run([openssl, *args], check=True, capture_output=True, cwd=d)

    def ca(cert, key, cn):
        sh("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
           "-keyout", key, "-out", cert, "-days", "30", "-subj", f"/CN={cn}",
           "-addext", "basicConstraints=critical,CA:TRUE",
           "-addext", "keyUsage=critical,keyCertSign,cRLSign")

    ca(paths.ca_cert, os.path.join(d, "ca.key"), "goloop test CA")
    ca(paths.other_ca_cert, os.path.join(d, "other-ca.key"), "goloop other CA")
    for cert, key, cn, ext in [
            (paths.server_cert, paths.server_key, "localhost",
             "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\nextendedKeyUsage=serverAuth\n"),
            (paths.client_cert, paths.client_key, "goloop client",
             "extendedKeyUsage=clientAuth\n")]:
        csr = cert + ".csr"
        extfile = cert + ".ext"
        with open(extfile, "w") as f:
            f.write("basicConstraints=CA:FALSE\n" + ext)
        sh("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
           "-keyout", key, "-out", csr, "-subj", f"/CN={cn}")
        sh("x509", "-req", "-in", csr, "-CA", paths.ca_cert, "-CAkey",
           os.path.join(d, "ca.key"), "-CAcreateserial", "-out", cert, "-days", "30",
           "-extfile", extfile)
    return paths


# ---------------------------------------------------------------------------------------
# TLS over goloop: asyncio's SSLProtocol on top of goloop's SocketTransport
# ---------------------------------------------------------------------------------------

import asyncio
import hashlib
import ssl
import tempfile

import pytest

from loophelpers import is_goloop

pytestmark = pytest.mark.timeout(60)

MIB = 1024 * 1024


@pytest.fixture(scope="session")
def certs():
    with tempfile.TemporaryDirectory(prefix="goloop-tls-") as d:
        try:
            made = make_certs(d)
        except RuntimeError as exc:  # no cryptography (3.13t has no wheel) and no openssl
            pytest.skip(str(exc))
        yield made


def run(loop, coro, timeout=30):
    return loop.run_until_complete(asyncio.wait_for(coro, timeout))


async def echo_handler(reader, writer):
    try:
        while data := await reader.read(256 * 1024):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


async def roundtrip(reader, writer, payload: bytes) -> bytes:
    async def send():
        view = memoryview(payload)
        for i in range(0, len(payload), 256 * 1024):
            writer.write(view[i:i + 256 * 1024])
            await writer.drain()

    async def recv():
        got = bytearray()
        while len(got) < len(payload):
            data = await reader.read(256 * 1024)
            if not data:
                break
            got += data
        return bytes(got)

    _, got = await asyncio.gather(send(), recv())
    return got


def raw_transport(writer):
    """The socket transport under a TLS stream's app transport."""
    return writer.transport._ssl_protocol._transport


# -- basic connections ------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_tcp_streams_echo(loop, certs, host):
    async def main():
        server = await asyncio.start_server(echo_handler, "127.0.0.1", 0,
                                            ssl=certs.server_context())
        port = server.sockets[0].getsockname()[1]
        kw = {"server_hostname": "localhost"} if host == "127.0.0.1" else {}
        reader, writer = await asyncio.open_connection(host if host == "localhost" else
                                                       "127.0.0.1", port,
                                                       ssl=certs.client_context(), **kw)
        try:
            got = await roundtrip(reader, writer, b"hello tls" * 100)
            return got, type(raw_transport(writer)).__module__
        finally:
            writer.close()
            await writer.wait_closed()
            server.close()
            await server.wait_closed()

    got, mod = run(loop, main())
    assert got == b"hello tls" * 100
    if is_goloop(loop):
        assert mod == "goloop._transports"  # TLS rides on goloop's Go transport


def test_protocol_api_create_server_create_connection(loop, certs):
    class Server(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport

        def data_received(self, data):
            self.transport.write(data[::-1])

    class Client(asyncio.Protocol):
        def __init__(self):
            self.buf = bytearray()
            self.done = loop.create_future()

        def data_received(self, data):
            self.buf += data
            if len(self.buf) >= 6:
                self.done.set_result(bytes(self.buf))

        def connection_lost(self, exc):
            if not self.done.done():
                self.done.set_exception(exc or ConnectionError("lost"))

    async def main():
        server = await loop.create_server(Server, "127.0.0.1", 0, ssl=certs.server_context())
        port = server.sockets[0].getsockname()[1]
        tr, pr = await loop.create_connection(Client, "127.0.0.1", port,
                                              ssl=certs.client_context(),
                                              server_hostname="localhost")
        try:
            tr.write(b"abcdef")
            return await pr.done
        finally:
            tr.close()
            await asyncio.sleep(0.02)  # let both ends see connection_lost
            server.close()
            await server.wait_closed()

    assert run(loop, main()) == b"fedcba"


def test_unix_sockets(loop, certs, tmp_path):
    path = str(tmp_path / "tls.sock")

    async def main():
        server = await asyncio.start_unix_server(echo_handler, path, ssl=certs.server_context())
        reader, writer = await asyncio.open_unix_connection(
            path, ssl=certs.client_context(), server_hostname="localhost")
        try:
            return await roundtrip(reader, writer, b"over unix" * 1000)
        finally:
            writer.close()
            await writer.wait_closed()
            server.close()
            await server.wait_closed()

    assert run(loop, main()) == b"over unix" * 1000


def test_unix_connection_requires_server_hostname(loop, certs, tmp_path):
    path = str(tmp_path / "tls.sock")

    async def main():
        server = await asyncio.start_unix_server(echo_handler, path, ssl=certs.server_context())
        try:
            with pytest.raises(ValueError):
                await asyncio.open_unix_connection(path, ssl=certs.client_context())
        finally:
            server.close()
            await server.wait_closed()

    run(loop, main())


def test_mutual_tls(loop, certs):
    async def main():
        peer = loop.create_future()

        async def handler(reader, writer):
            peer.set_result(writer.get_extra_info("peercert"))
            await echo_handler(reader, writer)

        server = await asyncio.start_server(handler, "127.0.0.1", 0,
                                            ssl=certs.server_context(require_client_cert=True))
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=certs.client_context(with_cert=True),
            server_hostname="localhost")
        try:
            got = await roundtrip(reader, writer, b"mtls")
            return got, await peer
        finally:
            writer.close()
            await writer.wait_closed()
            server.close()
            await server.wait_closed()

    got, peercert = run(loop, main())
    assert got == b"mtls"
    assert dict(x[0] for x in peercert["subject"])["commonName"] == "goloop client"


# -- failures --------------------------------------------------------------------------


async def _serve(certs, **kw):
    server = await asyncio.start_server(echo_handler, "127.0.0.1", 0,
                                        ssl=certs.server_context(**kw))
    return server, server.sockets[0].getsockname()[1]


def test_verification_failure(loop, certs):
    async def main():
        server, port = await _serve(certs)
        try:
            with pytest.raises(ssl.SSLCertVerificationError) as ei:
                await asyncio.open_connection("127.0.0.1", port,
                                              ssl=certs.client_context(ca=certs.other_ca_cert),
                                              server_hostname="localhost")
            return ei.value.verify_code
        finally:
            server.close()
            await server.wait_closed()

    assert run(loop, main()) == 20  # X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY


def test_default_context_rejects_test_ca(loop, certs):
    async def main():
        server, port = await _serve(certs)
        try:
            with pytest.raises(ssl.SSLCertVerificationError):
                await asyncio.open_connection("127.0.0.1", port, ssl=True,
                                              server_hostname="localhost")
        finally:
            server.close()
            await server.wait_closed()

    run(loop, main())


def test_hostname_mismatch(loop, certs):
    async def main():
        server, port = await _serve(certs)
        try:
            with pytest.raises(ssl.SSLCertVerificationError) as ei:
                await asyncio.open_connection("127.0.0.1", port, ssl=certs.client_context(),
                                              server_hostname="wrong.example")
            return ei.value.verify_code
        finally:
            server.close()
            await server.wait_closed()

    assert run(loop, main()) == 62  # X509_V_ERR_HOSTNAME_MISMATCH


def test_missing_client_certificate(loop, certs):
    async def main():
        server, port = await _serve(certs, require_client_cert=True)
        try:
            # TLS 1.3: the client learns of the rejection on its first read
            try:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, ssl=certs.client_context(), server_hostname="localhost")
            except (ssl.SSLError, ConnectionError) as exc:
                return type(exc)
            try:
                writer.write(b"x")
                return await reader.read(10)  # refused: EOF (or an error), never the echo
            except (ssl.SSLError, ConnectionError) as exc:
                return type(exc)
            finally:
                writer.close()
        finally:
            server.close()
            await server.wait_closed()

    outcome = run(loop, main())
    assert outcome == b"" or issubclass(outcome, (ssl.SSLError, ConnectionError))


def test_handshake_timeout(loop, certs):
    exc_type = _handshake_timeout_case(loop, certs)
    assert exc_type in (asyncio.TimeoutError, ConnectionAbortedError)


def _handshake_timeout_case(loop, certs):
    async def main():
        accepted = []

        async def silent(reader, writer):  # a plain server that never answers the hello
            accepted.append(writer)
            await reader.read()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        t0 = loop.time()
        try:
            with pytest.raises((asyncio.TimeoutError, ConnectionAbortedError)) as ei:
                await asyncio.open_connection("127.0.0.1", port, ssl=certs.client_context(),
                                              server_hostname="localhost",
                                              ssl_handshake_timeout=0.2)
            return type(ei.value), loop.time() - t0
        finally:
            for w in accepted:
                w.close()
            server.close()
            await server.wait_closed()

    exc_type, elapsed = run(loop, main())
    # the 0.2 s timeout ended it, not the default 60 s one (30 s: room for a loaded machine)
    assert 0.15 < elapsed < 30
    return exc_type


def test_handshake_timeout_exception_type_matches_asyncio(certs):
    from loophelpers import make_loop
    types = []
    for kind in ("asyncio", "goloop"):  # the comparison needs both, whatever GOLOOP_TEST_LOOPS says
        lp = make_loop(kind)
        try:
            types.append(_handshake_timeout_case(lp, certs))
        finally:
            lp.close()
    assert types[0] is types[1], types


def test_ssl_handshake_timeout_without_ssl_is_rejected(loop):
    async def main():
        with pytest.raises(ValueError):
            await loop.create_connection(asyncio.Protocol, "127.0.0.1", 1,
                                         ssl_handshake_timeout=1)
        with pytest.raises(ValueError):
            await loop.create_server(asyncio.Protocol, "127.0.0.1", 0, ssl_handshake_timeout=1)

    run(loop, main())


def test_server_hostname_without_ssl_is_rejected(loop):
    async def main():
        with pytest.raises(ValueError):
            await loop.create_connection(asyncio.Protocol, "127.0.0.1", 1,
                                         server_hostname="localhost")

    run(loop, main())


@pytest.mark.parametrize("when", ["after_flush", "right_after_write"])
def test_unclean_shutdown(loop, certs, when, request):
    # the server drops the TCP connection without close_notify; asyncio's outcome: the
    # client reads what was sent, then a plain EOF

    async def main():
        async def rude(reader, writer):
            writer.write(b"partial")
            await writer.drain()
            if when == "after_flush":
                await asyncio.sleep(0.05)
            raw_transport(writer).abort()

        server = await asyncio.start_server(rude, "127.0.0.1", 0, ssl=certs.server_context())
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=certs.client_context(), server_hostname="localhost")
        try:
            got = await reader.read(100)
            try:
                rest = await reader.read(100)
                outcome = ("eof", rest)
            except (ConnectionError, ssl.SSLError) as exc:
                outcome = ("error", type(exc))
            return got, outcome
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, ssl.SSLError):
                pass
            server.close()
            await server.wait_closed()

    assert run(loop, main()) == (b"partial", ("eof", b""))


def test_plain_abort_right_after_write(loop, request):
    # the root cause of test_unclean_shutdown[goloop-right_after_write], without TLS

    async def main():
        async def handler(reader, writer):
            writer.write(b"partial")
            writer.transport.abort()

        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname())
        try:
            return await reader.read(100)
        finally:
            writer.close()
            server.close()
            await server.wait_closed()

    assert run(loop, main()) == b"partial"


def test_clean_shutdown_eof(loop, certs):
    async def main():
        async def polite(reader, writer):
            writer.write(b"bye")
            await writer.drain()
            writer.close()
            await writer.wait_closed()

        server = await asyncio.start_server(polite, "127.0.0.1", 0, ssl=certs.server_context())
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=certs.client_context(), server_hostname="localhost")
        try:
            return await reader.read(), reader.at_eof()
        finally:
            writer.close()
            await writer.wait_closed()
            server.close()
            await server.wait_closed()

    assert run(loop, main()) == (b"bye", True)


# -- start_tls --------------------------------------------------------------------------


def test_start_tls_both_sides(loop, certs):
    async def main():
        server_info = loop.create_future()

        async def handler(reader, writer):
            line = await reader.readline()
            assert line == b"STARTTLS\n"
            writer.write(b"GO AHEAD\n")
            await writer.drain()
            await writer.start_tls(certs.server_context())
            server_info.set_result(writer.get_extra_info("ssl_object") is not None)
            await echo_handler(reader, writer)

        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            assert writer.get_extra_info("ssl_object") is None
            writer.write(b"STARTTLS\n")
            assert await reader.readline() == b"GO AHEAD\n"
            await writer.start_tls(certs.client_context(), server_hostname="localhost")
            got = await roundtrip(reader, writer, b"now encrypted" * 5000)
            return got, writer.get_extra_info("ssl_object").version(), await server_info
        finally:
            writer.close()
            await writer.wait_closed()
            server.close()
            await server.wait_closed()

    got, version, server_tls = run(loop, main())
    assert got == b"now encrypted" * 5000 and version.startswith("TLS") and server_tls


def test_loop_start_tls_protocol_api(loop, certs):
    class Proto(asyncio.Protocol):
        def __init__(self):
            self.buf = bytearray()
            self.waiter = None
            self.transport = None

        def connection_made(self, transport):
            self.transport = transport

        def data_received(self, data):
            self.buf += data
            if self.waiter and not self.waiter.done():
                self.waiter.set_result(None)

        async def read(self, n):
            while len(self.buf) < n:
                self.waiter = loop.create_future()
                await self.waiter
            out = bytes(self.buf[:n])
            del self.buf[:n]
            return out

    async def main():
        sproto_f = loop.create_future()

        def make_server():
            p = Proto()
            sproto_f.set_result(p)
            return p

        server = await loop.create_server(make_server, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        ctr, cpr = await loop.create_connection(Proto, "127.0.0.1", port)
        spr = await sproto_f
        ctr.write(b"plain")
        assert await spr.read(5) == b"plain"
        s_task = loop.create_task(loop.start_tls(spr.transport, spr, certs.server_context(),
                                                 server_side=True))
        c_tls = await loop.start_tls(ctr, cpr, certs.client_context(),
                                     server_hostname="localhost")
        s_tls = await s_task
        try:
            assert ctr.is_closing() or True
            c_tls.write(b"secret")
            assert await spr.read(6) == b"secret"
            s_tls.write(b"reply")
            assert await cpr.read(5) == b"reply"
            return (c_tls.get_extra_info("ssl_object").server_side,
                    s_tls.get_extra_info("ssl_object").server_side)
        finally:
            c_tls.close()
            s_tls.close()
            server.close()
            await server.wait_closed()

    assert run(loop, main()) == (False, True)


def test_start_tls_rejects_non_ssl_context(loop):
    async def main():
        server = await asyncio.start_server(echo_handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        tr, pr = await loop.create_connection(asyncio.Protocol, "127.0.0.1", port)
        try:
            with pytest.raises(TypeError):
                await loop.start_tls(tr, pr, object())
        finally:
            tr.close()
            await asyncio.sleep(0.02)
            server.close()
            await server.wait_closed()

    run(loop, main())


# -- bulk and extra info ------------------------------------------------------------------


def test_large_transfers_both_ways(loop, certs):
    payload = hashlib.sha256(b"seed").digest() * (8 * MIB // 32)  # 8 MiB

    async def main():
        server, port = await _serve(certs)
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=certs.client_context(), server_hostname="localhost")
        try:
            return await roundtrip(reader, writer, payload)
        finally:
            writer.close()
            await writer.wait_closed()
            server.close()
            await server.wait_closed()

    got = run(loop, main(), timeout=50)
    assert len(got) == len(payload) and got == payload


def test_large_single_write_then_eof(loop, certs):
    # one 8 MiB write, then write_eof is not supported over TLS: close instead
    payload = b"\xab" * (8 * MIB)

    async def main():
        got = loop.create_future()

        async def sink(reader, writer):
            got.set_result(await reader.read())
            writer.close()

        server = await asyncio.start_server(sink, "127.0.0.1", 0, ssl=certs.server_context())
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=certs.client_context(), server_hostname="localhost")
        assert not writer.can_write_eof()
        writer.write(payload)
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        data = await got
        server.close()
        await server.wait_closed()
        return data

    data = run(loop, main(), timeout=50)
    assert len(data) == len(payload) and data == payload


def test_extra_info(loop, certs):
    async def main():
        server, port = await _serve(certs)
        cctx = certs.client_context()
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=cctx,
                                                       server_hostname="localhost")
        try:
            info = {k: writer.get_extra_info(k) for k in
                    ("peercert", "cipher", "compression", "ssl_object", "sslcontext",
                     "peername", "sockname", "socket")}
            info["ctx_is_ours"] = info["sslcontext"] is cctx
            return info
        finally:
            writer.close()
            await writer.wait_closed()
            server.close()
            await server.wait_closed()

    info = run(loop, main())
    assert dict(x[0] for x in info["peercert"]["subject"])["commonName"] == "localhost"
    name, version, bits = info["cipher"]
    assert version.startswith("TLS") and bits >= 128
    assert info["compression"] is None
    assert isinstance(info["ssl_object"], ssl.SSLObject)
    assert info["ssl_object"].server_hostname == "localhost"
    assert info["ctx_is_ours"]
    assert info["peername"][0] == "127.0.0.1" and info["sockname"][0] == "127.0.0.1"
    assert info["socket"] is not None


def test_many_concurrent_tls_clients(loop, certs):
    async def main():
        server, port = await _serve(certs)
        cctx = certs.client_context()

        async def one(i):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=cctx,
                                                           server_hostname="localhost")
            try:
                return await roundtrip(reader, writer, str(i).encode() * 1000)
            finally:
                writer.close()
                await writer.wait_closed()

        try:
            return await asyncio.gather(*(one(i) for i in range(20)))
        finally:
            server.close()
            await server.wait_closed()

    assert run(loop, main()) == [str(i).encode() * 1000 for i in range(20)]


def test_connect_accepted_socket_with_ssl(loop, certs):
    import socket as _socket

    async def main():
        lsock = _socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen()
        lsock.setblocking(False)
        client_task = loop.create_task(asyncio.open_connection(
            "127.0.0.1", lsock.getsockname()[1], ssl=certs.client_context(),
            server_hostname="localhost"))
        conn, _ = await loop.sock_accept(lsock)
        lsock.close()
        reader_s = asyncio.StreamReader()
        tr, _ = await loop.connect_accepted_socket(
            lambda: asyncio.StreamReaderProtocol(reader_s), conn, ssl=certs.server_context())
        reader, writer = await client_task
        try:
            writer.write(b"accepted")
            got = await reader_s.readexactly(8)
            tr.write(b"back")
            back = await reader.readexactly(4)
            return got, back
        finally:
            tr.close()
            writer.close()
            await writer.wait_closed()

    assert run(loop, main()) == (b"accepted", b"back")


def test_buffered_protocol_over_tls(loop, certs):
    payload = b"\x5a" * (3 * MIB)

    class Buffered(asyncio.BufferedProtocol):
        def __init__(self):
            self.buf = bytearray(64 * 1024)
            self.got = bytearray()
            self.done = loop.create_future()

        def get_buffer(self, sizehint):
            # a memoryview: 3.11's SSLProtocol reads into buf[offset:], a copy for a bytearray
            return memoryview(self.buf)

        def buffer_updated(self, nbytes):
            self.got += self.buf[:nbytes]
            if len(self.got) >= len(payload) and not self.done.done():
                self.done.set_result(bytes(self.got))

        def connection_lost(self, exc):
            if not self.done.done():
                self.done.set_exception(exc or ConnectionError("lost"))

    async def main():
        server, port = await _serve(certs)
        tr, pr = await loop.create_connection(Buffered, "127.0.0.1", port,
                                              ssl=certs.client_context(),
                                              server_hostname="localhost")
        try:
            tr.write(payload)
            return await pr.done
        finally:
            tr.close()
            await asyncio.sleep(0.02)
            server.close()
            await server.wait_closed()

    assert run(loop, main()) == payload
