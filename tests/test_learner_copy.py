"""The learner's own copies (``make lab``) and the solution a judged answer offers.

Most tests run on a tiny lesson of their own in a temporary folder; the ones about what a
fresh copy contains and where its links lead run on the real lessons, without executing any.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from idemlib.course import solutions
from idemlib.course.copies import (
    BACKUPS,
    MANIFEST,
    is_blank,
    make_copies,
    older_copies,
    refresh,
    report_older_copies,
    status_report,
)
from idemlib.course.exercises.feedback import Feedback, blank, hint, right
from idemlib.course.glossary import terms
from idemlib.course.lessons import LESSONS, ROOT, lesson_paths

SOLUTION_1 = "doubled = [2 * n for n in numbers]"
SOLUTION_2 = 'key = "{}:{}".format'


def solution(source: str) -> nbformat.NotebookNode:
    return new_code_cell(source, metadata={"tags": ["solution"]})


def tiny_lesson(extra_cell: str = "") -> nbformat.NotebookNode:
    """Two exercises in the course's form: a solution cell, then the cell that calls its check."""
    cells = [
        new_markdown_cell("# 00 · Tiny\n\nAn [ack](GLOSSARY.md#ack) and the [next lesson](01_tiny.ipynb)."),
        new_code_cell("numbers = [1, 2, 3]"),
        new_markdown_cell("**Exercise 1.** Double them."),
        solution(SOLUTION_1),
        new_code_cell("check_doubled(doubled)"),
        new_markdown_cell("**Exercise 2.** A key."),
        solution(SOLUTION_2),
        new_code_cell("check_key(key)"),
    ]
    if extra_cell:
        cells.insert(2, new_markdown_cell(extra_cell))
    return new_notebook(cells=cells)


@pytest.fixture
def course(tmp_path: Path) -> Path:
    """A folder of full lessons: the tiny lesson twice, the glossary and the matplotlib defaults."""
    lessons = tmp_path / "course"
    lessons.mkdir()
    nbformat.write(tiny_lesson(), lessons / "00_tiny.ipynb")
    nbformat.write(tiny_lesson(), lessons / "01_tiny.ipynb")
    shutil.copyfile(LESSONS / "GLOSSARY.md", lessons / "GLOSSARY.md")
    shutil.copyfile(LESSONS / "matplotlibrc", lessons / "matplotlibrc")
    return lessons


def answer_cells(notebook: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [cell for cell in notebook.cells if "answer" in cell.metadata.get("tags", [])]


def answer(path: Path, source: str, number: int = 0) -> None:
    """Fill the ``number``-th answer of the copy at ``path``, as a learner saving in JupyterLab would."""
    notebook = nbformat.read(path, as_version=4)
    answer_cells(notebook)[number].source = source
    nbformat.write(notebook, path)


def test_a_fresh_copy_of_every_lesson_has_every_answer_blank_and_no_solution(tmp_path):
    states = make_copies(tmp_path / "mine", LESSONS)
    assert [s.name for s in states] == [p.name for p in lesson_paths()] and {s.state for s in states} == {"made"}
    for path in lesson_paths():
        full = nbformat.read(path, as_version=4)
        mine = nbformat.read(tmp_path / "mine" / path.name, as_version=4)
        solved = [c.source for c in full.cells if "solution" in c.metadata.get("tags", [])]
        assert len(answer_cells(mine)) == len(solved) > 0
        assert all(is_blank(cell) and cell.source.count("= ...") >= 1 for cell in answer_cells(mine))
        assert not any("solution" in c.metadata.get("tags", []) for c in mine.cells)
        text = "\n".join(c.source for c in mine.cells)
        assert not [s for s in solved if s in text], f"{path.name}: a solution's source is in the copy"
        assert all(not c.get("outputs") for c in mine.cells if c.cell_type == "code")
        assert mine.metadata["idemlib"]["lesson"] == path.stem and mine.metadata["idemlib"]["made_from"]


def test_every_link_in_a_copy_leads_to_a_file_and_an_entry_in_the_copy(tmp_path):
    mine = tmp_path / "mine"
    make_copies(mine, LESSONS)
    anchors = {term.anchor for term in terms(mine / "GLOSSARY.md")}
    pages = {path.name: "\n".join(c.source for c in nbformat.read(path, as_version=4).cells
                                  if c.cell_type == "markdown") for path in mine.glob("*.ipynb")}
    pages["GLOSSARY.md"] = (mine / "GLOSSARY.md").read_text()
    checked = 0
    for page, text in pages.items():
        for target, anchor in re.findall(r"\]\(([^)#\s]+\.(?:md|ipynb))(?:#([\w-]+))?\)", text):
            assert not target.startswith(("/", "..")), f"{page} links out of the copy: {target}"
            assert (mine / target).is_file(), f"{page} links {target}, which the copy lacks"
            if target == "GLOSSARY.md" and anchor:
                assert anchor in anchors, f"{page} links the glossary entry #{anchor}, which it lacks"
            checked += 1
    assert checked > 100  # the lessons link the glossary over a hundred times
    assert (mine / "matplotlibrc").read_bytes() == (LESSONS / "matplotlibrc").read_bytes()


def test_a_student_copy_for_a_classroom_takes_the_glossary_along(tmp_path):
    from idemlib.course.publish import build_student

    written = build_student(tmp_path, [lesson_paths()[0]])
    assert written == [tmp_path / lesson_paths()[0].name]
    assert (tmp_path / "GLOSSARY.md").read_text() == (LESSONS / "GLOSSARY.md").read_text()
    assert (tmp_path / "matplotlibrc").exists()


def test_copying_again_leaves_a_learners_answers_alone_even_after_the_lesson_changed(course, tmp_path):
    mine = tmp_path / "mine"
    make_copies(mine, course)
    answer(mine / "00_tiny.ipynb", "doubled = [n + n for n in numbers]  # mine")
    (mine / "01_tiny.ipynb").unlink()  # a learner who wants a lesson afresh deletes its copy
    nbformat.write(tiny_lesson("A paragraph the course added later."), course / "00_tiny.ipynb")

    states = make_copies(mine, course)

    assert {s.name: s.state for s in states} == {"00_tiny.ipynb": "older", "01_tiny.ipynb": "made"}
    assert answer_cells(nbformat.read(mine / "00_tiny.ipynb", as_version=4))[0].source.endswith("# mine")
    assert is_blank(answer_cells(nbformat.read(mine / "01_tiny.ipynb", as_version=4))[0])


def test_a_copy_the_learner_broke_is_reported_and_left_alone(course, tmp_path):
    mine = tmp_path / "mine"
    make_copies(mine, course)
    (mine / "01_tiny.ipynb").write_text("{half a notebook")
    report = status_report(mine, make_copies(mine, course))
    assert "01_tiny.ipynb cannot be read as a notebook" in report
    assert (mine / "01_tiny.ipynb").read_text() == "{half a notebook"


def test_an_older_copy_is_reported_and_refreshed_with_the_answers_carried_over(course, tmp_path):
    mine = tmp_path / "mine"
    make_copies(mine, course)
    answer(mine / "00_tiny.ipynb", "doubled = [n * 2 for n in numbers]", 0)
    assert older_copies(mine, course) == []
    nbformat.write(tiny_lesson("A paragraph the course added later."), course / "00_tiny.ipynb")

    assert older_copies(mine, course) == ["00_tiny.ipynb"]
    report = status_report(mine, make_copies(mine, course))
    assert "00_tiny.ipynb" in report and f"-m idemlib.course refresh {mine} 00" in report
    assert "01_tiny" not in report

    [done] = refresh(mine, None, course)

    assert done.carried == ["check_doubled"] and done.left_behind == []  # exercise 2 was still blank
    new = nbformat.read(mine / "00_tiny.ipynb", as_version=4)
    assert any(c.source == "A paragraph the course added later." for c in new.cells)
    assert [c.source for c in answer_cells(new)][0] == "doubled = [n * 2 for n in numbers]"
    assert is_blank(answer_cells(new)[1])
    assert done.backup.parent == mine / BACKUPS
    kept = nbformat.read(done.backup, as_version=4)
    assert answer_cells(kept)[0].source == "doubled = [n * 2 for n in numbers]"
    assert older_copies(mine, course) == []
    [again] = refresh(mine, ["00_tiny"], course)  # within the same second: the first backup stays
    assert again.backup != done.backup and done.backup.exists() and again.carried == ["check_doubled"]


def test_an_answer_whose_exercise_the_new_version_dropped_stays_in_the_backup(course, tmp_path):
    mine = tmp_path / "mine"
    make_copies(mine, course)
    answer(mine / "00_tiny.ipynb", "key = lambda m, c: m + ':' + c", 1)
    changed = tiny_lesson()
    changed.cells[-1].source = "check_key_v2(key)"
    nbformat.write(changed, course / "00_tiny.ipynb")

    [done] = refresh(mine, ["00"], course)

    assert done.carried == [] and done.left_behind == ["check_key"]
    assert answer_cells(nbformat.read(done.backup, as_version=4))[1].source.startswith("key = lambda")


def test_refresh_names_the_lessons_when_asked_for_one_that_is_not_there(course, tmp_path):
    make_copies(tmp_path / "mine", course)
    with pytest.raises(ValueError, match="00_tiny, 01_tiny"):
        refresh(tmp_path / "mine", ["07"], course)


def test_lesson_00s_check_cell_names_the_older_copies_and_is_silent_elsewhere(course, tmp_path, capsys):
    mine = tmp_path / "mine"
    make_copies(mine, course)
    report_older_copies(mine)
    report_older_copies(course)  # the full lessons' own folder
    assert capsys.readouterr().out == ""
    nbformat.write(tiny_lesson("Changed."), course / "01_tiny.ipynb")
    report_older_copies(mine)
    printed = capsys.readouterr().out
    assert "01_tiny.ipynb" in printed and "-m idemlib.course refresh . 01" in printed


def test_the_copy_command_works_from_a_read_only_installed_package(course, tmp_path):
    """As a JupyterHub image runs it: the package installed without the lessons beside it, read-only."""
    site = tmp_path / "site-packages"
    shutil.copytree(ROOT / "idemlib", site / "idemlib", ignore=shutil.ignore_patterns("__pycache__"))
    for path in [site, *site.rglob("*")]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("IDEMLIB_LESSONS", None)
    try:
        run = subprocess.run([sys.executable, "-m", "idemlib.course", "copy", str(home / "lessons"), "--from", str(course)],
                             cwd=home, env=env, capture_output=True, text=True, timeout=120)
        bare = subprocess.run([sys.executable, "-m", "idemlib.course", "copy", "lessons"],
                              cwd=home, env=env, capture_output=True, text=True, timeout=120)
    finally:
        for path in [site, *site.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    assert run.returncode == 0, run.stderr
    assert "Made now, with every answer blank: lessons 00, 01." in run.stdout
    assert sorted(p.name for p in (home / "lessons").iterdir()) == [
        MANIFEST, "00_tiny.ipynb", "01_tiny.ipynb", "GLOSSARY.md", "matplotlibrc"]
    assert json.loads((home / "lessons" / MANIFEST).read_text())["lessons"] == str(course.resolve())
    # Without --from, the installed package has no lessons beside it: it says how to name them.
    assert bare.returncode != 0 and "--from FOLDER" in bare.stderr


# The solution a judged answer offers.

def judged(check: str, verdict: Feedback) -> Feedback:
    return Feedback(verdict.correct, verdict.message, exercise=check)


@pytest.fixture
def learner(course, tmp_path, monkeypatch):
    """A kernel running in a learner's copy of the tiny course (the way JupyterLab starts one)."""
    mine = tmp_path / "mine"
    make_copies(mine, course)
    monkeypatch.chdir(mine)
    monkeypatch.delenv("IDEMLIB_LESSONS", raising=False)
    monkeypatch.delenv("IDEMLIB_SOLUTIONS", raising=False)
    monkeypatch.setattr(solutions, "_answered", set())
    return mine


def test_the_solution_is_read_from_the_full_lesson_by_its_check(course):
    assert solutions.solution_of("check_doubled", course) == SOLUTION_1
    assert solutions.solution_of("check_key", course) == SOLUTION_2
    assert solutions.solution_of("check_nothing", course) is None


def test_every_real_exercise_has_its_solution_found():
    checks = {re.match(r"\s*(check_\w+)\(", c.source).group(1)
              for path in lesson_paths() for c in nbformat.read(path, as_version=4).cells
              if c.cell_type == "code" and re.match(r"\s*check_\w+\(", c.source)}
    found = {check: solutions.solution_of(check, LESSONS) for check in checks}
    assert checks and all(found.values()), [check for check, source in found.items() if not source]


def test_a_judged_answer_offers_its_solution_and_an_unanswered_one_does_not(learner, capsys):
    unanswered = judged("check_doubled", blank(..., "a list"))
    assert unanswered.verdict == "blank"
    bundle = unanswered._repr_mimebundle_()
    assert "<details" not in bundle["text/html"] and SOLUTION_1 not in bundle["text/html"]
    assert "show_solution" not in bundle["text/plain"]
    solutions.show_solution("check_doubled")
    assert "Answer first" in capsys.readouterr().out

    for verdict in (hint("Each number once only."), right("Doubled.")):
        bundle = judged("check_doubled", verdict)._repr_mimebundle_()
        fold = bundle["text/html"].split("<details", 1)[1]
        assert SOLUTION_1.replace('"', "&quot;") in fold
        assert 'show_solution(\'check_doubled\')' in bundle["text/plain"]
        assert set(bundle) == {"text/plain", "text/html", "application/vnd.idemlib.verdict+json"}
        assert bundle["text/plain"].startswith(repr(judged("check_doubled", verdict)))
    solutions.show_solution("check_doubled")
    assert capsys.readouterr().out.strip() == SOLUTION_1
    solutions.show_solution("check_key")  # not answered in this kernel yet
    assert "Answer first" in capsys.readouterr().out


def test_without_the_full_lessons_the_verdict_says_the_teacher_has_them(learner, course, monkeypatch):
    shutil.rmtree(course)  # a copy handed out on its own: the lessons it came from are not here
    monkeypatch.setattr(solutions, "LESSONS", learner / "no such folder")
    page = judged("check_doubled", hint("Not yet."))._repr_html_()
    assert "<details" not in page and "with your teacher" in page


def test_a_teacher_can_withhold_the_solutions_where_the_lessons_are_readable(learner, monkeypatch):
    monkeypatch.setenv("IDEMLIB_SOLUTIONS", "teacher")
    page = judged("check_doubled", hint("Not yet."))._repr_html_()
    assert SOLUTION_1 not in page and "with your teacher" in page
    assert "with your teacher" in judged("check_doubled", right("Yes."))._repr_mimebundle_()["text/plain"]


def test_the_full_lesson_offers_nothing_since_its_solution_is_just_above(course, monkeypatch):
    monkeypatch.chdir(course)
    monkeypatch.setenv("IDEMLIB_LESSONS", str(course))
    verdict = judged("check_doubled", right("Doubled."))
    assert verdict._repr_mimebundle_()["text/plain"] == repr(verdict)
    assert "<details" not in verdict._repr_html_()


# make lab itself.

def lab_command(folder: Path, port: int) -> list[str]:
    """The JupyterLab command ``make lab`` runs (read from ``make -n``), for a learner's folder ``folder``."""
    printed = subprocess.run(["make", "-n", "lab", f"MY_LESSONS={folder}", f"LAB_ARGS=--no-browser --port {port}"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout
    copy, lab = [line for line in printed.replace("\\\n", " ").splitlines() if "idemlib.course copy" in line
                 or "jupyter lab" in line]
    assert copy.split() == [".venv/bin/python", "-m", "idemlib.course", "copy", str(folder)]
    command = lab.split("jupyter lab", 1)[1].split(";")[0].split()
    return [str(ROOT / ".venv" / "bin" / "jupyter"), "lab", *command]


def test_make_lab_prints_a_url_that_opens_the_learners_lesson_00(tmp_path):
    import socket
    import time
    import urllib.error
    import urllib.request

    mine = tmp_path / "mine"
    make_copies(mine, LESSONS)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = lab_command(mine, port)
    assert ("--allow-root" in command) == (os.geteuid() == 0)
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    lab = subprocess.Popen([*command, "--ServerApp.ip=127.0.0.1"], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        url, page = None, ""
        for line in lab.stderr:
            if found := re.search(rf"(http://127\.0\.0\.1:{port}/\S+)", line):
                url = found.group(1)
                break
        assert url and url.split("?")[0].endswith("/lab/tree/00_start_here.ipynb"), url
        for _ in range(60):  # the URL is printed as the server starts listening
            try:
                page = urllib.request.urlopen(url, timeout=60).read().decode()
                break
            except urllib.error.URLError:
                time.sleep(0.5)
        assert '"treePath": "00_start_here.ipynb"' in page
    finally:
        lab.terminate()
        lab.wait(timeout=60)
