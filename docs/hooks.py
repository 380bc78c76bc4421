"""MkDocs hooks: the Settings page is generated from `goloop serve`'s own argparse parser, so
it lists every option with its default and cannot drift from the command.

A page asks for the table with the marker `<!-- goloop-serve-options -->`.
"""
from __future__ import annotations

import argparse
import importlib
import os
import re
import sys

# The module whose parser() builds `goloop serve`'s arguments.
SERVE_CONFIG = "goloop.serve.config"

MARKER = "<!-- goloop-serve-options -->"

# Topics, in page order: option dests. An option in none of them lands in "Other options",
# so a new option is listed even before someone files it under a topic.
TOPICS = [
    ("Application", ["app", "factory", "interface", "app_dir", "lifespan", "root_path", "env_file"]),
    ("Socket", ["host", "port", "uds", "fd", "backlog"]),
    ("HTTP", ["http", "server_header", "date_header", "headers", "h11_max_incomplete_event_size"]),
    ("Timeouts and limits", ["timeout_keep_alive", "timeout_request_head", "min_request_body_rate",
                             "timeout_graceful_shutdown", "limit_concurrency", "limit_max_requests"]),
    ("TLS", ["ssl_certfile", "ssl_keyfile", "ssl_keyfile_password", "ssl_cert_reqs", "ssl_ca_certs",
             "ssl_version", "ssl_ciphers"]),
    ("WebSocket", ["ws", "ws_max_size", "ws_max_queue", "ws_ping_interval", "ws_ping_timeout",
                   "ws_per_message_deflate"]),
    ("Proxies", ["proxy_headers", "forwarded_allow_ips"]),
    ("Processes and scheduling", ["workers", "threads", "timeout_worker_healthcheck", "sched_batch"]),
    ("Development", ["reload", "reload_dirs", "reload_includes", "reload_excludes", "reload_delay"]),
    ("Logging", ["log_level", "log_config", "access_log", "use_colors"]),
    ("Metrics", ["metrics", "metrics_path"]),
]

DEFAULT_RE = re.compile(r"\s*\(default(?::\s*(?P<what>[^()]*(?:\([^()]*\)[^()]*)*))?\)\s*$")


def serve_parser() -> argparse.ArgumentParser:
    try:
        mod = importlib.import_module(SERVE_CONFIG)
    except ImportError:  # building from a clone without goloop installed
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyshim"))
        mod = importlib.import_module(SERVE_CONFIG)
    return mod.parser()


def split_help(action: argparse.Action) -> tuple[str, str]:
    """(meaning, default) from an option's help, whose end says its default."""
    text = (action.help or "") % {"default": action.default, "prog": "goloop serve"}
    m = DEFAULT_RE.search(text)
    if not m:
        return text, "none" if action.default is None else repr(action.default)
    meaning = text[:m.start()].rstrip()
    default = m.group("what")
    if default is None:  # "(default)": this spelling is the default
        default = "on"
    return meaning, default.strip()


def esc(s: str) -> str:
    return s.replace("|", "\\|")


def options_markdown() -> str:
    p = serve_parser()
    actions = [a for a in p._actions if not isinstance(a, argparse._HelpAction)]
    by_dest: dict[str, list[argparse.Action]] = {}
    for a in actions:
        by_dest.setdefault(a.dest, []).append(a)
    placed = set()
    out = []
    topics = list(TOPICS) + [("Other options", [d for d in by_dest if not any(d in t for _, t in TOPICS)])]
    for title, dests in topics:
        rows = []
        for d in dests:
            for a in by_dest.get(d, []):
                placed.add(id(a))
                names = ", ".join(f"`{o}`" for o in a.option_strings) or f"`{a.dest.upper()}` (positional)"
                anchor = (a.option_strings[0].lstrip("-") if a.option_strings else a.dest)
                value = ""
                if a.choices:
                    value = " " + "\\|".join(f"`{c}`" for c in a.choices)
                elif a.nargs != 0 and a.option_strings:
                    value = f" `{a.metavar or ('N' if a.type in (int, float) else 'VALUE')}`"
                meaning, default = split_help(a)
                if isinstance(a, argparse._AppendAction):
                    meaning += " (repeatable)" if "repeatable" not in meaning else ""
                rows.append(f'| <span id="{anchor}"></span>{names}{value} | {esc(default)} | {esc(meaning)} |')
        if rows:
            out += [f"## {title}", "", "| option | default | meaning |", "| --- | --- | --- |"] + rows + [""]
    missing = [a for a in actions if id(a) not in placed]
    assert not missing, f"options left out of the Settings page: {[a.option_strings for a in missing]}"
    return "\n".join(out)


def lists(markdown: str) -> str:
    """GitHub's Markdown starts a list right after a paragraph and nests items indented by
    two spaces; Python-Markdown wants a blank line before a list and four spaces. Pages
    included from elsewhere in the repository (the server's DESIGN.md) are written for
    GitHub: give them what Python-Markdown wants (outside code blocks)."""
    out: list[str] = []
    fence = False
    for line in markdown.split("\n"):
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence:
            if re.match(r"^  [-*] ", line):
                line = "  " + line
            elif re.match(r"^[-*] |^\d+\. ", line) and out and out[-1].strip() \
                    and not re.match(r"^([-*] |\d+\. |\s|\|)", out[-1]) and not out[-1].startswith("#"):
                out.append("")
        out.append(line)
    return "\n".join(out)


def include_markdown(markdown: str) -> str:
    """A page that is another Markdown file of the repository (`--8<-- "path.md"` alone on a
    line) gets it here, before lists() (pymdownx.snippets would include it after the hooks)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def read(m):
        with open(os.path.join(root, m.group(1)), encoding="utf-8") as f:
            return f.read()
    return re.sub(r'^--8<-- "([^"]+\.md)"$', read, markdown, flags=re.M)


def on_page_markdown(markdown: str, page, config, files) -> str:
    markdown = include_markdown(markdown)
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, options_markdown())
    return lists(markdown)
