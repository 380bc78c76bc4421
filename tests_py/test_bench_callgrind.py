"""The callgrind dump parsing of bench/analysis/wsgi_instr.py and asgi_instr.py (instruction
counts and, with the cache simulation, misses per request): the totals line is read by the
events line's names, and callgrind leaves trailing zeros out of it."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "bench", "analysis"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "bench"))

import asgi_instr  # noqa: E402
import wsgi_instr  # noqa: E402


def dump(tmp_path, text):
    p = tmp_path / "cg.out"
    p.write_text(text)
    return str(p)


def test_instructions_only(tmp_path):
    d = dump(tmp_path, "version: 1\ncmd: x\nevents: Ir\nfn=(1) main\n0 5\nsummary: 123456\n")
    assert wsgi_instr.dump_events(d) == {"Ir": 123456}
    assert wsgi_instr.dump_total(d) == 123456


def test_cache_simulation_events_and_misses(tmp_path):
    # (trailing zeros left out: DLmr and DLmw are 0)
    d = dump(tmp_path, "events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw\n"
                       "totals: 1000 300 200 11 22 33 4\n")
    ev = wsgi_instr.dump_events(d)
    assert ev == {"Ir": 1000, "Dr": 300, "Dw": 200, "I1mr": 11, "D1mr": 22, "D1mw": 33, "ILmr": 4}
    assert wsgi_instr.dump_total(d) == 1000
    assert asgi_instr.misses(ev) == {"L1": 66, "LL": 4}


def test_no_totals_is_zero(tmp_path):
    d = dump(tmp_path, "events: Ir\nfn=(1) main\n")
    assert wsgi_instr.dump_events(d) == {}
    assert wsgi_instr.dump_total(d) == 0
