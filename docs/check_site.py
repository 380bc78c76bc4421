#!/usr/bin/env python3
"""The built manual, looked at in a real browser: build the site (mkdocs build --strict),
serve it on loopback, load every page in headless Chromium (Debian's `chromium`, driven by
Playwright's Python package) and fail on a page error, a console error, a request that fails
or leaves the machine, a broken internal link or anchor; then type "timeout-keep-alive" into
the search box and expect the Settings page among the results.

    python3 docs/check_site.py [--no-build] [--screenshots DIR]

make docs-check runs it (and installs chromium when missing).
"""
from __future__ import annotations

import argparse
import functools
import html.parser
import http.server
import os
import subprocess
import sys
import tempfile
import threading
import urllib.parse

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SITE = os.path.join(REPO, "build", "site")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class Links(html.parser.HTMLParser):
    """The ids and the links of one page."""

    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])
        if tag in ("img", "script") and a.get("src"):
            self.hrefs.append(a["src"])
        if tag == "link" and a.get("href"):
            self.hrefs.append(a["href"])


def pages(site: str) -> list[str]:
    out = []
    for root, _, files in os.walk(site):
        for f in files:
            if f == "index.html":
                out.append(os.path.relpath(os.path.join(root, f), site))
    return sorted(out)


def parse(site: str, rel: str) -> Links:
    p = Links()
    with open(os.path.join(site, rel), encoding="utf-8") as f:
        p.feed(f.read())
    return p


def check_links(site: str) -> list[str]:
    """Every internal link and anchor of every page points at something that exists."""
    problems = []
    parsed = {rel: parse(site, rel) for rel in pages(site)}
    for rel, p in parsed.items():
        base = "/" + rel
        for href in p.hrefs:
            u = urllib.parse.urlparse(urllib.parse.urljoin(base, href))
            if u.scheme or u.netloc:  # another site's: not ours to check (and no network)
                continue
            path = urllib.parse.unquote(u.path).lstrip("/")
            target = os.path.join(site, path)
            if os.path.isdir(target) or path == "" or path.endswith("/"):
                target = os.path.join(target, "index.html")
            if not os.path.exists(target):
                problems.append(f"{rel}: broken link {href}")
                continue
            if u.fragment and target.endswith(".html"):
                trel = os.path.relpath(target, site)
                ids = parsed[trel].ids if trel in parsed else parse(site, trel).ids
                if urllib.parse.unquote(u.fragment) not in ids:
                    problems.append(f"{rel}: broken anchor {href}")
    return problems


def serve(site: str):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass
    handler = functools.partial(Quiet, directory=site)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def check_browser(site: str, shots: str | None) -> list[str]:
    from playwright.sync_api import sync_playwright
    problems: list[str] = []
    srv = serve(site)
    origin = f"http://127.0.0.1:{srv.server_address[1]}"
    with tempfile.TemporaryDirectory(prefix="docs-check-") as profile, sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, headless=True,
                                                    args=FLAGS, viewport={"width": 1280, "height": 900})
        current = {"page": ""}

        def outside(route):
            problems.append(f"{current['page']}: a request leaves the machine: {route.request.url}")
            route.abort()
        ctx.route(lambda url: not url.startswith(origin), outside)
        page = ctx.new_page()
        page.on("console", lambda m: m.type == "error" and problems.append(
            f"{current['page']}: console error: {m.text}"))
        page.on("pageerror", lambda e: problems.append(f"{current['page']}: page error: {e}"))
        # ERR_ABORTED: cut off by the next navigation (a favicon still loading); a file that
        # is missing is a 404, caught below
        page.on("requestfailed", lambda r: r.url.startswith(origin) and "ERR_ABORTED" not in (r.failure or "")
                and problems.append(f"{current['page']}: request failed: {r.url} ({r.failure})"))
        page.on("response", lambda r: r.url.startswith(origin) and r.status >= 400 and problems.append(
            f"{current['page']}: {r.status} for {r.url}"))
        for rel in pages(site):
            url = origin + "/" + rel[: -len("index.html")]
            current["page"] = url
            resp = page.goto(url, wait_until="networkidle")
            if resp is None or resp.status != 200:
                problems.append(f"{url}: status {resp and resp.status}")
            if not page.title():
                problems.append(f"{url}: no title")
            if shots and rel in ("index.html", "settings/index.html", "performance/index.html"):
                os.makedirs(shots, exist_ok=True)
                page.screenshot(path=os.path.join(shots, rel.replace("/", "_").replace(".html", ".png")),
                                full_page=False)
        # the search box: open it, type, and wait for Material's search worker to answer
        current["page"] = origin + "/ (search)"
        page.goto(origin + "/", wait_until="networkidle")
        page.keyboard.press("/")  # Material's shortcut: opens and focuses the search box
        page.wait_for_selector("input.md-search__input:focus")
        page.keyboard.type("timeout-keep-alive")
        # (the worker answers each prefix as it is typed: what it lists first may be the answer
        # to "timeout k"; wait for the Settings page among the results, not for any result)
        try:
            page.wait_for_function(
                "() => [...document.querySelectorAll('.md-search-result__item a')]"
                ".some(a => a.href.includes('/settings/'))", timeout=30000)
        except Exception:  # noqa: BLE001 (reported as a problem)
            hrefs = page.eval_on_selector_all(".md-search-result__item a", "els => els.map(e => e.href)")
            problems.append(f"search: timeout-keep-alive does not find the Settings page: {hrefs}")
        if shots:
            page.screenshot(path=os.path.join(shots, "search.png"))
        ctx.close()
    srv.shutdown()
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-build", action="store_true", help="check build/site as it is")
    ap.add_argument("--screenshots", metavar="DIR", help="save screenshots of a few pages here")
    args = ap.parse_args(argv)
    if not args.no_build:
        subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet"], cwd=REPO, check=True,
                       env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    if not os.path.exists(CHROMIUM):
        print(f"{CHROMIUM} is missing: apt-get install chromium (make docs-check does)", file=sys.stderr)
        return 2
    problems = check_links(SITE) + check_browser(SITE, args.screenshots)
    for p in problems:
        print(p, file=sys.stderr)
    n = len(pages(SITE))
    print(f"docs-check: {n} pages, {'no problem' if not problems else f'{len(problems)} problems'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
