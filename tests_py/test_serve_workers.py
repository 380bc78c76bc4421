"""goloop serve's process and operations side: --workers (a master without Go,
restarts, graceful SIGTERM, SIGHUP rolling reload, SIGTTIN/SIGTTOU), --reload, proxy
headers, the access log, metrics, --env-file.

The process tests run `python -m goloop serve` in a subprocess and talk to it over TCP."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from nethelpers import OutputLines
from test_serve_http import PYSHIM, get, read_response, serving

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")

APP = '''
import asyncio, os
import goloop

VERSION = "v1"

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            m = await receive()
            if m["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    path = scope["path"]
    if path == "/slow":  # in flight until the test releases it (a minute at most)
        open("slow-started", "w").close()
        for _ in range(6000):
            if os.path.exists("slow-release"):
                break
            await asyncio.sleep(0.01)
    if path == "/block":  # blocks the worker's loop (the health check must see it)
        open("blocked-%d" % os.getpid(), "w").close()
        import time
        time.sleep(60)
    if path == "/busy":  # busy for 3 s, its loop free between steps
        import time
        end = time.monotonic() + 3
        while time.monotonic() < end:
            t = time.monotonic() + 0.005
            while time.monotonic() < t:
                pass
            await asyncio.sleep(0)
    if path == "/env":
        body = os.environ.get("GOLOOP_TEST_VAR", "-")
    elif path == "/m":
        import json
        body = json.dumps(goloop.serve_metrics())
    else:
        body = "%s %d" % (VERSION, os.getpid())
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body.encode()})
'''


def children(pid):
    """The pids whose parent is pid."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        fields = st[st.rindex(")") + 2:].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(d))
    return sorted(out)


def identity(pid):
    """(pid, start time in clock ticks since boot): names one process, where a pid alone may
    come back as another one's once it exited. None when no such process exists."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
    except OSError:
        return None
    return pid, int(st[st.rindex(")") + 2:].split()[19])


def still_there(ids):
    """The processes of ids (from identity()) that still exist, zombies included (a zombie
    is a child nobody reaped)."""
    return [i for i in ids if identity(i[0]) == i]


def maps(pid):
    with open(f"/proc/{pid}/maps") as f:
        return f.read()


# A loaded 2-core machine (other test processes, CPU burners) was seen taking 20 s and more
# to start a worker: what the tests wait for, they wait for this long.
WAIT = 120


class Master:
    """`python -m goloop serve wapp:app --port 0 ...args` in tmp_path; its log lines are
    collected in a thread. The worker health check is 60 s unless args set it: a loaded
    machine can starve a worker's loop for the default 5 s, and a test not about the health
    check must not see its worker killed."""

    def __init__(self, tmp_path, *args, src=APP):
        (tmp_path / "wapp.py").write_text(src)
        if "--timeout-worker-healthcheck" not in args:
            args += ("--timeout-worker-healthcheck", "60")
        env = dict(os.environ, PYTHONPATH=PYSHIM)
        env.pop("GOLOOP_TEST_VAR", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "goloop", "serve", "wapp:app", "--port", "0", "--app-dir", str(tmp_path),
             *args], cwd=str(tmp_path), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.out = OutputLines(self.proc.stderr)
        self.count, self.log = self.out.count, self.out.log
        m = self.wait_for(r"running on http://127\.0\.0\.1:(\d+)")
        self.port = int(m[0].group(1))

    def wait_for(self, pattern, count=1, timeout=WAIT):
        return self.out.wait_for(pattern, count, timeout)

    def get(self, path="/", timeout=WAIT):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read().decode()
        finally:
            c.close()

    def workers(self):
        return children(self.proc.pid)

    def wait_workers(self, n, timeout=WAIT):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            w = self.workers()
            if len(w) == n:
                return w
            time.sleep(0.05)
        raise AssertionError(f"{len(self.workers())} workers, not {n}:\n{self.log()}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                for pid in self.workers():
                    os.kill(pid, signal.SIGKILL)
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def master_factory(tmp_path):
    made = []

    def make(*args, src=APP):
        m = Master(tmp_path, *args, src=src)
        made.append(m)
        return m

    yield make
    for m in made:
        m.stop()


def pids_seen(m, tries=300, want=2):
    seen = set()
    for _ in range(tries):
        st, body = m.get("/")
        assert st == 200
        seen.add(int(body.split()[1]))
        if len(seen) >= want:
            break
    return seen


def test_workers_serve_and_master_has_no_go(master_factory):
    m = master_factory("--workers", "2")
    m.wait_for("Application startup complete", count=2)
    workers = m.wait_workers(2)
    assert pids_seen(m) == set(workers)
    # The master never loaded the Go engine; each worker did.
    assert "_goloop" not in maps(m.proc.pid)
    for pid in workers:
        assert "_goloop" in maps(pid)
    assert m.stop() == 0
    assert m.count("Finished server process") == 2


def listening_inodes(pid, port):
    """The inodes of the TCP sockets listening on port that process pid holds."""
    listening = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                listening.add(int(fields[9]))
    held = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            held.add(int(link[8:-1]))
    return held & listening


def test_workers_have_listening_sockets_of_their_own(master_factory):
    """TCP: each worker accepts on a socket of its own (SO_REUSEPORT), so the kernel spreads
    new connections over the workers by flow hash, whichever worker is awake: 60 connections
    from distinct source ports all reach one worker of two with probability 2 * 2**-60."""
    m = master_factory("--workers", "2")
    m.wait_for("Application startup complete", count=2)
    workers = m.wait_workers(2)
    socks = [listening_inodes(pid, m.port) for pid in workers]
    assert all(len(s) == 1 for s in socks) and socks[0] != socks[1], socks
    assert socks[0] | socks[1] == listening_inodes(m.proc.pid, m.port)  # the master keeps both
    assert pids_seen(m, tries=60) == set(workers)


@pytest.mark.parametrize("kind", ["uds", "fd"])
def test_workers_share_a_unix_or_inherited_socket(tmp_path, kind):
    """--uds and --fd (a socket the caller made, its options its own): no SO_REUSEPORT
    sockets of the workers' own; both workers accept on the one socket, and serve."""
    (tmp_path / "wapp.py").write_text(APP)
    env = dict(os.environ, PYTHONPATH=PYSHIM)
    args = [sys.executable, "-P", "-m", "goloop", "serve", "wapp:app", "--workers", "2", "--app-dir", str(tmp_path),
            "--timeout-worker-healthcheck", "60"]
    path = str(tmp_path / "w.sock")
    listener = socket.socket(socket.AF_UNIX if kind == "uds" else socket.AF_INET)
    if kind == "uds":
        args += ["--uds", path]
    else:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        args += ["--fd", str(listener.fileno())]
    p = subprocess.Popen(args, cwd=str(tmp_path), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True, pass_fds=[listener.fileno()] if kind == "fd" else [])
    out = OutputLines(p.stderr)
    try:
        out.wait_for("Application startup complete", count=2, timeout=WAIT)
        workers = children(p.pid)
        assert len(workers) == 2
        for _ in range(5):
            if kind == "uds":
                c = socket.socket(socket.AF_UNIX)
                c.connect(path)
            else:
                c = socket.create_connection(listener.getsockname())
            c.settimeout(WAIT)
            c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            st, _, body = read_response(c.makefile("rb"))
            c.close()
            assert st == 200 and int(body.split()[1]) in workers, body
        if kind == "fd":
            shared = os.fstat(listener.fileno()).st_ino
        else:  # /proc/net/unix: the inode of the socket listening (flags __SO_ACCEPTCON) on path
            with open("/proc/net/unix") as f:
                rows = [r.split() for r in f.read().splitlines()[1:]]
            [shared] = [int(r[6]) for r in rows if r[-1] == path and r[3] == "00010000"]
        for pid in workers:  # every worker holds the one listening socket
            links = set()
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    links.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
                except FileNotFoundError:  # closed since the listing (a connection ending)
                    pass
            assert f"socket:[{shared}]" in links, (kind, links)
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(WAIT) == 0, out.log()
        listener.close()


def test_killed_worker_is_replaced(master_factory):
    """A killed worker's socket stays open in the master: the connections the kernel queues
    on it meanwhile wait for the replacement, which serves them (30 connections miss that
    socket with probability 2**-30); none is refused or reset."""
    m = master_factory("--workers", "2")
    m.wait_for(r"goloop serve running on http://\S+ \(Press", count=2)  # both serving
    workers = m.wait_workers(2)
    os.kill(workers[0], signal.SIGKILL)
    m.wait_for(r"Worker \[%d\] exited with code -9; restarting it" % workers[0])
    conns = []
    for _ in range(30):  # connected (queued by the kernel) before the replacement listens
        c = http.client.HTTPConnection("127.0.0.1", m.port, timeout=60)
        c.request("GET", "/")
        conns.append(c)
    pids = set()
    for c in conns:
        r = c.getresponse()
        assert r.status == 200
        pids.add(int(r.read().decode().split()[1]))
        c.close()
    now = m.wait_workers(2)
    assert workers[0] not in now and workers[1] in now
    assert pids == set(now), m.log()


CRASH_APP = "raise RuntimeError('the app does not import')\n"


def test_crashing_app_backs_off(master_factory):
    """A worker that dies at once is restarted after a growing delay, not in a spin."""
    m = master_factory("--workers", "1", "--reload", "--reload-dir", "/nonexistent", src=CRASH_APP)
    exited = r"Worker \[\d+\] exited with code \S+; restarting it in (\d+\.\d) s"
    m.wait_for(exited, count=2)  # the first start may be slow on a loaded machine
    t0 = time.monotonic()
    found = m.wait_for(exited, count=3)
    # the delay doubles with each death; the 3rd came no sooner than the 2nd's 0.2 s (less
    # the time this thread took to see the 2nd's line): a spin makes dozens in that time
    assert [float(f.group(1)) for f in found[:3]] == [0.1, 0.2, 0.4], m.log()
    assert time.monotonic() - t0 >= 0.15 and m.count(exited) <= 4, m.log()
    assert m.stop() == 0


def test_master_gives_up_when_no_worker_starts(master_factory):
    """--workers N, an app that does not import: each worker logs its one-line error and
    exits 1; none ever served, so the master does not restart them (forever, with backoff):
    it says so and exits 1."""
    m = master_factory("--workers", "2", src=CRASH_APP)
    assert m.proc.wait(WAIT) == 1, m.log()
    m.wait_for(r"No worker could start: giving up")
    assert m.count(r"Worker \[\d+\] exited with code 1 before it served") == 2, m.log()
    # each worker's error (the message, not its source line), counted in the whole output: the
    # two tracebacks reach the one stderr at once, in pieces smaller than a line
    errors = re.findall(r"the app does not import(?!')", m.log())
    assert m.count(r"restarting it") == 0 and len(errors) == 2, m.log()


def test_sigterm_graceful_with_request_in_flight(master_factory, tmp_path):
    m = master_factory("--workers", "2")
    m.wait_for("Application startup complete", count=2)
    workers = m.wait_workers(2)
    ids = [identity(pid) for pid in workers]
    assert None not in ids
    result = {}

    def slow():
        try:
            result["r"] = m.get("/slow")
        except Exception as exc:
            result["r"] = exc

    t = threading.Thread(target=slow)
    t.start()
    deadline = time.monotonic() + WAIT
    while not (tmp_path / "slow-started").exists():  # the request is in the app
        assert time.monotonic() < deadline and t.is_alive(), result
        time.sleep(0.01)
    m.proc.send_signal(signal.SIGTERM)
    m.wait_for(r"Shutting down$", count=2)  # both workers stopped accepting
    (tmp_path / "slow-release").touch()  # only now does the request in flight finish
    t.join(WAIT)
    assert result["r"][0] == 200, result
    assert m.proc.wait(WAIT) == 0
    # The master waits for its workers before it exits: none may outlive it, as a running
    # process or an unreaped zombie. (A leaked one is re-parented once the master is gone,
    # so it is looked up by its own pid and start time, not among the master's children.)
    assert still_there(ids) == [], m.log()
    assert m.count("Application shutdown complete") == 2


def test_sighup_rolling_reload_drops_nothing(master_factory):
    """Two clients loop on new connections through a SIGHUP reload: every request is
    answered (a new worker accepts on its predecessor's socket, which the master keeps
    open), and the requests started once the old workers are gone reach the new ones."""
    m = master_factory("--workers", "2", "--log-level", "debug")
    m.wait_for(r"Worker \[\d+\] is serving", count=2)
    old = set(m.wait_workers(2))
    errors, served, stop = [], [], threading.Event()  # served: (when it started, pid)

    def client():
        while not stop.is_set():
            t = time.monotonic()
            try:
                st, body = m.get("/")
                served.append((t, int(body.split()[1])))
                if st != 200:
                    errors.append(st)
            except Exception as exc:
                errors.append(repr(exc))

    def wait_served(n, since=0.0):
        deadline = time.monotonic() + WAIT
        while sum(1 for t, _ in served if t > since) < n:
            assert time.monotonic() < deadline and not errors, (errors, m.log())
            time.sleep(0.02)

    threads = [threading.Thread(target=client) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        wait_served(10)
        m.proc.send_signal(signal.SIGHUP)
        m.wait_for("Reload complete")
        new = set(m.wait_workers(2))  # the old workers exited
        after = time.monotonic()
        wait_served(20, since=after)
    finally:
        stop.set()
        for t in threads:
            t.join(WAIT)
    assert not errors, errors
    assert not (old & new)
    assert {pid for t, pid in served if t > after} <= new
    m.wait_for("Application shutdown complete", count=2)  # the old workers stopped gracefully
    assert m.count(r"Worker \[\d+\] exited") == 0


def test_reload_whose_old_worker_dies_keeps_the_worker_count(master_factory):
    """SIGHUP, then an old worker is killed before its replacement serves: the master
    restarts it on its slot, and the reload's new worker, once serving, takes that slot
    over (the restarted one is stopped): two workers, not three."""
    m = master_factory("--workers", "2", "--log-level", "debug")
    m.wait_for(r"Worker \[\d+\] is serving", count=2)
    old = m.wait_workers(2)
    m.proc.send_signal(signal.SIGHUP)
    m.wait_for("SIGHUP: reloading the workers")
    os.kill(old[0], signal.SIGKILL)
    m.wait_for("Reload complete")
    now = m.wait_workers(2)
    assert not set(now) & set(old)
    assert pids_seen(m) == set(now)


def test_healthcheck_restarts_a_worker_whose_loop_blocks(master_factory, tmp_path):
    """--timeout-worker-healthcheck: a worker whose loop is blocked (time.sleep in a handler)
    does not answer the master's ping; it is killed and restarted, the other one serves on."""
    m = master_factory("--workers", "2", "--timeout-worker-healthcheck", "1")
    m.wait_for("Application startup complete", count=2)
    workers = m.wait_workers(2)
    c = http.client.HTTPConnection("127.0.0.1", m.port, timeout=30)
    c.request("GET", "/block")
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob("blocked-*")):
        assert time.monotonic() < deadline, m.log()
        time.sleep(0.01)
    blocked = int(next(tmp_path.glob("blocked-*")).name.split("-")[1])
    t0 = time.monotonic()
    m.wait_for(r"Worker \[%d\] did not answer the health check within 1 s" % blocked)
    m.wait_for(r"Worker \[%d\] exited with code -9; restarting it$" % blocked)
    assert time.monotonic() - t0 < 20  # not the 60 s of the sleep
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        c.getresponse()  # the killed worker's connection ends without an answer
    c.close()
    m.wait_for("Application startup complete", count=3)
    now = m.wait_workers(2)
    assert blocked not in now and set(workers) - {blocked} <= set(now)
    assert pids_seen(m) == set(now)
    assert m.count("did not answer the health check") == 1


def test_healthcheck_spares_busy_workers(master_factory):
    """Workers busy for 3 s answering requests whose loop is free between steps are not
    killed with a 1 s health check timeout."""
    m = master_factory("--workers", "2", "--timeout-worker-healthcheck", "1")
    m.wait_for("Application startup complete", count=2)
    workers = m.wait_workers(2)
    results = []
    threads = [threading.Thread(target=lambda: results.append(m.get("/busy", timeout=30))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [st for st, _ in results] == [200] * 4, m.log()
    assert m.count("did not answer the health check") == 0
    assert m.workers() == workers


def test_metrics_summed_over_workers(master_factory, tmp_path):
    """--workers 2 --metrics-path: each worker counts in its slot of the master's shared
    file and /metrics (answered by whichever worker accepts it) is the sum; a killed and
    restarted worker takes its slot over, so the totals go on (the gauges of a killed one go
    to zero). The metrics requests, answered
    by Go, are not counted; goloop.serve_metrics() called by the app counts its own request."""
    m = master_factory("--workers", "2", "--metrics-path", "/metrics")
    m.wait_for("Application startup complete", count=2)
    workers = m.wait_workers(2)
    seen, sent = set(), 0
    while len(seen) < 2 or sent < 20:  # a new connection each: both workers answer some
        st, body = m.get("/")
        assert st == 200 and sent < 500
        seen.add(int(body.split()[1]))
        sent += 1
    assert seen == set(workers)

    def metric(name):
        st, body = m.get("/metrics")
        assert st == 200
        return int(re.search(r"^%s (\d+)$" % re.escape(name), body, re.M).group(1))

    for _ in range(6):  # whichever worker answers, the whole server's counts
        assert metric("goloop_requests_total") == sent
        assert metric('goloop_responses_total{status="2xx"}') == sent
        assert metric("goloop_request_duration_seconds_count") == sent
    # a request in flight, then both workers killed: their counts stay, their gauges go
    slow = threading.Thread(target=lambda: pytest.raises(Exception, m.get, "/slow"))
    slow.start()
    deadline = time.monotonic() + WAIT
    while not (tmp_path / "slow-started").exists():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    sent += 1
    assert metric("goloop_requests_in_flight") == 1
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    slow.join(WAIT)
    m.wait_for("Application startup complete", count=4)
    now = m.wait_workers(2)
    assert metric("goloop_requests_total") == sent  # the killed workers' counts stay
    assert metric("goloop_requests_in_flight") == 0
    seen = set()
    while len(seen) < 2 or sent < 40:
        st, body = m.get("/")
        seen.add(int(body.split()[1]))
        sent += 1
        assert sent < 600
    assert seen == set(now)
    assert metric("goloop_requests_total") == sent
    assert metric("goloop_requests_in_flight") == 0
    assert 1 <= metric("goloop_connections") <= 3  # the scrape's own (and closing ones)
    js = json.loads(m.get("/m")[1])
    # the killed /slow request was dispatched, never completed
    assert js["requests"] == sent + 1 and js["in_flight"] == 1 and js["latency"]["count"] == sent - 1


def test_sigttin_sigttou(master_factory):
    m = master_factory("--workers", "2")
    m.wait_workers(2)
    m.proc.send_signal(signal.SIGTTIN)
    m.wait_workers(3)
    m.proc.send_signal(signal.SIGTTOU)
    m.wait_workers(2)
    assert m.get("/")[0] == 200


def test_reload_on_file_change(master_factory, tmp_path):
    m = master_factory("--reload", "--reload-delay", "0.1")
    m.wait_for("Application startup complete")
    assert m.get("/")[1].startswith("v1 ")
    time.sleep(0.05)
    (tmp_path / "wapp.py").write_text(APP.replace('VERSION = "v1"', 'VERSION = "v2"'))
    m.wait_for("Changes detected in wapp.py")
    deadline = time.monotonic() + 30
    while m.get("/")[1].startswith("v1 "):
        assert time.monotonic() < deadline, m.log()
        time.sleep(0.05)
    m.wait_for("Finished server process")  # the old worker (it served during the swap)
    assert m.get("/")[1].startswith("v2 ")
    # a change to a file not included (*.py) does not reload (the rewrite above may have been
    # seen twice, truncated then written, if a scan fell between the two)
    seen = m.count("Changes detected")
    (tmp_path / "notes.txt").write_text("x")
    time.sleep(0.5)
    assert m.count("Changes detected") == seen


def test_env_file_and_access_log_format(master_factory, tmp_path):
    (tmp_path / "vars.env").write_text("# comment\nexport GOLOOP_TEST_VAR='from file'\n")
    m = master_factory("--env-file", str(tmp_path / "vars.env"))
    assert m.get("/env") == (200, "from file")
    assert m.get("/a%20b?x=1")[0] == 200
    lines = m.wait_for(r'INFO: +127\.0\.0\.1:\d+ - "GET /a%20b\?x=1 HTTP/1\.1" 200 OK$')
    assert lines
    assert m.workers() == []  # a single process: no master


def test_options_checked():
    from goloop.serve import server as _serve

    with pytest.raises(_serve.ConfigError, match="import string"):
        _serve.serve(lambda s, r, c: None, workers=2)
    with pytest.raises(_serve.ConfigError, match="workers must be"):
        _serve.Server("x:app", workers=0)
    with pytest.raises(_serve.ConfigError, match="metrics_path"):
        _serve.Server("x:app", metrics_path="metrics")
    _serve.Server("x:app", use_colors=True, proxy_headers=False, workers=1)


# ---------------------------------------------------------------- in-process servers

async def client_app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = json.dumps({"scheme": scope["scheme"], "client": scope["client"]}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


XFF = {"X-Forwarded-For": "203.0.113.7, 127.0.0.1", "X-Forwarded-Proto": "https"}


def test_proxy_headers_trusted():
    with serving(client_app) as server:  # uvicorn's defaults: on, 127.0.0.1 trusted
        st, _, body = get(server, "/", headers=XFF)
        assert json.loads(body) == {"scheme": "https", "client": ["203.0.113.7", 0]}
        st, _, body = get(server, "/")
        s = json.loads(body)
        assert s["scheme"] == "http" and s["client"][0] == "127.0.0.1" and s["client"][1] > 0
    with serving(client_app, forwarded_allow_ips="10.0.0.0/8, 127.0.0.1") as server:
        st, _, body = get(server, "/", headers={"X-Forwarded-For": "198.51.100.1, 10.1.1.1"})
        assert json.loads(body)["client"] == ["198.51.100.1", 0]


@pytest.mark.parametrize("opts", [{"forwarded_allow_ips": "10.0.0.1"}, {"proxy_headers": False}])
def test_proxy_headers_untrusted_or_off(opts):
    with serving(client_app, **opts) as server:
        st, _, body = get(server, "/", headers=XFF)
    s = json.loads(body)
    assert s["scheme"] == "http" and s["client"][0] == "127.0.0.1" and s["client"][1] > 0


def test_proxy_headers_unix_socket(tmp_path):
    path = str(tmp_path / "p.sock")
    for trust, want in (("*", ["203.0.113.7", 0]), ("127.0.0.1", None)):
        with serving(client_app, uds=path, forwarded_allow_ips=trust):
            s = socket.socket(socket.AF_UNIX)
            s.connect(path)
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 203.0.113.7\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
            s.close()
        assert json.loads(data.split(b"\r\n\r\n", 1)[1])["client"] == want


async def metrics_app(scope, receive, send):
    if scope["type"] != "http":
        return
    import goloop

    if scope["path"] == "/m":
        body, status = json.dumps(goloop.serve_metrics()).encode(), 200
    else:
        body, status = b"x", (404 if scope["path"] == "/missing" else 200)
    await send({"type": "http.response.start", "status": status, "headers": []})
    await send({"type": "http.response.body", "body": body})


def test_metrics_endpoint_and_serve_metrics():
    with serving(metrics_app, metrics_path="/metrics") as server:
        for p in ("/a", "/b", "/missing"):
            get(server, p)
        st, hdrs, body = get(server, "/metrics")
        assert st == 200 and hdrs["content-type"].startswith("text/plain")
        text = body.decode()
        assert "goloop_requests_total 3\n" in text  # the metrics request is not the app's
        assert 'goloop_responses_total{status="2xx"} 2\n' in text
        assert 'goloop_responses_total{status="4xx"} 1\n' in text
        assert 'goloop_request_duration_seconds_bucket{le="+Inf"} 3\n' in text
        assert "goloop_request_duration_seconds_count 3\n" in text
        st, _, body = get(server, "/m")
        m = json.loads(body)
        assert m["enabled"] and m["requests"] == 4 and m["in_flight"] == 1
        assert m["responses"]["2xx"] == 2 and m["responses"]["4xx"] == 1
        assert m["latency"]["count"] == 3 and m["latency"]["buckets"][-1][1] == 3
    with serving(metrics_app) as server:  # off: the path reaches the app; counts only
        assert get(server, "/metrics")[2] == b"x"
        m = json.loads(get(server, "/m")[2])
        assert m["enabled"] is False and m["requests"] == 2 and "latency" not in m


def test_serve_metrics_without_server():
    import goloop

    assert goloop.serve_metrics() is None


def test_failed_reload_keeps_old_workers(master_factory, tmp_path):
    """SIGHUP with code that does not import: the new worker dies, the old one serves on."""
    m = master_factory("--workers", "1", "--reload", "--reload-dir", str(tmp_path / "none"), "--log-level", "debug")
    m.wait_for(r"Worker \[\d+\] is serving")
    old = m.wait_workers(1)
    (tmp_path / "wapp.py").write_text(CRASH_APP)
    m.proc.send_signal(signal.SIGHUP)
    m.wait_for("Reload failed: the new worker")
    assert m.workers() == old
    st, body = m.get("/")
    assert st == 200 and body == "v1 %d" % old[0]


# ---------------------------------------------------------------- --sched-batch

def _policies(pid):
    """The scheduling policy of each thread of process pid."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out.append(os.sched_getscheduler(int(tid)))
        except OSError:  # ended meanwhile
            pass
    return out


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="no SCHED_BATCH")
@pytest.mark.parametrize("args,batch", [((), True), (("--no-sched-batch",), False)])
def test_sched_batch_covers_every_serving_thread(master_factory, args, batch):
    """goloop serve runs its threads, Go's included (made after it set the policy), under
    SCHED_BATCH unless --no-sched-batch; with --workers the master stays as it was."""
    m = master_factory(*args)
    assert m.get("/")[0] == 200
    pols = _policies(m.proc.pid)
    assert len(pols) > 2  # the loop's thread and Go's
    want = os.SCHED_BATCH if batch else os.SCHED_OTHER
    assert pols == [want] * len(pols), pols
    m2 = master_factory("--workers", "2", *args)
    workers = m2.wait_workers(2)
    m2.wait_for("Application startup complete", count=2)  # their loops (and Go's threads) exist
    assert m2.get("/")[0] == 200
    for w in workers:
        assert set(_policies(w)) == {want}
    assert set(_policies(m2.proc.pid)) == {os.SCHED_OTHER}  # the master serves nothing


class _Exited:
    """A worker process stand-in: poll() gives its exit code (None: running)."""

    def __init__(self, pid, code):
        self.pid, self.code = pid, code

    def poll(self):
        return self.code


def test_exit_after_a_sibling_said_ready_is_not_a_failed_boot(caplog):
    """A worker killed while its sibling's "ready" still waits unread on the master's control
    socket (both seen in one round) is replaced: the boot did not fail."""
    from goloop.serve import workers as w

    sup = w.Supervisor("app:app", {"workers": 2})
    pairs = [socket.socketpair() for _ in range(2)]
    for master_end, _ in pairs:
        master_end.setblocking(False)
    killed = w._Worker(_Exited(101, -9), pairs[0][0], 0)
    sibling = w._Worker(_Exited(102, None), pairs[1][0], 1)
    sup.active = [killed, sibling]
    pairs[1][1].sendall(b"r")  # the sibling serves; the master has not read it yet
    try:
        with caplog.at_level("WARNING"):
            sup._reap()
        assert sibling.ready and sup.served and not sup.boot_failed
        assert "exited with code -9; restarting it" in caplog.text
    finally:
        for a, b in pairs:
            a.close()
            b.close()
