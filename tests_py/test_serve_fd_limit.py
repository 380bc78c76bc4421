"""At the descriptor limit: an accept that fails with EMFILE is logged (one warning, nginx's
wording, rate-limited) and counted in the metrics, and accepting resumes by itself once
descriptors are free again; the loop's own create_server reports it to the exception
handler and pauses accepting as asyncio's loop does. Each case runs in a subprocess whose
RLIMIT_NOFILE it lowers."""
import os
import subprocess
import sys
import textwrap

import pytest

import goloop

PYSHIM = os.path.dirname(os.path.dirname(os.path.abspath(goloop.__file__)))

COMMON = r"""
import asyncio, logging, os, resource, socket, sys, time
import goloop

def fill_descriptors():
    # the soft limit a few above what is open, then /dev/null up to it: nothing left
    n = len(os.listdir("/proc/self/fd"))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (n + 16, hard))
    fillers = []
    try:
        while True:
            fillers.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        pass
    return fillers

async def wait_for(cond, what, limit=30):
    t = time.monotonic()
    while not cond():
        if time.monotonic() - t > limit:
            raise AssertionError("timed out waiting for " + what)
        await asyncio.sleep(0.02)
"""

SERVE = COMMON + r"""
from goloop.serve import server as _serve

records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append(record)
logging.getLogger("goloop.error").addHandler(Keep())

async def asgi_app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"served"})

def wsgi_app(environ, start_response):
    start_response("200 OK", [])
    return [b"served"]

async def main(interface):
    server = _serve.Server(asgi_app if interface == "asgi" else wsgi_app, interface=interface, port=0,
                           host="127.0.0.1", access_log=False, lifespan="off", metrics_path="/metrics")
    task = asyncio.ensure_future(server.serve())
    await wait_for(lambda: server.started or task.done(), "the server")
    port = server.sockets[0].getsockname()[1]
    fillers = fill_descriptors()
    os.close(fillers.pop())  # one for the client's socket: the server has none to accept it
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    await wait_for(lambda: any("accept4() failed" in r.getMessage() for r in records), "the warning")
    warnings = [r for r in records if "accept4() failed" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert warnings[0].levelno == logging.WARNING
    assert "(24: Too many open files)" in warnings[0].getMessage(), warnings[0].getMessage()
    for fd in fillers:
        os.close(fd)
    # accepting resumes by itself: the waiting connection is served
    head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 30)
    assert head.startswith(b"HTTP/1.1 200"), head
    assert await r.readexactly(6) == b"served"
    m = _serve.serve_metrics()
    assert m["accept_errors"] >= 1, m
    w.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    text = (await asyncio.wait_for(r.read(), 30)).decode()
    assert "goloop_accept_errors_total " in text, text
    n = int(text.split("\ngoloop_accept_errors_total ")[1].split()[0])
    assert n >= 1, text
    w.close()
    server.request_exit()
    await task
    print("ok", len(warnings), n)

goloop.run(main(sys.argv[1]))
"""

LOOP_SERVER = COMMON + r"""
async def main():
    loop = asyncio.get_running_loop()
    assert type(loop).__module__.startswith("goloop"), type(loop)
    contexts = []
    loop.set_exception_handler(lambda loop, ctx: contexts.append(ctx))

    async def echo(reader, writer):
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    fillers = fill_descriptors()
    os.close(fillers.pop())
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"ping\n")
    await wait_for(lambda: contexts, "the exception handler")
    assert contexts[0]["message"] == "socket.accept() out of system resource", contexts
    assert isinstance(contexts[0]["exception"], OSError) and contexts[0]["exception"].errno == 24
    for fd in fillers:
        os.close(fd)
    assert await asyncio.wait_for(r.readline(), 30) == b"ping\n"  # accepting resumed
    w.close()
    server.close()
    await server.wait_closed()
    print("ok", len(contexts))

goloop.run(main())
"""


def run(script, *args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PYSHIM, os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and p.stdout.startswith("ok"), p.stdout + p.stderr
    return p


@pytest.mark.parametrize("readers", ["loop", "goroutines"])
@pytest.mark.parametrize("interface", ["asgi", "wsgi"])
def test_serve_at_the_descriptor_limit(interface, readers, monkeypatch):
    monkeypatch.setenv("GOLOOP_SERVE_READERS", readers)
    if interface == "wsgi" and readers == "goroutines":
        monkeypatch.setenv("GOLOOP_WSGI_DRIVER", "goroutine")
    run(SERVE, interface)


def test_loop_create_server_at_the_descriptor_limit():
    run(LOOP_SERVER)
