"""The line of the user's code to change, found by reading (ast) the sources, never by running them:

- divergence: the optimizer's construction (``keras.optimizers.SGD(learning_rate=...)``), a learning-rate
  schedule, or ``compile(optimizer="adam")``, matching the optimizer class the bundle recorded; for a step that
  updates by hand (no optimizer), where its rate is given (`hand_update_site`);
- data: the line that reads or builds the data (``np.genfromtxt``, ``pd.read_csv``, ``make_csv_dataset``, ...);
- precision: the construction of the layer whose output left the dtype's range (``Dense(...)``,
  ``AttentionPooling()``), matched by the layer name in the op's name (Keras names layers after their class).
"""

from __future__ import annotations

import ast
import copy
import math
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from pyadapter.cause.sources import SourceUnit, called_name, calls, keyword, number
from pyadapter.dump.layer_site import auto_name_parts, layer_names, nth_built, run_order, times_run

OPTIMIZERS = (
    "SGD",
    "Adam",
    "AdamW",
    "RMSprop",
    "Adagrad",
    "Adadelta",
    "Adamax",
    "Nadam",
    "Ftrl",
    "Lion",
    "Lamb",
    "Adafactor",
    "LossScaleOptimizer",
)
# Keras's default learning rates, for ``compile(optimizer="sgd")`` (no number on the line).
DEFAULT_LEARNING_RATES = {
    "sgd": 0.01,
    "adam": 0.001,
    "adamw": 0.001,
    "rmsprop": 0.001,
    "adagrad": 0.001,
    "adadelta": 0.001,
    "adamax": 0.001,
    "nadam": 0.001,
    "ftrl": 0.001,
    "lion": 0.001,
}
SCHEDULES = (
    "ExponentialDecay",
    "PiecewiseConstantDecay",
    "CosineDecay",
    "CosineDecayRestarts",
    "InverseTimeDecay",
    "PolynomialDecay",
)
NUMPY_READERS = ("genfromtxt", "loadtxt", "read_csv", "read_parquet", "fromfile", "load")
TFDATA_READERS = ("make_csv_dataset", "CsvDataset", "TextLineDataset", "TFRecordDataset")


@dataclass
class Site:
    """A call in the user's code: where it is, and what the cause's sentence and fixes need to know about it."""

    unit: SourceUnit
    node: ast.expr  # a call; a yield or returned value for batches made in Python (`python_feed.FeedSite`)
    name: str
    learning_rate: float | None = None
    literal: bool = False  # the learning rate is a number written on this line
    momentum: float | None = None
    # what the line is, for the cause's change entry: "optimizer", "compile", "schedule" (None: told by the name)
    target: str | None = None
    # The DataFrame column the line assigns, when the site is a column fit's array holds (`fit_array_site`).
    column: str | None = None

    @property
    def file(self) -> str:
        return self.unit.file

    @property
    def line(self) -> int:
        return self.node.lineno

    @property
    def cell(self) -> int | None:
        return self.unit.cell


def _learning_rate_arg(node: ast.Call, name: str) -> ast.expr | None:
    if name in SCHEDULES:
        return (
            keyword(node, "initial_learning_rate")
            or keyword(node, "boundaries")
            or (node.args[0] if node.args else None)
        )
    return keyword(node, "learning_rate") or keyword(node, "lr") or (node.args[0] if node.args else None)


def _constant_of(unit: SourceUnit, name: str, depth: int = 0) -> float | None:
    """``LR = 0.05`` somewhere in the unit: the value of a name assigned once, a number or arithmetic on such names
    (``FT_LR = BASE_LR * 10``, a fine-tuning phase's rate)."""
    values = [_constant_expression(unit, n.value, depth + 1) for n in _assignments_of(unit, name)]
    return values[0] if len(values) == 1 else None


def _assignments_of(unit: SourceUnit, name: str) -> list[ast.Assign]:
    """Every ``name = ...`` of the unit (the name itself a target)."""
    return [
        n
        for n in ast.walk(unit.tree)
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)
    ]


def _constant_of_an_earlier_cell(units: list[SourceUnit], unit: SourceUnit, name: str) -> float | None:
    """A notebook's ``LEARNING_RATE = 1e-2`` in the last cell run before `unit` that assigns it: what `name` held
    when `unit` ran. A training cell run again after the rate's cell was edited and re-run builds its optimizer with
    the new value; the first run of that cell, which trained at the old one, was named as the line to change."""
    if unit.cell is None or unit not in units:
        return None
    for earlier in reversed(units[: units.index(unit)]):
        if _assignments_of(earlier, name):
            return _constant_of(earlier, name)
    return None


def _constant_expression(unit: SourceUnit, node: ast.expr, depth: int = 0) -> float | None:
    """The value of arithmetic on numbers and names assigned a number once (``base_learning_rate * 1000``)."""
    if depth > 8:
        return None
    if isinstance(node, ast.Name):
        return _constant_of(unit, node.id, depth)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div, ast.Add, ast.Sub, ast.Pow)):
        left = _constant_expression(unit, node.left, depth + 1)
        right = _constant_expression(unit, node.right, depth + 1)
        if left is None or right is None:
            return None
        try:
            value = {
                ast.Mult: lambda: left * right,
                ast.Div: lambda: left / right,
                ast.Add: lambda: left + right,
                ast.Sub: lambda: left - right,
                ast.Pow: lambda: left**right if abs(right) <= 64 else math.inf,
            }[type(node.op)]()
        except (ZeroDivisionError, OverflowError):
            return None
        return value if math.isfinite(value) else None
    return number(node)


RATE_ATTRIBUTES = ("learning_rate", "lr")


def _is_rate_target(node: ast.expr) -> bool:
    """``<anything>.learning_rate`` / ``<anything>.lr``: where a built optimizer's rate is set. Not ``self.lr``
    itself: a trainer's or a schedule's constructor storing its argument (``self.learning_rate =
    learning_rate``) sets no optimizer's rate, and it was named "set as it trains"."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr in RATE_ATTRIBUTES
        and not (isinstance(node.value, ast.Name) and node.value.id == "self")
    )


def rate_assignment(node: ast.AST) -> tuple[ast.expr, ast.expr] | None:
    """(where, value) when `node` sets a built optimizer's rate: ``model.optimizer.learning_rate = 0.5``,
    ``opt.learning_rate.assign(0.5)``, ``keras.backend.set_value(opt.lr, 0.5)``."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and _is_rate_target(node.targets[0]):
        return node.targets[0], node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
        if node.func.attr == "assign" and (
            _is_rate_target(node.func.value)
            # lr = self.model.optimizer.learning_rate; lr.assign(lr * 1.1): the variable by a name of its own
            or isinstance(node.func.value, ast.Name)
            and node.func.value.id in RATE_ATTRIBUTES
        ):
            return node.func.value, node.args[0]
        if node.func.attr == "set_value" and len(node.args) == 2 and _is_rate_target(node.args[0]):
            return node.args[0], node.args[1]
    return None


def rate_assignments(unit: SourceUnit) -> list[Site]:
    """Rates set after the optimizer was built (`rate_assignment`: a resumed run, a notebook cell that changes the
    rate between two fits), with the number each sets."""
    found: list[Site] = []
    for node in ast.walk(unit.tree):
        assignment = rate_assignment(node)
        if assignment is None:
            continue
        target, value = assignment
        rate = number(value)
        if rate is None and isinstance(value, ast.Name):
            rate = _constant_of(unit, value.id)
        if rate is not None:
            found.append(
                Site(unit, value, ast.unparse(target), rate, number(value) is not None, target="optimizer")
            )
    return found


RATE_KEYS = ("learning_rate", "lr", "base_lr", "init_lr", "initial_learning_rate")


def dict_rate_entries(unit: SourceUnit) -> list[Site]:
    """The numbers written under a rate key in the unit's dict literals, named by where they sit:
    ``CONFIGS["main"]["lr"]`` for an entry of a dict assigned to a name, else ``"lr": 0.1``."""
    found: list[Site] = []

    def visit(node: ast.expr, path: str | None) -> None:
        if not isinstance(node, ast.Dict):
            return
        for key, value in zip(node.keys, node.values, strict=True):
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                continue
            inner = f'{path}["{key.value}"]' if path is not None else None
            rate = number(value) if key.value in RATE_KEYS else None
            if rate is not None and rate > 0:
                found.append(Site(unit, value, inner or f"{key.value!r}: {ast.unparse(value)}", rate, True))
            visit(value, inner)

    for node in ast.walk(unit.tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Dict):
            target = node.targets[0]
            visit(node.value, ast.unparse(target) if isinstance(target, (ast.Name, ast.Attribute)) else None)
    return found


def rate_flag_defaults(unit: SourceUnit) -> list[Site]:
    """The default rates of the unit's command-line flags (`_flag_default_of`: absl's ``flags.DEFINE_float(
    "learning_rate", 0.5, ...)``, argparse's ``add_argument("--lr", type=float, default=0.5)``), named as the flag
    is typed."""
    found: list[Site] = []
    for node in calls(unit):
        for key in RATE_KEYS:
            rate = number(_flag_default_of(node, key))
            if rate is not None and rate > 0:
                found.append(Site(unit, node, f"the --{key} flag's default", rate, True, target="config"))
    return found


def computed_rate_setter(units: list[SourceUnit]) -> Site | None:
    """Where the program sets its rate while it trains, from a computation: a ``LearningRateScheduler(...)``, or
    an assignment of a built optimizer's rate (`rate_assignment`) whose value is no number (``lr * self.factor``)."""
    for unit in units:
        for call in calls(unit):
            if called_name(call) == "LearningRateScheduler":
                # Named with its function when it is one (``LearningRateScheduler(lr_at)``, a trainer's
                # ``LearningRateScheduler(self.lr_at)``): that is what to change.
                given = call.args[0] if call.args else keyword(call, "schedule")
                shown = (
                    f"LearningRateScheduler({ast.unparse(given)})"
                    if isinstance(given, (ast.Name, ast.Attribute))
                    else "LearningRateScheduler"
                )
                compounding = _compounding_return(units, given.id) if isinstance(given, ast.Name) else None
                if compounding is not None:
                    # ``def warmup(epoch, lr): return lr * 2.0 if epoch < 3 else lr``: it multiplies the rate it is
                    # given, so each fit (whose epochs restart at 0) raises it again; that line is the change, not
                    # the first of the fit cells (pasted again below) that pass it.
                    return Site(compounding[0], compounding[1], shown, target="schedule")
                return Site(unit, call, shown, target="schedule")
    computed = [
        (unit, assignment)
        for unit in units
        for node in ast.walk(unit.tree)
        if (assignment := rate_assignment(node)) is not None and number(assignment[1]) is None
    ]
    # A computation (``lr * self.factor``, an LR finder's step) sets the rate as it trains; a bare name
    # (``= self.start_lr`` in on_train_begin) only sets where it starts, and came first in the source.
    computed.sort(key=lambda pair: isinstance(pair[1][1], (ast.Name, ast.Attribute, ast.Constant)))
    for unit, (target, value) in computed[:1]:
        return Site(unit, value, f"{ast.unparse(target)} set as it trains", target="optimizer")
    return None


def _compounding_return(units: list[SourceUnit], name: str) -> tuple[SourceUnit, ast.expr] | None:
    """The returned value of the schedule function `name` (``def warmup(epoch, lr)``) that multiplies (or divides)
    the rate it is given, its second parameter: (its unit, the value). None for none, or a schedule of the epoch
    alone."""
    for unit in units:
        for node in ast.walk(unit.tree):
            if not isinstance(node, ast.FunctionDef) or node.name != name or len(node.args.args) < 2:
                continue
            rate = node.args.args[1].arg
            for returned in ast.walk(node):
                if not isinstance(returned, ast.Return) or returned.value is None:
                    continue
                if any(
                    isinstance(part, ast.BinOp)
                    and isinstance(part.op, (ast.Mult, ast.Div))
                    and any(
                        isinstance(side, ast.Name) and side.id == rate for side in (part.left, part.right)
                    )
                    for part in ast.walk(returned.value)
                ):
                    return unit, returned.value
    return None


def rate_constant_site(site: Site, rate: float) -> Site | None:
    """``SGD(learning_rate=LR, ...)`` with ``LR = 1.5`` assigned once in the same unit, and that the rate: the
    assignment's number (its line is where the user changes it; the call's line only names it). None otherwise."""
    node = site.node
    if not isinstance(node, ast.Call):
        return None
    argument = _learning_rate_arg(node, site.name)
    if not isinstance(argument, ast.Name) or not same_rate(_constant_of(site.unit, argument.id), rate):
        return None
    (assigned,) = _assignments_of(site.unit, argument.id)
    if not isinstance(assigned.value, ast.Constant):
        return None  # ``FT_LR = BASE_LR * 10``: a computation, not one number to change
    return replace(site, node=assigned.value, literal=True)


def same_rate(written: float | None, used: float) -> bool:
    # The recorded rate is the float32 the step read: 0.02 reads back as 0.0199999995...
    return written is not None and abs(written - used) <= 1e-6 * max(abs(used), 1e-30)


def optimizer_site(units: list[SourceUnit], recorded: list[str], used: float | None = None) -> Site | None:
    """Where the optimizer the bundle recorded (class names, outer first) is built: its construction call; the
    learning-rate schedule it is given instead of a number; or ``compile(optimizer="name")``.

    With ``used``, the constant rate the failing step ran at: the first of those lines, or of the lines that set
    the rate later (`rate_assignments`), that writes that rate. When no line writes it (the rate comes from a
    computation), the construction's line with ``used`` as its rate: the number written there is not what ran."""
    found = _optimizer_sites(units, recorded)
    if used is None or not (used > 0):
        return found[0] if found else None
    candidates = found + [site for unit in units for site in rate_assignments(unit)]
    matching = [site for site in candidates if same_rate(site.learning_rate, used)]
    if matching:
        return matching[0]
    # A rate read from a config dict of the program's own (``CONFIGS = {"main": {"lr": 1e-1, ...}}`` and
    # ``SGD(learning_rate=cfg["lr"])`` or ``.assign(self.cfg["lr"])``): the one entry that writes the rate that ran.
    entries = [
        site for unit in units for site in dict_rate_entries(unit) if same_rate(site.learning_rate, used)
    ]
    if len(entries) == 1:
        return entries[0]
    # A script's flag (absl, argparse) whose default is the rate that ran: a research repo's trainer reads it.
    defaults = [
        site for unit in units for site in rate_flag_defaults(unit) if same_rate(site.learning_rate, used)
    ]
    if len(defaults) == 1:
        return defaults[0]
    setter = computed_rate_setter(units)
    if setter is not None:
        # No line writes the rate that ran, and the program sets it as it trains (an LR range test's callback,
        # a LearningRateScheduler): that line made it, not the construction's number.
        return Site(setter.unit, setter.node, setter.name, used, False, target=setter.target)
    written = [site for site in candidates if site.learning_rate is not None and site.learning_rate > 0]
    if any(site.target != "compile" and site not in found for site in written):
        # No line writes the rate that ran, and a line sets it after the construction: one of them was edited since
        # the capture (``model.optimizer.learning_rate.assign(0.15)`` made 0.14, or SGD(0.1) made 0.001). The line
        # whose number is nearest the rate that ran is that one; the sentence names the rate that ran.
        # On a tie (the assignment edited back to the constructor's own number) the later setting is the one that
        # ran: the constructor's number was in force before it.
        nearest = min(
            written,
            key=lambda site: (abs(math.log(site.learning_rate / used)), site in found),  # type: ignore[operator]
        )
        return Site(nearest.unit, nearest.node, nearest.name, used, False, nearest.momentum, nearest.target)
    if not found:
        return None
    first = found[0]
    if first.learning_rate is None or first.name in SCHEDULES:
        return first
    return Site(first.unit, first.node, first.name, used, False, first.momentum, first.target)


def other_optimizer_site(units: list[SourceUnit], recorded: list[str], used: float | None) -> Site | None:
    """The one optimizer construction of the program that is not the recorded one (another class, or the same
    class at another rate than `used`): a GAN's discriminator's beside the combined model's; None for none or
    several."""
    others = [
        site
        for site in _optimizer_sites(units, [])
        if site.target != "compile"
        and not (site.name in recorded and (used is None or same_rate(site.learning_rate, used)))
    ]
    return others[0] if len(others) == 1 else None


def _optimizer_sites(units: list[SourceUnit], recorded: list[str]) -> list[Site]:
    wanted = [name for name in recorded if name in OPTIMIZERS and name != "LossScaleOptimizer"]
    if not wanted:  # a LossScaleOptimizer wrapping an unnamed one, or nothing recorded: any optimizer will do
        wanted = [name for name in OPTIMIZERS if name != "LossScaleOptimizer"]
    lowered = {name.lower() for name in wanted}
    found: list[Site] = []
    for unit in units:
        for node in calls(unit):
            name = called_name(node)
            if _is_optimizer_lookup(node):
                # keras.optimizers.get({"class_name": "SGD", "config": {...}}) or get(config["optimizer"]): a
                # config-driven trainer's optimizer; the rate is the dict literal's, else the config's.
                rate = _config_dict_rate(node.args[0] if node.args else None)
                found.append(
                    Site(unit, node, "keras.optimizers.get", rate, rate is not None, target="optimizer")
                )
                continue
            if name in wanted:
                arg = _learning_rate_arg(node, name)
                site = Site(
                    unit, node, name, number(arg), number(arg) is not None, number(keyword(node, "momentum"))
                )
                if site.learning_rate is None and isinstance(arg, (ast.Name, ast.BinOp)):
                    # SGD(LR), or SGD(base_learning_rate * 1000), a fine-tuning phase's rate (tensorflow.org's
                    # transfer learning tutorial writes base_learning_rate / 10): the phases' lines are told apart.
                    site.learning_rate = _constant_expression(unit, arg)
                if site.learning_rate is None and isinstance(arg, ast.Name):
                    site.learning_rate = _constant_of_an_earlier_cell(units, unit, arg.id)
                if site.learning_rate is None and isinstance(arg, (ast.Name, ast.Call)):
                    schedule = _schedule_site(units)
                    if schedule is not None:  # the rate comes from a schedule: that is the line to change
                        found.append(schedule)
                        continue
                found.append(site)
            elif name == "compile":
                arg = keyword(node, "optimizer")
                if (
                    isinstance(arg, ast.Constant)
                    and isinstance(arg.value, str)
                    and arg.value.lower() in lowered
                ):
                    found.append(
                        Site(
                            unit,
                            node,
                            arg.value,
                            DEFAULT_LEARNING_RATES.get(arg.value.lower()),
                            target="compile",
                        )
                    )
    return found


_CONFIG_NAMES = (
    "cfg",
    "config",
    "conf",
    "configs",
    "hparams",
    "hp",
    "params",
    "opt_cfg",
    "train_cfg",
    "settings",
)


def reads_config(site: Site) -> bool:
    """Whether the site's rate comes from a loaded config: ``keras.optimizers.get(cfg[...])``, ``SGD(cfg["lr"])``,
    ``SGD(config.lr)``; not ``SGD(args.lr)`` or ``SGD(FLAGS.lr)`` (the command line, named as such elsewhere)."""
    if not isinstance(site.node, ast.Call):
        return False
    if _is_optimizer_lookup(site.node):
        return True
    arg = _learning_rate_arg(site.node, site.name)
    if isinstance(arg, ast.Subscript):
        return True
    return (
        isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id in _CONFIG_NAMES
    )


def attribute_default_site(
    units: list[SourceUnit], site: Site, rate: float, edited_too: bool = True
) -> Site | None:
    """Where a config object's class writes the rate the optimizer reads as an attribute (``SGD(cfg.lr)`` and
    ``class TrainConfig: lr: float = 1e-4``, a dataclass of settings): the class attribute of that name whose
    default is `rate`, or the only class attribute of that name (a default edited since the capture); None
    otherwise. The number to change is there, not on the optimizer's line, which writes none."""
    if not isinstance(site.node, ast.Call):
        return None
    arg = _learning_rate_arg(site.node, site.name)
    if not isinstance(arg, ast.Attribute):
        return None
    found: list[Site] = []
    for unit in units:
        for node in ast.walk(unit.tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for statement in node.body:
                target: ast.expr
                if isinstance(statement, ast.AnnAssign) and statement.value is not None:
                    target, value = statement.target, statement.value
                elif isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                    target, value = statement.targets[0], statement.value
                else:
                    continue
                default = number(value)
                if (
                    isinstance(target, ast.Name)
                    and target.id == arg.attr
                    and default is not None
                    and default > 0
                ):
                    found.append(Site(unit, value, f"{node.name}.{arg.attr}", default, True, target="config"))
    matching = [s for s in found if same_rate(s.learning_rate, rate)]
    if len(matching) == 1:
        return matching[0]
    return found[0] if edited_too and len(found) == 1 and not matching else None


def _is_optimizer_lookup(node: ast.Call) -> bool:
    """``keras.optimizers.get(...)``, ``tf.keras.optimizers.get(...)``, ``optimizers.get(...)``."""
    func = node.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr in ("get", "deserialize")
        and (
            (isinstance(func.value, ast.Attribute) and func.value.attr == "optimizers")
            or (isinstance(func.value, ast.Name) and func.value.id == "optimizers")
        )
    )


def _config_dict_rate(node: ast.expr | None) -> float | None:
    """The learning rate in a literal ``{"class_name": ..., "config": {"learning_rate": 0.25}}``."""
    if not isinstance(node, ast.Dict):
        return None
    for key, value in zip(node.keys, node.values, strict=True):
        if isinstance(key, ast.Constant) and key.value == "config" and isinstance(value, ast.Dict):
            for inner_key, inner in zip(value.keys, value.values, strict=True):
                if isinstance(inner_key, ast.Constant) and inner_key.value in ("learning_rate", "lr"):
                    return number(inner)
    return None


# A config file's line that sets a rate: "learning_rate": 0.25 (JSON), lr: 3e-4 (YAML), learning_rate = 0.1 (TOML,
# INI), --lr=0.5 in a shell line does not count (it is argv, named elsewhere).
_NUMBER_TEXT = r"(?P<value>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_CONFIG_RATE = re.compile(
    r"""(?<![\w-])["']?(?:(?:initial_)?learning[_-]?rate|lr|base_lr|init_lr)["']?\s*[:=]\s*["']?"""
    + _NUMBER_TEXT
)
CONFIG_SUFFIXES = (".json", ".yaml", ".yml", ".toml", ".cfg", ".ini", ".conf")
_CONFIG_LIMIT = 1 << 20  # bytes of one config file read
_CONFIG_FILES = 40  # config files looked at in a folder


# A rate set on a line of code without a constructor: optimizer.learning_rate.assign(0.15), opt.lr = 0.1,
# K.set_value(model.optimizer.learning_rate, 0.1).
_ASSIGNED_RATE = re.compile(
    r"(?<!\w)(?:learning_rate|lr)\s*(?:\.assign\(\s*|=(?!=)\s*|:\s*[\w.\[\] |]+=(?!=)\s*)" + _NUMBER_TEXT
)  # the last: a class attribute's default (``learning_rate: float = 1e-4`` in a dataclass of settings)
_SET_VALUE_RATE = re.compile(r"set_value\(\s*[\w.]*(?<!\w)(?:learning_rate|lr)\s*,\s*" + _NUMBER_TEXT)


def rate_written_in_text(line: str) -> float | None:
    """A learning rate a line sets without an optimizer's constructor: a config file's key (JSON, YAML, TOML,
    INI) or an assignment in code (``.learning_rate.assign(0.15)``); None when it sets none."""
    for pattern in (_CONFIG_RATE, _ASSIGNED_RATE, _SET_VALUE_RATE):
        match = pattern.search(line)
        if match is not None:
            value = float(match.group("value"))
            if math.isfinite(value) and value > 0:
                return value
    return None


def config_rate_lines(folders: list[str], rate: float | None) -> list[tuple[str, int]]:
    """(file, 1-based line) of each line of a config file in `folders` (not below them) that sets a learning rate
    equal to `rate` (any rate: None): where a config-driven trainer's rate is written. Read as text; nothing is
    parsed or run."""
    return rate_lines_in(config_files(folders, [], None), rate)


def rate_lines_in(paths: list[str], rate: float | None) -> list[tuple[str, int]]:
    """`config_rate_lines` of the config files `paths`."""
    found: list[tuple[str, int]] = []
    for path, index, line in _config_lines(paths):
        match = _CONFIG_RATE.search(line)
        if match is not None and (rate is None or same_rate(float(match.group("value")), rate)):
            found.append((path, index))
    return found


def _config_lines(paths: list[str]) -> Iterator[tuple[str, int, str]]:
    """(file, 1-based line number, text) of each line of the config files `paths`, read as text (up to
    `_CONFIG_LIMIT` bytes of each); a file that cannot be read is skipped."""
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read(_CONFIG_LIMIT)
        except OSError:
            continue
        for index, line in enumerate(text.splitlines(), 1):
            yield path, index, line


def config_files(folders: list[str], argv: list[str], cwd: str | None) -> list[str]:
    """The config files a run names on its command line (``--config configs/exp1.json``, relative to its working
    folder), then those in `folders` (not below them): the files a config-driven trainer reads its settings from."""
    found: list[str] = []
    for arg in argv[1:]:
        value = arg.split("=", 1)[-1]
        if value.lower().endswith(CONFIG_SUFFIXES):
            path = os.path.realpath(os.path.join(cwd or os.getcwd(), value))
            if os.path.isfile(path):
                found.append(path)
    for folder in folders:
        try:
            names = sorted(
                e.name for e in os.scandir(folder) if e.is_file() and e.name.lower().endswith(CONFIG_SUFFIXES)
            )
        except OSError:
            continue
        found += [os.path.realpath(os.path.join(folder, name)) for name in names[:_CONFIG_FILES]]
    return list(dict.fromkeys(found))


def zero_epsilon_lines(paths: list[str]) -> list[tuple[str, int]]:
    """(file, 1-based line) of each line of the config files `paths` that sets an epsilon to 0 (``"epsilon":
    0``). Read as text; nothing is parsed or run."""
    return zero_setting_lines(paths, "epsilon", "eps")


def zero_setting_lines(paths: list[str], *keys: str) -> list[tuple[str, int]]:
    """(file, 1-based line) of each line of the config files `paths` that sets one of `keys` to 0 (``"nu": 0.0``,
    ``nu: 0``). Read as text; nothing is parsed or run."""
    names = "|".join(re.escape(key) for key in keys)
    pattern = re.compile(rf"""(?<![\w-])["']?(?:{names})["']?\s*[:=]\s*["']?0(?:\.0*)?(?![\d.eE])""")
    return [(path, index) for path, index, line in _config_lines(paths) if pattern.search(line)]


def _is_zero(node: ast.expr | None) -> bool:
    """A literal 0 (``0``, ``0.0``, ``float(0)``)."""
    if isinstance(node, ast.Call) and called_name(node) in ("float", "int") and len(node.args) == 1:
        node = node.args[0]
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
        and node.value == 0
    )


def _flag_default_of(node: ast.Call, key: str) -> ast.expr | None:
    """The default a command-line flag named `key` is defined with (absl's ``DEFINE_float("key", 0.5, ...)``,
    argparse's ``add_argument("--key", default=0.5)``); None for another call."""
    name = called_name(node)
    if name is not None and name.startswith("DEFINE_") and len(node.args) >= 2:
        flag = node.args[0]
        return node.args[1] if isinstance(flag, ast.Constant) and flag.value == key else None
    if name == "add_argument":
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if any(n.lstrip("-").replace("-", "_") == key for n in names if n.startswith("--")):
            return keyword(node, "default")
    return None


def zero_setting_site(units: list[SourceUnit], key: str) -> Site | None:
    """Where the user's code sets `key` to 0: a config dict's entry (``{"nu": 0.0}``), a keyword (``temperature=0``)
    or an assignment (``NU = 0``, ``self.nu = 0``); None when no code does."""
    for unit in units:
        for node in ast.walk(unit.tree):
            if isinstance(node, ast.Dict):
                for name, value in zip(node.keys, node.values, strict=True):
                    if isinstance(name, ast.Constant) and name.value == key and _is_zero(value):
                        return Site(unit, value, key, target="config")
            elif isinstance(node, ast.Call):
                for argument in node.keywords:
                    if argument.arg == key and _is_zero(argument.value):
                        return Site(unit, node, key, target="config")
                if _is_zero(_flag_default_of(node, key)):
                    # absl's flags.DEFINE_float("temperature", 0.0, ...), argparse's add_argument("--temperature",
                    # default=0.0): a research script's value, handed on through partial(...) or a trainer.
                    return Site(unit, node, f"--{key}", target="config")
            elif (
                isinstance(node, (ast.Assign, ast.AnnAssign))
                and node.value is not None
                and _is_zero(node.value)
            ):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                named = [
                    t.id if isinstance(t, ast.Name) else t.attr
                    for t in targets
                    if isinstance(t, ast.Name | ast.Attribute)
                ]
                if key in named:
                    return Site(unit, node.value, key, target="config")
    return None


def zero_epsilon_site(units: list[SourceUnit]) -> Site | None:
    """A call of the user's code given ``epsilon=0`` (``Adam(1e-3, epsilon=0)``), or None."""
    for unit in units:
        for node in calls(unit):
            for argument in node.keywords:
                value = argument.value
                if (
                    argument.arg in ("epsilon", "eps")
                    and isinstance(value, ast.Constant)
                    and isinstance(value.value, (int, float))
                    and value.value == 0
                ):
                    return Site(unit, node, called_name(node) or "epsilon")
    return None


# A time step's usual names: ``dt``, ``DT``, ``self.dt``, ``delta_t``, ``step_size``. Not ``h``: an RNN's hidden
# state (``h = h + gate * h``) would read as an integrator.
_TIME_STEP = re.compile(r"^(?:dt|DT|tau|delta_t|step_size|time_step|dt_\w+|DT_\w+)$")


def _is_time_step(node: ast.expr) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return bool(_TIME_STEP.match(name))


def _euler_update(target: ast.expr, value: ast.expr) -> bool:
    """``u + dt * f(u)`` assigned to ``u`` (either order, the step's product anywhere in the other operand)."""
    if (
        not isinstance(target, ast.Name)
        or not isinstance(value, ast.BinOp)
        or not isinstance(value.op, ast.Add)
    ):
        return False
    for same, other in ((value.left, value.right), (value.right, value.left)):
        if isinstance(same, ast.Name) and same.id == target.id:
            products = [n for n in ast.walk(other) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult)]
            if any(_is_time_step(side) for p in products for side in (p.left, p.right)):
                return True
    return False


def explicit_euler_site(units: list[SourceUnit], places: list[tuple[str, int | None, int]]) -> Site | None:
    """The explicit Euler update (``u = u + DT * f(u)``, ``x, y = x + dt * dx, y + dt * dy``) in a loop that holds
    one of `places` (file, cell, line: the origin's frames), or None. Such a loop, unrolled in one forward pass,
    multiplies its values every iteration when the step is too large for the system."""
    for unit in units:
        lines = [line for file, cell, line in places if _same_unit(unit, file, cell)]
        if not lines:
            continue
        for loop in ast.walk(unit.tree):
            if not isinstance(loop, (ast.For, ast.While)) or loop.end_lineno is None:
                continue
            if not any(loop.lineno <= line <= loop.end_lineno for line in lines):
                continue
            for statement in ast.walk(loop):
                pairs: list[tuple[ast.expr, ast.expr]] = []
                if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                    target, value = statement.targets[0], statement.value
                    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                        pairs = list(zip(target.elts, value.elts, strict=False))
                    else:
                        pairs = [(target, value)]
                elif isinstance(statement, ast.AugAssign) and isinstance(statement.op, ast.Add):
                    # ``u += dt * f(u)``: the same update.
                    pairs = [(statement.target, ast.BinOp(statement.target, ast.Add(), statement.value))]
                if any(_euler_update(t, v) for t, v in pairs) and isinstance(
                    statement, (ast.Assign, ast.AugAssign)
                ):
                    return Site(unit, statement.value, "euler")
    return None


def _same_unit(unit: SourceUnit, file: str, cell: int | None) -> bool:
    return unit.cell == cell and os.path.abspath(unit.file) == os.path.abspath(file)


def zero_epsilon_entry(units: list[SourceUnit]) -> Site | None:
    """The last setting of an epsilon to 0 under another name: a keyword (``dict(lr=1e-3, adam_eps=0.0)``,
    ``make_optimizer(opt_eps=0)``) or a dict literal's entry (``{"adam_eps": 0.0}``) whose name ends in ``eps`` or
    ``epsilon``. The last, for a notebook whose config cell was pasted again with the value changed. None when none."""
    found: list[Site] = []

    def zero(value: ast.expr | None) -> bool:
        return isinstance(value, ast.Constant) and isinstance(value.value, (int, float)) and value.value == 0

    def epsilon_name(name: object) -> bool:
        return isinstance(name, str) and name.lower().endswith(("eps", "epsilon"))

    for unit in units:
        for node in ast.walk(unit.tree):
            if isinstance(node, ast.Call) and any(
                epsilon_name(k.arg) and zero(k.value) for k in node.keywords
            ):
                found.append(Site(unit, node, "epsilon"))
            elif isinstance(node, ast.Dict) and any(
                isinstance(k, ast.Constant) and epsilon_name(k.value) and zero(v)
                for k, v in zip(node.keys, node.values, strict=True)
            ):
                found.append(Site(unit, node, "epsilon"))
    return found[-1] if found else None


def epsilon_given_sites(units: list[SourceUnit], class_name: str) -> list[tuple[Site, str]]:
    """The calls of ``class_name`` (``LayerNormalization``) given an ``epsilon=`` that is not a positive number as
    written: ``epsilon=0.0``, or a name, a parameter or a config entry (``epsilon=cfg["bn_epsilon"]``) whose value
    the code sets elsewhere; with the epsilon's text."""
    found = []
    for unit in units:
        for node in calls(unit):
            if called_name(node) != class_name:
                continue
            value = keyword(node, "epsilon")
            positive = (
                isinstance(value, ast.Constant) and isinstance(value.value, (int, float)) and value.value > 0
            )
            if value is not None and not positive:
                found.append((Site(unit, node, class_name), ast.get_source_segment(unit.text, value) or "0"))
    return found


def _fills_with_zero(node: ast.Call) -> bool:
    """``df.fillna(0)`` / ``fillna(value=0.0)``, ``df.replace(np.nan, 0)``, ``np.nan_to_num(x)`` (whose NaN is 0.0
    unless ``nan=`` says otherwise)."""
    name = called_name(node)
    if name == "fillna":
        value = node.args[0] if node.args else keyword(node, "value")
        return _is_zero(value)
    if name == "replace" and len(node.args) == 2:
        missing = node.args[0]
        said_nan = isinstance(missing, ast.Attribute) and missing.attr in ("nan", "NaN", "NAN")
        return said_nan and _is_zero(node.args[1])
    if name == "nan_to_num":
        nan = keyword(node, "nan")
        return nan is None or _is_zero(nan)
    return False


def zero_fill_site(units: list[SourceUnit]) -> Site | None:
    """The line of the user's code that fills missing values with 0 (`_fills_with_zero`), when exactly one line
    does; None for none, or for several (which of them fed an op is not known)."""
    found = [(unit, node) for unit in units for node in calls(unit) if _fills_with_zero(node)]
    lines = {(unit.file, unit.cell, node.lineno) for unit, node in found}
    if len(lines) != 1:
        return None
    unit, node = found[0]
    return Site(unit, node, called_name(node) or "fillna", target="array")


HAND_UPDATES = ("assign_sub", "assign_add")


def _rate_operand(value: ast.expr) -> ast.expr | None:
    """In an update written by hand (``learning_rate * dw``), the factor that is the rate: a number, or a name
    (one that says rate or lr first); None when the update is not such a product."""
    if not isinstance(value, ast.BinOp) or not isinstance(value.op, ast.Mult):
        return None
    sides = [value.left, value.right]
    numbers = [side for side in sides if number(side) is not None]
    if numbers:
        return numbers[0]
    names = [side for side in sides if isinstance(side, ast.Name)]
    names.sort(key=lambda n: not re.search(r"(^|_)(lr|rate|learning)", n.id.lower()))
    return names[0] if names else None


def _enclosing_parameter(unit: SourceUnit, node: ast.AST, name: str) -> tuple[str, int] | None:
    """(function name, position) when `name` is a parameter of the function (in `unit`) whose body holds `node`."""
    for function in ast.walk(unit.tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if not any(inner is node for inner in ast.walk(function)):
            continue
        params = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
        if name in params:
            return function.name, params.index(name)
    return None


def _passed_rate(units: list[SourceUnit], function: str, position: int, name: str) -> Site | None:
    """The first call of `function` that passes a number as its parameter `name` (by position or keyword)."""
    for unit in units:
        for node in calls(unit):
            if called_name(node) != function:
                continue
            arg = keyword(node, name) or (node.args[position] if position < len(node.args) else None)
            if number(arg) is not None:
                return Site(unit, node, f"passed to {function} as {name}", number(arg), True)
    return None


def hand_update_site(units: list[SourceUnit]) -> Site | None:
    """Where a step that updates its variables by hand (``w.assign_sub(learning_rate * dw)``, no optimizer) takes
    its learning rate: the call of the step that passes it as a number, a module constant's value, or else the
    update's own line."""
    for unit in units:
        for node in calls(unit):
            if (
                called_name(node) not in HAND_UPDATES
                or not isinstance(node.func, ast.Attribute)
                or not node.args
            ):
                continue
            operand = _rate_operand(node.args[0])
            if operand is None:
                continue
            if number(operand) is not None:
                return Site(unit, node, "the update by hand", number(operand), True)
            assert isinstance(operand, ast.Name)
            parameter = _enclosing_parameter(unit, node, operand.id)
            if parameter is not None:
                passed = _passed_rate(units, parameter[0], parameter[1], operand.id)
                if passed is not None:
                    return passed
            return Site(unit, node, f"the update by hand, {operand.id}", _constant_of(unit, operand.id))
    return None


# Keywords of a schedule (or optimizer) that hold a rate: not step counts, boundaries or powers.
_RATE_KEYWORDS = (
    "learning_rate",
    "lr",
    "initial_learning_rate",
    "warmup_target",
    "values",
    "end_learning_rate",
    "maximal_learning_rate",
)
CLIP_KEYWORDS = ("clipnorm", "global_clipnorm", "clipvalue")


def number_written_in(site: Site, value: float) -> ast.expr | None:
    """The rate literal of the call at `site` that gave `value` (a rate the failing step used): the one equal to it
    (``values=[0.01, 5.0, 0.001]`` of a ``PiecewiseConstantDecay``: the piece in effect), else the one nearest it
    within a factor of 2 (``CosineDecay(1e-4, 1000, warmup_target=50.0)`` at 49.8 after its warmup). Only rate
    keywords and the first argument count; None when none is near."""
    call = site.node
    if not isinstance(call, ast.Call) or not value > 0:
        return None
    places = [k.value for k in call.keywords if k.arg in _RATE_KEYWORDS] + call.args[:1]
    written = [
        (node, number(node))
        for place in places
        for node in ast.walk(place)
        if isinstance(node, (ast.Constant, ast.UnaryOp))
    ]
    positive = [(node, rate) for node, rate in written if rate is not None and rate > 0]
    exact = [node for node, rate in positive if abs(rate - value) <= 1e-6 * value]
    if exact:
        return exact[0] if len(exact) == 1 else None
    near = [
        (abs(math.log(rate / value)), node) for node, rate in positive if abs(math.log(rate / value)) <= LN2
    ]
    return min(near, key=lambda pair: pair[0])[1] if near else None


LN2 = math.log(2.0)


@dataclass
class ScheduleOutlier:
    """A schedule's value far above the others of its list (``[0.05, 5e3, 5e-4]``: 5e-3 with its minus lost)."""

    site: Site  # the outlying number, in its list
    written: str  # as the code writes it: "5e3"
    values: str  # the whole list as written: "[0.05, 5e3, 5e-4]"
    times: float  # how many times the largest other value
    meant: (
        str | None
    )  # the same digits with the exponent's sign turned, when that lies among the others: "5e-3"


OUTLIER_FACTOR = 100.0  # a piece this many times the largest of the others is no schedule's design
_EXPONENT = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)[eE]\+?(\d+)$")


def schedule_outlier(units: list[SourceUnit], value: float) -> ScheduleOutlier | None:
    """The number `value` (the rate a schedule gave at the failing step) in a list of numbers of the user's code
    where it is `OUTLIER_FACTOR` or more times the largest other number (a ``PiecewiseConstantDecay``'s values
    with a typo); None when no such list holds it once."""
    if not value > 0:
        return None
    found: list[ScheduleOutlier] = []
    for unit in units:
        for node in ast.walk(unit.tree):
            if not isinstance(node, (ast.List, ast.Tuple)) or len(node.elts) < 2:
                continue
            numbers = [number(e) for e in node.elts]
            if any(n is None or not n > 0 for n in numbers):
                continue
            hits = [i for i, n in enumerate(numbers) if same_rate(n, value)]
            if len(hits) != 1:
                continue
            others = [n for i, n in enumerate(numbers) if i != hits[0] and n is not None]
            times = value / max(others)
            if times < OUTLIER_FACTOR:
                continue
            element = node.elts[hits[0]]
            written = ast.get_source_segment(unit.text, element) or ast.unparse(element)
            match = _EXPONENT.match(written.strip())
            meant = None
            if match is not None:
                turned = f"{match.group(1)}e-{match.group(2)}"
                if min(others) / 10 <= float(turned) <= max(others) * 10:
                    meant = turned
            found.append(
                ScheduleOutlier(
                    Site(unit, element, "the schedule's values", target="schedule"),
                    written.strip(),
                    ast.get_source_segment(unit.text, node) or ast.unparse(node),
                    times,
                    meant,
                )
            )
    return found[0] if len(found) == 1 else None


def swept_value(site: Site, value: float) -> ast.expr | None:
    """For ``SGD(lr)`` inside ``for lr in [1e-3, 1e-2, 5.0]:`` (a sweep), the literal `value` in the loop's list:
    the rate the failing fit ran at is written there, not on the optimizer's line. None otherwise."""
    if not isinstance(site.node, ast.Call):
        return None
    arg = _learning_rate_arg(site.node, site.name)
    if not isinstance(arg, ast.Name):
        return None
    for loop in ast.walk(site.unit.tree):
        if (
            isinstance(loop, ast.For)
            and isinstance(loop.target, ast.Name)
            and loop.target.id == arg.id
            and isinstance(loop.iter, (ast.List, ast.Tuple))
        ):
            found = [e for e in loop.iter.elts if same_rate(number(e), value)]
            if len(found) == 1:
                return found[0]
    return None


def optimizer_clips(units: list[SourceUnit], recorded: list[str]) -> str | None:
    """'global_clipnorm=1.0' when the recorded optimizer's construction clips its gradients already, else None."""
    for unit in units:
        for node in calls(unit):
            if called_name(node) in recorded and called_name(node) in OPTIMIZERS:
                for clip in CLIP_KEYWORDS:
                    value = keyword(node, clip)
                    if value is not None:
                        return f"{clip}={ast.unparse(value)}"
    return None


def mapped_division_site(units: list[SourceUnit]) -> Site | None:
    """The first division (``a / b``) in a function of the user's that a tf.data pipeline maps (``ds.map(
    add_features)``): a 0 divisor there makes inf without a warning, in every epoch's records. None when no mapped
    function divides."""
    mapped = {
        argument.id
        for unit in units
        for node in calls(unit)
        if called_name(node) == "map"
        for argument in node.args[:1]
        if isinstance(argument, ast.Name)
    }
    for unit in units:
        for function in ast.walk(unit.tree):
            if not isinstance(function, ast.FunctionDef) or function.name not in mapped:
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                    return Site(unit, node, function.name)
    return None


def adapt_site(units: list[SourceUnit], index: int | None = None) -> Site | None:
    """The ``<layer>.adapt(...)`` call of the user's code (a preprocessing layer computing its state from data) of
    the `index`-th ``Normalization(...)`` built (``normalization_2`` is the third) when that construction is
    assigned to a name whose ``.adapt(`` is there, else the only one, else the last; None without any. A program
    with two Normalization layers had the other's adapt named."""
    found = [(unit, node) for unit in units for node in calls(unit) if called_name(node) == "adapt"]
    if not found:
        return None
    if index is not None and len(found) > 1:
        built = [
            (unit, node) for unit in units for node in calls(unit) if called_name(node) == "Normalization"
        ]
        if index < len(built):
            unit, construction = built[index]
            names = {
                target.id
                for statement in ast.walk(unit.tree)
                if isinstance(statement, ast.Assign) and statement.value is construction
                for target in statement.targets
                if isinstance(target, ast.Name)
            }
            for adapt_unit, node in found:
                func = node.func
                if (
                    isinstance(func, ast.Attribute)
                    and isinstance(func.value, ast.Name)
                    and func.value.id in names
                ):
                    return Site(adapt_unit, node, "adapt")
    unit, node = found[-1]
    return Site(unit, node, "adapt")


def assign_site(units: list[SourceUnit], name: str) -> Site | None:
    """The last ``<name>.assign(...)`` call of the user's code (``temperature``, ``self.temperature``: what sets a
    variable the step reads), or None."""
    found = [
        (unit, node)
        for unit in units
        for node in calls(unit)
        if called_name(node) == "assign"
        and isinstance(node.func, ast.Attribute)
        and ast.unparse(node.func.value) == name
    ]
    if not found:
        return None
    unit, node = found[-1]
    return Site(unit, node, "assign")


def attribute_or_name_site(units: list[SourceUnit], written: str) -> Site | None:
    """Where the user's code assigns the value `written` names (``a_hat``, ``self.a_hat``: by its last part, to a
    name or an attribute), when one statement does; None otherwise (a parameter, several assignments)."""
    last = written.rsplit(".", 1)[-1]
    found = [
        (unit, node.value)
        for unit in units
        for node in ast.walk(unit.tree)
        if isinstance(node, ast.Assign)
        and any(
            (isinstance(t, ast.Name) and t.id == last) or (isinstance(t, ast.Attribute) and t.attr == last)
            for t in node.targets
        )
    ]
    if len(found) != 1:
        return None
    unit, value = found[0]
    return Site(unit, value, last, target="array")


_PEAK_ARGUMENT = re.compile(r"lr|rate|base|peak|max|target|initial", re.IGNORECASE)


def schedule_peak_site(units: list[SourceUnit], name: str, rate: float) -> tuple[Site, str, float] | None:
    """(the call that builds the schedule class `name`, its keyword that sets the peak, the peak's value): the
    largest number given to a keyword named like a rate (``learning_rate_base=BASE_LR``) that is at least half of
    `rate`, the rate the schedule returned when the run failed; None when no call gives one."""
    best: tuple[Site, str, float] | None = None
    for unit in units:
        for node in calls(unit):
            if called_name(node) != name:
                continue
            for argument in node.keywords:
                if argument.arg is None or "step" in argument.arg or not _PEAK_ARGUMENT.search(argument.arg):
                    continue
                value = _constant_expression(unit, argument.value)
                if value is not None and value >= rate / 2 and (best is None or value > best[2]):
                    best = (Site(unit, node, name, target="schedule"), argument.arg, value)
    return best


def loss_argument_site(units: list[SourceUnit], names: tuple[str, ...]) -> Site | None:
    """The first call of the user's code given ``loss=`` one of `names` (``loss="poisson"``, ``loss=Poisson()``,
    ``loss=keras.losses.poisson``), by the string or the called or named object's last part; None otherwise."""
    wanted = {name.lower() for name in names}
    for unit in units:
        for node in calls(unit):
            for argument in node.keywords:
                if argument.arg != "loss":
                    continue
                value = argument.value
                if isinstance(value, ast.Call):
                    value = value.func
                text = (
                    value.value
                    if isinstance(value, ast.Constant) and isinstance(value.value, str)
                    else ast.unparse(value).rsplit(".", 1)[-1]
                )
                if text.lower() in wanted:
                    return Site(unit, node, "loss", target="compile")
    return None


def construction_site(units: list[SourceUnit], name: str) -> Site | None:
    """The first call of `name` (a class, by its last dotted part) in the user's code."""
    for unit in units:
        for node in calls(unit):
            if called_name(node) == name:
                return Site(unit, node, name)
    return None


def constructed_names(units: list[SourceUnit], names: frozenset[str]) -> set[str]:
    """Which of `names` (classes, by their last dotted part) the user's code calls and puts to use: a layer assigned
    to a name the code only adapts (``normalizer.adapt(x)``, with ``# normalizer,`` commented out of the model) is
    not counted (`unused_layers`)."""
    unused = {site.name for site in unused_layers(units, names)}
    return {
        name
        for unit in units
        for node in calls(unit)
        if (name := called_name(node) or "") in names and not _assigned_to(unit, node, unused)
    }


def _assigned_to(unit: SourceUnit, call: ast.Call, names: set[str]) -> bool:
    return any(
        isinstance(n, ast.Assign)
        and n.value is call
        and any(isinstance(t, ast.Name) and t.id in names for t in n.targets)
        for n in ast.walk(unit.tree)
    )


# What a layer's name may be read for without the layer being used in a model.
_SET_UP_ONLY = frozenset({"adapt", "mean", "variance", "get_weights", "count", "built"})


@dataclass
class UnusedLayer:
    """A layer the code makes and adapts but never puts in a model: where it is made, and where a line that used it
    is commented out (``# normalizer,`` in a Sequential list), if one is."""

    site: Site  # the construction; its name is the variable's
    commented: int | None  # the line of the commented-out use, in the same file (or cell)
    commented_unit: SourceUnit | None = None

    @property
    def name(self) -> str:
        return self.site.name


def unused_layers(units: list[SourceUnit], classes: frozenset[str]) -> list[Site]:
    """Sites (named by the variable) of ``name = Class(...)`` constructions of `classes` whose name the code reads
    only to set the layer up (``name.adapt(x)``): the Basic regression tutorial's normalizer with ``# normalizer,``
    commented out of the model."""
    return [u.site for u in unused_layer_uses(units, classes)]


def _set_up_only(parent: ast.AST | None) -> bool:
    return isinstance(parent, ast.Attribute) and parent.attr in _SET_UP_ONLY


def unused_layer_uses(units: list[SourceUnit], classes: frozenset[str]) -> list[UnusedLayer]:
    """`unused_layers` with the line a commented-out use of each is on."""
    made: list[tuple[SourceUnit, ast.Call, str]] = [
        (unit, node.value, node.targets[0].id)
        for unit in units
        for node in ast.walk(unit.tree)
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Call)
        and (called_name(node.value) or "") in classes
    ]
    found: list[UnusedLayer] = []
    parents: dict[ast.AST, ast.AST] = {}
    if made:
        parents = {
            child: parent
            for u in units
            for parent in ast.walk(u.tree)
            for child in ast.iter_child_nodes(parent)
        }
    for unit, call, name in made:
        reads = [
            node
            for u in units
            for node in ast.walk(u.tree)
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
        ]
        if any(not _set_up_only(parents.get(read)) for read in reads):
            continue
        commented = None
        holder = None
        for u in units:
            if u.file != unit.file:
                continue
            for lineno, text in enumerate(u.text.splitlines(), 1):
                if re.match(rf"\s*#\s*{re.escape(name)}\s*(?:,|\)|\(|$)", text):
                    commented, holder = lineno, u
        found.append(UnusedLayer(Site(unit, call, name), commented, holder))
    return found


def first_layer_normalizer(units: list[SourceUnit], classes: frozenset[str]) -> Site | None:
    """The normalizing layer (of `classes`) a model applies first to its input: the first layer of a
    ``Sequential([...])`` list (after its ``Input``), or a layer called on a name assigned ``keras.Input(...)``
    (``BatchNormalization()(inputs)``). None when the model's first layer is another one."""
    for unit in units:
        inputs = {
            target.id
            for node in ast.walk(unit.tree)
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and called_name(node.value) in ("Input", "InputLayer")
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for node in calls(unit):
            name = called_name(node) or ""
            if name == "Sequential" and node.args and isinstance(node.args[0], ast.List):
                layers = [
                    e
                    for e in node.args[0].elts
                    if not (isinstance(e, ast.Call) and called_name(e) in ("Input", "InputLayer"))
                ]
                first = layers[0] if layers else None
                if isinstance(first, ast.Call) and called_name(first) in classes:
                    return Site(unit, first, called_name(first) or "")
            if (
                isinstance(node.func, ast.Call)
                and called_name(node.func) in classes
                and node.args
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id in inputs
            ):
                return Site(unit, node.func, called_name(node.func) or "")
    return None


def model_input_site(units: list[SourceUnit]) -> Site | None:
    """Where the model takes its inputs: the first ``Input(...)`` / ``InputLayer(...)``, else the first
    ``Sequential(...)``; None when the code builds neither (a subclass called on the batch)."""
    return _first_site(units, ("Input", "InputLayer", "Sequential"))


@dataclass
class SubclassInput:
    """A feature input of a ``keras.Model`` subclass, which its ``call`` hands on to its own layers: where to scale
    it so that every layer reading it gets it scaled, and which of the model's layers read it."""

    site: Site  # where the array is made (target "array"), else where ``call`` hands the inputs on
    made: bool  # the site is where the array (or the batches holding it) is made
    # The model's layers that read the input (``self.wide_num``, ``self.deep``), as written.
    readers: list[str]
    model: str  # the subclass's name


_INPUT_LAYERS = ("Input", "InputLayer", "Sequential")
_DICT_LEAF = re.compile(r"^\w+\['([^'\]]+)'\]$")


def _model_subclasses(units: list[SourceUnit]) -> list[tuple[SourceUnit, ast.ClassDef]]:
    """(unit, class) of the user's ``keras.Model`` subclasses that define ``call`` (a subclass of another of them
    counts), in source order."""
    classes = [
        (unit, node) for unit in units for node in ast.walk(unit.tree) if isinstance(node, ast.ClassDef)
    ]
    models = {"Model"}
    grew = True
    while grew:
        grew = False
        for _, node in classes:
            bases = {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", None) for b in node.bases}
            if node.name not in models and models & bases:
                models.add(node.name)
                grew = True
    return sorted(
        ((unit, node) for unit, node in classes if node.name in models and _method(node, "call") is not None),
        key=lambda pair: (pair[0].cell or 0, pair[1].lineno),
    )


def _method(node: ast.ClassDef, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    return next(
        (f for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == name),
        None,
    )


def _inside(site: Site, unit: SourceUnit, node: ast.stmt) -> bool:
    """Whether `site` is a line of `node` (a class, a function) of `unit`."""
    return site.unit is unit and node.lineno <= site.line <= (node.end_lineno or node.lineno)


def _self_layer(call: ast.Call, methods: set[str]) -> str | None:
    """``wide_num`` of ``self.wide_num(...)``, a layer the model holds (not one of its own methods), else None."""
    func = call.func
    if (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id == "self"
        and func.attr not in methods
    ):
        return func.attr
    return None


def _layers_reading(cls: ast.ClassDef, key: str | None) -> list[str]:
    """The layers of a model subclass (``self.<name>``) that its methods call on the input: on ``<inputs>[key]``
    for a dict input's `key` (in any method), else on ``call``'s first argument (in ``call``, and in a method of
    its own that ``call`` hands it to). An input read into a name (``x = tf.concat([..., f["numeric"]])``) counts
    for the layers called on that name in the same method (``self.deep(x)``)."""
    functions = [f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    methods = {f.name for f in functions}
    reads: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, ast.expr]] = []
    if key is not None:
        reads = [
            (function, node)
            for function in functions
            for node in ast.walk(function)
            if isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant)
            and node.slice.value == key
            and isinstance(node.ctx, ast.Load)
        ]
    else:
        call = _method(cls, "call")
        arguments = call.args.args[1:] if call is not None else []
        if call is None or not arguments:
            return []
        handed = [(call, arguments[0].arg)]
        for node in ast.walk(call):
            # ``return self.wide_part(x) + self.deep_part(x)``: the methods' own parameters at that position.
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "self"
                and node.func.attr in methods
            ):
                method = _method(cls, node.func.attr)
                for position, given in enumerate(node.args):
                    if isinstance(given, ast.Name) and given.id == arguments[0].arg and method is not None:
                        parameters = method.args.args[1:]
                        if position < len(parameters):
                            handed.append((method, parameters[position].arg))
        reads = [
            (function, node)
            for function, name in handed
            for node in ast.walk(function)
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
        ]
    readers: list[str] = []
    for function, read in reads:
        parents = {child: parent for parent in ast.walk(function) for child in ast.iter_child_nodes(parent)}
        reached: ast.AST = read
        while reached in parents:
            parent = parents[reached]
            if (
                isinstance(parent, ast.Call)
                and reached is not parent.func
                and (layer := _self_layer(parent, methods))
            ):
                readers.append(layer)
                break
            if isinstance(parent, ast.Assign) and reached is parent.value:
                names = {n for t in parent.targets for n in _assigned_names(t)}
                readers.extend(
                    layer
                    for later in ast.walk(function)
                    if isinstance(later, ast.Call)
                    and later.lineno > parent.lineno
                    and (layer := _self_layer(later, methods)) is not None
                    and any(isinstance(a, ast.Name) and a.id in names for a in later.args)
                )
                break
            if isinstance(parent, ast.stmt):
                break
            reached = parent
    return [f"self.{name}" for name in dict.fromkeys(readers)]


def keyed_array_site(units: list[SourceUnit], key: str) -> Site | None:
    """Where a dict of inputs gets its array under `key`: ``feats["numeric"] = frame[NUMERIC].values`` or
    ``{"numeric": num, ...}`` (the last such line written); None when no line of the code does."""
    found = [
        Site(unit, value, written, target="array")
        for unit in units
        for value, written in _values_under_key(unit, key)
    ]
    return max(found, key=lambda s: (s.cell or 0, s.line)) if found else None


def _values_under_key(unit: SourceUnit, key: str) -> Iterator[tuple[ast.expr, str]]:
    """(value, how its place is written) of each entry the unit gives a dict under `key`: ``{"numeric": v}``
    (written ``'numeric'``) and ``feats["numeric"] = v`` (written ``feats['numeric']``)."""
    for node in ast.walk(unit.tree):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                if isinstance(k, ast.Constant) and k.value == key:
                    yield v, repr(key)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if (
                isinstance(target, ast.Subscript)
                and isinstance(target.slice, ast.Constant)
                and target.slice.value == key
            ):
                yield node.value, ast.unparse(target)


@dataclass
class FunctionalInput:
    """The ``Input(...)`` of a functional model that takes a feature input of the batch, and the layer calls that
    read it (more than one: the raw values reach several parts, a wide and a deep one)."""

    site: Site
    readers: list[str]  # each reading call's layer as written (``deep``, ``layers.Dense(1)``), with its line


# Calls that take an Input to build the model, not to compute on it.
_MODEL_BUILDERS = frozenset({"Model", "Functional"})


def functional_input(units: list[SourceUnit], leaf: str) -> FunctionalInput | None:
    """The ``name = Input(...)`` that takes `leaf` of the batch (``x['numeric']``: the Input named "numeric", or
    assigned to ``numeric``, or the only one; ``x``: the model's first Input, `model_input_site`) with the layers
    called on it in its scope; None when no such Input is assigned to a name."""
    made = [
        (unit, node.value, node.targets[0].id)
        for unit in units
        for node in ast.walk(unit.tree)
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Call)
        and called_name(node.value) in ("Input", "InputLayer")
    ]
    keyed = _DICT_LEAF.match(leaf)
    if keyed is not None:
        key = keyed.group(1)
        named = [
            item
            for item in made
            if isinstance(given := keyword(item[1], "name"), ast.Constant) and given.value == key
        ]
        made = named or [item for item in made if item[2] == key] or (made if len(made) == 1 else [])
    else:
        first = model_input_site(units)
        made = [item for item in made if first is not None and item[1] is first.node]
    if not made:
        return None
    unit, call, name = made[0]
    functions = _functions(unit)
    scope = _innermost_function(functions, call.lineno)
    # Names the code assigns a call (a layer or model object: ``deep = keras.Sequential(...)``), which a
    # functional model calls on its inputs; not ``len`` or ``np.isfinite``.
    objects = {
        target.id
        for node in ast.walk(unit.tree)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    readers: list[str] = []
    for node in calls(unit):
        if node.lineno <= call.lineno or _innermost_function(functions, node.lineno) is not scope:
            continue
        if not isinstance(node.func, ast.Call) and not (
            isinstance(node.func, ast.Name) and node.func.id in objects
        ):
            continue
        if keyword(node, "inputs") is not None or (called_name(node) or "").endswith("Model"):
            continue  # keras.Model(inputs, outputs) builds the model of the input, it computes nothing on it
        # ``deep(inp)``, ``layers.Dense(1)(inp)``, ``layers.Concatenate()([inp, embedded])``.
        passed = [*node.args, *(k.value for k in node.keywords)]
        arguments = [e for a in passed for e in (a.elts if isinstance(a, (ast.List, ast.Tuple)) else [a])]
        if any(isinstance(a, ast.Name) and a.id == name for a in arguments):
            layer = ast.unparse(node.func)
            if len(layer) > 40 and isinstance(node.func, ast.Call):
                layer = f"{called_name(node.func)}(...)"
            readers.append(f"{layer} (line {node.lineno})")
    return FunctionalInput(Site(unit, call, name, target="input"), readers)


def subclass_input(units: list[SourceUnit], leaf: str, feed: Site | None = None) -> SubclassInput | None:
    """For a feature input (`leaf` of the batch: ``x``, ``x['numeric']``) of a ``keras.Model`` subclass whose
    ``call`` hands its inputs to its own layers: where to scale it, and the layers that read it. "Add a
    Normalization as the model's first layer" at the first ``Sequential(...)`` named a sub-network the subclass
    builds (the deep tower of a Wide & Deep model, s43b p5), while the raw values also reached its wide part: a
    subclass has no first layer. The site is where the array is made (a dict input's entry, the array fit is given,
    else `feed`, the custom loop's batches), else the first line of ``call`` that reads the inputs. None when the
    code builds an ``Input``/``Sequential`` outside such a subclass (the model then takes its inputs there), or
    has no such subclass."""
    subclasses = _model_subclasses(units)
    if not subclasses:
        return None
    first = _first_site(units, _INPUT_LAYERS)
    if first is not None:
        subclasses = [(unit, cls) for unit, cls in subclasses if _inside(first, unit, cls)]
        if not subclasses:
            return None
    keyed = _DICT_LEAF.match(leaf)
    key = keyed.group(1) if keyed is not None else None
    reading = [(unit, cls, _layers_reading(cls, key)) for unit, cls in subclasses]
    unit, cls, readers = next((r for r in reading if r[2]), reading[0])
    if key is not None:
        site = keyed_array_site(units, key) or feed
    else:
        site = fit_array_site(units, leaf) or feed
    if site is not None:
        return SubclassInput(site, True, readers, cls.name)
    call = _method(cls, "call")
    arguments = call.args.args[1:] if call is not None else []
    if call is None or not arguments:
        return None
    handing = next(
        (
            statement
            for statement in call.body
            if isinstance(value := getattr(statement, "value", None), ast.expr)
            and any(isinstance(n, ast.Name) and n.id == arguments[0].arg for n in ast.walk(value))
        ),
        None,
    )
    value = getattr(handing, "value", None)
    if not isinstance(value, ast.expr):
        return None
    return SubclassInput(Site(unit, value, f"{cls.name}.call", target="input"), False, readers, cls.name)


# Calls that give a model weights from outside the run.
_WEIGHT_LOADS = ("load_weights", "load_model", "set_weights", "restore", "BackupAndRestore")


def weights_load_site(units: list[SourceUnit]) -> Site | None:
    """The last call that gives a model weights from outside the run (``model.load_weights(path)``,
    ``keras.models.load_model``, ``set_weights``, a checkpoint's ``restore``, a ``BackupAndRestore`` callback), in
    the first file (or notebook) that makes one: the entry script before the modules it imports."""
    found = [(unit, node) for unit in units for node in calls(unit) if called_name(node) in _WEIGHT_LOADS]
    if not found:
        return None
    first_file = found[0][0].file
    unit, node = [pair for pair in found if pair[0].file == first_file][-1]
    return Site(unit, node, called_name(node) or "load")


def model_site(units: list[SourceUnit]) -> Site | None:
    """Where the model is built: the first ``Sequential(...)`` or ``Model(...)``, else its ``Input(...)``."""
    return _first_site(units, ("Sequential", "Model", "Input"))


def _first_site(units: list[SourceUnit], names: tuple[str, ...]) -> Site | None:
    for name in names:
        site = construction_site(units, name)
        if site is not None:
            return site
    return None


def _is_square(node: ast.AST) -> bool:
    """``x ** 2``, ``tf.square(x)``, ``x * x`` (of one name), ``tf.pow(x, 2)``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        return number(node.right) == 2
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return ast.dump(node.left) == ast.dump(node.right)
    if isinstance(node, ast.Call):
        name = called_name(node)
        return name == "square" or name == "pow" and len(node.args) == 2 and number(node.args[1]) == 2
    return False


def _holds_square(side: ast.AST, squared: dict[str, int], before: int) -> bool:
    """A square in `side`, or a name assigned one (`squared`: name -> its line) on a line before `before`."""
    return any(
        _is_square(n) or (isinstance(n, ast.Name) and squared.get(n.id, before) < before)
        for n in ast.walk(side)
    )


def squares_difference_site(units: list[SourceUnit], file: str, line: int, cell: int | None) -> Site | None:
    """A difference with squares on both sides (``mean(x ** 2) - mean(x) ** 2``: the one-pass variance) in the
    function that holds `line` of `file`, nearest before it, or on it. None when there is none."""

    def difference(node: ast.BinOp, squared: dict[str, int]) -> bool:
        return isinstance(node.op, ast.Sub) and all(
            _holds_square(side, squared, node.lineno) for side in (node.left, node.right)
        )

    return _nearest_square_form(units, file, line, cell, difference, "a difference of squares")


def expanded_distance_site(units: list[SourceUnit], file: str, line: int, cell: int | None) -> Site | None:
    """A squared distance written expanded, ``x2 - 2 * x @ c + c2`` (``||x||^2 - 2x.c + ||c||^2``: a square on each
    side of a subtracted cross term), in the function that holds `line`, nearest before it, or on it; None else."""

    def expanded(node: ast.BinOp, squared: dict[str, int]) -> bool:
        return (
            isinstance(node.op, ast.Add)
            and isinstance(node.left, ast.BinOp)
            and isinstance(node.left.op, ast.Sub)
            and _holds_square(node.left.left, squared, node.lineno)
            and _holds_square(node.right, squared, node.lineno)
        )

    return _nearest_square_form(units, file, line, cell, expanded, "a squared distance written expanded")


def _scopes_holding(
    units: list[SourceUnit], file: str, line: int, cell: int | None
) -> Iterator[tuple[SourceUnit, ast.AST]]:
    """(unit, scope) of each unit of `file` (and `cell`): the innermost function that holds `line`, else the module."""
    for unit in units:
        if os.path.abspath(unit.file) == os.path.abspath(file) and unit.cell == cell:
            yield unit, _innermost_function(_functions(unit), line) or unit.tree


def columns_read_up_to(units: list[SourceUnit], file: str, line: int, cell: int | None) -> list[str]:
    """The columns (``features["ts"]``) the innermost function holding `line` reads by name up to that line, in
    order: what a Dataset.map function computes its values of."""
    for _unit, scope in _scopes_holding(units, file, line, cell):
        if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            read = [
                column
                for statement in scope.body
                if statement.lineno <= line
                for column in columns_read(statement)
            ]
            return list(dict.fromkeys(read))
    return []


@dataclass
class InputGradientSteps:
    """A loop of the user's that moves a tensor (not a weight) by its own gradient: a Langevin sampler's ``x = x -
    STEP_SIZE * g``, an adversarial attack's, an image optimized for a style."""

    update: Site  # the update statement's value (``x - STEP_SIZE * g + ...``)
    moved: str  # the tensor the loop moves (``x``)
    step_size: str  # the multiplier as written (``STEP_SIZE``)
    value: float | None  # its value, when the code writes it as a number
    written: Site | None  # where that number is written (``STEP_SIZE = 10.0``)
    function: str  # the function that holds the loop


def input_gradient_steps(
    units: list[SourceUnit], frames: list[tuple[str, int, int | None]]
) -> InputGradientSteps | None:
    """The gradient steps on a tensor in a loop of a function on the op's stack (`frames`: file, line, cell):
    ``for ...: g = tape.gradient(e, x); x = x - C * g``. None when no function on the stack holds such a loop."""
    for file, line, cell in frames:
        for unit, scope in _scopes_holding(units, file, line, cell):
            if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for loop in ast.walk(scope):
                if not isinstance(loop, ast.For | ast.While):
                    continue
                found = _gradient_step_in(unit, loop, scope.name)
                if found is not None:
                    return found
    return None


def _gradient_step_in(
    unit: SourceUnit, loop: ast.For | ast.While, function: str
) -> InputGradientSteps | None:
    gradients: dict[str, str] = {}  # g -> the tensor it is the gradient with respect to
    for node in ast.walk(loop):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)
            and called_name(node.value) == "gradient"
            and len(node.value.args) >= 2
            and isinstance(node.value.args[1], ast.Name)
        ):
            gradients[node.targets[0].id] = node.value.args[1].id
    for node in ast.walk(loop):
        if not (
            isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
        ):
            continue
        moved = node.targets[0].id
        for term in ast.walk(node.value):
            if not (isinstance(term, ast.BinOp) and isinstance(term.op, ast.Mult)):
                continue
            sides = (term.left, term.right)
            grads = [s for s in sides if isinstance(s, ast.Name) and gradients.get(s.id) == moved]
            if not grads:
                continue
            factor = sides[1] if sides[0] is grads[0] else sides[0]
            reads_itself = any(isinstance(n, ast.Name) and n.id == moved for n in ast.walk(node.value))
            if not reads_itself:
                continue
            text = ast.unparse(factor)
            value = _constant_expression(unit, factor)
            written = None
            if isinstance(factor, ast.Name):
                assigned = _assignments_of(unit, factor.id)
                if len(assigned) == 1:
                    written = Site(unit, assigned[0].value, factor.id)
            return InputGradientSteps(Site(unit, node.value, moved), moved, text, value, written, function)
    return None


def _adds_one(node: ast.expr) -> ast.expr | None:
    """The other operand of ``1 + x`` / ``x + 1.0``; None for another expression."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)):
        return None
    for one, other in ((node.left, node.right), (node.right, node.left)):
        if number(one) == 1.0:
            return other
    return None


def log_of_one_plus_site(units: list[SourceUnit], file: str, line: int, cell: int | None) -> Site | None:
    """A ``log(1 + x)`` written by hand (a softplus ``log(1 + exp(rho))``) in the class (else the file) that holds
    `line`: the first such call, as a site named by its argument's other operand."""
    for unit in units:
        if os.path.abspath(unit.file) != os.path.abspath(file) or unit.cell != cell:
            continue
        classes = [
            c
            for c in ast.walk(unit.tree)
            if isinstance(c, ast.ClassDef) and c.lineno <= line <= (c.end_lineno or c.lineno)
        ]
        scope: ast.AST = (
            min(classes, key=lambda c: (c.end_lineno or c.lineno) - c.lineno) if classes else unit.tree
        )
        for node in ast.walk(scope):
            if isinstance(node, ast.Call) and called_name(node) == "log" and len(node.args) == 1:
                other = _adds_one(node.args[0])
                if other is not None:
                    return Site(unit, node, ast.unparse(other))
    return None


def _nearest_square_form(
    units: list[SourceUnit],
    file: str,
    line: int,
    cell: int | None,
    matches: Callable[[ast.BinOp, dict[str, int]], bool],
    name: str,
) -> Site | None:
    """The last arithmetic on or before `line` that `matches` (given the names assigned a square in its scope), in
    the innermost function of `file` (and `cell`) that holds `line`, else the module; None when there is none."""
    for unit, scope in _scopes_holding(units, file, line, cell):
        # A name assigned a square on a line before (mean_sq = reduce_mean(square(x)); var = mean_sq - mean ** 2)
        # holds one too: the two-line form of the same variance was "op: sqrt of a negative number".
        squared = {
            target.id: assignment.lineno
            for assignment in ast.walk(scope)
            if isinstance(assignment, ast.Assign)
            for target in assignment.targets
            if isinstance(target, ast.Name) and any(_is_square(n) for n in ast.walk(assignment.value))
        }
        found = [
            node
            for node in ast.walk(scope)
            if isinstance(node, ast.BinOp) and node.lineno <= line and matches(node, squared)
        ]
        if found:
            return Site(unit, max(found, key=lambda n: n.lineno), name)
    return None


def superseded_functions(
    units: list[SourceUnit],
) -> list[tuple[SourceUnit, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Module-level functions that a later definition of the same name replaces, in the same file (a later line,
    or a later notebook cell): a notebook's helper edited into a new cell leaves the old one in the file, dead."""
    defined = [
        (unit, node)
        for unit in units
        for node in unit.tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]

    def order(item: tuple[SourceUnit, ast.FunctionDef | ast.AsyncFunctionDef]) -> tuple[int, int]:
        return (item[0].cell if item[0].cell is not None else -1, item[1].lineno)

    return [
        (unit, node)
        for unit, node in defined
        if any(
            other.name == node.name
            and other_unit.file == unit.file
            and order((other_unit, other)) > order((unit, node))
            for other_unit, other in defined
        )
    ]


def inside_any(
    unit: SourceUnit,
    node: ast.AST,
    functions: list[tuple[SourceUnit, ast.FunctionDef | ast.AsyncFunctionDef]],
) -> bool:
    """Whether `node` of `unit` lies in the body of one of `functions`."""
    line = getattr(node, "lineno", None)
    return line is not None and any(
        holder is unit and function.lineno <= line <= (function.end_lineno or function.lineno)
        for holder, function in functions
    )


def broadcast_axis(node: ast.expr) -> tuple[str, int] | None:
    """(what, axis) of a vector viewed as a row or a column to compare it with itself: ``t[None, :]`` is
    ("t", 0), ``t[:, None]`` ("t", 1), ``tf.expand_dims(t, 0)`` ("t", 0); None for anything else."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple) and len(node.slice.elts) == 2:
        nones = [i for i, e in enumerate(node.slice.elts) if isinstance(e, ast.Constant) and e.value is None]
        if len(nones) == 1:
            return ast.unparse(node.value), nones[0]
    if isinstance(node, ast.Call) and called_name(node) == "expand_dims" and len(node.args) == 2:
        axis = number(node.args[1])
        if axis is not None and axis in (0, 1, -1):
            return ast.unparse(node.args[0]), 0 if axis == 0 else 1
    return None


def strict_self_comparison_site(
    units: list[SourceUnit], file: str, line: int, cell: int | None
) -> Site | None:
    """A vector compared with itself strictly, as a row against a column (``time[None, :] > time[:, None]``: a Cox
    risk set meant as ``t_j >= t_i``), in the function that holds `line`, on or before it; its Site's name is the
    vector's. Such a mask is empty for the row of the largest (or smallest) value, whose sum over it is 0."""
    for unit, scope in _scopes_holding(units, file, line, cell):
        for node in ast.walk(scope):
            if (
                isinstance(node, ast.Compare)
                and len(node.ops) == 1
                and isinstance(node.ops[0], (ast.Gt, ast.Lt))
            ):
                sides = (node.left, node.comparators[0])
            elif (
                isinstance(node, ast.Call)
                and called_name(node) in ("greater", "less")
                and len(node.args) == 2
            ):
                sides = (node.args[0], node.args[1])
            else:
                continue
            views = [broadcast_axis(side) for side in sides]
            if (
                node.lineno <= line
                and views[0] is not None
                and views[1] is not None
                and views[0][0] == views[1][0]
                and views[0][1] != views[1][1]
            ):
                return Site(unit, node, views[0][0])
    return None


@dataclass
class CosineProduct:
    """The product an acos takes as a cosine (``cosine = tf.matmul(x, w)``), and which of its two sides the code
    normalizes (``w = tf.nn.l2_normalize(self.W, axis=0)``) and which it does not."""

    site: Site  # the product
    unnormalized: list[str]  # the sides no normalization made, as written
    normalized: list[str]


_NORMALIZING_CALLS = ("l2_normalize", "normalize", "unit_norm")


def cosine_product(units: list[SourceUnit], file: str, line: int, cell: int | None) -> CosineProduct | None:
    """The matrix product whose result the acos (or asin) on `line` takes, in the function that holds it (the
    acos's argument, or a name assigned one on an earlier line), with its sides told normalized or not; None when
    no product is found."""
    for unit, scope in _scopes_holding(units, file, line, cell):
        assigned = {
            target.id: node.value
            for node in ast.walk(scope)
            if isinstance(node, ast.Assign) and node.lineno <= line
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for call in ast.walk(scope):
            if not (
                isinstance(call, ast.Call)
                and called_name(call) in ("acos", "asin", "arccos", "arcsin")
                and call.args
                and call.lineno <= line <= (call.end_lineno or call.lineno)
            ):
                continue
            value = call.args[0]
            if isinstance(value, ast.Name) and value.id in assigned:
                value = assigned[value.id]
            sides = _product_sides(value)
            if sides is None:
                continue
            normalized = [_normalized(side, assigned) for side in sides]
            return CosineProduct(
                Site(unit, value, "matmul"),
                [ast.unparse(s) for s, n in zip(sides, normalized, strict=True) if not n],
                [ast.unparse(s) for s, n in zip(sides, normalized, strict=True) if n],
            )
    return None


def _product_sides(node: ast.expr) -> tuple[ast.expr, ast.expr] | None:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        return node.left, node.right
    if (
        isinstance(node, ast.Call)
        and called_name(node) in ("matmul", "dot", "tensordot")
        and len(node.args) >= 2
    ):
        return node.args[0], node.args[1]
    return None


def _normalized(side: ast.expr, assigned: dict[str, ast.expr]) -> bool:
    """Whether a side of the product is a normalization's result, or a name assigned one."""
    if isinstance(side, ast.Call) and called_name(side) in ("transpose",) and side.args:
        side = side.args[0]
    if isinstance(side, ast.Name) and side.id in assigned:
        side = assigned[side.id]
    return isinstance(side, ast.Call) and called_name(side) in _NORMALIZING_CALLS


def _schedule_site(units: list[SourceUnit]) -> Site | None:
    for unit in units:
        for node in calls(unit):
            name = called_name(node)
            if name in SCHEDULES:
                arg = _learning_rate_arg(node, name)
                return Site(unit, node, name, number(arg), number(arg) is not None)
    return None


def reading_site(
    units: list[SourceUnit], origin_file: str | None, origin_line: int | None, origin_cell: int | None
) -> Site | None:
    """The call that reads the data: on the origin's own line when it is one there, else the first reader in the
    user's code (entry script first). ``np.load`` counts only as ``np.load`` / ``numpy.load``."""
    readers = [site for unit in units for site in _readers(unit) if not _after_every_fit(unit, site)]
    for site in readers:
        if site.file == origin_file and site.line == origin_line and site.cell == origin_cell:
            return site
    # A reader whose line takes a sample (``TFRecordDataset(f).map(parse).take(64)`` to compute statistics) feeds
    # no training: the pipeline fit reads is another reader, later in the file.
    readers.sort(key=lambda site: ".take(" in site.unit.line(site.line))
    return readers[0] if readers else None


# Keras's weight penalties; a factor of 1 and more is no usual one (1e-5 to 1e-2 are): a typo for 1e-3 and the like.
REGULARIZERS = ("L1", "L2", "L1L2", "l1", "l2", "l1_l2")


def large_regularizers(units: list[SourceUnit]) -> list[tuple[Site, float]]:
    """Each ``keras.regularizers.L2(1e30)`` / ``l1_l2(l1=..., l2=...)`` call in the user's code whose factor is 1 or
    more, with that factor, in source order."""
    found: list[tuple[Site, float]] = []
    for unit in units:
        for node in calls(unit):
            name = called_name(node)
            if name == "add_loss" and node.args:
                # Each factor once: two add_loss calls of one LAMBDA are one line to change.
                found += [
                    (site, value)
                    for site, value in _penalty_factors(unit, node.args[0])
                    if all((site.file, site.line) != (s.file, s.line) for s, _ in found)
                ]
            if name not in REGULARIZERS:
                continue
            values = [number(a) for a in node.args]
            values += [number(k.value) for k in node.keywords if k.arg in ("l1", "l2")]
            largest = max((v for v in values if v is not None), default=None)
            if largest is not None and largest >= 1.0:
                found.append((Site(unit, node, name, target="regularizer"), largest))
    return found


_PENALTY_CALLS = ("reduce_sum", "reduce_mean", "l2_loss", "sum", "mean", "norm")


def _penalty_factors(unit: SourceUnit, expression: ast.expr) -> list[tuple[Site, float]]:
    """A weight penalty written by hand in ``add_loss`` (``self.add_loss(LAMBDA * tf.reduce_sum(tf.square(w)))``)
    whose factor, a number or a name assigned one, is 1 or more: the factor's line (the name's assignment), with
    it. A typo of 1e3 for 1e-3 diverged at any rate as `keras.regularizers.l2(1e3)` does, and was told "lower the
    learning rate", which kept it finite and untrained."""
    found = []
    for node in ast.walk(expression):
        if not isinstance(node, ast.BinOp) or not isinstance(node.op, ast.Mult):
            continue
        for factor, other in ((node.left, node.right), (node.right, node.left)):
            penalty = any(
                isinstance(n, ast.Call) and called_name(n) in _PENALTY_CALLS for n in ast.walk(other)
            )
            value = number(factor)
            if value is None and isinstance(factor, ast.Name):
                value = _constant_of(unit, factor.id)
            if not penalty or value is None or value < 1.0:
                continue
            site = Site(unit, factor, "add_loss penalty factor", target="regularizer")
            if isinstance(factor, ast.Name):
                # A name has a value only when assigned once (`_constant_of`): its assignment is the line.
                (assigned,) = _assignments_of(unit, factor.id)
                site = Site(unit, assigned.value, factor.id, target="regularizer")
            found.append((site, value))
            break
    return found


def loop_feed_site(units: list[SourceUnit], step_function: dict[str, Any] | None) -> Site | None:
    """Where a custom loop's batches come from: the iterable of the ``for`` loop that calls the guarded function
    (``for x, y in dataset:``, ``for step, (x, y) in enumerate(dataset):``), at the last assignment of its name
    before the loop (``dataset = tf.data.Dataset.from_tensor_slices(...)``); None when the loop iterates something
    else or the function is not called in a loop of the user's code."""
    qualname = (step_function or {}).get("qualname")
    if not isinstance(qualname, str) or not qualname:
        return None
    name = qualname.split(".")[-1]
    for unit in units:
        for loop in ast.walk(unit.tree):
            if not isinstance(loop, ast.For) or not any(
                isinstance(n, ast.Call) and called_name(n) == name for n in ast.walk(loop)
            ):
                continue
            iterable = loop.iter
            if (
                isinstance(iterable, ast.Call)
                and called_name(iterable) in ("enumerate", "iter")
                and iterable.args
            ):
                iterable = iterable.args[0]
            if not isinstance(iterable, ast.Name):
                continue
            statement = _last_assignment(unit, iterable.id, loop.lineno)
            value = getattr(statement, "value", None)
            if isinstance(value, ast.expr):
                return Site(unit, value, iterable.id, target="reading")
    return None


def _after_every_fit(unit: SourceUnit, site: Site) -> bool:
    """A reading call below every ``.fit(...)`` of its file or cell (a test set loaded for evaluation, a bundle
    read back after training) does not feed training."""
    fits = [n.lineno for n in calls(unit) if called_name(n) == "fit" and isinstance(n.func, ast.Attribute)]
    return bool(fits) and site.line > max(fits)


def _readers(unit: SourceUnit) -> list[Site]:
    out = []
    for node in calls(unit):
        name = called_name(node)
        if name in TFDATA_READERS or name in NUMPY_READERS and name != "load":
            out.append(Site(unit, node, name))
        elif (
            name == "load"
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in ("np", "numpy")
        ):
            out.append(Site(unit, node, name))
    return out


def is_tfdata(site: Site) -> bool:
    return site.name in TFDATA_READERS


def _first_fit(units: list[SourceUnit]) -> tuple[ast.Call, str | None] | None:
    """The first ``.fit(...)`` call and the source of the tf.data pipeline it is given (None: not a pipeline), or
    None when the user's code has no fit call."""
    for unit in units:
        for node in calls(unit):
            if called_name(node) == "fit" and isinstance(node.func, ast.Attribute):
                return node, _pipeline_text(unit, node.args[0] if node.args else keyword(node, "x"))
    return None


def _pipeline_text(unit: SourceUnit, node: ast.expr | None) -> str | None:
    """The source of the tf.data pipeline ``node`` is (an expression, or a name assigned one in the same file),
    else None."""
    if node is None:
        return None
    exprs: list[ast.expr] = [node]
    if isinstance(node, ast.Name):
        exprs = [
            a.value
            for a in ast.walk(unit.tree)
            if isinstance(a, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == node.id for t in a.targets)
        ]
    # Every assignment counts: a pipeline is often built over several (ds = ds.shuffle(1000).batch(32)).
    text = "\n".join(ast.get_source_segment(unit.text, expr) or "" for expr in exprs)
    return text if any(mark in text for mark in _PIPELINE_MARKS) else None


# A tf.data pipeline's text: its classes, or Keras's makers of one (keras.utils.timeseries_dataset_from_array,
# image_dataset_from_directory, text_dataset_from_directory, audio_dataset_from_directory).
_PIPELINE_MARKS = ("Dataset", "tf.data", "dataset_from_")
# Keras's makers that shuffle unless told not to.
_SHUFFLING_MAKERS = (
    "image_dataset_from_directory",
    "text_dataset_from_directory",
    "audio_dataset_from_directory",
)


def fit_reads_a_dataset(units: list[SourceUnit]) -> bool:
    """Whether the first ``.fit(...)`` call is given a tf.data pipeline (written there, or a name assigned one in
    the same file): Keras then ignores ``shuffle=`` and reads the elements in the pipeline's order."""
    fit = _first_fit(units)
    return fit is not None and fit[1] is not None


def fit_shuffles(units: list[SourceUnit]) -> bool | None:
    """Whether the first ``.fit(...)`` call shuffles: False for ``shuffle=False``, True when it says True or
    leaves the default; for a tf.data pipeline, whether the pipeline calls ``.shuffle(``; None when there is no
    fit call."""
    fit = _first_fit(units)
    if fit is None:
        return None
    node, pipeline = fit
    if pipeline is not None:
        shuffled_by_maker = (
            any(maker in pipeline for maker in _SHUFFLING_MAKERS) and "shuffle=False" not in pipeline
        )
        return ".shuffle(" in pipeline or "shuffle=True" in pipeline or shuffled_by_maker
    value = keyword(node, "shuffle")
    return not (isinstance(value, ast.Constant) and value.value is False)


def fit_batch_size(units: list[SourceUnit]) -> int | None:
    """The literal ``batch_size=`` of the first ``.fit(...)`` call, if written as a number."""
    for unit in units:
        for node in calls(unit):
            if called_name(node) == "fit" and isinstance(node.func, ast.Attribute):
                value = number(keyword(node, "batch_size"))
                return int(value) if value is not None and value == int(value) else None
    return None


def class_weight_site(units: list[SourceUnit]) -> Site | None:
    """Where the ``class_weight=`` of a ``.fit(...)`` call is made: the last assignment of the name it is given
    before that call (``class_weight = {i: total / (n * counts[i]) ...}``), else the keyword's own value. None when no
    fit call gives one. Keras turns it into each row's sample weight, so a class weighted inf makes that row's
    sample weight inf."""
    for unit in units:
        for node in calls(unit):
            if called_name(node) != "fit" or not isinstance(node.func, ast.Attribute):
                continue
            value = keyword(node, "class_weight")
            if value is None:
                continue
            if isinstance(value, ast.Name):
                # In the fit's cell or an earlier one (a notebook makes the weights in the cell above fit's).
                found = _assignment_before(units, unit, value.id, node.lineno)
                made = getattr(found[1], "value", None) if found is not None else None
                if found is not None and isinstance(made, ast.expr):
                    return Site(found[0], made, "class_weight", target="class_weight")
            return Site(unit, value, "class_weight", target="class_weight")
    return None


def _fit_calls(
    units: list[SourceUnit], fit_code: str | None, fit_cell: int | None = None
) -> list[tuple[SourceUnit, ast.Call]]:
    """The ``.fit(...)`` (and ``.train_on_batch(...)``) calls of the user's code, the one whose first line is
    `fit_code` (recorded in the bundle: the fit that failed, in a notebook that trains two models) first; of those,
    the one in the notebook cell `fit_cell` (a notebook that fits again, with the same line, after reloading its
    data)."""
    found = [
        (unit, node)
        for unit in units
        for node in calls(unit)
        # A loop of train_on_batch takes its arrays as fit does (x, y, sample_weight).
        if called_name(node) in ("fit", "train_on_batch") and isinstance(node.func, ast.Attribute)
    ]
    if fit_code:
        found.sort(
            key=lambda pair: (
                pair[0].line(pair[1].lineno).strip() != fit_code.strip(),
                fit_cell is not None and pair[0].cell != fit_cell,
            )
        )
    return found


def _functions(unit: SourceUnit) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [f for f in ast.walk(unit.tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _innermost_function(
    functions: list[ast.FunctionDef | ast.AsyncFunctionDef], line: int
) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """Of `functions`, the innermost that holds `line`; None for a line of the module itself."""
    holding = [f for f in functions if f.lineno <= line <= (f.end_lineno or f.lineno)]
    return min(holding, key=lambda f: (f.end_lineno or f.lineno) - f.lineno) if holding else None


def _last_assignment(unit: SourceUnit, name: str, before: int) -> ast.stmt | None:
    """The last statement before line `before` that assigns `name` (``y = ...``, ``y /= std``, ``x, y = ...``) in
    a scope line `before` sees: its own function's, or the module's. ``x, y = data`` in a model's ``train_step``
    above a module-level fit is a local of that method, not the y fit was given."""
    functions = _functions(unit)
    scope = _innermost_function(functions, before)
    best: ast.stmt | None = None
    for node in ast.walk(unit.tree):
        if not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) or node.lineno >= before:
            continue
        if _innermost_function(functions, node.lineno) not in (scope, None):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = [n for t in targets for n in _assigned_names(t)]
        if name in names and (best is None or node.lineno > best.lineno):
            best = node
    return best


def statement_at(unit: SourceUnit, line: int) -> ast.stmt | None:
    """The assignment that starts at `line` of `unit`, if any."""
    return next(
        (
            n
            for n in ast.walk(unit.tree)
            if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.lineno == line
        ),
        None,
    )


def feeds_an_assignment(
    units: list[SourceUnit],
    file: str,
    line: int,
    cell: int | None,
    named: Callable[[str], bool],
    within: int = 4,
) -> str | None:
    """The name a statement of the next `within` after the assignment at `line` (in the same block) assigns from
    what that line assigned, when `named` holds for it: ``per_example = ...`` then ``loss = tf.reduce_mean(
    per_example)``. None when none does."""
    for unit in units:
        if os.path.abspath(unit.file) != os.path.abspath(file) or unit.cell != cell:
            continue
        statement = statement_at(unit, line)
        if statement is None:
            continue
        made = set(assigned_names(statement))
        for node in ast.walk(unit.tree):
            body = getattr(node, "body", None)
            if not isinstance(body, list) or statement not in body:
                continue
            index = body.index(statement)
            for later in body[index + 1 : index + 1 + within]:
                if not isinstance(later, ast.Assign | ast.AugAssign | ast.AnnAssign):
                    continue
                reads = {
                    n.id for n in ast.walk(later) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                }
                for name in assigned_names(later):
                    if named(name) and reads & made:
                        return name
                made |= set(assigned_names(later)) if reads & made else set()
    return None


def assigned_names(statement: ast.stmt) -> list[str]:
    """The names an assignment statement assigns (its targets' names)."""
    targets = statement.targets if isinstance(statement, ast.Assign) else [getattr(statement, "target", None)]
    return [name for target in targets if isinstance(target, ast.expr) for name in _assigned_names(target)]


def _assigned_names(target: ast.expr) -> Iterator[str]:
    """The names an assignment's target assigns or writes into (``X[:, 2] = ...`` writes X), not those its
    subscripts read: ``df[num_cols] = ...`` assigns no num_cols (its list of names was taken for that line)."""
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _assigned_names(element)
    elif isinstance(target, (ast.Starred, ast.Subscript, ast.Attribute)):
        yield from _assigned_names(target.value)


def _assignment_before(
    units: list[SourceUnit], unit: SourceUnit, name: str, before: int
) -> tuple[SourceUnit, ast.stmt] | None:
    """(where, statement): the last assignment of `name` before line `before` of `unit`; in a notebook, else the
    last in the nearest earlier cell that assigns it (a DataFrame's column made in cell 2, the arrays split in cell
    4, fit in cell 7: only the fit's own cell was read, and the data cause fell back to the fit line)."""
    statement = _last_assignment(unit, name, before)
    if statement is not None:
        return unit, statement
    if unit.cell is None:
        return None
    earlier = sorted(
        (u for u in units if u.file == unit.file and u.cell is not None and u.cell < unit.cell),
        key=lambda u: u.cell or 0,
        reverse=True,
    )
    for cell in earlier:
        statement = _last_assignment(cell, name, len(cell.text.splitlines()) + 2)
        if statement is not None:
            return cell, statement
    return None


_COLUMN_STACKS = ("column_stack", "stack")


def _reads_itself(statement: ast.stmt, name: str) -> bool:
    """``x = (x - mean) / std``, ``x /= std``: the assignment makes `name` from its earlier value."""
    if isinstance(statement, ast.AugAssign):
        return True
    value = getattr(statement, "value", None)
    return value is not None and any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(value))


def _stacked_column(
    statement: ast.stmt,
    column: int | None,
    units: list[SourceUnit] | None = None,
    unit: SourceUnit | None = None,
    columns: int | None = None,
) -> str | None:
    """The name stacked as column `column` by ``X = np.column_stack([a, b, c])`` / ``np.stack([...], axis=1)``.
    An item several columns wide (``np.column_stack([num_feats(tr, tr).values, tr_te])``, a frame of two columns
    made by a function of the user's; or ``df[["a", "b"]].values``) counts as that many; the one item whose width
    the code does not show takes the rest of the `columns` the array has (s43c p4)."""
    value = getattr(statement, "value", None)
    while (  # np.stack([...], axis=1).astype("float32")
        isinstance(value, ast.Call)
        and called_name(value) == "astype"
        and isinstance(value.func, ast.Attribute)
        and isinstance(value.func.value, ast.Call)
    ):
        value = value.func.value
    if column is None or not isinstance(value, ast.Call) or called_name(value) not in _COLUMN_STACKS:
        return None
    if called_name(value) == "stack":
        axis = number(keyword(value, "axis") or (value.args[1] if len(value.args) > 1 else None))
        if axis not in (1, -1):
            return None
    items = value.args[0] if value.args else None
    if not isinstance(items, (ast.List, ast.Tuple)):
        return None
    widths: list[int | None] = (
        [_item_width(units, unit, item, statement.lineno) for item in items.elts]
        if units is not None and unit is not None and called_name(value) == "column_stack"
        else [None] * len(items.elts)
    )
    if all(width is None for width in widths):
        if column >= len(items.elts):
            return None
        item = items.elts[column]
        return item.id if isinstance(item, ast.Name) else None
    unknown = [i for i, width in enumerate(widths) if width is None]
    if len(unknown) == 1 and columns is not None:
        rest = columns - sum(width for width in widths if width is not None)
        widths[unknown[0]] = rest if rest > 0 else None
    start = 0
    for item, width in zip(items.elts, widths, strict=True):
        if width is None:
            return None  # the columns past an item of a width the code does not show cannot be counted
        if start <= column < start + width:
            return item.id if isinstance(item, ast.Name) and width == 1 else None
        start += width
    return None


def _item_width(units: list[SourceUnit], unit: SourceUnit, item: ast.expr, line: int) -> int | None:
    """How many columns an item of a ``np.column_stack`` holds, when the code shows it: a selection of columns by a
    list (``df[["a", "b"]].values``), or a DataFrame a function of the user's returns, made there by assigning its
    columns one by one (``out = pd.DataFrame(index=d.index); out["age"] = ...; return out``). None otherwise."""
    inner = item
    while isinstance(inner, ast.Attribute | ast.Call):
        if isinstance(inner, ast.Attribute) and inner.attr in _PASS_THROUGH:
            inner = inner.value
        elif (
            isinstance(inner, ast.Call)
            and isinstance(inner.func, ast.Attribute)
            and inner.func.attr in _PASS_THROUGH
        ):
            inner = inner.func.value
        else:
            break
    if inner is item:
        return None  # a name or an expression as it is: its width is not written
    if isinstance(inner, ast.Subscript):
        names = _column_list(units, unit, inner.slice, line)
        return len(names) if names else None
    if not (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name)):
        return None
    for own in units:
        for function in _functions(own):
            if function.name != inner.func.id:
                continue
            returned = [
                n.value for n in ast.walk(function) if isinstance(n, ast.Return) and n.value is not None
            ]
            if len(returned) != 1 or not isinstance(returned[0], ast.Name):
                return None
            frame = returned[0].id
            assigned = {
                target.slice.value
                for node in ast.walk(function)
                if isinstance(node, ast.Assign) and len(node.targets) == 1
                for target in node.targets
                if isinstance(target, ast.Subscript)
                and isinstance(target.value, ast.Name)
                and target.value.id == frame
                and isinstance(target.slice, ast.Constant)
                and isinstance(target.slice.value, str)
            }
            made_values = [
                node.value
                for node in ast.walk(function)
                if isinstance(node, ast.Assign)
                and any(isinstance(target, ast.Name) and target.id == frame for target in node.targets)
            ]
            made_value = made_values[0] if len(made_values) == 1 else None
            # Made empty (``pd.DataFrame(index=...)``) and filled column by column: the columns assigned are all.
            empty = (
                isinstance(made_value, ast.Call)
                and called_name(made_value) == "DataFrame"
                and not made_value.args
                and all(k.arg in ("index", "dtype") for k in made_value.keywords)
            )
            return len(assigned) if empty and assigned else None
    return None


def fit_array_site(
    units: list[SourceUnit],
    leaf: str,
    column: int | None = None,
    fit_code: str | None = None,
    fit_cell: int | None = None,
    columns: int | None = None,
) -> Site | None:
    """Where the array that fit was given as `leaf` (``x``, ``y``, ``sample_weight``) is made, when it is a name
    assigned in the user's code: the last assignment of it before the fit call (``y = (targets - mean) / std``),
    and, for ``X = np.column_stack([a, b, c])``, the assignment of the name stacked as `column`. None for an array
    written in the call itself, or a name the code does not assign."""
    positions = {"x": 0, "y": 1, "sample_weight": 2}
    position = positions.get(leaf.split("[")[0])
    if position is None:
        return None
    for unit, call in _fit_calls(units, fit_code, fit_cell)[:1]:
        name = [k for k in ("x", "y", "sample_weight") if positions[k] == position][0]
        argument = call.args[position] if len(call.args) > position else keyword(call, name)
        if argument is None and position and len(call.args) == 1 and keyword(call, "x") is None:
            # fit(dataset): the dataset yields the targets and weights with the inputs, from the call that made it.
            argument = call.args[0]
        if argument is not None:
            # fit(make_ds(X[tr], y[tr], shuffle=True)): a helper of the user's slices its parameters into the
            # dataset; the array in the leaf's place is the argument the call passes there (s43c p3).
            argument = _sliced_by_own_helper(units, unit, argument, position, call.lineno) or argument
        keyed = re.match(r"\w+\[['\"]([^'\"]+)['\"]\]", leaf)
        if isinstance(argument, ast.Dict) and keyed is not None:
            # fit(X, {"price": price, "sold_fast": sold}): the array under the leaf's key (s40f p2).
            argument = next(
                (
                    v
                    for k, v in zip(argument.keys, argument.values, strict=True)
                    if isinstance(k, ast.Constant) and k.value == keyed.group(1)
                ),
                None,
            )
        if column is not None and argument is not None and not isinstance(argument, ast.Name):
            # ``fit(tr[feats].values.astype("float32"), ...)``: the columns selected in the call itself (a K-fold
            # loop's fold frame), the bad one by its name where the code makes it (s40c nb3).
            picked_names = _selected_columns(units, unit, argument, call.lineno)
            if picked_names is not None and len(picked_names) > 1 and column < len(picked_names):
                frames = [
                    n.value.id
                    for n in ast.walk(argument)
                    if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)
                ]
                made_at = column_assignment_site(units, picked_names[column], frames[0] if frames else None)
                if made_at is not None:
                    named = f"column {picked_names[column]!r} (column {column} of {leaf.split('[')[0]})"
                    return Site(
                        made_at.unit, made_at.node, named, target="array", column=picked_names[column]
                    )
        if isinstance(argument, ast.Subscript) and isinstance(argument.value, ast.Name):
            argument = argument.value  # x[train_idx]: a fold of a cross-validation takes rows of x
        if not isinstance(argument, ast.Name):
            return None
        found = _assignment_before(units, unit, argument.id, call.lineno)
        # Back past conversions of the name itself (``X = X.values.astype("float32")`` after ``X = (X - X.mean()) /
        # X.std()``): they make no value, and the line that does was "filter where the data is read".
        while found is not None and _converts_itself(found[1], argument.id):
            earlier = _assignment_before(units, found[0], argument.id, found[1].lineno)
            if earlier is None:
                break
            found = earlier
        if found is None:
            return None
        where, statement = found
        name = argument.id
        # Back through assignments that rework the array (``features = (features - mean) / std``, ``.astype``)
        # to the one that stacks its columns, if any.
        made: tuple[SourceUnit, ast.stmt] | None = found
        while (
            made is not None
            and _stacked_column(made[1], column, units, made[0], columns) is None
            and _reads_itself(made[1], name)
        ):
            made = _assignment_before(units, made[0], name, made[1].lineno)
        stacked = _stacked_column(made[1], column, units, made[0], columns) if made is not None else None
        source = (
            _assignment_before(units, made[0], stacked, made[1].lineno)
            if stacked is not None and made is not None
            else None
        )
        if source is not None:
            (where, statement), name = source, f"{stacked} (column {column} of {argument.id})"
        elif column is not None:
            # ``X = df[features].to_numpy()``, split into x_train: the column by its name, where the code makes it.
            picked = _frame_column(units, where, statement, argument.id, column)
            made_at = column_assignment_site(units, picked) if picked is not None else None
            if made_at is not None:
                named = f"column {picked!r} (column {column} of {argument.id})"
                return Site(made_at.unit, made_at.node, named, target="array", column=picked)
        node = getattr(statement, "value", None)
        return Site(where, node, name, target="array") if isinstance(node, ast.expr) else None
    return None


def _sliced_by_own_helper(
    units: list[SourceUnit], unit: SourceUnit, argument: ast.expr, position: int, line: int
) -> ast.expr | None:
    """The argument of a call of a function the user defines (``make_ds(X[tr], y[tr], shuffle=True)``, or a name
    assigned from one before `line`) that the function slices into its dataset at `position`: its body's
    ``from_tensor_slices((x, y) if y is not None else x)`` holds the parameter there. None when `argument` is not
    such a call, or the element there is not a parameter."""
    value: ast.expr | None = argument
    if isinstance(argument, ast.Name):
        found = _assignment_before(units, unit, argument.id, line)
        value = _assigned_value(found[1], argument.id) if found is not None else None
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        value = value.func.value  # make_ds(...).repeat(): the helper's dataset, reworked
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Name):
        return None
    helper = value
    functions = [f for u in units for f in _functions(u) if f.name == helper.func.id]  # type: ignore[attr-defined]
    if len(functions) != 1:
        return None
    function = functions[0]
    sliced = next(
        (
            n
            for n in ast.walk(function)
            if isinstance(n, ast.Call) and called_name(n) == "from_tensor_slices" and n.args
        ),
        None,
    )
    if sliced is None:
        return None
    items = sliced.args[0]
    if isinstance(items, ast.IfExp):
        items = items.body  # (x, y) if y is not None else x: the labelled dataset fit gets
    if not isinstance(items, ast.Tuple) or position >= len(items.elts):
        return None
    item = items.elts[position]
    if not isinstance(item, ast.Name):
        return None
    parameters = [a.arg for a in function.args.posonlyargs + function.args.args]
    if item.id in parameters:
        at = parameters.index(item.id)
        if at < len(helper.args) and not any(isinstance(a, ast.Starred) for a in helper.args[: at + 1]):
            return helper.args[at]
    return keyword(helper, item.id)


# pandas calls that give NaN in a column for a key the other side lacks (s42f p3: a left merge with a weights table
# that has no row for one region): merge's and join's how= ("inner", merge's default, drops those rows instead).
_JOIN_DEFAULT_HOW = {"merge": "inner", "join": "left"}
_NAN_HOWS = ("left", "right", "outer")


@dataclass
class JoinSite:
    """The pandas merge or join (or ``.map`` of a column by a dict) that made NaN in the column fit's array holds,
    for a key the other side lacks."""

    site: Site  # the merge/join call, or the value of the column's assignment by a map
    column: str  # the column that holds the NaN
    frame: str  # the DataFrame it is read from (``df["w"]``)
    how: str  # "left", "right", "outer", or "map"
    other: str  # the side that lacks keys: the right frame (``region_w``), the left one, or the dict's name
    keys: list[str]  # the join's key columns (``on=``), when written

    def what(self, fill: str) -> str:
        """The change's words: what the call does for a key the other side lacks, and the two ways out."""
        fix = f'{self.frame}["{self.column}"] = {self.frame}["{self.column}"].fillna({fill})'
        if self.how == "map":
            return (
                f"the .map by {self.other} gives NaN for a key {self.other} has no entry for (column "
                f"{self.column!r}): add the missing keys to {self.other}, or fill after the map ({fix})"
            )
        key = f" {self.keys[0]!r}" if len(self.keys) == 1 else ""
        lacking = (
            f"{self.other} has no row for a{key} key"
            if self.how != "outer"
            else f"one side has no row for a{key} key"
        )
        return (
            f"the {self.how} {self.site.name} gives NaN in column {self.column!r} where {lacking}: add the missing "
            f"keys, or fill after the {self.site.name} ({fix})"
        )


def joined_column_site(
    units: list[SourceUnit],
    leaf: str,
    column: int | None = None,
    fit_code: str | None = None,
    fit_cell: int | None = None,
) -> JoinSite | None:
    """The left (right, outer) ``merge``/``join``, or the ``.map(dict)``, that made the DataFrame column the array
    fit was given as `leaf` is read from: ``sw = df["w"].values`` (given to fit, or sliced into the dataset fit was
    given: ``from_tensor_slices((X, y, sw))``) after ``df = df.merge(region_w, on="region", how="left")``. The
    frame is followed back from the line that reads the column through lines that keep it (``df = df[df.x > 0]``,
    other columns' assignments); None when the code does not show that column made so."""
    array = _leaf_array(units, leaf, fit_code, fit_cell)
    if array is None:
        return None
    unit, name, line = array
    found = _assignment_before(units, unit, name, line)
    while found is not None and _converts_itself(found[1], name):
        earlier = _assignment_before(units, found[0], name, found[1].lineno)
        if earlier is None:
            break
        found = earlier
    value = _assigned_value(found[1], name) if found is not None else None
    if found is None or value is None:
        return None
    unit, statement = found
    picked = _frame_column(units, unit, statement, name, column) if column is not None else None
    wanted = [picked] if picked is not None else columns_read(value) if column is None else []
    if len(wanted) != 1:
        return None
    frames = [
        n.value.id
        for n in ast.walk(value)
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and wanted[0] in columns_read(n)
    ] or [
        n.value.id for n in ast.walk(value) if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)
    ]
    return _column_joined(units, unit, frames[0], wanted[0], statement.lineno) if frames else None


def _leaf_array(
    units: list[SourceUnit], leaf: str, fit_code: str | None, fit_cell: int | None
) -> tuple[SourceUnit, str, int] | None:
    """(where, the name, the line it is used at) of the array fit was given as `leaf` (``x``, ``y``,
    ``sample_weight``): fit's argument, or the element of the tuple sliced into the dataset fit was given
    (``from_tensor_slices((X, y, sw))``, the dataset shuffled and batched on that line or later ones)."""
    positions = {"x": 0, "y": 1, "sample_weight": 2}
    position = positions.get(leaf)
    if position is None:
        return None
    for unit, call in _fit_calls(units, fit_code, fit_cell)[:1]:
        argument = call.args[position] if len(call.args) > position else keyword(call, leaf)
        if argument is None and position and len(call.args) == 1 and keyword(call, "x") is None:
            # fit(dataset): the dataset yields the targets and weights with the inputs.
            argument = call.args[0]
        if not isinstance(argument, ast.Name):
            return None
        made = _assignment_before(units, unit, argument.id, call.lineno)
        for _ in range(8):
            if made is None or _sliced(made[1]) is not None or not _reads_itself(made[1], argument.id):
                break
            made = _assignment_before(units, made[0], argument.id, made[1].lineno)
        sliced = _sliced(made[1]) if made is not None else None
        if made is None or sliced is None:
            return unit, argument.id, call.lineno
        items = sliced.args[0]
        if not isinstance(items, ast.Tuple) or position >= len(items.elts):
            return None
        item = items.elts[position]
        return (made[0], item.id, made[1].lineno) if isinstance(item, ast.Name) else None
    return None


def _sliced(statement: ast.stmt) -> ast.Call | None:
    """The ``from_tensor_slices(...)`` call of an assignment, if any."""
    return next(
        (
            n
            for n in ast.walk(statement)
            if isinstance(n, ast.Call) and called_name(n) == "from_tensor_slices" and n.args
        ),
        None,
    )


def _column_joined(
    units: list[SourceUnit], unit: SourceUnit, frame: str, column: str, line: int
) -> JoinSite | None:
    """The join or map that made `column` of `frame` (read at `line`), found back through the frame's lines."""
    for _ in range(8):
        found = _assignment_before(units, unit, frame, line)
        if found is None:
            return None
        unit, statement = found
        if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
            return None
        target, value, line = statement.targets[0], statement.value, statement.lineno
        if _fills(value):
            return None  # ``.fillna(1.0)`` or ``.dropna()`` after the join: it left no NaN there
        if isinstance(target, ast.Subscript):
            key = target.slice
            if isinstance(key, ast.Tuple) and key.elts:  # df.loc[:, "w"]
                key = key.elts[-1]
            if column not in _key_texts(unit, key, statement):
                continue  # another column's line keeps this one as it was
            mapping = _mapped_by_a_dict(units, unit, value)
            if mapping is None:
                return None
            return JoinSite(Site(unit, value, "map", target="array"), column, frame, "map", mapping, [])
        if not isinstance(target, ast.Name):
            return None
        for call in (n for n in ast.walk(value) if isinstance(n, ast.Call)):
            kind = called_name(call)
            if kind not in _JOIN_DEFAULT_HOW:
                continue
            how = keyword(call, "how")
            how_text = (
                _JOIN_DEFAULT_HOW[kind]
                if how is None
                else how.value
                if isinstance(how, ast.Constant)
                else None
            )
            keys = _join_keys(call)
            sides = _join_sides(call)
            if not isinstance(how_text, str) or how_text not in _NAN_HOWS or column in keys or sides is None:
                return None
            # A left join makes NaN only in the right frame's columns, where it lacks a key (a right join: the left
            # frame's); the side that lacks keys holds the column.
            lacking = sides[1] if how_text == "left" else sides[0]
            if how_text != "outer" and not _may_hold(units, unit, lacking, column, line):
                return None
            other = ast.unparse(lacking)
            return JoinSite(Site(unit, call, kind, target="array"), column, frame, how_text, other, keys)
        if not _reads_itself(statement, frame):
            return None  # the frame is read or made here (read_csv): no join made the column
    return None


def _fills(value: ast.expr) -> bool:
    """Whether an expression fills or drops NaN (``.fillna(...)``, ``.dropna()``)."""
    return any(isinstance(n, ast.Call) and called_name(n) in ("fillna", "dropna") for n in ast.walk(value))


def _join_sides(call: ast.Call) -> tuple[ast.expr, ast.expr] | None:
    """(left, right) of ``left.merge(right, ...)``, ``left.join(other)`` or ``pd.merge(left, right, ...)``."""
    if not isinstance(call.func, ast.Attribute):
        return None
    if isinstance(call.func.value, ast.Name) and call.func.value.id in ("pd", "pandas"):
        left = call.args[0] if call.args else keyword(call, "left")
        right = call.args[1] if len(call.args) > 1 else keyword(call, "right")
    else:
        left = call.func.value
        right = call.args[0] if call.args else keyword(call, "right") or keyword(call, "other")
    return (left, right) if left is not None and right is not None else None


def _join_keys(call: ast.Call) -> list[str]:
    """The key columns a join names (``on="region"``, ``left_on=["a", "b"]``)."""
    keys: list[str] = []
    for name in ("on", "left_on", "right_on"):
        given = keyword(call, name)
        items = (
            given.elts if isinstance(given, (ast.List, ast.Tuple)) else [given] if given is not None else []
        )
        keys += [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]
    return list(dict.fromkeys(keys))


def _may_hold(units: list[SourceUnit], unit: SourceUnit, side: ast.expr, column: str, line: int) -> bool:
    """Whether a join's side may hold `column`: False only when the code makes it a DataFrame of a dict written
    there (``pd.DataFrame({"region": [...], "w": [...]})``) without that key."""
    if not isinstance(side, ast.Name):
        return True
    made = _assignment_before(units, unit, side.id, line)
    value = _assigned_value(made[1], side.id) if made is not None else None
    if not (isinstance(value, ast.Call) and called_name(value) == "DataFrame" and value.args):
        return True
    table = value.args[0]
    if not isinstance(table, ast.Dict) or not all(isinstance(k, ast.Constant) for k in table.keys):
        return True
    return column in {k.value for k in table.keys if isinstance(k, ast.Constant)}


def _mapped_by_a_dict(units: list[SourceUnit], unit: SourceUnit, value: ast.expr) -> str | None:
    """The dict a column's value is ``.map``-ped by (``df["region"].map(weights)``, ``weights`` a dict written in
    the code, or ``{...}`` itself), as the cause names it; None for a map by a function, or no map."""
    for call in (n for n in ast.walk(value) if isinstance(n, ast.Call)):
        if called_name(call) != "map" or len(call.args) != 1 or not isinstance(call.func, ast.Attribute):
            continue
        given = call.args[0]
        if isinstance(given, (ast.Dict, ast.DictComp)):
            return "the dict"
        if isinstance(given, ast.Name):
            made = _assignment_before(units, unit, given.id, value.lineno)
            assigned = _assigned_value(made[1], given.id) if made is not None else None
            if isinstance(assigned, (ast.Dict, ast.DictComp)) or (
                isinstance(assigned, ast.Call) and called_name(assigned) == "dict"
            ):
                return given.id
    return None


@dataclass
class UnseenKeyMap:
    """A ``.map`` of a column by a mapping computed from other rows (a target encoding's per-category means of the
    training fold, mapped onto the validation fold): a key those rows never held maps to NaN."""

    site: Site  # the value that maps (``trn.iloc[i_val][col].map(enc).values``)
    mapping: str  # the mapping's name (``enc``)
    mapped: str  # the rows mapped, as written (``trn.iloc[i_val]``)
    learned_from: str  # the rows the mapping was computed from (``trn.iloc[i_trn]``)
    others: list[
        Site
    ]  # the function's other maps by a mapping computed so, filled neither (``val[col].map(enc)``)


_GROUP_STATISTICS = ("groupby", "value_counts", "pivot_table")


def _unseen_key_map(unit: SourceUnit, value: ast.expr) -> tuple[str, str, str] | None:
    """(mapping, rows mapped, rows it was learned from) of a ``.map(mapping)`` in `value` whose mapping is made,
    through the assignments before it in the same scope, by a ``groupby``/``value_counts`` of other rows than those
    mapped, with no ``.fillna`` after the map; None otherwise."""
    if _fills(value):
        return None
    for call in (n for n in ast.walk(value) if isinstance(n, ast.Call)):
        if called_name(call) != "map" or len(call.args) != 1 or not isinstance(call.func, ast.Attribute):
            continue
        given = call.args[0]
        if not isinstance(given, ast.Name):
            continue
        receiver = call.func.value
        mapped = receiver.value if isinstance(receiver, ast.Subscript) else receiver
        pending, line = [given.id], value.lineno
        seen: set[str] = set()
        learned: str | None = None
        while pending and learned is None and len(seen) < 8:
            name = pending.pop()
            if name in seen:
                continue
            seen.add(name)
            made = _last_assignment(unit, name, line)
            made_value = _assigned_value(made, name) if made is not None else None
            if made_value is None:
                continue
            for inner in ast.walk(made_value):
                if isinstance(inner, ast.Call) and called_name(inner) in _GROUP_STATISTICS:
                    grouped = inner.func.value if isinstance(inner.func, ast.Attribute) else None
                    if isinstance(grouped, ast.Subscript) and called_name(inner) == "value_counts":
                        grouped = grouped.value
                    if grouped is not None:
                        learned = ast.unparse(grouped)
                        break
            pending += [n.id for n in ast.walk(made_value) if isinstance(n, ast.Name)]
        if learned is not None and learned != ast.unparse(mapped):
            return given.id, ast.unparse(mapped), learned
    return None


def unseen_key_map_site(units: list[SourceUnit], made: Site) -> UnseenKeyMap | None:
    """The ``.map`` that made the array `made` (`fit_array_site`'s answer: ``tr_te, va_te, te_te =
    target_encode(tr, va, test, "city")``, or the map itself) when its mapping is learned from other rows than it
    maps (an out-of-fold target encoding: ``trn_te[i_val] = trn.iloc[i_val][col].map(enc).values`` with ``enc``
    from ``trn.iloc[i_trn].groupby(col)``), followed into a function of the user's that returns it. A category
    those rows never held maps to NaN, silently (s43c p4). None otherwise."""
    node: ast.expr = made.node
    unit = made.unit
    name = made.name.split(" (column")[0]
    statement = next(
        (
            n
            for n in ast.walk(unit.tree)
            if isinstance(n, ast.Assign) and n.value is node and len(n.targets) == 1
        ),
        None,
    )
    if statement is not None and isinstance(statement.targets[0], ast.Tuple):
        names = [e.id if isinstance(e, ast.Name) else None for e in statement.targets[0].elts]
        inside = _returned_by_own_function(units, node, names.index(name)) if name in names else None
    else:
        inside = _returned_by_own_function(units, node, None)
    if inside is not None:
        unit, node = inside.unit, inside.node
    found = _unseen_key_map(unit, node)
    if found is None:
        return None
    function = _innermost_function(_functions(unit), node.lineno)
    scope: ast.AST = function if function is not None else unit.tree
    others = [
        Site(unit, other.value, "map", target="array")
        for other in ast.walk(scope)
        if isinstance(other, ast.Assign | ast.Return)
        and other.value is not None
        and other.value is not node
        and other.lineno != node.lineno
        and any(
            _unseen_key_map(unit, part) is not None
            for part in (other.value.elts if isinstance(other.value, ast.Tuple) else [other.value])
        )
    ]
    return UnseenKeyMap(Site(unit, node, "map", target="array"), *found, others=others)


@dataclass
class ColumnDivision:
    """A DataFrame column the code computes as a ratio of two columns (``df["Area_per_car"] = df["GarageArea"] /
    df["GarageCars"]``)."""

    site: Site  # the assignment's value
    column: str  # the column assigned
    numerator: str
    divisor: str
    frame: str  # the frame written as the divisor's (``df``)


def _single_column(node: ast.expr) -> tuple[str, str] | None:
    """(frame, column) of ``df["a"]`` or ``df.a``; None for anything else."""
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, str)
    ):
        return node.value.id, node.slice.value
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id not in ("np", "pd")
    ):
        return node.value.id, node.attr
    return None


def column_divisions(units: list[SourceUnit]) -> list[ColumnDivision]:
    """Every assignment of a DataFrame column by name whose value divides one column by another as they are
    (``df["r"] = df["a"] / df["b"]``, ``df.a / df.b``), with no fill on that line and none of that column later
    (``df["r"].fillna(0)``), in functions no later definition replaces."""
    superseded = superseded_functions(units)
    filled = filled_columns(units)
    found: list[ColumnDivision] = []
    for unit in units:
        for node in ast.walk(unit.tree):
            if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                continue
            target = node.targets[0]
            if not (
                isinstance(target, ast.Subscript)
                and isinstance(target.slice, ast.Constant)
                and isinstance(target.slice.value, str)
            ):
                continue
            if target.slice.value in filled or _fills(node.value) or inside_any(unit, node, superseded):
                continue
            for division in ast.walk(node.value):
                if not (isinstance(division, ast.BinOp) and isinstance(division.op, ast.Div)):
                    continue
                top = _single_column(division.left)
                bottom = _single_column(division.right)
                if top is None or bottom is None:
                    continue
                found.append(
                    ColumnDivision(
                        Site(unit, node.value, f"column {target.slice.value!r}", target="array"),
                        target.slice.value,
                        top[1],
                        bottom[1],
                        bottom[0],
                    )
                )
                break
    return found


def filled_columns(units: list[SourceUnit]) -> set[str]:
    """The DataFrame columns the code fills or drops NaN of by name (``df["LotFrontage"].fillna(...)``,
    ``df.dropna(subset=["a"])``); ``"*"`` in it when a whole frame is (``df = df.fillna(0)``, ``df.dropna()``)."""
    filled: set[str] = set()
    for unit in units:
        for call in calls(unit):
            kind = called_name(call)
            if kind not in ("fillna", "dropna", "interpolate", "ffill", "bfill") or not isinstance(
                call.func, ast.Attribute
            ):
                continue
            subset = keyword(call, "subset")
            if subset is not None:
                filled |= {
                    e.value
                    for e in (subset.elts if isinstance(subset, ast.List | ast.Tuple) else [subset])
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)
                }
                continue
            receiver = call.func.value
            single = _single_column(receiver)
            if single is not None and isinstance(receiver, ast.Subscript):
                filled.add(single[1])
            elif isinstance(receiver, ast.Subscript) and isinstance(receiver.slice, ast.List):
                filled |= {
                    e.value
                    for e in receiver.slice.elts
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)
                }
            elif isinstance(receiver, ast.Name):
                filled.add("*")
            elif single is not None:
                filled.add(single[1])
    return filled


# Calls that pass an array or frame through unchanged in its columns: ``.to_numpy()``, ``.astype("float32")``.
_PASS_THROUGH = ("to_numpy", "astype", "copy", "values", "fillna", "reset_index")
# Functions that convert their first argument without computing: ``np.asarray(X, dtype="float32")``.
_CONVERTERS = ("asarray", "array", "float32", "convert_to_tensor", "constant")


def _converts_itself(statement: ast.stmt, name: str) -> bool:
    """``X = X.values.astype("float32")``, ``X = np.asarray(X)``: an assignment of `name` that only converts its
    earlier value (attributes and calls of `_PASS_THROUGH`, or a converter of it)."""
    if not isinstance(statement, ast.Assign) or not any(
        isinstance(t, ast.Name) and t.id == name for t in statement.targets
    ):
        return False
    value: ast.expr = statement.value
    while True:
        if isinstance(value, ast.Name):
            return value.id == name
        if isinstance(value, ast.Attribute) and value.attr in _PASS_THROUGH:
            value = value.value
        elif (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr in _PASS_THROUGH
        ):
            value = value.func.value
        elif isinstance(value, ast.Call) and called_name(value) in _CONVERTERS and value.args:
            value = value.args[0]
        else:
            return False


def _frame_column(
    units: list[SourceUnit], unit: SourceUnit, statement: ast.stmt, name: str, column: int
) -> str | None:
    """The DataFrame column that column `column` of the array `name` holds: ``X = df[features].to_numpy()`` with
    ``features`` a list of names written in the code, followed back through a split (``x_train, x_val = X[:n],
    X[n:]``) and assignments that rework the array (``X = ((X - med) / iqr).to_numpy()``). None when the code
    does not show it."""
    for _ in range(8):
        value = _assigned_value(statement, name)
        if value is None:
            return None
        names = _selected_columns(units, unit, value, statement.lineno)
        if names is not None:
            return names[column] if column < len(names) else None
        if _reads_itself(statement, name):
            following = name
        else:
            inner = value
            while (
                isinstance(inner, ast.Call)
                and isinstance(inner.func, ast.Attribute)
                and (inner.func.attr in _PASS_THROUGH)
            ):
                inner = inner.func.value
            if not (isinstance(inner, ast.Subscript) and isinstance(inner.value, ast.Name)):
                return None
            following = inner.value.id  # X[:3400]: rows of X, its columns as they are
        found = _assignment_before(units, unit, following, statement.lineno)
        if found is None:
            return None
        (unit, statement), name = found, following
    return None


def _assigned_value(statement: ast.stmt, name: str) -> ast.expr | None:
    """What `statement` assigns to `name`: its value, or for ``a, b = x[:n], x[n:]`` the element in a's place."""
    if isinstance(statement, ast.AugAssign):
        return statement.value
    if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
        return None
    target, value = statement.targets[0], statement.value
    if isinstance(target, ast.Name):
        return value if target.id == name else None
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
        for element, part in zip(target.elts, value.elts, strict=True):
            if isinstance(element, ast.Name) and element.id == name:
                return part
    return None


def _selected_columns(
    units: list[SourceUnit], unit: SourceUnit, value: ast.expr, line: int
) -> list[str] | None:
    """The column names a ``df[[...]]`` / ``df[features]`` selection in `value` takes, in order: a list of strings
    written there, or a name the code assigns one before `line`."""
    for node in ast.walk(value):
        if not isinstance(node, ast.Subscript):
            continue
        names = _column_list(units, unit, node.slice, line)
        if names:
            return names
    # ``df["target"].to_numpy("float32")[:, None]``: one column, by its name, when it is the only one read.
    single = columns_read(value)
    return single if len(single) == 1 else None


def _column_list(
    units: list[SourceUnit], unit: SourceUnit, key: Any, line: int, depth: int = 0
) -> list[str] | None:
    """The column names `key` spells: a list of strings written there, a name the code assigns one before `line`,
    or a sum of such lists (``features = num_cols + eng_cols``: a Kaggle notebook's engineered columns appended to
    the numeric ones, s40c nb1)."""
    if depth > 4:
        return None
    if isinstance(key, ast.Name):
        found = _assignment_before(units, unit, key.id, line)
        if found is None or not isinstance(getattr(found[1], "value", None), ast.expr):
            return None
        (where, statement) = found
        return _column_list(units, where, statement.value, statement.lineno, depth + 1)  # type: ignore[attr-defined]
    if isinstance(key, ast.BinOp) and isinstance(key.op, ast.Add):
        left = _column_list(units, unit, key.left, line, depth + 1)
        right = _column_list(units, unit, key.right, line, depth + 1)
        return left + right if left and right else None
    if isinstance(key, ast.List) and key.elts:
        texts = [e.value for e in key.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if len(texts) == len(key.elts):
            return texts
    return None


def keyed_columns(units: list[SourceUnit], key: str) -> list[str] | None:
    """The DataFrame column names of the array a dict of inputs holds under `key`: ``{"numeric":
    df[NUMERIC].values}`` or ``feats["numeric"] = df[NUMERIC].to_numpy()``, the names a list written in the code.
    None when no such entry selects columns by a list, or two entries of that key select different ones."""
    found: set[tuple[str, ...]] = set()
    for unit in units:
        for value, _written in _values_under_key(unit, key):
            names = _selected_columns(units, unit, value, value.lineno)
            if not names and isinstance(value, ast.Name):
                # ``{"num": num}`` after ``num = train[num_cols].values`` (s40d p9).
                made = _assignment_before(units, unit, value.id, value.lineno)
                assigned = getattr(made[1], "value", None) if made is not None else None
                if made is not None and isinstance(assigned, ast.expr):
                    names = _selected_columns(units, made[0], assigned, made[1].lineno)
            if names:
                found.add(tuple(names))
    return list(found.pop()) if len(found) == 1 else None


def columns_read(node: ast.AST) -> list[str]:
    """The DataFrame columns an expression reads by name (``df["vol_chg"].shift(-1)``: ["vol_chg"])."""
    return list(
        dict.fromkeys(
            n.slice.value
            for n in ast.walk(node)
            if isinstance(n, ast.Subscript)
            and isinstance(n.slice, ast.Constant)
            and isinstance(n.slice.value, str)
        )
    )


def column_assignment_site(units: list[SourceUnit], column: str, frame: str | None = None) -> Site | None:
    """The last assignment of a DataFrame column by name (``df["log_income"] = np.log(...)``, ``df.loc[:, "x"] =``)
    in the user's code, as a site on its value; None when no line assigns that column. A name the code computes in
    a loop over names it writes (``for col in ["region", "plan"]: tr[col + "_te"], va[col + "_te"] =
    encode(tr, va, col)``) is found too, and a value a function of the user's returns is followed to the line in
    that function that makes it. `frame`: the DataFrame fit's array is taken from, whose assignment of the column
    is preferred to another frame's on the same line (``tr[...], va[...] =``)."""
    found: list[tuple[bool, Site]] = []
    for unit in units:
        for node in ast.walk(unit.tree):
            if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                continue
            target = node.targets[0]
            parts = target.elts if isinstance(target, ast.Tuple) else [target]
            for position, part in enumerate(parts):
                if not isinstance(part, ast.Subscript):
                    continue
                key = part.slice
                if isinstance(key, ast.Tuple) and key.elts:  # df.loc[:, "x"]
                    key = key.elts[-1]
                if column not in _key_texts(unit, key, node):
                    continue
                value = node.value
                if isinstance(target, ast.Tuple):
                    value = _element_assigned(units, node.value, position, len(parts)) or node.value
                site = _returned_by_own_function(
                    units, value, position if isinstance(target, ast.Tuple) else None
                )
                of_frame = frame is not None and isinstance(part.value, ast.Name) and part.value.id == frame
                found.append((of_frame, site or Site(unit, value, f"column {column!r}", target="array")))
    if not found:
        return None
    preferred = [site for of_frame, site in found if of_frame] or [site for _, site in found]
    return replace(preferred[-1], name=f"column {column!r}", target="array")


def selected_column_site(units: list[SourceUnit], made: Site) -> Site | None:
    """Where the one DataFrame column an array fit was given only selects is computed: ``y_train =
    train["target"].values.astype("float32")`` after ``df["target"] = (df.rating - df.item_mean) / df.item_std``
    (s43b p1). None when `made` computes something itself, reads several columns, or no line assigns the column."""
    if made.column is not None or any(isinstance(n, ast.BinOp) for n in ast.walk(made.node)):
        return None
    selections = [
        n
        for n in ast.walk(made.node)
        if isinstance(n, ast.Subscript)
        and isinstance(n.slice, ast.Constant)
        and isinstance(n.slice.value, str)
    ]
    if len(selections) != 1:
        return None
    column = str(selections[0].slice.value)  # type: ignore[attr-defined]
    frame = selections[0].value.id if isinstance(selections[0].value, ast.Name) else None
    site = column_assignment_site(units, column, frame)
    return replace(site, column=column) if site is not None else None


def std_divisor(node: ast.AST) -> str | None:
    """The divisor of a division in `node` that is a standard deviation by its name (``df.item_std``,
    ``df["price_std"]``, ``sigma``), as written; None when no divisor is one."""
    for n in ast.walk(node):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div):
            text = ast.unparse(n.right)
            words = re.findall(r"[A-Za-z]+", text.lower())
            if any(w in ("std", "stddev", "stdev", "sd", "sigma") or w.endswith("std") for w in words):
                return text
    return None


def _key_texts(unit: SourceUnit, key: ast.expr, statement: ast.stmt, depth: int = 0) -> set[str]:
    """The strings a subscript key spells: a string written there, or one the code computes from a loop variable
    over strings it writes (``col + "_te"``, ``f"{col}_te"`` in ``for col in ["region", "plan"]``)."""
    if depth > 3:
        return set()
    if isinstance(key, ast.Constant):
        return {key.value} if isinstance(key.value, str) else set()
    if isinstance(key, ast.BinOp) and isinstance(key.op, ast.Add):
        left = _key_texts(unit, key.left, statement, depth + 1)
        right = _key_texts(unit, key.right, statement, depth + 1)
        return {a + b for a in left for b in right}
    if isinstance(key, ast.JoinedStr):
        texts = {""}
        for part in key.values:
            if isinstance(part, ast.FormattedValue) and part.conversion == -1 and part.format_spec is None:
                options = _key_texts(unit, part.value, statement, depth + 1)
            else:
                options = _key_texts(unit, part, statement, depth + 1)
            texts = {a + b for a in texts for b in options}
        return texts
    if isinstance(key, ast.Name):
        for loop in ast.walk(unit.tree):
            if (
                isinstance(loop, ast.For)
                and isinstance(loop.target, ast.Name)
                and loop.target.id == key.id
                and loop.lineno <= statement.lineno <= (loop.end_lineno or loop.lineno)
                and isinstance(loop.iter, (ast.List, ast.Tuple))
            ):
                return {
                    e.value
                    for e in loop.iter.elts
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)
                }
    return set()


def _element_assigned(units: list[SourceUnit], value: ast.expr, position: int, count: int) -> ast.expr | None:
    """The part of ``a, b = value`` assigned in `position`: an element of a tuple written there."""
    if isinstance(value, ast.Tuple) and len(value.elts) == count:
        return value.elts[position]
    return None


def _returned_by_own_function(units: list[SourceUnit], value: ast.expr, position: int | None) -> Site | None:
    """Where a function of the user's makes what a call of it returns (element `position` of a returned tuple):
    the last assignment of the returned name in that function (``train_enc = (s - train[target]) / (n - 1)``),
    or the returned expression itself. None when `value` is not a call of a function the code defines."""
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Name):
        return None
    for unit in units:
        for function in _functions(unit):
            if function.name != value.func.id:
                continue
            returned = [
                n.value for n in ast.walk(function) if isinstance(n, ast.Return) and n.value is not None
            ]
            if len(returned) != 1:
                return None
            result = returned[0]
            if position is not None:
                if not isinstance(result, ast.Tuple) or position >= len(result.elts):
                    return None
                result = result.elts[position]
            if isinstance(result, ast.Name):
                made = _last_assignment(unit, result.id, result.lineno)
                made_value = getattr(made, "value", None)
                if made is not None and isinstance(made_value, ast.expr):
                    return Site(unit, made_value, result.id, target="array")
            return Site(unit, result, function.name, target="array")
    return None


@dataclass
class GradientReversal:
    """A gradient reversal written with ``tf.custom_gradient`` (DANN's ``grad = -hp_lambda * dy``), and the
    strength above 1 the code gives it (``DANN(hp_lambda=10.0)``)."""

    reversal: Site  # the grad function's returned reversed gradient
    strength: Site  # the number given as the strength
    name: str  # the strength's name, as the code passes it
    value: float


# Names a reversal's strength goes by, beside the grad function's own: DANN's lambda, "grl_weight".
_REVERSAL_WORDS = ("lambda", "lambd", "reversal", "grl")


def _reversal_coefficient(function: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[ast.expr, str] | None:
    """(the returned reversed gradient, its coefficient's name) of a ``@tf.custom_gradient`` function whose grad
    returns ``-coefficient * dy`` (or ``dy * -coefficient``, ``-dy * self.coefficient``)."""
    if not any(
        (d.attr if isinstance(d, ast.Attribute) else d.id if isinstance(d, ast.Name) else "")
        == "custom_gradient"
        for d in function.decorator_list
    ):
        return None
    for grad in function.body:
        if not isinstance(grad, ast.FunctionDef) or not grad.args.args:
            continue
        upstream = grad.args.args[0].arg
        for returned in (
            n.value for n in ast.walk(grad) if isinstance(n, ast.Return) and n.value is not None
        ):
            first = returned.elts[0] if isinstance(returned, ast.Tuple) and returned.elts else returned
            negated = any(isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub) for n in ast.walk(first))
            if not negated or not any(isinstance(n, ast.Name) and n.id == upstream for n in ast.walk(first)):
                continue
            for node in ast.walk(first):
                if isinstance(node, ast.Name) and node.id != upstream and node.id not in ("tf", "np", "ops"):
                    return first, node.id
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                ):
                    return first, node.attr
    return None


def gradient_reversal(units: list[SourceUnit]) -> GradientReversal | None:
    """The user's gradient reversal and the strength above 1 the code passes it (a keyword of its coefficient's
    name or of a reversal's, ``hp_lambda=10.0``, last such call; else such a parameter's default); None when the
    code reverses no gradient or gives it no strength above 1."""
    reversal: tuple[SourceUnit, ast.expr, str] | None = None
    for unit in units:
        for function in _functions(unit):
            found = _reversal_coefficient(function)
            if found is not None:
                reversal = (unit, *found)
    if reversal is None:
        return None
    where, returned, coefficient = reversal

    def strength_name(name: str | None) -> bool:
        return name is not None and (name == coefficient or any(w in name.lower() for w in _REVERSAL_WORDS))

    given = number_given(units, strength_name, 1.0, "reversal")
    if given is None:
        return None
    site, name, value = given
    return GradientReversal(Site(where, returned, coefficient, target="reversal"), site, name, value)


def number_given(
    units: list[SourceUnit], accepts: Callable[[str], bool], above: float, target: str
) -> tuple[Site, str, float] | None:
    """(the number's site, its name, the value) of the last keyword argument of a name `accepts` given a number
    above `above` (``DANN(hp_lambda=10.0)``, a constant's name too: ``weight_decay=WD``); else such a parameter's
    default (``def __init__(self, weight_decay=5e3)``)."""
    given: list[tuple[Site, str, float]] = []
    defaults: list[tuple[Site, str, float]] = []
    for unit in units:
        for node in ast.walk(unit.tree):
            if isinstance(node, ast.Call):
                for item in node.keywords:
                    value = number(item.value)
                    if value is None and isinstance(item.value, ast.Name):
                        value = _constant_of(unit, item.value.id)
                    if item.arg is not None and accepts(item.arg) and value is not None and value > above:
                        given.append((Site(unit, item.value, item.arg, target=target), item.arg, value))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = node.args.args[len(node.args.args) - len(node.args.defaults) :]
                for argument, default in zip(arguments, node.args.defaults, strict=True):
                    value = number(default)
                    if accepts(argument.arg) and value is not None and value > above:
                        defaults.append(
                            (Site(unit, default, argument.arg, target=target), argument.arg, value)
                        )
    found = given or defaults
    return found[-1] if found else None


@dataclass
class HandWeightDecay:
    """A weight decay the step writes by hand (``v.assign_sub(lr * self.weight_decay * v)``) and the factor of 1 or
    more the code gives it (``weight_decay=5e3``, meant 5e-4)."""

    write: Site  # the decay's write
    factor: Site  # the number given as its factor
    name: str
    value: float


def _decay_factor_name(node: ast.AST, variable: str) -> str | None:
    """The name of a decay factor in a product that also holds `variable` (``lr * self.weight_decay * v``)."""
    names = [
        n.attr if isinstance(n, ast.Attribute) else n.id
        for n in ast.walk(node)
        if isinstance(n, (ast.Name, ast.Attribute))
    ]
    if variable not in names:
        return None
    return next((n for n in names if "decay" in n.lower() or n.lower() in ("wd", "l2", "lambda_wd")), None)


def hand_weight_decay(units: list[SourceUnit]) -> HandWeightDecay | None:
    """A decoupled weight decay written by hand (``v.assign_sub(lr * wd * v)``, ``v.assign(v - lr * wd * v)``)
    whose factor the code gives as 1 or more: each step multiplies the weights by 1 - lr * wd, negative and growing
    once lr * wd passes 2. None without one."""
    for unit in units:
        for node in calls(unit):
            func = node.func
            if (
                not isinstance(func, ast.Attribute)
                or func.attr not in ("assign_sub", "assign")
                or not node.args
            ):
                continue
            receiver = func.value
            variable = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", None)
            if not isinstance(variable, str):
                continue
            factor = _decay_factor_name(node.args[0], variable)
            if factor is None:
                continue
            given = number_given(units, factor.__eq__, 1.0, "regularizer")
            if given is not None:
                return HandWeightDecay(Site(unit, node, func.attr, target="regularizer"), *given)
    return None


@dataclass
class GrowingFactor:
    """A variable the program multiplies by a factor above 1 each time a line runs (a penalty method's
    ``mu.assign(mu * beta)`` with beta = 1.1, no cap): where, its name and the factor."""

    site: Site  # the assign call
    name: str
    factor: float


def growing_factor_site(units: list[SourceUnit]) -> GrowingFactor | None:
    """The last ``v.assign(v * c)`` (or ``v.assign(c * v)``, ``v.assign_add(v * d)`` is not looked at) whose factor
    c is a number above 1 or a name assigned one, with no min/clip around it; None without one."""
    found: list[GrowingFactor] = []
    for unit in units:
        for node in calls(unit):
            if called_name(node) != "assign" or not isinstance(node.func, ast.Attribute) or not node.args:
                continue
            target = ast.unparse(node.func.value)
            value = node.args[0]
            if not (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mult)):
                continue  # a min, clip or where around the product caps it
            sides = (value.left, value.right)
            texts = [ast.unparse(side) for side in sides]
            if target not in texts:
                continue
            other = sides[1 - texts.index(target)]
            factor = _constant_expression(unit, other)
            if factor is not None and factor > 1.0:
                found.append(GrowingFactor(Site(unit, node, target), target, factor))
    return found[-1] if found else None


_PREDICTING_CALLS = ("predict", "predict_on_batch", "predict_step")


def targets_predicted_by_the_model(site: Site) -> bool:
    """Whether the array a fit-target line writes (``targets[i, a] = r + gamma * max(next_q[i])``) was made by the
    model's own predictions in the same function (``targets = self.model.predict_on_batch(states)``): Q-learning's
    targets bootstrapped from the network being trained, which grow with its weights."""
    statement = next(
        (
            n
            for n in ast.walk(site.unit.tree)
            if isinstance(n, (ast.Assign, ast.AugAssign))
            and n.lineno <= site.line <= (n.end_lineno or n.lineno)
        ),
        None,
    )
    if statement is None:
        return False
    names = set(assigned_names(statement))
    scope: ast.AST = _innermost_function(_functions(site.unit), site.line) or site.unit.tree
    return any(
        isinstance(node, ast.Assign)
        and set(assigned_names(node)) & names
        and any(isinstance(c, ast.Call) and called_name(c) in _PREDICTING_CALLS for c in ast.walk(node.value))
        for node in ast.walk(scope)
    )


def sampler_counts_site(units: list[SourceUnit]) -> Site | None:
    """Where the counts a ``tf.random.fixed_unigram_candidate_sampler(unigrams=...)`` takes are made: the last
    assignment of the name given (``unigrams = [counter.get(i, 0) for i in range(VOCAB)]``), else the argument
    itself; its Site's name is the name or the argument as written. None without such a sampler."""
    for unit in units:
        for node in calls(unit):
            if called_name(node) != "fixed_unigram_candidate_sampler":
                continue
            given = keyword(node, "unigrams")
            if given is None:
                continue
            if isinstance(given, ast.Name):
                made = _last_value_of(unit, given.id)
                if made is not None:
                    return Site(unit, made, given.id)
            return Site(unit, given, ast.unparse(given))
    return None


@dataclass
class LargeLossWeight:
    """A loss weight given to compile (``loss_weights={"hours": 1e6}``) far above 1 and above the others: it
    multiplies that output's gradient by as much."""

    site: Site  # the weight's value
    output: str | None  # its key (the output's name), or its index in a list
    value: float


# A loss weight this large multiplies that output's gradients past what any usual rate is tuned for.
_LARGE_LOSS_WEIGHT = 100.0


def large_loss_weight(units: list[SourceUnit]) -> LargeLossWeight | None:
    """The largest loss weight given to ``compile(loss_weights=...)`` (a dict or a list of numbers) when it is at
    least 100 and 100 times the smallest other; None otherwise."""
    found: list[LargeLossWeight] = []
    for unit in units:
        for node in calls(unit):
            if called_name(node) != "compile":
                continue
            given = keyword(node, "loss_weights")
            if isinstance(given, ast.Name):
                given = _last_value_of(unit, given.id)
            if isinstance(given, ast.Dict):
                entries = [
                    (k.value if isinstance(k, ast.Constant) else ast.unparse(k), v)
                    for k, v in zip(given.keys, given.values, strict=True)
                    if k is not None
                ]
            elif isinstance(given, (ast.List, ast.Tuple)):
                entries = [(str(i), v) for i, v in enumerate(given.elts)]
            else:
                continue
            values = [(str(key), value, _constant_expression(unit, value)) for key, value in entries]
            numbers = [v for _, _, v in values if v is not None]
            if not numbers:
                continue
            key, node_value, largest = max(
                ((k, n, v) for k, n, v in values if v is not None), key=lambda t: t[2]
            )
            others = [v for v in numbers if v != largest] or [1.0]
            if largest >= _LARGE_LOSS_WEIGHT and largest >= _LARGE_LOSS_WEIGHT * max(min(others), 1e-12):
                found.append(LargeLossWeight(Site(unit, node_value, "loss_weights"), key, largest))
    return found[-1] if found else None


def _last_value_of(unit: SourceUnit, name: str) -> ast.expr | None:
    """The value last assigned to `name` in `unit` (``LOSS_WEIGHTS = {...}`` given as ``loss_weights=LOSS_WEIGHTS``)."""
    assigned = [
        node.value
        for node in ast.walk(unit.tree)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    ]
    return assigned[-1] if assigned else None


@dataclass
class ExpOfAVariable:
    """A variable the code reads through an exp (``tf.exp(logit_scale) * sims``) and starts at a value whose exp is
    large (``tf.Variable(1 / 0.07)``: CLIP's scale, where CLIP keeps its log)."""

    site: Site  # the variable's initial value
    name: str
    value: float


# An exp of a starting value past this (exp(6.9) = 1000) multiplies what it scales a thousandfold.
_LARGE_EXP_START = 6.9


def exp_of_a_large_variable(units: list[SourceUnit]) -> ExpOfAVariable | None:
    """A ``tf.Variable(c)`` (or ``self.add_weight`` with a Constant initializer is not looked at) the code reads as
    ``exp(name)`` with exp(c) above 1000; None without one."""
    read_through_exp = {
        argument.id
        for unit in units
        for node in calls(unit)
        if called_name(node) == "exp" and node.args
        for argument in [node.args[0]]
        if isinstance(argument, ast.Name)
    }
    for unit in units:
        for node in ast.walk(unit.tree):
            if not (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in read_through_exp
                and isinstance(node.value, ast.Call)
                and called_name(node.value) == "Variable"
                and node.value.args
            ):
                continue
            value = _constant_expression(unit, node.value.args[0])
            if value is not None and value > _LARGE_EXP_START:
                return ExpOfAVariable(
                    Site(unit, node.value.args[0], node.targets[0].id), node.targets[0].id, value
                )
    return None


@dataclass
class PositiveVariable:
    """A ``tf.Variable(c)`` with c > 0, made by the user's code, that a step's update carried below 0 (a dispersion,
    a scale, a variance learned as a raw variable): where it starts, the name the code gives it, and c."""

    site: Site  # the variable's initial value
    name: str
    start: float


def positive_variable_start(units: list[SourceUnit], path: str, read_code: str) -> PositiveVariable | None:
    """The ``name = tf.Variable(c, ...)`` with c > 0 of the variable the bundle keeps as `path`: by its
    ``name=`` keyword or the name (or attribute) it is assigned to; else the one such whose name the line that reads
    it (`read_code`) has. None when no one statement is it."""
    last = path.rsplit("/", 1)[-1].split(":", 1)[0]
    made: list[tuple[SourceUnit, ast.Call, str, str | None]] = []
    for unit in units:
        for node in ast.walk(unit.tree):
            if not (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], (ast.Name, ast.Attribute))
                and isinstance(node.value, ast.Call)
                and called_name(node.value) == "Variable"
            ):
                continue
            target = node.targets[0]
            given = keyword(node.value, "name")
            made.append(
                (
                    unit,
                    node.value,
                    target.id if isinstance(target, ast.Name) else target.attr,
                    given.value if isinstance(given, ast.Constant) and isinstance(given.value, str) else None,
                )
            )
    named = [m for m in made if last in (m[2], m[3])]
    if not named:
        named = [m for m in made if re.search(rf"\b{re.escape(m[2])}\b", read_code)]
    if len(named) != 1:
        return None
    unit, call, name, _ = named[0]
    start_node = keyword(call, "initial_value") or (call.args[0] if call.args else None)
    start = _constant_expression(unit, start_node) if start_node is not None else None
    if start_node is None or start is None or start <= 0:
        return None
    return PositiveVariable(Site(unit, start_node, name), name, start)


def peak_raised_site(units: list[SourceUnit], peak_names: frozenset[str]) -> Site | None:
    """A statement that multiplies a schedule's peak in place (SGDR's ``self.max_lr *= self.mult_factor`` at each
    restart, meant to shrink it), by a name of `peak_names`; the last such, or None."""
    found = [
        Site(unit, node.value, node.target.attr if isinstance(node.target, ast.Attribute) else node.target.id)
        for unit in units
        for node in ast.walk(unit.tree)
        if isinstance(node, ast.AugAssign)
        and isinstance(node.op, ast.Mult)
        and isinstance(node.target, (ast.Attribute, ast.Name))
        and (node.target.attr if isinstance(node.target, ast.Attribute) else node.target.id) in peak_names
    ]
    return found[-1] if found else None


def snake_case(name: str) -> str:
    """Keras's automatic layer name for a class: ``AttentionPooling`` -> ``attention_pooling``."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def _other_dtype(node: ast.Call, dtype: str | None) -> bool:
    """The construction pins a dtype other than the op's (``Dense(1, dtype="float32")`` cannot have made a float16
    op): a replayed model's layer names are shifted (``sequential_1/dense_1``), so the dtype is the surer sign."""
    value = keyword(node, "dtype")
    return (
        dtype is not None
        and isinstance(value, ast.Constant)
        and isinstance(value.value, str)
        and value.value.removeprefix("mixed_") != dtype
        and not (dtype == "float16" and value.value == "mixed_float16")
    )


def layer_site(units: list[SourceUnit], op_name: str, dtype: str | None = None) -> Site | None:
    """The construction of the layer an op belongs to, from the op's name (``sequential_1/dense_2_1/MatMul``): a
    call with ``name=`` one of the names the scope may stand for (`layer_names`: the call count Keras 3 adds in its
    train step taken off), else the call that built the (k+1)-th layer of the class whose automatic name is
    ``dense`` (``dense_k``), counting the calls in the order they run (`run_order`) and a call in a loop once per
    turn (`nth_built`). Innermost layer first."""
    order = run_order([unit.tree for unit in units])
    constructions = sorted(
        ((unit, node) for unit in units for node in calls(unit) if called_name(node)),
        key=lambda pair: order.get(id(pair[1]), (len(units),)),
    )
    times = times_run([unit.tree for unit in units])
    segments = [s for s in op_name.split("/")[:-1] if s]
    for position in reversed(range(len(segments))):
        names = layer_names(segments, position)
        for name in names:
            for unit, node in constructions:
                value = keyword(node, "name")
                if isinstance(value, ast.Constant) and value.value == name:
                    return Site(unit, node, called_name(node) or name)
        base, index = auto_name_parts(names[0])
        same = [
            (unit, node)
            for unit, node in constructions
            if snake_case(called_name(node) or "") == base
            and keyword(node, "name") is None
            and (called_name(node) or "")[:1].isupper()
            and not _other_dtype(node, dtype)
        ]
        if not same:
            continue
        # A call in a loop built one layer a turn (`times_run`); one in a loop of a length not written in the
        # code leaves the count unknown: no line rather than a wrong one.
        counts = [times.get(id(node), 1) for _, node in same]
        picked = nth_built([node for _, node in same], times, index)
        if picked is None and None not in counts:
            picked = same[-1][1]  # more built than the code shows (another file built some): the last
        for unit, node in same:
            if node is picked:
                return Site(unit, node, called_name(node) or base)
    return None


# Calls that bound a value from below or above (``tf.clip_by_value(p, eps, 1 - eps)``, ``tf.maximum(p, eps)``,
# ``K.clip``, ``keras.ops.clip``, ``np.clip``), and where each takes its bounds.
_CLIPS = frozenset({"clip_by_value", "clip", "maximum", "minimum"})
_LOG_CALLS = frozenset({"log", "reciprocal", "xlogy", "log1p"})
_CASTS = frozenset({"cast", "convert_to_tensor"})


@dataclass(frozen=True)
class ClipIntoLog:
    """A log's (or reciprocal's) argument bounded by a clip earlier in the same function, with the bounds' values:
    ``y_pred = tf.clip_by_value(y_pred, EPS, 1.0 - EPS)`` above ``tf.math.log(y_pred)``."""

    site: Site  # the clip call
    clipped: str  # the name the clip assigns (``y_pred``)
    argument: str  # the clip's input as written (``y_pred``)
    lower: float | None  # the bound from below (EPS), None when the clip has none
    upper: float | None  # the bound from above (1.0 - EPS)
    lower_text: str | None  # the bounds as written
    upper_text: str | None
    function: str | None  # the function holding both (``bce``), None at module level
    function_start: int | None  # the first line of its body: where its inputs can be cast
    cast_after: int | None = None  # the line of a cast of the clipped value after the clip, before the log


def _clip_bounds(unit: SourceUnit, call: ast.Call) -> tuple[ast.expr | None, ast.expr | None]:
    """(lower, upper) bound expressions of one clip call; a maximum's is its lower, a minimum's its upper."""
    name = called_name(call)
    args = list(call.args)
    if name in ("clip_by_value", "clip"):
        lower = args[1] if len(args) > 1 else None
        upper = args[2] if len(args) > 2 else None
        for key in ("clip_value_min", "x_min", "a_min", "min_value"):
            lower = keyword(call, key) or lower
        for key in ("clip_value_max", "x_max", "a_max", "max_value"):
            upper = keyword(call, key) or upper
        return lower, upper
    bound = next((a for a in args if _bound_value(unit, a) is not None), None)
    return (bound, None) if name == "maximum" else (None, bound)


def _clipped_input(unit: SourceUnit, call: ast.Call) -> ast.expr | None:
    """The value a clip bounds: the first argument that is no constant (through a nested clip)."""
    for argument in call.args:
        if isinstance(argument, ast.Call) and called_name(argument) in _CLIPS:
            return _clipped_input(unit, argument)
        if _bound_value(unit, argument) is None:
            return argument
    return None


def clip_into_log(units: list[SourceUnit], file: str, line: int, cell: int | None) -> ClipIntoLog | None:
    """The clip whose output the log (or reciprocal) at `line` takes, directly or as ``1 - p``: the last assignment
    of the log's argument before that line, in the same function, when it is a clip call with a numeric bound. A
    cast of the clipped name in between (``y_pred = tf.cast(y_pred, tf.float32)`` after the clip) is followed to
    the clip. None when the line's log takes no clipped name."""
    for unit in units:
        if unit.cell != cell or os.path.abspath(unit.file) != os.path.abspath(file):
            continue
        statements = [
            n
            for n in ast.walk(unit.tree)
            if isinstance(n, ast.stmt)
            and not isinstance(
                n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For, ast.While)
            )
            and n.lineno <= line <= (n.end_lineno or n.lineno)
        ]
        if not statements:
            continue
        statement = min(statements, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
        logs = [c for c in ast.walk(statement) if isinstance(c, ast.Call) and called_name(c) in _LOG_CALLS]
        for call in logs:
            # ``K.log(K.clip(y_pred, K.epsilon(), 1 - K.epsilon()))``: the clip written inside the log.
            inline = next(
                (
                    c
                    for a in call.args
                    for c in ast.walk(a)
                    if isinstance(c, ast.Call) and called_name(c) in _CLIPS
                ),
                None,
            )
            if inline is not None:
                argument = _clipped_input(unit, inline)
                clipped = ast.unparse(argument) if argument is not None else "its input"
                found = _clip_of(unit, inline, clipped, statement.lineno, None)
                if found is not None:
                    return found
        taken = [n.id for call in logs for a in call.args for n in ast.walk(a) if isinstance(n, ast.Name)]
        for name in dict.fromkeys(taken):
            found = _clip_assigned(unit, name, statement.lineno)
            if found is not None:
                return found
    return None


def _clip_assigned(
    unit: SourceUnit, name: str, before: int, depth: int = 0, cast_after: int | None = None
) -> ClipIntoLog | None:
    assignment = _last_assignment(unit, name, before)
    value = _assigned_value(assignment, name) if assignment is not None else None
    if assignment is None or not isinstance(value, ast.Call) or depth > 3:
        return None
    kind = called_name(value)
    if kind in _CASTS and value.args and isinstance(value.args[0], ast.Name):
        # Cast after the clip: the clip's rounding is done before the cast.
        return _clip_assigned(unit, value.args[0].id, assignment.lineno, depth + 1, assignment.lineno)
    if kind not in _CLIPS:
        return None
    return _clip_of(unit, value, name, assignment.lineno, cast_after)


def _bound_value(unit: SourceUnit, node: ast.expr) -> float | None:
    """A clip bound's value: arithmetic on numbers and constant names, Keras's ``epsilon()`` read as its default
    1e-7 (``1 - K.epsilon()``)."""

    class _Epsilon(ast.NodeTransformer):
        def visit_Call(self, call: ast.Call) -> ast.AST:
            if called_name(call) == "epsilon" and not call.args:
                return ast.copy_location(ast.Constant(1e-7), call)
            return self.generic_visit(call)

    return _constant_expression(unit, _Epsilon().visit(copy.deepcopy(node)))


def _clip_of(
    unit: SourceUnit, value: ast.Call, name: str, line: int, cast_after: int | None
) -> ClipIntoLog | None:
    """The clip call `value` (at `line`) as a `ClipIntoLog`, None when neither bound is a number."""
    kind = called_name(value)
    lower: ast.expr | None = None
    upper: ast.expr | None = None
    for call in ast.walk(value):
        if isinstance(call, ast.Call) and called_name(call) in _CLIPS:
            low, high = _clip_bounds(unit, call)
            lower, upper = lower or low, upper or high
    lower_value = _bound_value(unit, lower) if lower is not None else None
    upper_value = _bound_value(unit, upper) if upper is not None else None
    argument = _clipped_input(unit, value)
    if (lower_value is None and upper_value is None) or argument is None:
        return None
    function = _innermost_function(_functions(unit), line)
    body = [
        s
        for s in (function.body if function is not None else [])
        if not (
            isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)
        )
    ]
    return ClipIntoLog(
        site=Site(unit, value, kind or "clip", target="op"),
        clipped=name,
        argument=ast.unparse(argument),
        lower=lower_value,
        upper=upper_value,
        lower_text=ast.unparse(lower) if lower is not None else None,
        upper_text=ast.unparse(upper) if upper is not None else None,
        function=function.name if function is not None else None,
        function_start=body[0].lineno if body else None,
        cast_after=cast_after,
    )
