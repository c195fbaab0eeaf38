"""``ToolEnv``: a :class:`~purejaxppo.lm.envs.python_env.PythonTextEnv` over Python tools.

An episode: the row's prompt, after the tools' instructions (:mod:`~purejaxppo.lm.envs.tool_calls`),
is the first text. Each turn of the model is parsed; its calls run and their responses are the
observation (reward 0); a turn without a call is the final answer, scored by the verifier
against the row (default: the ``math`` reward on the ``answer`` column) and the episode
terminates. The ``max_turns``-th turn that is not a final answer truncates the episode (its
calls still run, so the state reached is whole).

Tools run in worker processes (:class:`~purejaxppo.lm.rewards.check_pool.CheckPool`, the pool
the reward checks use): a call past ``timeout`` seconds has its worker killed, from any thread;
an exception inside a tool, a crash of its process, an unknown tool and bad arguments each
become a response naming what happened (``error: ...``); a response longer than ``max_chars``
characters keeps its first ``max_chars`` and says how much was cut. Tools reach the workers
pickled (:func:`~purejaxppo.lm.rewards.check_pool.pickled`): with cloudpickle installed any
function or closure; without it, functions at the top level of an importable module.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple, Optional, Sequence, Union

from purejaxppo.lm.envs.python_env import TextStep
from purejaxppo.lm.envs.tool_calls import CallError, ToolFormat, get_format, parse_turn, signature
from purejaxppo.lm.rewards import check_pool as cp


class ToolCounts(NamedTuple):
    """Counts of what the tools did.

    Attributes:
      calls: calls sent to a tool (each of a turn's calls counts).
      timeouts: calls stopped at the time limit.
      cut: responses cut to ``max_chars``.
      parse_failures: calls that did not parse, named an unknown tool, or were over ``max_calls``.
      errors: calls that raised, crashed their process, or had bad arguments.
    """

    calls: int = 0
    timeouts: int = 0
    cut: int = 0
    parse_failures: int = 0
    errors: int = 0


def cut_marker(shown: int, total: int) -> str:
    """The marker after a response cut to ``shown`` of its ``total`` characters."""
    return f"\n[... output cut: {total - shown} of {total} characters not shown]"


class ToolRunner:
    """What a worker process runs: ``(name, positional, arguments) -> [ok, text, length]``, the
    tool's result (or its exception, ``Type: message``) as text cut to ``max_chars`` in the
    worker (a huge output never crosses the pipe) and its whole length.

    Args:
      tools: ``{name: callable}``.
      max_chars: the most characters sent back.
    """

    def __init__(self, tools: Mapping[str, Callable], max_chars: int):
        self.tools, self.max_chars = dict(tools), max_chars

    def __call__(self, name: str, positional: list, arguments: dict) -> list:
        try:
            text, ok = str(self.tools[name](*positional, **arguments)), True
        except (Exception, SystemExit) as e:  # the model sees it; the worker lives on
            text, ok = f"{type(e).__name__}: {e}", False
        return [ok, text[: self.max_chars], len(text)]


class ToolEnv:
    """A text environment where the model calls Python tools, then answers.

    Args:
      tools: ``{name: callable}``; names are Python identifiers; each callable takes its
        arguments as the model writes them (JSON values) and returns anything ``str`` renders.
      fmt: the tool-call format: ``"qwen"``, ``"plain"`` or a
        :class:`~purejaxppo.lm.envs.tool_calls.ToolFormat`.
      verifier: ``fn(prompts, completions, **columns) -> [float | None]`` scoring final
        answers (a reward function); default the ``math`` reward on ``answer_column``. A None
        score is an error (the row had no gold answer).
      answer_column: the default verifier's gold-answer column.
      prompt_column: the column holding each row's prompt (a string).
      max_turns: the model's turns per episode; the last one, when not a final answer, truncates.
      max_calls: the most calls run in one turn (:func:`~purejaxppo.lm.envs.tool_calls.parse_turn`).
      timeout: seconds per call; past it the call's worker is killed.
      max_chars: the most characters of one response (then a cut marker).
      workers: worker processes running calls at once.
      system: the system prompt's own text, put before the tools' instructions ("" for none).

    Attributes:
      tools, format, verifier, max_turns, max_calls, timeout, max_chars: as given (``format`` resolved).
      instructions: the tools' instructions (the start of every first text).
      counts: :class:`ToolCounts` since construction, updated by each :meth:`step`.
      turns: each episode's turns taken so far.
    """

    def __init__(
        self,
        tools: Mapping[str, Callable],
        fmt: Union[str, ToolFormat] = "qwen",
        verifier: Optional[Callable] = None,
        answer_column: str = "answer",
        prompt_column: str = "prompt",
        max_turns: int = 4,
        max_calls: int = 4,
        timeout: float = 5.0,
        max_chars: int = 1000,
        workers: int = 2,
        system: str = "",
    ):
        if not tools or not all(isinstance(n, str) and n.isidentifier() and callable(f) for n, f in tools.items()):
            raise ValueError("ToolEnv: tools must be a non-empty {name: callable} with Python identifiers as names")
        if max_turns < 1 or max_calls < 1 or max_chars < 1:
            raise ValueError(
                f"ToolEnv: need max_turns, max_calls, max_chars >= 1 (got {max_turns}, {max_calls}, {max_chars})"
            )
        if verifier is None:
            from purejaxppo.lm.rewards.math_answers import MathReward

            verifier = MathReward(answer_column)
        self.tools, self.format, self.verifier = dict(tools), get_format(fmt), verifier
        self.prompt_column, self.max_turns, self.max_calls = prompt_column, max_turns, max_calls
        self.timeout, self.max_chars = timeout, max_chars
        self.instructions = self.format.describe(self.tools, system)
        self.pool = cp.CheckPool(ToolRunner(self.tools, max_chars), workers, timeout)
        self._signatures = {n: signature(f) for n, f in self.tools.items()}
        self.counts, self._taken = ToolCounts(), ToolCounts()
        self.rows: list = []
        self.turns: list = []

    def close(self) -> None:
        """Stop the tools' worker processes (a later call starts new ones)."""
        self.pool.close()

    def take_counts(self) -> dict:
        """The counts since the last take (for metrics).

        Returns:
          ``{field of ToolCounts: float}``.
        """
        now, before, self._taken = self.counts, self._taken, self.counts
        return {k: float(a - b) for k, a, b in zip(now._fields, now, before)}

    def reset(self, rows: Sequence[Mapping[str, Any]]) -> list:
        """Start one episode per row.

        Args:
          rows: the dataset rows (their columns by name; ``prompt_column`` a string).

        Returns:
          Each episode's first text: the tools' instructions, then the row's prompt, in the format.

        Raises:
          ValueError: a row without its prompt string.
        """
        prompts = []
        for i, row in enumerate(rows):
            prompt = row.get(self.prompt_column)
            if not isinstance(prompt, str):
                raise ValueError(
                    f"ToolEnv: row {i} has no {self.prompt_column!r} string (its columns: {sorted(row)}); "
                    "pass prompt_column= to name the prompt's column"
                )
            prompts.append(prompt)
        self.rows, self.turns = [dict(r) for r in rows], [0] * len(prompts)
        return [self.format.prompt(self.instructions, p) for p in prompts]

    def step(self, actions: Sequence[str], active: Sequence[bool]) -> list:
        """One turn of every active episode (see the module).

        Args:
          actions: the model's turn per episode, as text (ignored where not ``active``).
          active: whether each episode is still running.

        Returns:
          One :class:`~purejaxppo.lm.envs.python_env.TextStep` per episode: a final answer's
          ``("", score, True, False)``; a call turn's ``(responses, 0.0, False, last turn)``;
          an inactive episode's ``("", 0.0, True, False)``.

        Raises:
          ValueError: ``actions`` / ``active`` of another length than the batch, or a None score.
        """
        if not len(actions) == len(active) == len(self.rows):
            raise ValueError(
                f"ToolEnv.step: {len(actions)} actions and {len(active)} flags for {len(self.rows)} episodes"
            )
        finals, bodies, tasks, where = [], {}, [], []
        n = dict(self.counts._asdict())
        for i, (text, on) in enumerate(zip(actions, active)):
            if not on:
                continue
            self.turns[i] += 1
            turn = parse_turn(text, self.format, list(self.tools), self.max_calls)
            if turn.final:
                finals.append(i)
                continue
            bodies[i] = [None] * len(turn.calls)
            for j, call in enumerate(turn.calls):
                bad = call.message if isinstance(call, CallError) else self._bad_arguments(call)
                if isinstance(call, CallError):
                    n["parse_failures"] += 1
                elif bad is not None:
                    n["errors"] += 1
                if bad is not None:
                    bodies[i][j] = f"error: {bad}"
                else:
                    tasks.append((call.name, list(call.positional), call.arguments))
                    where.append((i, j))
        for (i, j), task, result in zip(where, tasks, self.pool.run(tasks) if tasks else []):
            bodies[i][j] = self._response(task[0], result, n)
        n["calls"] += len(tasks)
        self.counts = ToolCounts(**n)
        scores = dict(zip(finals, self._scores(finals, actions)))
        out = []
        for i, on in enumerate(active):
            if not on:
                out.append(TextStep("", 0.0, True, False))
            elif i in scores:
                out.append(TextStep("", scores[i], True, False))
            else:
                obs = self.format.observation(actions[i], bodies[i])
                out.append(TextStep(obs, 0.0, False, self.turns[i] >= self.max_turns))
        return out

    def _bad_arguments(self, call) -> Optional[str]:
        sig = self._signatures[call.name]
        try:
            if sig is not None:
                sig.bind(*call.positional, **call.arguments)
        except TypeError as e:
            return f"bad arguments for {call.name}: {e} (its signature: {call.name}{sig})"
        return None

    def _response(self, name: str, result, n: dict) -> str:
        if result == cp.TIMEOUT:
            n["timeouts"] += 1
            return f"error: the tool {name!r} ran past its {self.timeout:g} s limit and was stopped"
        if result == cp.FAILED:
            n["errors"] += 1
            return f"error: the tool {name!r} crashed (its process died)"
        ok, text, total = result
        if not ok:
            n["errors"] += 1
        if total > len(text):
            n["cut"] += 1
            text += cut_marker(len(text), total)
        return text if ok else f"error: {text}"

    def _scores(self, finals: list, actions: Sequence[str]) -> list:
        if not finals:
            return []
        rows = [self.rows[i] for i in finals]
        columns = {k: [r.get(k) for r in rows] for k in {k for r in rows for k in r}}
        prompts = [r[self.prompt_column] for r in rows]
        scores = self.verifier(prompts, [actions[i] for i in finals], **columns)
        for i, s in zip(finals, scores):
            if s is None:
                raise ValueError(f"ToolEnv: the verifier gave no score for row {i} (None: has it a gold answer?)")
        return [float(s) for s in scores]
