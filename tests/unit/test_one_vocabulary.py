"""Each state set, limit and config default is written in one place:

- the states of experiments, trials, runs and checkpoints, and the sets and
  transitions over them: harness/determined/common/states.py (and the web
  UI's generated copy, services/gateway/http/ui/states.js);
- the sizes the parts agree on: harness/determined/common/limits.py;
- config defaults: the config model, harness/determined/common/expconf.

These tests read the source tree and name each place that writes one out
again, and the home to import it from instead."""

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.gateway.http import states_js

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("harness", "services", "deploy", "bench")
GENERATED = ("harness/determined/proto/", "services/gateway/http/ui/vendor/")
STATES_HOMES = ("harness/determined/common/states.py", "services/gateway/http/ui/states.js")
LIMITS_HOME = "harness/determined/common/limits.py"
DEFAULTS_HOME = "harness/determined/common/expconf/"

# A state named in code: a string literal ("COMPLETED", 'COMPLETED'), an enum
# member (State.COMPLETED) or a proto enum value (EXPERIMENT_STATE_COMPLETED);
# never STOPPING_COMPLETED for COMPLETED, nor a word in prose.
_NAMED = r"""(?:["']{0}["']|\.{0}\b|STATE_{0}\b)"""
# The innermost brackets of a literal collection (a set, list, tuple, call).
_BRACKETS = re.compile(r"[\[({][^\[\](){}]*[\])}]")
STATE_SETS = {
    "TERMINAL_STATES": (("COMPLETED", "CANCELED", "ERROR"), 3),
    "EXPERIMENT_DELETION_STATES": (("DELETING", "DELETE_FAILED", "DELETED"), 2),
    "STOPPING_STATES": (("STOPPING_COMPLETED", "STOPPING_CANCELED", "STOPPING_KILLED", "STOPPING_ERROR"), 2),
    "CHECKPOINT_DELETABLE_STATES": (("COMPLETED", "PARTIALLY_DELETED"), 2),
}
MIB = r"(?:\* 1024 \* 1024|\* 1024\*\*2|\* 2\*\*20|<< 20)"
# pattern -> what to do instead
LIMITS = {
    rf"\b128 {MIB}|\b134217728\b|^MAX_MESSAGE_BYTES =": "use determined.common.limits.MAX_MESSAGE_BYTES",
    rf"\b95 {MIB}|\b99614720\b|// 8\) \* 6|^MAX_CONTEXT_(?:BYTES|SIZE) =": "use determined.common.limits.MAX_CONTEXT_BYTES",
    r"max_payload: 8MB|\b8388608\b|^MAX_EVENT_BYTES =": "use determined.common.limits.MAX_EVENT_BYTES",
}
DEFAULTS = {
    r"GcPolicy\((?:save_experiment_best=)?0, (?:save_trial_best=)?1, (?:save_trial_latest=)?1\)"
    r"|\.get\(\"save_(?:experiment_best|trial_best|trial_latest)\", \d+\)": (
        "read expconf.CheckpointStorage's save_* (services.common.gc_policy.policy_of)"
    ),
    r"weight\b[^\n]*\b(?:or|else) 1(?:\.0)?\b|\bweight=1(?:\.0)?\b": (
        "read expconf.Resources' weight (services.common.scheduling.DEFAULT_WEIGHT)"
    ),
    r"\.get\(\"smaller_is_better\", (?:True|False)\)": "read expconf.SearcherConfig's smaller_is_better",
}


def _sources() -> Iterator[tuple[str, str]]:
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            relative = path.relative_to(ROOT).as_posix()
            if path.suffix in (".py", ".js") and not relative.startswith(GENERATED):
                yield relative, path.read_text(encoding="utf-8")


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def state_set_copies(relative: str, text: str) -> list[str]:
    """Where `text` writes out one of STATE_SETS (as much of it as counts)."""
    found = []
    for match in _BRACKETS.finditer(text):
        for name, (members, enough) in STATE_SETS.items():
            named = [m for m in members if re.search(_NAMED.format(m), match.group())]
            if len(named) >= enough:
                found.append(
                    f"{relative}:{_line(text, match.start())}: {'/'.join(named)} (use states.{name})"
                )
    return found


def pattern_copies(relative: str, text: str, patterns: dict[str, str]) -> list[str]:
    return [
        f"{relative}:{_line(text, match.start())}: {match.group().strip()!r} ({advice})"
        for pattern, advice in patterns.items()
        for match in re.finditer(pattern, text, re.MULTILINE)
    ]


def test_state_sets_live_only_in_the_states_module() -> None:
    copies = [
        copy
        for relative, text in _sources()
        if relative not in STATES_HOMES
        for copy in state_set_copies(relative, text)
    ]
    assert not copies, "state sets written out again:\n" + "\n".join(copies)


def test_limits_live_only_in_the_limits_module() -> None:
    copies = [
        copy
        for relative, text in _sources()
        if relative != LIMITS_HOME
        for copy in pattern_copies(relative, text, LIMITS)
    ]
    assert not copies, "limits written out again:\n" + "\n".join(copies)


def test_config_defaults_live_only_in_the_config_model() -> None:
    copies = [
        copy
        for relative, text in _sources()
        if not relative.startswith(DEFAULTS_HOME)
        for copy in pattern_copies(relative, text, DEFAULTS)
    ]
    assert not copies, "config defaults written out again:\n" + "\n".join(copies)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('TERMINAL = new Set(["COMPLETED", "CANCELED", "ERROR", "DELETED"]);', 1),
        ("frozenset({\n    State.EXPERIMENT_STATE_COMPLETED,\n    State.EXPERIMENT_STATE_CANCELED,\n"
         "    State.EXPERIMENT_STATE_ERROR,\n})", 1),
        ("x = ('DELETING', 'DELETE_FAILED', 'DELETED')", 1),
        ('c.state in ("COMPLETED", "PARTIALLY_DELETED")', 1),
        ('"""Ends (COMPLETED, CANCELED or ERROR)."""', 0),
        ('if state in ("STOPPING_COMPLETED", "COMPLETED", "ACTIVE", "ERROR"):', 0),
        ('pause.disabled = state !== "ACTIVE"; kill(TERMINAL.has(state) || state === "CANCELED")', 0),
    ],
)  # fmt: skip
def test_the_state_set_search_finds_copies_and_not_prose(text: str, expected: int) -> None:
    assert len(state_set_copies("x.py", text)) == expected


def test_the_web_ui_states_module_is_generated_from_the_python_one() -> None:
    assert states_js.STATES_JS.read_text(encoding="utf-8") == states_js.javascript(), (
        f"{states_js.STATES_JS.relative_to(ROOT)} is out of date: run `{states_js.COMMAND}`"
    )
