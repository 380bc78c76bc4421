# goloop: `make demo` and `make test` set everything up on a fresh machine and run.
PY      ?= python3
GO      ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
PIP     := $(PY) -m pip --disable-pip-version-check -q
export PATH := $(dir $(GO)):$(PATH)
PYINC   := $(shell $(PY) -c 'import sysconfig;print(sysconfig.get_paths()["include"])')
export CGO_CFLAGS := -I$(PYINC) -O2
export CGO_LDFLAGS := -Wl,--unresolved-symbols=ignore-all
FUZZTIME ?= 20s

.PHONY: all setup deps bench-deps build test test-go test-py test-cpython bench demo fuzz vet clean

all: build

# Python-side tools the build and the tests need, from the project's own declarations.
deps:
	$(PIP) install setuptools wheel
	$(PIP) install pytest pytest-timeout httptools uvicorn cryptography
	$(GO) mod download

# The rivals the benchmarks compare against, and the HTTP load generator.
bench-deps:
	$(PIP) install uvloop httptools
	@command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; } || echo "wrk not installed: HTTP benchmarks will be skipped"

# Compile the Go engine into goloop/_goloop*.so and install goloop in editable mode.
build: deps
	$(PIP) install --no-build-isolation -e .

setup: build

vet:
	$(GO) vet ./goloop/... ./tests_go/... ./bench/...

test-go:
	$(GO) test -count=1 ./tests_go/...

test-py: build
	$(PY) -P -m pytest -q tests_py

# CPython's own asyncio test suite, pointed at goloop (see tests_py/cpython_suite.py).
test-cpython: build
	$(PY) tests_py/cpython_suite.py

test: build vet test-go test-py test-cpython

fuzz:
	@for f in $$($(GO) test -list 'Fuzz.*' ./tests_go/ | grep ^Fuzz); do \
	  echo "== $$f"; $(GO) test ./tests_go/ -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; done

bench: build bench-deps
	$(PY) bench/run.py --write BENCHMARKS.md

demo: build bench-deps
	$(PY) bench/run.py --quick

clean:
	rm -rf build dist *.egg-info pyshim/goloop/_goloop*.so pyshim/goloop/_goloop*.h bench/.bin
