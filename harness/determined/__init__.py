"""determined-es: the harness side of the platform (`import determined as det`).

Kept light on purpose: importing it loads no grpc, torch, SQLAlchemy or pydantic, so
training scripts start fast and run off-cluster without a cluster's dependencies.
"""

from determined import core
from determined._info import ClusterInfo, TrialInfo, get_cluster_info
from determined.core._errors import InvalidHP

__version__ = "0.1.0"

# Level and pid first: the log shipper and the WebUI filter on the "LEVEL:" prefix.
LOG_FORMAT = "%(levelname)s: [%(process)s] %(name)s: %(message)s"

__all__ = ["LOG_FORMAT", "ClusterInfo", "InvalidHP", "TrialInfo", "__version__", "core", "get_cluster_info"]
