"""The compose cluster's files (deploy/compose/): each part gets its own settings and
credentials in a file of its own, none in the compose file, its variables or a container's
environment; the keeper's decision; the image build folders (deploy/docker/images.py)."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from support.self_signed import write_self_signed

from deploy.compose import cluster as compose
from deploy.compose.keeper import should_start
from deploy.docker import images
from deploy.local.cluster import ClusterOptions, service_environment
from deploy.local.credentials import credentials

PARTS = ("nats-server", "postgres", "gateway", "scheduler", "searcher", "checkpoint", "agent")


@pytest.fixture
def options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ClusterOptions:
    monkeypatch.setenv("CALLERS_SECRET", "not-for-containers")
    (tmp_path / "data").mkdir()
    return ClusterOptions(tmp_path / "data", 18080, 14222, 15433, gpu=False, agent_id="a1")


def every_password(data_dir: Path) -> list[str]:
    found = credentials(data_dir, ["a1"])
    return [found.postgres_password, found.gateway_password, *(user.password for user in found.nats.values())]


def test_each_part_gets_its_own_login_and_nothing_of_the_callers_environment(options: ClusterOptions) -> None:
    settings = compose.part_settings(options, "docker")
    assert set(settings) == set(PARTS)
    found = credentials(options.data_dir, ["a1"])
    for part in ("gateway", "scheduler", "searcher", "checkpoint"):
        assert settings[part]["DET_NATS_USER"] == part
        assert settings[part]["DET_NATS_PASSWORD"] == found.nats[part].password
    assert settings["agent"]["DET_NATS_USER"] == "agent:a1"
    assert settings["agent"]["DET_AGENT_RUNTIME"] == "docker"
    assert settings["agent"]["DET_AGENT_ID"] == "a1"
    assert [part for part in PARTS if "DET_DATABASE_URL" in settings[part]] == ["gateway"]
    assert found.gateway_password in settings["gateway"]["DET_DATABASE_URL"]
    assert set(settings["nats-server"]) == {"DET_NATS_PORT"}
    assert settings["postgres"]["DET_POSTGRES_PASSWORD"] == found.postgres_password
    for part in PARTS:
        assert "CALLERS_SECRET" not in settings[part]
        assert "DET_STATUS_FILE" not in settings[part]


def test_the_process_runtime_reaches_the_agent(options: ClusterOptions) -> None:
    assert compose.part_settings(options, "process")["agent"]["DET_AGENT_RUNTIME"] == "process"


def test_nats_keeps_its_store_in_the_volume_and_holds_only_password_hashes(options: ClusterOptions) -> None:
    config = compose.nats_config(options)
    assert 'store_dir: "/var/lib/determined-es/nats"' in config
    assert "listen: 127.0.0.1:14222" in config
    for password in every_password(options.data_dir):
        assert password not in config


def test_the_files_hold_the_secrets_and_the_variables_none(options: ClusterOptions) -> None:
    compose.write_files(options, "determined-es/cluster:test", "docker")
    here = compose.folder(options.data_dir)
    secrets = here / "secrets"
    assert secrets.stat().st_mode & 0o777 == 0o700
    for part in PARTS:
        assert (secrets / f"{part}.json").stat().st_mode & 0o777 == 0o600
    variables = (here / "compose.env").read_text()
    for password in every_password(options.data_dir):
        assert password not in variables
        assert password not in compose.COMPOSE_FILE.read_text()
    assert "DET_CLUSTER_IMAGE=determined-es/cluster:test\n" in variables
    assert f"DET_PROJECT={compose.project(options.data_dir)}\n" in variables
    assert json.loads((secrets / "gateway.json").read_text())["DET_GATEWAY_PORT"] == "18080"


def test_the_compose_file_mounts_each_part_its_own_file_read_only() -> None:
    document = yaml.safe_load(compose.COMPOSE_FILE.read_text())
    services = document["services"]
    assert set(services) == {*PARTS, "keeper"}
    for name, service in services.items():
        assert service["restart"] == "unless-stopped"
        assert service["network_mode"] == "host"
        assert "healthcheck" in service
        mounts = [volume for volume in service["volumes"] if "part.json" in volume]
        if name != "keeper":
            assert mounts == [f"${{DET_SECRETS}}/{name}.json:/run/determined/part.json:ro"]
        assert set(service.get("environment", {})) <= {"DET_COMPOSE_PROJECT"}
    assert set(document["volumes"]) == {"nats", "postgres"}


def test_projects_of_two_data_folders_differ(tmp_path: Path) -> None:
    assert compose.project(tmp_path / "a") != compose.project(tmp_path / "b")
    assert compose.project(tmp_path / "a") == compose.project(tmp_path / "a")


@pytest.mark.parametrize(
    ("stopped_at", "status", "start"),
    [
        (None, "exited", True),  # docker kill
        (None, "dead", True),
        (None, "running", False),  # the restart policy brought it back
        (None, "restarting", False),
        (None, "removing", False),
        (5.0, "exited", False),  # docker stop, compose down
        (4.0, "exited", True),  # stopped once before, killed now
        (5.0, "running", False),
    ],
)
def test_the_keeper_starts_only_a_killed_part(stopped_at: float | None, status: str, start: bool) -> None:
    assert should_start(5.0, stopped_at, status) is start


def test_image_names_follow_the_version() -> None:
    version = images.version()
    assert images.image_name("cluster") == f"determined-es/cluster:{version}"
    assert images.image_name("cpu") == f"determined-es/trial:cpu-{version}"
    assert images.image_name("cuda") == f"determined-es/trial:cuda-{version}"


def test_wheels_come_from_the_checkout_or_the_released_package(tmp_path: Path) -> None:
    assert images.requirement(tmp_path, "torch") == f"{tmp_path}[torch]"
    assert images.requirement(tmp_path, "") == str(tmp_path)
    assert images.requirement(None, "") == f"determined-es=={images.version()}"


def test_a_build_folder_holds_what_its_image_installs(tmp_path: Path) -> None:
    wheels, own = tmp_path / "wheels", tmp_path / "own"
    wheels.mkdir()
    (wheels / "grpcio-1-py3-none-any.whl").write_text("g")
    (wheels / "determined_es-0.1.0-py3-none-any.whl").write_text("d")
    images.split_own(wheels, own)
    assert [path.name for path in own.iterdir()] == ["determined_es-0.1.0-py3-none-any.whl"]
    cpu = images.build_folder(images.TRIAL_CPU, wheels, own, tmp_path / "cpu")
    assert (cpu / "Dockerfile").read_text() == (images.HERE / "trial-cpu.Dockerfile").read_text()
    assert [path.name for path in (cpu / "wheels" / "deps").iterdir()] == ["grpcio-1-py3-none-any.whl"]
    cuda = images.build_folder(images.TRIAL_CUDA, wheels, own, tmp_path / "cuda")
    assert list((cuda / "wheels" / "deps").iterdir()) == []
    assert [path.name for path in (cuda / "wheels" / "own").iterdir()] == [
        "determined_es-0.1.0-py3-none-any.whl"
    ]


def test_a_process_cluster_with_the_docker_runtime_gives_its_agents_an_image_and_protected_paths(
    options: ClusterOptions,
) -> None:
    options.settings["DET_AGENT_RUNTIME"] = "docker"
    options.settings["DET_AGENT_PROTECTED_PATHS"] = "/srv/private"
    environment = service_environment(options, options.data_dir, "nats://127.0.0.1:14222")
    assert environment["DET_AGENT_RUNTIME"] == "docker"
    assert environment["DET_AGENT_DEFAULT_IMAGE"] == images.image_name("cpu")
    protected = environment["DET_AGENT_PROTECTED_PATHS"].split(",")
    assert str(options.data_dir / "cluster.secret") in protected
    assert str(options.data_dir / "credentials.json") in protected
    assert "/srv/private" in protected
    assert str(options.data_dir / "checkpoints") not in protected


def test_a_process_cluster_runs_processes_unless_told(options: ClusterOptions) -> None:
    environment = service_environment(options, options.data_dir, "nats://127.0.0.1:14222")
    assert "DET_AGENT_RUNTIME" not in environment
    assert "DET_AGENT_DEFAULT_IMAGE" not in environment


def test_the_compose_agent_uses_the_image_for_configs_that_name_none(options: ClusterOptions) -> None:
    agent = compose.part_settings(options, "docker")["agent"]
    assert agent["DET_AGENT_DEFAULT_IMAGE"] == images.image_name("cpu")
    assert agent["DET_AGENT_HARNESS_MOUNTS"] == "false"
    assert str(options.data_dir / "compose") in agent["DET_AGENT_PROTECTED_PATHS"].split(",")


def test_the_containers_find_the_certificate_and_only_two_parts_the_key(options: ClusterOptions) -> None:
    cert, key = write_self_signed(options.data_dir.parent)
    served = replace(
        options, tls_cert=str(cert), tls_key=str(key), advertise_host="127.0.0.1"
    )  # NATS serves TLS too
    compose.write_files(served, "determined-es/cluster:test", "docker")
    here = compose.folder(options.data_dir)
    assert (here / "tls" / "cert.pem").read_text() == cert.read_text()
    assert (here / "tls-key" / "key.pem").read_text() == key.read_text()
    assert list((here / "tls").iterdir()) == [here / "tls" / "cert.pem"]
    nats = (here / "secrets" / "nats-server.conf").read_text()
    assert "/run/determined/tls/cert.pem" in nats and "/run/determined/tls-key/key.pem" in nats
    scheduler = json.loads((here / "secrets" / "scheduler.json").read_text())
    assert scheduler["DET_MASTER_CERT_FILE"] == "/run/determined/tls/cert.pem"
    assert str(cert.parent) not in json.dumps(scheduler)
    document = yaml.safe_load(compose.COMPOSE_FILE.read_text())
    with_key = [
        name
        for name, service in document["services"].items()
        if any("tls-key" in v for v in service["volumes"])
    ]
    assert sorted(with_key) == ["gateway", "nats-server"]
