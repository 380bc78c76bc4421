"""goloop serve's operator controls: --workers-max-rss, --workers-lifetime, --access-log-fmt,
--pid-file, --process-name, --ssl-protocol-min, --ssl-crl; each through a real `python -m
goloop serve` (the master and workers of test_serve_workers.py, or a single process)."""
import datetime
import os
import socket
import ssl
import subprocess
import sys
import time

import pytest

from test_serve_http import PYSHIM
from test_serve_static import Serve, raw
from test_serve_workers import APP, WAIT, children, master_factory  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")


def wait_until(cond, what, timeout=WAIT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(what)


def test_workers_max_rss_replaces_a_worker_gracefully(master_factory):
    """Every worker is over 1 MiB: the master replaces it as a reload does (its successor
    serves first, then the old one stops gracefully), and keeps the count. One worker:
    --workers-max-rss alone makes a master."""
    m = master_factory("--workers", "1", "--workers-max-rss", "1")
    m.wait_for("Application startup complete")
    first = m.wait_workers(1)[0]
    found = m.wait_for(r"Worker \[(\d+)\] reached its resident memory of ([\d.]+) MiB \(over 1 MiB\): "
                       r"replacing it gracefully")
    assert int(found[0].group(1)) == first and float(found[0].group(2)) > 1
    # the old worker exits (stopped gracefully, not killed), a new one serves
    wait_until(lambda: first not in children(m.proc.pid), "the old worker did not exit:\n" + m.log())
    st, body = m.get("/")
    assert st == 200 and int(body.split()[1]) != first
    assert "restarting it" not in m.log()  # replaced, not restarted after a death


def test_workers_lifetime_staggered(master_factory):
    """--workers 2 --workers-lifetime 3: slot 0's first worker lives 3 s, slot 1's 4.5 s
    (offset by its share), so the two do not restart together; then each is replaced."""
    m = master_factory("--workers", "2", "--workers-lifetime", "3")
    m.wait_for("Application startup complete", count=2)
    before = set(m.wait_workers(2))
    m.wait_for(r"reached its lifetime of 3 s: replacing it gracefully")
    m.wait_for(r"reached its lifetime of 4\.5 s: replacing it gracefully")
    wait_until(lambda: not before & set(children(m.proc.pid)) and len(children(m.proc.pid)) == 2,
               "the first workers were not both replaced:\n" + m.log())
    assert m.get("/")[0] == 200


def test_pid_file_single_and_master(tmp_path, master_factory):
    pid_file = tmp_path / "goloop.pid"
    s = Serve(tmp_path, "app", "--pid-file", str(pid_file))
    try:
        assert pid_file.read_text().strip() == str(s.proc.pid)
    finally:
        assert s.stop() == 0
    assert not pid_file.exists()
    m = master_factory("--workers", "2", "--pid-file", str(pid_file))
    m.wait_workers(2)
    assert pid_file.read_text().strip() == str(m.proc.pid)  # the master's, never a worker's
    assert m.stop() == 0
    assert not pid_file.exists()


def _title(pid):
    with open(f"/proc/{pid}/comm") as f:
        comm = f.read().strip()
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        cmdline = f.read().split(b"\0")[0].decode()
    return comm, cmdline


def test_process_name(tmp_path, master_factory):
    s = Serve(tmp_path, "app", "--process-name", "shop-api")
    try:
        assert _title(s.proc.pid) == ("shop-api", "shop-api")
    finally:
        s.stop()
    m = master_factory("--workers", "2", "--process-name", "shop")
    workers = m.wait_workers(2)
    m.wait_for("Application startup complete", count=2)
    assert _title(m.proc.pid) == ("shop [master]", "shop [master]")
    titles = sorted(_title(w)[1] for w in workers)
    assert titles == ["shop [worker 0]", "shop [worker 1]"]
    assert all(_title(w)[0] == _title(w)[1][:15] for w in workers)  # the kernel's 15 bytes
    m.stop()
    m = master_factory("--workers", "2", "--process-name", "a-longer-service-name")
    workers = m.wait_workers(2)
    m.wait_for("Application startup complete", count=2)
    assert _title(m.proc.pid) == ("a-longer-servic", "a-longer-service-name [master]")


WSGI_APP = '''
def app(environ, start_response):
    start_response("201 Created", [("Content-Type", "text/plain")])
    return [b"made"]
'''


@pytest.mark.parametrize("wsgi", [False, True])
def test_access_log_fmt(tmp_path, wsgi):
    fmt = "AL|%(addr)s|%(method)s|%(path)s|%(query_string)s|%(protocol)s|%(status)d|%(dt_ms).2f|%(user_agent)s" \
          "|%(referer)s|%(time)s"
    s = Serve(tmp_path, "app" if not wsgi else "wsgi", "--access-log-fmt", fmt,
              *(["--interface", "wsgi"] if wsgi else []))
    try:
        raw(s.port, "GET", "/p?q=1", b"User-Agent: tester/2\r\nReferer: http://ref/\r\n")
        line = s.out.wait_for(r"AL\|.*", timeout=30)[0].group(0)
        f = line.split("|")
        assert f[1].startswith("127.0.0.1:") and f[2:7] == ["GET", "/p?q=1", "q=1", "HTTP/1.1", "200"]
        assert float(f[7]) >= 0 and f[8:10] == ["tester/2", "http://ref/"] and f[10].startswith("[")
    finally:
        s.stop()


def test_access_log_fmt_checked(tmp_path):
    (tmp_path / "wapp.py").write_text(APP)
    env = dict(os.environ, PYTHONPATH=PYSHIM)
    for fmt, msg in [("%(nope)s", "unknown placeholder 'nope'"), ("%(status)d %", "access_log_fmt")]:
        p = subprocess.run([sys.executable, "-P", "-m", "goloop", "serve", "wapp:app", "--app-dir", str(tmp_path),
                            "--access-log-fmt", fmt], env=env, capture_output=True, text=True, timeout=WAIT)
        assert p.returncode == 2 and msg in p.stderr, p.stderr


# ---------------------------------------------------------------- TLS

@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate, two client certificates and a CRL revoking one of them."""
    pytest.importorskip("cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    d = tmp_path_factory.mktemp("pki")
    now = datetime.datetime.now(datetime.timezone.utc)
    name = lambda cn: x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])  # noqa: E731
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("ops CA")).issuer_name(name("ops CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    paths = {}

    def issue(label, cn, usage, san=None):
        key = ec.generate_private_key(ec.SECP256R1())
        b = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(ca.subject).public_key(key.public_key())
             .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
             .not_valid_after(now + datetime.timedelta(days=1))
             .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if san:
            b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
        cert = b.sign(ca_key, hashes.SHA256())
        paths[label] = str(d / f"{label}.pem")
        paths[label + "_key"] = str(d / f"{label}.key")
        (d / f"{label}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (d / f"{label}.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                           serialization.PrivateFormat.PKCS8,
                                                           serialization.NoEncryption()))
        return cert

    import ipaddress
    issue("server", "localhost", ExtendedKeyUsageOID.SERVER_AUTH,
          [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    issue("good", "good client", ExtendedKeyUsageOID.CLIENT_AUTH)
    bad = issue("revoked", "revoked client", ExtendedKeyUsageOID.CLIENT_AUTH)
    crl = (x509.CertificateRevocationListBuilder().issuer_name(ca.subject).last_update(now)
           .next_update(now + datetime.timedelta(days=1))
           .add_revoked_certificate(x509.RevokedCertificateBuilder().serial_number(bad.serial_number)
                                    .revocation_date(now).build())
           .sign(ca_key, hashes.SHA256()))
    (d / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (d / "crl.pem").write_bytes(crl.public_bytes(serialization.Encoding.PEM))
    (d / "crl.der").write_bytes(crl.public_bytes(serialization.Encoding.DER))
    paths.update(ca=str(d / "ca.pem"), crl_pem=str(d / "crl.pem"), crl_der=str(d / "crl.der"))
    return paths


def handshake(port, pki, cert=None, max_version=None):
    """A TLS request; True if answered 200."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(pki["ca"])
    if cert:
        ctx.load_cert_chain(pki[cert], pki[cert + "_key"])
    if max_version:
        ctx.maximum_version = max_version
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            with ctx.wrap_socket(s, server_hostname="localhost") as t:
                t.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                return t.recv(100).startswith(b"HTTP/1.1 200")
    except (ssl.SSLError, OSError):
        return False


def test_ssl_protocol_min(tmp_path, pki):
    tls = ["--ssl-certfile", pki["server"], "--ssl-keyfile", pki["server_key"]]
    s = Serve(tmp_path, "app", *tls, "--ssl-protocol-min", "1.3", scheme="https")
    try:
        assert not handshake(s.port, pki, max_version=ssl.TLSVersion.TLSv1_2)
        assert handshake(s.port, pki)
    finally:
        s.stop()
    s = Serve(tmp_path, "app", *tls, scheme="https")  # the default: 1.2 accepted
    try:
        assert handshake(s.port, pki, max_version=ssl.TLSVersion.TLSv1_2)
    finally:
        s.stop()


@pytest.mark.parametrize("crl", ["crl_pem", "crl_der"])
def test_ssl_crl(tmp_path, pki, crl):
    s = Serve(tmp_path, "app", "--ssl-certfile", pki["server"], "--ssl-keyfile", pki["server_key"],
              "--ssl-ca-certs", pki["ca"], "--ssl-cert-reqs", "2", "--ssl-crl", pki[crl], scheme="https")
    try:
        assert handshake(s.port, pki, cert="good")
        assert not handshake(s.port, pki, cert="revoked")
        assert not handshake(s.port, pki)
    finally:
        s.stop()


def test_tls_options_checked(tmp_path, pki):
    (tmp_path / "wapp.py").write_text(APP)
    env = dict(os.environ, PYTHONPATH=PYSHIM)
    tls = ["--ssl-certfile", pki["server"], "--ssl-keyfile", pki["server_key"]]
    for args, msg in [(tls + ["--ssl-crl", pki["crl_pem"]], "needs ssl_cert_reqs"),
                      (["--ssl-crl", pki["crl_pem"]], "ssl_crl needs ssl_certfile"),
                      (["--ssl-protocol-min", "1.1"], "invalid choice")]:
        p = subprocess.run([sys.executable, "-P", "-m", "goloop", "serve", "wapp:app", "--app-dir", str(tmp_path),
                            *args], env=env, capture_output=True, text=True, timeout=WAIT)
        assert p.returncode == 2 and msg in p.stderr, (args, p.stderr)
    # a CRL that is not one: one ERROR line, exit 1
    p = subprocess.run([sys.executable, "-P", "-m", "goloop", "serve", "wapp:app", "--app-dir", str(tmp_path),
                        "--port", "0", *tls, "--ssl-ca-certs", pki["ca"], "--ssl-cert-reqs", "2",
                        "--ssl-crl", pki["ca"]], env=env, capture_output=True, text=True, timeout=WAIT)
    assert p.returncode == 1 and "not an X509 CRL" in p.stderr, p.stderr
