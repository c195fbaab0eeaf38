"""A reward written as a plain Python function on text, called from inside the compiled iteration.

``--reward FILE.py:FUNCTION`` (or ``module:FUNCTION``) names
``fn(prompts: list[str], responses: list[str]) -> list[float]``: the decoded prompt (padding
dropped) and response (up to, not including, its first stop token; padding dropped) of each
row, one finite number per row. Its score sits on the last valid response token as every
token-level reward does.

Where it runs: through ``jax.pure_callback`` inside the compiled iteration (one host call per
iteration with every seed's rows at once), so the iteration stays one program and the chunk
loop, resume and the NaN stop are unchanged; the device waits while Python runs.
:attr:`TextReward.seconds` accumulates the host time (decoding and the function), which the run
reports as its own phase (``reward_fn_s`` in metrics.csv).

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


class RewardSpecError(ValueError):
    """``--reward`` names no usable function: the message says what is wrong and the form to use."""


def load_reward_function(spec: str) -> Callable:
    """Import the Python reward function a spec names.

    Args:
      spec: ``"path/to/file.py:name"`` or ``"package.module:name"``.

    Returns:
      The function, checked callable with two positional parameters
      ``fn(prompts: list[str], responses: list[str]) -> list[float]``.

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
        inspect.signature(fn).bind([], [])
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
    int32, response_mask [..., B, T] bool) -> [..., B] float32``: jittable and vmappable
    (every leading axis in one host call). A failing function does not raise inside XLA: its
    scores come back NaN and :attr:`error` says why (:meth:`raise_if_failed` raises it).

    Args:
      fn: ``fn(prompts: list[str], responses: list[str]) -> list[float]``, one finite number
        per row (:func:`load_reward_function`).
      name: how errors name ``fn``.
      tokenizer: a :class:`~purejaxppo.lm.checkpoints.tokenizer.TextTokenizer` (``decode``,
        ``stop_ids``, ``pad_id``).

    Attributes:
      fn, name, tokenizer: as given.
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

    def texts(self, prompt, prompt_valid, response, response_mask) -> tuple:
        """Host side: the decoded prompts and responses of ``[N, P]`` / ``[N, T]`` rows."""
        tok = self.tokenizer
        prompts = [tok.decode([int(t) for t, v in zip(p, pv) if v]) for p, pv in zip(prompt, prompt_valid)]
        responses = [
            tok.decode(strip_special([t for t, m in zip(r, rm) if m], tok.stop_ids, tok.pad_id))
            for r, rm in zip(response, response_mask)
        ]
        return prompts, responses

    def raise_if_failed(self) -> None:
        """:class:`RewardFunctionError` when a call has failed (host side, after a compiled call)."""
        if self.error is not None:
            raise RewardFunctionError(self.error)

    def _host(self, prompt, prompt_valid, response, response_mask):
        lead = prompt.shape[:-1]
        rows = int(np.prod(lead))
        if self.error is not None or self.skip():  # the run is stopping: no more calls
            return np.full(lead, np.nan, np.float32)
        t0 = time.perf_counter()
        try:
            prompts, responses = self.texts(
                *(np.asarray(x).reshape(rows, -1) for x in (prompt, prompt_valid, response, response_mask))
            )
            out = self._call(prompts, responses)
        finally:
            self.seconds += time.perf_counter() - t0
        return out.reshape(lead)

    def _call(self, prompts, responses) -> np.ndarray:
        bad = np.full(len(prompts), np.nan, np.float32)
        try:
            values = self.fn(prompts, responses)
        except Exception as e:
            self.error = self._which_row(prompts, responses, e)
            return bad
        try:
            values = [float(v) for v in values]
        except (TypeError, ValueError) as e:
            self.error = f"the reward function {self.name} must return a list of numbers ({e})"
            return bad
        if len(values) != len(prompts):
            self.error = (
                f"the reward function {self.name} returned {len(values)} values for {len(prompts)} rows; "
                "return one number per (prompt, response) pair"
            )
            return bad
        for i, v in enumerate(values):
            if not math.isfinite(v):
                self.error = (
                    f"the reward function {self.name} returned {v} for row {i} (prompt {prompts[i]!r}, "
                    f"response {responses[i]!r}); return finite numbers"
                )
                return bad
        return np.asarray(values, np.float32)

    def _which_row(self, prompts, responses, error) -> str:
        """The message for a raise: the first row that raises alone, else the whole batch's error."""
        for i, (p, r) in enumerate(zip(prompts, responses)):
            try:
                self.fn([p], [r])
            except Exception as e:
                return (
                    f"the reward function {self.name} raised {type(e).__name__}: {e} on row {i} (prompt {p!r}, "
                    f"response {r!r})"
                )
        return (
            f"the reward function {self.name} raised {type(error).__name__}: {error} on a batch of {len(prompts)} rows"
        )

    def __call__(self, prompt, prompt_valid, response, response_mask):
        shape = jax.ShapeDtypeStruct(prompt.shape[:-1], jnp.float32)
        return jax.pure_callback(
            self._host, shape, prompt, prompt_valid, response, response_mask, vmap_method="broadcast_all"
        )
