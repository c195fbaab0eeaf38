"""Run kinds: ONE registry of what a run folder can hold, and how every command treats it.

A run kind (plain runs and sweeps, PBT, token-level PPO, ...) is one object meeting
:class:`RunKind`, registered once by its own module in :mod:`purejaxppo.programs` (every
module there named ``*_kind.py`` is loaded by :mod:`purejaxppo.programs.kinds`). Commands
never compare kind names: they look the folder's kind up here (:func:`kind_of`,
:func:`kind_named`) and ask it, or ask which kinds offer an optional method (:func:`offering`).
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Protocol, Tuple

from purejaxppo.run.checkpoint import CheckpointError


class Loaded(NamedTuple):
    """A run folder's trained state: ``record`` (its :class:`~purejaxppo.run.record.RunRecord`),
    ``runner`` (the per-run training state ``[R, ...]``), ``agent_fns`` (what plays it: a
    control run's ``PPO``; a token-level run's ``(lm, task)``), the ``checkpoint`` read and
    its ``update``."""

    record: Any
    runner: Any
    agent_fns: Any
    checkpoint: str
    update: int


class EvalRequest(NamedTuple):
    """The ``eval`` command's options: ``episodes`` per run (None: the kind's default),
    ``stochastic`` (sample instead of the mode), ``seed``, ``member`` (None: all, or the
    kind's default), ``gif`` (a path: render one episode of run 0), ``protocol`` (a named
    reference protocol, recorded in the summary), ``checkpoint`` (None: the newest). Fields a kind does not use stay None/False."""

    episodes: Optional[int] = None
    stochastic: bool = False
    seed: int = 0
    member: Optional[int] = None
    gif: Optional[str] = None
    protocol: Optional[str] = None
    checkpoint: Optional[str] = None


class Lazy:
    """A record class (``from_dict``; called: its defaults) imported when first used, so that a
    kind's module stays light to import (every kind is registered whenever programs load)."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def _cls(self):
        import importlib

        return getattr(importlib.import_module(self.module), self.name)

    def from_dict(self, d: dict):
        return self._cls().from_dict(d)

    def __call__(self):
        return self._cls()()


class RunKind(Protocol):
    """One kind of run. Contract:

    * ``names``: the names ``config.json`` records for it (``kind``); a record without one (an
      old folder) belongs to the kind registered with ``default=True``, which says its name
      (:meth:`name_of`).
    * ``command``: the CLI command that starts and resumes it (``python -m purejaxppo COMMAND
      --resume RUN_DIR``); ``what``: the kind in words, for messages.
    * ``config_type``/``settings_type``: the classes its record holds (``from_dict``/``to_dict``;
      ``settings_type`` None: no settings).
    * ``headline``: ``(metric, name)``: the column that sums a run up (plot's default metric).
    * ``warm_start``: the checkpoint path prefix of the per-run training state another run
      can start from (``""``: the state is the runner), or None: it cannot start a control run.
    * ``program(record, *, num_devices, split, executables=None) -> RunProgram``: the compiled
      program that continues the record.
    * ``resume(run_dir, record, **kwargs) -> RunResult``: continue the folder (``kwargs``: the
      loop's overrides: ``on_chunk``, ``stop_after``, ``loggers``, ``program``, ...).
    * ``load(run_dir, record, checkpoint=None) -> Loaded``: its newest (or given) checkpoint.
    * ``evaluate(run_dir, record, request) -> (summary dict, text lines)``: the ``eval``
      command's report (``request``: an :class:`EvalRequest`; a kind refuses the options that do
      not apply to it with :class:`~purejaxppo.config.ConfigError`, before any work).
    * ``report(result, run_dir)``: the closing lines after training or a resume.
    * optional ``initial_policy(run_dir, record, run) -> (params, update, checkpoint)``: run
      ``run``'s language-model policy at the newest checkpoint, for a token-level run to start
      from (``rlhf --init-from``) and written out by ``export`` (a kind offering it also
      gives the model as ``load(...).agent_fns.lm``). A kind without it holds no
      language-model policy: neither command takes its folders.
    """

    names: Tuple[str, ...]
    command: str
    what: str
    config_type: type
    settings_type: Optional[type]
    headline: Tuple[str, str]
    warm_start: Optional[str]

    def name_of(self, raw: dict) -> str: ...

    def program(self, record, *, num_devices: int, split: str, executables: Optional[str] = None): ...

    def resume(self, run_dir: str, record, **kwargs): ...

    def load(self, run_dir: str, record, checkpoint: Optional[str] = None) -> Loaded: ...

    def evaluate(self, run_dir: str, record, request: EvalRequest) -> tuple: ...

    def report(self, result, run_dir: str) -> None: ...


_KINDS: Dict[str, RunKind] = {}
_DEFAULT: list = []


def register(kind: RunKind, default: bool = False) -> RunKind:
    """Make folders recording any of ``kind.names`` readable by every command; ``default``: it
    also reads records without a ``kind`` (folders from before kinds were recorded)."""
    for name in kind.names:
        _KINDS[name] = kind
    if default:
        _DEFAULT[:] = [kind]
    return kind


def kind_named(name: str) -> RunKind:
    if name not in _KINDS:
        raise CheckpointError(
            f"this folder holds a {name!r} run, which this purejaxppo does not know (known kinds: "
            f"{', '.join(sorted(_KINDS))}; written by a newer purejaxppo?); nothing was changed"
        )
    return _KINDS[name]


def kind_of(raw: dict) -> Tuple[RunKind, str]:
    """``(kind, recorded name)`` of a ``config.json`` or checkpoint ``meta.json`` (``raw``)."""
    name = raw.get("kind")
    if name is None:
        if not _DEFAULT:
            raise CheckpointError("no run kinds are registered (import purejaxppo.programs.kinds)")
        return _DEFAULT[0], _DEFAULT[0].name_of(raw)
    return kind_named(name), name


def known() -> Dict[str, RunKind]:
    return dict(_KINDS)


def offering(method: str) -> Tuple[RunKind, ...]:
    """The registered kinds that offer the optional ``method`` of :class:`RunKind` (e.g.
    ``initial_policy``), each once, in the order they were registered: what a command that
    needs it names when it refuses a folder of another kind."""
    found = {id(k): k for k in _KINDS.values() if callable(getattr(k, method, None))}
    return tuple(found.values())


def resume_hint(raw: dict, run_dir: str) -> str:
    """The command that continues the folder whose record is ``raw`` (generic if its kind is unknown)."""
    try:
        return f"python -m purejaxppo {kind_of(raw)[0].command} --resume {run_dir}"
    except CheckpointError:
        return f"the command that wrote it, with --resume {run_dir}"
