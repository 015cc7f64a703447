"""The CLI's side of users: the salted password it sends, its token cache
(0600 in a 0700 folder, per master), who a command acts as, and what
cluster-up keeps of the initial password. The gateway's side, and the whole
path through a real cluster, are in tests/integration/test_gateway_users.py
and tests/e2e/test_users.py."""

import argparse
import hashlib
import io
import json
import stat
from pathlib import Path

import pytest

from deploy.local import initial_password
from deploy.local.cluster import ClusterOptions, cluster_identity, master_host, service_environment
from deploy.local.initial_password import InitialPassword
from determined.cli.__main__ import main
from determined.cli._auth import Session, TokenStore, config_folder
from determined.cli._client import CliError
from determined.cli.deploy import _keep_initial_password
from determined.common.passwords import salted_hash


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_password_sent_is_determineds_salted_sha512_and_empty_stays_empty() -> None:
    assert salted_hash("secret") == hashlib.sha512(b"GubPEmmotfiK9TMD6Zdwsecret").hexdigest()
    assert salted_hash("") == ""


def test_the_config_folder_follows_det_config_dir_then_xdg(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DET_CONFIG_DIR", str(tmp_path / "mine"))
    assert config_folder() == tmp_path / "mine"
    monkeypatch.delenv("DET_CONFIG_DIR")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert config_folder() == tmp_path / "xdg" / "determined-es"


def test_the_token_cache_is_private_and_kept_per_master(tmp_path: Path) -> None:
    folder = tmp_path / "config"
    here, there = TokenStore("localhost:8080", folder), TokenStore("gpu-box:8080", folder)
    here.remember("alice", "token-a", active=True)
    here.remember("bob", "token-b", active=False)
    there.remember("alice", "token-far", active=True)

    assert mode(folder) == 0o700
    assert mode(folder / "auth.json") == 0o600
    assert (here.active_user(), here.token("alice"), here.users()) == ("alice", "token-a", ["alice", "bob"])
    assert there.token("alice") == "token-far"
    assert sorted(p.name for p in folder.iterdir()) == ["auth.json", "auth.json.lock"]  # no temporary left

    here.forget("alice")
    assert (here.active_user(), here.token("alice"), here.users()) == (None, None, ["bob"])
    here.forget("bob")
    assert list(json.loads((folder / "auth.json").read_text())["masters"]) == ["gpu-box:8080"]


def test_a_damaged_cache_is_named(tmp_path: Path) -> None:
    (tmp_path / "auth.json").write_text("{not json")
    with pytest.raises(CliError, match="cannot read the login cache"):
        TokenStore("localhost:8080", tmp_path).active_user()


class Master:
    """Login and GetMe as a gateway answers them, for Session (which takes them as functions)."""

    def __init__(self, passwords: dict[str, str]) -> None:
        self.passwords = passwords
        self.logins: list[str] = []
        self.live: set[str] = set()

    def login(self, user: str, hashed: str) -> str:
        self.logins.append(user)
        if self.passwords.get(user) != hashed:
            raise CliError("invalid credentials", "UNAUTHENTICATED")
        token = f"{user}-{len(self.logins)}"
        self.live.add(token)
        return token

    def valid(self, token: str) -> bool:
        return token in self.live


@pytest.fixture
def store(tmp_path: Path) -> TokenStore:
    return TokenStore("localhost:8080", tmp_path)


@pytest.fixture
def master() -> Master:
    return Master(
        {"alice": salted_hash("a-Password1"), "determined": salted_hash(""), "bob": salted_hash("b")}
    )


def session(
    store: TokenStore, master: Master, user: str | None = None, password: str | None = None
) -> Session:
    return Session(store, master.login, master.valid, user, password)


def test_the_requested_user_comes_first(
    store: TokenStore, master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_USER", "bob")
    monkeypatch.setenv("DET_PASS", "b")
    store.remember("determined", "stale", active=True)
    chosen = session(store, master, "alice", "a-Password1")
    assert chosen.token() == "alice-1"
    assert chosen.user == "alice"
    assert (
        store.token("alice") == "alice-1" and store.active_user() == "determined"
    )  # cached, not made active


def test_det_user_and_det_pass_come_before_the_active_user(
    store: TokenStore, master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.remember("alice", master.login("alice", salted_hash("a-Password1")), active=True)
    monkeypatch.setenv("DET_USER", "bob")
    monkeypatch.setenv("DET_PASS", "b")
    assert session(store, master).token() == "bob-2"


def test_the_active_users_cached_token_is_used_while_the_master_takes_it(
    store: TokenStore, master: Master
) -> None:
    token = master.login("alice", salted_hash("a-Password1"))
    store.remember("alice", token, active=True)
    assert session(store, master).token() == token
    assert master.logins == ["alice"]  # no new login


def test_a_token_the_master_refuses_is_dropped_and_the_user_logs_in_again(
    store: TokenStore, master: Master
) -> None:
    store.remember("alice", "revoked", active=True)
    assert session(store, master, "alice", "a-Password1").token() == "alice-1"
    assert (store.token("alice"), store.active_user()) == ("alice-1", "alice")  # still the active user


def test_with_nobody_logged_in_the_default_user_with_an_empty_password(
    store: TokenStore, master: Master
) -> None:
    assert session(store, master).token() == "determined-1"
    master.passwords["determined"] = salted_hash("now-Set1")
    store.forget("determined")
    fallback = session(store, master)
    assert fallback.token() is None  # calls go without a token: the gateway says to log in
    assert fallback.user == "determined"


def test_a_wrong_password_of_a_named_user_is_an_error(store: TokenStore, master: Master) -> None:
    with pytest.raises(CliError, match="invalid credentials"):
        session(store, master, "alice", "wrong").token()


def test_cluster_up_refuses_a_blank_password_unless_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    assert (
        main(["deploy", "local", "cluster-up", "--data-dir", str(data_dir), "--initial-user-password", ""])
        == 1
    )
    assert "needs --allow-blank-password" in capsys.readouterr().err
    assert not data_dir.exists()


def test_the_initial_password_file_is_private_and_goes_to_the_gateway_only(tmp_path: Path) -> None:
    generated = initial_password.generate()
    assert len(generated) == 16 and generated.isalnum()
    assert any(c.isupper() for c in generated) and any(c.islower() for c in generated)
    assert any(c.isdigit() for c in generated)

    initial_password.save(tmp_path, InitialPassword(generated, generated=True))
    assert mode(initial_password.path(tmp_path)) == 0o600
    assert initial_password.load(tmp_path) == InitialPassword(generated, generated=True)
    assert initial_password.gateway_environment(tmp_path) == {"DET_INITIAL_USER_PASSWORD": generated}
    assert generated not in json.dumps(service_environment(ClusterOptions(tmp_path), tmp_path, "nats://x"))

    initial_password.forget(tmp_path)
    assert initial_password.gateway_environment(tmp_path) == {}


def test_a_local_master_listens_on_loopback_unless_told(tmp_path: Path) -> None:
    default = service_environment(ClusterOptions(tmp_path, master_port=8123), tmp_path, "nats://x")
    assert (default["DET_GATEWAY_HOST"], default["DET_MASTER_ADDRESS"]) == ("127.0.0.1", "127.0.0.1:8123")
    opened = service_environment(ClusterOptions(tmp_path, listen="0.0.0.0"), tmp_path, "nats://x")
    assert (opened["DET_GATEWAY_HOST"], opened["DET_MASTER_ADDRESS"]) == ("0.0.0.0", "127.0.0.1:8080")
    one = service_environment(ClusterOptions(tmp_path, listen="10.1.2.3"), tmp_path, "nats://x")
    assert one["DET_MASTER_ADDRESS"] == "10.1.2.3:8080"
    assert (master_host("127.0.0.1"), master_host("0.0.0.0"), master_host("10.1.2.3")) == (
        "localhost",
        "localhost",
        "10.1.2.3",
    )


def test_a_refused_token_with_no_password_to_hand_keeps_the_active_user(
    store: TokenStore, master: Master, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.remember("alice", "revoked", active=True)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    with pytest.raises(CliError, match="no password given"):
        session(store, master).token()
    assert (store.token("alice"), store.active_user()) == (None, "alice")
    monkeypatch.setattr("sys.stdin", io.StringIO("a-Password1\n"))
    assert session(store, master).token() == "alice-1"  # the password, one line of stdin


def test_cluster_up_keeps_the_given_password_or_generates_one_for_a_new_cluster_only(tmp_path: Path) -> None:
    def keep(
        data_dir: Path, password: str | None = None, allow_blank: bool = False
    ) -> InitialPassword | None:
        _keep_initial_password(
            argparse.Namespace(initial_user_password=password, allow_blank_password=allow_blank), data_dir
        )
        return initial_password.load(data_dir)

    assert keep(tmp_path / "given", "Given-pass-1") == InitialPassword("Given-pass-1", generated=False)
    assert keep(tmp_path / "blank", allow_blank=True) == InitialPassword("", generated=False)
    made = keep(tmp_path / "new")
    assert made is not None and made.generated
    assert keep(tmp_path / "new") == made  # a cluster-up that failed: the next one shows the same
    existing = tmp_path / "existing"
    existing.mkdir()
    cluster_identity(existing)  # its users were made by an earlier cluster-up
    assert keep(existing) is None
