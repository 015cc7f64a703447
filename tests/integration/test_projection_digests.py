"""The bulk projection gives the very rows the per-event one gave.

The read models of each golden log, projected in batches of several sizes,
must hash to what the projection of issue 6 (one statement per event) left:
EXPECTED below was recorded with that code on these logs. A change of the
projection rules changes them on purpose: bump PROJECTION_RULES_VERSION
(tables.py) and record them again. The agents' digests were recorded again
when agents gained resource_pool, address, state, registration_event_id and
lost (issue 8): the other tables' rows did not change. The experiments' and
checkpoints' digests were recorded again when they gained their deletion
columns (issue 10: delete_requests and delete_error; deletion_id and
delete_error): their other columns still hash to the digests recorded before.
The users' tables (issue 11) are empty: these logs hold no user event. The
experiments' digests were recorded again when they gained best_metric (issue 11),
and the trials' when they gained theirs: their other columns still hash to the
digests recorded before. The allocations' were recorded again when they gained
stop_requests (issue 18: a pause's stop can be withdrawn); their other columns
still hash to the digests recorded before. `pause_withdrawn.jsonl` (issue 18) was
recorded with the code of its day, projected in one batch. The agents' were
recorded again when they gained runtime (issue 19: "process" for these logs'
registrations, which predate runtimes). The tasks' table (issue 20) is empty:
these logs hold no notebook, TensorBoard, command or shell. The agents' were
recorded again when they gained disabled_slots (issue 22: "{}" for these logs,
which hold no slot event). The experiments' were recorded again when they
gained archived, notes, parent_id and unmanaged, the checkpoints' when they gained
used_by (issue 22), the trials' when they gained runs_before_continue (issue 22:
restarts count from 0 after a continue): their other columns still hash to the
digests recorded before. The index by event type (issue 21: event_types) holds the sequence and
type of every event of these logs but the per-step reports.

`generated_cluster.jsonl.gz` is a busy cluster's first 3,000 events from
bench/gen_log.py (`--events 3000 --seed 7 --incidents 20`: pauses, kills,
failed and resumed runs, invalid hyperparameters), so that every rule meets
the events a real search writes, interleaved as they come.
"""

import asyncpg
import pytest
from support.golden_log import golden_log

from services.common.eventlog import StoredEvent
from services.common.eventstore import EventStore
from services.gateway.projector import Projector
from services.gateway.schema import SCHEMA, create_schema, drop_schema, metadata

# table -> (rows, md5 of the rows' text in order), per log.
EXPECTED: dict[str, dict[str, tuple[int, str | None]]] = {
    "three_experiments.jsonl": {
        "agents": (1, "1cf4d9801c63b346be1c14b63b066eba"),
        "allocations": (4, "307f6249089503a72053cb8e81cb7c60"),
        "checkpoints": (1, "851fcd426c709254d7d5f99347585986"),
        "experiments": (3, "7103394d5ae8ac7b57ec34d3d4c91a7f"),
        "metrics": (101, "36eb4dd3f2243dab165aec2b99e67edc"),
        "model_versions": (0, None),
        "models": (0, None),
        "user_sessions": (0, None),
        "users": (0, None),
        "tasks": (0, None),
        "event_types": (27, "28f5384162724f955c92af01b14873e8"),
        "projection_position": (1, "bc96f7f7df8a92b93ad6d1791afe9729"),
        "trials": (3, "81f57e2211b358f070a6fec46901bf23"),
    },
    "adaptive_pause_kill.jsonl": {
        "agents": (1, "866fb4aaa6df9159d9fd654c35f91765"),
        "allocations": (8, "0ce3e64aac4ae233b86c29497948eda9"),
        "checkpoints": (2, "69379a75027d0be4688b63cbf2cc8319"),
        "experiments": (3, "e6f3088f4edb76049674c224bd776e44"),
        "metrics": (111, "734bd62a8d6e71c17be03e4877154748"),
        "model_versions": (0, None),
        "models": (0, None),
        "user_sessions": (0, None),
        "users": (0, None),
        "tasks": (0, None),
        "event_types": (70, "8c7aa51d3b14d6aa30c206dc15fae27e"),
        "projection_position": (1, "6ead220b76f2627ac6ca61197e6d73a1"),
        "trials": (7, "fde8541ec56e5eaaad6cd50db3c1df13"),
    },
    "generated_cluster.jsonl.gz": {
        "agents": (4, "8191455799d2591ce4625c7066f69990"),
        "allocations": (164, "388fffd6323c5eac10e14279263ce42d"),
        "checkpoints": (130, "b8b7ec4e8fc87d5e34cb8409a4bdea66"),
        "experiments": (8, "e853360fd7370208b024e6fab8b293ef"),
        "metrics": (1336, "3abf328d828f3cc9631d3fa41002848b"),
        "model_versions": (0, None),
        "models": (0, None),
        "user_sessions": (0, None),
        "users": (0, None),
        "tasks": (0, None),
        "event_types": (1231, "93a7f591a2e920d03d512b5adb009a5a"),
        "projection_position": (1, "4ccea9c966b97d7125efd675a3808631"),
        "trials": (134, "9f64a6f68cd968ae5c8edcdfb73e5e36"),
    },
    "pause_withdrawn.jsonl": {
        "agents": (1, "ca9e7c5e8a9ef4fa96a09df3c12b45b1"),
        "allocations": (1, "8ab712dcb37c98e334151f63a9abfaec"),
        "checkpoints": (0, None),
        "experiments": (1, "63665c7711a6a8334d7329911f36c041"),
        "metrics": (2, "b253a8eccaeaa3758f0ef056ce68fa4f"),
        "model_versions": (0, None),
        "models": (0, None),
        "user_sessions": (1, "887b6076dedf9ba2cf15afdaacef0bdd"),
        "users": (2, "20f8199bca47577ef9d89237c274288a"),
        "tasks": (0, None),
        "event_types": (16, "c1f17353bb31c8a1df79e976dfafad3d"),
        "projection_position": (1, "850ce3c7f1c4a017dcbd098774869ca6"),
        "trials": (1, "052affaa2631064ccac28fea0263c353"),
    },
}


async def digests(pool: asyncpg.Pool) -> dict[str, tuple[int, str]]:
    found = {}
    for table in metadata.sorted_tables:
        if table.name == "schema_fingerprint":
            continue
        row = await pool.fetchrow(
            f"SELECT count(*) AS n, md5(string_agg(t::text, E'\\n' ORDER BY t::text)) AS h FROM {SCHEMA}.{table.name} t"
        )
        found[table.name] = (row["n"], row["h"])
    return found


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_every_batching_gives_the_rows_of_the_per_event_projection(
    event_store: EventStore, pool: asyncpg.Pool, name: str
) -> None:
    log = [
        StoredEvent(sequence, envelope, caught_up=False)
        for sequence, envelope in enumerate(golden_log(name), 1)
    ]
    for batch_size in (len(log), 1000, 7):
        async with pool.acquire() as connection:
            await drop_schema(connection)
            await create_schema(connection)
        projector = Projector(event_store, pool)
        for start in range(0, len(log), batch_size):
            await projector.apply(log[start : start + batch_size])
        assert await digests(pool) == EXPECTED[name], f"batches of {batch_size}"
