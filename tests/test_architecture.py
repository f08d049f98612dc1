"""Import rules (style.md rule 25): the scheduler core, policies and simulator stay pure.

They must run in the trace simulator and in tests without a database, so nothing under
scheduler/core, scheduler/policies or scheduler/sim may import Django, DRF, Celery or the
Django apps (jobs, cluster, agents, accounts). Checked on the AST, so an import hidden in a
function body is caught too, without importing anything.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PURE_PACKAGES = ("scheduler/core", "scheduler/policies", "scheduler/sim")
FORBIDDEN = ("django", "rest_framework", "celery", "jobs", "cluster", "agents", "accounts")


def imports_in(source: str, package: str) -> list[tuple[int, str]]:
    """(line, module) for every import in `source`, relative imports made absolute."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.append((node.lineno, module))
    return found


def imported_modules(path: Path) -> list[tuple[int, str]]:
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    return imports_in(path.read_text(), package)


def is_forbidden(module: str) -> bool:
    root = module.split(".")[0]
    return root in FORBIDDEN


def pure_files() -> list[Path]:
    return sorted(p for package in PURE_PACKAGES for p in (REPO / package).rglob("*.py"))


def test_the_pure_packages_exist_and_hold_code() -> None:
    files = [p.relative_to(REPO).as_posix() for p in pure_files()]
    assert "scheduler/core/types.py" in files
    assert "scheduler/policies/las.py" in files


@pytest.mark.parametrize(
    ("source", "forbidden"),
    [
        ("import django", True),
        ("from django.db import models", True),
        ("from jobs.models import Job", True),
        ("import cluster.selectors as s", True),
        ("def f():\n    from agents import client", True),
        ("from scheduler.core.types import Job", False),
        ("import numpy as np", False),
        ("from jobsearch import x", False),  # a prefix is not the package
        ("from . import types", False),  # relative: scheduler.core.types
    ],
)
def test_the_checker_recognizes_forbidden_imports(source: str, forbidden: bool) -> None:
    modules = [module for _, module in imports_in(source, "scheduler.core")]
    assert any(is_forbidden(module) for module in modules) is forbidden


@pytest.mark.parametrize("path", pure_files(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_pure_scheduler_code_imports_no_django_and_no_django_app(path: Path) -> None:
    offending = [
        f"line {line}: {module}" for line, module in imported_modules(path) if is_forbidden(module)
    ]
    assert not offending, f"{path.relative_to(REPO)} imports {offending}"
