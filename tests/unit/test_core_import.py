"""`import determined` must stay light: training scripts import it before anything else."""

import subprocess
import sys

HEAVY = ("grpc", "torch", "sqlalchemy", "pydantic", "google.protobuf", "services", "pynvml")


def test_importing_determined_and_its_core_loads_no_heavy_dependency() -> None:
    code = (
        "import sys, determined, determined.core\n"
        "import determined as det\n"
        "det.core.init; det.get_cluster_info\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""
