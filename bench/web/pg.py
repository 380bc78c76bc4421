"""A private PostgreSQL cluster for the web benchmark: created on loopback from Debian's
packages, loaded with TechEmpower's schema, stopped and removed at the end.

    python3 bench/web/pg.py            # start one, print its port, stop on Ctrl-C

As a library: `with Cluster() as pg: ...` gives pg.port and pg.dsn (the benchmark's user) and
pg.admin_dsn (the superuser: pg_stat_statements_reset and the validator's counts).

The cluster: initdb in a temporary directory (under build/ when it exists), owned by the
`postgres` system user when run as root (PostgreSQL refuses to run as root); listening on
127.0.0.1 on a free port, no Unix socket; pg_stat_statements in shared_preload_libraries
(TechEmpower's verifier counts executed queries with it); fsync and synchronous_commit as
Debian ships them (on: updates are real commits). Loopback connections use trust: each
server keeps a pool, so authentication is outside the measured loop.

The data is TechEmpower's (toolset/databases/postgres/create-postgres.sql): database
hello_world, user benchmarkdbuser (password benchmarkdbpass), World(id, randomnumber) with
10,000 rows of random numbers 1..10000 and Fortune(id, message) with its 12 rows.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

DB, USER, PASSWORD = "hello_world", "benchmarkdbuser", "benchmarkdbpass"

# TechEmpower's 12 fortunes (id, message), as its create-postgres.sql loads them.
FORTUNES = [
    (1, "fortune: No such file or directory"),
    (2, "A computer scientist is someone who fixes things that aren't broken."),
    (3, "After enough decimal places, nobody gives a damn."),
    (4, "A bad random number generator: 1, 1, 1, 1, 1, 4.33e+67, 1, 1, 1"),
    (5, "A computer program does what you tell it to do, not what you want it to do."),
    (6, "Emacs is a nice operating system, but I prefer UNIX. \u2014 Tom Christaensen"),
    (7, "Any program that runs right is obsolete."),
    (8, "A list is only as strong as its weakest link. \u2014 Donald Knuth"),
    (9, "Feature: A bug with seniority."),
    (10, "Computers make very fast, very accurate mistakes."),
    (11, '<script>alert("This should not be displayed in a browser alert box.");</script>'),
    (12, "\u30d5\u30ec\u30fc\u30e0\u30ef\u30fc\u30af\u306e\u30d9\u30f3\u30c1\u30de\u30fc\u30af"),
]


def _sql_str(s):
    return "'" + s.replace("'", "''") + "'"


SCHEMA = f"""
BEGIN;
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;
CREATE TABLE World (id integer NOT NULL, randomNumber integer NOT NULL default 0, PRIMARY KEY (id));
GRANT ALL PRIVILEGES ON World TO {USER};
INSERT INTO World (id, randomnumber)
  SELECT x.id, least(floor(random() * 10000 + 1), 10000) FROM generate_series(1, 10000) AS x(id);
CREATE TABLE Fortune (id integer NOT NULL, message varchar(2048) NOT NULL, PRIMARY KEY (id));
GRANT ALL PRIVILEGES ON Fortune TO {USER};
INSERT INTO Fortune (id, message) VALUES
{",".join(f"({i}, {_sql_str(m)})" for i, m in FORTUNES)};
COMMIT;
"""


def pg_bin() -> str:
    """Debian's PostgreSQL binaries (the newest installed version), installing them if missing."""
    def found():
        dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]))
        return next((d for d in reversed(dirs) if os.path.exists(os.path.join(d, "initdb"))), None)
    d = found()
    if d is None:
        print("# installing PostgreSQL (apt-get install postgresql)", flush=True)
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "postgresql"], check=True,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        d = found()
        if d is None:
            raise RuntimeError("PostgreSQL's initdb not found under /usr/lib/postgresql/*/bin")
    return d


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, port: int | None = None, cpu: str | None = "1", base: str | None = None):
        self.port = port or _free_port()
        self.cpu = cpu
        self.base = base
        self.dir = None
        self.bin = None

    @property
    def dsn(self):
        return f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{DB}"

    @property
    def admin_dsn(self):
        return f"postgresql://postgres@127.0.0.1:{self.port}/{DB}"

    def env(self):
        """The variables the apps read (bench/web/tfb.py)."""
        return {"PGHOST": "127.0.0.1", "PGPORT": str(self.port), "PGUSER": USER,
                "PGPASSWORD": PASSWORD, "PGDATABASE": DB}

    def _run(self, argv, **kw):
        pre = []
        if os.geteuid() == 0:
            pre = ["runuser", "-u", "postgres", "--"]
        return subprocess.run(pre + argv, check=True, capture_output=True, text=True, **kw)

    def start(self):
        self.bin = pg_bin()
        base = self.base
        if base is None and os.path.isdir(os.path.join(REPO, "build")):
            base = os.path.join(REPO, "build")
        self.dir = tempfile.mkdtemp(prefix="web-pg-", dir=base)
        data = os.path.join(self.dir, "data")
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            os.chmod(self.dir, 0o700)
        self._run([os.path.join(self.bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust",
                   "-E", "UTF8", "--locale=C.UTF-8"])
        with open(os.path.join(data, "postgresql.conf"), "a") as f:
            f.write(f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\nunix_socket_directories = ''\n"
                    "shared_preload_libraries = 'pg_stat_statements'\npg_stat_statements.track = all\n"
                    "max_connections = 300\nshared_buffers = 128MB\n")
        pin = ["taskset", "-c", self.cpu] if self.cpu and shutil.which("taskset") else []
        self._run(pin + [os.path.join(self.bin, "pg_ctl"), "-D", data, "-l", os.path.join(self.dir, "log"),
                         "-w", "-t", "60", "start"])
        psql = [os.path.join(self.bin, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
                "-p", str(self.port), "-U", "postgres"]
        self._run(psql + ["-d", "postgres", "-c", f"CREATE USER {USER} WITH PASSWORD '{PASSWORD}'",
                          "-c", f"CREATE DATABASE {DB} OWNER {USER} ENCODING 'UTF8'"])
        self._run(psql + ["-d", DB, "-f", "-"], input=SCHEMA)
        return self

    def stop(self):
        if self.dir is None:
            return
        data = os.path.join(self.dir, "data")
        try:
            if self.bin and os.path.exists(os.path.join(data, "postmaster.pid")):
                self._run([os.path.join(self.bin, "pg_ctl"), "-D", data, "-m", "fast", "-w", "stop"])
        except subprocess.CalledProcessError as exc:
            print(f"# pg_ctl stop: {exc.stderr.strip()}", file=sys.stderr)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc):
        self.stop()


def main():
    with Cluster() as pg:
        print(f"PostgreSQL on 127.0.0.1:{pg.port}: {pg.dsn} (Ctrl-C stops and removes it)", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
