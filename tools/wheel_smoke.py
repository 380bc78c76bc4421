"""The smoke test of an installed goloop wheel (tools/wheel_check.py runs it in a fresh venv of
each wheel's interpreter, on the build host or inside a Debian root). Standard library only, so
nothing but the wheel needs installing (under qemu, pip would take minutes):
  1. goloop is the venv's, and its engine is the one compiled for this interpreter;
  2. goloop.__version__ and `goloop --version` are VERSION (the wheel's file name's);
  3. an echo server and client on goloop's loop: one round trip;
  4. `goloop serve` of a small ASGI application on a socket it is handed (--fd): one GET.
Prints ENGINE <the engine's path>, then SMOKE-OK on success; exits non-zero with what failed
otherwise. tests_py/test_wheel.py runs it too.
    python -P tools/wheel_smoke.py VERSION
"""
import asyncio
import os
import socket
import subprocess
import sys
import sysconfig
import tempfile

APP = '''
async def app(scope, receive, send):
    assert scope["type"] == "http"
    body = b"hello from goloop serve " + scope["path"].encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
'''


def check_install(version):
    import goloop

    assert goloop.__file__.startswith(sys.prefix), f"goloop from {goloop.__file__}, not the venv {sys.prefix}"
    assert goloop.__version__ == version, (goloop.__version__, version)
    goloop_cmd = os.path.join(os.path.dirname(sys.executable), "goloop")
    out = subprocess.run([goloop_cmd, "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == f"goloop {version}", (out.returncode, out.stdout, out.stderr)
    return goloop


async def echo_round_trip():
    class Echo(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport

        def data_received(self, data):
            self.transport.write(data)

    loop = asyncio.get_running_loop()
    server = await loop.create_server(Echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    msg = b"echo through a wheel, pid %d" % os.getpid()
    writer.write(msg)
    await writer.drain()
    got = await asyncio.wait_for(reader.readexactly(len(msg)), 60)
    writer.close()
    await writer.wait_closed()
    server.close()
    await server.wait_closed()
    assert got == msg, (got, msg)
    return type(loop).__name__


def serve_one_request(workdir):
    with open(os.path.join(workdir, "smoke_app.py"), "w") as f:
        f.write(APP)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    goloop_cmd = os.path.join(os.path.dirname(sys.executable), "goloop")
    proc = subprocess.Popen([goloop_cmd, "serve", "smoke_app:app", "--fd", str(listener.fileno()),
                             "--app-dir", workdir, "--log-level", "warning"],
                            pass_fds=[listener.fileno()], cwd=workdir,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    listener.close()  # the server holds its own copy
    try:
        # The connection waits in the listen backlog until the server accepts it, however long
        # the server takes to start (minutes under emulation): no retry loop, one bounded read.
        with socket.create_connection(("127.0.0.1", port), timeout=300) as c:
            c.sendall(b"GET /smoke HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), data
        assert body == b"hello from goloop serve /smoke", data
        return head.split(b"\r\n")[0].decode()
    finally:
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        if proc.returncode not in (0, -15):
            print(out.decode(errors="replace"), file=sys.stderr)


def main():
    version = sys.argv[1]
    workdir = tempfile.mkdtemp(prefix="goloop-smoke-")
    os.chdir(workdir)  # import goloop from the venv, never from a clone
    goloop = check_install(version)
    loop_name = goloop.run(echo_round_trip())
    assert loop_name == "Loop", loop_name
    engine = sys.modules["goloop._goloop"].__file__
    assert engine.endswith(sysconfig.get_config_var("EXT_SUFFIX")), engine
    print("ENGINE", engine)
    status = serve_one_request(workdir)
    gil = "" if not hasattr(sys, "_is_gil_enabled") else (" GIL on" if sys._is_gil_enabled() else " GIL off")
    print(f"SMOKE-OK goloop {goloop.__version__} on Python {sys.version.split()[0]}{gil}: echo round trip, "
          f"goloop serve answered {status!r}")


if __name__ == "__main__":
    main()
