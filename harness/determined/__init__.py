"""determined-es: the harness side of the platform (`import determined as det`).

Kept light on purpose: importing it loads no grpc, torch, SQLAlchemy or pydantic, so
training scripts start fast and run off-cluster without a cluster's dependencies.
`det.core` and `det.InvalidHP` load on first use: every `det` call of the CLI imports this
package, and most never touch the Core API.
"""

from typing import TYPE_CHECKING, Any

from determined._info import ClusterInfo, TrialInfo, get_cluster_info

if TYPE_CHECKING:
    from determined import core
    from determined.core._errors import InvalidHP

__version__ = "0.1.0"

# Level and pid first: the log shipper and the WebUI filter on the "LEVEL:" prefix.
LOG_FORMAT = "%(levelname)s: [%(process)s] %(name)s: %(message)s"

__all__ = ["LOG_FORMAT", "ClusterInfo", "InvalidHP", "TrialInfo", "__version__", "core", "get_cluster_info"]


def __getattr__(name: str) -> Any:
    """`det.core` and `det.InvalidHP`, imported the first time they are asked for."""
    if name == "core":
        import determined.core

        return determined.core
    if name == "InvalidHP":
        from determined.core._errors import InvalidHP

        return InvalidHP
    raise AttributeError(f"module 'determined' has no attribute {name!r}")
