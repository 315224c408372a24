# nemorl-slurm. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
BIN := bin/nemorl-slurm
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/nemorl/nemorl-slurm/cli.Version=$(VERSION)
FUZZTIME ?= 20s
# Test packages run at once, and tests (t.Parallel) at once per package:
# above a 2-core machine's default of 2, as the lab tests mostly wait.
TEST_P ?= 4
TEST_PARALLEL ?= 8

.PHONY: help build test unit vet shellcheck demo lab-up lab-down lab-status fuzz bench clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-11s %s\n", $$1, $$2}'

build: ## build bin/nemorl-slurm
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/nemorl-slurm

test: lab-up shellcheck ## install and start the lab (clusters 1-3), then shellcheck, gofmt, vet and every test with -race (lab tests required)
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	@# Every package's time, slowest first, after the run (the CI log's
	@# answer to "what made it slow"). The lab tests mostly wait (on Slurm,
	@# sacct's lag, the lab lock), not compute: more of them at once than
	@# the machine's cores (-parallel, -p) is what keeps the run short.
	@log=$$(mktemp); set -o pipefail; \
	  NEMORL_REQUIRE_LAB=1 $(GO) test -race -count=1 -timeout 40m -p $(TEST_P) -parallel $(TEST_PARALLEL) ./... 2>&1 | tee "$$log"; rc=$$?; \
	  echo "package times, slowest first:"; \
	  awk '($$1 == "ok" || $$1 == "FAIL") && $$3 ~ /s$$/ { t = $$3; sub(/s$$/, "", t); printf "%10.1f s  %s %s\n", t, $$1, $$2 }' "$$log" | sort -rn; \
	  rm -f "$$log"; exit $$rc

unit: ## tests that need no lab (lab tests skip)
	$(GO) test -race -count=1 ./...

vet: ## go vet
	$(GO) vet ./...

shellcheck: ## shellcheck every shell file: *.sh, sh/bash shebangs, the golden rendered sbatch scripts
	@command -v shellcheck >/dev/null || { echo "shellcheck is not installed: apt-get install shellcheck (lab/up installs it)"; exit 1; }
	@# Tracked and untracked files (not those .gitignore ignores): *.sh, files
	@# without an extension whose first line is a sh or bash shebang (lab/up,
	@# .ci/run, ...), and templates/testdata/golden/*/*.sbatch (the templates
	@# themselves are Go templates).
	@set -o pipefail; git ls-files -z --cached --others --exclude-standard | \
	  while IFS= read -r -d '' f; do \
	    [ -f "$$f" ] || continue; \
	    case $${f##*/} in \
	      (*.sh) ;; \
	      (*.sbatch) case $$f in (templates/testdata/golden/*) ;; (*) continue ;; esac ;; \
	      (*.*) continue ;; \
	      (*) head -n 1 -- "$$f" | grep -qE '^#! *(/usr)?/bin/(env +)?(ba|da)?sh( |$$)' || continue ;; \
	    esac; \
	    printf '%s\0' "$$f"; \
	  done | xargs -0 -r sh -c 'shellcheck -x -- "$$@" && echo "shellcheck: $$# files, no findings"' sh

demo: build ## bring the lab up (clusters 1 and 2: lab/up) and run one full episode over SSH in real containers (stand-in stages)
	lab/up
	@set -e; cfg=$${NEMORL_LAB_DIR:-/var/lib/nemorl-lab}/lab.yaml; \
	  lab/gpu-node on; cp configs/lab.yaml $$cfg; \
	  $(BIN) images lock --config $$cfg >&2; \
	  ep=ep-$$(date -u +%Y%m%dT%H%M%SZ)-demo$$$$; \
	  $(BIN) run --config $$cfg --episode $$ep || exit $$?; \
	  echo "Slurm's accounting (sacct) of $$ep:"; \
	  for i in $$(seq 30); do \
	    rows=$$(sacct -a -X -n -P --starttime=now-1hour --format=JobIDRaw,JobName,State,ExitCode | grep -F -- "-$$ep|"); \
	    [ "$$(printf '%s\n' "$$rows" | grep -c COMPLETED)" -ge 3 ] && break; sleep 1; \
	  done; printf '%s\n' "$$rows"; \
	  $(BIN) result --json $$ep | grep -m1 '"isolation"'

lab-up: ## install (apt-get) and start the local Slurm lab, cluster 3 (Slurm 24.11) included; idempotent, needs root
	@# --cluster3: Slurm 24.11 (rl_enable) as well, built once beside
	@# Apptainer's build; a failed build or start fails lab-up, and so
	@# make test (lab/README.md, "Cluster 3").
	lab/up --cluster3

lab-down: ## stop the lab
	lab/down

lab-status: ## show the lab's daemons and the values configs/lab-none.yaml uses
	lab/status

fuzz: ## run every fuzz target for FUZZTIME each
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; done

bench: ## run the benchmarks (figures go to docs/BENCHMARKS.md)
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./...

clean: ## remove build output
	rm -rf bin
