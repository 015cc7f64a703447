"""det experiment archive|unarchive, set name|description, label add|remove, list
(--all, --limit, --offset, --csv), describe of several (--csv, --outdir,
--metrics), create --parent (a fork) and download-model-def, and their REST
routes, against a module-wide gateway over the golden three_experiments log
(experiments 1 COMPLETED, 2 ERROR, 3 CANCELED). The CLI runs in a thread: the
gateway serves from this test's event loop."""

import asyncio
import csv
import io
import json
import re
from pathlib import Path

import grpc
import httpx
import pytest
from support import module_gateway
from support.golden_log import golden_log, stored_as_recorded
from support.security_gateway import PASSWORD, logged_in

from determined.cli.__main__ import main
from determined.proto import api_pb2, api_pb2_grpc
from services.common.eventstore import EventStore
from services.gateway.server import Gateway

module_namespace = module_gateway.module_namespace
gateway = module_gateway.gateway
store = module_gateway.store
stub = module_gateway.stub
web = module_gateway.web

# A line the gateway logs (structlog's console form).
GATEWAY_LOG = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[\w+ *\] ")
CONFIG = """
name: edits
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: 10}
"""


@pytest.fixture(scope="module")
async def address(gateway: Gateway, store: EventStore) -> str:
    await stored_as_recorded(store, golden_log("three_experiments.jsonl"))
    assert await gateway.projector.wait_for(await store.last_sequence(), timeout_s=60)
    return f"127.0.0.1:{gateway.port}"


@pytest.fixture(autouse=True)
def admin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_USER", "admin")
    monkeypatch.setenv("DET_PASS", PASSWORD)


@pytest.fixture
async def auth(stub: api_pb2_grpc.DeterminedStub) -> tuple[tuple[str, str], ...]:
    return await logged_in(stub)


async def det(capsys: pytest.CaptureFixture[str], address: str, *argv: str, code: int = 0) -> tuple[str, str]:
    """What the command printed on stdout (without the gateway's log lines) and stderr."""
    capsys.readouterr()
    assert await asyncio.to_thread(main, ["-m", address, *argv]) == code
    printed = capsys.readouterr()
    out = "".join(line for line in printed.out.splitlines(True) if not GATEWAY_LOG.match(line))
    err = "".join(line for line in printed.err.splitlines(True) if not GATEWAY_LOG.match(line))
    return out, err


async def listed_ids(capsys: pytest.CaptureFixture[str], address: str, *flags: str) -> list[int]:
    out, _ = await det(capsys, address, "e", "list", "--json", *flags)
    return [int(e["id"]) for e in json.loads(out)]


async def test_an_archived_experiment_leaves_the_list_unless_all(
    capsys: pytest.CaptureFixture[str], address: str
) -> None:
    assert await det(capsys, address, "e", "archive", "2") == ("Archived experiment 2\n", "")
    assert 2 not in await listed_ids(capsys, address)
    assert 2 in await listed_ids(capsys, address, "--all")
    out, _ = await det(capsys, address, "e", "list", "--all", "--csv")
    rows = {row["ID"]: row for row in csv.DictReader(io.StringIO(out))}
    assert rows["2"]["Archived"] == "True" and rows["1"]["Archived"] == "False"
    assert (await det(capsys, address, "e", "archive", "2"))[0] == "Experiment 2 is already archived\n"
    assert (await det(capsys, address, "e", "unarchive", "2"))[0] == "Unarchived experiment 2\n"
    assert (await det(capsys, address, "e", "unarchive", "2"))[0] == "Experiment 2 is not archived\n"
    assert 2 in await listed_ids(capsys, address)


async def test_only_an_ended_experiment_is_archived_and_a_missing_one_is_not_found(
    capsys: pytest.CaptureFixture[str],
    address: str,
    stub: api_pb2_grpc.DeterminedStub,
    auth: tuple[tuple[str, str], ...],
) -> None:
    created = await stub.CreateExperiment(
        api_pb2.CreateExperimentRequest(config_yaml=CONFIG, activate=True), metadata=auth
    )
    running = created.experiment_id
    _, err = await det(capsys, address, "e", "archive", str(running), code=1)
    assert f"Experiment {running} is ACTIVE: only an ended experiment can be archived" in err
    for verb in (["archive"], ["unarchive"], ["label", "add"], ["set", "name"]):
        extra = ["x"] if len(verb) == 2 else []
        _, err = await det(capsys, address, "e", *verb, "999", *extra, code=1)
        assert "experiment 999 not found" in err, verb


async def test_names_descriptions_and_labels_are_edited_and_filtered_on(
    capsys: pytest.CaptureFixture[str],
    address: str,
    stub: api_pb2_grpc.DeterminedStub,
    auth: tuple[tuple[str, str], ...],
) -> None:
    for argv, said in [
        (["label", "add", "1", "prod"], "Added label 'prod' to experiment 1\n"),
        (["label", "add", "1", "v2"], "Added label 'v2' to experiment 1\n"),
        (["label", "remove", "1", "prod"], "Removed label 'prod' from experiment 1\n"),
        (["set", "name", "1", "baseline"], "Set name of experiment 1 to 'baseline'\n"),
        (
            ["set", "description", "1", "the first run"],
            "Set description of experiment 1 to 'the first run'\n",
        ),
    ]:
        assert await det(capsys, address, "e", *argv) == (said, "")
    described = json.loads((await det(capsys, address, "e", "describe", "1", "--json"))[0])["experiment"]
    assert (described["name"], described["labels"], described["description"]) == (
        "baseline",
        ["v2"],
        "the first run",
    )
    assert described["config"]["name"] == "mnist-const"  # the config stays as created
    out, _ = await det(capsys, address, "e", "describe", "1")
    assert "baseline" in out and "Description: the first run" in out
    _, err = await det(capsys, address, "e", "set", "name", "1", "  ", code=1)
    assert "must not be empty or only spaces" in err
    for request, ids in [
        (api_pb2.GetExperimentsRequest(labels=["v2"]), [1]),
        (api_pb2.GetExperimentsRequest(name="BASE"), [1]),
        (api_pb2.GetExperimentsRequest(states=["ERROR", "CANCELED"], sort_by="id", descending=True), [3, 2]),
    ]:
        answer = await stub.GetExperiments(request, metadata=auth)
        assert [e.id for e in answer.experiments] == ids and answer.total == len(ids)


async def test_labels_added_at_once_are_all_kept(
    address: str, stub: api_pb2_grpc.DeterminedStub, auth: tuple[tuple[str, str], ...]
) -> None:
    labels = [f"run-{n}" for n in range(8)]
    await asyncio.gather(
        *(stub.PutExperimentLabel(api_pb2.PutExperimentLabelRequest(experiment_id=3, label=label), metadata=auth)
          for label in labels)
    )  # fmt: skip
    answer = await stub.GetExperiment(api_pb2.GetExperimentRequest(experiment_id=3), metadata=auth)
    assert sorted(answer.experiment.labels) == labels


async def test_a_fork_runs_its_parents_context_and_says_whose_fork_it_is(
    capsys: pytest.CaptureFixture[str], address: str, tmp_path: Path
) -> None:
    (tmp_path / "context").mkdir()
    (tmp_path / "context" / "train.py").write_text("print('hi')\n")
    config = tmp_path / "const.yaml"
    config.write_text(CONFIG)
    out, _ = await det(capsys, address, "e", "create", str(config), str(tmp_path / "context"))
    parent = int(out.split()[-1])
    out, _ = await det(capsys, address, "e", "create", str(config), "--parent", str(parent))
    fork = int(out.split()[-1])
    described = json.loads((await det(capsys, address, "e", "describe", str(fork), "--json"))[0])
    assert described["experiment"]["parent_id"] == parent
    assert f"Forked from experiment {parent}" in (await det(capsys, address, "e", "describe", str(fork)))[0]
    saved = []
    for experiment_id in (parent, fork):
        out, _ = await det(
            capsys, address, "e", "download-model-def", str(experiment_id), "--output-dir", str(tmp_path)
        )
        assert out == f"{tmp_path}/experiment_{experiment_id}_model_def.tgz\n"
        saved.append(Path(out.strip()).read_bytes())
    assert saved[0] == saved[1]
    rows = csv.DictReader(io.StringIO((await det(capsys, address, "e", "list", "--csv"))[0]))
    assert {row["ID"]: row["Parent ID"] for row in rows}[str(fork)] == str(parent)
    _, err = await det(capsys, address, "e", "create", str(config), "--parent", "999", code=1)
    assert "experiment 999 not found" in err
    _, err = await det(capsys, address, "e", "download-model-def", "1", "--output-dir", str(tmp_path), code=1)
    assert "experiment 1" in err  # the golden log's context is not stored here


async def test_a_listing_pages_and_says_how_many_there_are(
    capsys: pytest.CaptureFixture[str],
    address: str,
    stub: api_pb2_grpc.DeterminedStub,
    auth: tuple[tuple[str, str], ...],
) -> None:
    total = (await stub.GetExperiments(api_pb2.GetExperimentsRequest(), metadata=auth)).total
    assert total >= 3
    paged = await stub.GetExperiments(api_pb2.GetExperimentsRequest(limit=2, offset=1), metadata=auth)
    assert [e.id for e in paged.experiments] == [2, 3] and paged.total == total
    out, err = await det(capsys, address, "e", "list", "--limit", "1", "--offset", "1")
    assert out.splitlines()[2].startswith("2 ") and len(out.splitlines()) == 3
    assert err == f"(experiments 2-2 of {total}; --offset 2 shows the next)\n"


async def test_several_experiments_are_described_as_tables_csv_or_files(
    capsys: pytest.CaptureFixture[str], address: str, tmp_path: Path
) -> None:
    out, _ = await det(capsys, address, "e", "describe", "1,3")
    assert out.startswith("Experiment:\n") and "\nTrials:\n" in out and "Workloads" not in out
    out, _ = await det(capsys, address, "e", "describe", "1,3", "--csv", "--metrics")
    assert out.startswith("Experiment ID,State,Progress,")
    await det(capsys, address, "e", "describe", "1,2,3", "--metrics", "--outdir", str(tmp_path / "out"))
    experiments = list(csv.DictReader((tmp_path / "out" / "experiments.csv").open()))
    assert [row["Experiment ID"] for row in experiments] == ["1", "2", "3"]
    trials = list(csv.DictReader((tmp_path / "out" / "trials.csv").open()))
    assert {row["Experiment ID"] for row in trials} == {"1", "2", "3"}
    workloads = list(csv.DictReader((tmp_path / "out" / "workloads.csv").open()))
    validated = [row for row in workloads if row.get("Validation Metric: validation_loss")]
    assert validated and all(row["Trial ID"] for row in workloads)
    out, _ = await det(capsys, address, "e", "describe", "1,2", "--json")
    assert [int(r["experiment"]["id"]) for r in json.loads(out)] == [1, 2]
    _, err = await det(capsys, address, "e", "describe", "1,2", "--config", code=1)
    assert "--config prints one experiment's config" in err


async def test_the_rest_routes_edit_as_determined_s_client_asks(
    web: httpx.AsyncClient, address: str, stub: api_pb2_grpc.DeterminedStub, auth: tuple[tuple[str, str], ...]
) -> None:
    headers = dict(auth)
    patched = await web.patch(
        "/api/v1/experiments/1",
        json={
            "id": 1,
            "name": "baseline",
            "notes": "see the wiki",
            "description": None,
            "labels": ["v2", "web"],
        },
        headers=headers,
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["experiment"]["labels"] == ["v2", "web"]
    put = await web.put("/api/v1/experiments/1/labels/gold", headers=headers)
    assert put.json() == {"labels": ["v2", "web", "gold"]}
    deleted = await web.delete("/api/v1/experiments/1/labels/web", headers=headers)
    assert deleted.json() == {"labels": ["v2", "gold"]}
    answer = await stub.GetExperiment(api_pb2.GetExperimentRequest(experiment_id=1), metadata=auth)
    assert answer.experiment.notes == "see the wiki" and answer.experiment.description == "the first run"
    assert (await web.post("/api/v1/experiments/3/archive", headers=headers)).json() == {
        "unchangedReason": ""
    }
    again = await web.post("/api/v1/experiments/3/archive", headers=headers)
    assert again.json() == {"unchangedReason": "Experiment 3 is already archived"}
    assert (await web.post("/api/v1/experiments/3/unarchive", headers=headers)).status_code == 200
    missing = await web.post("/api/v1/experiments/999/archive", headers=headers)
    assert missing.status_code == 404 and "experiment 999 not found" in missing.json()["message"]
    refused = await web.patch("/api/v1/experiments/1", json={"resources": {"priority": 1}}, headers=headers)
    assert refused.status_code == 400
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.ArchiveExperiment(api_pb2.ArchiveExperimentRequest(experiment_id=999), metadata=auth)
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
