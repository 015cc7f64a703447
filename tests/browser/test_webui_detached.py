"""A detached run (determined.experimental.core_v2) in the web UI: the experiments list marks
its row "detached", and its page says that a script outside the cluster reports."""

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from support.e2e_cluster import Cluster
from support.webui_browser import css, css_all, open_page, screenshot, until

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

SCRIPT = textwrap.dedent(
    """
    import sys

    from determined.experimental import core_v2

    core_v2.init(config=core_v2.Config(name="webui-detached", checkpoint_storage=sys.argv[1]))
    core_v2.train.report_training_metrics(steps_completed=1, metrics={"loss": 1.0})
    print(core_v2.info.trial.experiment_id, flush=True)
    core_v2.close()
    """
)


def test_a_detached_run_is_marked_in_the_list_and_on_its_page(
    signed_in: Any, ui_url: str, cluster: Cluster, tmp_path: Path
) -> None:
    (tmp_path / "detached.py").write_text(SCRIPT)
    run = subprocess.run(
        [sys.executable, str(tmp_path / "detached.py"), str(cluster.storage_folder("detached"))],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    experiment_id = int(run.stdout.split()[-1])
    browser = signed_in
    open_page(browser, ui_url, "experiments")
    badge = f'tr[data-experiment-id="{experiment_id}"] td.name .detached'
    until(browser, lambda d: css_all(d, badge) and css(d, badge).is_displayed(), "the detached badge")
    shown_badges = [b for b in css_all(browser, "#experiments-table td.name .detached") if b.is_displayed()]
    assert len(shown_badges) == 1  # the managed experiments' rows show none
    open_page(browser, ui_url, f"experiments/{experiment_id}")
    until(
        browser, lambda d: "a script outside the cluster reports" in css(d, "dl.facts").text, "the Runs fact"
    )
    screenshot(browser, "experiment-detached")
