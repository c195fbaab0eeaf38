"""The run folder as the chunk loop uses it, from one process or from several.

:class:`RunStorage` is every read and write the loop makes of a run folder: opening it (the
lock, the checks of a new run or a resume), ``config.json``, restoring the newest usable
checkpoint, saving one, ``summary.json``. With several processes
(:mod:`purejaxppo.run.processes`) process 0 alone touches the folder: a check that fails
there fails on every process (the same exception), a restored state reaches the others by a
collective, and a save gathers the whole state from every process (each calls
:meth:`RunStorage.save` at the same point) before process 0 writes it. A folder written by
N processes is the folder one process writes: it resumes on either.
"""

from __future__ import annotations

import contextlib
import os
from typing import Optional

import jax

from purejaxppo.run import run_folder as rf
from purejaxppo.run import run_lock
from purejaxppo.run.checkpoint import SaveError, clean_partial, latest_checkpoint, place_like, save_checkpoint
from purejaxppo.run.guards import RunFolderWriteError, interrupts_deferred
from purejaxppo.run.kinds import resume_hint
from purejaxppo.run.processes import ProcessGroup
from purejaxppo.run.record import RunRecord


class RunStorage:
    """``run_dir`` (or None: nothing is stored) as seen by process ``group.index``.

    ``writes``: this process writes the folder (process 0, when there is a folder);
    ``ckpt_root``: its checkpoints folder on the writer, else None."""

    def __init__(self, run_dir: Optional[str], record: RunRecord, group: ProcessGroup, keep: int = 2):
        self.run_dir, self.record, self.group, self.keep = run_dir, record, group, keep
        self.writes = bool(run_dir) and group.writer
        self.ckpt_root = os.path.join(run_dir, rf.CHECKPOINTS) if self.writes else None
        self.saved = -1

    def open(self, resume: bool, held: contextlib.ExitStack) -> None:
        """Check and lock the folder for this session (held until ``held`` closes): a resume
        continues only a folder of the same kind and setup, a new run refuses a used one."""

        def on_writer():
            if resume:
                rf.check_resumable(self.run_dir, self.record)  # before anything in the folder is touched
            else:
                os.makedirs(self.run_dir, exist_ok=True)
            held.enter_context(run_lock.hold(self.run_dir))  # one writer per folder
            if not resume:
                rf.refuse_existing_run(self.run_dir)
            clean_partial(self.ckpt_root)  # .tmp-* folders of interrupted saves and prunes

        if self.run_dir:
            self.group.share(on_writer)

    def restore(self, template):
        """``(state, update, earlier metrics or None, note or None)`` from the newest usable
        checkpoint (:func:`~purejaxppo.run.run_folder.read_latest`), placed like ``template``
        (its leaves' shardings) on every process; the
        earlier metrics only on the writer (only it writes the summary they go into)."""
        # a checkpoint at update 0 is restored too: a token-level run's state there is its SFT
        # model, which a template does not hold
        if not self.group.many:
            host, done, prev, note = rf.read_latest(self.run_dir, template, self.record)
            return (template if host is template else jax.tree.map(place_like, host, template)), done, prev, note
        held = {}

        def on_writer():
            held["host"], done, held["prev"], note = rf.read_latest(self.run_dir, template, self.record)
            return done, note, held["host"] is not template

        done, note, restored = self.group.share(on_writer)
        if not restored:
            return template, 0, None, note
        host = self.group.broadcast(held.get("host"), like=template)
        return jax.tree.map(place_like, host, template), done, held.get("prev"), note

    def write_info(self, resumed_from: Optional[int]) -> None:
        if self.writes:
            rf.write_info(self.run_dir, self.record, resumed_from=resumed_from)

    def save(self, state, update: int) -> Optional[str]:
        """Checkpoint ``state`` at ``update`` (once per update); the newest checkpoint's path
        (None on a process that does not write). Every process calls it at the same point."""
        if self.run_dir and update != self.saved:
            if self.group.many:
                state = self.group.gather(state)
            if not self.writes:
                self.saved = update
                return None
            meta = dict(self.record.to_json(), versions=rf.versions(), metrics_rows_per_seed=update)
            with interrupts_deferred():  # a signal now acts once the save is whole and recorded
                save_checkpoint(self.ckpt_root, update, state, meta, keep=self.keep)
                self.saved = update  # inside: the deferred signal is raised when the block ends
        return self.latest()

    def save_quietly(self, state, update: int) -> Optional[str]:
        """On the way out after an error or a signal: save if possible, never raise. With
        several processes nothing is saved (the others may not reach a save; the last
        periodic checkpoint stands)."""
        if self.group.many:
            return self.latest()
        try:
            return self.save(state, update)
        except BaseException:  # a failing save must not hide the original error
            return self.latest()

    @staticmethod
    def saved_update(path: Optional[str]) -> int:
        """The update a checkpoint path (``.../update_<U>``) holds; 0 for None."""
        return int(os.path.basename(path).split("_")[-1]) if path else 0

    def latest(self) -> Optional[str]:
        return latest_checkpoint(self.ckpt_root) if self.ckpt_root else None

    def write_summary(self, summary: dict) -> None:
        if self.writes:
            rf.write_summary(self.run_dir, summary)

    def kept_note(self) -> str:
        """What a stop without a save keeps, as the end of a line ("" without a folder)."""
        if not self.run_dir:
            return ""
        hint = resume_hint({"kind": self.record.kind}, self.run_dir)
        return f"; continue with `{hint}` (from the newest checkpoint in {self.run_dir}, or from its start)"

    def write_error(self, e: OSError) -> RunFolderWriteError:
        """What to tell the user when the run folder cannot be written: why, what is kept, how to continue."""
        reason = str(e) if isinstance(e, SaveError) else f"{e.strerror or e}{f': {e.filename}' if e.filename else ''}"
        path = latest_checkpoint(self.ckpt_root) if self.ckpt_root and os.path.isdir(self.ckpt_root) else None
        update = self.saved_update(path)
        kept = (
            f"checkpoint {path} (update {update}) and the metrics.csv rows before it; later rows are recomputed"
            if path
            else "no checkpoint yet, so a resume starts from update 0 (same numbers)"
        )
        return RunFolderWriteError(
            f"could not write to run folder {self.run_dir} ({reason}). Kept: {kept}. Free some "
            f"space (or fix permissions), then continue with `{resume_hint({'kind': self.record.kind}, self.run_dir)}`",
            path,
            update,
        )
