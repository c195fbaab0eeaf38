"""Evaluation during an RLHF run: greedy responses to a fixed prompt set, and sample generations.

:class:`RLHFEvaluator` meets :class:`~purejaxppo.run.protocol.Evaluator`: every ``every``
iterations each run answers the same ``batch`` prompts greedily (keys apart from training's,
so the training numbers do not change); ``metrics.csv`` gets ``eval_score`` and
``eval_<diagnostic>`` columns (NaN at the other iterations), and ``samples.txt`` in the run
folder gets a few of run 0's prompts and answers (decoded text for a text task).

``samples.txt`` holds one block per iteration it shows, in order, each under a
``# iteration N, run 0, greedy`` line: every evaluation's, and the final iteration's
(:func:`final_samples`, also without an evaluation there). A block is written whole (a
signal waits for it), and an evaluation redone after a resume replaces the blocks from its
iteration on, so the file never shows an iteration twice.

pass@k (:class:`PassAtKSettings`, off by default): at the same evaluations each run also
samples ``pass_samples`` (``n``) completions of each of ``pass_prompts`` fixed prompts (a text
task's first evaluation prompts, a built-in task's drawn with ``EVAL_KEY``) at ``pass_temperature`` (keys apart from training's and the same at every evaluation), scores
each with the task's reward (correct where ``>= pass_threshold``) and gets ``eval_pass@K``
columns for each ``K`` of ``pass_k`` and an ``eval_mean@N`` column
(:func:`~purejaxppo.lm.ppo.pass_at_k_eval.sample_and_score`);
``eval_samples.jsonl`` beside ``samples.txt`` gets run 0's prompts, completions and scores,
one line per prompt (:func:`write_eval_samples`: an evaluation redone after a resume replaces
the lines from its iteration on).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.config import ConfigError
from purejaxppo.config.fields import check_fields, setting, spelled
from purejaxppo.lm.models.sampling import sample_response
from purejaxppo.lm.ppo.pass_at_k_eval import (
    PassAtK,
    decoded,
    evaluation_prompts,
    evaluation_rows,
    resolved_ks,
    sample_and_score,
    task_scores,
)
from purejaxppo.lm.ppo.token_ppo import policy_params
from purejaxppo.run.compile_once import signature
from purejaxppo.run.guards import interrupts_deferred
from purejaxppo.run.periodic_eval import PeriodicEvaluator

EVAL_KEY = 0x5EED  # the evaluation prompts' key: the same prompts at every evaluation and every run
SHOWN = 4  # sample generations written per evaluation
PASS_KEY = 0x9A55  # the pass@k samples' key: the same draws at every evaluation and every run
EVAL_SAMPLES = "eval_samples.jsonl"  # pass@k's samples with their scores, beside samples.txt


@dataclasses.dataclass(frozen=True)
class PassAtKSettings:
    """pass@k at every evaluation (off while ``pass_samples`` is 0): the fields' declarations
    are the flags' (``--pass-samples``, ``--pass-k``, ...)."""

    pass_samples: int = setting(
        0,
        "pass@k: sample N completions of each evaluation prompt at every --eval-every evaluation, scored by "
        f"the task's reward: metrics.csv gets eval_pass@K and eval_mean@N, {EVAL_SAMPLES} the samples (0 = off)",
        lo=0,
        metavar="N",
    )
    pass_k: tuple = setting(
        (), "the k of each pass@k column, comma-separated, each <= --pass-samples (none: 1,N)", metavar="K,K"
    )
    pass_prompts: int = setting(0, "prompts of each pass@k evaluation (0: the greedy evaluation's)", lo=0)
    pass_temperature: float = setting(1.0, "the pass@k samples' temperature", lo=0, lo_open=True)
    pass_threshold: float = setting(
        1.0, "a pass@k sample counts as correct where its score is >= this", lo=0, lo_open=True
    )

    @classmethod
    def declared(cls, name: str) -> dataclasses.Field:
        """A fresh field of the declaration of ``name`` (default, help, range), for a settings
        record that holds these fields itself: ``pass_k: tuple = PassAtKSettings.declared("pass_k")``."""
        f = cls.__dataclass_fields__[name]
        return dataclasses.field(default=f.default, metadata=f.metadata)

    @classmethod
    def of(cls, settings) -> Optional["PassAtKSettings"]:
        """These fields of ``settings`` (a record holding them under the same names; a field
        it lacks at its default), or None when pass@k is off."""
        own = cls(**{f.name: getattr(settings, f.name, f.default) for f in dataclasses.fields(cls)})
        return dataclasses.replace(own, pass_k=tuple(own.pass_k)) if own.pass_samples else None

    def ks(self) -> tuple:
        """The k's, ascending (``pass_k``, or 1 and ``pass_samples``)."""
        return resolved_ks(self.pass_k, self.pass_samples)

    def check(self, flag_of=None) -> "PassAtKSettings":
        """Each field's range, then each k against ``pass_samples``: :class:`ConfigError` naming
        the field (or, with ``flag_of``, its flag)."""
        check_fields(self, flag_of)
        if not math.isfinite(self.pass_threshold):
            raise ConfigError(f"{spelled('pass_threshold', self.pass_threshold, flag_of)} must be a finite number")
        if self.pass_samples:
            try:
                self.ks()
            except ValueError:
                raise ConfigError(
                    f"{_shown_ks(self.pass_k, flag_of)}: each k must be in [1, "
                    f"{spelled('pass_samples', flag_of=flag_of)} = {self.pass_samples}]"
                ) from None
        return self


def _shown_ks(ks: tuple, flag_of) -> str:
    """``--pass-k 1,8`` as typed (``pass_k=(1, 8)`` for the Python API)."""
    return f"{flag_of('pass_k')} {','.join(map(str, ks))}" if flag_of else spelled("pass_k", ks)


class RLHFEvaluator(PeriodicEvaluator):
    def __init__(
        self,
        task,
        lm,
        every: int,
        batch: int,
        samples_path: Optional[str] = None,
        pass_at_k: Optional[PassAtKSettings] = None,
    ):
        super().__init__(every)  # the columns: the task's statistics, known at compile
        self.task, self.batch, self.samples_path = task, batch, samples_path
        # a text task's own evaluation prompts, else the task's drawn with EVAL_KEY
        prompt, valid = evaluation_prompts(task, batch, jax.random.PRNGKey(EVAL_KEY))
        rows = evaluation_rows(task, batch)  # a text task's rewards read the rows' columns

        def one(params):
            response, _, mask = sample_response(
                lm,
                params,
                jax.random.PRNGKey(0),
                prompt,
                valid,
                task.max_new,
                jnp.asarray(task.stop_ids),
                task.pad_id,
                top_k=1,
            )  # greedy
            stats = {
                "score": jnp.mean(task_scores(task, prompt, valid, response, mask, rows)),
                **task.diagnostics(prompt, valid, response, mask),
            }
            shown = (prompt[:SHOWN], valid[:SHOWN], jnp.where(mask, response, task.pad_id)[:SHOWN])
            return {f"eval_{k}": v for k, v in stats.items()}, shown

        self._fn = jax.jit(jax.vmap(one))
        # pass@k (off: None), its compiled sampling and its columns; eval_samples.jsonl is
        # appended to once this session has written it (its first write drops what a resume redoes)
        self.pass_at_k = pass_at_k if pass_at_k is not None and pass_at_k.pass_samples else None
        self._pass_fn, self._pass_names, self._appending = None, (), False
        if self.pass_at_k is not None:
            cfg = self.pass_at_k
            self._pass_prompts = evaluation_prompts(task, cfg.pass_prompts or batch, jax.random.PRNGKey(EVAL_KEY))
            pass_rows = evaluation_rows(task, cfg.pass_prompts or batch)  # not `rows`: the greedy pass's, above
            self._pass_fn = _pass_program(lm, task, self._pass_prompts, cfg, pass_rows)
            blank = PassAtK.from_scores(np.zeros((1, cfg.pass_samples)), cfg.ks())
            self._pass_names = tuple(blank.metrics(prefix="eval_"))

    def compile(self, keys, runner) -> float:
        params = policy_params(runner)
        # the columns, before any evaluation ran
        self.names = tuple(sorted(tuple(jax.eval_shape(self._fn, params)[0]) + self._pass_names))

        def build():
            self._fn.lower(params).compile()
            if self._pass_fn is not None:
                self._pass_fn.lower(params).compile()

        return self._once(signature(params), build)

    def evaluate(self, params) -> tuple:
        """``({name: [R]}, samples)``: every run's greedy statistics on the fixed prompts and
        run 0's first answers as ``"prompt  ->  response"`` lines (``params``: the policy's, ``[R, ...]``,
        :func:`~purejaxppo.lm.ppo.token_ppo.policy_params`)."""
        stats, (prompts, valid, responses) = jax.device_get(self._fn(params))
        samples = [self._sample(p, v, r) for p, v, r in zip(prompts[0], valid[0], responses[0])]
        return {k: np.asarray(v, np.float32) for k, v in stats.items()}, samples

    def evaluate_pass_at_k(self, params) -> tuple:
        """``({name: [R]}, PassAtK)``: every run's ``eval_pass@K`` and ``eval_mean@N`` and run 0's
        :class:`~purejaxppo.lm.ppo.pass_at_k_eval.PassAtK` with its decoded texts (``params``:
        the policy's, ``[R, ...]``)."""
        cfg = self.pass_at_k
        tokens, scores = jax.device_get(self._pass_fn(params))
        runs = [PassAtK.from_scores(s, cfg.ks(), cfg.pass_threshold, cfg.pass_temperature) for s in scores]
        each = [r.metrics(prefix="eval_") for r in runs]
        stats = {k: np.asarray([m[k] for m in each], np.float32) for k in each[0]}
        texts = decoded(self.task, *self._pass_prompts, tokens)
        return stats, dataclasses.replace(runs[0], prompts=texts[0], samples=texts[1])

    def __call__(self, keys, done: int, runner) -> dict:
        before = getattr(self.task, "reward_error", lambda: None)()
        params = policy_params(runner)
        stats, samples = self.evaluate(params)
        record = None
        if self.pass_at_k is not None:
            more, record = self.evaluate_pass_at_k(params)
            stats = {**stats, **more}
        if before is None:  # a text reward that failed on these answers (not a training failure already kept)
            getattr(self.task, "check_reward", lambda _: None)(before)
        if self.samples_path:
            write_samples(self.samples_path, done, samples)
            if record is not None:
                self._appending = write_eval_samples(
                    os.path.join(os.path.dirname(self.samples_path), EVAL_SAMPLES), done, record, append=self._appending
                )
        return stats

    def _sample(self, prompt, valid, response) -> str:
        """A built-in task's one line ``prompt  ->  response``; a text task's decoded text as two
        JSON strings (a prompt or response may hold newlines)."""
        if not hasattr(self.task, "decode_prompt"):
            return f"{self.task.decode(prompt)}  ->  {self.task.decode(response)}"
        text = lambda s: json.dumps(s, ensure_ascii=False)  # noqa: E731
        return f"prompt: {text(self.task.decode_prompt(prompt, valid))}\nresponse: {text(self.task.decode(response))}"


def _pass_program(lm, task, prompts, cfg: PassAtKSettings, rows=None):
    """The compiled pass@k sampling of every run (``params [R, ...]``): ``(run 0's tokens
    [P, n, T], scores [R, P, n])``; every run draws with the same ``PASS_KEY``."""

    def one(params):
        out, scores = sample_and_score(
            lm, params, task, *prompts, jax.random.PRNGKey(PASS_KEY), cfg.pass_samples, cfg.pass_temperature, rows=rows
        )
        return jnp.where(out.mask, out.tokens, task.pad_id), scores

    def every(params):
        tokens, scores = jax.vmap(one)(params)
        return tokens[0], scores

    return jax.jit(every)


def write_eval_samples(path: str, update: int, record: PassAtK, append: bool = False) -> bool:
    """``record``'s rows (run 0's: :meth:`~purejaxppo.lm.ppo.pass_at_k_eval.PassAtK.rows`, each
    with its ``iteration`` and the prompt's ``index``) as JSON lines of iteration ``update``. ``append``: after the file as
    it is (this session wrote it last); else after its lines of earlier iterations only (later
    ones, from a session a resume went back over, and a torn last line are dropped), atomically.
    Returns True: the next write of this session may append."""
    lines = [
        json.dumps({"iteration": update, "index": i, **row}, ensure_ascii=False) for i, row in enumerate(record.rows())
    ]
    with interrupts_deferred():  # whole or not at all
        if append:
            with open(path, "a", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))
            return True
        kept = []
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    try:
                        if json.loads(line)["iteration"] < update:
                            kept.append(line if line.endswith("\n") else line + "\n")
                    except (ValueError, KeyError, TypeError):
                        pass
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("".join(kept) + "".join(line + "\n" for line in lines))
        os.replace(tmp, path)
    return True


def _header(update: int) -> str:
    return f"# iteration {update}, run 0, greedy"


def shown_iterations(path: str) -> list:
    """The iterations ``samples.txt`` shows, in order ([] without the file)."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [int(line.split(",")[0].split()[-1]) for line in f if line.startswith("# iteration ")]


def write_samples(path: str, update: int, samples: list) -> None:
    """``samples`` as the block of iteration ``update``, after the blocks of earlier iterations
    (later ones, from a session a resume went back over, are dropped); atomic."""
    kept = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("# iteration ") and int(line.split(",")[0].split()[-1]) >= update:
                    break
                kept.append(line)
    tmp = path + ".tmp"
    with interrupts_deferred():  # whole or not at all
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("".join(kept) + "\n".join([_header(update)] + samples) + "\n")
        os.replace(tmp, path)


def final_samples(path: str, update: int, evaluator: RLHFEvaluator, runner, group) -> bool:
    """Write the final iteration's block (run 0's greedy answers with ``runner``'s policy, the
    state after ``update`` iterations) unless ``samples.txt`` shows it already; True when it
    was written. Every process calls it (the state is gathered to host arrays, process 0
    evaluates and writes)."""
    if group.share(lambda: update in shown_iterations(path)):
        return False
    params = group.gather(policy_params(runner))
    if group.writer:
        before = getattr(evaluator.task, "reward_error", lambda: None)()
        _, samples = evaluator.evaluate(params)
        if before is None:  # a text reward that failed on these answers
            getattr(evaluator.task, "check_reward", lambda _: None)(before)
        write_samples(path, update, samples)
    return True
