"""goloop serve: an ASGI and WSGI server whose HTTP engine is Go (goloop/httpserver), bound to
Python by Go and C (goloop/binding). An ASGI application runs on goloop's loop, a WSGI one on
a pool of threads (goloop.serve.wsgi).

    goloop.serve(app, host="127.0.0.1", port=8000)          # from a program
    python -m goloop serve module:app --port 8000           # or the `goloop` command

Options follow uvicorn's names and meanings. This module imports no part of the Go engine:
the extension is loaded when serve() creates its loop. The options, the CLI's parser, the env
file and the log config are goloop.serve.config's; --workers and --reload (a master and its
worker processes) goloop.serve.workers'. This module has the server (Server: lifespan, the
request runner, proxy headers and metrics), serve() and the CLI's main().
"""
from __future__ import annotations

import asyncio
import importlib
import json
import logging
import math
import os
import re
import signal
import socket
import sys
import weakref
from http import HTTPStatus
from typing import Any, Callable
from urllib.parse import quote

from .. import ClientDisconnected
from . import accesslog as _serve_accesslog
from . import h3 as _serve_h3
from . import ops as _serve_ops
from . import static as _serve_static
from . import workers as _workers
from . import wsgi as _wsgi
from .config import (NOT_YET, SUPPORTED_OPTIONS, ConfigError, batch_scheduling, configure_logging,
                            forwarded_allow_ips, prepare, tls_pairs, wants_supervisor)
from .config import check_options as _check_options
from .config import parser as _parser

__all__ = ["serve", "Server", "main", "SUPPORTED_OPTIONS"]

logger = logging.getLogger("goloop.error")
access_logger = logging.getLogger("goloop.access")


class AppLoadError(ConfigError):
    """The application named cannot be loaded (uvicorn's texts): the server logs "Error
    loading ASGI app. <this>" and exits 1."""


def import_app(target: Any, factory: bool = False, app_dir: str | None = None) -> Any:
    """The ASGI application named by 'module:attribute' (or target itself if not a string).
    AppLoadError if it cannot be found (a module that fails inside its own imports raises
    its own error, as uvicorn lets it)."""
    if isinstance(target, str):
        if app_dir is not None:
            sys.path.insert(0, app_dir)
        module_name, _, attrs = target.partition(":")
        if not module_name or not attrs:
            raise AppLoadError(f'Import string "{target}" must be in format "<module>:<attribute>".')
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            raise AppLoadError(f'Could not import module "{module_name}".') from None
        app = module
        for attr in attrs.split("."):
            try:
                app = getattr(app, attr)
            except AttributeError:
                raise AppLoadError(f'Attribute "{attrs}" not found in module "{module_name}".') from None
    else:
        app = target
    if factory:
        try:
            app = app()
        except TypeError as exc:
            raise AppLoadError(f"The factory failed: {exc}") from None
    if not callable(app):
        raise AppLoadError(f"{target if isinstance(target, str) else type(app).__name__!r} is not callable "
                           "(an ASGI application is called as app(scope, receive, send)).")
    return app


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


# What the end of an application's call found (goloop/httpserver Finish*: send._done(), _fail()).
_FINISH_LOST, _FINISH_NOT_STARTED, _FINISH_INCOMPLETE = 1, 2, 3


def _on_app_end(exc: BaseException | None, found: int) -> None:
    """What the server logs when an application's call ended badly: exc, what it raised
    (None: it returned), and what Go found. A client that went away is no application
    error: what the application raised because of it (goloop.ClientDisconnected from send(),
    Starlette's ClientDisconnect after receive()'s http.disconnect ...) is logged at debug."""
    if found == _FINISH_LOST or isinstance(exc, ClientDisconnected):
        if exc is not None:
            logger.debug("ASGI application ended by the client's disconnect: %r", exc)
    elif exc is not None:
        logger.error("Exception in ASGI application\n", exc_info=exc)
    elif found == _FINISH_NOT_STARTED:
        logger.error("ASGI callable returned without starting response.")
    elif found == _FINISH_INCOMPLETE:
        logger.error("ASGI callable returned without completing response.")


_PHRASES = {s.value: s.phrase for s in HTTPStatus}


_needs_quote = re.compile(r"[^A-Za-z0-9_.~/-]").search


def _quoted(path: str) -> str:
    """quote(path), as uvicorn's access line: the path unchanged where quote would leave it
    so (its characters all ASCII letters, digits or _.~/-), without quote's calls."""
    return quote(path) if _needs_quote(path) else path


def _addr_path(scope: dict) -> tuple[str, str]:
    """The access line's client (uvicorn's "host:port") and quoted path with its query."""
    client = scope.get("client")
    path = _quoted(scope["root_path"] + scope["path"])
    if scope["query_string"]:
        path += "?" + scope["query_string"].decode("ascii", "replace")
    return "%s:%d" % client if client else "", path


# uvicorn's access line (127.0.0.1:50000 - "GET / HTTP/1.1" 200 OK): its head, up to the
# status (asgi_run.c's access_head makes the same), and the whole line
_HEAD = '%s - "%s %s HTTP/%s" %d'
_LINE = _HEAD + " %s"


def _line_args(addr: str, path: str, scope: dict, status: int) -> tuple:
    """uvicorn's access line: the logger's args."""
    return (_LINE, addr, scope["method"], path, scope["http_version"], status, _PHRASES.get(status, ""))


def _access_line(scope: dict, status: int, head: str | None = None) -> None:
    """The access line of an HTTP request the application's own coroutine answered (the C
    wrapper, asgi_run.c, calls it as the call ends; status 500: none was started). head is
    the line up to its status, made in C for the common scope (None: made here); it goes
    straight to goloop's handler where only goloop's logging would see the record."""
    d = _serve_accesslog.straight(access_logger)
    if d is not None:
        if head is None:
            addr, path = _addr_path(scope)
            head = _HEAD % (addr, scope["method"], path, scope["http_version"], status)
        h = d[1]
        if _serve_accesslog.put(h, f"{d[3]}{head} {_PHRASES.get(status, '')}{h.terminator}"):
            return
    access_logger.info(*_line_args(*_addr_path(scope), scope, status))


def _make_runner(app: Any, access_log: bool, max_requests: int | None, server: "Server") -> Callable:
    """The coroutine function the Go side calls for each request: it runs the application
    and tells Go when it is done (a response not started becomes a 500). Without a request
    limit or an --access-log-fmt, HTTP requests do this in C (AsgiServer's app, on_error and
    access: _access_line) and only WebSocket sessions come here."""

    async def run(scope, receive, send, app_send=None):
        try:
            await app(scope, receive, app_send or send)
        except BaseException as exc:
            found = send._fail()  # a 500 closes its connection; a session closes with 1011
            if not isinstance(exc, Exception):
                raise
            _on_app_end(exc, found)
        else:
            found = send._done()
            if found > _FINISH_LOST:
                _on_app_end(None, found)

    if not access_log and not max_requests:
        return run

    count = 0

    fmt = server.config.get("access_log_fmt") if access_log else None
    line = _serve_accesslog.formatter(fmt) if fmt is not None else None
    timed = _serve_accesslog.needs(fmt, "dt_ms")
    sized = _serve_accesslog.needs(fmt, "size")
    loop = asyncio.get_event_loop() if timed else None

    async def run_logged(scope, receive, send):
        nonlocal count
        t0 = loop.time() if timed else 0.0
        size = None
        if sized and scope["type"] == "http":  # the body bytes of http.response.body messages
            size = 0

            async def counting_send(message):
                nonlocal size
                if message.get("type") == "http.response.body":
                    size += len(message.get("body", b""))
                return await send(message)
        try:
            await run(scope, receive, send, counting_send if size is not None else None)
        finally:
            if access_log:
                addr, path = _addr_path(scope)
                if scope["type"] == "websocket":
                    status = send._status()
                    args = ('%s - "WebSocket %s" %s', addr, path, "[accepted]" if status == 101 else (status or 500))
                elif line is not None:  # --access-log-fmt (goloop.serve.accesslog)
                    h = scope["headers"]
                    args = line(addr, scope["method"], _quoted(scope["root_path"] + scope["path"]),
                                scope["query_string"].decode("ascii", "replace"), scope["http_version"],
                                send._status() or 500, size, (loop.time() - t0) * 1e3 if t0 else 0.0,
                                _serve_accesslog.header(h, b"user-agent"), _serve_accesslog.header(h, b"referer"))
                else:
                    args = _line_args(addr, path, scope, send._status() or 500)
                _serve_accesslog.info(access_logger, *args)
            if max_requests:
                count += 1
                if count >= max_requests:
                    server.request_exit("Maximum request limit of %d exceeded. Terminating process." % max_requests)

    run_logged.__name__ = "run"
    return run_logged


class Server:
    """goloop serve's server: Server(app, **options); `await server.serve()` on a goloop
    loop runs it until request_exit() (or SIGINT/SIGTERM with install_signal_handlers).
    A failure to start (the application not found, the address in use, TLS files) is
    logged as one ERROR line and serve() returns with exit_code 1 (uvicorn's exits 1)."""

    def __init__(self, app: Any, **options: Any):
        self.config = _check_options(options)
        self.app_target = app
        self.sockets: list[socket.socket] = []
        self.http3_ports: list[int] = []  # the UDP ports of HTTP/3 (--http3)
        self.started = False
        # called once listening, before any request can run (goloop serve's workers report
        # ready with it: a request that blocks the loop at once must not stop that report)
        self.on_started: Callable[[], None] | None = None
        self.should_exit = False
        self.force_exit = False
        self._exit_event: asyncio.Event | None = None
        self._srv = None
        self.exit_code = 0
        # a --workers worker's [fd, slot] of the master's shared metrics file (_workers.worker_main)
        self.shared_metrics: list[int] | None = None

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
        from .. import _goloop  # the engine is loaded by then: the loop is goloop's

        if not isinstance(loop, _goloop.LoopCore):
            raise RuntimeError("goloop serve runs on a goloop loop (goloop.run, goloop.new_event_loop)")
        self._exit_event = asyncio.Event()
        if self.should_exit:
            self._exit_event.set()
        try:
            app = import_app(self.app_target, cfg["factory"], cfg["app_dir"])
        except AppLoadError as exc:  # one line, as uvicorn: no traceback through goloop
            logger.error("Error loading ASGI app. %s", exc)
            self.exit_code = 1
            return
        wsgi = _wsgi.wants_wsgi(app, cfg["interface"])
        if wsgi and cfg["lifespan"] == "on":  # (--interface wsgi: refused by check_options)
            raise ConfigError("--lifespan on: a WSGI application has no lifespan protocol (--interface "
                              f"{cfg['interface']} found {self.app_target!r} to be one)")
        logger.info("Started server process [%d]", os.getpid())
        hup = install_signal_handlers and bool(cfg["ssl_certfile"]) and hasattr(signal, "SIGHUP")
        if install_signal_handlers:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self._handle_signal, sig)
        if hup:  # SIGHUP: read the certificate and key files again
            loop.add_signal_handler(signal.SIGHUP, self.reload_tls)
        state: dict = {}
        lifespan = None
        try:
            if cfg["lifespan"] != "off" and not wsgi:
                lifespan = _Lifespan(app, cfg["lifespan"], state)
                await lifespan.startup()
                if lifespan.should_exit:
                    self.exit_code = 3
                    return
            own_sockets = sockets is None
            try:
                self.sockets = _workers.bind_sockets(cfg, reuse_port=False) if own_sockets else list(sockets)
            except OSError as exc:  # one line naming the address, as uvicorn
                logger.error("%s", exc)
                if lifespan is not None:
                    await lifespan.shutdown()
                self.exit_code = 1
                return
            try:
                await self._run(app, state, loop, _goloop, wsgi)
            finally:
                if own_sockets:
                    for s in self.sockets:
                        s.close()
                    if cfg["uds"] and os.path.exists(cfg["uds"]):
                        os.remove(cfg["uds"])
            if lifespan is not None:
                await lifespan.shutdown()
            if self.started:
                logger.info("Finished server process [%d]", os.getpid())
        finally:
            _serve_accesslog.flush()  # the last requests' lines
            if install_signal_handlers:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
            if hup:
                loop.remove_signal_handler(signal.SIGHUP)

    async def _run(self, app, state, loop, _goloop, wsgi: bool = False) -> None:
        cfg = self.config
        headers = []
        for h in cfg["headers"] or ():
            name, value = h.split(":", 1) if isinstance(h, str) else h
            name, value = str(name).strip(), str(value).strip()
            if not name or any(c in name + value for c in "\r\n\0") or ":" in name:
                raise ConfigError(f"invalid header {h!r}")
            headers.append(f"{name.lower()}:{value}")
        alt_svc = _serve_h3.alt_svc(cfg, self.sockets)  # HTTP/3 advertised (goloop.serve.h3)
        if alt_svc:
            headers.append(alt_svc)
        access = bool(cfg["access_log"]) and access_logger.isEnabledFor(logging.INFO)
        runner = _make_runner(app, access, cfg["limit_max_requests"], self)
        # Without a request limit or an --access-log-fmt, an HTTP request's coroutine is the
        # application's own, run in a C wrapper (asgi_run.c): no Python frame around it; the
        # access line (uvicorn's) is a call the wrapper makes as the application's call ends.
        direct = not cfg["limit_max_requests"] and not (access and cfg.get("access_log_fmt") is not None)
        tls = bool(cfg["ssl_certfile"])
        # the HTTP extensions Go implements (goloop/httpserver/spec.go); a websocket scope gets
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
        pool = None
        if wsgi:  # the same engine, requests answered by a pool of threads (goloop.serve.wsgi)
            srv = _wsgi.make_server(self, app, loop, _goloop, headers, max_head)
        else:
            srv = _goloop.AsgiServer(loop, runner, template, state or None, int(max_head),
                                     int(float(cfg["timeout_keep_alive"]) * 1000), int(cfg["limit_concurrency"] or 0),
                                     bool(cfg["server_header"]), bool(cfg["date_header"]),
                                     "\n".join(headers).encode("latin-1"),
                                     _on_app_end if direct else None, app if direct else None,
                                     _access_line if direct and access else None)
        try:
            srv.configure(timeout_request_head=float(cfg["timeout_request_head"] or 0),
                          min_request_body_rate=int(math.ceil(cfg["min_request_body_rate"] or 0)),
                          h2_only=cfg["http"] == "h2",
                          min_response_rate=int(math.ceil(cfg["min_response_rate"] or 0)),
                          min_response_grace=float(cfg["min_response_grace"] or 0))
            if tls:
                pw = cfg["ssl_keyfile_password"]
                pairs = b"\0".join(os.fsencode(p) for cert, key in tls_pairs(cfg) for p in (cert, key or cert))
                if cfg["ssl_protocol_min"] or cfg["ssl_crl"]:  # goloop/httpserver/tlsops.go
                    _goloop._tls_extra(srv, cfg["ssl_protocol_min"] or "",
                                       os.fspath(cfg["ssl_crl"]) if cfg["ssl_crl"] else "")
                srv.set_tls(pairs, str(pw) if pw else None,
                            os.fspath(cfg["ssl_ca_certs"]) if cfg["ssl_ca_certs"] else None, cfg["ssl_cert_reqs"])
        except OSError as exc:  # a TLS file missing or invalid: one line
            srv.release()
            logger.error("Error loading TLS files. %s", exc)
            self.exit_code = 1
            return
        except BaseException:
            srv.release()
            raise
        try:
            self.http3_ports = _serve_h3.start(cfg, srv, self.sockets, _goloop)  # QUIC (goloop.serve.h3)
        except OSError as exc:  # its UDP port taken: one line
            srv.release()
            logger.error("Error starting HTTP/3. %s", exc)
            self.exit_code = 1
            return
        except BaseException:
            srv.release()
            raise
        self._srv = srv
        static_log = None
        try:
            configure_server(self, srv)  # proxy headers, metrics
            static_log = _serve_static.configure(cfg, srv, _goloop, access)  # static files (Go)
            _goloop._asgi_ws_config(srv, cfg["ws"] == "none" or wsgi, int(cfg["ws_max_size"]),
                                    int(cfg["ws_max_queue"]),
                                    float(cfg["ws_ping_interval"] or 0), float(cfg["ws_ping_timeout"] or 0),
                                    bool(cfg["ws_per_message_deflate"]))
            if wsgi:
                pool = _wsgi.start_pool(self, srv)
                if access:  # the pool threads' access lines: written in batches by the loop
                    _serve_accesslog.threads_loop = loop
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
            if static_log is not None:  # the last static responses' lines
                static_log.cancel()
                static_log.drain()
            srv.release()
            self._srv = None
            try:
                if pool:
                    await _wsgi.join_pool(pool)
            finally:  # (serve() writes the lines still waiting)
                if _serve_accesslog.threads_loop is loop:
                    _serve_accesslog.threads_loop = None

    def _log_started(self, sock: socket.socket) -> None:
        if sock.family == socket.AF_UNIX:
            logger.info("goloop serve running on unix socket %s (Press CTRL+C to quit)", sock.getsockname())
            return
        host, port = sock.getsockname()[:2]
        fmt = "[%s]:%d" if sock.family == socket.AF_INET6 else "%s:%d"
        fmt = ("https://" if self.config["ssl_certfile"] else "http://") + fmt
        logger.info("goloop serve running on " + fmt + " (Press CTRL+C to quit)", host, port)


# ---------------------------------------------------------------- proxy headers, metrics

_servers: "weakref.WeakSet" = weakref.WeakSet()


def configure_server(server: Any, srv: Any) -> None:
    """Called by Server._run with the Go server before it listens."""
    cfg = server.config
    kw: dict[str, Any] = {}
    if cfg.get("proxy_headers"):
        kw["proxy_headers"] = forwarded_allow_ips(cfg)
    if cfg.get("metrics") or cfg.get("metrics_path"):
        kw["metrics"] = True
        if cfg.get("metrics_path"):
            kw["metrics_path"] = cfg["metrics_path"]
        if server.shared_metrics is not None:
            kw["metrics_fd"], kw["metrics_slot"] = server.shared_metrics
    if kw:
        srv.configure(**kw)
    _servers.add(server)


def serve_metrics() -> dict | None:
    """The metrics of this process' running goloop serve server (None if none runs):
    requests, in_flight, connections, accept_errors, queued_bytes and, with metrics on (--metrics or --metrics-path),
    responses by status class and the latency histogram (seconds; cumulative buckets).
    Counted in Go: no Python code runs per request for them. With --workers they are the
    whole server's: every worker counts in its slot of a file the master shares with them,
    and this sums the slots. Call it on the server's loop thread."""
    for server in list(_servers):
        srv = getattr(server, "_srv", None)
        if srv is None:
            continue
        m = json.loads(srv.metrics("json"))
        out = {"requests": m["Requests"], "in_flight": m["InFlight"], "connections": m["Connections"],
               "enabled": m["Enabled"], "timeouts": {"head": m["HeadTimeouts"], "body": m["BodyTimeouts"],
                                                    "response": m["RespTimeouts"]}}
        # accepts that failed for want of a resource (EMFILE: the open files limit, ENFILE ...)
        out["accept_errors"] = m["AcceptErrors"]
        # response bytes this process' connections hold in Go's memory, not yet written
        out["queued_bytes"] = m["Queued"]
        if m["Enabled"]:
            bounds = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, float("inf")]
            out["responses"] = {f"{i}xx": m["Status"][i] for i in range(1, 6)}
            out["latency"] = {"count": m["Count"], "sum": m["Sum"],
                              "buckets": list(zip(bounds, m["Buckets"], strict=True))}
        return out
    return None


def serve(app: Any, **options: Any) -> int:
    """Serve the ASGI application app (or 'module:attribute') until SIGINT/SIGTERM.
    Options: uvicorn's (SUPPORTED_OPTIONS); returns the exit code."""
    if wants_supervisor(options):  # workers > 1 or reload: a master without Go
        return _workers.supervise(app, options)
    server = Server(app, **options)
    prepare(server.config)  # env file, log config
    configure_logging(server.config["log_level"] or "info")
    batch_scheduling(server.config)
    from .. import run

    if server.config["process_name"]:
        _serve_ops.set_process_title(server.config["process_name"])
    _serve_ops.write_pid_file(server.config["pid_file"])
    try:
        run(server.serve(install_signal_handlers=True))
    except KeyboardInterrupt:
        pass
    finally:
        _serve_ops.remove_pid_file(server.config["pid_file"])
    return server.exit_code


def main(argv: list[str] | None = None) -> int:
    """`goloop serve module:app [options]` (the `goloop` command, python -m goloop)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: goloop serve module:app [options]   (goloop serve --help for the options)\n"
              "       goloop --version")
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        from .._version import __version__

        print(f"goloop {__version__}")
        return 0
    if argv[0] != "serve":
        print(f"goloop: unknown command {argv[0]!r} (the command is: goloop serve module:app [options])",
              file=sys.stderr)
        return 2
    p = _parser()
    args, unknown = p.parse_known_args(argv[1:])
    if unknown:
        opt = unknown[0].split("=", 1)[0]
        if opt.startswith("--") and opt[2:].replace("-", "_") in NOT_YET:
            p.error(f"{opt} is not supported by goloop serve yet (planned)")
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
