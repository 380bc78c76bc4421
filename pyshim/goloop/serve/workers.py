"""goloop serve's master and workers: --workers and --reload.

The master (`--workers N` or `--reload`) holds no Go runtime: it never imports
goloop._goloop (nor the application). It binds the listening sockets and starts the
workers with spawn semantics (a new interpreter, `subprocess`, so goloop's fork guard
stays), each inheriting its socket. TCP: a socket per worker slot, all bound to the same
address with SO_REUSEPORT, so the kernel spreads new connections over the workers by a hash
of each connection's addresses and ports, whichever worker is busy or awake (one shared
socket lets the worker that is already awake take nearly every accept under light load). A
Unix socket (--uds) or an inherited one (--fd), or a system without SO_REUSEPORT: one
socket that every worker accepts on. The master keeps every socket open, so a worker that
dies leaves the connections queued on its socket to its replacement (started on the same
socket) and a reload's new worker accepts on its predecessor's socket: restarting or
reloading workers never refuses nor resets a connection.

Signals to the master: SIGINT/SIGTERM graceful shutdown of every worker (each finishes
its requests in flight, up to --timeout-graceful-shutdown; a second one forces), SIGHUP
rolling reload (new workers first; an old one is stopped gracefully once its
replacement serves), SIGTTIN/SIGTTOU one worker more/less. A worker that dies is
restarted, with a backoff when it dies young (a crashing app does not spin). Without
--reload, a master none of whose workers ever served (each exited while starting: the app
does not import, its startup fails) gives up and exits 1, as gunicorn's "Worker failed to
boot" does (uvicorn restarts them forever); once one served, a worker that dies is replaced.

Each worker has a control socket pair with the master: the worker writes b"r" once it
serves, then its loop answers the master's pings (--timeout-worker-healthcheck: a worker
whose loop stays blocked is killed and restarted). With --metrics the workers count in
slots of a shared memory file the master creates (_SharedMetrics), so /metrics and
goloop.serve_metrics() give the whole server's counts.

This module imports goloop.serve.config only: a worker's entry (the command the master
runs) hands worker_main goloop.serve.server.Server, and goloop.serve.server calls supervise().
"""
from __future__ import annotations

import fnmatch
import json
import logging
import math
import os
import mmap
import selectors
import signal
import socket
import stat
import struct
import subprocess
import sys
import time
from typing import Any

from . import ops as _serve_ops
from .config import (ConfigError, batch_scheduling, check_options, configure_logging, forwarded_allow_ips,
                            load_log_config, prepare)

logger = logging.getLogger("goloop.error")

# what the master does and its workers do not
_MASTER_ONLY = ("workers", "reload", "reload_dirs", "reload_includes", "reload_excludes", "reload_delay", "env_file",
                "timeout_worker_healthcheck", "workers_max_rss", "workers_lifetime", "pid_file")

RELOAD_INCLUDES = ["*.py"]
RELOAD_EXCLUDES = [".*", ".py[cod]", ".sw.*", "~*"]
_SKIP_DIRS = {"__pycache__", "node_modules"}


# ---------------------------------------------------------------- the worker process

def _set_pdeathsig() -> None:
    """Linux: the worker gets SIGTERM when the master dies (no orphans)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _read_ctl(fd: int) -> bytes | None:
    """What came on a control socket (non-blocking): None if nothing yet, b"" when the
    other end is closed or failed."""
    try:
        return os.read(fd, 64)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _answer_pings(loop: Any, fd: int) -> None:
    """The worker's side of the health check: the loop answers each ping of the master (a
    reader on the control socket), so a worker whose loop is blocked does not answer."""

    def pong() -> None:
        data = _read_ctl(fd)
        if data is None:
            return
        if not data:  # the master is gone
            loop.remove_reader(fd)
            return
        try:
            os.write(fd, b"p")
        except OSError:
            pass

    loop.add_reader(fd, pong)


def worker_main(server_class: Any, argv: list[str] | None = None) -> None:
    """Entry of a worker process: serves argv[0], the JSON of its configuration, with
    server_class (goloop.serve.server.Server)."""
    spec = json.loads((argv or sys.argv[1:])[0])
    master, ctl_fd, app = spec.pop("_master"), spec.pop("_ctl_fd"), spec.pop("_app")
    shared_metrics = spec.pop("_metrics", None)
    slot = spec.pop("_slot", 0)
    if spec.get("process_name"):
        _serve_ops.set_process_title(f"{spec['process_name']} [worker {slot}]")
    _set_pdeathsig()
    if os.getppid() != master:  # the master died before prctl
        sys.exit(0)
    from .. import run

    server = server_class(app, **spec)
    server.shared_metrics = shared_metrics
    server.in_worker = True  # other processes serve the same app (WSGI's wsgi.multiprocess)
    if server.config.get("log_config"):
        load_log_config(server.config["log_config"])
    batch_scheduling(server.config)
    configure_logging(server.config["log_level"] or "info")

    def ready() -> None:  # serving: from now on the master's health check applies
        import asyncio

        os.set_blocking(ctl_fd, False)
        try:
            os.write(ctl_fd, b"r")
        except OSError:
            pass
        _answer_pings(asyncio.get_running_loop(), ctl_fd)

    server.on_started = ready
    try:
        run(server.serve(install_signal_handlers=True))
    except KeyboardInterrupt:
        pass
    except ConfigError as exc:  # an option the loaded application refuses: main()'s line and status
        print(f"goloop serve: {exc}", file=sys.stderr)
        sys.exit(2)
    sys.exit(server.exit_code)  # (Server.serve logs Started/Finished server process [PID])


# ---------------------------------------------------------------- the master

def bind_sockets(cfg: dict[str, Any], reuse_port: bool = True) -> list[socket.socket]:
    """The listening sockets of cfg's --fd, --uds or --host/--port: the master's (TCP with
    SO_REUSEPORT: the first worker's, and Supervisor binds one more per worker with
    bind_like) and a single process's (reuse_port=False)."""
    if cfg.get("fd") is not None:
        return [socket.socket(fileno=os.dup(int(cfg["fd"])))]
    if cfg.get("uds"):
        path = cfg["uds"]
        if os.path.exists(path) and stat.S_ISSOCK(os.stat(path).st_mode):
            os.remove(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
        os.chmod(path, 0o666)
        sock.listen(cfg["backlog"])
        return [sock]
    host = cfg["host"]
    family = socket.AF_INET6 if host and ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port and hasattr(socket, "SO_REUSEPORT"):
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        except OSError:
            pass
    try:
        sock.bind((host, int(cfg["port"])))
    except OSError as exc:
        sock.close()
        if exc.errno is None:
            raise
        # asyncio's (and so uvicorn's) one line: "[Errno 98] error while attempting to bind
        # on address ('127.0.0.1', 8000): address already in use"
        raise OSError(exc.errno, "error while attempting to bind on address %r: %s"
                      % ((host, int(cfg["port"])), (exc.strerror or "").lower())) from None
    sock.listen(cfg["backlog"])
    return [sock]


def _reuses_port(sock: socket.socket) -> bool:
    """sock is a TCP socket with SO_REUSEPORT: more can be bound to its address."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or not hasattr(socket, "SO_REUSEPORT"):
        return False
    try:
        return bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT))
    except OSError:
        return False


def bind_like(sock: socket.socket, backlog: int) -> socket.socket:
    """Another listening socket with SO_REUSEPORT on sock's address (a worker's own)."""
    new = socket.socket(sock.family, socket.SOCK_STREAM)
    try:
        new.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        new.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if sock.family == socket.AF_INET6:
            new.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY,
                           sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY))
        new.bind(sock.getsockname())
        new.listen(backlog)
    except BaseException:
        new.close()
        raise
    return new


class _Watcher:
    """Polls the modification times of the files to watch (--reload)."""

    def __init__(self, dirs: list[str], includes: list[str], excludes: list[str]):
        self.dirs = [os.path.abspath(d) for d in dirs]
        self.includes, self.excludes = includes, excludes
        self.mtimes = self._scan()

    def _wanted(self, name: str) -> bool:
        return any(fnmatch.fnmatch(name, p) for p in self.includes) and \
            not any(fnmatch.fnmatch(name, p) for p in self.excludes)

    def _scan(self) -> dict[str, float]:
        out: dict[str, float] = {}
        stack = list(self.dirs)
        while stack:
            d = stack.pop()
            try:
                it = os.scandir(d)
            except OSError:
                continue
            with it:
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            if e.name not in _SKIP_DIRS and not e.name.startswith(".") and \
                                    not any(fnmatch.fnmatch(e.name, p) for p in self.excludes if p != ".*"):
                                stack.append(e.path)
                        elif self._wanted(e.name):
                            out[e.path] = e.stat().st_mtime_ns
                    except OSError:
                        pass
        return out

    def changed(self) -> list[str]:
        new = self._scan()
        diff = [p for p in new.keys() | self.mtimes.keys() if new.get(p) != self.mtimes.get(p)]
        self.mtimes = new
        return sorted(diff)


class _SharedMetrics:
    """The file in which the workers keep their metrics, one slot each, summed by whichever
    answers (goloop/httpserver/metrics.go has the layout). A memfd the workers inherit; a slot
    freed by a worker's exit goes to the next worker started, so the counts go on from
    where they were (Prometheus counters never go back)."""

    HEADER = SLOT = 256
    MAGIC = 0x31435254454d4c47  # "GLMETRC1"
    SLOTS = 1024  # workers alive at once (the file is sparse: untouched slots cost nothing)

    def __init__(self) -> None:
        size = self.HEADER + self.SLOT * self.SLOTS
        self.fd = os.memfd_create("goloop-metrics", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, size)
        self.mm = mmap.mmap(self.fd, size)
        struct.pack_into("<qq", self.mm, 0, self.MAGIC, 0)
        self.used = 0
        self.free: list[int] = []

    def take(self) -> int | None:
        if self.free:
            self.free.sort()
            return self.free.pop(0)
        if self.used == self.SLOTS:
            return None  # that worker counts alone
        self.used += 1
        struct.pack_into("<q", self.mm, 8, self.used)  # before the worker starts on it
        return self.used - 1

    def release(self, slot: int) -> None:
        """slot's worker exited: its gauges (in flight, connections) go to zero."""
        struct.pack_into("<qq", self.mm, self.HEADER + slot * self.SLOT + 8, 0, 0)
        self.free.append(slot)

    def close(self) -> None:
        self.mm.close()
        os.close(self.fd)


class _Worker:
    def __init__(self, proc: subprocess.Popen, ctl: socket.socket, slot: int):
        self.proc = proc
        self.listen = slot  # its listening socket's slot (Supervisor._listener)
        self.pid = proc.pid
        self.ctl = ctl  # the control socket: b"r" when serving, then b"p" for each ping
        self.slot: int | None = None  # in the shared metrics file
        self.ping_sent = 0.0  # when the ping not answered yet was sent (0: none)
        self.pong_at = 0.0
        self.ready = False
        self.started = time.monotonic()
        self.ready_at = 0.0
        self.retiring = False
        self.killed = False  # by the health check
        self.replaces: _Worker | None = None  # a reload's new worker: the one it replaces
        self.recycles = False  # ... replacing it past --workers-max-rss or --workers-lifetime


class Supervisor:
    """The master of --workers/--reload: supervise(app, options) runs it."""

    READY_TIMEOUT = 120.0  # a reload's new worker not serving by then is killed

    def __init__(self, app: str, cfg: dict[str, Any]):
        self.app = app
        self.cfg = cfg
        self.n = int(cfg.get("workers") or 1)
        self.active: list[_Worker] = []     # serving (or starting) workers of the current code
        self.candidates: list[_Worker] = []  # a reload's new workers, not serving yet
        self.retiring: list[_Worker] = []   # told to stop, not exited yet
        self.signals: list[int] = []
        self.stopping = 0  # signals of shutdown received
        self.fail_streak = 0
        self.next_spawn = 0.0
        self.served = False  # a worker has served: from then on a worker that dies is replaced
        self.boot_failed = False  # a worker exited while starting before any served: no more spawns
        self.boot_code = 1  # the master's exit status then: 2 if that worker refused an option
        self.sockets: list[socket.socket] = []  # the first bound: --fd, --uds or TCP
        # TCP with SO_REUSEPORT: a listening socket per worker slot (slot 0 is sockets[0]),
        # kept open here while its slot exists, so the connections queued on it when its
        # worker dies or is replaced wait for the next worker of the slot instead of being
        # reset; the kernel spreads new connections over them by flow hash. Otherwise
        # (--uds, --fd, no SO_REUSEPORT) every worker accepts on sockets[0].
        self.per_worker = False
        self.slot_sockets: dict[int, socket.socket] = {}
        self.sel = selectors.DefaultSelector()
        self.watcher: _Watcher | None = None
        self.metrics: _SharedMetrics | None = None  # --metrics: the workers count in it
        self.next_recycle = 0.0  # when _recycle looks at the workers' sizes and ages next
        self.recycled_slots: set[int] = set()  # slots whose first worker was recycled (--workers-lifetime)

    # -- workers
    def _listener(self, slot: int) -> socket.socket:
        """The listening socket of the worker of slot: its own with SO_REUSEPORT (bound now
        if the slot is new: SIGTTIN), else the shared one."""
        if not self.per_worker:
            return self.sockets[0]
        sock = self.slot_sockets.get(slot)
        if sock is None:
            try:
                sock = bind_like(self.sockets[0], self.cfg["backlog"])
            except OSError as exc:  # the worker shares slot 0's socket
                logger.warning("Could not bind a listening socket for worker slot %d (%s): it shares "
                               "another worker's", slot, exc)
                return self.sockets[0]
            self.slot_sockets[slot] = sock
        return sock

    def _trim_listeners(self) -> None:
        """SIGTTOU: close the sockets of the slots beyond the worker count. The kernel resets
        the connections still queued on one as it closes, unless net.ipv4.tcp_migrate_req
        is 1 (Linux 5.14+), which moves them to another worker's socket."""
        for slot in [k for k in self.slot_sockets if k >= self.n]:
            if slot == 0 or any(wk.listen == slot for wk in self.active + self.candidates):
                continue
            self.slot_sockets.pop(slot).close()

    def _spawn(self, slot: int) -> _Worker:
        ctl, child = socket.socketpair()
        ctl.setblocking(False)
        w = child.fileno()
        spec = {k: v for k, v in self.cfg.items() if k not in _MASTER_ONLY}
        listener = self._listener(slot)
        spec.update(fd=listener.fileno(), uds=None, _ctl_fd=w, _app=self.app, _master=os.getpid(), _slot=slot)
        if spec.get("forwarded_allow_ips") is None:
            spec["forwarded_allow_ips"] = forwarded_allow_ips(self.cfg)
        fds = [listener.fileno(), w]
        mslot = self.metrics.take() if self.metrics is not None else None
        if mslot is not None:
            spec["_metrics"] = [self.metrics.fd, mslot]
            fds.append(self.metrics.fd)
        cmd = [sys.executable, "-c", "from goloop.serve.server import Server; from goloop.serve.workers import worker_main; worker_main(Server)",
               json.dumps(spec)]
        try:
            proc = subprocess.Popen(cmd, pass_fds=fds)
        except BaseException:
            ctl.close()
            if mslot is not None:
                self.metrics.release(mslot)
            raise
        finally:
            child.close()
        wk = _Worker(proc, ctl, slot)
        wk.slot = mslot
        self.sel.register(ctl, selectors.EVENT_READ, wk)
        return wk

    def _forget(self, wk: _Worker) -> None:
        try:
            self.sel.unregister(wk.ctl)
        except (KeyError, ValueError):
            pass
        wk.ctl.close()
        if wk.slot is not None:
            self.metrics.release(wk.slot)
            wk.slot = None

    def _signal(self, wk: _Worker, sig: int) -> None:
        try:
            wk.proc.send_signal(sig)
        except (ProcessLookupError, OSError):
            pass

    def _retire(self, wk: _Worker) -> None:
        if wk in self.active:
            self.active.remove(wk)
        if wk in self.candidates:
            self.candidates.remove(wk)
        wk.retiring = True
        self.retiring.append(wk)
        self._signal(wk, signal.SIGTERM)

    def _all(self) -> list[_Worker]:
        return self.active + self.candidates + self.retiring

    # -- events
    def _on_ctl(self, wk: _Worker) -> None:
        data = _read_ctl(wk.ctl.fileno())
        if data is None:
            return
        if not data:  # the worker closed its end (it exits): its exit is seen by _reap
            try:
                self.sel.unregister(wk.ctl)
            except (KeyError, ValueError):
                pass
            return
        if b"p" in data:
            wk.ping_sent, wk.pong_at = 0.0, time.monotonic()
        if wk.ready or b"r" not in data:
            return
        wk.ready, wk.ready_at = True, time.monotonic()
        wk.pong_at = wk.ready_at
        self.served, self.boot_failed = True, False
        logger.debug("Worker [%d] is serving", wk.pid)
        if wk in self.candidates:
            old = wk.replaces
            self.candidates.remove(wk)
            wk.replaces = None
            if old is not None and old not in self.active:
                # old died meanwhile: the worker restarted on its slot gives way to wk
                old = next((a for a in self.active if a.listen == wk.listen), None)
            if old is not None and old in self.active:
                self.active[self.active.index(old)] = wk
                self._retire(old)
            else:
                self.active.append(wk)
            if not self.candidates and not wk.recycles:
                logger.info("Reload complete: %d worker(s) serving the new code", len(self.active))

    def _reap(self) -> None:
        now = time.monotonic()
        for wk in self._all():
            code = wk.proc.poll()
            if code is None:
                continue
            self._forget(wk)
            if wk in self.retiring:
                self.retiring.remove(wk)
                continue
            if wk in self.candidates:
                self.candidates.remove(wk)
                logger.error("Reload failed: the new worker [%d] exited with code %s; the old one keeps serving",
                             wk.pid, code)
                continue
            self.active.remove(wk)
            if self.stopping:
                continue
            if not wk.ready and not self.served:
                # another worker's "ready" may have come after this round's select: read what
                # waits on their control sockets before taking this exit for a failed boot
                for other in self._all():
                    if not other.ready:
                        self._on_ctl(other)
            if not wk.ready and not self.served and not self.cfg.get("reload"):
                # no worker has served yet and this one could not start: the others would
                # fail alike; the master exits once the ones still starting have exited
                self.boot_failed = True
                self.boot_code = 2 if code == 2 else 1
                logger.error("Worker [%d] exited with code %s before it served", wk.pid, code)
                continue
            young = not wk.ready or now - wk.ready_at < 1.0
            if young:
                self.fail_streak += 1
                delay = min(0.1 * 2 ** (self.fail_streak - 1), 10.0)
            else:
                self.fail_streak, delay = 0, 0.0
            self.next_spawn = max(self.next_spawn, now + delay)
            logger.warning("Worker [%d] exited with code %s; restarting it%s", wk.pid, code,
                           " in %.1f s" % delay if delay else "")

    def _reload(self, why: str) -> None:
        logger.info("%s: reloading the workers", why)
        self.fail_streak, self.next_spawn = 0, 0.0
        for wk in list(self.candidates):  # a reload in progress is superseded
            self._retire(wk)
        for old in list(self.active):
            if not old.ready:  # still starting with the old code: restart it now
                self._retire(old)
                continue
            new = self._spawn(old.listen)  # on its predecessor's socket: no gap in accepting
            new.replaces = old
            self.candidates.append(new)

    def _handle_signal(self, sig: int) -> None:
        if sig in (signal.SIGINT, signal.SIGTERM):
            self.stopping += 1
            if self.stopping == 1:
                logger.info("Shutting down: stopping %d worker(s) gracefully", len(self._all()))
                for wk in list(self.active) + list(self.candidates):
                    self._retire(wk)
            elif self.stopping == 2:
                for wk in self.retiring:
                    self._signal(wk, signal.SIGINT)  # a second SIGINT forces the worker out
            else:
                for wk in self.retiring:
                    self._signal(wk, signal.SIGKILL)
        elif self.stopping:
            return
        elif sig == signal.SIGHUP:
            self._reload("SIGHUP")
        elif sig == getattr(signal, "SIGTTIN", None):
            self.n += 1
            logger.info("SIGTTIN: %d worker(s)", self.n)
        elif sig == getattr(signal, "SIGTTOU", None):
            if self.n > 1:
                self.n -= 1
                logger.info("SIGTTOU: %d worker(s)", self.n)
                for wk in self.active + self.candidates:
                    if wk.listen >= self.n:
                        self._retire(wk)
                self._trim_listeners()

    def _balance(self) -> None:
        if self.stopping:
            return
        now = time.monotonic()
        if len(self.active) < self.n and now >= self.next_spawn and not self.boot_failed:
            used = {wk.listen for wk in self.active}
            for slot in [i for i in range(self.n) if i not in used][:self.n - len(self.active)]:
                self.active.append(self._spawn(slot))
        for wk in list(self.candidates):
            if now - wk.started > self.READY_TIMEOUT:
                logger.error("Reload failed: the new worker [%d] did not start serving", wk.pid)
                self._retire(wk)
                self._signal(wk, signal.SIGKILL)

    def _healthcheck(self) -> float:
        """--timeout-worker-healthcheck: pings each serving worker (on its control socket,
        answered by the worker's loop) once its last answer is older than the check interval,
        and kills one whose ping is not answered within the timeout (its loop is blocked or
        the process hangs); _reap restarts it. Returns when to check next (inf: never)."""
        timeout = float(self.cfg.get("timeout_worker_healthcheck") or 0)
        if timeout <= 0 or self.stopping or self.cfg.get("reload"):  # as uvicorn: not with --reload
            return math.inf
        every = min(1.0, timeout / 4)
        now = time.monotonic()
        nxt = math.inf
        for wk in self.active:
            if not wk.ready or wk.retiring or wk.killed:
                continue
            if wk.ping_sent:
                if now - wk.ping_sent < timeout:
                    nxt = min(nxt, wk.ping_sent + timeout)
                    continue
                logger.error("Worker [%d] did not answer the health check within %g s (is its loop blocked?): "
                             "killing it", wk.pid, timeout)
                wk.killed = True
                self._signal(wk, signal.SIGKILL)
            elif now - wk.pong_at >= every:
                try:
                    wk.ctl.send(b"?")
                except OSError:  # it exits: _reap sees it
                    continue
                wk.ping_sent = now
                nxt = min(nxt, now + timeout)
            else:
                nxt = min(nxt, wk.pong_at + every)
        return nxt

    RECYCLE_EVERY = 2.0  # seconds between the checks of --workers-max-rss and --workers-lifetime

    def _recycle(self) -> float:
        """--workers-max-rss, --workers-lifetime: a serving worker whose resident memory
        (/proc/PID/statm) passed the limit, or older than its lifetime, is replaced as a
        reload replaces it: its successor starts on its listening socket and, once it
        serves, the old one is stopped gracefully (it finishes its requests in flight). The
        first worker of each slot lives lifetime * (1 + slot / workers): the workers started
        together are then replaced one at a time, and their successors keep that spacing.
        Returns when to check next (inf: never)."""
        max_rss, lifetime = self.cfg.get("workers_max_rss"), self.cfg.get("workers_lifetime")
        if not (max_rss or lifetime) or self.stopping or self.cfg.get("reload"):
            return math.inf
        now = time.monotonic()
        if now < self.next_recycle:
            return self.next_recycle
        self.next_recycle = now + self.RECYCLE_EVERY
        replaced = {c.replaces for c in self.candidates}
        for wk in list(self.active):
            if not wk.ready or wk.retiring or wk in replaced:
                continue
            why = None
            if lifetime:
                life = float(lifetime)
                if wk.listen not in self.recycled_slots:
                    life *= 1 + wk.listen / max(1, self.n)
                if now - wk.ready_at >= life:
                    why = "lifetime of %g s" % life
            if why is None and max_rss:
                rss = worker_rss_mib(wk.pid)
                if rss is not None and rss > float(max_rss):
                    why = "resident memory of %.1f MiB (over %g MiB)" % (rss, float(max_rss))
            if why is None:
                continue
            logger.info("Worker [%d] reached its %s: replacing it gracefully", wk.pid, why)
            self.recycled_slots.add(wk.listen)
            new = self._spawn(wk.listen)  # on its socket: no gap in accepting
            new.replaces, new.recycles = wk, True
            self.candidates.append(new)
        return self.next_recycle

    # -- the loop
    def run(self) -> int:
        cfg = self.cfg
        try:
            self.sockets = bind_sockets(cfg)
        except OSError as exc:  # one line naming the address, as uvicorn
            logger.error("%s", exc)
            return 1
        # not an inherited --fd socket (its owner chose it: binding more on its address may
        # not even be allowed), nor --uds: those are shared
        self.per_worker = cfg.get("fd") is None and _reuses_port(self.sockets[0])
        if self.per_worker:
            self.slot_sockets[0] = self.sockets[0]
        sig_r, sig_w = os.pipe()
        os.set_blocking(sig_r, False)
        os.set_blocking(sig_w, False)
        handled = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD]
        handled += [getattr(signal, n) for n in ("SIGTTIN", "SIGTTOU") if hasattr(signal, n)]
        old_handlers = {s: signal.signal(s, lambda s, f: self.signals.append(s)) for s in handled}
        old_wakeup = signal.set_wakeup_fd(sig_w, warn_on_full_buffer=False)
        self.sel.register(sig_r, selectors.EVENT_READ, None)
        try:
            if cfg.get("metrics") or cfg.get("metrics_path"):
                self.metrics = _SharedMetrics()
            logger.info("Started parent process [%d]", os.getpid())
            self._log_listening()
            if cfg.get("reload"):
                dirs = cfg.get("reload_dirs") or [cfg.get("app_dir") or os.getcwd()]
                if isinstance(dirs, str):
                    dirs = [dirs]
                self.watcher = _Watcher(dirs, list(cfg.get("reload_includes") or RELOAD_INCLUDES),
                                        list(cfg.get("reload_excludes") or RELOAD_EXCLUDES))
                logger.info("Will watch for changes in these directories: %s", self.watcher.dirs)
            delay = float(cfg.get("reload_delay") or 0.25)
            failed = 0
            next_watch = time.monotonic() + delay
            while True:
                self._balance()
                if self.stopping and not self._all():
                    break
                if self.boot_failed and not self.stopping and not self._all():
                    logger.error("No worker could start: giving up")
                    failed = self.boot_code
                    break
                timeout = max(0.0, min(0.5, self._healthcheck() - time.monotonic(),
                                       self._recycle() - time.monotonic()))
                if self.watcher is not None:
                    timeout = max(0.0, min(timeout, next_watch - time.monotonic()))
                if len(self.active) < self.n and not self.stopping:
                    timeout = max(0.0, min(timeout, self.next_spawn - time.monotonic()))
                for key, _ in self.sel.select(timeout):
                    if key.data is None:
                        try:
                            while os.read(sig_r, 512):
                                pass
                        except BlockingIOError:
                            pass
                    else:
                        self._on_ctl(key.data)
                sigs, self.signals[:] = list(self.signals), []
                for s in sigs:
                    if s != signal.SIGCHLD:
                        self._handle_signal(s)
                self._reap()
                if self.watcher is not None and time.monotonic() >= next_watch:
                    changed = self.watcher.changed()
                    if changed and not self.stopping:
                        names = ", ".join(os.path.relpath(p) for p in changed[:3])
                        self._reload(f"Changes detected in {names}")
                    next_watch = time.monotonic() + delay
        finally:
            signal.set_wakeup_fd(old_wakeup)
            for s, h in old_handlers.items():
                signal.signal(s, h)
            for wk in self._all():  # only on an error of the master itself
                self._signal(wk, signal.SIGKILL)
                wk.proc.wait()
                self._forget(wk)
            self.sel.close()
            os.close(sig_r)
            os.close(sig_w)
            for s in self.sockets + list(self.slot_sockets.values()):
                s.close()
            if self.metrics is not None:
                self.metrics.close()
            if cfg.get("uds") and os.path.exists(cfg["uds"]):
                os.remove(cfg["uds"])
        logger.info("Stopping parent process [%d]", os.getpid())
        return failed

    def _log_listening(self) -> None:
        s = self.sockets[0]
        if s.family == socket.AF_UNIX:
            logger.info("goloop serve running on unix socket %s with %d worker(s) (Press CTRL+C to quit)",
                        s.getsockname(), self.n)
            return
        host, port = s.getsockname()[:2]
        fmt = "http://[%s]:%d" if s.family == socket.AF_INET6 else "http://%s:%d"
        logger.info("goloop serve running on " + fmt + " with %d worker(s) (Press CTRL+C to quit)", host, port,
                    self.n)


def supervise(app: Any, options: dict[str, Any]) -> int:
    """goloop.serve(app, workers=N or reload=True): run the master until SIGINT/SIGTERM."""
    cfg = check_options(options)
    if not isinstance(app, str):
        raise ConfigError("You must pass the application as an import string ('module:attribute') "
                            "to enable 'reload' or 'workers'.")
    prepare(cfg)
    configure_logging(cfg["log_level"] or "info")
    if cfg.get("app_dir"):
        cfg["app_dir"] = os.path.abspath(cfg["app_dir"])
    if cfg.get("process_name"):
        _serve_ops.set_process_title(f"{cfg['process_name']} [master]")
    _serve_ops.write_pid_file(cfg.get("pid_file"))
    try:
        return Supervisor(app, cfg).run()
    finally:
        _serve_ops.remove_pid_file(cfg.get("pid_file"))


def worker_rss_mib(pid: int) -> float | None:
    """A process' resident memory in MiB (/proc/PID/statm), None if it cannot be read."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)
    except (OSError, ValueError, IndexError):
        return None
