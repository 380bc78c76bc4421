#!/usr/bin/env python3
"""Every repository path cited in the repository's Markdown and comments exists: `make vet`
runs this.

    python3 tools/check_paths.py [FILE ...]

It reads the tracked files (git ls-files; or the FILEs given): all of a Markdown file, and the
comments of the rest (Go, C: // and /* */; Python: # comments and docstrings; Makefile, shell,
TOML: # comments). A cited path starts at one of the repository's top-level folders
(goloop/binding/loop.go, pyshim/goloop/serve/, bench/analysis/wsgi_instr.py:40, tools/*.sh);
it fails, naming each file and line, when one names nothing in the tree. Not paths of the
repository: one inside a longer path (github.com/goloop/goloop/goloop/sched,
build/race/lib/goloop), one followed by a placeholder (goloop/_goloop.<EXT_SUFFIX>.so, a
wheel's member), a ratio of two loops (goloop/uvloop). Globs and {a,b} lists are expanded, a
trailing :LINE is dropped, and a path git ignores (a build output, such as bench/.bin) counts
as existing. A line holding "check_paths: ignore" is skipped.
"""
import ast
import functools
import glob
import io
import os
import re
import subprocess
import sys
import tokenize

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOOPS = {"uvloop", "asyncio", "rloop", "uvicorn", "granian"}  # goloop/uvloop: a ratio, not a path


def top_dirs():
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return sorted({f.split("/", 1)[0] for f in out.split() if "/" in f})


def expand(path):
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [p for alt in m.group(1).split(",") for p in expand(path[:m.start()] + alt + path[m.end():])]


@functools.cache
def exists(path):
    path = path.rstrip("/")
    if any(c in path for c in "*?["):
        if glob.glob(os.path.join(REPO, path)):
            return True
    elif os.path.exists(os.path.join(REPO, path)):
        return True
    return subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=REPO).returncode == 0


def py_text(src):
    """{line: text} of a Python file's comments and docstrings."""
    out = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type == tokenize.COMMENT:
                out[tok.start[0]] = out.get(tok.start[0], "") + " " + tok.string
        for node in ast.walk(ast.parse(src)):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                    and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                lines = src.splitlines()
                for no in range(body[0].lineno, body[0].end_lineno + 1):
                    out[no] = out.get(no, "") + " " + lines[no - 1]
    except (SyntaxError, tokenize.TokenError):
        pass
    return out


def c_text(src):
    """{line: text} of a Go or C file's comments."""
    out, in_block = {}, False
    for no, line in enumerate(src.splitlines(), 1):
        text, i = "", 0
        while i < len(line):
            if in_block:
                j = line.find("*/", i)
                text += line[i:] if j < 0 else line[i:j]
                if j < 0:
                    break
                in_block, i = False, j + 2
            else:
                j, k = line.find("//", i), line.find("/*", i)
                if j >= 0 and (k < 0 or j < k):
                    text += line[j + 2:]
                    break
                if k < 0:
                    break
                in_block, i = True, k + 2
        if text:
            out[no] = text
    return out


def hash_text(src):
    return {no: line[line.index("#"):] for no, line in enumerate(src.splitlines(), 1) if "#" in line}


def texts(f, src):
    if f.endswith(".md"):
        return dict(enumerate(src.splitlines(), 1))
    if f.endswith(".py"):
        return py_text(src)
    if f.endswith((".go", ".c", ".h")):
        return c_text(src)
    if f.endswith((".sh", ".toml", ".in", ".cfg", ".yml", ".yaml")) or os.path.basename(f) in ("Makefile", "run"):
        return hash_text(src)
    return {}


def scan(files):
    tops = "|".join(re.escape(d) for d in top_dirs())
    # a path: a top-level folder, then /segments; not inside a longer word or path
    pat = re.compile(r"(?<![\w/.\-~$])(?:" + tops + r")/[\w.*?{},\-/]*[\w*}/]")
    bad = []
    for f in files:
        try:
            with open(os.path.join(REPO, f), encoding="utf-8") as fh:
                src = fh.read()
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
        for no, text in sorted(texts(f, src).items()):
            if "check_paths: ignore" in text:
                continue
            for m in pat.finditer(text):
                cited = re.sub(r":\d+$", "", m.group(0))
                after = text[m.end():m.end() + 2]
                if after.startswith("<") or after == ".<" or ("{" in cited and "}" not in cited):
                    continue  # a placeholder follows, or a {a,b} list the pattern cut
                first, _, rest = cited.partition("/")
                if first == "goloop" and rest in LOOPS:
                    continue
                if not all(exists(p) for p in expand(cited)):
                    bad.append(f"{f}:{no}: {cited}")
    return bad


def main():
    files = sys.argv[1:] or subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                                           check=True).stdout.split()
    bad = scan(files)
    for b in bad:
        print(f"cites a path that does not exist: {b}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
