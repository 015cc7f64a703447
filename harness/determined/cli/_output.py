"""Printing for the CLI: tables, JSON and times."""

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import IO, Any


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    print("\n".join(lines))


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def format_time(ns: int) -> str:
    if not ns:
        return ""
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S")


def format_log_time(ns: int) -> str:
    """RFC 3339 in UTC with microseconds (cut, not rounded: computed from the
    integer, as a float would lose the last digits)."""
    second, fraction = divmod(ns, 1_000_000_000)
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{fraction // 1000:06d}Z"


def human_size(size: float) -> str:
    """Bytes for people: 512.0B, 1.5KB, 12.0MB, 3.2GB."""
    for unit in ("B", "KB", "MB"):
        if size < 1024:
            return f"{size:.1f}{unit}"
        size /= 1024
    return f"{size:.1f}GB"


def print_csv(headers: Sequence[str], rows: Sequence[Sequence[Any]], out: IO[str] | None = None) -> None:
    """To `out` (default: stdout)."""
    import csv

    writer = csv.writer(out or sys.stdout, lineterminator="\n")
    writer.writerow(headers)
    writer.writerows([["" if c is None else c for c in row] for row in rows])


def confirm(question: str) -> bool:
    """Asks on stderr (stdout stays the command's output, JSON included) and
    reads y or yes from stdin. CliError when stdin gives no answer (a script
    that left out --yes): nothing is done without one."""
    from determined.cli._client import CliError

    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if not answer:
        raise CliError("no answer on stdin: pass --yes to go ahead without the question")
    return answer.strip().lower() in ("y", "yes")


def compact_json(text: str) -> str:
    """A JSON document (hparams, metrics) on one line, or "" when empty."""
    if not text:
        return ""
    return json.dumps(json.loads(text), sort_keys=True)


def error(message: str) -> None:
    color = sys.stderr.isatty()
    sys.stderr.write(f"\033[31m{message}\033[0m\n" if color else f"{message}\n")


def notice(message: str) -> None:
    """A line on stderr about what the command is doing (stdout stays its output)."""
    sys.stderr.write(f"{message}\n")
    sys.stderr.flush()


def message_dict(message: Any) -> dict[str, Any]:
    """A response message as plain JSON: field names as in the .proto, numbers
    as numbers, every field present, and every `*_json` string field expanded
    into the object it holds (under the name without `_json`)."""
    plain: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.name.endswith("_json") and field.type == field.TYPE_STRING:
            plain[field.name[: -len("_json")]] = json.loads(value) if value else None
        else:
            plain[field.name] = _plain_value(field, value)
    return plain


def _plain_value(field: Any, value: Any) -> Any:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        return dict(value)
    if field.is_repeated:
        return [message_dict(v) if field.message_type else v for v in value]
    if field.message_type is not None:
        return message_dict(value)
    if field.enum_type is not None:
        return field.enum_type.values_by_number[value].name
    return value
