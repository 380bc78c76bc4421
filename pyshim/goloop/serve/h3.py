"""goloop serve's HTTP/3 (QUIC on UDP): its options, their checks and --help, the Alt-Svc
header that advertises it, and starting it on a server. QUIC and HTTP/3 are quic-go's
(github.com/quic-go/quic-go), driven by Go (goloop/httpserver/h3.go): Python only configures
it. It imports no other goloop module.
"""
from __future__ import annotations

import argparse
import socket
from typing import Any

OPTIONS: dict[str, Any] = {
    "http3": False,            # HTTP/3 over QUIC on UDP beside TLS (not part of --http auto)
    "http3_port": None,        # its UDP port (default: each TLS socket's TCP port)
    "http3_max_streams": None,  # request streams a client may have open at once (default 100)
}


def check(cfg: dict[str, Any]) -> None:
    """Raises ValueError naming the option and the problem."""
    port = cfg.get("http3_port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
        raise ValueError("http3_port must be a port number (1-65535)")
    n = cfg.get("http3_max_streams")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n <= 0):
        raise ValueError("http3_max_streams must be a positive int")
    if cfg.get("http3") and not cfg.get("ssl_certfile"):
        raise ValueError("http3 needs ssl_certfile (QUIC is always encrypted)")
    if (port is not None or n is not None) and not cfg.get("http3"):
        raise ValueError("http3_port and http3_max_streams need http3")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--http3", dest="http3", action="store_true", default=False,
                   help="with TLS: serve HTTP/3 over QUIC on UDP at each TLS socket's port (or "
                        "--http3-port), advertised by Alt-Svc on HTTP/1.1 and HTTP/2 responses; off by "
                        "default and not part of --http auto (it opens UDP ports)")
    p.add_argument("--http3-port", dest="http3_port", type=int, default=None,
                   help="with --http3: the UDP port of HTTP/3 (default: the TLS socket's TCP port)")
    p.add_argument("--http3-max-streams", dest="http3_max_streams", type=int, default=None,
                   help="with --http3: request streams one client may have open at once (QUIC's "
                        "stream limit; default: 100)")


def _inet(sockets: list[socket.socket]) -> list[tuple[str, int]]:
    return [s.getsockname()[:2] for s in sockets if s.family in (socket.AF_INET, socket.AF_INET6)]


def alt_svc(cfg: dict[str, Any], sockets: list[socket.socket]) -> str | None:
    """The alt-svc header line ("name:value") that advertises HTTP/3, None if it is off."""
    if not cfg.get("http3"):
        return None
    ports = [cfg.get("http3_port") or port for _, port in _inet(sockets)]
    if not ports:
        return None
    return "alt-svc:" + ", ".join(f'h3=":{p}"; ma=86400' for p in dict.fromkeys(ports))


def start(cfg: dict[str, Any], srv: Any, sockets: list[socket.socket], _goloop: Any) -> list[int]:
    """Serves HTTP/3 on srv (after set_tls) beside each TCP socket; the UDP ports. OSError:
    a port could not be bound."""
    if not cfg.get("http3"):
        return []
    return [_goloop._serve_h3(srv, host, cfg.get("http3_port") or port, int(cfg.get("http3_max_streams") or 0))
            for host, port in _inet(sockets)]
