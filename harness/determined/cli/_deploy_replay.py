"""`det deploy local replay [BUNDLE] [--data-dir D] [--port P]`: a read-only cluster over a
bundle of events (`det events export`), shown by the CLI and the web UI as the cluster it came
from was (deploy/local/replay.py). It logs whoever ran it in as the replay's user and shows
that user's one-time password for the web UI.
"""

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from determined.cli._client import CliError
from determined.cli.deploy import _announce, _port

if TYPE_CHECKING:
    from deploy.local.replay_bundle import Summary

DESCRIPTION = """\
Start a read-only cluster over the events of BUNDLE (det events export > BUNDLE; the output of
python -m services.eventlog too): nats-server, PostgreSQL and a gateway that loads BUNDLE into
its own event log and answers every read as the cluster it came from would, and refuses every
change. No service decides and no agent runs. Every line of BUNDLE is checked first: a bad one
is named and nothing starts. Only the user `replay` logs in, with a password made for this
replay: the CLI that ran this is logged in, the web UI asks for it. Without BUNDLE, the replay
that --data-dir holds is started again. Stop it with det deploy local cluster-down --data-dir D.
"""


def add_replay_parser(verbs: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    replay = verbs.add_parser(
        "replay",
        help="a read-only cluster over an exported bundle of events (det events export)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    replay.add_argument("bundle", nargs="?", type=Path, help="the bundle (JSON lines; .gz: gzipped)")
    replay.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where the replay keeps its data (default: ~/.local/share/determined-es-replay)",
    )
    replay.add_argument(
        "--port",
        "--master-port",
        dest="port",
        type=_port,
        default=8080,
        help="the master's port; the web UI is on the next (default 8080)",
    )
    replay.set_defaults(run=replay_up)


def replay_up(args: argparse.Namespace) -> int:
    from deploy.local import cluster, replay

    data_dir = Path(
        args.data_dir or cluster.default_data_dir().with_name("determined-es-replay")
    ).expanduser()
    data_dir = data_dir.resolve()
    try:
        started = replay.replay_up(args.bundle, data_dir, args.port)
    except cluster.DeployError as failure:
        raise CliError(str(failure)) from None
    if started.summary is not None:
        print(f"{args.bundle}: {_summary_words(started.summary)}")
    master = _announce(started.up, data_dir, {})
    _log_in(master, started.info.password)
    print(
        f"It replays {started.info.bundle} and changes nothing. You are logged in as replay; the web UI "
        f"takes the user replay with the password {started.info.password} (this replay's only).\n"
        f"Stop it with: det deploy local cluster-down --data-dir {data_dir}"
    )
    return int(started.up.outcome)


def _summary_words(summary: "Summary") -> str:
    header = summary.header
    words = f"{summary.events} events"
    if header:
        words += f", exported {header.get('exported_at', '?')} from cluster {header.get('cluster_id', '?')}"
        if header.get("filter"):
            words += f" (filter {json.dumps(header['filter'])})"
    if summary.unreadable:
        words += f"; {len(summary.unreadable)} unreadable in their log, left out"
    return words


def _log_in(master: str, password: str) -> None:
    """Logs the CLI in as the replay's user (a token in its cache, the active user for `master`)."""
    from deploy.local.replay_home import REPLAY_USER
    from determined.cli._auth import TokenStore
    from determined.cli._client import Gateway, master_address
    from determined.common.passwords import salted_hash

    gateway = Gateway(master_address(master))
    TokenStore(gateway.address).remember(
        REPLAY_USER, gateway.login(REPLAY_USER, salted_hash(password)), active=True
    )
