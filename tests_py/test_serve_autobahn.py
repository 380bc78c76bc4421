"""goloop serve's WebSocket against the Autobahn test suite's fuzzing client: kosoku 0.1.0
(PyPI; the Autobahn cases' own Python files driven by a Rust runner: the classic
autobahntestsuite is Python 2 only, and its 25.10.1 on PyPI still is: it installs on 3.11,
then `wstest` fails on a Python 2 import). Every case must end OK, NON-STRICT or
INFORMATIONAL (UNIMPLEMENTED fails too: permessage-deflate with every window size is
implemented).

The cases (313, ~30 s on a loaded 2-core machine):
- 1-7 (framing, pings/pongs, reserved bits, opcodes, fragmentation, UTF-8 with the fail-fast
  6.4.*, close handling), 10 (auto-fragmentation): all;
- 9.1.1-9.1.3 and 9.2.1-9.2.3: text and binary messages of 64 KiB to 1 MiB (the 4-16 MiB
  ones and the 9.3-9.8 throughput cases measure speed, not conformance, and take minutes);
- 12.x.1-12.x.5 and 13.x.1-13.x.5: permessage-deflate, 1000 messages of 16 B to 4 KiB each
  of the five data sets (12) and with each offer (13: no context takeover, server and
  client window bits 9 and 15, several offers in one header); the larger sizes repeat the
  same code paths with 100-128 MB per case.
The server runs without keep-alive pings: a ping in the middle of a case is an event the
cases do not expect (Autobahn itself closes a 12.* case on it; the 12.x.10 cases run longer
than the 20 s interval).
kosoku 0.1.0 hands a text message to the case's Python code as a str of its bytes (Python 2's
str), which the 12/13 cases hash (TypeError: every case with a text message ERRORs): the
cases are patched to turn it back into those bytes.
"""
import asyncio
import collections
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_serve_http import serving  # noqa: E402
from test_serve_ws import echo_app  # noqa: E402

kosoku = pytest.importorskip("kosoku")

CASES = ["1.*", "2.*", "3.*", "4.*", "5.*", "6.*", "7.*", "10.*",
         "9.1.1", "9.1.2", "9.1.3", "9.2.1", "9.2.2", "9.2.3"]
CASES += [f"{g}.{x}.{n}" for g in (12, 13) for x in range(1, 8) for n in range(1, 6)
          if not (g == 12 and x > 5)]
PASSING = {"OK", "NON-STRICT", "INFORMATIONAL"}


def _patch_text_messages():
    from kosoku._caseindex import initialize_shims
    initialize_shims()
    import case12_x_x  # the module the runner imports (initialize_shims puts it on sys.path)

    def fix(on_message):
        def onMessage(self, msg, binary):
            if isinstance(msg, str):
                msg = msg.encode("latin-1")
            return on_message(self, msg, binary)
        onMessage.goloop_fixed = True
        return onMessage

    for case in case12_x_x.Case12_X_X + case12_x_x.Case13_X_X:
        if not getattr(case.onMessage, "goloop_fixed", False):
            case.onMessage = fix(case.onMessage)


@pytest.mark.timeout(300)
def test_autobahn_fuzzingclient():
    _patch_text_messages()
    with serving(echo_app, ws_ping_interval=None) as server:
        try:
            results = asyncio.run(kosoku.run_fuzzingclient(
                f"ws://127.0.0.1:{server.port}", CASES, concurrency=2))
        except kosoku.FailureError as exc:
            results = exc.results
    verdicts = collections.Counter((r.behavior.value, r.behavior_close.value) for r in results)
    bad = [(r.case_id, r.behavior.value, r.behavior_close.value, r.result, r.result_close)
           for r in results if r.behavior.value not in PASSING or r.behavior_close.value not in PASSING]
    assert not bad, (verdicts, bad)
    ids = {r.case_id for r in results}
    # the selection ran: 13.3 and 13.5 offer server_max_window_bits=9, 6.4.* are fail-fast
    assert len(results) > 300 and {"6.4.1", "6.4.4", "13.3.1", "13.5.5", "13.7.5"} <= ids, len(results)
    # 6.4.* are OK (fail fast) rather than NON-STRICT only when the server answers within the
    # case's 1 s pauses: not asserted here (a loaded machine); test_serve_ws's fail-fast tests
    # wait for the close without a deadline
