# deltasink developer commands. Everything installs into .venv/ in the repo root.
#   make demo    set up (if needed) and run the quickstart job on the embedded engine
#   make test    set up (if needed) and run the whole test suite
#   make lint    ruff + mypy
#   make bench   benchmarks (see bench/README.md)
#   make test-spark35   the PySpark 3.5 suite (Databricks 14.3-15.4 LTS), in .venv-spark35/

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.deltasink-installed

VENV35    := .venv-spark35
PYSPARK35 := 3.5.9
STAMP35   := $(VENV35)/.deltasink-installed-pyspark-$(PYSPARK35)

.PHONY: setup demo test test-spark35 lint fmt check clean bench

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[embedded,dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) jobs/quickstart.py

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

# PySpark 3.5 (Databricks 14.3-15.4 LTS, most OSS clusters). Two runs, one JVM at a time:
#  1. a classic 3.5 session feeding the embedded (delta-rs) engine (tests/spark35; 3.5 has
#     no DataFrame.toArrow and no Spark Connect client for Sail), then the spark engine on
#     Delta 3.3.3 (../shared/delta-spark-3.5/) in a foreachBatch stream killed and
#     restarted (tests/test_stream_soak.py) and the streaming template
#     (jobs/streaming_upsert_databricks.py);
#  2. the spark engine's contract and oracle property suite on Delta 3.3.3, one session.
# pyspark 3.5.9: the newest 3.5 release, the one Delta 3.3.3's jars were verified with
# (built against Spark 3.5.6; Spark keeps 3.5.x patch releases binary compatible).
SPARK35_TESTS := tests/spark35 tests/test_stream_soak.py \
	tests/test_jobs.py::test_databricks_streaming_template_on_classic_pyspark
$(STAMP35): pyproject.toml
	test -x $(VENV35)/bin/python || $(PYTHON) -m venv $(VENV35)
	$(VENV35)/bin/python -m pip install --quiet --upgrade pip
	$(VENV35)/bin/python -m pip install --quiet "pyspark==$(PYSPARK35)" "pandas>=2.2,<3" -e ".[dev]"
	touch $(STAMP35)

test-spark35: $(STAMP35)
	$(VENV35)/bin/python -m pytest $(SPARK35_TESTS) $(PYTEST_ARGS)
	$(VENV35)/bin/python -m pytest tests/test_contract_spark.py $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check deltasink tests jobs bench tools
	$(VENV)/bin/ruff format --check deltasink tests jobs bench tools
	$(VENV)/bin/mypy

fmt: $(STAMP)
	$(VENV)/bin/ruff check --fix deltasink tests jobs bench tools
	$(VENV)/bin/ruff format deltasink tests jobs bench tools

check: lint test

# Benchmarks: `make bench` (about 15-20 min once bench/out/cache holds P4's 10,000-batch
# history; the first run builds it, over an hour; writes docs/benchmarks.md and .png), or
# `make bench BENCH_ARGS=--quick` (under 2 min; writes bench/out/benchmarks-quick.md).
bench: $(STAMP)
	$(PY) -m bench.run $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(VENV35) .pytest_cache .mypy_cache .ruff_cache *.egg-info
