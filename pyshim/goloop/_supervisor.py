"""goloop serve's process and operations side (issue 11): --workers, --reload, proxy headers,
metrics, --env-file, --log-config.

The master (`--workers N` or `--reload`) holds no Go runtime: it never imports
goloop._goloop (nor the application). It binds the listening sockets (TCP with
SO_REUSEPORT, a Unix socket, or --fd) and starts the workers with spawn semantics (a new
interpreter, `subprocess`, so goloop's fork guard stays), each inheriting the sockets.
Every worker accepts on the same sockets; the master keeps them open, so restarting or
reloading workers never refuses a connection.

Signals to the master: SIGINT/SIGTERM graceful shutdown of every worker (each finishes
its requests in flight, up to --timeout-graceful-shutdown; a second one forces), SIGHUP
rolling reload (new workers first; an old one is stopped gracefully once its
replacement serves), SIGTTIN/SIGTTOU one worker more/less. A worker that dies is
restarted, with a backoff when it dies young (a crashing app does not spin).

Each worker has a control socket pair with the master: the worker writes b"r" once it
serves, then its loop answers the master's pings (--timeout-worker-healthcheck: a worker
whose loop stays blocked is killed and restarted). With --metrics the workers count in
slots of a shared memory file the master creates (_SharedMetrics), so /metrics and
goloop.serve_metrics() give the whole server's counts.
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
import weakref
from typing import Any

logger = logging.getLogger("goloop.error")

# The options this module implements (uvicorn's names and defaults), merged into
# goloop._serve.SUPPORTED_OPTIONS; metrics and metrics_path are goloop's own.
OPTIONS: dict[str, Any] = {
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

# what the master does and its workers do not
_MASTER_ONLY = ("workers", "reload", "reload_dirs", "reload_includes", "reload_excludes", "reload_delay", "env_file",
                "timeout_worker_healthcheck")

RELOAD_INCLUDES = ["*.py"]
RELOAD_EXCLUDES = [".*", ".py[cod]", ".sw.*", "~*"]
_SKIP_DIRS = {"__pycache__", "node_modules"}


def _config_error(msg: str) -> Exception:
    from ._serve import ConfigError

    return ConfigError(msg)


def check_options(cfg: dict[str, Any]) -> None:
    """Validates this module's options in cfg (goloop._serve._check_options calls it)."""
    w = cfg.get("workers")
    if w is not None and (not isinstance(w, int) or isinstance(w, bool) or w < 1):
        raise _config_error("workers must be a positive integer")
    if cfg.get("metrics_path") is not None and not str(cfg["metrics_path"]).startswith("/"):
        raise _config_error("metrics_path must start with '/'")
    if float(cfg.get("reload_delay") or 0.25) <= 0:
        raise _config_error("reload_delay must be positive")
    t = cfg.get("timeout_worker_healthcheck")
    if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0):
        raise _config_error("timeout_worker_healthcheck must be a number of seconds (0: off)")


def wants_supervisor(options: dict[str, Any]) -> bool:
    return bool(options.get("reload")) or (options.get("workers") or 1) > 1


# ---------------------------------------------------------------- CLI

def add_arguments(p) -> None:
    """The CLI options of this module (goloop._serve._parser calls it)."""
    p.add_argument("--workers", type=int, default=None,
                   help="number of worker processes (a master without Go supervises them)")
    p.add_argument("--reload", action="store_true", default=False,
                   help="restart the workers when a watched file changes (polling)")
    p.add_argument("--reload-dir", dest="reload_dirs", action="append", default=None)
    p.add_argument("--reload-include", dest="reload_includes", action="append", default=None)
    p.add_argument("--reload-exclude", dest="reload_excludes", action="append", default=None)
    p.add_argument("--reload-delay", type=float, default=0.25)
    p.add_argument("--proxy-headers", dest="proxy_headers", action="store_true", default=True)
    p.add_argument("--no-proxy-headers", dest="proxy_headers", action="store_false")
    p.add_argument("--forwarded-allow-ips", default=None)
    p.add_argument("--env-file", default=None)
    p.add_argument("--log-config", default=None)
    p.add_argument("--use-colors", dest="use_colors", action="store_true", default=None)
    p.add_argument("--no-use-colors", dest="use_colors", action="store_false")
    p.add_argument("--metrics", action="store_true", default=False,
                   help="count requests and their latency (goloop.serve_metrics())")
    p.add_argument("--metrics-path", default=None,
                   help="serve the metrics in Prometheus' text format at this path (answered by Go)")
    p.add_argument("--timeout-worker-healthcheck", type=float, default=5,
                   help="a worker whose loop does not answer the master's ping within this many seconds "
                        "is killed and restarted (0: off)")
    p.add_argument("--sched-batch", dest="sched_batch", action="store_true", default=True,
                   help="run the serving process's threads under SCHED_BATCH (default): the loop "
                        "thread and Go's threads do not preempt each other on every wake-up")
    p.add_argument("--no-sched-batch", dest="sched_batch", action="store_false")


# ---------------------------------------------------------------- env file, log config

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
            raise _config_error("a YAML --log-config needs PyYAML (pip install pyyaml)") from None
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


# ---------------------------------------------------------------- server hooks (in a worker)

_servers: "weakref.WeakSet" = weakref.WeakSet()
_shared_metrics: list[int] | None = None  # a worker's [fd, slot] of the master's metrics file


def forwarded_allow_ips(cfg: dict[str, Any]) -> str:
    v = cfg.get("forwarded_allow_ips")
    if v is None:
        v = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")
    if isinstance(v, (list, tuple)):
        v = ",".join(v)
    return str(v)


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
        if _shared_metrics is not None:
            kw["metrics_fd"], kw["metrics_slot"] = _shared_metrics
    if kw:
        srv.configure(**kw)
    _servers.add(server)


def serve_metrics() -> dict | None:
    """The metrics of this process' running goloop serve server (None if none runs):
    requests, in_flight, connections and, with metrics on (--metrics or --metrics-path),
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
               "enabled": m["Enabled"]}
        if m["Enabled"]:
            bounds = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, float("inf")]
            out["responses"] = {f"{i}xx": m["Status"][i] for i in range(1, 6)}
            out["latency"] = {"count": m["Count"], "sum": m["Sum"],
                              "buckets": list(zip(bounds, m["Buckets"]))}
        return out
    return None


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


def worker_main(argv: list[str] | None = None) -> None:
    """Entry of a worker process: argv[0] is the JSON of its configuration."""
    spec = json.loads((argv or sys.argv[1:])[0])
    global _shared_metrics
    master, ctl_fd, app = spec.pop("_master"), spec.pop("_ctl_fd"), spec.pop("_app")
    _shared_metrics = spec.pop("_metrics", None)
    _set_pdeathsig()
    if os.getppid() != master:  # the master died before prctl
        sys.exit(0)
    from . import _serve, run

    server = _serve.Server(app, **spec)
    if server.config.get("log_config"):
        load_log_config(server.config["log_config"])
    batch_scheduling(server.config)
    _serve._configure_logging(server.config["log_level"] or "info")
    logger.info("Started server process [%d]", os.getpid())

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
    logger.info("Finished server process [%d]", os.getpid())
    sys.exit(server.exit_code)


# ---------------------------------------------------------------- the master

def bind_sockets(cfg: dict[str, Any], reuse_port: bool = True) -> list[socket.socket]:
    """The listening sockets of cfg's --fd, --uds or --host/--port: the master's (TCP with
    SO_REUSEPORT, which its workers share) and a single process's (reuse_port=False)."""
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
    except OSError:
        sock.close()
        raise
    sock.listen(cfg["backlog"])
    return [sock]


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
    answers (goloop/asgi/metrics.go has the layout). A memfd the workers inherit; a slot
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
    def __init__(self, proc: subprocess.Popen, ctl: socket.socket):
        self.proc = proc
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
        self.sockets: list[socket.socket] = []
        self.sel = selectors.DefaultSelector()
        self.watcher: _Watcher | None = None
        self.metrics: _SharedMetrics | None = None  # --metrics: the workers count in it

    # -- workers
    def _spawn(self) -> _Worker:
        ctl, child = socket.socketpair()
        ctl.setblocking(False)
        w = child.fileno()
        spec = {k: v for k, v in self.cfg.items() if k not in _MASTER_ONLY}
        spec.update(fd=self.sockets[0].fileno(), uds=None, _ctl_fd=w, _app=self.app, _master=os.getpid())
        if spec.get("forwarded_allow_ips") is None:
            spec["forwarded_allow_ips"] = forwarded_allow_ips(self.cfg)
        fds = [s.fileno() for s in self.sockets] + [w]
        slot = self.metrics.take() if self.metrics is not None else None
        if slot is not None:
            spec["_metrics"] = [self.metrics.fd, slot]
            fds.append(self.metrics.fd)
        cmd = [sys.executable, "-c", "from goloop._supervisor import worker_main; worker_main()",
               json.dumps(spec)]
        try:
            proc = subprocess.Popen(cmd, pass_fds=fds)
        except BaseException:
            ctl.close()
            if slot is not None:
                self.metrics.release(slot)
            raise
        finally:
            child.close()
        wk = _Worker(proc, ctl)
        wk.slot = slot
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
        logger.debug("Worker [%d] is serving", wk.pid)
        if wk in self.candidates:
            old = wk.replaces
            self.candidates.remove(wk)
            wk.replaces = None
            if old is not None and old in self.active:
                self.active[self.active.index(old)] = wk
                self._retire(old)
            else:
                self.active.append(wk)
            if not self.candidates:
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
            new = self._spawn()
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
                if len(self.active) > self.n:
                    self._retire(self.active[-1])

    def _balance(self) -> None:
        if self.stopping:
            return
        now = time.monotonic()
        if len(self.active) < self.n and now >= self.next_spawn:
            while len(self.active) < self.n:
                self.active.append(self._spawn())
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

    # -- the loop
    def run(self) -> int:
        cfg = self.cfg
        self.sockets = bind_sockets(cfg)
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
            next_watch = time.monotonic() + delay
            while True:
                self._balance()
                if self.stopping and not self._all():
                    break
                timeout = max(0.0, min(0.5, self._healthcheck() - time.monotonic()))
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
            for s in self.sockets:
                s.close()
            if self.metrics is not None:
                self.metrics.close()
            if cfg.get("uds") and os.path.exists(cfg["uds"]):
                os.remove(cfg["uds"])
        logger.info("Stopping parent process [%d]", os.getpid())
        return 0

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
    from ._serve import _check_options, _configure_logging

    cfg = _check_options(options)
    if not isinstance(app, str):
        raise _config_error("You must pass the application as an import string ('module:attribute') "
                            "to enable 'reload' or 'workers'.")
    prepare(cfg)
    _configure_logging(cfg["log_level"] or "info")
    if cfg.get("app_dir"):
        cfg["app_dir"] = os.path.abspath(cfg["app_dir"])
    return Supervisor(app, cfg).run()
