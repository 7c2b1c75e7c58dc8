"""What does not fit, what the plan's peak is made of, and what would fit: the memory plan's verdict and its advice
(issue 43 §3). The advice is never a list of remedies: each change is planned with the same functions as the job
(`assess`), and only a change that clears a problem without adding one is named, so a setting already in effect
(which changes nothing) is never suggested. The words for the largest terms: train/plan/largest.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from train.config import Config
from train.graph.sharing.feature_layout import LayoutChoice
from train.graph.sizes import GraphSize
from train.loop.killed_rank import memory_words
from train.models import evaluates_exactly
from train.plan.largest import largest_words
from train.plan.sharded import SHARDED, gpu_need, layout_of, node_refusal, nodes_needed
from train.plan.terms import Plan, make_plan

HALVINGS = 8  # a batch size is halved at most this many times (1/256 of it) in search of a size that fits


@dataclass(frozen=True)
class Job:
    """What a plan is made for: the config, the graph as loaded, the nodes and ranks, and what a node and a GPU have
    ((bytes or None, where that figure comes from))."""

    config: Config
    loaded: GraphSize
    nodes: int
    ranks: int
    gpus: bool
    node_capacity: tuple[int | None, str] = (None, "unknown")
    gpu_capacity: tuple[int | None, str] = (None, "unknown")


@dataclass(frozen=True)
class Assessed:
    """A job's plan, the layout data.features takes, and what does not fit: kind ("node", "GPU", "sampler") ->
    words."""

    plan: Plan
    choice: LayoutChoice
    problems: dict[str, str]


@dataclass(frozen=True)
class Change:
    """One change to a job: settings (section.key, value) and the nodes or ranks per node (None: as they are)."""

    settings: tuple[tuple[str, object], ...] = ()
    nodes: int | None = None
    per_node: int | None = None

    def words(self, job: Job) -> str:
        """The change as a user gives it: make's NODES and GPUS (the ranks in all), then ARGS' key=value."""
        said = []
        if self.nodes is not None or self.per_node is not None:
            nodes = self.nodes or job.nodes
            per_node = self.per_node or -(-job.ranks // job.nodes)
            said.append(f"NODES={nodes} GPUS={nodes * per_node}")
        said += [f"{key}={value}" for key, value in self.settings]
        return " ".join(said)

    def applied(self, job: Job) -> Job:
        config = job.config
        for key, value in self.settings:
            section, name = key.split(".")
            config = replace(config, **{section: replace(getattr(config, section), **{name: value})})
        nodes = self.nodes or job.nodes
        per_node = self.per_node or -(-job.ranks // job.nodes)
        ranks = job.ranks if self.nodes is None and self.per_node is None else nodes * per_node
        return replace(job, config=config, nodes=nodes, ranks=ranks)


def assess(job: Job) -> Assessed:
    """The job's plan against its node's and GPU's memory, its layout (the run's own decision) and its problems."""
    plan = make_plan(job.config, job.loaded, job.nodes, job.ranks, gpus=job.gpus, gpu_bytes=job.gpu_capacity[0])
    plan.node_capacity, plan.gpu_capacity = job.node_capacity, job.gpu_capacity
    choice = layout_of(plan, job.config, job.loaded, *plan.node_capacity)
    return Assessed(plan, choice, problems(plan, job.config, job.loaded, choice))


def problems(plan: Plan, config: Config, loaded: GraphSize, choice: LayoutChoice) -> dict[str, str]:
    """What does not fit: a node in the layout data.features takes (`choice`), a GPU, sampler.device=cuda that would
    sample on the CPU; each names its largest term."""
    found = {}
    if (node := node_refusal(plan, config, loaded, choice)) is not None:
        found["node"] = f"{node}; {largest_words(plan, choice, 'node')}"
    if plan.fallback:
        found["sampler"] = plan.fallback
    (cap, source), need = plan.gpu_capacity, gpu_need(plan, choice)
    if cap is not None and plan.rows["GPU"] and need > cap:
        found["GPU"] = (f"a GPU needs {memory_words(need)} but has {memory_words(cap)} ({source}); "
                        f"{largest_words(plan, choice, 'GPU')}")
    return found


# ---- the changes tried -------------------------------------------------------------------------------------

def _halved(values: dict[str, int]) -> list[Change]:
    """The settings `values` halved together, 1 to HALVINGS times, until the smallest would reach 0."""
    return [Change(tuple((key, value >> k) for key, value in values.items())) for k in range(1, HALVINGS + 1)
            if min(values.values()) >> k >= 1]


def _levers(job: Job, now: Assessed) -> list[list[Change]]:
    """Each way to hold less, as its steps from the least drastic: a setting not in effect, more nodes (sharded),
    fewer ranks a node, smaller batches. A step that changes nothing is dropped by the check, not here."""
    config, plan = job.config, now.plan
    per_node = plan.ranks_per_node
    levers: list[list[Change]] = []
    if config.data.share != "node" and per_node > 1:
        levers.append([Change((("data.share", "node"),))])
    if job.nodes > 1 and now.choice.layout != SHARDED:
        levers.append([Change((("data.features", "sharded"),))])
    cap = job.node_capacity[0]
    if "node" in now.problems and cap is not None:
        needed = nodes_needed(plan, config, job.loaded, cap)  # sharded; a copy on each holds no less for more nodes
        if needed is not None and needed > job.nodes:
            asked = () if config.data.features == "auto" else (("data.features", "sharded"),)
            levers.append([Change(asked, nodes=needed)])
    levers.append([Change(per_node=n) for n in range(per_node - 1, 0, -1)])
    other = "full" if config.eval.mode == "sampled" else "sampled"
    if other == "sampled" or evaluates_exactly(config.model, plan.size.features, plan.size.classes,
                                               meta=plan.size.meta):
        levers.append([Change((("eval.mode", other),))])
    if job.gpus and config.sampler.device != "cpu":
        levers.append([Change((("sampler.device", "cpu"),))])
    if config.data.feature_dtype == "float32":
        levers.append([Change((("data.feature_dtype", "bfloat16"),))])
    train, evaluation = config.sampler.batch_size, config.sampler.eval_batch_size
    levers += [_halved({"sampler.batch_size": train}), _halved({"sampler.eval_batch_size": evaluation}),
               _halved({"sampler.batch_size": train, "sampler.eval_batch_size": evaluation})]
    return [lever for lever in levers if lever]


@dataclass(frozen=True)
class Advice:
    """What would fit, each change checked: alone (`fits`), one after another (`together`: each clearing a problem
    the ones before it left), or clearing some of the problems (`clears`: kind -> changes)."""

    fits: list[Change]
    together: list[Change]
    clears: dict[str, list[Change]]


def _tried(job: Job, now: Assessed) -> tuple[list[Change], dict[str, list[Change]]]:
    """Each lever's least drastic step that makes `job` fit, else its least drastic ones that clear a problem
    without adding one (kind -> changes)."""
    fits, clears = [], {kind: [] for kind in now.problems}
    for lever in _levers(job, now):
        cleared = set()  # the problems a less drastic step of this lever cleared already
        for change in lever:
            if any(_within(done, change) for done in fits):
                break  # a part of it fits already (one of two batch sizes halved)
            left = assess(change.applied(job)).problems
            if set(left) - set(now.problems):
                continue  # it would add a problem
            if not left:
                fits.append(change)
                break
            for kind in set(now.problems) - set(left) - cleared:
                clears[kind].append(change)
                cleared.add(kind)
    return fits, clears


def _within(smaller: Change, change: Change) -> bool:
    """Whether `change` does all `smaller` does and more."""
    return (set(smaller.settings) < set(change.settings) and smaller.nodes in (None, change.nodes)
            and smaller.per_node in (None, change.per_node))


def advise(job: Job, now: Assessed | None = None) -> Advice:
    """The changes that would make the job fit; where no one change does, the first that clears each problem, and
    changes one after another (each the first that clears a problem left) where that fits."""
    now = now or assess(job)
    fits, clears = _tried(job, now)
    together: list[Change] = []
    if not fits and any(clears.values()):
        step, step_now, step_clears = job, now, clears
        for _ in range(len(now.problems)):
            change = next((c[0] for c in step_clears.values() if c), None)
            if change is None:
                break
            together.append(change)
            step = change.applied(step)
            step_now = assess(step)
            if not step_now.problems:
                break
            step_fits, step_clears = _tried(step, step_now)
            if step_fits:
                together.append(step_fits[0])
                step_now = assess(step_fits[0].applied(step))
                break
        together = together if not step_now.problems else []
    return Advice(fits, together, clears)


def advice_words(job: Job, advice: Advice) -> str:
    """The advice in a sentence: what would fit, each change planned as the job is; else what clears each problem."""
    def listed(changes: list[Change]) -> str:
        return "; or ".join(c.words(job) for c in changes)

    if advice.fits:
        return f"What would fit (each planned as this job is): {listed(advice.fits)}"
    said = []
    if advice.together:
        step, words = job, []
        for change in advice.together:
            words.append(change.words(step))
            step = change.applied(step)
        said.append(f"What would fit (planned as this job is): {' with '.join(words)}")
    cleared = [f"{'the sampler' if kind == 'sampler' else 'a ' + kind} with {listed(changes)}"
               for kind, changes in advice.clears.items() if changes]
    if cleared:
        said.append(f"{'Alone, ' if said else 'What would fit alone, none of it fitting the whole job: '}"
                    f"{', '.join(cleared)}")
    if not said:
        more = " or ".join(f"{'GPUs' if kind == 'GPU' else 'nodes'} with more memory" for kind in advice.clears)
        said.append("No change of data.share, data.features, NODES, ranks per node, eval.mode, sampler.device, "
                    f"data.feature_dtype or the batch sizes would fit: {more or 'more memory'}")
    return ". ".join(said)
