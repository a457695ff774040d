"""Every exercise check has a bank of wrong answers it refuses and right ones it accepts."""

from __future__ import annotations

import importlib
from pathlib import Path

from exercise_bank import MIN_RIGHT, MIN_WRONG, Bank

from idemlib.course import exercises

HERE = Path(__file__).resolve().parent


def all_banks() -> dict[str, Bank]:
    banks: dict[str, Bank] = {}
    for path in sorted(HERE.glob("test_exercises_*.py")):
        banks.update(getattr(importlib.import_module(path.stem), "BANKS", {}))
    return banks


def test_every_check_has_a_bank_thick_enough_to_tell_right_from_wrong():
    checks = sorted(name for name in dir(exercises) if name.startswith("check_"))
    banks = all_banks()
    missing = [name for name in checks if name not in banks]
    assert not missing, f"checks without a bank (add BANKS in tests/test_exercises_NN.py): {missing}"
    thin = [name for name, bank in banks.items() if len(bank.wrong) < MIN_WRONG or len(bank.right) < MIN_RIGHT]
    assert not thin, f"banks with fewer than {MIN_WRONG} wrong or {MIN_RIGHT} right answers: {thin}"


def test_every_check_names_its_exercise_in_a_structured_verdict():
    # idemlib.course.grade reads verdicts from this MIME bundle, never from the printed words.
    from idemlib.course.exercises.feedback import VERDICT_MIME

    for name in (n for n in dir(exercises) if n.startswith("check_")):
        check = getattr(exercises, name)
        assert getattr(check, "__wrapped__", None), f"{name} lacks @exercise"
        bundle = all_banks()[name].blank
        verdict = check(*bundle)._repr_mimebundle_()[VERDICT_MIME]
        assert verdict == {"exercise": name, "verdict": "blank", "message": verdict["message"]}
