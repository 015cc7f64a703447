"""Secrets out of every event people read: det events, explain, export and
`python -m services.eventlog` give an event's fields through `redacted_fields`.

A secret is the value of a key that names one (SECRET_KEYS: users' password
hashes, tokens, storage credentials), at any depth, also inside the JSON text
of fields such as config_json and storage_json, and the value of an
environment variable whose name says it is one ("AWS_SECRET_ACCESS_KEY=...").
The key stays, so an audit shows that a secret was set or changed, never it.
"""

import json
import re
from typing import Any

REDACTED = "(redacted)"
# Keys whose values are secrets, compared without case, "_" or "-" (so
# "secret_key" and the JSON form's "secretKey" are both found).
SECRET_KEYS = frozenset(
    {
        "passwordhash",
        "password",
        "token",
        "sessiontoken",
        "secret",
        "accesskey",
        "secretkey",
        "connectionstring",
        "accountkey",
        "credential",
        "credentials",
        "apikey",
    }
)
# An environment variable (a config's environment_variables) whose name says it holds a secret.
SECRET_VARIABLE = re.compile(
    r"SECRET|PASSWORD|TOKEN|CREDENTIAL|ACCESS_KEY|ACCOUNT_KEY|CONNECTION_STRING|API_KEY"
)
ENVIRONMENT_KEYS = frozenset({"environmentvariables"})


def redacted_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` (an event or payload as protobuf's JSON form gives it, either
    name style) with every secret replaced by REDACTED."""
    return {key: _redacted_value(key, value) for key, value in fields.items()}


def _redacted_value(key: str, value: Any) -> Any:
    name = _normalized(key)
    if name in SECRET_KEYS:
        return REDACTED if value not in ("", None) else value
    if name in ENVIRONMENT_KEYS:
        return _redacted_variables(value)
    if isinstance(value, str) and name.endswith("json"):
        return _redacted_json_text(value)
    return _redacted_any(value)


def _redacted_any(value: Any) -> Any:
    if isinstance(value, dict):
        return redacted_fields(value)
    if isinstance(value, list):
        return [_redacted_any(item) for item in value]
    return value


def _redacted_json_text(text: str) -> str:
    """JSON text with its secrets redacted; the text itself when it holds none
    (or is not JSON of an object or a list)."""
    try:
        document = json.loads(text)
    except ValueError:
        return text
    if not isinstance(document, dict | list):
        return text
    redacted = _redacted_any(document)
    return text if redacted == document else json.dumps(redacted)


def _redacted_variables(value: Any) -> Any:
    """A config's environment_variables: a list of "NAME=value" or a name -> value
    object (per accelerator in Determined: {"cpu": [...], "cuda": [...]})."""
    if isinstance(value, list):
        return [
            _redacted_variable(item) if isinstance(item, str) else _redacted_variables(item) for item in value
        ]
    if isinstance(value, dict):
        return {
            name: REDACTED
            if isinstance(item, str) and SECRET_VARIABLE.search(name.upper())
            else _redacted_variables(item)
            for name, item in value.items()
        }
    return value


def _redacted_variable(assignment: str) -> str:
    name, equals, _ = assignment.partition("=")
    return f"{name}={REDACTED}" if equals and SECRET_VARIABLE.search(name.upper()) else assignment


def _normalized(key: str) -> str:
    return key.replace("_", "").replace("-", "").lower()
