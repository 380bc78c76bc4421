"""Unix-specific parts of goloop.Loop beyond stream sockets: subprocesses, pipes, UDP,
TLS and sendfile. asyncio's own implementations run on goloop's Go poller; what goloop
does differently is here."""
from __future__ import annotations


class UnixMixin:
    """Mixed into goloop.Loop ahead of asyncio's unix selector loop."""
