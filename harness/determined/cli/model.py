"""`det model`: the model registry. A model is a name; its versions are
checkpoints registered under it, which garbage collection never deletes."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from determined.cli._client import connect
from determined.cli._output import compact_json, format_time, message_dict, print_json, print_table
from determined.cli.checkpoint import checkpoint_uuid

if TYPE_CHECKING:
    from determined.proto import api_pb2

MODEL_HEADERS = ["ID", "Name", "Description", "Labels", "Owner", "Created", "# of Versions"]
VERSION_HEADERS = [
    "Version",
    "Checkpoint UUID",
    "Experiment ID",
    "Trial ID",
    "# of Batches",
    "Validation Metrics",
    "Name",
    "Comment",
    "Owner",
    "Registered",
]


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("model", aliases=["m"], help="the model registry")
    verbs = parser.add_subparsers(dest="verb", metavar="<verb>")
    parser.set_defaults(run=list_models, json=False)

    create = verbs.add_parser("create", help="create a model")
    create.add_argument("name", type=model_name)
    create.add_argument("-d", "--description", default="")
    create.add_argument(
        "-l", "--label", dest="labels", action="append", default=[], metavar="LABEL", help="(repeatable)"
    )
    create.add_argument("--json", action="store_true")
    create.set_defaults(run=create_model)

    listing = verbs.add_parser("list", aliases=["ls"], help="list models")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(run=list_models)

    describe = verbs.add_parser("describe", help="a model and its versions")
    describe.add_argument("name", type=model_name)
    describe.add_argument("--json", action="store_true")
    describe.set_defaults(run=describe_model)

    register = verbs.add_parser("register-version", help="register a checkpoint as the model's next version")
    register.add_argument("name", type=model_name)
    register.add_argument("uuid", type=checkpoint_uuid, help="the checkpoint's UUID")
    register.add_argument("--version-name", dest="version_name", default="", metavar="NAME")
    register.add_argument("--comment", default="")
    register.add_argument("--json", action="store_true")
    register.set_defaults(run=register_version)


def model_name(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("a model name may not be empty")
    return text


def model_row(model: api_pb2.Model) -> list[Any]:
    return [
        model.model_id,
        model.name,
        model.description,
        ", ".join(model.labels),
        model.owner,
        format_time(model.created_at_ns),
        model.num_versions,
    ]


def version_row(version: api_pb2.ModelVersion) -> list[Any]:
    c = version.checkpoint
    return [
        version.version,
        c.uuid,
        c.experiment_id,
        c.trial_id,
        c.steps_completed,
        compact_json(c.validation_metrics_json),
        version.name,
        version.comment,
        version.owner,
        format_time(version.registered_at_ns),
    ]


def create_model(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    gateway = connect(args)
    request = api_pb2.CreateModelRequest(name=args.name, description=args.description, labels=args.labels)
    model = gateway.call(gateway.stub.CreateModel, request).model
    if args.json:
        print_json(message_dict(model))
    else:
        print(f"Created model {model.name}")
        print_table(MODEL_HEADERS, [model_row(model)])
    return 0


def list_models(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    gateway = connect(args)
    models = gateway.call(gateway.stub.GetModels, api_pb2.GetModelsRequest()).models
    if args.json:
        print_json([message_dict(m) for m in models])
    else:
        print_table(MODEL_HEADERS, [model_row(m) for m in models])
    return 0


def describe_model(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    gateway = connect(args)
    model = gateway.call(gateway.stub.GetModel, api_pb2.GetModelRequest(name=args.name)).model
    if args.json:
        print_json(message_dict(model))
        return 0
    print_table(MODEL_HEADERS, [model_row(model)])
    print("\nVersions:")
    print_table(VERSION_HEADERS, [version_row(v) for v in model.versions])
    return 0


def register_version(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    gateway = connect(args)
    request = api_pb2.RegisterModelVersionRequest(
        model_name=args.name, checkpoint_uuid=args.uuid, name=args.version_name, comment=args.comment
    )
    version = gateway.call(gateway.stub.RegisterModelVersion, request).version
    if args.json:
        print_json(message_dict(version))
    else:
        print(f"Registered checkpoint {args.uuid} as version {version.version} of model {version.model_name}")
        print_table(VERSION_HEADERS, [version_row(version)])
    return 0
