"""The node agent runs on GPU nodes without the control plane: the standard library,
pynvml and its own modules only (checked on the AST, like tests/test_architecture.py)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

AGENT = Path(__file__).resolve().parents[2] / "agents" / "node_agent"
ALLOWED_THIRD_PARTY = {"pynvml"}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            roots.add((node.module or "").split(".")[0])
    return roots


@pytest.mark.parametrize("path", sorted(AGENT.glob("*.py")), ids=lambda p: p.name)
def test_the_node_agent_imports_only_the_standard_library_and_pynvml(path: Path) -> None:
    outside = {
        root
        for root in imported_roots(path)
        if root not in sys.stdlib_module_names and root not in ALLOWED_THIRD_PARTY
    }
    assert not outside, f"{path.name} imports {sorted(outside)}"
