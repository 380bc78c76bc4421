"""The modules of pyshim/goloop import each other without a cycle, and each imports alone.

An import cycle between two modules works only while every name is looked up late enough;
goloop serve's modules were once in one (the server and the master imported each other).
The graph is the package's own `import`/`from . import` statements anywhere in each module
(inside functions too: a cycle deferred to call time is still a cycle), read from the
sources; the packages' __init__ modules are left out of the edges (a submodule is always imported
after its package, and `from . import run` names the package's function).
"""
import ast
import os
import subprocess
import sys

import pytest

import goloop

PKG_DIR = os.path.dirname(goloop.__file__)
SUBPACKAGES = ["serve"]
# modules by their name under goloop: "_loop", "serve.server" ...
MODULES = sorted([f[:-3] for f in os.listdir(PKG_DIR) if f.endswith(".py") and f != "__init__.py"]
                 + [f"{p}.{f[:-3]}" for p in SUBPACKAGES for f in os.listdir(os.path.join(PKG_DIR, p))
                    if f.endswith(".py") and f != "__init__.py"])


def _imports(name):
    """The package's submodules that module `name` imports."""
    with open(os.path.join(PKG_DIR, *name.split(".")) + ".py", encoding="utf-8") as f:
        tree = ast.parse(f.read())
    here = name.split(".")[:-1]  # the package module `name` is in, under goloop
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - node.level + 1]
                if node.module:  # from .x import y: x, or x.y if that is a module
                    mod = ".".join(base + [node.module])
                    out.add(mod)
                    out.update(f"{mod}.{a.name}" for a in node.names)
                else:  # from . import x, y
                    out.update(".".join(base + [a.name]) for a in node.names)
            elif node.module and node.module.startswith("goloop."):
                mod = node.module[len("goloop."):]
                out.add(mod)
                out.update(f"{mod}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name[len("goloop."):] for a in node.names if a.name.startswith("goloop."))
    return {m for m in out if m in MODULES and m != name}


def _cycle(graph):
    """A cycle of graph (a list of names, the first repeated at the end) or None."""
    state = {}
    stack = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                c = visit(m)
                if c:
                    return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            c = visit(n)
            if c:
                return c
    return None


def test_the_scan_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_between_the_package_modules():
    graph = {m: _imports(m) for m in MODULES}
    assert "serve.config" in graph["serve.server"] and "serve.workers" in graph["serve.server"]  # seen
    assert "_compat" in graph["_loop"]
    assert _cycle(graph) is None, graph


@pytest.mark.parametrize("name", ["serve", "serve.server", "serve.config", "serve.workers", "serve.wsgi"])
def test_each_serve_module_imports_alone(name):
    # a fresh interpreter: nothing imported before it lends it a name; no Go engine loaded
    code = (f"import sys, goloop.{name}; "
            "assert 'goloop._goloop' not in sys.modules, 'the Go engine was loaded'")
    r = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=os.path.dirname(PKG_DIR)))
    assert r.returncode == 0, r.stderr


def test_serve_stays_callable():
    # goloop.serve is a function of the package; importing goloop.serve's modules makes the
    # sub-package goloop's attribute `serve` (Python sets it on its parent), which is callable too
    code = ("import goloop, inspect; f = goloop.serve; assert inspect.isfunction(f), f; "
            "import goloop.serve.workers as w; from goloop.serve import config; "
            "assert callable(goloop.serve) and goloop.serve is not f, goloop.serve; "
            "assert w.__name__ == 'goloop.serve.workers'; "
            "import goloop.serve.server as s; assert s.serve is not goloop.serve; "
            "from goloop import serve, serve_metrics; assert callable(serve) and callable(serve_metrics); "
            "assert inspect.signature(goloop.serve) == inspect.signature(f), inspect.signature(goloop.serve)")
    r = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=os.path.dirname(PKG_DIR)))
    assert r.returncode == 0, r.stderr
