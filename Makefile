# The course's two everyday commands: `make lab` and `make test`.
# Both build .venv on first use, and rebuild it when pyproject.toml changes.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The venv's own kernel spec comes first, so notebooks never run on another Python.
export JUPYTER_PATH := $(CURDIR)/$(VENV)/share/jupyter
export MPLBACKEND := Agg
# JupyterLab refuses to start as root unless told; containers and CI often are root.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)
# The course's JupyterLab defaults (no "get Jupyter news?" pop-up on first start), installed
# into the venv's own JupyterLab settings, never the user's home.
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.json

.PHONY: lab test bench bench-tests html student grade clean stop

# PostgreSQL, Redis and NATS start by themselves when a lesson or test first needs one
# (idemlib/servers, from the venv's pip packages). Each belongs to the command that started
# it: `make lab`, `make test` (and html, grade, bench) stop theirs when they end, Ctrl-C included, and leave alone
# those another command started. `make stop` stops any left running.
OWN_SERVERS  = IDEMLIB_SERVERS_OWNER=$@-$$$$; export IDEMLIB_SERVERS_OWNER; trap : INT TERM;
STOP_SERVERS = status=$$?; $(BIN)/python -m idemlib.servers stop --owner $$IDEMLIB_SERVERS_OWNER; exit $$status

$(STAMP): pyproject.toml deliver-twice/pyproject.toml
	@$(PYTHON) -c 'import sys; v = sys.version_info; sys.exit(f"The course needs Python 3.11 or newer; $(PYTHON) is {v.major}.{v.minor}. Run: make PYTHON=python3.11 ...") if v < (3, 11) else None'
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	# deliver-twice (lesson 11's tool, its own distribution in deliver-twice/) is installed from this clone.
	$(BIN)/python -m pip install --quiet -e './deliver-twice[postgres]' -e '.[dev]'
	touch $(STAMP)

$(LAB_SETTINGS): jupyter/overrides.json $(STAMP)
	install -D -m 644 jupyter/overrides.json $@

# The learner's own copies of the lessons (answers blank), made on first use and never overwritten:
# git ignores the folder and `make clean` leaves it. JupyterLab opens in it, on lesson 00, through its
# default URL (LabApp's, from which JupyterLab sets the server's), so the URL it prints opens lesson 00
# with --no-browser too; a file argument would reach only the browser JupyterLab starts itself.
MY_LESSONS ?= my-lessons

lab: $(STAMP) $(LAB_SETTINGS)
	$(BIN)/python -m idemlib.course copy $(MY_LESSONS)
	$(OWN_SERVERS) $(BIN)/jupyter lab --ServerApp.root_dir=$(MY_LESSONS) --LabApp.default_url=/lab/tree/00_start_here.ipynb \
		$(ROOT_FLAG) $(LAB_ARGS); $(STOP_SERVERS)

# Four workers (pytest-xdist), even on 2 cores: the tests wait on kernels, servers and sandboxes'
# time limits about as much as they compute. Each lesson is still executed once a run (tests/conftest.py).
# loadgroup keeps the tests that share one graded class on one worker (tests/test_grade*.py), so it is graded
# once, and hands out every other test one at a time, the slowest first (tests/conftest.py).
TEST_WORKERS ?= 4

test: $(STAMP) $(LAB_SETTINGS)
	$(OWN_SERVERS) $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS); $(STOP_SERVERS)

html: $(STAMP)
	$(OWN_SERVERS) $(BIN)/python -m idemlib.course html build/html; $(STOP_SERVERS)

student: $(STAMP)
	$(BIN)/python -m idemlib.course student build/student

# make grade SUBMISSIONS=folder [LESSON=02]: runs every handed-in notebook, writes build/grades/.
grade: $(STAMP)
	@test -n "$(SUBMISSIONS)" || { echo "Say where the submissions are: make grade SUBMISSIONS=folder"; exit 2; }
	$(OWN_SERVERS) $(BIN)/python -m idemlib.course grade "$(SUBMISSIONS)" $(if $(LESSON),--lesson $(LESSON)); $(STOP_SERVERS)

bench: $(STAMP)
	$(OWN_SERVERS) $(BIN)/python benchmarks/bench_overhead.py && $(BIN)/python benchmarks/bench_inbox_cost.py \
		&& $(BIN)/python benchmarks/bench_lessons.py && $(BIN)/python benchmarks/bench_hub.py; $(STOP_SERVERS)

# The test suite timed from outside: wall and CPU time, the machine's load, the slowest files and tests.
bench-tests: $(STAMP) $(LAB_SETTINGS)
	$(OWN_SERVERS) TEST_WORKERS=$(TEST_WORKERS) $(BIN)/python benchmarks/bench_tests.py $(PYTEST_ARGS); $(STOP_SERVERS)

stop:
	@if [ -x $(BIN)/python ]; then $(BIN)/python -m idemlib.servers stop; fi

clean: stop
	rm -rf $(VENV) build .pytest_cache .hypothesis
