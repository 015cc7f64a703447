"""The committed Python code generated from proto/ must match the .proto files."""

import filecmp
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_code_is_not_stale(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "proto" / "generate.py"), "--out", str(tmp_path)], check=True)
    generated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert generated, "protoc generated nothing"
    committed = ROOT / "harness"
    stale = [str(p) for p in generated if not filecmp.cmp(tmp_path / p, committed / p, shallow=False)]
    assert not stale, f"run `python proto/generate.py`: stale generated code {stale}"
