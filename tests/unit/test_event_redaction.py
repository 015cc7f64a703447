"""redaction.py: no secret of an event reaches people, in any field, any name
style, or inside the JSON text of config_json and storage_json."""

import json

from google.protobuf import json_format

from determined.proto import events_pb2
from services.common.envelope import Envelope
from services.gateway.features.events.redaction import REDACTED, redacted_fields

HASH = "$2b$10$abcdefghijklmnopqrstuv"
STORAGE = {"type": "s3", "bucket": "b", "access_key": "AKIA-SECRET", "secret_key": "s3cr3t", "prefix": "p"}
CONFIG = {
    "checkpoint_storage": STORAGE,
    "environment": {"environment_variables": ["AWS_SECRET_ACCESS_KEY=s3cr3t", "LOG_LEVEL=debug"]},
    "hyperparameters": {"lr": 0.1},
}


def test_a_password_hash_is_redacted_at_any_depth_and_in_either_name_style() -> None:
    envelope = Envelope(aggregate="user/3", actor="user:admin")
    envelope.user_created.CopyFrom(events_pb2.UserCreated(user_id=3, username="alice", password_hash=HASH))
    for preserving in (True, False):
        fields = json_format.MessageToDict(envelope, preserving_proto_field_name=preserving)
        text = json.dumps(redacted_fields(fields))
        assert HASH not in text and REDACTED in text and "alice" in text


def test_storage_credentials_inside_json_text_are_redacted_and_the_rest_kept() -> None:
    fields = {"config_json": json.dumps(CONFIG), "storage_json": json.dumps(STORAGE), "name": "x"}
    redacted = redacted_fields(fields)
    config = json.loads(redacted["config_json"])
    assert config["checkpoint_storage"] == {**STORAGE, "access_key": REDACTED, "secret_key": REDACTED}
    assert config["environment"]["environment_variables"] == [
        f"AWS_SECRET_ACCESS_KEY={REDACTED}",
        "LOG_LEVEL=debug",
    ]
    assert config["hyperparameters"] == {"lr": 0.1}
    assert json.loads(redacted["storage_json"])["secret_key"] == REDACTED
    assert redacted["name"] == "x"


def test_azure_and_gcs_credentials_and_tokens_are_redacted() -> None:
    azure = {"type": "azure", "connection_string": "AccountKey=abc", "container": "c"}
    nested = {"launch": {"storageJson": json.dumps(azure), "token": "tok", "credentials": {"k": "v"}}}
    redacted = redacted_fields(nested)["launch"]
    assert json.loads(redacted["storageJson"]) == {**azure, "connection_string": REDACTED}
    assert (redacted["token"], redacted["credentials"]) == (REDACTED, REDACTED)


def test_what_holds_no_secret_is_given_back_as_it_was() -> None:
    text = '{"b": 1,   "a": [1, 2]}'
    fields = {"metrics_json": text, "hparams_json": "not json", "password_hash": "", "items": [{"x": 1}]}
    assert redacted_fields(fields) == fields


def test_environment_variables_as_an_object_per_accelerator() -> None:
    variables = {"cpu": ["API_KEY=k", "A=1"], "cuda": {"DB_PASSWORD": "p", "B": "2"}}
    assert redacted_fields({"environment_variables": variables}) == {
        "environment_variables": {
            "cpu": [f"API_KEY={REDACTED}", "A=1"],
            "cuda": {"DB_PASSWORD": REDACTED, "B": "2"},
        }
    }
