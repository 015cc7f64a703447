"""An experiment's model definition: the context archive it was created with
(GetModelDef), saved as Determined's `experiment_<id>_model_def.tgz` (det
experiment download-model-def) or extracted into a folder (the SDK's
Experiment.download_code)."""

from __future__ import annotations

import pathlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from determined.cli._client import Gateway


def model_def_archive(gateway: Gateway, experiment_id: int) -> bytes:
    """The context archive (a gzip'd tar)."""
    from determined.proto import api_pb2

    response: api_pb2.GetModelDefResponse = gateway.call(
        gateway.stub.GetModelDef, api_pb2.GetModelDefRequest(experiment_id=experiment_id)
    )
    return response.context_tgz


def save_model_def(gateway: Gateway, experiment_id: int, output_dir: pathlib.Path) -> pathlib.Path:
    """Writes `output_dir/experiment_<id>_model_def.tgz` (the folder created if needed) and returns its path."""
    archive = model_def_archive(gateway, experiment_id)
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / f"experiment_{experiment_id}_model_def.tgz"
    path.write_bytes(archive)
    return path


def download_model_def(gateway: Gateway, experiment_id: int, target: pathlib.Path) -> pathlib.Path:
    """Extracts the context's files into folder `target` (created if needed) and returns it;
    an archive that would write outside it is refused (determined.common.context)."""
    from determined.cli._client import CliError
    from determined.common.context import ContextError, extract_context

    try:
        extract_context(model_def_archive(gateway, experiment_id), target)
    except ContextError as problem:
        raise CliError(f"the model definition of experiment {experiment_id}: {problem}") from None
    return target
