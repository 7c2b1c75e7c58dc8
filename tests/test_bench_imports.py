"""The benchmarks import one another in one direction, through public names (issue 26: pyg_anchor <-> training)."""

from __future__ import annotations

import ast

from tests.test_layout import ROOT, find_cycle, import_graph

BENCH = ROOT / "bench"


def test_the_benchmarks_import_each_other_without_a_circle():
    graph = import_graph(BENCH)
    assert {"bench.training_loops", "bench.common"} <= graph["bench.pyg_anchor"]  # the graph sees bench's imports
    assert find_cycle(graph) is None, f"import circle: {' -> '.join(find_cycle(graph))}"


def test_no_benchmark_imports_another_ones_private_names():
    private = [f"{path.name}:{node.lineno} {alias.name}" for path in sorted(BENCH.glob("*.py"))
               for node in ast.walk(ast.parse(path.read_text(), str(path)))
               if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bench")
               for alias in node.names if alias.name.startswith("_")]
    assert not private, private


def test_no_benchmark_imports_the_tests():
    """bench/ runs where tests/ may be absent (make bench, make gpu-check); the harness imports bench, not back
    (bench/plan.py's probe once called a helper of tests/harness that had moved into bench/localranks.py)."""
    found = [f"{path.name}:{node.lineno} {module}" for path in sorted(BENCH.glob("*.py"))
             for node in ast.walk(ast.parse(path.read_text(), str(path)))
             for module in ([a.name for a in node.names] if isinstance(node, ast.Import) else
                            [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
             if module == "tests" or module.startswith("tests.")]
    assert not found, found
