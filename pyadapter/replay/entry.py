"""Import a bundle's entry script as a module, so its custom layers, losses and registrations exist again.

The script is imported under its own name (``train.py`` -> module ``train``; never ``__main__``), so its
``if __name__ == "__main__":`` block does not run, and with its folder first on ``sys.path`` so its sibling
imports resolve as they did during training. No TensorFlow import here (the script may import it).
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import importlib.util
import keyword
import os
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class EntryScriptError(Exception):
    """The entry script cannot be imported; the message is one line for the user."""


@dataclass
class EntryScript:
    module: types.ModuleType
    path: Path
    warnings: list[str] = field(default_factory=list)


# Calls that mean "this statement trains": running it at import time would redo the training run.
_TRAINING_CALLS = {"fit", "fit_generator", "train_on_batch", "apply_gradients"}


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_entry_script(path: str | Path, recorded_sha256: str | None) -> tuple[Path, list[str]]:
    """The script's resolved path and warnings; raises EntryScriptError when it is missing or unreadable."""
    script = Path(path)
    if not script.is_file():
        raise EntryScriptError(
            f"the bundle's program {script} is missing, so its step can be neither rebuilt nor re-entered: restore "
            "it, or replay on the machine that captured the bundle (findings located at the scene still show)"
        )
    warnings: list[str] = []
    if recorded_sha256:
        try:
            current = file_sha256(script)
        except OSError as exc:
            raise EntryScriptError(f"cannot read the entry script {script}: {exc.strerror or exc}") from None
        if current != recorded_sha256:
            warnings.append(
                f"entry script {script} changed since capture; replaying with its current code "
                "(line numbers and behaviour may differ)"
            )
    return script, warnings


def training_at_import(source: str) -> int | None:
    """Line of a top-level statement that trains when the module is imported (outside a __main__ block)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None  # importing it will report the syntax error itself
    # A step decorated ``@guard_step(...)`` trains where it is called: a loop at module level calling it trains at
    # import (it was missed: the import reached the step, and the program ran again by re-entry, its set-up twice).
    # So does a step wrapped by name, ``train = guard_step(train, ...)``: wrapping it does not train, calling it does.
    training = _TRAINING_CALLS | {
        stmt.name
        for stmt in tree.body
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
        and any(_decorator_name(d) == "guard_step" for d in stmt.decorator_list)
    }
    for stmt in tree.body:
        if (
            isinstance(stmt, ast.Assign)
            and isinstance(stmt.value, ast.Call)
            and _call_name(stmt.value) == GUARD
        ):
            training |= {target.id for target in stmt.targets if isinstance(target, ast.Name)}
    for stmt in tree.body:
        if isinstance(
            stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
        ):
            continue
        if _is_main_guard(stmt):
            continue
        # The first in the file, not the shallowest: a critic step called in an inner loop comes before the
        # generator step called in the outer one (ast.walk goes breadth first).
        lines = [call.lineno for call in _calls_run(stmt) if _trains(call, training)]
        if lines:
            return min(lines)
    return None


GUARD = "guard_step"


def _trains(call: ast.Call, training: set[str]) -> bool:
    """A call that trains: fit, apply_gradients, a guarded step; ``guard_step(step)(batch)``, not
    ``guard_step(step)`` alone (that wraps)."""
    if isinstance(call.func, ast.Call) and _call_name(call.func) == GUARD:
        return True
    return _call_name(call) in training


def _calls_run(node: ast.AST) -> Iterator[ast.Call]:
    """The calls in `node` that run when it does: not those inside a definition (a def, lambda or class in an
    ``if`` runs nothing at import)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(child, ast.Call):
            yield child
        yield from _calls_run(child)


def _decorator_name(decorator: ast.expr) -> str | None:
    called = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(called, ast.Attribute):
        return called.attr
    return called.id if isinstance(called, ast.Name) else None


def _is_main_guard(stmt: ast.stmt) -> bool:
    if not isinstance(stmt, ast.If) or not isinstance(stmt.test, ast.Compare):
        return False
    names = [stmt.test.left, *stmt.test.comparators]
    has_name = any(isinstance(n, ast.Name) and n.id == "__name__" for n in names)
    has_main = any(isinstance(n, ast.Constant) and n.value == "__main__" for n in names)
    return has_name and has_main


def _call_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    if isinstance(call.func, ast.Name):
        return call.func.id
    return None


def package_root(script: Path, module: str | None) -> Path | None:
    """The folder a program run as ``python -m <module>`` was run from: ``root`` where ``root/a/b.py`` is `script`
    for module ``a.b``; None when `module` is not a dotted name of identifiers that leads to `script` (a bundle's
    word is checked against the file, never followed elsewhere)."""
    if not module:
        return None
    parts = module.split(".")
    if not all(part.isidentifier() and not keyword.iskeyword(part) for part in parts):
        return None
    script = script.resolve()
    if len(script.parents) < len(parts):
        return None
    root = script.parents[len(parts) - 1]
    return root if root.joinpath(*parts[:-1], parts[-1] + ".py") == script else None


def module_name_for(script: Path) -> str:
    """The script's stem when it is a free, valid module name; else a private name (never ``__main__``)."""
    stem = script.stem
    if stem.isidentifier() and not keyword.iskeyword(stem) and stem != "__main__":
        existing = sys.modules.get(stem)
        if existing is None:
            return stem
        loaded_from = getattr(existing, "__file__", None)
        if loaded_from and Path(loaded_from).resolve() == script.resolve():
            return stem
    return "nanlens_entry_" + hashlib.sha256(str(script).encode()).hexdigest()[:8]


def import_entry_script(
    path: str | Path,
    recorded_sha256: str | None = None,
    *,
    argv: list[str] | None = None,
    cwd: str | Path | None = None,
    module: str | None = None,
) -> EntryScript:
    """Import the script as a module (not ``__main__``) with its folder on sys.path; a program run as
    ``python -m <module>`` (`module`, checked to lead to the script) as that module of its package, with the
    package's folder on sys.path, so its relative imports work.

    `argv` (the training run's arguments after the script name) is what ``sys.argv[1:]`` shows while the module
    runs, so a module-level argument parser builds the same model as in training; `cwd` (the training run's
    working directory, when it still exists) is the working directory meanwhile, for files opened at import.
    Raises EntryScriptError (one line) when it is missing, trains at import time, or fails to import.
    """
    script, warnings = check_entry_script(path, recorded_sha256)
    script = script.resolve()
    try:
        source = script.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EntryScriptError(f"cannot read the entry script {script}: {exc}") from None
    line = training_at_import(source)
    if line is not None:
        raise EntryScriptError(
            f"{script}:{line} trains when the script is imported; put the training under "
            '`if __name__ == "__main__":` so replay can import the script\'s definitions without running it'
        )

    root = package_root(script, module)
    if root is not None and module is not None:
        return _import_package_module(script, module, root, warnings, argv, cwd)
    name = module_name_for(script)
    existing = sys.modules.get(name)
    if existing is not None and getattr(existing, "__file__", None) == str(script):
        return EntryScript(existing, script, warnings)

    folder = str(script.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, script)
    if spec is None or spec.loader is None:
        raise EntryScriptError(f"cannot import the entry script {script}")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded
    with _as_in_training(script, f"script {script}", argv, cwd, forget=lambda: sys.modules.pop(name, None)):
        spec.loader.exec_module(loaded)
    return EntryScript(loaded, script, warnings)


def _import_package_module(
    script: Path,
    module: str,
    root: Path,
    warnings: list[str],
    argv: list[str] | None,
    cwd: str | Path | None,
) -> EntryScript:
    """`import_entry_script` for a program run as ``python -m <module>``: imported by its dotted name from `root`."""
    existing = sys.modules.get(module)
    if existing is not None:
        if Path(getattr(existing, "__file__", "") or "").resolve() != script:
            raise EntryScriptError(f"a module {module} other than {script} is loaded already")
        return EntryScript(existing, script, warnings)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    with _as_in_training(script, f"module {module}", argv, cwd, forget=lambda: sys.modules.pop(module, None)):
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None or Path(spec.origin).resolve() != script:
            raise EntryScriptError(f"the module {module} is not the entry script {script} here")
        loaded = importlib.import_module(module)
    return EntryScript(loaded, script, warnings)


@contextlib.contextmanager
def _as_in_training(
    script: Path, label: str, argv: list[str] | None, cwd: str | Path | None, forget: Callable[[], Any]
) -> Iterator[None]:
    """While the entry runs at import: the training run's argv and working directory (a script may parse sys.argv
    or open files at import time); its failure as one EntryScriptError line, the half-made module forgotten."""
    saved_argv, saved_cwd = sys.argv, os.getcwd()
    sys.argv = [str(script), *(argv or [])]
    try:
        if cwd is not None and Path(cwd).is_dir():
            os.chdir(cwd)
        yield
    except EntryScriptError:
        raise
    except SystemExit as exc:
        forget()
        raise EntryScriptError(f"importing the entry {label} called sys.exit({exc.code})") from None
    except Exception as exc:
        forget()
        where = _innermost_user_line(exc, script)
        raise EntryScriptError(
            f"importing the entry {label} failed{where}: {type(exc).__name__}: {_first_line(exc)}"
        ) from exc
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def _innermost_user_line(exc: BaseException, script: Path) -> str:
    tb = exc.__traceback__
    found = ""
    folder = str(script.parent) + os.sep
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.startswith(folder):
            found = f" at {filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    return found


def user_modules(entry: types.ModuleType) -> list[types.ModuleType]:
    """The entry module and the modules it imported from the user's folder (not site-packages), for looking up
    custom objects by name when a saved model refers to them."""
    script_dir = Path(entry.__file__ or ".").resolve().parent
    found: list[types.ModuleType] = [entry]
    for value in list(vars(entry).values()):
        module = (
            value
            if isinstance(value, types.ModuleType)
            else sys.modules.get(getattr(value, "__module__", ""))
        )
        if module is None or module in found:
            continue
        file = getattr(module, "__file__", None)
        if not file:
            continue
        resolved = Path(file).resolve()
        if "site-packages" in resolved.parts or "dist-packages" in resolved.parts:
            continue
        if script_dir in resolved.parents:
            found.append(module)
    return found


def custom_objects(entry: types.ModuleType) -> dict[str, object]:
    """Classes and functions defined in the user's modules, by name: what a saved Keras model may refer to
    (an unregistered loss is saved by its bare name; a class defined in a script run as __main__ is saved as
    ``__main__.Name``, which no longer exists in a replay)."""
    objects: dict[str, object] = {}
    for module in reversed(user_modules(entry)):  # the entry module's names win
        for name, value in vars(module).items():
            if name.startswith("_") or not callable(value) or isinstance(value, types.ModuleType):
                continue
            if getattr(value, "__module__", None) == module.__name__:
                objects[name] = value
    return objects
