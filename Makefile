# miiii: `make train` and `make test` set up .venv themselves on a fresh clone.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
PRESET  ?= nanda-cpu
ARGS    ?=
RUN     ?=
TIME    := $(shell date +%Y%m%d-%H%M%S)

.PHONY: help install install-gpu doctor gpu-check train train-nanda train-miiii train-miiii-masked train-miiii-basis \
        train-addition train-reversal train-tiny train-miiii-cpu miiii-cpu-search test test-multihost test-studies headline lint presets bench clean figures paper paper-cpu report results \
        book book-smoke book-findings train-addition-10 export-adder adderboard adder-41 adder-32 adder-32-preset test-tl test-notebook stability ladder timings \
        disputes llc-transition

HELP_WIDTH ?= 100
help:  ## list the targets, each description wrapped at HELP_WIDTH=100 columns
	@grep -E '^[a-zA-Z0-9_-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' -v width=$(HELP_WIDTH) '{ \
	  n = split($$2, w, " "); line = sprintf("  %-20s", $$1); len = 22; \
	  for (i = 1; i <= n; i++) { if (len + 1 + length(w[i]) > width && len > 22) { print line; line = sprintf("%22s", ""); len = 22 } \
	    line = line " " w[i]; len += 1 + length(w[i]) } print line }'

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)  ## create .venv and install miiii with its dev tools (CPU JAX)

install-gpu: $(STAMP)  ## the CUDA build of the installed (tested) jax for this driver (>= 580: CUDA 13, >= 525: 12; CUDA=12|13 overrides; DRY_RUN=1 prints the pip commands); exit 2 unless JAX then runs on the GPU
	$(BIN)/python -m miiii.gpu $(if $(CUDA),--cuda $(CUDA)) $(if $(DRY_RUN),--dry-run)

doctor: $(STAMP)  ## Python, jax and its CUDA plugins, backend and devices, driver, compile cache, free disk; exit 1 with the reasons when something is off
	$(BIN)/python -m miiii doctor

# `make gpu-check`: everything a GPU box proves, in order, each timed (DRY_RUN=1 prints the commands). The bench's
# PyTorch references on CUDA need a CUDA build of torch: TORCH_GPU_INDEX is PyTorch's index of one.
TORCH_GPU_INDEX ?= https://download.pytorch.org/whl/cu126
GPU_CHECK := "$(MAKE) doctor" "$(MAKE) test" \
  "$(MAKE) bench TORCH_INDEX=$(TORCH_GPU_INDEX) ARGS='--torch-device cuda --out results/bench/bench-gpu.json'" \
  "$(MAKE) paper SEEDS=3 ARGS='--out results/paper'" "$(MAKE) paper SEEDS=3 VARIANT=original ARGS='--out results/paper-original'"
gpu-check: $(STAMP)  ## on a GPU box: doctor, test, bench (PyTorch on CUDA: results/bench/bench-gpu.json), paper SEEDS=3 both variants (results/paper, results/paper-original), each timed; DRY_RUN=1 prints them
	@for c in $(GPU_CHECK); do \
	  echo "gpu-check: $$c"; [ -n "$(DRY_RUN)" ] && continue; \
	  s=$$(date +%s); sh -c "$$c" || { echo "gpu-check: failed after $$(( $$(date +%s) - s )) s: $$c"; exit 1; }; \
	  echo "gpu-check: $$(( $$(date +%s) - s )) s: $$c"; \
	done

train: $(STAMP)  ## train the default preset (nanda-cpu: groks in minutes on a CPU); PRESET=… ARGS=…
	$(BIN)/python -m miiii train --preset $(PRESET) $(ARGS)

train-nanda: $(STAMP)  ## Nanda et al.'s modular addition, p = 113 (GPU scale)
	$(BIN)/python -m miiii train --preset nanda $(ARGS)

train-miiii: $(STAMP)  ## the paper's 29-task run, p = 113, 65,536 steps (GPU scale)
	$(BIN)/python -m miiii train --preset miiii $(ARGS)

train-miiii-cpu: $(STAMP)  ## miiii on a CPU: the paper's recipe at p = 53 (15 tasks), d 96, 25k steps, the search's setting that groks every task (results/miiii-cpu/results.md: odds and minutes)
	$(BIN)/python -m miiii train --preset miiii-cpu $(ARGS)

miiii-cpu-search: $(STAMP)  ## the search behind miiii-cpu (runs/miiii-cpu-search/, reused; each setting's command and time in results/miiii-cpu/results.md); OUT=results/miiii-cpu rewrites the bundle
	$(BIN)/python -m experiments.miiii_cpu --out $(or $(OUT),runs/miiii-cpu) $(ARGS)

train-miiii-masked: $(STAMP)  ## miiii with q in {2,3,5,7} out of the loss
	$(BIN)/python -m miiii train --preset miiii-masked $(ARGS)

train-miiii-basis: $(STAMP)  ## miiii with shuffled labels (baseline)
	$(BIN)/python -m miiii train --preset miiii-basis $(ARGS)

train-addition: $(STAMP)  ## the book's 3-digit adder (17,760 params), then its edge cases; full batch: ARGS="--set train.batch_size=0"
	$(BIN)/python -m miiii train --preset addition --run-dir $(or $(RUN),runs/addition-$(TIME)) $(ARGS)
	$(BIN)/python -m miiii book $(or $(RUN),runs/addition-$(TIME))

train-reversal: $(STAMP)  ## the book's 5-digit reversal, then its checks
	$(BIN)/python -m miiii train --preset reversal --run-dir $(or $(RUN),runs/reversal-$(TIME)) $(ARGS)
	$(BIN)/python -m miiii book $(or $(RUN),runs/reversal-$(TIME))

train-addition-10: $(STAMP)  ## a 10-digit adder (AdderBoard), exported to runs/…/adder10.py
	$(BIN)/python -m miiii train --preset addition-10 --run-dir $(or $(RUN),runs/addition-10-$(TIME)) $(ARGS)
	$(BIN)/python -m miiii book $(or $(RUN),runs/addition-10-$(TIME))
	$(BIN)/python -m miiii export-adder $(or $(RUN),runs/addition-10-$(TIME)) $(or $(RUN),runs/addition-10-$(TIME))/adder10.py

export-adder: $(STAMP)  ## RUN=run_dir OUT=file.py: a trained addition run as a numpy-only AdderBoard module
	$(BIN)/python -m miiii export-adder $(RUN) $(OUT)

adderboard: $(STAMP)  ## the AdderBoard search (experiments/adderboard/): sweeps of small decoders in runs/adder/, exports and verifier scores; OUT=results/adderboard rewrites the bundle
	$(BIN)/python -m experiments.adderboard.study --out $(or $(OUT),runs/adderboard) $(ARGS)

# a run below the export bar (0.99 held out) has no submission file: say so, not "no such file", before comparing
exported = @test -e $(1)/submissions/$(2) || { echo "$(2) was not written: its run ended below 0.99 exact match on the held-out pairs, so it was not exported (its row in $(1)/results.md)" >&2; exit 1; }

# the 32's last round, 32p-b36, is the last of experiments/adderboard/settings.py's ROUNDS_32 (its 1e-3 chain) and
# the committed file's name: a chain given more rounds names its new last round here too
R32 = $(or $(RUN),runs/adder-32)
adder-32: $(STAMP)  ## the committed 32-parameter adder trained again from the committed 41's submission (restore.py, then study --only 32p-b36 --with-deps: 23 runs in RUN=runs/adder-32, one XLA thread as trained; each run's time: results/adderboard/results.md), its export compared with the committed one; stopped, the same command goes on where it stopped
	test -e $(R32)/41a1-m7-b17 || $(BIN)/python -m experiments.adderboard.restore results/adderboard/submissions/adder-41p-41a1-m7-b17.py --runs $(R32)
	XLA_FLAGS='--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1' $(BIN)/python -m experiments.adderboard.study --runs $(R32) --only 32p-b36 --with-deps --out $(R32)-bundle $(ARGS)
	$(call exported,$(R32)-bundle,adder-32p-32p-b36.py)
	cmp $(R32)-bundle/submissions/adder-32p-32p-b36.py results/adderboard/submissions/adder-32p-32p-b36.py && echo "$(R32)-bundle/submissions/adder-32p-32p-b36.py is the committed 32, byte for byte"

# a 32 from a preset's seeds: adder-41-screened's three phases, its 41 written as 32 by gauge.py (no training step)
R32P = $(or $(RUN),runs/adder-32-preset)
adder-32-preset: $(STAMP)  ## a 32-parameter adder from a preset's seeds: the preset adder-41-screened trained into RUN=runs/adder-32-preset/41 (its phases' times: results/adderboard/results.md; stopped, the same command goes on), its 41 written as 32 by experiments/adderboard/gauge.py (every argmax the 41's), exported to RUN/adder32.py and scored on the verifier's cases
	$(BIN)/python -m miiii train --preset adder-41-screened --run-dir $(R32P)/41 $(ARGS)
	test -e $(R32P)/32 || $(BIN)/python -m experiments.adderboard.gauge $(R32P)/41/phase-3 --out $(R32P)/32 --head-free --temperature
	$(BIN)/python -m miiii export-adder $(R32P)/32 $(R32P)/adder32.py
	$(BIN)/python -m experiments.adderboard $(R32P)/adder32.py

# the 41's lineage: its screen's seeds (41-start-angle1), the long stages and 17 targeted rounds, 26 settings
R41 = $(or $(RUN),runs/adder-41)
adder-41: $(STAMP)  ## the committed 41-parameter adder trained again from its screen's seed (study --only 41a1-m7-b17 --with-deps: 26 settings in RUN=runs/adder-41, one XLA thread as trained; hours, each setting's time: results/adderboard/results.md), its export's weights compared with the committed file's (sameweights.py; the text differs where the exporter has changed); stopped, the same command goes on where it stopped
	XLA_FLAGS='--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1' $(BIN)/python -m experiments.adderboard.study --runs $(R41) --only 41a1-m7-b17 --with-deps --out $(R41)-bundle $(ARGS)
	$(call exported,$(R41)-bundle,adder-41p-41a1-m7-b17.py)
	$(BIN)/python -m experiments.adderboard.sameweights $(R41)-bundle/submissions/adder-41p-41a1-m7-b17.py results/adderboard/submissions/adder-41p-41a1-m7-b17.py

book: $(STAMP)  ## the book replicated: 5 runs, figures, results/book/book_results.md (hours on 2 CPU cores)
	$(BIN)/python -m experiments.book $(ARGS)

book-smoke: $(STAMP)  ## the same outputs from tiny runs in CPU minutes (results/book-smoke)
	$(BIN)/python -m experiments.book --smoke $(ARGS)

book-findings: $(STAMP)  ## the book's attention, embedding, ablation and lr claims judged over 3 seeds (six sweeps in runs/book-findings, reused; each sweep's wall time is in findings.md's provenance table): results/book/findings.md
	$(BIN)/python -m experiments.book.findings $(ARGS)

train-tiny: $(STAMP)  ## all four CPU-sized presets, one after another
	for p in nanda-tiny miiii-tiny addition-tiny reversal-tiny; do $(BIN)/python -m miiii train --preset $$p $(ARGS) || exit 1; done

headline: $(STAMP)  ## rewrite results/README.md's findings table and README.md's summary of it from the committed bundles; a test checks both
	$(BIN)/python -m experiments.headline

figures: $(STAMP)  ## draw every paper figure the runs support: make figures RUN="runs/a runs/b" [OUT=figures]
	@test -n "$(RUN)" || { echo 'error: give run directories: make figures RUN="runs/nanda runs/miiii"'; exit 2; }
	$(BIN)/python -m miiii figures $(RUN) --out $(or $(OUT),figures)

SEEDS ?= 1
VARIANT ?= project
paper: $(STAMP)  ## the paper's six runs at full scale (GPU; SEEDS=N more seeds as one sweep; VARIANT=original: the original code's choices), figures, results.md into runs/paper[-original]/ (a scratch folder; ARGS="--out results/paper" for the committed bundle)
	$(BIN)/python -m experiments.paper --seeds $(SEEDS) --variant $(VARIANT) $(ARGS)

paper-cpu: $(STAMP)  ## the same pipeline at CPU scale (miiii-cpu's recipe: p = 53, d 96, 25k steps; every seed recorded; results.md's provenance says how long) into runs/paper-cpu[-original]/; `make results` rewrites the committed bundles
	$(BIN)/python -m experiments.paper --smoke --seeds $(SEEDS) --variant $(VARIANT) $(ARGS)

PAPER_BUNDLES := results/paper-cpu results/paper-cpu-original results/paper results/paper-original
report: $(STAMP)  ## regenerate every bundle's tables from its committed records (results.md, the book's tables; seconds, no training)
	$(BIN)/python -m experiments.paper.report $(PAPER_BUNDLES)
	$(BIN)/python -m experiments.book.bundle results/book --figures
	$(BIN)/python -m experiments.stability.bundle results/stability
	$(BIN)/python -m experiments.paper.ladder --bundle results/paper-cpu/ladder
	for s in $(DISPUTES); do test ! -f results/$$s/summaries/runs.json || $(BIN)/python -m experiments.$$s --bundle-only || exit 1; done
	test ! -f results/llc_transition/summaries/llc.json || $(BIN)/python -m experiments.llc_transition --bundle-only

timings: $(STAMP)  ## each CPU preset's time, measured in a fresh process with the compile cache off (on idle cores): OUT=results/timings rewrites the record `make presets` prints
	$(BIN)/python -m experiments.timings --out $(or $(OUT),runs/timings-bundle) $(ARGS)

ladder: $(STAMP)  ## the scale ladder: miiii-cpu at p = 37, 47, 53, 59, 71 (3 seeds each, p = 71 the miiii-cpu search's setting G with 5; sweeps in runs/ladder/, reused), the paper's numbers against p; OUT=results/paper-cpu/ladder rewrites the bundle
	$(BIN)/python -m experiments.paper.ladder --out $(or $(OUT),runs/ladder-bundle) $(ARGS)

stability: $(STAMP)  ## Prieto et al.'s numerical-stability claims, 3 seeds per setting unless SEEDS=N is given (sweeps in runs/stability/, reused; ~40 min on 2 CPU cores): results/stability/
	$(BIN)/python -m experiments.stability --out results/stability $(if $(filter command line,$(origin SEEDS)),--seeds $(SEEDS)) $(ARGS)

# the original code's variant: the roles its definitions (init, EMA start, digit order) change a claim of
ALL_ROLES := nanda miiii masked basis nogrokfast nodropout
ORIGINAL_ROLES := nanda miiii basis nodropout
results: $(STAMP)  ## retrain the paper bundles (3 seeds; the project's six roles, the original's four), redraw, report, README table; times each
	@for v in project original; do \
	  start=$$(date +%s); \
	  out=results/paper-cpu; roles="$(ALL_ROLES)"; \
	  [ $$v = original ] && out=results/paper-cpu-original && roles="$(ORIGINAL_ROLES)"; \
	  $(BIN)/python -m experiments.paper --smoke --seeds 3 --variant $$v --roles $$roles --out $$out --no-progress $(ARGS) || exit 1; \
	  echo "results: $$out took $$(( ($$(date +%s) - start) / 60 )) min"; \
	done
	$(BIN)/python -m experiments.headline
	@echo "results: the book's bundle (results/book/) is retrained by the commands in experiments/book/README.md (hours; make book-findings: the sweep times in results/book/findings.md)"

# PyTorch (the `bench` extra) only if missing: a CPU build (the references time CPU steps), from PyTorch's CPU index
# or a local wheel pip's find-links know; PyPI's Linux wheels would pull the multi-GB CUDA libraries.
TORCH ?= torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
bench: $(STAMP)  ## time miiii against its PyTorch references, eager and compiled (experiments/bench/torch_*.py); writes bench.json
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "$(TORCH)" --extra-index-url $(TORCH_INDEX)
	$(BIN)/python -m experiments.bench $(ARGS)

# TransformerLens (the `tl` extra) beside the CPU torch above, then the export's round trip (tests/test_transformerlens.py)
TL ?= transformer-lens>=3,<4
test-tl: $(STAMP)  ## the TransformerLens export's round trip: installs CPU torch and TransformerLens 3 into .venv
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "$(TORCH)" --extra-index-url $(TORCH_INDEX)
	$(BIN)/python -m pip install -q "$(TL)"
	$(BIN)/python -m pytest -q tests/test_transformerlens.py $(ARGS)

# TransformerLens 4 (the `tl4` extra) removed HookedTransformer and cannot share .venv with 3: a venv of its own
# with miiii and the same CPU torch (installed with it: the resolver then never reaches for a CUDA build)
# (.venv-EXTRA: a venv of its own with miiii's `dev` and EXTRA extras and the CPU torch, for tl4 and llc)
.PHONY: test-tl4
VENV_TL4 = .venv-tl4
.venv-%/.installed: pyproject.toml
	test -x .venv-$*/bin/python || $(PY) -m venv .venv-$*
	.venv-$*/bin/python -m pip install -q --upgrade pip
	.venv-$*/bin/python -m pip install -q "$(TORCH)" -e ".[dev,$*]" --extra-index-url $(TORCH_INDEX)
	touch $@

test-tl4: $(VENV_TL4)/.installed  ## the same round trip against TransformerLens 4 (TransformerBridge.boot_native), in its own .venv-tl4
	$(VENV_TL4)/bin/python -m pytest -q tests/test_transformerlens.py $(ARGS)

# devinterp (the `llc` extra) pulls transformers, datasets and zarr: a venv of its own, as .venv-tl4
.PHONY: test-llc
VENV_LLC = .venv-llc

test-llc: $(VENV_LLC)/.installed  ## the LLC estimator against devinterp's own SGLD on the same model and data (tests/test_llc_devinterp.py), in its own .venv-llc with CPU torch
	$(VENV_LLC)/bin/python -m pytest -q -s tests/test_llc_devinterp.py $(ARGS)

DISPUTES = wd_regimes muon omnigrok readout_scale logit_scale
llc-transition: $(STAMP)  ## λ̂ at every kept step of make paper-cpu's runs (runs/paper-cpu/runs; ARGS="--runs DIR"), its turn against each task's grok step, the shuffled-label run as control; writes results/llc_transition/
	$(BIN)/python -m experiments.llc_transition $(ARGS)

disputes: $(STAMP)  ## the lab's dispute studies (experiments/{wd_regimes,muon,omnigrok,readout_scale,logit_scale}): train what runs/ lacks, write each results/STUDY/
	for s in $(DISPUTES); do $(BIN)/python -m experiments.$$s $(ARGS) || exit 1; done

presets: $(STAMP)  ## list the presets
	$(BIN)/python -m miiii presets

JOBS ?= 3
test: $(STAMP)  ## run the test suite in JOBS=3 pytest workers (CPU, under 10 minutes on 2 cores; compile cache: ~/.cache/miiii/jax, MIIII_COMPILE_CACHE=DIR|off; compiled with most XLA optimisations off, JAX_DISABLE_MOST_OPTIMIZATIONS=0 for on, and XLA's legacy CPU fusion emitters, which compile in about half the time: tests/conftest.py); all but the multi-process/multi-device sweeps (make test-multihost), the study scripts end to end (make test-studies) and the notebook (make test-notebook)
	XLA_PYTHON_CLIENT_PREALLOCATE=false $(BIN)/python -m pytest -q -n $(JOBS) --dist worksteal -m "not multihost and not study and not notebook" $(ARGS)

test-multihost: $(STAMP)  ## the sweeps across two local CPU processes (jax.distributed, gloo) and over four host devices, ~2 min; left out of make test to keep it under 10 minutes
	XLA_PYTHON_CLIENT_PREALLOCATE=false $(BIN)/python -m pytest -q -m multihost $(ARGS)

test-studies: $(STAMP)  ## the study scripts and the long end-to-end runs (book modes, same-start, frequency ablation, the new options at once, a sequence run's figures, the book tasks and miiii-tiny learning, a minibatch sweep, a diverged sweep member, the matmul precision, log-spaced recording, a sweep member read back, crossed grids, every paper figure drawn, the paper study's runs, the split as a sweep axis, a recording of every hook point, the registries' new figure, a phased preset's two phases, the slowest unit tests, marked SLOW (tests/_runhelp.py)); left out of make test (10-minute budget)
	XLA_PYTHON_CLIENT_PREALLOCATE=false $(BIN)/python -m pytest -q -n $(JOBS) -m study $(ARGS)

# the `notebook` extra (jupytext, nbclient, ipykernel, pandas) into .venv, again when pyproject.toml changes
$(VENV)/.installed-notebook: $(STAMP)
	$(BIN)/python -m pip install -q -e ".[dev,notebook]"
	touch $@

test-notebook: $(VENV)/.installed-notebook  ## examples/grokking.ipynb end to end in a kernel (trains nanda-cpu and a 2-seed sweep; installs the notebook extra into .venv); left out of make test
	XLA_PYTHON_CLIENT_PREALLOCATE=false $(BIN)/python -m pytest -q -m notebook tests/test_notebook.py $(ARGS)

lint: $(STAMP)  ## ruff
	$(BIN)/ruff check .

clean:  ## remove caches (not runs/)
	rm -rf .pytest_cache .ruff_cache build *.egg-info
