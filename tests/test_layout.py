"""Rules of train/'s layout, read from the sources (ast): rooms in layers, no import cycle, os.environ only at
the entry, short files.

Nothing is imported but `train.__main__` (for its list of subcommands), so a breach is named even
when it would make `import train.loop.fit` fail.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from train.__main__ import SUBCOMMANDS
from train.config import available_configs

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "train"
MAX_LINES = 500

# The rooms of train/, lowest first: a module may import its own room and the rooms below it, never one
# above. errors and config are what every room stands on; cluster resolves the job (ranks, rendezvous,
# process group); graph's core holds the graph's form (typed CSC, edge rows, labels, sizes, splits), and its
# three wings each point one way, down: datasets (kinds, loaders, files) load a graph, sharing keeps one copy
# per node, sampling draws the batches; models builds and checks the model and says how a batch reaches it;
# loop trains on them, and plan (the memory model) sizes a run from the config, the graph and the model; the
# entry (cli, doctor, `python -m train`) sits on top. `train.distenv` is the public alias of
# train.cluster.distenv, kept for other projects, so it lives in cluster's layer.
GRAPH_WINGS = ("train.graph.datasets", "train.graph.sharing", "train.graph.sampling")
LAYERS: tuple[tuple[str, ...], ...] = (
    # files: the checks every reader of a user's file makes; storage: how the run writes its files, and their faults
    ("train.errors", "train.files", "train.heap", "train.storage"),
    # the config (its settings' declarations and checks) and the torch-free tables beside it: the built-in models
    # and the tasks
    ("train.config", "train.builtin_models", "train.builtin_tasks", "train.sweep"),
    ("train.cluster", "train.distenv"),
    ("train.graph",),  # the core: graph/'s top-level modules
    *((wing,) for wing in GRAPH_WINGS),
    ("train.models",),
    ("train.loop", "train.plan"),
    ("train.cli", "train.doctor", "train.__main__"),
)
# graph/'s top level is its core: a newcomer reads these names first, so they stay few.
MAX_GRAPH_CORE_MODULES = 12
# Import statements inside function bodies in train/ and login/ (189 before issue 39): a module's top says what it
# needs. Inside a function stay only the CLI's subcommand dispatch (torch loads once the input is known to be good)
# and optional dependencies (ogb, pandas, matplotlib, tensorboard, psutil, PyYAML and numpy on a login node).
MAX_FUNCTION_BODY_IMPORTS = 40


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(path): path for path in sorted(package.rglob("*.py"))}


def imported(tree: ast.AST, name: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of `known` that a module imports anywhere (top level, in functions, under TYPE_CHECKING)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, one level up per extra dot
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets = [module] + [f"{module}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import train.a.b` names train.a.b; the module may be train.a
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the modules of the package it imports."""
    mods = modules(package)
    known = set(mods)
    return {name: imported(ast.parse(path.read_text(), str(path)), name, path.name == "__init__.py", known)
            for name, path in mods.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def layer_of(module: str, layers=LAYERS) -> int | None:
    """The index in `layers` of the room `module` belongs to (the innermost room that is itself or a package above
    it: train.graph.sampling.x is in the sampling wing, not in graph's core), or None."""
    best: tuple[int, int] | None = None  # (length of the room's name, its layer)
    for index, rooms in enumerate(layers):
        for room in rooms:
            if (module == room or module.startswith(room + ".")) and (best is None or len(room) > best[0]):
                best = (len(room), index)
    return None if best is None else best[1]


def layer_breaches(graph: dict[str, set[str]], layers=LAYERS) -> list[str]:
    """Every import of a higher room by a lower one, and every module (but the package itself) in no room."""
    breaches = []
    for module, targets in sorted(graph.items()):
        here = layer_of(module, layers)
        if here is None:
            if module != "train":
                breaches.append(f"{module} is in no room of LAYERS (place it in one)")
            continue
        for target in sorted(targets):
            there = layer_of(target, layers)
            if there is not None and there > here:
                breaches.append(f"{module} (room {layers[here][0]}) imports {target} (room {layers[there][0]}, above)")
    return breaches


def test_rooms_import_only_their_own_layer_and_those_below():
    breaches = layer_breaches(import_graph())
    assert not breaches, "train/'s rooms import upwards:\n" + "\n".join(breaches)


def test_the_layer_rule_sees_an_upward_import_and_a_module_without_a_room(tmp_path):
    """The rule above would pass vacuously if it missed a lazy upward import or an unplaced module."""
    pkg = tmp_path / "train"
    for room in ("cluster", "loop"):
        (pkg / room).mkdir(parents=True)
        (pkg / room / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("")
    (pkg / "cluster" / "env.py").write_text("import train.errors\ndef f():\n    from train.loop import fit\n")
    (pkg / "loop" / "fit.py").write_text("from train.cluster.env import f\n")
    (pkg / "stray.py").write_text("")
    layers = (("train.errors",), ("train.cluster",), ("train.loop",))
    assert layer_breaches(_graph_under(tmp_path), layers) == [
        "train.cluster.env (room train.cluster) imports train.loop (room train.loop, above)",
        "train.cluster.env (room train.cluster) imports train.loop.fit (room train.loop, above)",
        "train.stray is in no room of LAYERS (place it in one)",
    ]


def test_a_wing_of_graph_is_its_own_room_above_the_core():
    """graph's core may not import a wing, and a lower wing may not import a higher one."""
    assert layer_of("train.graph.form") < layer_of("train.graph.datasets.kinds") < \
        layer_of("train.graph.sharing.segments") < layer_of("train.graph.sampling.samplers")
    graph = {"train.graph.form": {"train.graph.sampling.samplers"}, "train.graph.sampling.samplers": set(),
             "train.graph.sharing.segments": {"train.graph.form"}}
    assert layer_breaches(graph) == ["train.graph.form (room train.graph) imports train.graph.sampling.samplers "
                                     "(room train.graph.sampling, above)"]


def test_the_rooms_on_disk_are_the_layers_rooms():
    """The models are their own room (train/models/), not filed inside loop; graph's core stays small."""
    assert (PACKAGE / "models" / "__init__.py").is_file()
    assert not (PACKAGE / "loop" / "models").exists()
    for wing in GRAPH_WINGS:
        assert (ROOT / wing.replace(".", "/") / "__init__.py").is_file(), wing
    core = sorted(path.name for path in (PACKAGE / "graph").glob("*.py") if path.name != "__init__.py")
    assert len(core) <= MAX_GRAPH_CORE_MODULES, f"graph/'s top level has {len(core)} modules: {core}"


def _one_letter_apart(a: str, b: str) -> bool:
    """Names of equal length that differ in one letter, or one letter added (ogbn/ogbl, sampler/samplers)."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b)) == 1
    short, long = sorted((a, b), key=len)
    return any(long[:i] + long[i + 1:] == short for i in range(len(long)))


def test_no_two_modules_of_a_room_are_a_letter_apart():
    """A room's modules are told apart by what they hold, not by one letter."""
    rooms: dict[Path, list[str]] = {}
    for path in modules().values():
        if path.name != "__init__.py":
            rooms.setdefault(path.parent, []).append(path.stem)
    close = [f"{folder.relative_to(ROOT)}: {a} ~ {b}" for folder, names in rooms.items()
             for i, a in enumerate(sorted(names)) for b in sorted(names)[i + 1:] if _one_letter_apart(a, b)]
    assert not close, close
    assert _one_letter_apart("ogbn", "ogbl") and _one_letter_apart("sampler", "samplers")
    assert not _one_letter_apart("segments", "samplers")


def test_no_function_is_named_like_a_module():
    """`edge_split.link_split()` was not the module `link_split`: a top-level function never takes another module's
    name (its own module's, as `edge_keys.edge_keys`, is the idiom of a module that does one thing)."""
    names = {path.stem for path in modules().values()}
    clashes = [f"{path.relative_to(ROOT)}: def {node.name}" for path in modules().values()
               for node in ast.parse(path.read_text()).body
               if isinstance(node, ast.FunctionDef) and node.name in names and node.name != path.stem]
    assert not clashes, clashes


def test_no_import_cycle_in_train():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle in train/: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_lazy_and_relative_imports(tmp_path):
    """The rule above would pass vacuously if imports inside functions or relative ones were missed."""
    pkg = tmp_path / "train"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from train.b import g\n")
    (pkg / "b.py").write_text("from train.sub import c\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("from ..a import f\n")
    assert find_cycle(_graph_under(tmp_path)) == ["train.a", "train.b", "train.sub.c", "train.a"]
    (pkg / "sub" / "c.py").write_text("import os\n")
    assert find_cycle(_graph_under(tmp_path)) is None


def _graph_under(root: Path) -> dict[str, set[str]]:
    mods = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
            for p in sorted((root / "train").rglob("*.py"))}
    return {name: imported(ast.parse(path.read_text()), name, path.name == "__init__.py", set(mods))
            for name, path in mods.items()}


# ---- job facts are read at the entry -------------------------------------------------------------
ENV_ATTRS = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def entry_modules() -> set[str]:
    """`python -m train` itself and the modules its subcommands dispatch to (the CLI shims, doctor, report...)."""
    return {"train.__main__", *(module for module, _help in SUBCOMMANDS.values())}


def reads_environment(tree: ast.AST) -> list[int]:
    """Lines that touch os.environ / os.getenv (or import them from os)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ENV_ATTRS and \
                isinstance(node.value, ast.Name) and node.value.id == "os":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os" and \
                any(alias.name in ENV_ATTRS for alias in node.names):
            lines.append(node.lineno)
    return lines


def test_only_the_entry_modules_read_the_environment():
    """Below the entry, job facts come from `DistEnv` (train/cluster/distenv.py, jobfacts.py), not os.environ."""
    entries = entry_modules()
    offenders = []
    for name, path in modules().items():
        if name in entries or any(name.startswith(entry + ".") for entry in entries):
            continue
        for line in reads_environment(ast.parse(path.read_text(), str(path))):
            offenders.append(f"{path.relative_to(ROOT)}:{line}")
    assert not offenders, ("os.environ read below the entry (resolve the fact in train/cluster/distenv.py or "
                           f"train/cluster/jobfacts.py and pass it down): {', '.join(offenders)}")


@pytest.mark.parametrize("source,flagged", [
    ("import os\nx = os.environ.get('A')\n", [2]),
    ("import os\ndef f(environ=os.environ):\n    pass\n", [2]),
    ("import os\nos.getenv('A')\n", [2]),
    ("from os import environ\n", [1]),
    ("import os\nos.path.join('a')\nenviron = {}\n", []),
])
def test_the_environment_rule_sees_each_form(source, flagged):
    assert reads_environment(ast.parse(source)) == flagged


def test_no_module_in_train_is_over_500_lines():
    long = {str(path.relative_to(ROOT)): n for path in modules().values()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, long


# ---- every Python file is linted ---------------------------------------------------------------------------
def ruff_files(root: Path) -> set[str]:
    """The files `make lint` gives ruff (its paths as mk/lint.mk names them), as ruff resolves them under `root`."""
    paths = re.search(r'ruff" check --quiet (.+?) &&', (ROOT / "mk" / "lint.mk").read_text()).group(1).split()
    ruff = Path(sys.executable).parent / "ruff"
    shown = subprocess.run([str(ruff), "check", "--show-files", *paths], cwd=root, capture_output=True, text=True,
                           check=True).stdout
    return {str(Path(line.strip()).resolve().relative_to(root.resolve())) for line in shown.splitlines()
            if line.strip().endswith(".py")}


def test_make_lint_gives_ruff_every_python_file_of_the_checkout():
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert tracked, "git lists no Python file: the check would pass vacuously"
    missed = sorted(set(tracked) - ruff_files(ROOT))
    assert not missed, f"ruff never checks these (an excluded folder name such as dist/ or build/?): {missed}"


def test_ruff_is_told_to_lint_folders_its_defaults_skip(tmp_path):
    """Ruff's defaults skip dist/ and build/; the project's settings must not (train/dist/ went unlinted once)."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for folder in ("dist", "build", "pkg"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "m.py").write_text("x = 1\n")
    assert ruff_files(tmp_path) == {"dist/m.py", "build/m.py", "pkg/m.py"}


def test_the_login_node_s_config_check_imports_no_torch(tmp_path):
    """make submit checks the config and the dataset on the login node (login/config_check.py), once per call:
    the config, the dataset kinds and their checks stay free of torch there (about 1 s an import), which only
    loading a graph imports. Every shipped config, heterogeneous graphs included, as shipped and with a data.path
    (IGBH's check goes on to the folder's kind then). The torch-free facts live apart from the torch code, each
    importing at its top (train/config.py, train/builtin_models.py, train/graph/datasets/kinds.py and lookup.py,
    igbh.py, hetero_synthetic.py, ogb_nodes.py and ogb_links.py without torch; kind_graphs.py, loading.py,
    synthetic.py and ogb_graphs.py with it): this test holds the line between them."""
    code = ("import sys\n"
            "from login.config_check import main\n"
            "from train.config import available_configs\n"
            "for config in available_configs():\n"
            f"    for extra in ([], ['data.path={tmp_path}']):\n"
            f"        status = main(['--data-dir', {str(tmp_path)!r}, config, *extra])\n"
            "        assert status in (0, 2), (config, status)\n"
            "        assert 'torch' not in sys.modules, f'checking {config} {extra} imported torch'\n"
            "print(len(available_configs()), 'configs checked')")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].split()[0] == str(len(available_configs()))  # after what it said
    assert "cannot import" not in done.stdout


# ---- imports at the top ---------------------------------------------------------------------------------
def function_body_imports(tree: ast.AST) -> list[int]:
    """The lines of the import statements nested in a function's body (at any depth: in a class or a try inside
    it too)."""
    lines: list[int] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                lines.append(child.lineno)
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(tree, False)
    return lines


def test_imports_sit_at_the_top_of_each_module():
    """At most MAX_FUNCTION_BODY_IMPORTS imports inside function bodies in train/ and login/: torch-free facts live
    apart from torch code (the login node's check: test_the_login_node_s_config_check_imports_no_torch), so both
    import at their top; what stays inside a function is the CLI's dispatch and the optional dependencies."""
    found = {str(path.relative_to(ROOT)): lines for folder in ("train", "login")
             for path in sorted((ROOT / folder).rglob("*.py"))
             if (lines := function_body_imports(ast.parse(path.read_text(), str(path))))}
    count = sum(len(lines) for lines in found.values())
    assert found, "no import inside a function at all: the counter or the paths are wrong"
    offenders = "\n".join(f"{path}: {len(lines)} (lines {', '.join(map(str, lines))})"
                          for path, lines in sorted(found.items(), key=lambda item: -len(item[1])))
    assert count <= MAX_FUNCTION_BODY_IMPORTS, (
        f"{count} imports inside function bodies (at most {MAX_FUNCTION_BODY_IMPORTS}): import at the module's top, "
        f"splitting torch-free facts from torch code where a module must stay free of torch:\n{offenders}")


@pytest.mark.parametrize("source,lines", [
    ("import os\ndef f():\n    import torch\n    from a import b\n", [3, 4]),
    ("def f():\n    try:\n        import ogb\n    except ImportError:\n        pass\n", [3]),
    ("class A:\n    def m(self):\n        def inner():\n            import json\n", [4]),
    ("async def f():\n    from . import x\n", [2]),
    ("import os\nif True:\n    import sys\nclass A:\n    import re\n", []),
])
def test_the_import_counter_sees_a_nested_import(source, lines):
    """The count above would pass vacuously if it missed an import in a try, a nested function or a method, or
    took a top-level (or class-level) one for a function's."""
    assert function_body_imports(ast.parse(source)) == lines


def test_each_stand_in_fixture_has_a_name_of_its_own():
    """The tests' stand-ins (tests/test_jobs.py's sbatch and its cluster, ...) hold different things: one name each, so
    that a test's parameter says which it gets (the NGC image's is `ngc_image`, held once by test_harness's check of
    the once-per-machine parts)."""
    where: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and "standin" in node.name and any(
                    "fixture" in ast.unparse(d) for d in node.decorator_list):
                where.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    assert len(where) >= 2 and all(len(paths) == 1 for paths in where.values()), where
