# mtad — run `make help` for the list of targets.
SHELL := /bin/bash
PY ?= .venv/bin/python
# torch first, pinned: here it resolves to the CPU wheel on disk; on a GPU machine
# the same pin resolves to PyPI's CUDA wheel. Override with TORCH_SPEC=... if needed.
TORCH_SPEC ?= torch==2.13.0

.PHONY: help install test test-fast lint
help: ## list targets
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-20s %s\n", $$1, $$2}'

.venv/.installed: pyproject.toml
	python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	@echo "installing $(TORCH_SPEC) and mtad with its dev tools, jupyter lab and, where it runs, the kernel extra into .venv (a few minutes; pip shows its progress)"
	$(PY) -m pip install --progress-bar on "$(TORCH_SPEC)"
	extras=$$($(PY) scripts/kernel_extra.py) && $(PY) -m pip install --progress-bar on -e ".[dev,notebooks$$extras]"
	touch $@

install: .venv/.installed ## create .venv and install mtad with its dev tools, jupyter lab (the notebooks) and, on x86-64 Linux with the CPU torch and native bf16, the kernel extra (zen)

.PHONY: data
data: install ## fetch every dataset into the data root
	$(PY) scripts/get_data.py $(ARGS)

# Tests run in parallel workers (pytest-xdist), one per core up to 4; TEST_WORKERS=0 runs them in
# this process (e.g. to debug with -s or pdb: make test TEST_WORKERS=0 PYTEST_ARGS="-s -x").
TEST_WORKERS ?= auto
PYTEST = $(PY) -m pytest -q -n $(TEST_WORKERS) --maxprocesses 4 $(PYTEST_ARGS)

test: install lint ## lint, then every test (slow ones included): what CI runs
	$(PYTEST)

test-fast: install lint ## lint, then the unit tests (no test marked slow; a few minutes on 2 cores)
	$(PYTEST) -m "not slow"

lint: install ## ruff over the package, scripts, tests and notebooks: pyflakes, pycodestyle (120), import order, format
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# --- the embedded pair's drafts (mtad/distill/); resumable: rerun to keep training
# EMBEDDED_PAIR: the embedded pair and its draft (the better one, measured); OTHER_DRAFT_PAIRS: the
# same target with the other draft kind, measured beside it. DRAFT_PAIR: the pair `make draft` trains.
EMBEDDED_PAIR ?= smollm2_135m_head
OTHER_DRAFT_PAIRS ?=
DRAFT_PAIR ?= $(EMBEDDED_PAIR)
DRAFT_MINUTES ?= 60
.PHONY: draft measure-draft
draft: install ## distil DRAFT_PAIR's draft (a layer draft or a feature head) DRAFT_MINUTES more minutes (producer + trainer, a core each), export it
	nice -n 5 $(PY) scripts/distill_draft.py featurize --pair $(DRAFT_PAIR) $(ARGS)
	@nice -n 5 $(PY) scripts/distill_draft.py produce --pair $(DRAFT_PAIR) --max-minutes $(DRAFT_MINUTES) $(ARGS) & producer=$$!; \
	  nice -n 5 $(PY) scripts/distill_draft.py train --pair $(DRAFT_PAIR) --max-minutes $(DRAFT_MINUTES) $(ARGS); status=$$?; \
	  kill -TERM $$producer 2>/dev/null; wait $$producer; exit $$status
	$(PY) scripts/distill_draft.py export --pair $(DRAFT_PAIR)
	$(PY) scripts/distill_draft.py snapshot --pair $(DRAFT_PAIR)

ROUND_DIR ?= results/local/draft_round
ROUND_REQUESTS ?= 16000
ROUND_MINUTES ?= 8
# e.g. ROUND_ARGS='--round-batch 64 --round-arms "fused, high depth final, 2 layers"' (distill_draft.py --help)
ROUND_ARGS ?=
.PHONY: draft-round
draft-round: install ## on a GPU, one process of <= ROUND_MINUTES: ROUND_REQUESTS new training requests answered by the target, the corpus scored and held on the device, the committed head continued beside designs from scratch; the continued head exported with its card only if it wins held-out -> ROUND_DIR
	$(PY) scripts/distill_draft.py round-requests --pair $(DRAFT_PAIR) --count $(ROUND_REQUESTS) --bundle $(ROUND_DIR)/requests.pt.gz
	$(PY) scripts/distill_draft.py round --pair $(DRAFT_PAIR) --bundle $(ROUND_DIR)/requests.pt.gz --out $(ROUND_DIR) --max-minutes $(ROUND_MINUTES) --threads 8 $(ROUND_ARGS)
	$(PY) scripts/distill_draft.py round-export --pair $(DRAFT_PAIR) --out $(ROUND_DIR)

# measure-draft's report goes beside its cells' root (results/local/draft); the committed results/draft is written
# by `make results` alone (REGENERATE=1 with RESULTS=results/runs)
DRAFT_OUT ?= $(if $(and $(AT_REFERENCE),$(if $(REGENERATE),,reading)),results/local/draft,$(call root_of,$(RESULTS))/draft)
measure-draft: install ## the embedded pair's draft on held-out requests of every kind, trained and never trained, as cells (acceptance, block efficiency, tokens/s, cost; about 2 h on 2 cores) -> results/local/draft/ (OTHER_DRAFT_PAIRS=smollm2_135m: the layer draft beside)
	@$(call reset_if_committed,$(RESULTS)/draft)
	$(PY) -m mtad.experiments.drafts pair=$(EMBEDDED_PAIR) results_root=$(RESULTS) --compare "$(OTHER_DRAFT_PAIRS)" --out $(DRAFT_OUT) $(OVERRIDES)
	$(if $(and $(AT_REFERENCE),$(REGENERATE)),$(PY) scripts/results_readme.py --results $(call root_of,$(RESULTS)))

# --- experiments: conf/experiment + conf/sweep -> a results root (resumable) -> tables
# The committed reference lives under results/runs (tables in results/tables, claims in
# results/claims) and only `make results` writes there. Every other run writes under results/local/
# (git-ignored) and ends by comparing its cells with the committed reference: which reproduce
# exactly, which agree within their intervals (mtad.report.machine_agreement).
RUN ?= $(PY) -m mtad.run
OVERRIDES ?=
EXPERIMENT ?= table2
# DATA_ARGS: e.g. --spider-dir DIR (a Spider release) or --cnndm-jsonl hub, for the full sets
DATA_ARGS ?=
REFERENCE := results/runs
RESULTS ?= results/local/runs
AT_REFERENCE = $(filter $(REFERENCE),$(RESULTS))
# A results root holds runs/ and what is built from them: the tables, claims and figures of RESULTS go
# into its parent (results/local/runs -> results/local/tables, /tmp/mine/runs -> /tmp/mine/tables,
# the reference results/runs -> results/tables)
root_of = $(patsubst %/,%,$(dir $(patsubst %/,%,$(1))))
TABLES ?= $(call root_of,$(RESULTS))/tables
CLAIMS_OUT ?= $(call root_of,$(RESULTS))/claims
TABLE_ARGS ?=
# Data that cannot be had is reported once by get_data.py before any model work; its cells are
# then recorded `missing` (the reason and the command that gets the data) and the run goes on.
MISSING_DATA ?= mark
# The local run of experiment $(1) against the committed reference (nothing when writing the reference).
compare_with_reference = $(if $(AT_REFERENCE),true,$(PY) -m mtad.report.machine_agreement cells $(REFERENCE) $(RESULTS) \
	--experiment $(1) || true)
# Run a fresh-or-resumed multirun of experiment $(1), then build its table even if a cell failed,
# compare it with the reference, and report the run's status; Ctrl-C (status 130) stops there, its
# one line (what was kept, how to resume) the last the run prints.
define run_and_table
	$(PY) scripts/get_data.py $(DATA_ARGS) || echo "warning: the data above could not be fetched: its cells will be marked missing"
	$(if $(AT_REFERENCE),$(call fresh_if_committed,$(RESULTS)/$(1)))
	$(RUN) experiment=$(1) results_root=$(RESULTS) missing_data=$(MISSING_DATA) $(OVERRIDES); status=$$?; \
	  if [ $$status -eq 130 ]; then exit 130; fi; \
	  $(PY) scripts/make_table.py --experiment $(1) --results $(RESULTS) --out $(TABLES) $(TABLE_ARGS) || status=1; \
	  $(call compare_with_reference,$(1)); exit $$status
endef
# `make results` only (it sets REGENERATE=1): when a reference folder is exactly its committed
# state, it is run again from scratch (`git checkout <folder>` restores it); cells written since
# (an interrupted regeneration) differ from it and are resumed instead. Any other command given
# RESULTS=results/runs reads or resumes the committed cells and deletes nothing.
REGENERATE ?=
reset_if_committed = $(if $(REGENERATE),if [ -n "$$(git ls-files -- $(1) 2>/dev/null)" ] && git diff --quiet HEAD -- $(1) \
	  && [ -z "$$(git ls-files --others --exclude-standard -- $(1))" ]; then \
	  echo "$(1) is the committed reference run: regenerating it from scratch (make results)"; rm -rf $(1); fi,true)
fresh_if_committed = @$(call reset_if_committed,$(1))

.PHONY: reproduce-table2 smoke table sweep-gamma sweep-beam-width sweep-threshold
reproduce-table2: install ## Table 2: every study method x 4 tasks on the embedded pair, then each lossless drafting method adaptive x 4 tasks (about 40 min on 2 cores) -> results/local/tables/table2.md, compared with the committed one
	$(call run_and_table,table2)

smoke: install ## the Table 2 grid with 1-2 examples per cell (a few minutes) -> results/local/tables/table2_smoke.md
	$(call run_and_table,smoke)

table: install ## rebuild the committed results/tables/table2*.{md,csv} from results/runs (EXPERIMENT=table2)
	$(PY) scripts/make_table.py --experiment $(EXPERIMENT) --results results/runs --out results/tables $(TABLE_ARGS)

SWEEP_BASELINES = $(RUN) -m experiment=sweeps method=sampling,sps results_root=$(RESULTS) $(OVERRIDES)
sweep-gamma: install ## gamma = 1..8 for sps, mtad, mmtad (+ sampling/sps baselines) on CNN/DM
	$(SWEEP_BASELINES)
	$(RUN) experiment=sweeps sweep=gamma results_root=$(RESULTS) $(OVERRIDES)

sweep-beam-width: install ## beam width W = 1, 2, 4, 8 for mtad, mmtad (+ baselines) on CNN/DM
	$(SWEEP_BASELINES)
	$(RUN) experiment=sweeps sweep=beam_width results_root=$(RESULTS) $(OVERRIDES)

sweep-threshold: install ## threshold tau = 0.1..0.9 for mtad, mmtad (+ baselines) on CNN/DM
	$(SWEEP_BASELINES)
	$(RUN) experiment=sweeps sweep=threshold results_root=$(RESULTS) $(OVERRIDES)

sweep-stop-below: install ## adaptive drafting: the draft probability that ends drafting, 0..0.5, for every drafting method (+ baselines) on CNN/DM
	$(SWEEP_BASELINES)
	$(RUN) experiment=sweeps sweep=stop_below results_root=$(RESULTS) $(OVERRIDES)

sweep-temperature: install ## sampling temperature T = 0 (greedy), 0.5, 0.7, 1.0 for sampling and every method on CNN/DM
	$(RUN) experiment=sweeps sweep=temperature results_root=$(RESULTS) $(OVERRIDES)

.PHONY: sweeps sweep-stop-below sweep-temperature
sweeps: install ## the five sweeps (resumed; under results/local unless `make results` regenerates the reference)
	$(if $(AT_REFERENCE),$(call fresh_if_committed,$(RESULTS)/sweeps))
	$(MAKE) --no-print-directory sweep-gamma sweep-beam-width sweep-threshold sweep-stop-below sweep-temperature RESULTS=$(RESULTS)
	@$(call compare_with_reference,sweeps)

.PHONY: figures results-readme
# `make figures` redraws the committed figures; given RESULTS=..., the figures of those runs, beside them
FIGURES_FROM = $(if $(filter command line environment,$(origin RESULTS)),$(RESULTS),$(REFERENCE))
FIGURES ?= $(call root_of,$(FIGURES_FROM))/figures
figures: install ## regenerate every figure from committed results (results/runs -> results/figures, seconds; RESULTS=<root>/runs: <root>/figures)
	$(PY) scripts/make_figures.py --results $(FIGURES_FROM) --out $(FIGURES) $(ARGS)

results-readme: install ## render results/README.md (every measured figure the docs point to) from the committed results (seconds)
	$(PY) scripts/results_readme.py --results results

# --- speed against transformers' generate() and assisted generation (mtad/bench/)
BENCH_ARGS ?=
.PHONY: bench
bench: install ## every method on the eager and fast paths (sampling and sps also compiled) vs HF generate (eager on the pair's and the fp32 target, static+compile) and assisted generation; sampling with the 4-bit targets; verification-cost curve per dtype (fp32, bf16, q4_1, q4_1_bf16, int8, int8_bf16), each forward beside its matrix products alone (and int8 per-row ones), and the calibration's pick (dtype, threads, node budget); adaptive drafting and the node-budget trees beside the fixed methods; the fast-path rows again on long prompts at 1 thread; llama.cpp on the same GGUF if llama-cpp-python is importable; goals table incl. the cost model's held-out test (~35 min on 2 cores) -> results/bench/
	@$(call reset_if_committed,$(RESULTS)/bench)
	$(PY) scripts/bench.py --pair $(EMBEDDED_PAIR) --results-root $(RESULTS) --compiled $(BENCH_ARGS)

PROFILE_ARGS ?=
.PHONY: profile profiles q4-tv
profiles: install ## `make profile` with fixed and with adaptive drafting: each method's host work per call, which the bench's cost model reads (~10 min; quiet machine) -> results/bench/bench.json (sections profile, profile_adaptive), profile{,_adaptive}.md
	@$(call reset_if_committed,$(RESULTS)/profile_threads1)
	@$(call reset_if_committed,$(RESULTS)/profile_threads2)
	$(PY) scripts/profile_blocks.py --pair $(EMBEDDED_PAIR) --results-root $(RESULTS)
	$(PY) scripts/profile_blocks.py --pair $(EMBEDDED_PAIR) --adaptive --results-root $(RESULTS)

q4-tv: install ## how far the reduced targets' (q4_1, int8, bf16) next-token distributions lie from the float32 one (20 held-out prompts x 32 tokens, minutes) -> results/bench/bench.json (section target_distance), q4_tv.md
	$(PY) scripts/bench.py --pair $(EMBEDDED_PAIR) --q4-tv 20 --max-new-tokens 32

profile: install ## where one block's time goes, every method on the fast path, 1 and 2 threads, short and long prompts (~5 min; quiet machine) -> results/bench/bench.json (section profile), profile.md
	$(PY) scripts/profile_blocks.py --pair $(EMBEDDED_PAIR) --results-root $(RESULTS) $(PROFILE_ARGS)

# --- the GPU paths in one prepared run (mtad/bench/gpu_check/); no install step, so a system python
# with torch runs it (PY=python3). GPU_CHECK_OUT=results/gpu_check writes the committed report.
GPU_CHECK_OUT ?= results/local/gpu_check
.PHONY: gpu-check
gpu-check: ## on a GPU (<= 8 min, tiny random-weight models, nothing downloaded): exactness against the CPU, every method on every decode path, NVML energy, the target cost curve (widths 1-65 over 256 tokens) and copy bandwidth, the embedded pair if its files are here; without CUDA a dry run listing each check and why it is skipped -> results/local/gpu_check/
	$(PY) scripts/gpu_check.py --out $(GPU_CHECK_OUT) $(ARGS)

# --- the paper's claims (mtad/experiments/claims.py runs, mtad/report/claims_report.py reports): 95% intervals and verdicts -> results/claims/
# EXPERIMENT=claims (default here) runs the interleaved claims experiment first; any other
# experiment (table2, table2_full) is read from its finished cells. PAIR= picks another pair.
PAIR ?=
CLAIMS_DIR = $(RESULTS)/$(EXPERIMENT)$(if $(PAIR),/$(PAIR))
.PHONY: claims
claims: EXPERIMENT = claims
# --report-only only reads the cells: its report goes under results/local/ (the committed one is written by `make results` alone)
claims: CLAIMS_REPORT = $(if $(and $(filter --report-only,$(OVERRIDES)),$(if $(REGENERATE),,reading),\
  $(filter-out results/local/%,$(filter results/%,$(CLAIMS_OUT)))),results/local/claims,$(CLAIMS_OUT))
claims: install ## every claim of the paper with a 95% interval and a verdict (embedded pair: a few hours on 2 cores, resumed by a rerun) -> results/local/claims/claims.md, compared with the committed one
	@if [ "$(filter claims%,$(EXPERIMENT))" ]; then \
	  $(PY) scripts/get_data.py --only cnndm $(DATA_ARGS) || echo "warning: CNN/DailyMail could not be fetched; the run will stop"; \
	  $(if $(AT_REFERENCE),$(call reset_if_committed,$(CLAIMS_DIR));) fi
	$(PY) -m mtad.experiments.claims experiment=$(EXPERIMENT) $(if $(PAIR),pair=$(PAIR)) results_root=$(RESULTS) --out $(CLAIMS_REPORT) $(OVERRIDES)
	@$(if $(filter results/claims,$(CLAIMS_REPORT)),true,if [ -f results/claims/$(EXPERIMENT).json ] && [ -z "$(PAIR)" ]; then \
	  $(PY) -m mtad.report.machine_agreement claims results/claims/$(EXPERIMENT).json $(CLAIMS_REPORT)/$(EXPERIMENT).json || true; fi)

# --- reproduction check: every method on one short example, rerun in a fresh process
VERIFY_ROOT ?= results/verify
# KERNELS=avx2|default reruns with torch/MKL kernels of another instruction set (as on another CPU type)
KERNELS ?= native
.PHONY: verify verify-reference
verify: install ## rerun the committed float64 reference cells (results/verify): identical tokens, BE, acceptance; PPL within tolerance
	$(PY) scripts/get_data.py --only humaneval
	$(PY) scripts/verify.py --reference $(VERIFY_ROOT) --kernels $(KERNELS)

verify-reference: install ## (re)create the reproduction reference in results/verify (after a new draft or decode path)
	$(PY) scripts/get_data.py --only humaneval
	$(PY) scripts/verify.py --reference $(VERIFY_ROOT) --reference-only

# --- every committed result, regenerated step by step (resumable: rerun to continue; mtad/regeneration.py)
# Each step is its own target; a finished step leaves a stamp (results/.stamps/<step>, JSON, committed
# with the results) naming the code state it ran, its commit, the machine (`python -m mtad.provenance
# machine`), the pinned target dtype, the kernels there and when it finished. The code state is HEAD's
# files less `mtad.provenance.NOT_CODE` (results/, the drafts' model cards, whose Measured sections
# measure-draft renders, and the tests, CI and Markdown docs, which no step runs or reads), so a step's
# outputs (or a test, or a README) can be committed as it finishes and the next steps, in a later sitting, still count as the same code. A
# step is skipped while the code state and the pin (below) stay the same. ALLOW_DIRTY=1 runs from a
# tree with uncommitted changes (its tables are then refused unless TABLE_ARGS=--allow-mixed-provenance).
# Sittings may run on different machines: each step's stamp names its own. Steps that read each other's
# timings (`mtad.regeneration.GROUPS`: profiles -> bench) run in one sitting on one machine: a group whose
# earlier step was stamped elsewhere is redone. The target's dtype is pinned for the whole regeneration:
# when it begins, TARGET_DTYPE (e.g. TARGET_DTYPE=bfloat16), else what `auto` means for EMBEDDED_PAIR on
# this machine, is recorded in results/.stamps/regeneration, and every step runs with MTAD_TARGET_DTYPE
# set to it (every pair whose target dtype is `auto` follows it). A regeneration under way goes on only
# at the code state and pin it began with; RESTART=1 discards it and begins again here. `make -n results`
# prints each step's commands and stamps nothing. STAMP_MACHINE= names the machine instead of reading it
# (tests).
RESULT_STEPS ?= reproduce-table2 sweeps claims figures measure-draft profiles bench q4-tv verify-reference
TARGET_DTYPE ?=
STAMP_MACHINE ?=
CODE_STATE = $(PY) -m mtad.provenance code-state
UNCOMMITTED_CODE = $(PY) -m mtad.provenance uncommitted-code
# `make -n results` runs the regeneration (its line is marked +) so that it prints the steps' commands
DRY_RUN = $(findstring n,$(firstword -$(MAKEFLAGS)))
.PHONY: results code-state uncommitted-code
code-state: ## the code state `make results` stamps its steps with: HEAD's files that no step writes
	@$(CODE_STATE)

uncommitted-code: ## the uncommitted changes `make results` refuses to start over (a step's outputs aside)
	@$(UNCOMMITTED_CODE) || true

results: install ## regenerate every committed result: Table 2, sweeps, claims, figures, draft measurement, bench, verify reference (step by step, resumable on any machine; TARGET_DTYPE=bfloat16 pins the target's dtype)
	+@$(PY) -m mtad.regeneration --steps "$(RESULT_STEPS)" --pair $(EMBEDDED_PAIR) --make "$(MAKE)" \
	  --step-args "RESULTS=$(REFERENCE) REGENERATE=1" $(if $(TARGET_DTYPE),--target-dtype "$(TARGET_DTYPE)") \
	  $(if $(ALLOW_DIRTY),--allow-dirty) $(if $(RESTART),--restart) $(if $(DRY_RUN),--dry-run) \
	  $(if $(STAMP_MACHINE),--machine "$(STAMP_MACHINE)")
