"""The docs cannot drift from the code: every make target, make variable, config key, shipped config, model
name, benchmark, subcommand and exit status they name exists, and every link between the pages resolves (to a
file, and to a heading there).

Read from the Markdown sources and the code's own homes: the Makefile and mk/*.mk (targets with `##`),
jobs/knobs.md and the `?=` lines (variables), train/config/sections.py's dataclasses (config keys) and its model names,
train/configs/ (shipped configs), bench/__main__.py's BENCHES, train/__main__.py's SUBCOMMANDS,
train/errors.py (exit statuses).
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path

import pytest

import train.errors
from bench.__main__ import BENCHES
from tests.harness.knobs import make_variables  # the rows of jobs/knobs.md and the `?=` lines
from train.__main__ import SUBCOMMANDS
from train.config import BUILTIN_MODELS, USER_MODEL_RE, Config, available_configs

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "bench" / "README.md",
                *(ROOT / "docs").glob("*.md")])
README_MAX_LINES = 160  # the user's five minutes (issue 19: "aim: under ~150 lines")

MAKEFILES = [ROOT / "Makefile", *sorted((ROOT / "mk").glob("*.mk"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
MAKE_WORD = r"""[A-Za-z_][A-Za-z0-9_-]*=(?:'[^']*'|"[^"]*"|\S*)|[a-z][a-z0-9-]*"""  # NAME=value or a target
MAKE_CALL = re.compile(r"(?:^|[\s;(|&])make((?:\s+(?:" + MAKE_WORD + r"))+)")
CONFIG_KEY = re.compile(r"(?<![\w./-])(" + "|".join(f.name for f in dataclasses.fields(Config)) +
                        r")\.([a-z_][a-z0-9_]*)\b")
# `data.sh`, `model.pt`: file names that look like section.key
FILE_SUFFIXES = {"sh", "py", "pt", "md", "mk", "yaml", "json", "jsonl", "png", "npy", "sqsh", "lock", "log", "txt"}
SUBCOMMAND = re.compile(r"python3? -m train (?!\.)([a-z][a-z-]*)")
# `CONFIG=cora-gat`, `--config reddit`; `model.name=gat`; `BENCH=accuracy`, `BENCH="plan accuracy"`
CONFIG_NAME = re.compile(r"(?:\bCONFIG=|--config[= ])([\w.<>/-]+)")
MODEL_NAME = re.compile(r"\bmodel\.name=([\w.:<>-]+)")
BENCH_NAMES = re.compile(r"\bBENCH=(?:\"([^\"]*)\"|'([^']*)'|([\w-]+))")
EXIT_NAME = re.compile(r"\bEXIT_[A-Z_]+\b")


def make_words(text: str) -> list[str]:
    """The words of a make command line as the shell splits them: `ARGS='a.b=1 c.d=2'` is one word."""
    try:
        return shlex.split(text)
    except ValueError:  # an unbalanced quote: whitespace is the best guess
        return text.split()


def make_targets() -> set[str]:
    """The targets `make help` lists (a `target: ... ## doc` line)."""
    found = set()
    for path in MAKEFILES:
        found |= set(re.findall(r"^([a-z][a-z0-9-]*):[^=\n]*##", path.read_text(), flags=re.MULTILINE))
    return found


def config_keys() -> dict[str, set[str]]:
    return {f.name: {g.name for g in dataclasses.fields(f.type if isinstance(f.type, type) else
                                                           type(getattr(Config(), f.name)))}
            for f in dataclasses.fields(Config)}


def code_text(page: Path) -> list[tuple[int, str]]:
    """(line number, text) of every code span and every line of a fenced block: where commands and keys are named."""
    out, fenced = [], False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            out.append((number, line))
        else:
            out.extend((number, span) for span in CODE_SPAN.findall(line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens; an underscore is
    kept inside a word (`CODE_DIR` -> code_dir), dropped where it marks emphasis (_word_)."""
    text = re.sub(r"[`*]|(?<!\w)_+|_+(?!\w)", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("#"):
            continue
        base = slug(line.lstrip("#"))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_link_resolves(page):
    broken = []
    for number, line in enumerate(page.read_text().splitlines(), 1):
        for match in LINK.finditer(line):
            target = match.group(1) or match.group(2)
            if re.match(r"[a-z]+:", target):  # http(s):, mailto:: outside the tree
                continue
            path_part, _, anchor = target.partition("#")
            dest = (page.parent / path_part).resolve() if path_part else page
            if not dest.exists():
                broken.append(f"{page_id(page)}:{number}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page_id(page)}:{number}: {target} (no heading #{anchor} in {dest.name})")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_make_target_and_variable_named_exists(page):
    targets, variables = make_targets(), make_variables()
    unknown = []
    for number, text in code_text(page):
        for match in MAKE_CALL.finditer(text):
            for word in make_words(match.group(1)):
                name = word.split("=", 1)[0]
                if "=" in word and name not in variables:
                    unknown.append(f"{page_id(page)}:{number}: make variable {name} ({text.strip()})")
                elif "=" not in word and re.fullmatch(r"[a-z][a-z0-9-]*", word) and word not in targets:
                    unknown.append(f"{page_id(page)}:{number}: make target {word} ({text.strip()})")
    assert not unknown, "\n".join(unknown)


# A worked example that declares a setting (CONTRIBUTING.md: a block headed `# train/config/sections.py, class
# TrainerConfig`) may name the key it adds on its page: tests/test_worked_examples.py applies it and checks it.
EXAMPLE_DECLARATION = re.compile(r"```python\n# train/config/sections\.py, class (\w+)Config\n(.*?)```", re.DOTALL)


def keys_declared_by(text: str) -> set[tuple[str, str]]:
    """(section, key) of every setting a page's worked example declares."""
    return {(cls.lower(), key) for cls, body in EXAMPLE_DECLARATION.findall(text)
            for key in re.findall(r"^\s+(\w+):[^=]*= setting\(", body, flags=re.MULTILINE)}


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_config_key_named_exists(page):
    keys, examples = config_keys(), keys_declared_by(page.read_text())
    unknown = [f"{page_id(page)}:{number}: {section}.{key}"
               for number, text in code_text(page) for section, key in CONFIG_KEY.findall(text)
               if key not in keys[section] and key not in FILE_SUFFIXES and (section, key) not in examples]
    assert not unknown, "\n".join(unknown)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_subcommand_and_exit_status_named_exists(page):
    text = page.read_text()
    unknown = [f"python -m train {name}" for name in SUBCOMMAND.findall(text) if name not in SUBCOMMANDS]
    unknown += [name for name in EXIT_NAME.findall(text) if not hasattr(train.errors, name)]
    assert not unknown, f"{page_id(page)} names what does not exist: {sorted(set(unknown))}"


def placeholder(value: str) -> bool:
    """NAME, X, PATH, <jobid>, ...: a value the reader fills in, not a name to check."""
    return "<" in value or not re.search(r"[a-z]", value)


def named_values(text: str) -> list[str]:
    """What a span of code names that must exist: shipped configs, model names, benchmarks (as `kind name`)."""
    configs = [c.rstrip(".:,") for c in CONFIG_NAME.findall(text)]  # the end of a sentence or a label
    models = [m.rstrip(".:,") for m in MODEL_NAME.findall(text)]
    found = [f"config {c}" for c in configs
             if not placeholder(c) and not c.endswith((".yaml", ".yml")) and "/" not in c and c not in
             available_configs()]
    found += [f"model.name {m}" for m in models
              if not placeholder(m) and m not in BUILTIN_MODELS and not USER_MODEL_RE.fullmatch(m)]
    found += [f"benchmark {b}" for groups in BENCH_NAMES.findall(text) for b in "".join(groups).split()
              if b not in BENCHES]
    return found


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_config_model_and_benchmark_named_exists(page):
    unknown = [f"{page_id(page)}:{number}: {what}" for number, text in code_text(page) for what in named_values(text)]
    assert not unknown, "\n".join(unknown)


def test_the_exit_status_table_matches_train_errors():
    """docs/ lists each status as `| N | EXIT_NAME | ... |`: the numbers are train/errors.py's."""
    rows = [(int(n), name) for page in PAGES
            for n, name in re.findall(r"^\|\s*`?(\d+)`?\s*\|\s*`(EXIT_[A-Z_]+)`", page.read_text(), re.MULTILINE)]
    defined = {name: value for name, value in vars(train.errors).items() if name.startswith("EXIT_")}
    assert {name for _, name in rows} == set(defined), "every exit status has one row in the docs' table"
    assert all(defined[name] == n for n, name in rows), rows


def test_readme_is_the_five_minute_path():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move the depth to docs/"


# ---- the checks themselves see what they must (else they would pass vacuously) ----------------------
def test_the_checks_see_bad_names(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\nRun `make submt NODES=2 GPUZ=4` with `trainer.epochz=3`.\n\n"
                    "```sh\nmake image DRY_RUN=1\n```\nSee [x](missing.md) and [y](#title) and [z](#nope).\n")
    found = [(n, w) for n, t in code_text(page) for m in MAKE_CALL.finditer(t) for w in make_words(m.group(1))]
    assert found == [(3, "submt"), (3, "NODES=2"), (3, "GPUZ=4"), (6, "image"), (6, "DRY_RUN=1")]
    quoted = "make run ARGS='model.name=gat model.kwargs.heads=8' NPROC=2"
    assert [w for m in MAKE_CALL.finditer(quoted) for w in make_words(m.group(1))] == \
        ["run", "ARGS=model.name=gat model.kwargs.heads=8", "NPROC=2"]
    assert "submt" not in make_targets() and "GPUZ" not in make_variables() and "NODES" in make_variables()
    assert [m for _, t in code_text(page) for m in CONFIG_KEY.findall(t)] == [("trainer", "epochz")]
    assert CONFIG_KEY.findall("container/data.sh and model.pt") == [("model", "pt")]  # data.sh: after a slash
    assert "epochz" not in config_keys()["trainer"] and "epochs" in config_keys()["trainer"]
    assert anchors(page) == {"title"}
    assert slug("Preemption, failures and resume") == "preemption-failures-and-resume"
    assert slug("Your code in the container: `CODE_DIR`") == "your-code-in-the-container-code_dir"
    assert named_values("make submit CONFIG=cora-gat ARGS='model.name=gat' --config NAME") == []
    assert named_values("model.name=pkg.mod:Cls: builds; --config tiny.") == []
    assert named_values("make bench BENCH=\"plan accuracy\" && python -m train fit --config runs/my.yaml") == []
    assert named_values("CONFIG=cora-gatt; --config reddit; model.name=gcnn; model.name=pkg.mod:Cls; "
                        "make bench BENCH='memory acuracy'") == \
        ["config cora-gatt", "model.name gcnn", "benchmark acuracy"]
    assert slug("A first GPU: _make_ `gpu-check`") == "a-first-gpu-make-gpu-check"


def test_only_a_worked_examples_own_declaration_may_be_named_before_it_exists():
    text = ("```python\n# train/config/sections.py, class TrainerConfig\n"
            "    warmup_epochs: int = setting(0, \"epochs of warmup\", at_least=0)\n```\n"
            "```python\n# train/loop/fit.py\n    cooldown: int = setting(0, \"not a declaration of a setting\")\n```\n")
    assert keys_declared_by(text) == {("trainer", "warmup_epochs")}
