"""bench/analysis/bounds.py: who a perf sample's time counts for (the bound it prints rests on it)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "analysis"))
bounds = pytest.importorskip("bounds")

PY = "libpython3.11.so.1.0"
LOOP = "loop.cpython-311-x86_64-linux-gnu.so"
GOLOOP = "_goloop.cpython-311-x86_64-linux-gnu.so"
APP = "application (Python)"


@pytest.mark.parametrize("frames, want", [
    # the leaf decides for the kernel, crypto and the loop modules themselves
    ([("tcp_sendmsg", "[kernel.kallsyms]"), ("__pyx_f_loop_write", LOOP)], "[kernel.kallsyms]"),
    ([("EVP_Cipher", "libcrypto.so.3"), ("_PyEval_EvalFrameDefault", PY)], "libcrypto.so.3"),
    ([("gl_read_deliver_u", GOLOOP), ("_PyEval_EvalFrameDefault", PY)], GOLOOP),
    # a copy asked for by the loop module is the loop's ...
    ([("__memmove_avx512_unaligned_erms", "libc.so.6"), ("PyBytes_FromStringAndSize", PY),
      ("__pyx_f_6uvloop_4loop_on_read", LOOP), ("_PyEval_EvalFrameDefault", PY)], LOOP),
    # ... one asked for by Python code (bytes(), bytearray +=) the application's
    ([("__memmove_avx512_unaligned_erms", "libc.so.6"), ("bytes_new", PY),
      ("_PyEval_EvalFrameDefault", PY), ("__pyx_f_6uvloop_4loop_Handle__run", LOOP)], APP),
    ([("_PyEval_EvalFrameDefault", PY), ("gl_handle_run", GOLOOP)], APP),
    # an SSLObject call made from Python is the same work on any loop
    ([("malloc", "libc.so.6"), ("_ssl__SSLSocket_read", "_ssl.cpython-311-x86_64-linux-gnu.so"),
      ("__pyx_sslproto_do_read", LOOP)], "_ssl.cpython-311-x86_64-linux-gnu.so"),
    # no decisive frame: the application's
    ([("malloc", "libc.so.6"), ("[unknown]", "[unknown]")], APP),
])
def test_owner(frames, want):
    assert bounds.owner(frames) == want


def test_classify():
    assert bounds.classify(LOOP) == "loop"
    assert bounds.classify(GOLOOP) == "loop"
    assert bounds.classify("parser.cpython-311-x86_64-linux-gnu.so") == "loop"
    assert bounds.classify(APP) == "same"
    assert bounds.classify("[kernel.kallsyms]") == "same"
