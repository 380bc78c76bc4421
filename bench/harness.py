"""The benchmark harness: what the benchmark scripts share (bench/*.py drive the
benchmarks, bench/servers/ are the servers under test, bench/analysis/ the tools that read
the results or count instructions; each puts bench/ on sys.path and imports this module).

Loops by name:

``new_loop(name)`` returns a fresh event loop for ``asyncio``, ``uvloop``, ``rloop`` (a speed
anchor), ``rsloop``, ``zuvloop`` (where they install) or ``goloop``. goloop is imported lazily;
when it is not importable from the current environment we also try the in-tree ``pyshim`` folder. Any failure is
raised as ``LoopUnavailable`` so that callers can report it cleanly.

Processes and load: free_port, wait_port, proc_cpu_seconds, tree_cpu, taskset, parse_wrk
(wrk's output), make_certs (a CA and a server certificate), human (a rate for tables),
serve_until_interrupted and stop (a server under test's start and end).
"""

import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import time

LOOPS = ("asyncio", "uvloop", "rloop", "rsloop", "zuvloop", "goloop")

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = _REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class LoopUnavailable(RuntimeError):
    pass


def import_goloop():
    try:
        import goloop  # noqa: F401
        if hasattr(goloop, "new_event_loop"):
            return goloop
    except ImportError:
        pass
    shim = os.path.join(_REPO, "pyshim")
    if os.path.isdir(shim) and shim not in sys.path:
        sys.path.insert(0, shim)
        sys.modules.pop("goloop", None)
        import goloop  # noqa: F811
        return goloop
    import goloop  # noqa: F811
    return goloop


def new_loop(name):
    try:
        if name == "asyncio":
            asyncio.set_event_loop_policy(None)
            return asyncio.new_event_loop()
        if name == "uvloop":
            import uvloop
            return uvloop.new_event_loop()
        if name == "rloop":
            import rloop  # a Rust asyncio loop (Granian's author); a speed anchor only
            return rloop.new_event_loop()
        if name in ("rsloop", "zuvloop"):  # Rust (I/O on its own thread); Zig on libuv
            import importlib
            return importlib.import_module(name).new_event_loop()
        if name == "goloop":
            goloop = import_goloop()
            return goloop.new_event_loop()
    except Exception as exc:  # report anything, never crash the harness
        raise LoopUnavailable(f"{name}: {type(exc).__name__}: {exc}") from exc
    raise LoopUnavailable(f"unknown loop {name!r}")


def http_parser_module(name):
    """The httptools-compatible module: ``httptools`` or ``goloop.http``."""
    try:
        if name == "httptools":
            import httptools
            return httptools
        if name == "goloop":
            import_goloop()
            from goloop import http
            return http
    except Exception as exc:
        raise LoopUnavailable(f"parser {name}: {type(exc).__name__}: {exc}") from exc
    raise LoopUnavailable(f"unknown parser {name!r}")


def parse_addr(addr):
    host, _, port = addr.rpartition(":")
    return (host or "127.0.0.1"), int(port)


def die(msg, code=3):
    print(f"error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def human(x):
    if x is None:
        return "n/a"
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.0f}"


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=30):
    """Waits until 127.0.0.1:port accepts; proc (with its stderr file as proc.errf) must not exit."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            proc.errf.seek(0)
            raise RuntimeError(f"server exited with {proc.returncode}: {proc.errf.read().decode()[-400:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server not ready")


def proc_cpu_seconds(pid):
    """utime + stime of a process (all its threads), in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def proc_cpu_split(pid):
    """(utime, stime) of a process (all its threads), in seconds; None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tck = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tck, int(fields[12]) / tck
    except (OSError, IndexError, ValueError):
        return None


# What KernelCounters counts: software events and system-call tracepoints, which a virtual
# machine without hardware counters still has; each figure is divided by the requests.
KERNEL_EVENTS = {
    "context_switches": "context-switches",
    "syscalls": "raw_syscalls:sys_enter",
    "read": "syscalls:sys_enter_read",
    "write": "syscalls:sys_enter_write",
    "writev": "syscalls:sys_enter_writev",
    "epoll_wait": "syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_pwait",
    "epoll_ctl": "syscalls:sys_enter_epoll_ctl",
    "futex": "syscalls:sys_enter_futex",
    "recv": "syscalls:sys_enter_recvfrom",
    "send": "syscalls:sys_enter_sendto,syscalls:sys_enter_sendmsg",
    # wake-ups the process makes (of its peer, of its own threads): the tracepoints fire in
    # the waker; an inter-processor interrupt is a wake-up of a sleeping core (in a virtual
    # machine, an exit to the host each)
    "wakeups": "sched:sched_waking",
    "ipis": "ipi:ipi_send_cpu,ipi:ipi_send_cpumask",
    # memory given back to the kernel and faulted in again (a freed buffer trimmed from the
    # heap costs its pages' faults on the next allocation)
    "page_faults": "page-faults",
    "mem_calls": "syscalls:sys_enter_brk,syscalls:sys_enter_madvise,syscalls:sys_enter_mmap,syscalls:sys_enter_munmap",
}


def _known_event(ev):
    """Whether the kernel has tracepoint ev ("system:name"; other events pass): perf stat
    refuses the whole list for one it does not know (ipi:* came with Linux 6.4). Passes when
    tracefs cannot be read (perf then decides)."""
    system, sep, name = ev.partition(":")
    if not sep:
        return True
    for root in ("/sys/kernel/tracing/events", "/sys/kernel/debug/tracing/events"):
        if os.path.isdir(root):
            return os.path.isdir(os.path.join(root, system, name))
    return True


class KernelCounters:
    """`perf stat` on a process (all its threads) between start() and stop(): context
    switches and system calls (KERNEL_EVENTS). stop() returns {name: count}, or None when
    perf is missing or not allowed (perf_event_paranoid, no tracepoints)."""

    def __init__(self, pid):
        self.pid, self.proc, self.out = pid, None, None

    def start(self):
        if shutil.which("perf") is None:
            return self
        import tempfile
        fd, self.out = tempfile.mkstemp(prefix="bench-perf-", suffix=".txt")
        os.close(fd)
        events = ",".join(ev for evs in KERNEL_EVENTS.values() for ev in evs.split(",") if _known_event(ev))
        try:
            self.proc = subprocess.Popen(["perf", "stat", "-x,", "-e", events, "-o", self.out, "-p", str(self.pid)],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except OSError:
            self.proc = None
        return self

    def stop(self):
        if self.proc is None:
            return None
        import signal as _signal
        try:
            self.proc.send_signal(_signal.SIGINT)
            self.proc.wait(10)
            with open(self.out) as f:
                text = f.read()
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            return None
        finally:
            os.unlink(self.out)
        counts = {}
        for line in text.splitlines():
            parts = line.split(",")
            if len(parts) > 2 and parts[0].strip().isdigit():
                counts[parts[2]] = int(parts[0])
        if not counts:
            return None
        return {name: sum(counts.get(ev, 0) for ev in evs.split(",")) for name, evs in KERNEL_EVENTS.items()
                if any(ev in counts for ev in evs.split(","))}


def tree_pids(pid):
    """pid and its descendants (Granian's master and worker processes)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def tree_cpu(pid):
    """utime+stime of pid's whole process tree (every thread), in seconds."""
    return sum(proc_cpu_seconds(p) or 0.0 for p in tree_pids(pid))


# ---------- servers measured together: CPU cgroups of equal weight ----------

CG_ROOTS = ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup")  # cgroup v1's cpu controller, or v2's root


def cgroup_make(name):
    """A CPU cgroup `name` of the default weight (v1 cpu.shares 1024, v2 cpu.weight 100): every
    group gets the same share of core 0 whatever its number of threads. Its path, or SystemExit."""
    for root in CG_ROOTS:
        for knob, value in (("cpu.shares", "1024"), ("cpu.weight", "100")):
            if os.path.exists(os.path.join(root, knob)) or (knob == "cpu.weight" and os.path.exists(
                    os.path.join(root, "cgroup.subtree_control"))):
                path = os.path.join(root, name)
                try:
                    os.makedirs(path, exist_ok=True)
                    if os.path.exists(os.path.join(path, knob)):
                        with open(os.path.join(path, knob), "w") as f:
                            f.write(value)
                        return path
                except OSError:
                    continue
    raise SystemExit("measuring servers together needs a writable CPU cgroup (v1 /sys/fs/cgroup/cpu or v2 with the cpu "
                     "controller; run as root)")


def cgroup_add(path, pid):
    for p in tree_pids(pid):
        try:
            with open(os.path.join(path, "cgroup.procs"), "w") as f:
                f.write(str(p))
        except OSError:
            pass



def taskset(cpu):
    return ["taskset", "-c", cpu] if shutil.which("taskset") else []


_UNITS = {"us": 1.0, "ms": 1e3, "s": 1e6}


def parse_wrk(out):
    """wrk's output: {"value": requests/s, "n": requests, "p50_us", "p99_us" (with --latency),
    "errors": socket errors + non-2xx/3xx responses}, or None."""
    m = re.search(r"Requests/sec:\s*([\d.]+)", out)
    if not m:
        return None
    res = {"value": float(m.group(1))}
    nm = re.search(r"(\d+) requests in", out)
    if nm:
        res["n"] = int(nm.group(1))
    for q, key in (("50", "p50_us"), ("99", "p99_us")):
        lm = re.search(rf"^\s*{q}%\s+([\d.]+)(us|ms|s)\b", out, re.M)
        if lm:
            res[key] = float(lm.group(1)) * _UNITS[lm.group(2)]
    errs = 0
    sm = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if sm:
        errs += sum(int(x) for x in sm.groups())
    nm = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if nm:
        errs += int(nm.group(1))
    res["errors"] = errs
    return res


def wrk_post(n):
    """wrk Lua that makes every request a POST with a body of n bytes."""
    return f'wrk.method = "POST"\nwrk.body = string.rep("x", {n})\n'


def make_certs(d):
    """(ca.pem, server.pem, server.key) for 127.0.0.1 / localhost, in directory d."""
    ca, cert, key = (os.path.join(d, n) for n in ("ca.pem", "server.pem", "server.key"))
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        openssl = shutil.which("openssl")
        if not openssl:
            die("TLS benchmark needs the cryptography package or the openssl tool")
        sh = lambda *a: subprocess.run([openssl, *a], check=True, capture_output=True, cwd=d)  # noqa: E731
        cakey = os.path.join(d, "ca.key")
        sh("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
           "-keyout", cakey, "-out", ca, "-days", "2", "-subj", "/CN=bench CA",
           "-addext", "basicConstraints=critical,CA:TRUE")
        ext = os.path.join(d, "ext")
        with open(ext, "w") as f:
            f.write("basicConstraints=CA:FALSE\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n")
        sh("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
           "-keyout", key, "-out", cert + ".csr", "-subj", "/CN=localhost")
        sh("x509", "-req", "-in", cert + ".csr", "-CA", ca, "-CAkey", cakey,
           "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", ext)
        return ca, cert, key
    import datetime
    import ipaddress
    now = datetime.datetime.now(datetime.timezone.utc)
    name = lambda cn: x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])  # noqa: E731
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (x509.CertificateBuilder().subject_name(name("bench CA")).issuer_name(name("bench CA"))
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
               .sign(ca_key, hashes.SHA256()))
    skey = ec.generate_private_key(ec.SECP256R1())
    scert = (x509.CertificateBuilder().subject_name(name("localhost")).issuer_name(ca_cert.subject)
             .public_key(skey.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(hours=1))
             .not_valid_after(now + datetime.timedelta(days=2))
             .add_extension(x509.SubjectAlternativeName(
                 [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                 critical=False)
             .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    with open(ca, "wb") as f:
        f.write(ca_cert.public_bytes(pem))
    with open(cert, "wb") as f:
        f.write(scert.public_bytes(pem))
    with open(key, "wb") as f:
        f.write(skey.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))
    return ca, cert, key


def serve_until_interrupted(loop):
    """A server under test's last step: say "ready" (run.py's Server waits for it), then run
    loop until SIGINT (KeyboardInterrupt)."""
    print("ready", flush=True)
    try:
        loop.run_forever()
    except KeyboardInterrupt:
        pass


def stop(proc, timeout):
    """Stops a server under test: SIGINT, then after timeout s SIGKILL to its whole process
    tree (Granian's workers too)."""
    import signal

    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)


def kill_tree(proc):
    """SIGKILL to proc's whole process tree, then waits for proc."""
    import signal

    for p in reversed(tree_pids(proc.pid)):
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    proc.wait()


def callgrind_serve(argv, ready, env, client, label, start_timeout=120, timeout=600):
    """Runs `python3 -P argv...` under callgrind, a server that writes its port to the file
    `ready` once listening and exits by itself when served; calls client(port) meanwhile.
    Returns the instructions callgrind collected (bench/analysis/conn_cost.py, io_cost.py)."""
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", *argv[:1], sys.executable, "-P", *argv[1:]],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + start_timeout
    while not os.path.exists(ready):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"{label}: the server did not start: {proc.stderr.read()[-800:]}")
        time.sleep(0.05)
    with open(ready) as f:
        port = int(f.read())
    os.unlink(ready)
    client(port)
    _, err = proc.communicate(timeout=timeout)
    m = re.search(r"Collected : (\d+)", err)
    if proc.returncode != 0 or not m:
        raise SystemExit(f"{label}: callgrind failed ({proc.returncode}): {err[-800:]}")
    return int(m.group(1))
