"""asyncio's TLS protocol with its per-record methods in C.

goloop runs asyncio's own ``sslproto.SSLProtocol`` (handshake, shutdown, flow control,
errors: asyncio's code and behaviour). The methods that every TLS record goes through
(``get_buffer``, ``buffer_updated``, ``_do_read``, ``_do_read__copied``,
``_process_outgoing``, ``_control_app_writing``, ``_control_ssl_reading``,
``_write_appdata`` and the app transport's ``write``) are C ports of asyncio's
(goloop/binding/sslfast.c), placed first in the MRO by the mixins ``SSLProtocolFast`` and
``SSLTransportFast``. They keep their state in the same attributes as asyncio's methods.

The port follows asyncio's code as of Python 3.11. It is used only when the asyncio at
hand has exactly that code in the ported methods (a fingerprint of their bytecode, see
``_VERIFIED``); any other asyncio gets its own class unchanged (``FAST`` is False then),
until its sslproto has been compared with the C port and its fingerprint added.
"""
from __future__ import annotations

import hashlib
import ssl
import sys
from asyncio import sslproto

from . import _goloop

# Methods ported to C, and the ones those call back into.
_NEEDED = (
    "get_buffer", "buffer_updated", "_do_read", "_do_read__copied", "_do_read__buffered",
    "_process_outgoing", "_control_app_writing", "_control_ssl_reading", "_write_appdata",
    "_do_write", "_fatal_error", "_call_eof_received", "_start_shutdown", "_do_handshake",
    "_do_flush", "_do_shutdown", "_get_app_transport",
)
_STATES = ("DO_HANDSHAKE", "WRAPPED", "FLUSHING", "SHUTDOWN", "UNWRAPPED")
_PORTED = ("get_buffer", "buffer_updated", "_do_read", "_do_read__copied", "_process_outgoing",
           "_control_app_writing", "_control_ssl_reading", "_write_appdata", "_get_app_transport")
# (major, minor) -> fingerprint of the asyncio methods sslfast.c was checked against.
_VERIFIED = {(3, 11): "4585f1fa409f98d3"}


def _fingerprint() -> str:
    h = hashlib.sha256()
    codes = [getattr(sslproto.SSLProtocol, n).__code__ for n in _PORTED]
    codes.append(sslproto._SSLProtocolTransport.write.__code__)
    for code in codes:
        h.update(code.co_code)
        h.update(repr(code.co_names).encode())
    return h.hexdigest()[:16]


def _compatible() -> bool:
    base = getattr(sslproto, "SSLProtocol", None)
    states = getattr(sslproto, "SSLProtocolState", None)
    return (
        base is not None
        and states is not None
        and hasattr(sslproto, "SSLAgainErrors")
        and hasattr(sslproto, "_SSLProtocolTransport")
        and all(callable(getattr(base, name, None)) for name in _NEEDED)
        and all(hasattr(states, name) for name in _STATES)
        and isinstance(getattr(ssl, "SSLObject", None), type)
        and _VERIFIED.get(sys.version_info[:2]) == _fingerprint()
    )


FAST = _compatible()

if FAST:
    _goloop.SSLProtocolFast._setup(sslproto, ssl)

    class SSLProtocolTransport(_goloop.SSLTransportFast, sslproto._SSLProtocolTransport):
        """asyncio's _SSLProtocolTransport with write() in C."""

    class SSLProtocol(_goloop.SSLProtocolFast, sslproto.SSLProtocol):
        """asyncio's SSLProtocol with its per-record methods in C."""

        def _get_app_transport(self):
            # asyncio's method, creating goloop's transport class.
            if self._app_transport is None:
                if self._app_transport_created:
                    raise RuntimeError("Creating _SSLProtocolTransport twice")
                self._app_transport = SSLProtocolTransport(self._loop, self)
                self._app_transport_created = True
            return self._app_transport

else:  # pragma: no cover - another asyncio's sslproto
    SSLProtocol = sslproto.SSLProtocol  # type: ignore[misc]
