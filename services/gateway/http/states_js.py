"""Writes `ui/states.js`, the web UI's copy of determined.common.states (the
experiment states, and the task kinds and states).

Generated and checked in rather than served: the UI stays plain static files
(cached, readable in the browser's sources, no route to keep), and
tests/unit/test_one_vocabulary.py fails, naming this command, when the file
no longer matches the Python module:

    python -m services.gateway.http.states_js
"""

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from determined.common import states

STATES_JS = Path(__file__).parent / "ui" / "states.js"
COMMAND = "python -m services.gateway.http.states_js"


def _names(members: Iterable[str]) -> str:
    return json.dumps(sorted(str(m) for m in members))


def _transitions(transitions: Mapping[Any, frozenset[Any]]) -> str:
    lines = [f"  {state}: {_names(after)}," for state, after in transitions.items()]
    return "{\n" + "\n".join(lines) + "\n}"


def javascript() -> str:
    """The module's text: the sets and the map the pages use, and `canTransition`."""
    return f"""// Generated from harness/determined/common/states.py by `{COMMAND}`: do not edit.
// The experiment and task states the pages use and the changes between them.

export const EXPERIMENT_STATES = {json.dumps([str(s) for s in states.ExperimentState])};
export const TERMINAL_STATES = new Set({_names(states.TERMINAL_STATES)});
export const EXPERIMENT_DELETION_STATES = new Set({_names(states.EXPERIMENT_DELETION_STATES)});

export const EXPERIMENT_TRANSITIONS = {_transitions(states.EXPERIMENT_TRANSITIONS)};

export const TASK_TYPES = {json.dumps([str(t) for t in states.TaskType])};
export const TASK_STATES = {json.dumps([str(s) for s in states.TaskState])};
export const TASK_TRANSITIONS = {_transitions(states.TASK_TRANSITIONS)};

// Whether `current` may change to `next` under `transitions` (one of the maps above).
export function canTransition(transitions, current, next) {{
  return (transitions[current] || []).includes(next);
}}
"""


if __name__ == "__main__":
    STATES_JS.write_text(javascript())
    print(f"wrote {STATES_JS}")
