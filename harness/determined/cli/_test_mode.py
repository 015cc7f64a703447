"""`det experiment create --test-mode` and `--local --test-mode`: run the
model definition once, on a tiny length, to catch coding errors in seconds
(the seeds' "Best Practice": sanity-check the training code before the real
experiment).

Two runners share one pure rewrite of the config, `rewrite_for_test_mode`:

- against the cluster (`run_on_cluster`): the rewritten config is created as an
  ordinary experiment, the CLI waits for it to end and says whether the model
  definition worked, showing the trial's logs when it did not;
- locally (`run_local`): no cluster at all. The context is packed exactly as an
  upload would be (so `.detignore` and the size limit apply), extracted into a
  temporary folder and the entrypoint runs there with the real harness. The
  process has none of the trial environment, so `det.get_cluster_info()` is
  None and `det.core.init()` gives its off-cluster contexts: metrics are logged,
  checkpoints go to the local user data folder. Consequently the script does
  not receive the test-mode hyperparameters (there is no cluster info to read
  them from); it runs as `python3 train.py` would on this machine, with the
  config's environment variables.
  A legacy Trial class (`entrypoint: model_def:MyTrial`) runs through
  `python3 -m determined.exec.harness --test-mode --config <test-mode config>`:
  one training batch, one validation batch and one checkpoint, with the
  test-mode hyperparameters. On the cluster the rewritten `searcher.max_length`
  of one batch is what makes such a trial train a single batch; a Trainer script
  that passes its own `max_length` trains one batch because the rewrite sets
  `DET_TEST_MODE=1` in the trial's environment (both runners).

Hyperparameters: a test run needs one value per hyperparameter. Rather than a
random sample (Determined's choice), each non-constant hyperparameter is fixed
to a deterministic representative — the midpoint of an int/double range, the
geometric midpoint of a log range, the first categorical value — so that a
failing test run fails again the same way when repeated, and the CLI needs no
sampler from the services.

Everything heavy is imported inside the functions: `det --help` stays fast.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from determined.cli._client import CliError
from determined.cli.experiment import submit
from determined.common import states

if TYPE_CHECKING:
    from determined.cli._client import Gateway
    from determined.common.expconf import ExperimentConfig

TEST_LENGTH = {"batches": 1}
SUCCESS = "Model definition test succeeded! \N{PARTY POPPER}"
POLL_INTERVAL_S = 0.5
# What the agent hands a trial (docs/CONTRACTS.md, "Trial processes"): none of it
# may reach a local test run, or the harness would believe it is on a cluster.
TRIAL_VARIABLES = (
    "DET_MASTER", "DET_CLUSTER_ID", "DET_AGENT_ID", "DET_SLOT_IDS", "DET_TASK_ID", "DET_ALLOCATION_ID",
    "DET_SESSION_TOKEN", "DET_TASK_TYPE", "DET_EXPERIMENT_ID", "DET_TRIAL_ID", "DET_TRIAL_RUN_ID",
    "DET_TRIAL_SEED", "DET_EXPERIMENT_CONFIG", "DET_HPARAMS", "DET_STEPS_COMPLETED", "DET_LATEST_CHECKPOINT",
)  # fmt: skip


# ---------------------------------------------------------------------------
# The config rewrite (pure)


def rewrite_for_test_mode(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The test-mode copy of an experiment config (as parsed from YAML).

    - searcher: `single` for one batch (`max_length: {batches: 1}`), keeping the
      metric, `smaller_is_better` and any warm-start source;
    - hyperparameters: constants kept, every other one fixed to one value (see
      the module docstring), written in the typed form `{"type": "const", "val": ...}`,
      nested groups kept as groups;
    - `max_restarts: 0`: a failure is reported, not retried;
    - `DET_TEST_MODE=1` in the trial's environment: a Trainer script that passes its
      own max_length still trains and validates a single batch;
    - checkpoint_storage: the configured one (or the cluster's default
      `shared_fs`) keeping no checkpoint after the run (GC 0/0/0);
    - name: "<name> (test mode)".

    Raises InvalidConfigError when the config (or, which would be a bug here,
    the rewritten one) is not valid. Does not change ``raw``."""
    import copy

    from determined.common import entrypoint, expconf

    config = expconf.load_config(raw)
    rewritten: dict[str, Any] = copy.deepcopy(dict(raw))
    searcher: dict[str, Any] = {"name": "single", "metric": config.searcher.metric}
    searcher["smaller_is_better"] = config.searcher.smaller_is_better
    for field in ("source_trial_id", "source_checkpoint_uuid"):
        if getattr(config.searcher, field) is not None:
            searcher[field] = getattr(config.searcher, field)
    searcher["max_length"] = dict(TEST_LENGTH)
    rewritten["searcher"] = searcher
    rewritten["hyperparameters"] = constant_hyperparameters(config.hyperparameters)
    rewritten["max_restarts"] = 0
    rewritten["environment"] = entrypoint.with_variable(rewritten, entrypoint.TEST_MODE_VARIABLE, "1")
    storage = dict(rewritten.get("checkpoint_storage") or {"type": "shared_fs"})
    storage.update(save_experiment_best=0, save_trial_best=0, save_trial_latest=0)
    rewritten["checkpoint_storage"] = storage
    rewritten["name"] = f"{config.name} (test mode)" if config.name else "test mode"
    expconf.load_config(rewritten)  # the rewrite must stay a valid config
    return rewritten


def constant_hyperparameters(hparams: Mapping[str, Any]) -> dict[str, Any]:
    """Typed hyperparameters with every leaf made a constant; nested groups stay groups."""
    from determined.common import expconf

    return {
        name: {"type": "object", "vals": constant_hyperparameters(hp.vals)}
        if isinstance(hp, expconf.HyperparameterGroup)
        else {"type": "const", "val": representative_value(hp)}
        for name, hp in hparams.items()
    }


def representative_value(hp: Any) -> Any:
    """One deterministic value of a hyperparameter (a dict for a nested group)."""
    from determined.common import expconf

    if isinstance(hp, expconf.ConstHyperparameter):
        return hp.val
    if isinstance(hp, expconf.IntHyperparameter):
        return (hp.minval + hp.maxval) // 2
    if isinstance(hp, expconf.DoubleHyperparameter):
        return (hp.minval + hp.maxval) / 2
    if isinstance(hp, expconf.LogHyperparameter):
        return float(hp.base ** ((hp.minval + hp.maxval) / 2))
    if isinstance(hp, expconf.CategoricalHyperparameter):
        return hp.vals[0]
    if isinstance(hp, expconf.HyperparameterGroup):
        return {name: representative_value(inner) for name, inner in hp.vals.items()}
    raise TypeError(f"unknown hyperparameter {hp!r}")


def _rewritten_yaml(config_yaml: str) -> tuple[dict[str, Any], str]:
    import yaml

    from determined.common import expconf

    try:
        rewritten = rewrite_for_test_mode(expconf.parse_yaml(config_yaml) or {})
    except expconf.InvalidConfigError as problem:
        raise CliError(f"the test-mode config is not valid:\n{problem}") from None
    return rewritten, yaml.safe_dump(rewritten, sort_keys=False)


def _say(line: str, *, file: Any = None) -> None:
    """Print and flush, falling back to ASCII on a terminal that cannot show the emoji."""
    stream = file or sys.stdout
    try:
        print(line, file=stream, flush=True)
    except UnicodeEncodeError:
        print(line.encode("ascii", "replace").decode("ascii"), file=stream, flush=True)


# ---------------------------------------------------------------------------
# Against the cluster


def run_on_cluster(gateway: Gateway, config_yaml: str, context_hash: str) -> int:
    """Create the test-mode experiment (with the uploaded context `context_hash`,
    "" for none), wait for it to end and report; 0 on success."""

    _, test_yaml = _rewritten_yaml(config_yaml)
    response = submit(gateway, test_yaml, context_hash, activate=True)
    for warning in response.warnings:
        if "max_length is deprecated" not in warning:  # test mode set it, not the user
            print(f"warning: {warning}", file=sys.stderr)
    experiment_id = response.experiment_id
    _say(f"Created experiment {experiment_id}")
    try:
        found = _wait_for_end(gateway, experiment_id)
    except KeyboardInterrupt:
        _say(
            f"Test mode: stopped waiting; experiment {experiment_id} keeps running "
            f"(stop it with: det experiment kill {experiment_id})",
            file=sys.stderr,
        )
        return 130
    state = found.experiment.state
    completed = states.ExperimentState.COMPLETED
    if state == completed and all(t.state == completed for t in found.trials):
        _say(SUCCESS)
        return 0
    _show_trial_logs(gateway, found.trials)
    trials = ", ".join(
        f"trial {t.id} ended {t.state}" + (f" ({t.end_reason})" if t.end_reason else "") for t in found.trials
    )
    _say(
        f"Model definition test failed: experiment {experiment_id} ended {state}"
        + (f"; {trials}" if trials else " before a trial ran"),
        file=sys.stderr,
    )
    return 1


def _wait_for_end(gateway: Gateway, experiment_id: int) -> Any:
    from determined.proto import api_pb2

    _say("Test mode: waiting for the trial to start...")
    announced: set[int] = set()
    while True:
        found = gateway.call(
            gateway.stub.GetExperiment, api_pb2.GetExperimentRequest(experiment_id=experiment_id)
        )
        for trial in found.trials:
            if trial.started_at_ns and trial.id not in announced:
                announced.add(trial.id)
                _say(f"Test mode: trial {trial.id} is running (one batch)...")
        if states.is_ended(found.experiment.state):
            return found
        time.sleep(POLL_INTERVAL_S)


def _show_trial_logs(gateway: Gateway, trials: Any) -> None:
    from determined.cli.trial import follow_logs

    for trial in sorted(trials, key=lambda t: t.id):
        _say(f"Logs of trial {trial.id}:")
        follow_logs(gateway, trial.id, follow=False)


# ---------------------------------------------------------------------------
# On this machine


def run_local(config_yaml: str, context_dir: Path | None, includes: list[Path]) -> int:
    """Run the entrypoint of the test-mode config in a temporary copy of the
    context, off-cluster; 0 when it exits 0."""
    import subprocess
    import tempfile

    from determined.common import expconf
    from determined.common.entrypoint import STARTUP_HOOK

    rewritten, _ = _rewritten_yaml(config_yaml)
    with tempfile.TemporaryDirectory(prefix="det-test-mode-") as temporary:
        folder = Path(temporary)
        config = expconf.apply_cluster_defaults(
            expconf.load_config(rewritten),
            checkpoint_host_path=str(folder / "checkpoints"),
            experiment_seed=0,
            name="test mode",
        )
        run_dir = _unpacked_context(context_dir, includes, folder / "context")
        startup_hook = (run_dir / STARTUP_HOOK).is_file()
        argv = entrypoint_argv(local_entrypoint(config, folder), startup_hook=startup_hook)
        _say(f"Test mode: running {_shown(config.entrypoint)} locally in {run_dir}")
        process = subprocess.Popen(argv, cwd=run_dir, env=local_environment(os.environ, config))
        try:
            code = process.wait()
        except KeyboardInterrupt:  # the entrypoint got the same Ctrl-C: let it finish
            code = process.wait()
    if code == 0:
        _say(SUCCESS)
        return 0
    how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
    _say(f"Model definition test failed: the entrypoint {how}", file=sys.stderr)
    return 1


def local_entrypoint(config: ExperimentConfig, folder: Path) -> str | list[str] | None:
    """What runs locally: the entrypoint as written, or for a legacy Trial class the
    harness in test mode (one batch; the torch launcher needs a cluster), reading the
    test-mode config from `folder`."""
    if not config.is_legacy_trial:
        return config.entrypoint
    config_file = folder / "config.json"
    config_file.write_text(json.dumps(config.to_json_dict()), encoding="utf-8")
    harness = [sys.executable, "-m", "determined.exec.harness", "--test-mode", "--config", str(config_file)]
    return [*harness, str(config.entrypoint).strip()]


def _unpacked_context(context_dir: Path | None, includes: list[Path], run_dir: Path) -> Path:
    """`run_dir` holding the context as an upload would pack it (`.detignore`,
    `-i/--include` and the size limit apply)."""
    from determined.cli.experiment import say_context_notes
    from determined.common import context

    run_dir.mkdir()
    if context_dir is not None or includes:
        try:
            files = context.context_files(context_dir, includes=includes)
            say_context_notes(files)
            context.extract_context(b"".join(files.archive_chunks()), run_dir)
        except context.ContextError as problem:
            raise CliError(str(problem)) from None
    return run_dir


def entrypoint_argv(entrypoint: str | list[str] | None, *, startup_hook: bool) -> list[str]:
    """The command the agent would run (`determined.common.entrypoint`)."""
    from determined.common import entrypoint as shared

    try:
        return shared.entrypoint_argv(entrypoint, startup_hook=startup_hook)
    except shared.EntrypointError as problem:
        raise CliError(str(problem)) from None


def local_environment(inherited: Mapping[str, str], config: ExperimentConfig) -> dict[str, str]:
    """This shell's environment without any trial variable, with the current
    Python's bin folder first on PATH (so `python3` can import determined) and
    the config's `environment.environment_variables` (the cpu ones)."""
    from determined.common.entrypoint import configured_variables

    env = {name: value for name, value in inherited.items() if name not in TRIAL_VARIABLES}
    env["PATH"] = os.pathsep.join(
        p for p in (os.path.dirname(sys.executable), inherited.get("PATH", "")) if p
    )
    env.update(configured_variables(config.to_json_dict(), "cpu"))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _shown(entrypoint: str | list[str] | None) -> str:
    import shlex

    return repr(entrypoint) if isinstance(entrypoint, str) else repr(shlex.join(entrypoint or []))
