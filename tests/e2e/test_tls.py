"""A cluster that serves TLS (cluster-up --tls-cert/--tls-key, a self-signed certificate
for localhost and 127.0.0.1; --advertise-host, so that nats-server listens beyond loopback
and requires TLS too): the first experiment runs through the CLI over TLS (its trial
reports over TLS, its services reach NATS over TLS), so does one on an agent for a cluster
elsewhere, the HTTP API answers over https, plaintext clients and clients that do not
trust the certificate are refused, and bad files stop cluster-up before it starts
anything."""

import os
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.e2e_cluster import Cluster, created_id, det, started_cluster
from support.self_signed import write_self_signed
from test_first_experiment import CONST_YAML, TRAIN_PY

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_cluster(certificate: tuple[Path, Path]) -> Iterator[Cluster]:
    cert, key = certificate
    up_args = ["--tls-cert", str(cert), "--tls-key", str(key), "--advertise-host", "127.0.0.1"]
    with started_cluster("det-e2e-tls", up_args) as running:
        running.env.update(
            DET_MASTER=f"https://localhost:{running.master_port}", DET_MASTER_CERT_FILE=str(cert)
        )
        yield running


def test_cluster_up_tells_how_to_reach_the_master(
    tls_cluster: Cluster, certificate: tuple[Path, Path]
) -> None:
    again = tls_cluster.up()
    assert again.returncode == 3, again.stdout + again.stderr
    assert f"master at https://localhost:{tls_cluster.master_port}" in again.stdout
    assert f"HTTP API at https://localhost:{tls_cluster.master_port + 1}" in again.stdout
    assert f"DET_MASTER_CERT_FILE={certificate[0]}" in again.stdout


def test_the_first_experiment_runs_over_tls(tls_cluster: Cluster, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN_PY)
    (tmp_path / "const.yaml").write_text(CONST_YAML)
    created = tls_cluster.det("experiment", "create", str(tmp_path / "const.yaml"), str(tmp_path), "-f")
    assert "training done" in created.stdout
    experiment_id = created_id(created.stdout)
    assert tls_cluster.experiment_state(experiment_id) == "COMPLETED"


def test_the_http_api_answers_over_https(tls_cluster: Cluster, certificate: tuple[Path, Path]) -> None:
    trusted = ssl.create_default_context(cafile=str(certificate[0]))
    answer = httpx.get(f"https://localhost:{tls_cluster.master_port + 1}/info", verify=trusted, timeout=10)
    assert answer.status_code == 200
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://localhost:{tls_cluster.master_port + 1}/info", timeout=10)


def test_plaintext_and_untrusting_clients_are_refused(tls_cluster: Cluster) -> None:
    without_certificate = {
        key: value for key, value in tls_cluster.env.items() if key != "DET_MASTER_CERT_FILE"
    }
    without_certificate["DET_DATA_DIR"] = str(
        tls_cluster.data_dir
    )  # the CLI reads why in the local cluster's
    plaintext = det(
        dict(without_certificate, DET_MASTER=f"localhost:{tls_cluster.master_port}"), "experiment", "list"
    )
    assert plaintext.returncode == 1
    assert (
        f"the gateway serves TLS only: DET_MASTER=https://localhost:{tls_cluster.master_port}"
        in plaintext.stderr
    )
    untrusting = det(
        dict(without_certificate, DET_MASTER=f"https://localhost:{tls_cluster.master_port}"),
        "experiment",
        "list",
    )
    assert untrusting.returncode == 1
    assert "its TLS certificate is not trusted here" in untrusting.stderr


def test_an_agent_for_a_cluster_elsewhere_connects_with_tls(tls_cluster: Cluster, tmp_path: Path) -> None:
    """agent-up --master-host with DET_MASTER_CERT_FILE: GetMaster over TLS, its agent reaches
    nats-server over TLS, and its trial the master."""
    folder = ("--data-dir", str(tmp_path / "remote-agent"))
    tls_cluster.det(
        "deploy",
        "local",
        "agent-credentials",
        "--agent-id",
        "far-away",
        "--data-dir",
        str(tls_cluster.data_dir),
    )  # its nats-server user, let in over TLS at once
    up = tls_cluster.det(
        "deploy",
        "local",
        "agent-up",
        "--master-host",
        "127.0.0.1",
        "--master-port",
        str(tls_cluster.master_port),
        "--agent-id",
        "far-away",
        "--pool",
        "far",
        "--secret-file",
        str(tls_cluster.data_dir / "agent-secrets" / "far-away.secret"),
        "--no-gpu",
        *folder,
    )
    try:
        (tmp_path / "train.py").write_text(TRAIN_PY)
        config = CONST_YAML + "resources:\n  resource_pool: far\n"
        (tmp_path / "far.yaml").write_text(config)
        created = tls_cluster.det("experiment", "create", str(tmp_path / "far.yaml"), str(tmp_path), "-f")
        assert "training done" in created.stdout, up.stdout
    finally:
        tls_cluster.det("deploy", "local", "agent-down", *folder)


def test_nats_requires_tls_of_every_client(tls_cluster: Cluster) -> None:
    with socket.create_connection(("127.0.0.1", tls_cluster.nats_port), timeout=10) as plain:
        info = plain.makefile("rb").readline()
        assert b'"tls_required":true' in info
        plain.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
        assert b"PONG" not in plain.recv(4096)


@pytest.mark.parametrize(
    ("files", "error"),
    [
        (("--tls-cert", "{cert}"), "--tls-cert and --tls-key go together"),
        (("--tls-cert", "{cert}", "--tls-key", "{missing}"), "--tls-key {missing}: no such file"),
        (("--tls-cert", "{key}", "--tls-key", "{key}"), "are not a PEM certificate and its private key"),
        # The warning, then the error.
        (
            ("--listen", "0.0.0.0", "--tls-key", "{key}"),
            "listens on 0.0.0.0 without TLS: calls, session tokens",
        ),
    ],
)
def test_bad_files_stop_cluster_up_before_it_starts(
    certificate: tuple[Path, Path], tmp_path: Path, files: tuple[str, ...], error: str
) -> None:
    names = {"cert": certificate[0], "key": certificate[1], "missing": tmp_path / "missing.pem"}
    data_dir = tmp_path / "data"
    environment = dict(os.environ, DET_CONFIG_DIR=str(tmp_path / "cli"))
    up = det(
        environment,
        "deploy",
        "local",
        "cluster-up",
        "--data-dir",
        str(data_dir),
        *(word.format(**names) for word in files),
    )
    assert up.returncode == 1
    assert error.format(**names) in up.stderr
    assert not data_dir.exists()
