"""The server's settings: `initializationOptions` and `workspace/didChangeConfiguration`, checked once.

Settings arrive as ``{"captureDirs": [...], "dumpDirs": [...], "logLevel": "INFO", "locateAutomatic": false}`` (see
docs/protocol.md).
Relative dirs are relative to each workspace folder. Anything malformed falls back to the default for that key
and is reported as one problem line, so one bad key never costs the user the whole server.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_CAPTURE_DIRS = (".nanlens", "captures")
DEFAULT_DUMP_DIRS = (".nanlens/dumps",)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclass(frozen=True)
class Settings:
    capture_dirs: tuple[str, ...] = DEFAULT_CAPTURE_DIRS
    dump_dirs: tuple[str, ...] = DEFAULT_DUMP_DIRS
    log_level: str = "INFO"
    # Locate a bundle without findings as soon as it appears (replays it: runs its program). Off: it waits for the
    # user's Locate. Foreign bundles (pulled, another host) wait whatever this says (server/consent.py).
    locate_automatic: bool = False
    # One line per setting that was malformed and replaced by its default.
    problems: tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class WatchedRoot:
    """One folder to watch: a configured dir resolved against a workspace folder."""

    path: str
    setting: str  # "captureDirs" or "dumpDirs": where the user configured it, for messages
    configured: str  # the value as written in the settings
    explicit: bool  # absolute in the settings: the user pointed here on purpose, so a missing dir is an error


def parse_settings(options: Any) -> Settings:
    """Read settings from initializationOptions or from ``settings.nanlens`` of didChangeConfiguration."""
    if options is None:
        return Settings()
    if not isinstance(options, dict):
        return Settings(problems=(f"NaN Lens settings are not an object (got {type(options).__name__})",))
    # didChangeConfiguration sends {"settings": {"nanlens": {...}}}; accept that shape and the bare one.
    if isinstance(options.get("settings"), dict):
        options = options["settings"]
    if isinstance(options.get("nanlens"), dict):
        options = options["nanlens"]
    problems: list[str] = []
    capture_dirs = _dir_list(options, "captureDirs", DEFAULT_CAPTURE_DIRS, problems)
    dump_dirs = _dir_list(options, "dumpDirs", DEFAULT_DUMP_DIRS, problems)
    log_level = options.get("logLevel", "INFO")
    if not isinstance(log_level, str) or log_level.upper() not in LOG_LEVELS:
        problems.append(
            f"nanlens.logLevel must be one of {', '.join(LOG_LEVELS)} (got {log_level!r}); using INFO"
        )
        log_level = "INFO"
    locate_automatic = options.get("locateAutomatic", False)
    if not isinstance(locate_automatic, bool):
        problems.append(
            f"nanlens.locate.automatic must be true or false (got {locate_automatic!r}); using false"
        )
        locate_automatic = False
    return Settings(capture_dirs, dump_dirs, log_level.upper(), locate_automatic, tuple(problems))


def _dir_list(
    options: dict[str, Any], key: str, default: tuple[str, ...], problems: list[str]
) -> tuple[str, ...]:
    value = options.get(key)
    if value is None:
        return default
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        problems.append(f"nanlens.{key} must be a list of folder paths (got {value!r}); using the default")
        return default
    return tuple(v for v in value if v.strip())


def watched_roots(settings: Settings, workspace_folders: list[str]) -> list[WatchedRoot]:
    """Every folder to watch, deduplicated, in settings order; relative dirs once per workspace folder."""
    roots: list[WatchedRoot] = []
    seen: set[str] = set()
    for setting, dirs in (("captureDirs", settings.capture_dirs), ("dumpDirs", settings.dump_dirs)):
        for configured in dirs:
            expanded = os.path.expanduser(configured)
            explicit = os.path.isabs(expanded)
            bases = [""] if explicit else workspace_folders
            for base in bases:
                path = os.path.normpath(os.path.join(base, expanded))
                if path not in seen:
                    seen.add(path)
                    roots.append(WatchedRoot(path, setting, configured, explicit))
    return roots


def root_problem(root: WatchedRoot) -> str | None:
    """Why a watched root cannot be read, or None. Missing relative defaults are fine: they appear later."""
    p = Path(root.path)
    try:
        if not p.exists():
            return f"nanlens.{root.setting}: {root.configured!r} does not exist" if root.explicit else None
        if not p.is_dir():
            return f"nanlens.{root.setting}: {root.configured!r} is not a folder"
        if not os.access(p, os.R_OK | os.X_OK):
            return f"nanlens.{root.setting}: {root.configured!r} is not readable"
        with os.scandir(p) as entries:
            next(entries, None)
    except OSError as exc:
        return f"nanlens.{root.setting}: cannot read {root.configured!r}: {exc.strerror or exc}"
    return None
