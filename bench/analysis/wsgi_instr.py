#!/usr/bin/env python3
"""Instructions and system calls per request of WSGI servers (goloop serve --interface wsgi,
bjoern, Granian, ...) on bench/wsgi_bench.py's rows: a verdict that the machine's load does not
move, where CPU-time tables (bench/wsgi_bench.py) spread by 1.5x between rounds.

    python3 bench/analysis/wsgi_instr.py [--rows raw,flask,flask_db,django]
                                         [--servers "goloop serve,bjoern,granian"]
                                         [--n 3000] [--conns 1,10] [--no-syscalls]
                                         [--annotate 30] [--keep DIR]

Each server runs under `valgrind --tool=callgrind --trace-children=yes` (user-space
instructions of every thread of every process of its tree, the application's Python
included); after a warm-up the counters of each process are zeroed (callgrind_control -z),
n GET requests are made, one at a time per connection on `conns` keep-alive connections
(wrk's pattern: each response read before the next request) and the counters dumped
(callgrind_control -d): the sum over the tree / n is the count per request. Then the server
runs again without valgrind; after the same warm-up `strace -f -c` attaches to every process
of its tree for the n requests: the system calls per request (the kernel's work, which
callgrind does not count), the three most frequent named. Go's sysmon thread is shown apart
(its inclusive count): it runs by the clock (naps of 20 µs to 10 ms), not per request, so
valgrind's slowdown multiplies its share of a request (~1,000 instructions of a raw hello at
-c1, where the pool's leader blocks in epoll_wait on every request). Beside it the calls per request of
the crossings that cost: the GIL taken (take_gil) and cgo's crossings Go -> C
(runtime.cgocall) and C -> Go (runtime.cgocallbackg), counted by callgrind.

"app alone" is the row's application called in-process under callgrind the same n times by
bench/wsgi_bench.py's app_caller (a copy of a prepared environ, a BytesIO body, the iterable
consumed and closed), minus a run of 0 calls: the server's own instructions are the
row minus it.

Go's async preemption is off (GODEBUG=asyncpreemptoff=1): callgrind asserts on its SIGURG.
goloop serve's wall-clock periods are stretched 50x under valgrind and strace
(GOLOOP_TIME_SCALE=50), which slow the server down ~50x: the leader/follower pool's timer
(1 ms without progress wakes an idle thread) would fire on every request there, where it
almost never does at full speed; the same for the loop's periods (binding/loop.go scaleTimes).
Every process gets PYTHONHASHSEED=0 (--hash-seed): with random seeds, where str hashes put
the type attribute cache's entries (its misses) moved a Flask row by ~1,300 instructions
between two runs of one build. Every wait has a deadline (start-up, each response, callgrind_control, the exit): a server
that stalls is a failed cell, never a hang. --annotate N prints, per server, the N functions
with the most instructions per request (exclusive; --inclusive for inclusive counts, which
Go's stack switches make unreliable across cgo calls). Needs valgrind and strace.
"""
import argparse
import glob
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
REPO = os.path.dirname(BENCH)
APPS = os.path.join(BENCH, "servers")
sys.path.insert(0, BENCH)
from harness import free_port, wait_port  # noqa: E402
from wsgi_bench import ROWS, server_argv  # noqa: E402

PY = sys.executable
WARMUP = 300
STEP_TIMEOUT = 120  # seconds any one response, start-up step or control command may take (valgrind is slow)

# goloop's wall-clock periods (the leader/follower pool wakes an idle thread when the busy
# ones make no progress for 1 ms, wsgi.go's wakeDelay; the loop's poll and yield periods):
# valgrind runs the server ~50x slower (and strace its system calls), so they are scaled to
# keep the wake-ups per request what they are at full speed (binding/loop.go scaleTimes)
TIME_SCALE = "50"

# crossings counted (callgrind's calls to these functions), per request
CROSSINGS = {"GIL taken": ("take_gil",), "Go->C": ("runtime.cgocall",), "C->Go": ("runtime.cgocallbackg",)}


class Stalled(RuntimeError):
    pass


def drive(port, n, conns, path):
    """n GET requests over conns keep-alive connections, one outstanding per connection; raises
    Stalled if no response comes for STEP_TIMEOUT seconds."""
    req = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    sel = selectors.DefaultSelector()
    socks = [socket.create_connection(("127.0.0.1", port), timeout=STEP_TIMEOUT) for _ in range(min(conns, n))]
    sent = done = 0
    try:
        for s in socks:
            s.sendall(req)
            sent += 1
            sel.register(s, selectors.EVENT_READ, bytearray())
        while done < n:
            ready = sel.select(timeout=STEP_TIMEOUT)
            if not ready:
                raise Stalled(f"no response for {STEP_TIMEOUT} s after {done} of {n}")
            for key, _ in ready:
                s, buf = key.fileobj, key.data
                chunk = s.recv(65536)
                if not chunk:
                    raise RuntimeError("server closed a connection")
                buf += chunk
                if not _complete(buf):
                    continue
                if bytes(buf[:12]) != b"HTTP/1.1 200":
                    raise RuntimeError("not a 200: " + bytes(buf[:300]).decode("latin-1"))
                del buf[:]
                done += 1
                if sent < n:
                    s.sendall(req)
                    sent += 1
    finally:
        sel.close()
        for s in socks:
            s.close()


def _complete(buf):
    """One whole response in buf (content-length or chunked)."""
    head = buf.find(b"\r\n\r\n")
    if head < 0:
        return False
    h = bytes(buf[:head])
    m = re.search(rb"(?im)^content-length:\s*(\d+)", h)
    if m is not None:
        return len(buf) >= head + 4 + int(m.group(1))
    if re.search(rb"(?im)^transfer-encoding:\s*chunked", h):
        return buf.endswith(b"\r\n0\r\n\r\n") or bytes(buf[head + 4:]) .startswith(b"0\r\n\r\n")
    raise RuntimeError("a response without content-length or chunked framing: " + h.decode("latin-1"))


def tree(pid):
    """pid and its descendants (from /proc)."""
    kids = {}
    for st in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(st) as f:
                txt = f.read()
        except OSError:
            continue
        fields = txt[txt.rfind(")") + 2:].split()
        kids.setdefault(int(fields[1]), []).append(int(txt.split(None, 1)[0]))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def stop(proc, pids=None):
    """Ends proc and its tree (the given pids, else the tree now): TERM, then KILL."""
    pids = pids or tree(proc.pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in reversed(pids):
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=15)
            return
        except subprocess.TimeoutExpired:
            pass


def start(argv, port, path, conns, env):
    """The server started and warmed up: its Popen (with .errf, its stderr)."""
    errf = tempfile.TemporaryFile()
    proc = subprocess.Popen(argv, env=env, cwd=APPS, stdout=subprocess.DEVNULL, stderr=errf, start_new_session=True)
    proc.errf = errf
    try:
        wait_port(port, proc, timeout=300)  # valgrind starts slowly
        drive(port, WARMUP, conns, path)
        return proc
    except Exception as exc:
        stop(proc)
        errf.seek(0)
        raise RuntimeError(f"{exc}: {errf.read()[-1500:].decode(errors='replace')}") from None


def control(opt, pid):
    """callgrind_control opt pid: True if that process is under callgrind and answered."""
    try:
        r = subprocess.run(["callgrind_control", opt, str(pid)], capture_output=True, timeout=STEP_TIMEOUT)
    except subprocess.TimeoutExpired:
        return False
    return r.returncode == 0 and b"Error" not in r.stdout + r.stderr


def dump_events(path):
    """{event: total} of a callgrind dump: Ir (instructions), and with --cache-sim=yes the
    cache simulation's reads and misses (I1mr, D1mr, ...)."""
    names = None
    with open(path) as f:
        for line in f:
            if line.startswith("events:"):
                names = line.split()[1:]
            elif line.startswith(("summary:", "totals:")) and names:
                # (callgrind leaves trailing zeros out)
                return dict(zip(names, (int(v) for v in line.split()[1:]), strict=False))
    return {}


def dump_total(path):
    """The instructions of a callgrind dump."""
    return dump_events(path).get("Ir", 0)


def instructions(name, target, path, n, conns, tmp, env):
    """(instructions per request over the server's tree, the dumps) or None: not installed."""
    port = free_port()
    argv = server_argv(name, target, port)
    if argv is None:
        return None
    for f in glob.glob(os.path.join(tmp, "cg.*")):
        os.unlink(f)
    out = os.path.join(tmp, "cg.%p")
    wrap = ["valgrind", "--tool=callgrind", "--trace-children=yes", f"--callgrind-out-file={out}"]
    env = dict(env, GODEBUG="asyncpreemptoff=1", GOLOOP_TIME_SCALE=TIME_SCALE)
    proc = start(wrap + argv, port, path, conns, env)
    try:
        pids = tree(proc.pid)
        watched = [p for p in pids if control("-z", p)]
        if not watched:
            raise RuntimeError(f"callgrind_control reached none of {pids}")
        drive(port, n, conns, path)
        for p in watched:
            if not control("-d", p):
                raise RuntimeError(f"callgrind_control -d {p} failed")
    finally:
        stop(proc)
    dumps = []
    for p in watched:  # the last dump of each process (cg.PID.N): the measured interval
        mine = glob.glob(os.path.join(tmp, f"cg.{p}.*"))
        mine = [f for f in mine if re.search(r"\.\d+$", f)]
        if mine:
            dumps.append(max(mine, key=lambda f: int(f.rsplit(".", 1)[1])))
    if not dumps:
        raise RuntimeError("no callgrind dump")
    return sum(dump_total(d) for d in dumps) / n, dumps


def call_counts(dump, names):
    """How many calls the dump records to each function whose name starts with one of names."""
    fn_names = {}
    counts = dict.fromkeys(names, 0)
    target = None
    with open(dump) as f:
        for line in f:
            if line.startswith("cfn="):
                m = re.match(r"cfn=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
                if m is None:
                    target = line[4:].strip()
                else:
                    if m.group(2):
                        fn_names[m.group(1)] = m.group(2)
                    target = fn_names.get(m.group(1), "")
            elif line.startswith("fn="):
                m = re.match(r"fn=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
                if m and m.group(2):
                    fn_names[m.group(1)] = m.group(2)
            elif line.startswith("calls=") and target is not None:
                for nm in names:
                    if target == nm or target.startswith(nm + "'"):
                        counts[nm] += int(line[6:].split()[0])
                target = None
    return counts


def per_function(dump, incl):
    """function -> its instructions, inclusive or its own (callgrind_annotate)."""
    txt = subprocess.run(["callgrind_annotate", f"--inclusive={'yes' if incl else 'no'}", "--threshold=100", dump],
                         capture_output=True, text=True, timeout=600).stdout
    res = {}
    for line in txt.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*)$", line)
        if m and ":" in m.group(2):
            k = m.group(2).strip()
            res[k] = res.get(k, 0) + int(m.group(1).replace(",", ""))
    return res


def keep_and_annotate(dumps, args, tag, label):
    """The dumps copied into args.keep (named tag-<dump>), and with args.annotate the
    functions with the most instructions per request over them (args.n requests) printed."""
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        for d in dumps:
            with open(d, "rb") as src, open(os.path.join(args.keep, f"{tag}-{os.path.basename(d)}"), "wb") as dst:
                dst.write(src.read())
    if args.annotate:
        agg = {}
        for d in dumps:
            for k, v in per_function(d, args.inclusive).items():
                agg[k] = agg.get(k, 0) + v
        print(f"# {label}: top functions, instructions per request", file=sys.stderr)
        for k, v in sorted(agg.items(), key=lambda kv: -kv[1])[:args.annotate]:
            print(f"#   {v / args.n:10,.0f}  {k}", file=sys.stderr)


STRACE_ROW = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", re.M)


def syscalls(name, target, path, n, conns, tmp, env):
    """(system calls per request over the server's tree, {syscall: calls per request})."""
    port = free_port()
    env = dict(env, GOLOOP_TIME_SCALE=TIME_SCALE)
    proc = start(server_argv(name, target, port), port, path, conns, env)
    out = os.path.join(tmp, "strace.txt")
    try:
        pids = tree(proc.pid)
        argv = ["strace", "-f", "-c", "-o", out]
        for p in pids:
            argv += ["-p", str(p)]
        errf = tempfile.TemporaryFile()
        st = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=errf)
        try:
            deadline = time.monotonic() + STEP_TIMEOUT
            while True:  # attached to every process (its threads follow with -f)
                errf.seek(0)
                if errf.read().count(b"attached") >= len(pids) or time.monotonic() > deadline:
                    break
                if st.poll() is not None:
                    errf.seek(0)
                    raise RuntimeError("strace: " + errf.read()[-500:].decode(errors="replace"))
                time.sleep(0.05)
            time.sleep(0.2)
            drive(port, n, conns, path)
        finally:
            st.send_signal(signal.SIGINT)  # detaches and writes the summary
            try:
                st.wait(timeout=60)
            except subprocess.TimeoutExpired:
                st.kill()
                st.wait()
    finally:
        stop(proc)
    with open(out) as f:
        rows = STRACE_ROW.findall(f.read())
    calls = {nm: int(c) / n for c, nm in rows if nm != "total"}
    return sum(calls.values()), calls


APP_ALONE = r"""
import sys
sys.path.insert(0, sys.argv[1])
from wsgi_bench import app_caller
call = app_caller(sys.argv[2], sys.argv[3])
for _ in range(300):
    call()
for _ in range(int(sys.argv[4])):
    call()
"""


def app_alone(target, path, n, tmp, env):
    """Instructions of the app called n times minus 0 times, per call: its own cost per request."""
    res = []
    for k in (0, n):
        out = os.path.join(tmp, f"app{k}")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", PY, "-c", APP_ALONE, BENCH,
                        target, path, str(k)], check=True, capture_output=True, cwd=APPS, env=env, timeout=3600)
        res.append(dump_total(out))
        os.unlink(out)
    return (res[1] - res[0]) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="raw,flask,flask_db,django")
    ap.add_argument("--servers", default="goloop serve,bjoern")
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--conns", default="1,10", help="comma-separated: a column per server and value")
    ap.add_argument("--no-syscalls", action="store_true")
    ap.add_argument("--annotate", type=int, default=0, metavar="N")
    ap.add_argument("--inclusive", action="store_true")
    ap.add_argument("--keep", metavar="DIR", help="copy each callgrind dump here")
    ap.add_argument("--hash-seed", default="0", help="PYTHONHASHSEED of every process (default 0: str hashes "
                    "place the type attribute cache's and dicts' entries, which moved a Flask row by ~1,300 "
                    "instructions between two runs of one build with random seeds)")
    args = ap.parse_args()
    servers = args.servers.split(",")
    conns = [int(c) for c in args.conns.split(",")]
    cols = [(s, c) for s in servers for c in conns]
    print(f"n={args.n} requests per cell after {WARMUP} of warm-up; cells: instructions per request over the "
          "server's process tree (own: minus the app alone) [of which Go's sysmon thread, which runs by the clock, "
          "inflated by valgrind's slowdown] · system calls per request · GIL taken, Go->C, C->Go crossings per "
          "request", flush=True)
    print("\n| workload | app alone | " + " | ".join(f"{s} -c{c}" for s, c in cols) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in cols) + " |", flush=True)
    with tempfile.TemporaryDirectory(prefix="wsgi-instr-") as tmp:
        env = dict(os.environ, WSGI_BENCH_DB=os.path.join(tmp, "rows.db"), PYTHONHASHSEED=args.hash_seed,
                   PYTHONPATH=os.pathsep.join([APPS, os.path.join(REPO, "pyshim"), os.environ.get("PYTHONPATH", "")]))
        for row in args.rows.split(","):
            title, target, path = ROWS[row]
            try:
                alone = app_alone(target, path, args.n, tmp, env)
            except Exception as exc:  # noqa: BLE001
                print(f"# {row}: app alone failed: {exc}", file=sys.stderr, flush=True)
                alone = None
            cells = []
            for name, c in cols:
                try:
                    res = instructions(name, target, path, args.n, c, tmp, env)
                    if res is None:
                        cells.append("not installed")
                        continue
                    ins, dumps = res
                    cross = {}
                    for d in dumps:
                        for k, v in call_counts(d, [f for fs in CROSSINGS.values() for f in fs]).items():
                            cross[k] = cross.get(k, 0) + v
                    # Go's sysmon thread runs by the clock (20 µs to 10 ms naps), not per request:
                    # valgrind's ~50x slowdown multiplies its share of a request; shown apart
                    sysmon = 0
                    for d in dumps:
                        for k, v in per_function(d, True).items():
                            if k.split(" [")[0].endswith(":runtime.sysmon"):
                                sysmon += v
                    sysmon /= args.n
                    keep_and_annotate(dumps, args, f"{row}-{name.replace(' ', '_')}-c{c}", f"{row} / {name} -c{c}")
                    sc = None if args.no_syscalls else syscalls(name, target, path, args.n, c, tmp, env)
                except Exception as exc:  # noqa: BLE001 (a failed cell is reported, not fatal)
                    print(f"# {row} / {name} -c{c}: failed: {exc}", file=sys.stderr, flush=True)
                    cells.append("failed")
                    continue
                crossing = ", ".join(f"{k} {sum(cross[f] for f in fs) / args.n:.1f}" for k, fs in CROSSINGS.items())
                top = ""
                if sc is not None:
                    top = ", ".join(f"{k} {v:.2f}" for k, v in sorted(sc[1].items(), key=lambda kv: -kv[1])[:3])
                print(f"# {row} / {name} -c{c}: {ins:,.0f} instructions per request (Go's sysmon {sysmon:,.0f}); "
                      f"syscalls {'-' if sc is None else f'{sc[0]:.2f} ({top})'}; {crossing}", file=sys.stderr,
                      flush=True)
                own = f" (own {ins - alone:,.0f})" if alone is not None else ""
                cells.append(f"{ins:,.0f}{own}" + (f" [sysmon {sysmon:,.0f}]" if sysmon else "")
                             + ("" if sc is None else f" · {sc[0]:.2f}") + f" · {crossing}")
            print(f"| {title} | {'-' if alone is None else f'{alone:,.0f}'} | " + " | ".join(cells) + " |",
                  flush=True)


if __name__ == "__main__":
    main()
