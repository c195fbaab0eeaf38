"""A reward written as a plain Python function on text, called from inside the compiled iteration.

``--reward FILE.py:FUNCTION`` (or ``module:FUNCTION``) names
``fn(prompts: list[str], responses: list[str], **columns) -> list[float | None]``: the decoded
prompt (padding dropped) and response (up to, not including, its first stop token; padding
dropped) of each row, one finite number (or None: not applicable, scored 0 and counted) per
row; the row's dataset columns reach it by name (TRL's convention,
:mod:`purejaxppo.lm.rewards.reward_columns`): the iteration carries each response's row id
(:meth:`TextReward.__call__`'s ``rows``) and :meth:`TextReward.bind_rows` gives the rows'
columns. Its score sits on the last valid response token as every token-level reward does.

Where it runs: through ``jax.pure_callback`` inside the compiled iteration (one host call per
iteration with every seed's rows at once), so the iteration stays one program and the chunk
loop, resume and the NaN stop are unchanged; the device waits while Python runs.
:attr:`TextReward.seconds` accumulates the host time (decoding and the function), which the run
reports as its own phase (``reward_fn_s`` in metrics.csv). Across devices and processes each
device's callback scores that device's rows (its share of the prompts) on its own host; a
process's statistics (:meth:`TextReward.take_counts`) are then summed over the processes by
the caller, so the logged means are every row's.

A function that raises, returns the wrong number of values or a non-finite one does not raise
inside XLA (a traceback through the runtime): the first such failure is kept in
:attr:`TextReward.error` (naming the function and the row) and the scores come back NaN,
which stops the run at that iteration with the last finite checkpoint kept; the caller turns
:attr:`error` into its message. A Ctrl-C or SIGTERM must not be raised in here either: the
caller's signal handling keeps it until the chunk is back (:mod:`purejaxppo.run.signals`),
and the caller's :attr:`TextReward.skip` then makes the calls left in the chunk return NaN
at once.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import os
import sys
import time
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.lm.checkpoints.tokenizer import strip_special
import purejaxppo.lm.rewards.reward_columns as rc


class RewardSpecError(ValueError):
    """``--reward`` names no usable function: the message says what is wrong and the form to use."""


def load_reward_function(spec: str) -> Callable:
    """Import the Python reward function a spec names.

    Args:
      spec: ``"path/to/file.py:name"`` or ``"package.module:name"``.

    Returns:
      The function, checked callable with two positional parameters
      ``fn(prompts: list[str], responses: list[str], **columns) -> list[float | None]`` (the
      columns it names are checked against the data's when rows are bound).

    Raises:
      RewardSpecError: a malformed spec, a missing file, a module that fails to import (its
        error named), no such function, or one that does not take ``(prompts, responses)``.
    """
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise RewardSpecError(f"{spec!r} must be FILE.py:FUNCTION or module:FUNCTION (e.g. reward.py:score)")
    if where.endswith(".py"):
        if not os.path.isfile(where):
            raise RewardSpecError(f"{where} does not exist (give FILE.py:FUNCTION with a path to a Python file)")
        module_name = f"_purejaxppo_reward_{abs(hash(os.path.abspath(where)))}"
        loader = importlib.util.spec_from_file_location(module_name, where)
        module = importlib.util.module_from_spec(loader)
        try:
            loader.loader.exec_module(module)
        except Exception as e:
            raise RewardSpecError(f"{where} failed to import: {type(e).__name__}: {e}") from None
        sys.modules[module_name] = module
    else:
        try:
            module = importlib.import_module(where)
        except Exception as e:
            raise RewardSpecError(f"module {where!r} failed to import: {type(e).__name__}: {e}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise RewardSpecError(f"{where} has no function {name!r}")
    try:
        inspect.signature(fn).bind([], [], **{c: None for c in rc.required_columns(fn)})
    except TypeError:
        raise RewardSpecError(f"{spec}: the function must take (prompts, responses), two lists of strings") from None
    except ValueError:  # a builtin without a signature: tried when called
        pass
    return fn


class RewardFunctionError(ValueError):
    """The reward function failed (raised, wrong length, non-finite): the message names it and the row."""


class TextReward:
    """A Python function on text as a token-level reward, called through
    ``jax.pure_callback`` from inside the compiled iteration (see the module).

    ``reward(prompt [..., B, P] int32, prompt_valid [..., B, P] bool, response [..., B, T]
    int32, response_mask [..., B, T] bool, rows=None [..., B] int32) -> [..., B] float32``:
    jittable and vmappable (every leading axis in one host call). ``rows``: each row's id in
    the bound :attr:`rows` (-1 or None: none), whose columns ``fn`` gets by name. A failing
    function does not raise inside XLA: its scores come back NaN and :attr:`error` says why
    (:meth:`raise_if_failed` raises it).

    Args:
      fn: ``fn(prompts: list[str], responses: list[str], **columns) -> list[float | None]``,
        one finite number or None (not applicable: scored 0, counted) per row
        (:func:`load_reward_function`, :mod:`purejaxppo.lm.rewards.reward_columns`).
      name: how errors name ``fn``.
      tokenizer: a :class:`~purejaxppo.lm.checkpoints.tokenizer.TextTokenizer` (``decode``,
        ``stop_ids``, ``pad_id``).

    Attributes:
      fn, name, tokenizer: as given.
      rows: the dataset's rows' columns, ``({name: value}, ...)`` indexed by row id
        (:meth:`bind_rows`; empty: none).
      error: the first failure's message (naming the function and the row), or None.
      seconds: the host time spent so far (decoding and the function).
      skip: ``() -> bool``, set by the caller (default: never): while true, a call returns NaN
        without calling ``fn`` (the run is stopping: a signal arrived during a call, and the
        caller discards what the rest of the chunk scores).
    """

    def __init__(self, fn: Callable, name: str, tokenizer):
        self.fn, self.name, self.tokenizer = fn, name, tokenizer
        self.error: Optional[str] = None
        self.seconds = 0.0
        self.skip: Callable[[], bool] = lambda: False
        self.rows: tuple = ()
        self._names: tuple = ()
        self.tally = rc.Tally()

    def bind_rows(self, rows) -> None:
        """The dataset's rows, ``[{column: value}, ...]`` indexed by row id: row ``i``'s columns
        reach ``fn`` with each response the iteration draws from row ``i``.

        Args:
          rows: a sequence of dicts (:attr:`~purejaxppo.lm.data.prompts.PromptTable.columns`).

        Raises:
          RewardSpecError: ``fn`` needs a column (a parameter without a default) the rows lack.
        """
        self.rows = tuple(rows)
        self._names = tuple(dict.fromkeys(k for r in self.rows for k in r))
        missing = [c for c in rc.required_columns(self.fn) if c not in self._names and c != "completion_ids"]
        if missing:
            raise RewardSpecError(
                f"the reward function {self.name} takes the column {missing[0]!r}, which the data lacks "
                f"(its columns: {', '.join(self._names) or 'none'}); map one to it or give it a default"
            )

    def take_stats(self) -> dict:
        """Host side: the statistics since the last take, as metric columns
        (:meth:`stats_of` of :meth:`take_counts`).

        Returns:
          ``{name: float}``; empty when nothing was scored since the last take.
        """
        return self.stats_of(self.take_counts())

    def take_counts(self) -> dict:
        """Host side: the additive counts since the last take (this reward's, its function's
        under ``"fn."``). Each process of a run scores only its own rows: the counts of all
        of them, summed key by key, give :meth:`stats_of` the statistics of every row.

        Returns:
          ``{key: float}``.
        """
        counts = {f"own.{k}": v for k, v in self.tally.take().items()}
        if callable(getattr(self.fn, "take_counts", None)):
            counts.update({f"fn.{k}": v for k, v in self.fn.take_counts().items()})
        return counts

    def stats_of(self, counts: dict) -> dict:
        """The metric columns of (summed) :meth:`take_counts` counts: ``reward_scored`` (the
        fraction of responses scored, not None); with a reward model beside the function
        (:meth:`__call__`'s ``model_scores``), ``reward_model_mean`` and ``reward_model_scored``
        (1: it scores every response); for a
        :func:`~purejaxppo.lm.rewards.reward_mix.combine`, each reward's mean and fraction
        scored (:meth:`~purejaxppo.lm.rewards.reward_mix.CombinedReward.stats_of`); a
        built-in's counts as ``reward_<name>_<count>`` (``reward_math_timeouts``).

        Returns:
          ``{name: float}``.
        """
        own = {k[4:]: v for k, v in counts.items() if k.startswith("own.")}
        fn = {k[3:]: v for k, v in counts.items() if k.startswith("fn.")}
        out = {}
        if own.get("rows"):
            out["reward_scored"] = rc.ratio(own.get("scored", 0.0), own["rows"])
            if "model_rows" in own:
                out["reward_model_mean"] = rc.ratio(own.get("model_sum", 0.0), own["model_rows"])
                out["reward_model_scored"] = rc.ratio(own["model_rows"], own["rows"])
        if callable(getattr(self.fn, "stats_of", None)):  # a combination: its rewards' own columns
            return {**out, **self.fn.stats_of(fn)}
        if fn:  # a built-in reward's counts (timeouts, ...)
            name = getattr(self.fn, "__name__", "fn")
            out.update({f"reward_{name}_{k}": v for k, v in fn.items()})
        return out

    def columns(self, rows, completion_ids: list) -> dict:
        """Host side: ``{column: [value per response]}`` of the row ids ``rows`` (None where a
        row has no such column, or the id is -1) and ``completion_ids``."""
        picked = [self.rows[i] if 0 <= i < len(self.rows) else {} for i in np.asarray(rows).tolist()]
        return {**{k: [r.get(k) for r in picked] for k in self._names}, "completion_ids": completion_ids}

    def texts(self, prompt, prompt_valid, response, response_mask, ids: bool = False) -> tuple:
        """Host side: the decoded prompts and responses of ``[N, P]`` / ``[N, T]`` rows (and,
        with ``ids``, the responses' token ids, stop and padding stripped)."""
        tok = self.tokenizer
        prompts = [tok.decode([int(t) for t, v in zip(p, pv) if v]) for p, pv in zip(prompt, prompt_valid)]
        kept = [
            strip_special([int(t) for t, m in zip(r, rm) if m], tok.stop_ids, tok.pad_id)
            for r, rm in zip(response, response_mask)
        ]
        responses = [tok.decode(x) for x in kept]
        return (prompts, responses, kept) if ids else (prompts, responses)

    def raise_if_failed(self) -> None:
        """:class:`RewardFunctionError` when a call has failed (host side, after a compiled call)."""
        if self.error is not None:
            raise RewardFunctionError(self.error)

    def _host(self, prompt, prompt_valid, response, response_mask, rows, *model_scores):
        lead = prompt.shape[:-1]
        n = int(np.prod(lead))
        if self.error is not None or self.skip():  # the run is stopping: no more calls
            return np.full(lead, np.nan, np.float32)
        t0 = time.perf_counter()
        try:
            prompts, responses, ids = self.texts(
                *(np.asarray(x).reshape(n, -1) for x in (prompt, prompt_valid, response, response_mask)), ids=True
            )
            out = self._call(prompts, responses, self.columns(np.asarray(rows).reshape(n), ids))
            for scores in model_scores:  # logged only: the program adds them to the sum
                self.tally.add(model_sum=math.fsum(np.asarray(scores, np.float64).reshape(n)), model_rows=n)
        finally:
            self.seconds += time.perf_counter() - t0
        return out.reshape(lead)

    def _call(self, prompts, responses, columns: Optional[dict] = None) -> np.ndarray:
        columns = {} if columns is None else columns
        try:
            values = self.fn(prompts, responses, **rc.reward_kwargs(self.fn, columns))
        except Exception as e:
            self.error = self._which_row(prompts, responses, columns, e)
            return np.full(len(prompts), np.nan, np.float32)
        try:
            values = rc.check_values(values, self.name, prompts, responses)
        except ValueError as e:
            self.error = str(e)
            return np.full(len(prompts), np.nan, np.float32)
        scored = [v is not None for v in values]
        self.tally.add(rows=len(values), scored=sum(scored))
        return np.asarray([0.0 if v is None else v for v in values], np.float32)

    def _which_row(self, prompts, responses, columns, error) -> str:
        """The message for a raise: the first row that raises alone, else the whole batch's error."""
        for i, (p, r) in enumerate(zip(prompts, responses)):
            try:
                self.fn([p], [r], **rc.reward_kwargs(self.fn, {k: v[i : i + 1] for k, v in columns.items()}))
            except Exception as e:
                return (
                    f"the reward function {self.name} raised {type(e).__name__}: {e} on row {i} (prompt {p!r}, "
                    f"response {r!r})"
                )
        return (
            f"the reward function {self.name} raised {type(error).__name__}: {error} on a batch of {len(prompts)} rows"
        )

    def __call__(self, prompt, prompt_valid, response, response_mask, rows=None, model_scores=None):
        """The scores, ``[..., B]`` float32 (see the class).

        Args:
          prompt, prompt_valid: ``[..., B, P]``; response, response_mask: ``[..., B, T]``.
          rows: ``[..., B]`` int32, each row's id in :attr:`rows` (-1: none); None: none.
          model_scores: ``[..., B]``, a reward model's scores of the same responses, computed
            in the program beside this reward: only logged here (``reward_model_mean``), not
            added; None: none.

        Returns:
          ``[..., B]`` float32: ``fn``'s numbers (None as 0; NaN after a failure).
        """
        shape = jax.ShapeDtypeStruct(prompt.shape[:-1], jnp.float32)
        rows = jnp.full(prompt.shape[:-1], -1, jnp.int32) if rows is None else jnp.asarray(rows, jnp.int32)
        logged = () if model_scores is None else (jnp.asarray(model_scores, jnp.float32),)
        return jax.pure_callback(
            self._host, shape, prompt, prompt_valid, response, response_mask, rows, *logged, vmap_method="broadcast_all"
        )
