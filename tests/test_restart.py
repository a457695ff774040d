"""restart.py carries the globals an answer reads into a fresh process, and only those: a parameter, a local,
a lambda's or a comprehension's variable is no global, even when the notebook has a global of that name."""

from __future__ import annotations

import linecache

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
