"""goloop serve's operator controls (Granian's names): worker recycling by memory size and
age, the access log's format, a pid file, the process title, the minimum TLS version and a
certificate revocation list. The options, their checks and their --help; the master
(goloop.serve.workers) recycles the workers, Go (goloop/httpserver/tls.go) applies the TLS ones. It
imports no other goloop module but the access-log format's.
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
from typing import Any

from . import accesslog as _serve_accesslog

OPTIONS: dict[str, Any] = {
    "workers_max_rss": None,    # MiB: a worker past it is replaced gracefully
    "workers_lifetime": None,   # seconds: a worker older is replaced gracefully (staggered)
    "access_log_fmt": None,     # goloop.serve.accesslog
    "pid_file": None,           # written at start, removed at exit
    "process_name": None,       # the processes' titles
    "ssl_protocol_min": None,   # "1.2" (default) or "1.3"
    "ssl_crl": None,            # a CRL file (PEM or DER), checked against client certificates
}

TLS_VERSIONS = ("1.2", "1.3")


def check(cfg: dict[str, Any]) -> None:
    """Raises ValueError naming the option and the problem."""
    for name in ("workers_max_rss", "workers_lifetime"):
        v = cfg.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0):
            raise ValueError(f"{name} must be a positive number")
    _serve_accesslog.check(cfg.get("access_log_fmt"))
    v = cfg.get("ssl_protocol_min")
    if v is not None:
        v = str(v).upper().removeprefix("TLSV").removeprefix("TLS").strip()
        if v not in TLS_VERSIONS:
            raise ValueError("ssl_protocol_min must be 1.2 or 1.3 (TLSv1.2, TLSv1.3)")
        cfg["ssl_protocol_min"] = v
    if cfg.get("ssl_crl") is not None:
        if not cfg.get("ssl_certfile"):
            raise ValueError("ssl_crl needs ssl_certfile (and client certificates: ssl_cert_reqs 1 or 2)")
        if not cfg.get("ssl_cert_reqs"):
            raise ValueError("ssl_crl is checked against client certificates: it needs ssl_cert_reqs 1 or 2")
    if cfg.get("ssl_protocol_min") and not cfg.get("ssl_certfile"):
        raise ValueError("ssl_protocol_min needs ssl_certfile")
    n = cfg.get("process_name")
    if n is not None and (not isinstance(n, str) or not n or "\0" in n):
        raise ValueError("process_name must be a non-empty str")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers-max-rss", dest="workers_max_rss", type=float, default=None,
                   help="with --workers: a worker whose resident memory passes this many MiB (read by the "
                        "master from /proc every few seconds) is replaced gracefully, as after "
                        "--limit-max-requests (default: no limit)")
    p.add_argument("--workers-lifetime", dest="workers_lifetime", type=float, default=None,
                   help="with --workers: a worker is replaced gracefully after this many seconds, each "
                        "worker's lifetime offset by its index so that they do not restart together "
                        "(default: no limit)")
    p.add_argument("--access-log-fmt", dest="access_log_fmt", default=None,
                   help=_serve_accesslog.HELP.replace("%", "%%"))  # (argparse formats help with %)
    p.add_argument("--pid-file", dest="pid_file", default=None,
                   help="write the server's (the master's, with --workers) process id to this file at start; "
                        "removed at exit (default: none)")
    p.add_argument("--process-name", dest="process_name", default=None,
                   help="the process title of the server (workers: NAME [worker N], the master: NAME "
                        "[master]), as ps and top show it (default: unchanged)")
    p.add_argument("--ssl-protocol-min", dest="ssl_protocol_min", choices=list(TLS_VERSIONS), default=None,
                   help="the lowest TLS version accepted (default: 1.2)")
    p.add_argument("--ssl-crl", dest="ssl_crl", default=None,
                   help="a certificate revocation list (PEM or DER) checked against client certificates "
                        "(with --ssl-cert-reqs 1 or 2): a revoked one fails the handshake (default: none)")


# ---------------------------------------------------------------- pid file, process title

def write_pid_file(path: str | None) -> None:
    if path:
        with open(path, "w") as f:
            f.write(f"{os.getpid()}\n")


def remove_pid_file(path: str | None) -> None:
    """Removes the pid file if it is still this process' (another server may own it now)."""
    if not path:
        return
    try:
        with open(path) as f:
            if f.read().strip() != str(os.getpid()):
                return
        os.remove(path)
    except OSError:
        pass


def set_process_title(title: str) -> None:
    """The process title: the kernel's short name (prctl PR_SET_NAME, /proc/self/comm, 15
    bytes: what top shows) and the command line ps shows (/proc/self/cmdline), rewritten in
    place over the memory of the process' argv (setproctitle's method, done here with ctypes
    rather than adding that dependency; a title longer than the original command line is cut)."""
    b = title.encode("utf-8", "replace")
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.prctl(15, ctypes.c_char_p(b[:15]), 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass
    _set_cmdline(b)


def _set_cmdline(b: bytes) -> None:
    # the C argv the kernel shows is contiguous memory of the process, between arg_start and
    # arg_end of /proc/self/stat (fields 48 and 49): the title goes there, NUL-padded
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])
    except (OSError, IndexError, ValueError):
        return
    size = end - start
    if size <= 1:
        return
    data = b[:size - 1]
    ctypes.memmove(start, data + b"\0" * (size - len(data)), size)
