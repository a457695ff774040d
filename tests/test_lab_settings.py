"""JupyterLab opens clean for a newcomer: the course's own settings turn off the "Jupyter news?" pop-up.

The defaults live in ``jupyter/overrides.json``; ``make lab`` and ``make test``
install them as the venv's JupyterLab ``settings/overrides.json`` (never into the
user's home). The test asks a real JupyterLab server from this environment what it
serves, with a fresh user-settings folder, as on a learner's first start.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from jupyterlab.commands import get_app_dir

ROOT = Path(__file__).resolve().parents[1]
COURSE_SETTINGS = ROOT / "jupyter" / "overrides.json"
NOTIFICATION = "@jupyterlab/apputils-extension:notification"


def test_the_course_settings_are_installed_where_this_jupyterlab_reads_them():
    installed = Path(get_app_dir()) / "settings" / "overrides.json"
    assert installed.exists(), f"{installed} is missing: run `make lab` or `make test`, which install it"
    assert json.loads(installed.read_text()) == json.loads(COURSE_SETTINGS.read_text()), (
        "the installed JupyterLab settings are stale: run `make lab` or `make test` to reinstall them")


def test_a_first_start_never_asks_about_jupyter_news_nor_checks_for_updates(jupyterlab):
    base, token = jupyterlab.split("/lab/")[0], jupyterlab.split("token=")[1]
    with urllib.request.urlopen(f"{base}/lab/api/settings/{NOTIFICATION}?token={token}", timeout=10) as answer:
        served = json.load(answer)
    properties = served["schema"]["properties"]
    # "none" (the stock default) is what makes JupyterLab ask; "false" means never fetch news.
    assert properties["fetchNews"]["default"] == "false"
    assert properties["checkForUpdates"]["default"] is False
    assert json.loads(served["raw"] or "{}") == {}, "a fresh learner has no user settings of their own"
