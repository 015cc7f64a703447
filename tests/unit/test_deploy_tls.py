"""cluster-up's TLS files (deploy/local/tls.py) and what the clients make of a master
address: checked before anything starts, the names a certificate is valid for, and the
variables the services and trials get."""

from pathlib import Path

import pytest
from support.self_signed import write_self_signed

from deploy.local.cluster import ClusterOptions, ClusterRecord, master_url
from deploy.local.control import ClusterReport
from deploy.local.tls import (
    MasterCertificate,
    TlsError,
    check_pair,
    is_loopback,
    master_certificate,
    nats_tls,
    tls_environment,
)
from determined.cli._client import master_address
from determined.cli._cluster_status import LocalCluster, unreachable_reason
from determined.cli.deploy import status_heading


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_self_signed(tmp_path_factory.mktemp("tls"))


def test_a_matching_pair_passes(pair: tuple[Path, Path]) -> None:
    check_pair(*pair)


def test_a_missing_file_is_named(pair: tuple[Path, Path], tmp_path: Path) -> None:
    with pytest.raises(TlsError, match=r"--tls-key .*missing.pem: no such file"):
        check_pair(pair[0], tmp_path / "missing.pem")


def test_a_file_that_is_no_certificate_is_refused(pair: tuple[Path, Path], tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(TlsError, match="are not a PEM certificate and its private key"):
        check_pair(garbage, pair[1])


def test_an_encrypted_key_is_refused(pair: tuple[Path, Path], tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(pair[1].read_bytes(), password=None)
    encrypted = tmp_path / "encrypted.pem"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
    )
    with pytest.raises(
        TlsError, match="is encrypted: the gateway and nats-server need it without a passphrase"
    ):
        check_pair(pair[0], encrypted)


def test_the_key_of_another_certificate_is_refused(pair: tuple[Path, Path], tmp_path: Path) -> None:
    _, other_key = write_self_signed(tmp_path)
    with pytest.raises(TlsError, match="are not a PEM certificate and its private key"):
        check_pair(pair[0], other_key)


def test_a_self_signed_certificate_is_its_own_trust(pair: tuple[Path, Path]) -> None:
    certificate = master_certificate(pair[0])
    assert certificate == MasterCertificate(str(pair[0]), ("localhost", "127.0.0.1"))


@pytest.mark.parametrize(
    ("names", "dialed", "checked"),
    [
        (("localhost", "127.0.0.1"), "127.0.0.1", ""),
        (("localhost",), "127.0.0.1", ""),
        (("master.example", "10.0.0.5"), "10.0.0.5", ""),
        (("master.example",), "127.0.0.1", "master.example"),
        ((), "127.0.0.1", ""),
    ],
)
def test_the_name_checked_is_the_dialed_host_when_the_certificate_has_it(
    names: tuple[str, ...], dialed: str, checked: str
) -> None:
    assert MasterCertificate("", names).name_to_check(dialed) == checked


def test_the_services_get_the_pair_and_what_checks_it(tmp_path: Path) -> None:
    cert, key = write_self_signed(tmp_path, dns_names=("master.example",), ips=())
    assert tls_environment(str(cert), str(key), "127.0.0.1") == {
        "DET_TLS_CERT_FILE": str(cert),
        "DET_TLS_KEY_FILE": str(key),
        "DET_MASTER_CERT_FILE": str(cert),
        "DET_MASTER_CERT_NAME": "master.example",
    }
    assert tls_environment("", "", "127.0.0.1") == {}


def test_the_files_are_recorded_with_the_other_options(tmp_path: Path) -> None:
    options = ClusterOptions(tmp_path, tls_cert="/etc/det/cert.pem", tls_key="/etc/det/key.pem")
    ClusterRecord.of(options).save(tmp_path)
    loaded = ClusterRecord.load(tmp_path)
    assert loaded is not None
    assert (loaded.options(tmp_path).tls_cert, loaded.options(tmp_path).tls_key) == (
        options.tls_cert,
        options.tls_key,
    )


def test_trials_dial_https_when_the_master_serves_tls(tmp_path: Path) -> None:
    options = ClusterOptions(tmp_path, master_port=8123)
    assert master_url(options) == "127.0.0.1:8123"
    options.tls_cert, options.tls_key = "/c.pem", "/k.pem"
    assert master_url(options) == "https://127.0.0.1:8123"


def test_status_shows_the_det_master_to_set(tmp_path: Path) -> None:
    record = ClusterRecord.of(ClusterOptions(tmp_path, master_port=8123))
    assert "master at localhost:8123;" in status_heading(ClusterReport(tmp_path, record, None, True))
    record.tls_cert, record.tls_key = "/c.pem", "/k.pem"
    assert "master at https://localhost:8123;" in status_heading(ClusterReport(tmp_path, record, None, True))


def test_nats_serves_tls_when_it_listens_beyond_loopback() -> None:
    assert nats_tls("/c.pem", "/k.pem", "0.0.0.0") == ("/c.pem", "/k.pem")
    assert nats_tls("/c.pem", "/k.pem", "127.0.0.1") is None
    assert nats_tls("", "", "0.0.0.0") is None


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("localhost", True),
        ("::1", True),
        ("0.0.0.0", False),
        ("10.1.2.3", False),
        ("master.example", False),
    ],
)
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(
    ("given", "address"),
    [
        ("https://master:8443/", "https://master:8443"),
        ("HTTPS://master", "https://master:8080"),
        ("http://master:9000", "master:9000"),
        ("master", "master:8080"),
    ],
)
def test_the_cli_keeps_https_in_the_master_address(given: str, address: str) -> None:
    assert master_address(given) == address


def test_a_plaintext_client_of_a_local_tls_cluster_is_told_how_to_reach_it() -> None:
    parts = [{"name": "gateway", "state": "running"}]
    running = LocalCluster({"supervisor_pid": 1, "parts": parts}, 8080, True, tls_cert="/etc/det/cert.pem")
    assert unreachable_reason("localhost:8080", running) == (
        "the gateway serves TLS only: DET_MASTER=https://localhost:8080 (and, for a self-signed certificate, "
        "DET_MASTER_CERT_FILE=/etc/det/cert.pem)"
    )
    assert (
        unreachable_reason("localhost:8080", running, tls=True)
        == "the gateway is running but does not answer (yet?)"
    )
