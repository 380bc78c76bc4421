"""Unix-specific parts of goloop.Loop beyond stream sockets: subprocesses, pipes, UDP,
TLS and sendfile. asyncio's own implementations run on goloop's Go poller; what goloop
does differently is here.

Subprocesses: asyncio 3.11-3.13 learn that a child exited from the policy's child watcher
(deprecated in 3.12, removed in 3.14). goloop never consults it: it watches each child with
a pidfd (Linux >= 5.3) registered on its own poller: the pidfd turns readable when the
child exits, and the loop reaps it with waitid(P_PIDFD)/waitpid(pid, WNOHANG). No thread,
no SIGCHLD handler, nothing shared with other users of SIGCHLD or waitpid(-1). Where
pidfd_open() is unavailable (older kernels, seccomp, EMFILE), a thread blocked in
waitpid(pid) watches that child (what asyncio's ThreadedChildWatcher does).
"""
from __future__ import annotations

import errno
import os
import select
import threading
from asyncio.log import logger

from . import _compat

_pidfd_supported: bool | None = None


def _pidfd_available() -> bool:
    """Whether os.pidfd_open() works here (probed once, on our own pid): not on Linux < 5.3
    (ENOSYS), under seccomp filters that forbid it (EPERM), or off Linux (AttributeError)."""
    global _pidfd_supported
    if _pidfd_supported is None:
        try:
            fd = os.pidfd_open(os.getpid())
        except (AttributeError, OSError):
            _pidfd_supported = False
        else:
            os.close(fd)
            _pidfd_supported = True
    return _pidfd_supported


_waitid_pidfd = hasattr(os, "P_PIDFD") and hasattr(os, "waitid")


def _reap(pid: int, pidfd: int, warn: bool = True) -> int | None:
    """Reap the exited child pid (pidfd) as asyncio's watchers do: its return code, None
    while it runs, 255 (with asyncio's warning) if somebody else reaped it first.

    waitid(P_PIDFD) (Linux >= 5.4) names the very process the pidfd refers to, so a pid
    reused after somebody else reaped the child is never reaped by mistake; otherwise
    waitpid(pid, WNOHANG), which is what asyncio does.
    """
    global _waitid_pidfd
    try:
        if _waitid_pidfd:
            try:
                res = os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOHANG)
            except OSError as exc:
                if isinstance(exc, ChildProcessError) or exc.errno != errno.EINVAL:
                    raise
                _waitid_pidfd = False  # Linux 5.3: pidfd_open() but no P_PIDFD
            else:
                if res is None:
                    return None
                if res.si_code == os.CLD_EXITED:
                    return res.si_status
                return -res.si_status  # CLD_KILLED, CLD_DUMPED: like waitstatus_to_exitcode
        wpid, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        if warn:
            logger.warning("Unknown child process pid %d, will report returncode 255", pid)
        return 255
    if wpid == 0:
        return None
    return os.waitstatus_to_exitcode(status)


def _waitpid_exitcode(pid: int) -> int | None:
    """Reap the exited child pid: its return code, or None if somebody else reaped it."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status)


class _OrphanReaper:
    """One daemon thread reaping the children of loops closed while those ran.

    asyncio's ThreadedChildWatcher keeps waiting for (and reaping) a child after its loop
    closed; this does the same for goloop's pidfd-watched children, with a single thread
    for all of them, started only when such a child exists. It keeps the child's
    transport alive until the child exits, as asyncio's watcher thread does.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._children: dict[int, tuple[int, object]] = {}  # pidfd -> (pid, transport)
        self._thread: threading.Thread | None = None
        self._wake_r = self._wake_w = -1

    def adopt(self, pid: int, pidfd: int, transp: object) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive() or self._wake_w < 0:
                self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
                self._children[pidfd] = (pid, transp)
                self._thread = threading.Thread(target=self._run, name="goloop-reaper",
                                                daemon=True)
                self._thread.start()
                return
            self._children[pidfd] = (pid, transp)
            try:
                os.write(self._wake_w, b"\0")
            except BlockingIOError:
                pass

    def _run(self) -> None:
        poller = select.poll()
        watched: set[int] = set()
        wake_r = self._wake_r
        poller.register(wake_r, select.POLLIN)
        while True:
            with self._lock:
                for fd in self._children.keys() - watched:
                    poller.register(fd, select.POLLIN)
                    watched.add(fd)
                if not self._children:
                    # nothing left: stop; the next adopt() starts a new thread
                    os.close(self._wake_r)
                    os.close(self._wake_w)
                    self._wake_r = self._wake_w = -1
                    self._thread = None
                    return
            for fd, _ in poller.poll():
                if fd == wake_r:
                    try:
                        os.read(wake_r, 4096)
                    except BlockingIOError:
                        pass
                    continue
                with self._lock:
                    pid, transp = self._children.pop(fd)
                poller.unregister(fd)
                watched.discard(fd)
                try:
                    # the transport may have been closed meanwhile: Popen.poll() reaps
                    _reap(pid, fd, warn=False)
                finally:
                    os.close(fd)
                del transp


_reaper = _OrphanReaper()


class UnixMixin:
    """Mixed into goloop.Loop ahead of asyncio's unix selector loop."""

    # self._pidfd_children (set to None by Loop.__init__): pid -> (pidfd, transport) of the
    # children this loop watches with a pidfd

    # -- subprocesses ----------------------------------------------------------------

    async def _make_subprocess_transport(self, protocol, args, shell,
                                         stdin, stdout, stderr, bufsize,
                                         extra=None, **kwargs):
        # asyncio's structure (_UnixSelectorEventLoop._make_subprocess_transport), with
        # goloop's own watching of the child in place of the policy's child watcher.
        waiter = self.create_future()
        transp = _compat.UnixSubprocessTransport(self, protocol, args, shell,
                                                 stdin, stdout, stderr, bufsize,
                                                 waiter=waiter, extra=extra, **kwargs)
        self._watch_child(transp.get_pid(), transp)
        try:
            await waiter
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException:
            transp.close()
            await _compat.subprocess_wait(transp)
            raise
        return transp

    def _watch_child(self, pid: int, transp) -> None:
        pidfd = -1
        if _pidfd_available() and _compat.asyncio_uses_pidfd(self):
            try:
                pidfd = os.pidfd_open(pid)
            except OSError as exc:
                # e.g. EMFILE: a thread waits for this child rather than lose its status
                logger.warning("pidfd_open(%d) failed (%s): a thread waits for the child",
                               pid, exc)
        if pidfd < 0:
            watcher = _compat.threaded_child_watcher(self)
            if watcher is not None:
                # 3.14+, where asyncio's loop found no pidfd (unix_events.can_use_pidfd())
                # and made its threaded watcher: the same watcher, as asyncio's loop uses it
                watcher.add_child_handler(pid, self._child_exited, transp)
                return
            threading.Thread(target=self._wait_child_thread, args=(pid, transp),
                             name=f"goloop-waitpid-{pid}", daemon=True).start()
            return
        if self._pidfd_children is None:
            self._pidfd_children = {}
        try:
            self._add_reader(pidfd, self._pidfd_ready, pid, pidfd, transp)
        except BaseException:
            os.close(pidfd)
            raise
        self._pidfd_children[pid] = (pidfd, transp)

    def _wait_child_thread(self, pid: int, transp) -> None:
        # No pidfd: wait in this thread for the child to exit without reaping it (waitid
        # with WNOWAIT, as asyncio's threaded watcher does since gh-127049): its pid stays
        # reserved until the loop's thread reaps it and reports the exit in one step, so a
        # send_signal() made before the report can never reach a recycled pid.
        try:
            while True:
                res = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
                if res is not None and res.si_code == os.CLD_STOPPED:
                    # macOS reports stopped children to WEXITED: consume the stop, wait on
                    os.waitid(os.P_PID, pid, os.WSTOPPED | os.WNOHANG)
                    continue
                break
        except ChildProcessError:
            pass  # reaped by somebody else (Popen.poll() from close()): the reap says so
        try:
            if not self.is_closed():
                self.call_soon_threadsafe(self._reap_child_exited, pid, transp)
                return
        except RuntimeError:  # closed meanwhile
            pass
        _waitpid_exitcode(pid)  # no loop to tell: reap it here, leave no zombie

    def _reap_child_exited(self, pid: int, transp) -> None:
        # (the loop's thread) the reap and the report, with nothing in between
        self._child_exited(pid, _waitpid_exitcode(pid), transp)

    def _pidfd_ready(self, pid: int, pidfd: int, transp) -> None:
        proc = _compat.subprocess_popen(transp)
        returncode = None
        if proc is None or proc.returncode is None:  # else Popen.poll() reaped it already
            returncode = _reap(pid, pidfd)
            if returncode is None:  # spurious wake-up: the child still runs
                return
        self._forget_child(pid)
        self._child_exited(pid, returncode, transp)

    def _child_exited(self, pid: int, returncode: int | None, transp) -> None:
        """Report the exit of child pid to its transport. returncode: what goloop's reap
        got, None if Popen.poll() (which the transport's close() calls) reaped the child
        first: Popen's code then (not the other way round: a Popen that finds the child
        already reaped says 0); with neither, asyncio's watchers report 255 and warn."""
        if returncode is None:
            proc = _compat.subprocess_popen(transp)
            returncode = None if proc is None else proc.returncode
        if returncode is None:
            logger.warning("Unknown child process pid %d, will report returncode 255", pid)
            returncode = 255
        if self.get_debug():
            logger.debug('process %s exited with returncode %s', pid, returncode)
        _compat.subprocess_exited(transp, returncode)

    def _forget_child(self, pid: int) -> None:
        pidfd, _ = self._pidfd_children.pop(pid)
        self._remove_reader(pidfd)
        os.close(pidfd)

    def close(self) -> None:
        children = self._pidfd_children
        if children and not self.is_running() and not self.is_closed():
            # Children still running when the loop closes: asyncio's watcher goes on waiting
            # for them and reaps them when they exit (no zombies); so does goloop's reaper.
            self._pidfd_children = None
            for pid, (pidfd, transp) in list(children.items()):
                self._remove_reader(pidfd)
                if self.get_debug():
                    logger.warning("Loop %r closes while child process %d runs", self, pid)
                _reaper.adopt(pid, pidfd, transp)
        super().close()
