"""What importing a program for the rebuild leaves in the process that its second run (the re-entry) trips on.

absl's flags are one registry per process: a script built on ``absl.app.run(main)`` defines its flags at import
(``flags.DEFINE_string("model_dir", ...)``). The rebuild imports the script as a module; when the rebuild then
fails (the step is a closure inside ``main``, ``model.keras`` does not load) the re-entry runs the same script as
``__main__`` in the same process, and absl refused: "DuplicateFlagError: The flag 'model_dir' is defined twice".
A failed import takes its flags back. A successful one parses them from the captured command line, as
``app.run`` would have, so a step that reads ``FLAGS.learning_rate`` gets the value training had.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def flags_of_the_import(argv: list[str] | None) -> Iterator[None]:
    """Around the rebuild's import of the program: on an exception, the absl flags it defined are removed (or
    absl forgotten, when the program was the one that imported it); on success, flags left unparsed are parsed
    from `argv` (the captured ``sys.argv``)."""
    had_absl = "absl.flags" in sys.modules
    before = _flag_names() if had_absl else set()
    try:
        yield
    except BaseException:
        if had_absl:
            registry = _registry()
            for name in _flag_names() - before:
                with contextlib.suppress(Exception):
                    delattr(registry, name)
        else:
            # absl came with the program: its next import (the re-entry's) starts a registry of its own.
            for module in [m for m in sys.modules if m == "absl" or m.startswith("absl.")]:
                del sys.modules[module]
        raise
    registry = _registry()
    if registry is not None and _flag_names() - before and not registry.is_parsed():
        with contextlib.suppress(Exception):  # a flag training's command line did not hold keeps its default
            registry(list(argv or [sys.argv[0]]), known_only=True)


def _registry():  # noqa: ANN202 - absl.flags.FlagValues, absl may be absent
    module = sys.modules.get("absl.flags")
    return getattr(module, "FLAGS", None) if module is not None else None


def _flag_names() -> set[str]:
    registry = _registry()
    try:
        return set(registry) if registry is not None else set()
    except Exception:  # noqa: BLE001 - a registry in an odd state: nothing to compare
        return set()
