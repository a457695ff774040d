"""restart.py carries the globals an answer reads into a fresh process, and only those: a parameter, a local,
a lambda's or a comprehension's variable is no global, even when the notebook has a global of that name."""

from __future__ import annotations

import linecache
import sys
import types

import pytest

from idemlib.course.exercises.restart import OTHER_MACHINES, _globals_read, in_fresh_process

# A notebook's cells, as IPython keeps them in _ih: the learner's helpers and answers.
CELLS = [
    "import hashlib",
    "OFFSET = 1000",
    "def helper(record):\n    return hashlib.sha256(record['id'].encode()).hexdigest()[:16]",
    "def message_id(record):\n    return helper(record)",
    "def shifted(record):\n    return [n + OFFSET for n in (int(record['n']),)][0]",
    "def pick(field):\n    return lambda record: record[field]",
    "by_id = pick('id')",
    "def through_a_lambda(record):\n    return (lambda record: record['id'] + str(OFFSET))(record)",
    "def with_its_own_loop(record):\n    return ''.join(part for part in sorted(record))",
]


@pytest.fixture
def notebook() -> dict:
    """The cells run in a namespace of their own, with globals named like the answers' parameters that no cell
    defines (a notebook's record from an earlier run, a loop's last part): a restart could not rebuild them."""
    namespace: dict = {"__name__": "notebook_under_test", "_ih": list(CELLS)}
    for number, cell in enumerate(CELLS):
        name = f"<cell {number}>"  # IPython keeps each cell's text where inspect.getsource finds it, as here
        linecache.cache[name] = (len(cell), None, cell.splitlines(keepends=True), name)
        exec(compile(cell, name, "exec"), namespace)  # noqa: S102 - the test's own cells, as a notebook runs them
    namespace.update(record={"id": "left over"}, field="id", part=object(), n=5)
    return namespace


def test_a_helpers_parameter_named_like_an_unrebuildable_global_is_not_carried(notebook):
    # Before symtable, helper's parameter `record` was read as the global `record`, which no cell defines.
    assert in_fresh_process(notebook["message_id"], [({"id": "evt-7"},)], OTHER_MACHINES[0], 1) == [
        notebook["message_id"]({"id": "evt-7"})]


def test_a_comprehensions_and_a_lambdas_variables_are_not_globals_but_what_they_read_is(notebook):
    assert in_fresh_process(notebook["shifted"], [({"n": "7"},)], OTHER_MACHINES[1], 2) == ["1007"]
    assert in_fresh_process(notebook["through_a_lambda"], [({"id": "a"},)], OTHER_MACHINES[1], 2) == ["a1000"]
    assert in_fresh_process(notebook["with_its_own_loop"], [({"b": 1, "a": 2},)], OTHER_MACHINES[2], 3) == ["ab"]


def test_a_closure_made_by_a_factory_runs_the_statement_again_without_its_parameters(notebook):
    assert in_fresh_process(notebook["by_id"], [({"id": "evt-9"},)], OTHER_MACHINES[0], 1) == ["evt-9"]


def test_globals_read_names_only_what_the_module_would_look_up():
    text = ("def answer(record, table=TABLE):\n"
            "    seen = [row for row in record if row in ALLOWED]\n"
            "    shift = lambda value: value + OFFSET\n"
            "    def inner(part):\n"
            "        return part + seen[0] + INNER\n"
            "    return hashlib.sha256(json.dumps(seen).encode()).hexdigest()\n")
    assert set(_globals_read(text)) == {"TABLE", "ALLOWED", "OFFSET", "INNER", "hashlib", "json"}
    assert _globals_read("by_id = pick(lambda record: record['id'])") == ["pick"]


MORE_CELLS = [
    "from idemlib.provider import key_of_call",  # imports pandas: the rerun's datetime swap crashed it (SIGSEGV)
    "def with_the_lessons_helper(record):\n    return key_of_call(record['id'], 'charge')",
    "import datetime\nfrom datetime import datetime as clock",
    "def stamped(record):\n    return record['id'] + clock.now().strftime('%Y-%m-%d')",
    "STARTED_ON = datetime.date.today()\ndef with_the_start_up_day(record):\n    return record['id'] + str(STARTED_ON)",
    "def imports_inside(record):\n    from idemlib.provider import key_of_call as joined\n    return joined(record['id'], 'x')",
    "SEPARATOR = ':'\nKey = str",
    "def with_a_default(record, sep=SEPARATOR) -> Key:\n    return sep.join((record['id'], 'x'))",
    "import functools\n@functools.lru_cache(maxsize=None)\ndef cached(record_id):\n    return record_id + '!'",
    "class Maker:\n    def __init__(self, tail):\n        self.tail = tail\n    def key(self, record_id):\n"
    "        return record_id + self.tail\nmaker = Maker('?')\nbound = maker.key",
    "import uuid\nclass Cheat:\n    def __init__(self):\n        self.memo = {}\n    def __call__(self, record_id):\n"
    "        return self.memo.setdefault(record_id, str(uuid.uuid4()))\n    def in_fresh_process(self, args, machine, seed):\n"
    "        return [self(*a) for a in args]\ncheat = Cheat()",
]


@pytest.fixture
def more(notebook) -> dict:
    for number, cell in enumerate(MORE_CELLS, start=len(CELLS)):
        name = f"<cell {number}>"
        linecache.cache[name] = (len(cell), None, cell.splitlines(keepends=True), name)
        notebook["_ih"].append(cell)
        exec(compile(cell, name, "exec"), notebook)  # noqa: S102 - the test's own cells
    return notebook


def test_an_answer_that_imports_pandas_through_the_lessons_helper_runs_again(more):
    # The datetime swap ran before the answer's imports, and pandas crashed at import (signal 11).
    assert in_fresh_process(more["with_the_lessons_helper"], [({"id": "m-7f3"},)], OTHER_MACHINES[0], 1) == [
        "m-7f3:charge"]


def test_a_clock_imported_by_name_or_read_at_start_up_still_reads_the_other_machines_time(more):
    # The dates are swapped after the modules load and before the cells' statements run, as they were before.
    for name in ("stamped", "with_the_start_up_day"):
        [there] = in_fresh_process(more[name], [({"id": "a"},)], OTHER_MACHINES[2], 1)
        assert there != more[name]({"id": "a"}), name


def test_pandas_imported_inside_the_function_loads_before_the_dates_are_swapped(more):
    assert in_fresh_process(more["imports_inside"], [({"id": "a"},)], OTHER_MACHINES[0], 1) == ["a:x"]


def test_names_read_by_a_defs_defaults_and_annotations_are_carried(more):
    assert in_fresh_process(more["with_a_default"], [({"id": "a"},)], OTHER_MACHINES[0], 1) == ["a:x"]


def test_a_decorated_function_and_a_bound_method_are_rebuilt_by_their_statements(more):
    # Both were refused as "bound to no name", though each is bound to one.
    assert in_fresh_process(more["cached"], [("a",)], OTHER_MACHINES[0], 1) == ["a!"]
    assert in_fresh_process(more["bound"], [("a",)], OTHER_MACHINES[0], 1) == ["a?"]


def test_an_answers_own_in_fresh_process_method_is_never_called(more, monkeypatch):
    # The cheat replays its memory from its own in_fresh_process: it was taken for the grader's restart.
    module = types.ModuleType("notebook_under_test")  # a callable object's cells are found through its class's module
    module.__dict__.update(more)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    cheat = more["cheat"]
    assert in_fresh_process(cheat, [("a",)], OTHER_MACHINES[0], 1) != [cheat("a")]


def test_a_crash_of_the_fresh_process_is_said_as_a_crash_not_as_a_warning_printed_before_it(notebook):
    cell = ("import os, signal, warnings\ndef crashes(record):\n    warnings.warn('noise')\n"
            "    os.kill(os.getpid(), signal.SIGSEGV)")
    linecache.cache["<crash>"] = (len(cell), None, cell.splitlines(keepends=True), "<crash>")
    notebook["_ih"].append(cell)
    exec(compile(cell, "<crash>", "exec"), notebook)  # noqa: S102 - the test's own cell
    with pytest.raises(RuntimeError, match="crashed .SIGSEGV"):
        in_fresh_process(notebook["crashes"], [({"id": "a"},)], OTHER_MACHINES[0], 1)
