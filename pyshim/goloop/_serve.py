"""goloop serve: an ASGI server whose HTTP engine is Go (goloop/asgi) and whose application
runs on goloop's loop.

    goloop.serve(app, host="127.0.0.1", port=8000)          # from a program
    python -m goloop serve module:app --port 8000           # or the `goloop` command

Options follow uvicorn's names and meanings. This module imports no part of the Go engine:
the extension is loaded when serve() creates its loop.
"""
from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import signal
import socket
import sys
from typing import Any, Callable
from urllib.parse import quote

from . import _supervisor

__all__ = ["serve", "Server", "main", "SUPPORTED_OPTIONS"]

logger = logging.getLogger("goloop.error")
access_logger = logging.getLogger("goloop.access")

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
    # TLS (Go's crypto/tls; ALPN offers h2 and http/1.1)
    "ssl_keyfile": None,
    "ssl_certfile": None,
    "ssl_keyfile_password": None,
    "ssl_version": None,
    "ssl_cert_reqs": 0,
    "ssl_ca_certs": None,
    "ssl_ciphers": "TLSv1",
}

_SSL_PROTOCOL_TLS, _SSL_PROTOCOL_TLS_SERVER = 2, 17  # ssl.PROTOCOL_TLS, ssl.PROTOCOL_TLS_SERVER

# uvicorn's options this version does not have yet: giving one is an error, not a no-op.
NOT_YET = ("workers", "reload", "reload_dirs", "reload_includes", "reload_excludes", "reload_delay",
           "proxy_headers", "forwarded_allow_ips", "loop", "http",
           "interface", "env_file", "log_config", "use_colors", "timeout_worker_healthcheck")

# --workers, --reload, proxy headers, metrics, env file, log config: goloop._supervisor.
SUPPORTED_OPTIONS.update(_supervisor.OPTIONS)
NOT_YET = tuple(name for name in NOT_YET if name not in _supervisor.OPTIONS)


# --ws: every implementation name of uvicorn's means goloop's own (Go) WebSocket; "none"
# leaves upgrade requests to the application as plain HTTP requests.
WS_CHOICES = ("auto", "none", "websockets", "websockets-sansio", "wsproto")


class ConfigError(ValueError):
    """An option serve() does not take (or not yet)."""


def _check_options(options: dict[str, Any]) -> dict[str, Any]:
    cfg = dict(SUPPORTED_OPTIONS)
    for name, value in options.items():
        if name in NOT_YET:
            # The defaults uvicorn passes (workers=1, reload=False ...) are harmless.
            if value in (None, False, 1, "auto") or (name == "loop" and value in ("goloop", "auto")):
                continue
            raise ConfigError(f"goloop serve does not support {name!r} yet "
                              f"(--{name.replace('_', '-')}): it is planned, see issue 11")
        if name not in cfg:
            raise ConfigError(f"goloop serve has no option {name!r}")
        cfg[name] = value
    _check_ssl(cfg)
    if cfg["ws"] not in WS_CHOICES:
        raise ConfigError(f"ws must be one of {', '.join(WS_CHOICES)}")
    if cfg["lifespan"] not in ("auto", "on", "off"):
        raise ConfigError("lifespan must be 'auto', 'on' or 'off'")
    if cfg["log_level"] is not None and str(cfg["log_level"]).lower() not in LOG_LEVELS \
            and not isinstance(cfg["log_level"], int):
        raise ConfigError(f"unknown log level {cfg['log_level']!r}")
    _supervisor.check_options(cfg)
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


def _paths(v: Any) -> list:
    if v is None:
        return []
    if isinstance(v, (str, bytes, os.PathLike)):
        return [v]
    return list(v)


def tls_pairs(cfg: dict[str, Any]) -> list[tuple[Any, Any]]:
    """The (certfile, keyfile or None) pairs of ssl_certfile/ssl_keyfile: each a path or a list
    of paths (several certificates, picked by SNI: goloop's extension of uvicorn's options)."""
    certs, keys = _paths(cfg["ssl_certfile"]), _paths(cfg["ssl_keyfile"])
    if keys and len(keys) != len(certs):
        raise ConfigError(f"ssl_keyfile is given {len(keys)} times for {len(certs)} ssl_certfile: give one key "
                          "per certificate, in the same order (or none: each key in its certificate's file)")
    return list(zip(certs, keys or [None] * len(certs)))


def import_app(target: Any, factory: bool = False, app_dir: str | None = None) -> Any:
    """The ASGI application named by 'module:attribute' (or target itself if not a string)."""
    if isinstance(target, str):
        if app_dir is not None:
            sys.path.insert(0, app_dir)
        module_name, _, attrs = target.partition(":")
        if not module_name or not attrs:
            raise ConfigError(f"Import string {target!r} must be in format '<module>:<attribute>'.")
        module = importlib.import_module(module_name)
        app = module
        for attr in attrs.split("."):
            try:
                app = getattr(app, attr)
            except AttributeError:
                raise ConfigError(f"Attribute {attrs!r} not found in module {module_name!r}.") from None
    else:
        app = target
    if factory:
        app = app()
    return app


def _configure_logging(level: Any) -> None:
    lvl = LOG_LEVELS.get(str(level).lower(), logging.INFO) if not isinstance(level, int) else level
    root = logging.getLogger("goloop")
    if not root.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
        root.addHandler(h)
        root.propagate = False
    root.setLevel(lvl)


class _Lifespan:
    """The ASGI lifespan protocol (startup, shutdown, state), as uvicorn's LifespanOn."""

    def __init__(self, app: Any, mode: str, state: dict):
        self.app, self.mode, self.state = app, mode, state
        self.receive_queue: asyncio.Queue = asyncio.Queue()
        self.startup_event = asyncio.Event()
        self.shutdown_event = asyncio.Event()
        self.startup_failed = self.shutdown_failed = False
        self.error_occured = False
        self.should_exit = False
        self.task: asyncio.Task | None = None

    async def startup(self) -> None:
        logger.info("Waiting for application startup.")
        self.task = asyncio.get_running_loop().create_task(self.main())
        await self.receive_queue.put({"type": "lifespan.startup"})
        await self.startup_event.wait()
        if self.startup_failed or (self.error_occured and self.mode == "on"):
            logger.error("Application startup failed. Exiting.")
            self.should_exit = True
        else:
            logger.info("Application startup complete.")

    async def shutdown(self) -> None:
        if self.error_occured:
            return
        logger.info("Waiting for application shutdown.")
        await self.receive_queue.put({"type": "lifespan.shutdown"})
        await self.shutdown_event.wait()
        if self.shutdown_failed or (self.error_occured and self.mode == "on"):
            logger.error("Application shutdown failed. Exiting.")
            self.should_exit = True
        else:
            logger.info("Application shutdown complete.")

    async def main(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": self.state}
        try:
            await self.app(scope, self.receive, self.send)
        except BaseException as exc:
            self.error_occured = True
            if self.startup_failed or self.shutdown_failed:
                return
            if self.mode == "auto":
                logger.info("ASGI 'lifespan' protocol appears unsupported.")
            else:
                logger.error("Exception in 'lifespan' protocol\n", exc_info=exc)
        finally:
            self.startup_event.set()
            self.shutdown_event.set()

    async def send(self, message: dict) -> None:
        t = message["type"]
        if t == "lifespan.startup.complete":
            self.startup_event.set()
        elif t == "lifespan.startup.failed":
            self.startup_failed = True
            self.startup_event.set()
            if message.get("message"):
                logger.error(message["message"])
        elif t == "lifespan.shutdown.complete":
            self.shutdown_event.set()
        elif t == "lifespan.shutdown.failed":
            self.shutdown_failed = True
            self.shutdown_event.set()
            if message.get("message"):
                logger.error(message["message"])
        else:
            raise RuntimeError(f"Unexpected ASGI lifespan message {t!r}")

    async def receive(self) -> dict:
        return await self.receive_queue.get()


def _log_app_error(exc: BaseException) -> None:
    logger.error("Exception in ASGI application\n", exc_info=exc)


def _make_runner(app: Any, access_log: bool, max_requests: int | None, server: "Server") -> Callable:
    """The coroutine function the Go side calls for each request: it runs the application
    and tells Go when it is done (a response not started becomes a 500). Without an access
    log or a request limit, HTTP requests do this in C (AsgiServer's app and on_error) and
    only WebSocket sessions come here."""

    async def run(scope, receive, send):
        try:
            await app(scope, receive, send)
        except BaseException as exc:
            if scope["type"] == "websocket":
                send._fail()  # an accepted session closes with 1011
            else:
                send._done()
            if not isinstance(exc, Exception):
                raise
            logger.error("Exception in ASGI application\n", exc_info=exc)
        else:
            send._done()

    if not access_log and not max_requests:
        return run

    count = 0

    async def run_logged(scope, receive, send):
        nonlocal count
        try:
            await run(scope, receive, send)
        finally:
            if access_log:
                client = scope.get("client")
                addr = "%s:%d" % client if client else "-"
                path = quote(scope["root_path"] + scope["path"])
                if scope["query_string"]:
                    path += "?" + scope["query_string"].decode("ascii", "replace")
                if scope["type"] == "websocket":
                    status = send._status()
                    access_logger.info('%s - "WebSocket %s" %s', addr, path,
                                       "[accepted]" if status == 101 else (status or 500))
                else:
                    access_logger.info('%s - "%s %s HTTP/%s" %d', addr, scope["method"], path,
                                       scope["http_version"], send._status() or 500)
            if max_requests:
                count += 1
                if count >= max_requests:
                    server.request_exit("Maximum request limit of %d exceeded. Terminating process." % max_requests)

    run_logged.__name__ = "run"
    return run_logged


class Server:
    """goloop serve's server: Server(app, **options); `await server.serve()` on a goloop
    loop runs it until request_exit() (or SIGINT/SIGTERM with install_signal_handlers)."""

    def __init__(self, app: Any, **options: Any):
        self.config = _check_options(options)
        self.app_target = app
        self.sockets: list[socket.socket] = []
        self.started = False
        # called once listening, before any request can run (goloop serve's workers report
        # ready with it: a request that blocks the loop at once must not stop that report)
        self.on_started: Callable[[], None] | None = None
        self.should_exit = False
        self.force_exit = False
        self._exit_event: asyncio.Event | None = None
        self._srv = None
        self.exit_code = 0

    def request_exit(self, reason: str | None = None) -> None:
        if reason:
            logger.warning(reason)
        self.should_exit = True
        if self._exit_event is not None:
            self._exit_event.set()

    def _handle_signal(self, sig: int) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        self.request_exit()

    def reload_tls(self) -> bool:
        """Read the TLS certificate/key/CA files again (what SIGHUP does): the next
        handshakes use them. On error the current ones stay and the error is logged."""
        if self._srv is None or not self.config["ssl_certfile"]:
            return False
        try:
            self._srv.reload_tls()
        except OSError as exc:
            logger.error("TLS files not reloaded, the current ones stay: %s", exc)
            return False
        logger.info("TLS files reloaded")
        return True

    def stats(self) -> tuple[int, int, int]:
        """(open connections, requests in flight, requests served so far)."""
        return self._srv.stats() if self._srv is not None else (0, 0, 0)

    async def serve(self, sockets: list[socket.socket] | None = None, install_signal_handlers: bool = False) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        from . import _goloop  # the engine is loaded by then: the loop is goloop's

        if not isinstance(loop, _goloop.LoopCore):
            raise RuntimeError("goloop serve runs on a goloop loop (goloop.run, goloop.new_event_loop)")
        self._exit_event = asyncio.Event()
        if self.should_exit:
            self._exit_event.set()
        app = import_app(self.app_target, cfg["factory"], cfg["app_dir"])
        hup = install_signal_handlers and bool(cfg["ssl_certfile"]) and hasattr(signal, "SIGHUP")
        if install_signal_handlers:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self._handle_signal, sig)
        if hup:  # SIGHUP: read the certificate and key files again
            loop.add_signal_handler(signal.SIGHUP, self.reload_tls)
        state: dict = {}
        lifespan = None
        try:
            if cfg["lifespan"] != "off":
                lifespan = _Lifespan(app, cfg["lifespan"], state)
                await lifespan.startup()
                if lifespan.should_exit:
                    self.exit_code = 3
                    return
            own_sockets = sockets is None
            self.sockets = _supervisor.bind_sockets(cfg, reuse_port=False) if own_sockets else list(sockets)
            try:
                await self._run(app, state, loop, _goloop)
            finally:
                if own_sockets:
                    for s in self.sockets:
                        s.close()
                    if cfg["uds"] and os.path.exists(cfg["uds"]):
                        os.remove(cfg["uds"])
            if lifespan is not None:
                await lifespan.shutdown()
        finally:
            if install_signal_handlers:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
            if hup:
                loop.remove_signal_handler(signal.SIGHUP)

    async def _run(self, app, state, loop, _goloop) -> None:
        cfg = self.config
        headers = []
        for h in cfg["headers"] or ():
            name, value = h.split(":", 1) if isinstance(h, str) else h
            name, value = str(name).strip(), str(value).strip()
            if not name or any(c in name + value for c in "\r\n\0") or ":" in name:
                raise ConfigError(f"invalid header {h!r}")
            headers.append(f"{name.lower()}:{value}")
        access = bool(cfg["access_log"]) and access_logger.isEnabledFor(logging.INFO)
        runner = _make_runner(app, access, cfg["limit_max_requests"], self)
        # Without an access log or a request limit, an HTTP request's coroutine is the
        # application's own, run in a C wrapper (asgi_run.c): no Python frame around it.
        direct = not access and not cfg["limit_max_requests"]
        tls = bool(cfg["ssl_certfile"])
        # the HTTP extensions Go implements (goloop/asgi/spec.go); a websocket scope gets
        # its own (asgi_ws.c). zerocopysend: sendfile(2) needs the plain socket (HTTP/2
        # reads the file instead); TLS, where it cannot be zero-copy, does not offer it.
        extensions: dict[str, dict] = {"http.response.trailers": {}, "http.response.pathsend": {}}
        if not tls:
            extensions["http.response.zerocopysend"] = {}
        template = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"},
                    "scheme": "https" if tls else "http",
                    "root_path": cfg["root_path"] or "",
                    "extensions": extensions}
        max_head = cfg["h11_max_incomplete_event_size"] or 16 * 1024
        srv = _goloop.AsgiServer(loop, runner, template, state or None, int(max_head),
                                 int(float(cfg["timeout_keep_alive"]) * 1000), int(cfg["limit_concurrency"] or 0),
                                 bool(cfg["server_header"]), bool(cfg["date_header"]),
                                 "\n".join(headers).encode("latin-1"),
                                 _log_app_error if direct else None, app if direct else None)
        try:
            if tls:
                pw = cfg["ssl_keyfile_password"]
                pairs = b"\0".join(os.fsencode(p) for cert, key in tls_pairs(cfg) for p in (cert, key or cert))
                srv.set_tls(pairs, str(pw) if pw else None,
                            os.fspath(cfg["ssl_ca_certs"]) if cfg["ssl_ca_certs"] else None, cfg["ssl_cert_reqs"])
        except BaseException:
            srv.release()
            raise
        self._srv = srv
        try:
            _supervisor.configure_server(self, srv)  # proxy headers, metrics
            _goloop._asgi_ws_config(srv, cfg["ws"] == "none", int(cfg["ws_max_size"]), int(cfg["ws_max_queue"]),
                                    float(cfg["ws_ping_interval"] or 0), float(cfg["ws_ping_timeout"] or 0),
                                    bool(cfg["ws_per_message_deflate"]))
            for s in self.sockets:
                srv.listen(s.fileno())
                self._log_started(s)
            self.started = True
            if self.on_started is not None:
                self.on_started()
            await self._exit_event.wait()
            # Graceful shutdown: stop accepting, answer what is in flight, then close.
            logger.info("Shutting down")
            srv.close()
            for s in self.sockets:
                try:
                    s.close()
                except OSError:
                    pass
            timeout = cfg["timeout_graceful_shutdown"]
            deadline = loop.time() + timeout if timeout is not None else None
            while not self.force_exit:
                conns, inflight, _ = srv.stats()
                if conns == 0 and inflight == 0:
                    break
                if deadline is not None and loop.time() >= deadline:
                    logger.error("Cancel %d running task(s), timeout graceful shutdown exceeded", inflight)
                    break
                await asyncio.sleep(0.02)
            srv.abort()
        finally:
            srv.release()
            self._srv = None

    def _log_started(self, sock: socket.socket) -> None:
        if sock.family == socket.AF_UNIX:
            logger.info("goloop serve running on unix socket %s (Press CTRL+C to quit)", sock.getsockname())
            return
        host, port = sock.getsockname()[:2]
        fmt = "[%s]:%d" if sock.family == socket.AF_INET6 else "%s:%d"
        fmt = ("https://" if self.config["ssl_certfile"] else "http://") + fmt
        logger.info("goloop serve running on " + fmt + " (Press CTRL+C to quit)", host, port)


def serve(app: Any, **options: Any) -> int:
    """Serve the ASGI application app (or 'module:attribute') until SIGINT/SIGTERM.
    Options: uvicorn's (SUPPORTED_OPTIONS); returns the exit code."""
    if _supervisor.wants_supervisor(options):  # workers > 1 or reload: a master without Go
        return _supervisor.supervise(app, options)
    server = Server(app, **options)
    _supervisor.prepare(server.config)  # env file, log config
    _configure_logging(server.config["log_level"] or "info")
    _supervisor.batch_scheduling(server.config)
    from . import run

    try:
        run(server.serve(install_signal_handlers=True))
    except KeyboardInterrupt:
        pass
    return server.exit_code


def _boolean(value: str) -> bool:
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on", "y", "t"):
        return True
    if v in ("0", "false", "no", "off", "n", "f"):
        return False
    raise argparse.ArgumentTypeError(f"{value!r} is not a boolean")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="goloop serve", description="Serve an ASGI application with goloop "
                                "(uvicorn's options; the HTTP engine is Go).")
    p.add_argument("app", help="the application, as module:attribute")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--uds")
    p.add_argument("--fd", type=int)
    p.add_argument("--root-path", default="")
    p.add_argument("--timeout-keep-alive", type=float, default=5)
    p.add_argument("--timeout-graceful-shutdown", type=float)
    p.add_argument("--limit-concurrency", type=int)
    p.add_argument("--limit-max-requests", type=int)
    p.add_argument("--backlog", type=int, default=2048)
    p.add_argument("--lifespan", choices=["auto", "on", "off"], default="auto")
    p.add_argument("--log-level", choices=list(LOG_LEVELS), default=None)
    p.add_argument("--access-log", dest="access_log", action="store_true", default=True)
    p.add_argument("--no-access-log", dest="access_log", action="store_false")
    p.add_argument("--server-header", dest="server_header", action="store_true", default=True)
    p.add_argument("--no-server-header", dest="server_header", action="store_false")
    p.add_argument("--date-header", dest="date_header", action="store_true", default=True)
    p.add_argument("--no-date-header", dest="date_header", action="store_false")
    p.add_argument("--header", dest="headers", action="append", default=[], help="name:value")
    p.add_argument("--h11-max-incomplete-event-size", type=int)
    p.add_argument("--ws", choices=list(WS_CHOICES), default="auto")
    p.add_argument("--ws-max-size", type=int, default=16 * 1024 * 1024)
    p.add_argument("--ws-max-queue", type=int, default=32)
    p.add_argument("--ws-ping-interval", type=float, default=20.0)
    p.add_argument("--ws-ping-timeout", type=float, default=20.0)
    p.add_argument("--ws-per-message-deflate", type=_boolean, default=True)
    p.add_argument("--factory", action="store_true")
    p.add_argument("--app-dir", default=None)
    # several --ssl-certfile (with as many --ssl-keyfile, in order): certificates picked by SNI
    p.add_argument("--ssl-keyfile", action="append")
    p.add_argument("--ssl-certfile", action="append")
    p.add_argument("--ssl-keyfile-password")
    p.add_argument("--ssl-version", type=int)
    p.add_argument("--ssl-cert-reqs", type=int, default=0)
    p.add_argument("--ssl-ca-certs")
    p.add_argument("--ssl-ciphers", default="TLSv1")
    _supervisor.add_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """`goloop serve module:app [options]` (the `goloop` command, python -m goloop)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: goloop serve module:app [options]   (goloop serve --help for the options)")
        return 0 if argv else 2
    if argv[0] != "serve":
        print(f"goloop: unknown command {argv[0]!r} (the command is: goloop serve module:app [options])",
              file=sys.stderr)
        return 2
    p = _parser()
    args, unknown = p.parse_known_args(argv[1:])
    if unknown:
        opt = unknown[0].split("=", 1)[0]
        if opt.startswith("--") and opt[2:].replace("-", "_") in NOT_YET:
            p.error(f"{opt} is not supported by goloop serve yet (planned, issue 11)")
        p.error("unrecognized arguments: " + " ".join(unknown))
    options = vars(args)
    app = options.pop("app")
    for name in ("ssl_certfile", "ssl_keyfile"):  # one: a path, as uvicorn's option
        if options[name] is not None and len(options[name]) == 1:
            options[name] = options[name][0]
    if options["app_dir"] is None:
        options["app_dir"] = "."
    try:
        return serve(app, **options)
    except ConfigError as exc:
        print(f"goloop serve: {exc}", file=sys.stderr)
        return 2
