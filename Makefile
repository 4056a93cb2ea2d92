# deltasink developer commands. Everything installs into .venv/ in the repo root.
#   make demo    set up (if needed) and run the quickstart job on the embedded engine
#   make test    set up (if needed) and run the test suite (7 min 27 s on 2 cores, measured alone)
#   make test-delta-spark   the rest of the delta-spark suite (CI runs it too)
#   make lint    ruff + mypy
#   make docs    the reference site (API and CLI, from the docstrings) into build/docs/
#   make bench   benchmarks (see bench/README.md)
#   make test-spark35   the PySpark 3.5 suite (Databricks 14.3-15.4 LTS), in .venv-spark35/
#   make test-connect   the spark engine through a local Spark Connect server with Delta
#   make test-cluster   the spark engine on a Spark standalone cluster (master, two workers)
#   make test-s3        the spark engine on S3 (s3a://, a moto server), on PySpark 3.5

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.deltasink-installed

VENV35    := .venv-spark35
PYSPARK35 := 3.5.9
STAMP35   := $(VENV35)/.deltasink-installed-pyspark-$(PYSPARK35)

.PHONY: setup demo test test-generated test-zoo test-delta-spark test-connect test-cluster test-spark35 test-s3 lint docs fmt check clean bench

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

# The generated suites (predicate grammar, writer model, stream lifecycles, table zoo;
# marker `generated`) with a fresh seed, printed first and last with the command that repeats
# it (DELTASINK_SEED=<seed> make test-generated), and each suite's CI count of cases
# instead of make test's fixed-seed sample. tests/generated.py has the conventions.
test-generated: $(STAMP)
	DELTASINK_GENERATED=ci $(PY) -m pytest -m "generated and not connect" $(PYTEST_ARGS)

# The table zoo alone (tests/test_table_zoo.py): 300 generated tables, modes and batches
# through both engines and plain delta-spark, a fresh seed (printed; DELTASINK_SEED
# repeats it); about 20 min on 2 cores. ZOO_CASES sets the count; the report (counts,
# every difference) goes to bench/out/zoo.json, which `python -m tools.zoo_matrix
# bench/out/zoo.json` turns into docs/deploy.md's matrix.
ZOO_CASES ?= 300
test-zoo: $(STAMP)
	mkdir -p bench/out
	DELTASINK_GENERATED=ci DELTASINK_ZOO_CASES=$(ZOO_CASES) DELTASINK_ZOO_REPORT=bench/out/zoo.json \
		$(PY) -m pytest -m "" tests/test_table_zoo.py $(PYTEST_ARGS)

# The delta-spark tests `make test` leaves out (marked delta_spark_full: the contract
# again with Spark reading the logs, the remaining fault points, shapes and key types,
# the planned streaming soak). Two processes side by side, one per core: the suite on
# one classic JVM session, and the tests that start JVMs of their own (whose output
# follows). docs/reliability.md has the times.
DELTA_SPARK_SUITE := tests/test_contract_spark.py tests/test_stream_reset_jvm.py \
	tests/test_any_writer.py tests/test_table_constraints.py tests/test_compaction_spark.py \
	tests/test_computed_columns.py tests/test_timestamps_jvm.py tests/test_migrating.py
DELTA_SPARK_JVMS  := tests/test_stream_soak.py \
	tests/test_streaming_jvm.py tests/test_jobs.py tests/test_cli.py

test-delta-spark: $(STAMP)
	@log=$$(mktemp); \
	$(PY) -m pytest -m delta_spark_full $(DELTA_SPARK_JVMS) $(PYTEST_ARGS) > $$log 2>&1 & pid=$$!; \
	$(PY) -m pytest -m delta_spark_full $(DELTA_SPARK_SUITE) $(PYTEST_ARGS); rc=$$?; \
	wait $$pid || rc=1; cat $$log; rm -f $$log; exit $$rc

# The spark engine through a real Spark Connect server (PySpark's own, with the Delta
# jars of ../shared/delta-spark/ or DELTASINK_DELTA_JARS) started on 127.0.0.1 by the
# tests: serverless and standard access mode, minus Unity Catalog. Deselected from
# `make test` by the `-m "not connect"` in pyproject.toml's addopts; this selects it.
test-connect: $(STAMP)
	$(PY) -m pytest -m connect tests/test_connect.py $(PYTEST_ARGS)

# The spark engine on a real Spark standalone cluster (tests/test_cluster.py): the tests
# start a master and two workers on 127.0.0.1 with PySpark's own bin/spark-class (separate
# JVMs, 1 GiB each; every application gets two executor JVMs whose Python workers cannot
# import deltasink) and always stop them, also on failure (tests/cluster.py). Every merge
# mode, SCD2, coalesced commits, a quarantined version, `deltasink --spark recover`, two
# applications racing, a foreachBatch stream whose driver is SIGKILLed and restarted;
# each against the oracle. Delta's jars as make test-delta-spark finds them. Deselected
# from `make test` by the addopts' `not cluster`; this selects it.
test-cluster: $(STAMP)
	$(PY) -m pytest -m cluster tests/test_cluster.py $(PYTEST_ARGS)

# PySpark 3.5 (Databricks 14.3-15.4 LTS, most OSS clusters). Two runs, one JVM at a time:
#  1. a classic 3.5 session feeding the embedded (delta-rs) engine (tests/spark35; 3.5 has
#     no DataFrame.toArrow and no Spark Connect client for Sail), then the spark engine on
#     Delta 3.3.3 (../shared/delta-spark-3.5/) in a foreachBatch stream killed and
#     restarted (tests/test_stream_soak.py) and the streaming template
#     (jobs/streaming_upsert_databricks.py);
#  2. the spark engine's contract and oracle property suite on Delta 3.3.3, one session.
# Both take the whole delta-spark suite (-m "not connect" overrides the addopts that
# leave the delta_spark_full tests to make test-delta-spark on 4.x).
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
	$(VENV35)/bin/python -m pytest -m "not connect" $(SPARK35_TESTS) $(PYTEST_ARGS)
	$(VENV35)/bin/python -m pytest -m "not connect" tests/test_contract_spark.py $(PYTEST_ARGS)

# The spark engine on S3 (tests/test_s3_spark.py): PySpark 3.5 and Delta 3.3.3 with
# Hadoop's S3A connector, on a moto S3 server the tests start on 127.0.0.1, one classic
# session: the single-driver LogStore refused by name and opted in, upserts, a replay,
# fencing, a recovered pre-commit, the CLI with --spark (status, recover, history,
# offsets, gc), delta-rs and Spark reading back the same rows and txn markers on s3a://
# and s3://. The S3A jars of Spark 3.5's Hadoop line (hadoop-aws 3.3.1, the AWS SDK
# bundle 1.11.901) ship inside the PyPI package sagemaker-pyspark: its archive is
# downloaded once (hash pinned, nothing installed) and the two jars unpacked into
# build/s3a-jars/ (git-ignored). No registry package was found with Spark 4's (Hadoop
# 3.4, AWS SDK v2): the S3 part runs on the 3.5 line. Delta's S3DynamoDBLogStore ships
# in none: its racing-writers test skips unless DELTASINK_S3_DYNAMODB_JAR names the jar.
# Deselected from `make test` by the addopts' `not spark_s3`; this selects it.
SAGEMAKER_PYSPARK := 1.4.5
SAGEMAKER_SHA256  := 05ca2d5081d7138ce29a8fb0a9cba077f28c825288ed07aed46a82e63c0bf1fb
S3A_JARS  := build/s3a-jars
S3A_STAMP := $(S3A_JARS)/.sagemaker-pyspark-$(SAGEMAKER_PYSPARK)
S3A_FROM  := sagemaker_pyspark-$(SAGEMAKER_PYSPARK)/deps/jars
$(S3A_STAMP): | $(STAMP35)
	rm -rf $(S3A_JARS) && mkdir -p $(S3A_JARS)/dist
	echo "sagemaker-pyspark==$(SAGEMAKER_PYSPARK) --hash=sha256:$(SAGEMAKER_SHA256)" \
		> $(S3A_JARS)/dist/requirements.txt
	$(VENV35)/bin/python -m pip download --quiet --no-deps --require-hashes \
		-r $(S3A_JARS)/dist/requirements.txt -d $(S3A_JARS)/dist
	tar -xzf $(S3A_JARS)/dist/sagemaker_pyspark-$(SAGEMAKER_PYSPARK).tar.gz -C $(S3A_JARS) \
		--strip-components=3 $(S3A_FROM)/hadoop-aws-3.3.1.jar \
		$(S3A_FROM)/aws-java-sdk-bundle-1.11.901.jar
	rm -rf $(S3A_JARS)/dist
	touch $(S3A_STAMP)

test-s3: $(STAMP35) $(S3A_STAMP)
	$(VENV35)/bin/python -m pytest -m spark_s3 tests/test_s3_spark.py $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check deltasink tests jobs bench tools
	$(VENV)/bin/ruff format --check deltasink tests jobs bench tools
	$(VENV)/bin/mypy

# The reference site: Sphinx over the docstrings (docs/reference/), warnings as errors,
# no network at build time (no intersphinx). Installs the `docs` extra once.
DOCS_STAMP := $(VENV)/.deltasink-docs-installed
$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e ".[embedded,dev,docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	rm -rf build/docs
	$(PY) -m sphinx -W --keep-going -q -b html docs/reference build/docs
	@echo "reference site: build/docs/index.html"

fmt: $(STAMP)
	$(VENV)/bin/ruff check --fix deltasink tests jobs bench tools
	$(VENV)/bin/ruff format deltasink tests jobs bench tools

check: lint test

# Benchmarks: `make bench` (about 15-20 min once bench/out/cache holds P4's 10,000-batch
# history; the first run builds it, over an hour; writes docs/benchmarks.md and .png), or
# `make bench BENCH_ARGS=--quick` (under 2 min; writes bench/out/benchmarks-quick.md).
# Not in the default set: `make bench BENCH_ARGS='--only size --splice'` (a Spark
# standalone cluster, 10M-row targets, about an hour; bench/README.md, "size").
bench: $(STAMP)
	$(PY) -m bench.run $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(VENV35) $(S3A_JARS) .pytest_cache .mypy_cache .ruff_cache *.egg-info
