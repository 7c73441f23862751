"""The tree stays lint-clean (ruff) and type-clean (mypy), as STYLE.md asks."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_ruff_finds_nothing() -> None:
    result = _run("ruff", "check", "kafka_ext", "tests", "bench", "tools")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_finds_nothing_in_the_package() -> None:
    result = _run("mypy", "kafka_ext")
    assert result.returncode == 0, result.stdout + result.stderr


# Packages the broker and CLI may import: the runtime dependencies in pyproject.toml.
# kafka_ext/spark runs inside Spark and may also use the `spark` extra.
_SPARK_PACKAGE = ROOT / "kafka_ext" / "spark"


def _declared_distributions(extra: str | None) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    return {re.split(r"[=<>!~\[ ;]", spec, maxsplit=1)[0].lower() for spec in specs}


def _third_party_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != "kafka_ext"}


def test_the_package_imports_only_declared_dependencies() -> None:
    """`pip install kafka-ext` (no extras) must be enough for the broker and every command."""
    distributions_of = importlib.metadata.packages_distributions()
    runtime = _declared_distributions(None)
    spark = runtime | _declared_distributions("spark")
    undeclared = []
    for path in sorted((ROOT / "kafka_ext").rglob("*.py")):
        allowed = spark if _SPARK_PACKAGE in path.parents else runtime
        for module in _third_party_imports(path):
            owners = {d.lower() for d in distributions_of.get(module, [module])}
            if not owners & allowed:
                undeclared.append(f"{path.relative_to(ROOT)} imports {module} ({owners})")
    assert not undeclared, "\n".join(undeclared)
