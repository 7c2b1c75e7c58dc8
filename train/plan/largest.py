"""What a node's peak and a GPU's total are made of, in words: the largest term, whether it is an upper bound, and
how it compares with the graph (issue 43 §3: "the peak is loading: 7,010 GiB, three times the graph"). Read from
the plan's own rows (train/plan/terms.py, train/plan/sharded.py); `python -m train plan` prints them under its
table, and a refusal names the largest term of what does not fit."""

from __future__ import annotations

from train.graph.sharing.feature_layout import LayoutChoice
from train.loop.killed_rank import memory_words
from train.plan.held import shared_graph_bytes
from train.plan.sharded import SHARDED
from train.plan.terms import Plan

# the plan's sums, not terms: never named as the largest term
SUMS = ("peak", "in all", "while training and evaluating", "while loading", "allocator blocks beyond")
BOUND = "an upper bound: sampled nodes not deduplicated"


def _value(plan: Plan, scope: str, prefix: str) -> tuple[str, int]:
    return next(((k, v) for k, v in plan.rows[scope].items() if k.startswith(prefix)), ("", 0))


def largest_term(plan: Plan, scope: str) -> tuple[str, int]:
    """The largest of a scope's terms (its sums aside): (item, bytes)."""
    terms = {k: v for k, v in plan.rows[scope].items() if not k.startswith(SUMS)}
    item = max(terms, key=terms.get)
    return item, terms[item]


def _term_words(plan: Plan, item: str, value: int) -> str:
    return f"{item} ({memory_words(value)}{', ' + BOUND if item in plan.bounds else ''})"


def _training_words(plan: Plan, per_node: int) -> str:
    steady = plan.rows["rank"]["while training and evaluating"]
    return (f"training: {per_node} rank(s) x {memory_words(steady)}, a rank's largest term the "
            f"{_term_words(plan, *largest_term(plan, 'rank'))}")


def largest_words(plan: Plan, choice: LayoutChoice, scope: str) -> str:
    """What makes the peak of a node (in the layout taken) or the total of a GPU: "its peak is ...". """
    if scope == "GPU":
        return f"its largest term is the {_term_words(plan, *largest_term(plan, 'GPU'))}"
    per_node = plan.ranks_per_node
    loading = _value(plan, "rank", "while loading")[1]  # one loader's
    if choice.layout == SHARDED:
        rows = plan.rows[SHARDED]
        held = _value(plan, SHARDED, "features: its shard")[1] + _value(plan, SHARDED, "structure")[1]
        parts = {"loading": _value(plan, SHARDED, "while loading")[1],
                 "training": _value(plan, SHARDED, "while training")[1], "held": held}
        graph_words = f"its shard and the structure ({memory_words(held)})"
        loading_words = (f"the loading of its own rows: {memory_words(parts['loading'] - per_node * _runtime(plan))} "
                         f"beside {per_node} runtime(s), {parts['loading'] / max(held, 1):.1f} x {graph_words}")
        peak = rows["peak"]
    else:
        graph = shared_graph_bytes(plan.size)
        loaders = 1 if _value(plan, "node", "graph, shared once")[1] else per_node
        parts = {"loading": _value(plan, "node", "while loading")[1],
                 "training": _value(plan, "node", "while training")[1], "held": graph}
        who = "the rank that loads the graph holds" if loaders == 1 else f"each of its {per_node} rank(s) holds"
        loading_words = (f"the loading: {who} {memory_words(loading)} while it reads the graph and builds its CSC, "
                         f"{loading / max(graph, 1):.1f} x the graph ({memory_words(graph)})")
        graph_words = f"the graph itself ({memory_words(graph)})"
        peak = plan.node_peak
    largest = max(parts, key=parts.get)
    words = {"loading": loading_words, "training": _training_words(plan, per_node), "held": graph_words}[largest]
    return f"its peak ({memory_words(peak)}) is mostly {words}"


def _runtime(plan: Plan) -> int:
    return _value(plan, "rank", "runtime")[1]


def peak_lines(plan: Plan, choice: LayoutChoice) -> list[str]:
    """Under the plan's table: what makes a node's peak and a GPU's total, and what the bounds are."""
    lines = [f"largest, per node ({choice.layout}): {largest_words(plan, choice, 'node')}"]
    if plan.rows["GPU"]:
        lines.append(f"largest, per GPU: {largest_words(plan, choice, 'GPU')}")
    if plan.bounds:
        lines.append("(bound): an upper bound, not an estimate: each hop's sampled nodes are counted at the whole "
                     "fanout per relation, none deduplicated (train/plan/hops.py), so a real batch holds fewer; the "
                     "sums built on it are bounds too")
    return lines
