"""`model.name=package.module:ClassName`: the user's own torch.nn.Module, imported from the user's code.

The module is imported as Python imports anything: from `sys.path`, i.e. the working directory and
PYTHONPATH (in a container job, the folder CODE_DIR mounted and put on PYTHONPATH: jobs/lib/pyxis.sh).
Each way it can fail is one `UserError` naming the model and what is wrong, never a traceback.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import traceback
from typing import Any

from torch import nn

from train.errors import UserError
from train.models.builtin import BUILTINS, COMMON, builtin_arguments, parameter_names, refuse_common

# Where the import looked, and how each way of running puts a folder there (make: jobs/lib/code_dir.sh and
# login/launch.py; python: PYTHONPATH itself).
WHERE = ("Python looks for it in the working directory and on PYTHONPATH: give your code's folder as "
         "CODE_DIR=DIR to make (run, model-check, doctor, submit), or as PYTHONPATH=DIR to python -m train")
SHOWN_PATHS = 6


def search_path(path: list[str]) -> list[str]:
    """`path` (sys.path) as folders, each once: '' is the working directory, and the project's folder that
    both `python -m` and PYTHONPATH put there is listed once."""
    seen: dict[str, None] = {}
    for entry in path:
        seen.setdefault(os.path.realpath(entry or os.curdir), None)
    return list(seen)


def _import_error(name: str, module: str, exc: BaseException) -> UserError:
    if isinstance(exc, ModuleNotFoundError) and exc.name and module.startswith(exc.name):
        folders = search_path(sys.path)
        more = " ..." if len(folders) > SHOWN_PATHS else ""
        return UserError(f"model.name={name}: no module named {exc.name!r}; {WHERE}. sys.path: "
                         f"{', '.join(folders[:SHOWN_PATHS])}{more}")
    frames = traceback.extract_tb(exc.__traceback__)
    where = next((f"{f.filename}:{f.lineno}" for f in reversed(frames) if "importlib" not in f.filename), "")
    if isinstance(exc, SyntaxError):
        where = f"{exc.filename}:{exc.lineno}"
    return UserError(f"model.name={name}: importing {module} failed: {type(exc).__name__}: {exc}"
                     + (f" ({where})" if where else ""))


def import_model_class(name: str) -> type[nn.Module]:
    """The class `package.module:ClassName` names (a dotted path after the colon reaches nested classes)."""
    module_name, _, attribute = name.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # the user's module ran and raised: say which and where, not a traceback
        raise _import_error(name, module_name, exc) from None
    for part in attribute.split("."):
        if not hasattr(obj, part):
            classes = sorted(n for n, v in vars(obj).items() if inspect.isclass(v) and issubclass(v, nn.Module)
                             and not n.startswith("_"))
            raise UserError(f"model.name={name}: {getattr(obj, '__name__', module_name)} has no {part!r}; "
                            f"torch.nn.Module classes there: {', '.join(classes) or 'none'}.")
        obj = getattr(obj, part)
    if not inspect.isclass(obj) or not issubclass(obj, nn.Module):
        kind = "a class" if inspect.isclass(obj) else f"a {type(obj).__name__}"
        raise UserError(f"model.name={name} is {kind} but not a torch.nn.Module subclass; the workflow builds "
                        "the model from a torch.nn.Module class (README: \"Your own model\").")
    return obj


def inherited_builtin(cls: type[nn.Module]) -> str | None:
    """The built-in model whose constructor (and layers) `cls` inherits unchanged, if any."""
    for name, builtin in BUILTINS.items():
        base = builtin.model_class()
        if issubclass(cls, base) and cls.__init__ is base.__init__ and \
                getattr(cls, "init_conv", None) is getattr(base, "init_conv", None):
            return name
    return None


def user_arguments(name: str, cls: type[nn.Module], kwargs: dict[str, Any]) -> dict[str, Any]:
    """model.kwargs checked against the constructor's signature: the common arguments must be taken, an
    unknown keyword is refused unless the constructor takes **kwargs (then the constructor itself decides)."""
    builtin = inherited_builtin(cls)
    if builtin is not None:  # e.g. `class MySAGE(GraphSAGE)` that keeps PyG's constructor: PyG's arguments
        return builtin_arguments(builtin, kwargs, shown=f"{name} ({cls.__name__}, a {BUILTINS[builtin].class_name})")
    named, open_ended = parameter_names(cls.__init__)
    missing = [key for key in COMMON if key not in named and not open_ended]
    if missing:
        raise UserError(f"model.name={name}: {cls.__name__}.__init__ does not take {', '.join(missing)}; the workflow "
                        f"passes {', '.join(COMMON)} by name (as PyG's BasicGNN takes them), then model.kwargs.")
    refuse_common(kwargs)
    valid = sorted(named - set(COMMON) - {"self"})
    unknown = [key for key in kwargs if key not in named]
    if unknown and not open_ended:
        raise UserError(f"model.kwargs.{unknown[0]} is not an argument of model.name={name} ({cls.__name__}); "
                        f"valid model.kwargs: {', '.join(valid) or 'none'}.")
    return dict(kwargs)
