"""Words and paths in the repository speak of the project as it is: no development history
(a numbered session, issue or stop, a worktree or its branch) and no place of the
machine someone worked on (the machine or VM at hand, "tested here") in tracked Markdown or in
source comments (BENCHMARKS.md's machine section is where the machine is described); and
every repository path that Markdown or a comment cites exists (or is a build output that
.gitignore names), so a rename that leaves a reference behind fails here."""
from __future__ import annotations

import fnmatch
import functools
import glob
import io
import os
import re
import subprocess
import tokenize

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORDS = [
    (re.compile(r"\bsessions? \d+", re.I), "a session number"),
    (re.compile(r"\bworktrees?\b", re.I), "a worktree"),
    (re.compile(r"(?<![\w/.-])" + "wt" + r"-[a-z][a-z0-9]*\b"), "a worktree branch"),
    (re.compile(r"\bissues? #?\d+", re.I), "an issue number"),
    (re.compile(r"\bstops? \d+\b", re.I), "a stop number"),
    (re.compile(r"\bthis (machine|VM|host|box)\b", re.I), "the machine someone worked on"),
    # "here" as a place: what was tested, measured or available on someone's machine (not
    # "here" as in "in this code": "the environ, built here from the head")
    (re.compile(r"\b(tested|measured|installed|available|can be had|served to|fetched|refuses it|"
                r"machine|VM)\s+here\b", re.I), "'here' as the machine someone worked on"),
    (re.compile(r"\([^()]*\b\d[\d.]*\w*\s[^()]*\bhere\)"), "'here' as the machine someone worked on"),
]

SOURCE_EXT = (".py", ".go", ".c", ".h", ".sh", ".lua")
# what a path a document cites may start with
TOP = None


def tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [p for p in out.splitlines() if os.path.exists(os.path.join(REPO, p))]


@functools.lru_cache(maxsize=None)
def top_level() -> frozenset:
    return frozenset(p.split("/")[0] for p in tracked() if "/" in p)


def comments(path: str, text: str) -> list[tuple[int, str]]:
    """(line, text) of each comment (and Python docstring) of a source file."""
    out = []
    if path.endswith(".py"):
        try:
            toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
        except (tokenize.TokenError, SyntaxError):
            return [(i, l) for i, l in enumerate(text.splitlines(), 1)]
        prev = None
        for t in toks:
            if t.type == tokenize.COMMENT:
                out.append((t.start[0], t.string))
            elif t.type == tokenize.STRING and (prev is None or prev.type in (tokenize.INDENT, tokenize.NEWLINE,
                                                                            tokenize.NL, tokenize.DEDENT)):
                for i, l in enumerate(t.string.splitlines()):
                    out.append((t.start[0] + i, l))
            if t.type not in (tokenize.NL, tokenize.COMMENT):
                prev = t
        return out
    if path.endswith(".sh"):
        return [(i, l[l.index("#"):]) for i, l in enumerate(text.splitlines(), 1) if "#" in l]
    if path.endswith(".lua"):
        return [(i, l[l.index("--"):]) for i, l in enumerate(text.splitlines(), 1) if "--" in l]
    # Go and C: // and /* */
    for m in re.finditer(r"//[^\n]*|/\*.*?\*/", text, re.S):
        line = text.count("\n", 0, m.start()) + 1
        for i, l in enumerate(m.group(0).splitlines()):
            out.append((line + i, l))
    return out


def documents():
    """(path, [(line, text)]) of every tracked Markdown file and source file's comments."""
    for p in tracked():
        full = os.path.join(REPO, p)
        if p == "tests_py/test_docs_words.py":  # the rules themselves quote what they forbid
            continue
        if p.endswith(".md"):
            text = open(full, encoding="utf-8", errors="replace").read()
            lines = list(enumerate(text.splitlines(), 1))
            if p == "BENCHMARKS.md":  # its machine section may describe the machine
                lines = [(i, l) for i, l in lines if not in_machine_section(text, i)]
            yield p, lines
        elif p.endswith(SOURCE_EXT) or os.path.basename(p) == "Makefile":
            text = open(full, encoding="utf-8", errors="replace").read()
            if os.path.basename(p) == "Makefile":
                yield p, [(i, l[l.index("#"):]) for i, l in enumerate(text.splitlines(), 1) if "#" in l]
            else:
                yield p, comments(p, text)


def in_machine_section(text: str, lineno: int) -> bool:
    section = None
    for i, l in enumerate(text.splitlines(), 1):
        if l.startswith("## "):
            section = l
        if i == lineno:
            return section == "## Machine"
    return False


@functools.lru_cache(maxsize=None)
def ignored(path: str) -> bool:
    """A build output that .gitignore names by its path (not by a pattern such as *.so that
    any file matches)."""
    p = subprocess.run(["git", "check-ignore", "-v", "--no-index", path], cwd=REPO, capture_output=True,
                       text=True)
    if p.returncode != 0:
        return False
    pattern = p.stdout.split(":", 2)[2].split("\t")[0]
    return "/" in pattern.rstrip("/")


def path_exists(path: str) -> bool:
    if re.search(r"[*?\[<{]", path):  # a pattern: something must match it (or be a build output)
        pattern = re.sub(r"<[^>]*>|\{[^}]*\}", "*", path)
        if glob.glob(os.path.join(REPO, pattern)):
            return True
        return any(fnmatch.fnmatch(p, pattern) for p in tracked()) or ignored(pattern.replace("*", "x"))
    full = os.path.join(REPO, path)
    return os.path.exists(full) or os.path.exists(full + ".py") or ignored(path)  # bench/harness: a module


PATH_RE = re.compile(r"(?<![\w./-])((?:\.?[A-Za-z_][\w.-]*/)+[\w.*<>{}-]*[\w*>}])")
LINK_RE = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def cited_paths(doc: str, text: str) -> list[str]:
    """Repository paths a line cites: a path beginning with a top-level folder of the
    repository, and a Markdown link's target (relative to the document)."""
    out = []
    for m in PATH_RE.finditer(text):
        p = m.group(1).rstrip(".")
        if p.split("/")[0] in top_level() and "//" not in p:
            out.append(p)
    if doc.endswith(".md"):
        for m in LINK_RE.finditer(text):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue
            out.append(os.path.normpath(os.path.join(os.path.dirname(doc), target)))
    return out


def findings():
    words, paths = [], []
    for doc, lines in documents():
        for n, (i, line) in enumerate(lines):
            for rx, what in WORDS:
                m = rx.search(line)
                if m:
                    words.append(f"{doc}:{i}: {what}: {m.group(0)!r}")
            for p in cited_paths(doc, line):
                if path_exists(p):
                    continue
                # a path cut by the end of its line goes on at the start of the next
                nxt = lines[n + 1][1].lstrip(" #*/") if n + 1 < len(lines) else ""
                if line.rstrip().endswith(p) and nxt and path_exists(p + re.match(r"[\w.]*", nxt).group(0)):
                    continue
                paths.append(f"{doc}:{i}: no such path: {p}")
    return words, paths


@pytest.fixture(scope="module")
def found():
    return findings()


def test_no_words_of_history_or_of_a_machine(found):
    words, _ = found
    assert not words, "\n" + "\n".join(words)


def test_every_cited_path_exists(found):
    _, paths = found
    assert not paths, "\n" + "\n".join(paths)


@pytest.mark.parametrize("line,bad", [
    ("measured in " + "session" + " 12, 2026-12-02", True),
    ("(" + "issue" + " 22, " + "wt" + "-wsgilf, 04:40 UTC)", True),
    ("see stop 3's notes", True),
    ("on " + "this" + " machine, 2 cores", True),
    ("no interpreter can be had here", True),
    ("Debian's glibc (2.36 here)", True),
    ("drift (up to 1.6x here) cancels", True),
    ("(a system call only amd64 has fails here)", False),
    ("A session's messages reach the application", False),
    ("here is the rule", False),
    ("an issue with the parser", False),
])
def test_the_word_rules(line, bad):
    assert any(rx.search(line) for rx, _ in WORDS) == bad


def test_the_path_rules():
    assert cited_paths("README.md", "see `tools/build_wheel.sh` and goloop/binding/doc.go") == [
        "tools/build_wheel.sh", "goloop/binding/doc.go"]
    assert not path_exists("tools/build_wheel.sh")
    assert path_exists("goloop/binding/doc.go")
    assert path_exists("pyshim/goloop/_goloop.<EXT_SUFFIX>.so")  # a build output .gitignore names
    assert cited_paths("docs/index.md", "[x](install.md#from-source) [y](https://example.org/a/b)") == [
        "docs/install.md"]
