"""The course's commands: ``python -m idemlib.course html|student|copy|refresh|grade|nav``.

``make html``, ``make student``, ``make lab`` (``copy my-lessons``) and ``make grade`` call this;
it sits above publishing and grading so neither needs the other.

``copy FOLDER [--from LESSONS]`` makes the learner's own copy of every lesson FOLDER lacks (answers
blank) and never touches one that exists; ``refresh FOLDER [NN ...]`` replaces older copies by the
lesson's new version with the learner's answers carried over. Both need only the full lessons'
folder (``--from``, ``IDEMLIB_LESSONS``, or the course's ``notebooks/``), not a writable package:
a JupyterHub image runs ``python -m idemlib.course copy ~/lessons --from /srv/course/notebooks``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from idemlib.course.copies import make_copies, refresh, status_report
from idemlib.course.grade import CELL_SECONDS, NOTEBOOK_SECONDS, grade_folder
from idemlib.course.lessons import ROOT, fold_solutions, write_navigation
from idemlib.course.publish import build_student
from idemlib.course.sandbox import SandboxUnavailable
from idemlib.course.site import build_html


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m idemlib.course", description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["html", "student", "copy", "refresh", "grade", "nav"],
                        help="the static site, student copies, a learner's own copies (made once) or their refresh, "
                             "grades of handed-in copies, or the lessons' navigation and folded solutions")
    parser.add_argument("folder", nargs="?", type=Path,
                        help="html/student/copy/refresh: where to write (default build/html, build/student, my-lessons); "
                             "grade: the submissions")
    parser.add_argument("names", nargs="*",
                        help="refresh: the lessons to refresh (01 or its file name; default every older copy)")
    parser.add_argument("--from", dest="lessons", type=Path,
                        help="copy/refresh: the full lessons' folder (default IDEMLIB_LESSONS, else the course's notebooks/)")
    parser.add_argument("--lesson", help="grade: the assigned lesson's number (e.g. 02); other lessons are reported")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "grades", help="grade: where to write the table")
    parser.add_argument("--cell-seconds", type=int, default=CELL_SECONDS, help="grade: time limit for one answer or check")
    parser.add_argument("--notebook-seconds", type=int, default=NOTEBOOK_SECONDS, help="grade: time limit for one hand-in")
    args = parser.parse_args(argv)
    if args.what == "grade":
        if args.folder is None or not args.folder.is_dir():
            parser.error(f"grade needs the folder of submissions, e.g. make grade SUBMISSIONS=handed_in (got {args.folder})")
        try:
            rows = grade_folder(args.folder, args.out, expected_lesson=args.lesson,
                                cell_seconds=args.cell_seconds, notebook_seconds=args.notebook_seconds)
        except SandboxUnavailable as error:
            raise SystemExit(f"grade: {error}") from None
        right = sum(row.verdict == "right" for row in rows)
        print(f"{right} of {sum(bool(row.exercise) for row in rows)} exercises right; "
              f"wrote {args.out / 'grades.csv'} and {args.out / 'index.html'}")
        return
    if args.what == "nav":
        changed = set(write_navigation()) | set(fold_solutions())
        print(f"navigation and folded solutions rewritten in {len(changed)} lessons")
        return
    if args.what in ("copy", "refresh"):
        folder = args.folder or Path("my-lessons")
        try:
            if args.what == "refresh":
                for done in refresh(folder, args.names, args.lessons):
                    print(f"{done.name}: the new version, with {len(done.carried)} of your answers carried over; "
                          f"your old copy is {done.backup}"
                          + (f"; answers to exercises it no longer has ({', '.join(done.left_behind)}) stay there"
                             if done.left_behind else ""))
            print(status_report(folder, make_copies(folder, args.lessons)))
        except (FileNotFoundError, ValueError) as error:
            raise SystemExit(f"{args.what}: {error}") from None
        return
    out = args.folder or ROOT / "build" / args.what
    if args.what == "html":
        warnings = build_html(out)
        print("\n".join(warnings))
        print(f"wrote the site to {out}; open {out / 'index.html'}" + (f" ({len(warnings)} warnings)" if warnings else ""))
        return
    written = build_student(out)
    print(f"wrote {len(written)} files to {out}")


if __name__ == "__main__":
    main()
