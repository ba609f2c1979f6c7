# Two entry points for a fresh machine: `make demo` (the main job end to end) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test docs generate clean

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# tensorflow-cpu: the CPU build for the tests; lightning: the `lightning.pytorch` namespace, so the
	# callback is tested with both Lightning packages installed side by side. DS_BUILD_OPS=0: DeepSpeed
	# installs as pure Python (its ops compile on first use, and the tests use none).
	DS_BUILD_OPS=0 $(BIN)/pip install --quiet -c constraints.txt -e '.[dev,docs,fast,torch,lightning,keras,signing,registry,dask,s3,deepspeed,transformers,accelerate,html]' tensorflow-cpu lightning
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py demo-output

test: $(STAMP)
	$(BIN)/ckptspec schema --check
	$(BIN)/python -m pytest -q
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir build/site

docs: $(STAMP)
	$(BIN)/mkdocs serve

# Regenerate what is derived from the code: published schemas, schema reference pages, rule pages.
generate: $(STAMP)
	$(BIN)/ckptspec schema --write
	$(BIN)/python -m ckptspec._models.construct --write
	$(BIN)/python -m ckptspec.cli._plan_from_click --write
	for kind in spec manifest; do $(BIN)/ckptspec schema --kind $$kind --format markdown > docs/reference/$$kind.md; done
	$(BIN)/python -m ckptspec.checks._docs docs/rules

clean:
	rm -rf $(VENV) build site demo-output .pytest_cache
