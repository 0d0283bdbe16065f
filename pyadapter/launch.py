"""Where the user's program was started: its working folder when NaN Lens was first imported.

A bundle records the folder the program ran in, so a replay by re-entry runs it from there: its relative paths
(``np.load("data/train.npz")``, ``python scripts/train.py``'s own argv) mean what they meant. A program that moves
into an output folder before training (``os.chdir("runs/exp1")``) is in that folder when its step fails; the folder
it started in is the one its paths, and its re-run, need. ``import pyadapter`` comes with the program's imports, at
its top: this module reads the folder then. Pure standard library.
"""

from __future__ import annotations

import os


def _current() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the folder was deleted under the process
        return None


STARTED_IN: str | None = _current()


def started_in() -> str | None:
    """The working folder when NaN Lens was first imported in this process (None if it could not be read)."""
    return STARTED_IN
