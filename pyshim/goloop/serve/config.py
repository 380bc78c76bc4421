"""goloop serve's options, CLI, env file and log config: the names uvicorn gives them, their
defaults and checks (check_options), the `goloop serve` argument parser, --env-file and
--log-config, the logging set-up and --sched-batch. It imports no other goloop module:
goloop.serve.server (the server) and goloop.serve.workers (the master and its workers) both use it.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any

from . import accesslog as _serve_accesslog
from . import h3 as _serve_h3
from . import ops as _serve_ops
from . import static as _serve_static

logger = logging.getLogger("goloop.error")

LOG_LEVELS = {"critical": logging.CRITICAL, "error": logging.ERROR, "warning": logging.WARNING,
              "info": logging.INFO, "debug": logging.DEBUG, "trace": 5}

# serve()'s options and their defaults (uvicorn's names and defaults).
SUPPORTED_OPTIONS: dict[str, Any] = {
    "host": "127.0.0.1",
    "port": 8000,
    "uds": None,
    "fd": None,
    "root_path": "",
    "timeout_keep_alive": 5,
    # slow clients (goloop's own; goloop/httpserver/deadline.go): a request head must be complete
    # this many seconds after its first byte (else 408); a request body must then arrive at
    # this many bytes per second on average, after a grace of timeout_request_head (else 408
    # and the app sees http.disconnect); 0: no bound
    "timeout_request_head": 10,
    "min_request_body_rate": 240,
    # a response waiting for its client (the socket takes no more) must be read at this many
    # bytes per second on average after a grace of min_response_grace seconds (Kestrel's
    # MinResponseDataRate), else the connection is dropped, the app sees http.disconnect /
    # its WSGI iterable is closed; 0: no bound (goloop/httpserver/writerate.go)
    "min_response_rate": 240,
    "min_response_grace": 5,
    # "auto": HTTP/1.1 and HTTP/2; uvicorn's h11 and httptools mean goloop's own HTTP/1.1 (and
    # HTTP/2) as well; "h2": HTTP/2 only (plain ports: prior knowledge only, TLS: ALPN h2 only)
    "http": "auto",
    "timeout_graceful_shutdown": None,
    "limit_concurrency": None,
    "limit_max_requests": None,
    "backlog": 2048,
    "lifespan": "auto",
    "log_level": None,
    "access_log": True,
    "server_header": True,
    "date_header": True,
    "headers": None,
    "h11_max_incomplete_event_size": None,
    "ws": "auto",
    "ws_max_size": 16 * 1024 * 1024,
    "ws_max_queue": 32,
    "ws_ping_interval": 20.0,
    "ws_ping_timeout": 20.0,
    "ws_per_message_deflate": True,
    "factory": False,
    "app_dir": None,
    # the application's interface (uvicorn's --interface; auto: WSGI for a callable that is
    # not an ASGI application) and the WSGI pool's threads (goloop.serve.wsgi)
    "interface": "auto",
    "threads": None,
    # TLS (Go's crypto/tls; ALPN offers h2 and http/1.1)
    "ssl_keyfile": None,
    "ssl_certfile": None,
    "ssl_keyfile_password": None,
    "ssl_version": None,
    "ssl_cert_reqs": 0,
    "ssl_ca_certs": None,
    "ssl_ciphers": "TLSv1",
    # processes and operations (goloop.serve.workers, and the proxy headers and metrics of
    # goloop.serve.server.Server); metrics and metrics_path are goloop's own
    "workers": None,
    "reload": False,
    "reload_dirs": None,
    "reload_includes": None,
    "reload_excludes": None,
    "reload_delay": 0.25,
    "proxy_headers": True,
    "forwarded_allow_ips": None,
    "env_file": None,
    "log_config": None,
    "use_colors": None,  # accepted and ignored: goloop's log lines have no colours
    "metrics": False,
    "metrics_path": None,
    "timeout_worker_healthcheck": 5,
    "sched_batch": True,
}
SUPPORTED_OPTIONS.update(_serve_static.OPTIONS)  # --static-path-* (goloop.serve.static)
SUPPORTED_OPTIONS.update(_serve_h3.OPTIONS)  # HTTP/3 (goloop.serve.h3)
SUPPORTED_OPTIONS.update(_serve_ops.OPTIONS)  # worker controls, access-log format, TLS (goloop.serve.ops)

_SSL_PROTOCOL_TLS, _SSL_PROTOCOL_TLS_SERVER = 2, 17  # ssl.PROTOCOL_TLS, ssl.PROTOCOL_TLS_SERVER

# uvicorn's options this version does not have yet: giving one is an error, not a no-op.
NOT_YET = ("loop",)

HTTP_CHOICES = ("auto", "h11", "httptools", "h2")

# --ws: every implementation name of uvicorn's means goloop's own (Go) WebSocket; "none"
# leaves upgrade requests to the application as plain HTTP requests.
WS_CHOICES = ("auto", "none", "websockets", "websockets-sansio", "wsproto")


class ConfigError(ValueError):
    """An option serve() does not take (or not yet)."""


def check_options(options: dict[str, Any]) -> dict[str, Any]:
    """options checked, with the defaults of those not given (serve(), Server, the master)."""
    cfg = dict(SUPPORTED_OPTIONS)
    for name, value in options.items():
        if name in NOT_YET:
            # The defaults uvicorn passes (workers=1, reload=False ...) are harmless.
            if value in (None, False, 1, "auto") or (name == "loop" and value in ("goloop", "auto")):
                continue
            raise ConfigError(f"goloop serve does not support {name!r} yet "
                              f"(--{name.replace('_', '-')}): it is planned")
        if name not in cfg:
            raise ConfigError(f"goloop serve has no option {name!r}")
        cfg[name] = value
    _check_ssl(cfg)
    if cfg["ws"] not in WS_CHOICES:
        raise ConfigError(f"ws must be one of {', '.join(WS_CHOICES)}")
    if cfg["http"] not in HTTP_CHOICES:
        raise ConfigError(f"http must be one of {', '.join(HTTP_CHOICES)}")
    for name in ("timeout_request_head", "min_request_body_rate", "min_response_rate", "min_response_grace"):
        v = cfg[name]
        if v is None:
            cfg[name] = 0
        elif isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1e9:
            raise ConfigError(f"{name} must be a number >= 0 (0: no bound)")
    if cfg["lifespan"] not in ("auto", "on", "off"):
        raise ConfigError("lifespan must be 'auto', 'on' or 'off'")
    if cfg["interface"] not in ("auto", "asgi", "asgi3", "wsgi"):
        raise ConfigError("interface must be 'auto', 'asgi' (or 'asgi3') or 'wsgi'"
                          + (": ASGI 2 applications are not supported" if cfg["interface"] == "asgi2" else ""))
    if cfg["interface"] == "wsgi" and cfg["lifespan"] == "on":
        raise ConfigError("--lifespan on: a WSGI application has no lifespan protocol (--interface wsgi)")
    t = cfg["threads"]
    if t is not None and (not isinstance(t, int) or isinstance(t, bool) or t < 1):
        raise ConfigError("threads must be a positive integer")
    if cfg["log_level"] is not None and str(cfg["log_level"]).lower() not in LOG_LEVELS \
            and not isinstance(cfg["log_level"], int):
        raise ConfigError(f"unknown log level {cfg['log_level']!r}")
    w = cfg.get("workers")
    if w is not None and (not isinstance(w, int) or isinstance(w, bool) or w < 1):
        raise ConfigError("workers must be a positive integer")
    if cfg.get("metrics_path") is not None and not str(cfg["metrics_path"]).startswith("/"):
        raise ConfigError("metrics_path must start with '/'")
    if float(cfg.get("reload_delay") or 0.25) <= 0:
        raise ConfigError("reload_delay must be positive")
    t = cfg.get("timeout_worker_healthcheck")
    if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0):
        raise ConfigError("timeout_worker_healthcheck must be a number of seconds (0: off)")
    try:
        _serve_ops.check(cfg)
        _serve_h3.check(cfg)
        _serve_static.mounts(cfg)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return cfg


def _check_ssl(cfg: dict[str, Any]) -> None:
    if cfg["ssl_ciphers"] not in (None, "", "TLSv1"):
        raise ConfigError("goloop serve's TLS is Go's crypto/tls, with its own cipher suites (TLS 1.2+, "
                          "forward secrecy only): --ssl-ciphers is not supported")
    if cfg["ssl_version"] not in (None, _SSL_PROTOCOL_TLS, _SSL_PROTOCOL_TLS_SERVER):
        raise ConfigError("goloop serve negotiates TLS 1.2 or 1.3: --ssl-version can only be "
                          "PROTOCOL_TLS_SERVER (17) or PROTOCOL_TLS (2)")
    reqs = cfg["ssl_cert_reqs"]
    if reqs is None:
        reqs = cfg["ssl_cert_reqs"] = 0
    if int(reqs) not in (0, 1, 2):
        raise ConfigError("ssl_cert_reqs must be 0 (CERT_NONE), 1 (CERT_OPTIONAL) or 2 (CERT_REQUIRED)")
    cfg["ssl_cert_reqs"] = int(reqs)
    if not cfg["ssl_certfile"]:
        for name in ("ssl_keyfile", "ssl_ca_certs", "ssl_keyfile_password"):
            if cfg[name]:
                raise ConfigError(f"{name} needs ssl_certfile")
        if cfg["ssl_cert_reqs"]:
            raise ConfigError("ssl_cert_reqs needs ssl_certfile")
    elif cfg["ssl_cert_reqs"] and not cfg["ssl_ca_certs"]:
        raise ConfigError("client certificates (ssl_cert_reqs 1 or 2) need ssl_ca_certs to verify them")
    else:
        tls_pairs(cfg)


_paths = _serve_static.path_list


def tls_pairs(cfg: dict[str, Any]) -> list[tuple[Any, Any]]:
    """The (certfile, keyfile or None) pairs of ssl_certfile/ssl_keyfile: each a path or a list
    of paths (several certificates, picked by SNI: goloop's extension of uvicorn's options)."""
    certs, keys = _paths(cfg["ssl_certfile"]), _paths(cfg["ssl_keyfile"])
    if keys and len(keys) != len(certs):
        raise ConfigError(f"ssl_keyfile is given {len(keys)} times for {len(certs)} ssl_certfile: give one key "
                          "per certificate, in the same order (or none: each key in its certificate's file)")
    return list(zip(certs, keys or [None] * len(certs), strict=True))


def wants_supervisor(options: dict[str, Any]) -> bool:
    """--workers N > 1, --reload, --workers-max-rss or --workers-lifetime: a master
    (goloop.serve.workers) runs instead of a server."""
    return bool(options.get("reload")) or (options.get("workers") or 1) > 1 or \
        bool(options.get("workers_max_rss") or options.get("workers_lifetime"))  # (the master recycles them)


class _Formatter(logging.Formatter):
    """uvicorn's line without colours: the level name and its colon padded to 9 columns
    ("INFO:     ...", "ERROR:    ...")."""

    def __init__(self) -> None:
        super().__init__("%(levelprefix)s %(message)s")

    @staticmethod
    def levelprefix(levelname: str) -> str:
        return (levelname + ":").ljust(9)

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.levelprefix = self.levelprefix(record.levelname)
        return super().formatMessage(record)


def configure_logging(level: Any) -> None:
    """goloop's loggers at level, to stderr unless they have handlers already."""
    lvl = LOG_LEVELS.get(str(level).lower(), logging.INFO) if not isinstance(level, int) else level
    root = logging.getLogger("goloop")
    if not root.handlers:
        h = _serve_accesslog.BatchedStreamHandler(sys.stderr)
        h.setFormatter(_Formatter())
        root.addHandler(h)
        root.propagate = False
        # (its access lines' fast path: what the formatter puts before an INFO message)
        _serve_accesslog.default_logging = (root, h, h.formatter, _Formatter.levelprefix("INFO") + " ")
    root.setLevel(lvl)


def load_env_file(path: str) -> None:
    """KEY=VALUE lines into os.environ (python-dotenv's basic syntax: comments, `export`,
    quotes); variables already set are kept, as python-dotenv's default does."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("export "):
                line = line[7:].lstrip()
            key, sep, value = line.partition("=")
            key, value = key.strip(), value.strip()
            if not sep or not key:
                continue
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
                if line.partition("=")[2].strip()[0] == '"':
                    value = value.replace("\\n", "\n").replace('\\"', '"')
            elif " #" in value:
                value = value.split(" #", 1)[0].rstrip()
            os.environ.setdefault(key, value)


def load_log_config(log_config: Any) -> None:
    """--log-config: a dict, or a .json, .yaml/.yml or fileConfig file."""
    import logging.config

    if isinstance(log_config, dict):
        logging.config.dictConfig(log_config)
    elif str(log_config).endswith(".json"):
        with open(log_config) as f:
            logging.config.dictConfig(json.load(f))
    elif str(log_config).endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError:
            raise ConfigError("a YAML --log-config needs PyYAML (pip install pyyaml)") from None
        with open(log_config) as f:
            logging.config.dictConfig(yaml.safe_load(f))
    else:
        logging.config.fileConfig(log_config, disable_existing_loggers=False)


def prepare(cfg: dict[str, Any]) -> None:
    """What serve() does before the application is imported: env file, log config."""
    if cfg.get("env_file"):
        load_env_file(cfg["env_file"])
    if cfg.get("log_config"):
        load_log_config(cfg["log_config"])


def batch_scheduling(cfg: dict[str, Any]) -> bool:
    """--sched-batch: every thread of this (serving) process, and the threads they start
    (Go's, made when the first loop loads the engine), under SCHED_BATCH. Two threads share
    a core here, the loop's and Go's netpoller's (a TLS connection's reads, the writer
    goroutines): with wake-up preemption each request arriving while the loop works (100
    KiB over HTTPS: encrypting) preempted it twice, 2.0 context switches per request
    against 0.15 under SCHED_BATCH (BENCHMARKS.md). Only the CLI and serve() do this, not
    Server.serve() inside a program. False: not applied (off, or refused)."""
    if not cfg.get("sched_batch") or not hasattr(os, "SCHED_BATCH"):
        return False
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    done = False
    for tid in tids:
        try:
            os.sched_setscheduler(tid, os.SCHED_BATCH, os.sched_param(0))
            done = True
        except OSError as e:  # a thread that has ended; a policy the system refuses
            logger.debug("SCHED_BATCH for thread %d: %s", tid, e)
    return done


def forwarded_allow_ips(cfg: dict[str, Any]) -> str:
    v = cfg.get("forwarded_allow_ips")
    if v is None:
        v = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
    if isinstance(v, (list, tuple)):
        v = ",".join(v)
    return str(v)


def _boolean(value: str) -> bool:
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on", "y", "t"):
        return True
    if v in ("0", "false", "no", "off", "n", "f"):
        return False
    raise argparse.ArgumentTypeError(f"{value!r} is not a boolean")


def parser() -> argparse.ArgumentParser:
    """`goloop serve`'s arguments: uvicorn's names; each option's help says its default."""
    # usage: one line, so a wrong option prints that line and the error, not every option
    # (the full list is --help's)
    p = argparse.ArgumentParser(prog="goloop serve", usage="%(prog)s [options] module:app  (--help: every option)",
                                description="Serve an ASGI or WSGI application with goloop "
                                "(uvicorn's options; the HTTP engine is Go and C).")
    p.add_argument("app", help="the application, as module:attribute")
    p.add_argument("--host", default="127.0.0.1", help="bind the socket to this host (default: %(default)s)")
    p.add_argument("--port", type=int, default=8000, help="bind the socket to this port (default: %(default)s)")
    p.add_argument("--uds", help="bind to this Unix domain socket instead (default: none)")
    p.add_argument("--fd", type=int, help="serve on this already open socket descriptor instead (default: none)")
    p.add_argument("--root-path", default="", help="the ASGI root_path of an application mounted below a "
                   "path (default: none)")
    p.add_argument("--timeout-keep-alive", type=float, default=5,
                   help="close a keep-alive connection idle this many seconds (default: %(default)s)")
    p.add_argument("--timeout-request-head", type=float, default=10,
                   help="a request head not complete this many seconds after its first byte is answered "
                        "408 and the connection closed; 0: no limit (default: %(default)s)")
    p.add_argument("--min-request-body-rate", type=float, default=240,
                   help="bytes per second a request body must average once --timeout-request-head has "
                        "passed since its head, else 408 and the app sees http.disconnect; 0: no limit "
                        "(default: %(default)s)")
    p.add_argument("--min-response-rate", type=float, default=240,
                   help="bytes per second a client must read a response at, on average, once it stopped "
                        "reading for --min-response-grace seconds, else the connection is dropped and the "
                        "app sees http.disconnect (WSGI: its iterable is closed); 0: no limit "
                        "(default: %(default)s)")
    p.add_argument("--min-response-grace", type=float, default=5,
                   help="seconds a client may read a response slower than --min-response-rate "
                        "(default: %(default)s)")
    p.add_argument("--http", choices=list(HTTP_CHOICES), default="auto",
                   help="auto: HTTP/1.1 and HTTP/2 (h11, httptools: the same); h2: HTTP/2 only "
                        "(default: %(default)s)")
    p.add_argument("--timeout-graceful-shutdown", type=float,
                   help="on shutdown, wait this many seconds for requests in flight (default: no limit)")
    p.add_argument("--limit-concurrency", type=int,
                   help="answer 503 past this many connections and requests at once (default: no limit)")
    p.add_argument("--limit-max-requests", type=int,
                   help="exit after this many requests (default: no limit)")
    p.add_argument("--backlog", type=int, default=2048,
                   help="the listening socket's queue of connections (default: %(default)s)")
    p.add_argument("--lifespan", choices=["auto", "on", "off"], default="auto",
                   help="the ASGI lifespan protocol (default: %(default)s)")
    p.add_argument("--log-level", choices=list(LOG_LEVELS), default=None, help="log level (default: info)")
    p.add_argument("--access-log", dest="access_log", action="store_true", default=True,
                   help="log each request (default)")
    p.add_argument("--no-access-log", dest="access_log", action="store_false",
                   help="do not log requests (default: they are logged)")
    p.add_argument("--server-header", dest="server_header", action="store_true", default=True,
                   help="send a server header (default)")
    p.add_argument("--no-server-header", dest="server_header", action="store_false",
                   help="send no server header (default: one is sent)")
    p.add_argument("--date-header", dest="date_header", action="store_true", default=True,
                   help="send a date header (default)")
    p.add_argument("--no-date-header", dest="date_header", action="store_false",
                   help="send no date header (default: one is sent)")
    p.add_argument("--header", dest="headers", action="append", default=[],
                   help="a name:value header added to every response; repeatable (default: none)")
    p.add_argument("--h11-max-incomplete-event-size", type=int,
                   help="the largest request head in bytes; larger ones get 431 (default: 16384)")
    p.add_argument("--ws", choices=list(WS_CHOICES), default="auto",
                   help="WebSocket: any name but 'none' means goloop's own; none: upgrades are plain "
                        "HTTP requests (default: %(default)s)")
    p.add_argument("--ws-max-size", type=int, default=16 * 1024 * 1024,
                   help="the largest WebSocket message in bytes (default: %(default)s)")
    p.add_argument("--ws-max-queue", type=int, default=32,
                   help="WebSocket messages queued before reading pauses (default: %(default)s)")
    p.add_argument("--ws-ping-interval", type=float, default=20.0,
                   help="WebSocket ping every this many seconds (default: %(default)s)")
    p.add_argument("--ws-ping-timeout", type=float, default=20.0,
                   help="close a WebSocket whose pong is this many seconds late (default: %(default)s)")
    p.add_argument("--ws-per-message-deflate", type=_boolean, default=True,
                   help="offer WebSocket permessage-deflate compression (default: %(default)s)")
    p.add_argument("--factory", action="store_true",
                   help="APP is a factory: call it with no arguments for the application (default: off)")
    p.add_argument("--interface", choices=["auto", "asgi", "asgi3", "wsgi"], default="auto",
                   help="the application's interface; auto: WSGI for a callable that is not ASGI "
                        "(default: %(default)s)")
    p.add_argument("--threads", type=int, default=None,
                   help="WSGI: the threads that run the application (default: min(32, cores + 4))")
    p.add_argument("--app-dir", default=None,
                   help="import the application from this folder (default: the current directory)")
    # several --ssl-certfile (with as many --ssl-keyfile, in order): certificates picked by SNI
    p.add_argument("--ssl-keyfile", action="append",
                   help="TLS key file; one per --ssl-certfile (default: the key in the certificate's file)")
    p.add_argument("--ssl-certfile", action="append",
                   help="TLS certificate file (serves HTTPS); repeatable, picked by SNI (default: none)")
    p.add_argument("--ssl-keyfile-password", help="the password of the TLS key (default: none)")
    p.add_argument("--ssl-version", type=int,
                   help="accepted for uvicorn's sake: only 17 or 2, TLS 1.2+ (default: TLS 1.2 and 1.3)")
    p.add_argument("--ssl-cert-reqs", type=int, default=0,
                   help="client certificates: 0 none, 1 optional, 2 required (default: %(default)s)")
    p.add_argument("--ssl-ca-certs", help="CA certificates to verify clients' with (default: none)")
    p.add_argument("--ssl-ciphers", default="TLSv1",
                   help="accepted for uvicorn's sake: Go's cipher suites are used (default: %(default)s)")
    # processes and operations
    p.add_argument("--workers", type=int, default=None,
                   help="number of worker processes, supervised by a master without Go (default: 1)")
    p.add_argument("--reload", action="store_true", default=False,
                   help="restart the workers when a watched file changes (polling) (default: off)")
    p.add_argument("--reload-dir", dest="reload_dirs", action="append", default=None,
                   help="watch this folder for --reload; repeatable (default: --app-dir's)")
    p.add_argument("--reload-include", dest="reload_includes", action="append", default=None,
                   help="a file name pattern --reload watches; repeatable (default: *.py)")
    p.add_argument("--reload-exclude", dest="reload_excludes", action="append", default=None,
                   help="a file name pattern --reload ignores; repeatable (default: .*, .py[cod], .sw.*, ~*)")
    p.add_argument("--reload-delay", type=float, default=0.25,
                   help="seconds between --reload's checks (default: %(default)s)")
    p.add_argument("--proxy-headers", dest="proxy_headers", action="store_true", default=True,
                   help="take the client's address and scheme from X-Forwarded-* of trusted proxies (default)")
    p.add_argument("--no-proxy-headers", dest="proxy_headers", action="store_false",
                   help="ignore X-Forwarded-* headers (default: trusted proxies' are used)")
    p.add_argument("--forwarded-allow-ips", default=None,
                   help="the proxies trusted, comma-separated, * for all (default: $FORWARDED_ALLOW_IPS or "
                        "127.0.0.1)")
    p.add_argument("--env-file", default=None, help="load environment variables from this file (default: none)")
    p.add_argument("--log-config", default=None,
                   help="logging configuration file: .json, .yaml or .ini (default: none)")
    p.add_argument("--use-colors", dest="use_colors", action="store_true", default=None,
                   help="accepted for uvicorn's sake: the log has no colours (default: none)")
    p.add_argument("--no-use-colors", dest="use_colors", action="store_false",
                   help="accepted for uvicorn's sake (default: no colours)")
    p.add_argument("--metrics", action="store_true", default=False,
                   help="count requests and their latency, goloop.serve_metrics() (default: off)")
    p.add_argument("--metrics-path", default=None,
                   help="serve the metrics in Prometheus' text format at this path (default: none)")
    p.add_argument("--timeout-worker-healthcheck", type=float, default=5,
                   help="restart a worker whose loop does not answer the master's ping within this many "
                        "seconds, 0: off (default: %(default)s)")
    p.add_argument("--sched-batch", dest="sched_batch", action="store_true", default=True,
                   help="run the serving process's threads under SCHED_BATCH: the loop thread and Go's "
                        "do not preempt each other on every wake-up (default)")
    p.add_argument("--no-sched-batch", dest="sched_batch", action="store_false",
                   help="leave the threads' scheduling policy alone (default: SCHED_BATCH)")
    _serve_static.add_arguments(p)
    _serve_ops.add_arguments(p)
    _serve_h3.add_arguments(p)
    return p
