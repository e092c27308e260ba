"""Reading a caprl run directory's log (``RUN_DIR/run.jsonl``) from Python.

``read(run_dir)`` gives the step and eval records the learner wrote, by the rules the
``caprl report`` command reads them with:

- the first line is the run's header (its config and versions);
- a torn last line (the run was stopped while writing it) is left out with a warning;
  damage anywhere else raises :class:`RunLogError` naming the file and line;
- where a resumed run repeated steps, the later attempt's records replace the earlier;
- ``null`` losses, rewards and metrics (JSON has no NaN) read as NaN;
- lines of a type this version does not know are skipped with a warning.

With pandas installed, ``steps`` and ``evals`` are DataFrames whose nested maps become
columns (``losses.total``, ``rewards.cider``, ``metrics.cider_d``); without it, or with
``as_frame=False``, they are lists of dicts.
"""

import json
import math
import os
import warnings
from dataclasses import dataclass, field

__all__ = ["Run", "RunLogError", "read"]

RUN_LOG_FILE = "run.jsonl"
# The line format this reader knows (the header's versions.run_log).
RUN_LOG_SCHEMA = 1
# Maps whose null values are NaN, per record type.
_NAN_MAPS = {"step": ("losses", "rewards"), "eval": ("metrics",)}


class RunLogError(ValueError):
    """The run log is missing or damaged; the message names the file and line."""


@dataclass
class Run:
    """One run's log: its header, step records and eval records (in step order)."""

    path: str
    header: dict
    steps: object
    evals: object
    warnings: list = field(default_factory=list)

    @property
    def config(self):
        """The run's config as the header recorded it (a dict)."""
        return self.header.get("config", {})


def read(run_dir, as_frame=None):
    """Reads ``run_dir/run.jsonl`` (or the file itself when given a path to it)."""
    path = os.fspath(run_dir)
    if os.path.isdir(path):
        path = os.path.join(path, RUN_LOG_FILE)
    try:
        with open(path, "rb") as f:
            raw_lines = f.read().split(b"\n")
    except FileNotFoundError:
        raise RunLogError(f"{path}: no run log here; give the run directory a caprl run "
                          "wrote (its run_dir), or the run.jsonl inside it") from None
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()
    last = len(raw_lines)
    notes, header, steps, evals = [], None, [], []
    for line_no, raw in enumerate(raw_lines, start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            if line_no == last and line_no > 1:
                notes.append(f"{path}:{line_no}: ignoring a truncated last line ({e}); "
                             "the run was probably stopped while writing it")
                continue
            raise RunLogError(f"{path}:{line_no}: not a JSON object: {e}") from None
        kind = record.pop("type", "")
        if header is None:
            if kind != "header":
                raise RunLogError(f"{path}:{line_no}: the first line is not the run log's header; "
                                  "this is not a run.jsonl written by caprl")
            version = record.get("versions", {}).get("run_log", RUN_LOG_SCHEMA)
            if version > RUN_LOG_SCHEMA:
                raise RunLogError(f"{path}: run log format {version} is newer than this reader "
                                  f"({RUN_LOG_SCHEMA}); upgrade the caprl package")
            header = record
        elif kind == "step":
            _nan_maps(record, "step")
            _replace_repeated(steps, record, lambda r: True)
        elif kind == "eval":
            _nan_maps(record, "eval")
            _replace_repeated(evals, record, lambda r: r.get("split") == record.get("split"))
        elif kind == "header":
            raise RunLogError(f"{path}:{line_no}: a second header line; two runs were "
                              "written into one run.jsonl")
        elif kind not in ("resume", "samples"):
            notes.append(f"{path}:{line_no}: skipping a line of unknown type {kind!r} "
                         "(written by a newer caprl?)")
    if header is None:
        raise RunLogError(f"{path}: the run log is empty (no header line)")
    for note in notes:
        warnings.warn(note, stacklevel=2)
    return Run(path, header, _table(steps, as_frame), _table(evals, as_frame), notes)


def _nan_maps(record, kind):
    for name in _NAN_MAPS[kind]:
        values = record.get(name)
        if isinstance(values, dict):
            record[name] = {k: math.nan if v is None else v for k, v in values.items()}


def _replace_repeated(records, record, same_series):
    """A resumed run may log a step again: its new record replaces the old one(s)."""
    step = record.get("step", 0)
    if records and records[-1].get("step", 0) >= step:
        records[:] = [r for r in records if r.get("step", 0) < step
                      or (r.get("step", 0) == step and not same_series(r))]
    records.append(record)


def _table(records, as_frame):
    if as_frame is False:
        return records
    try:
        import pandas as pd
    except ImportError:
        if as_frame:
            raise ImportError("as_frame=True needs pandas: pip install pandas") from None
        return records
    return pd.json_normalize(records) if records else pd.DataFrame()
