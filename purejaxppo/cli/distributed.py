"""``train`` on several processes (hosts): the flags, joining them, the device count.

Every process is started with the same command plus its own place in the group, either from
a launcher (``--distributed``: SLURM, Open MPI, a TPU pod and Kubernetes fill in what
``jax.distributed.initialize()`` needs) or explicitly (``--coordinator HOST:PORT
--num-processes N --process-id I``). Process 0 writes the run folder; the others print only
errors (:mod:`purejaxppo.run.processes`).
"""

from __future__ import annotations

import argparse

from purejaxppo.cli.errors import UserError
from purejaxppo.cli.flags import ranged, strict_int
from purejaxppo.config.fields import Bounds


def add_process_flags(t: argparse.ArgumentParser) -> None:
    g = t.add_argument_group("several processes (jax.distributed; see docs/multihost.md)")
    g.add_argument(
        "--distributed",
        action="store_true",
        help="join the other processes with jax.distributed.initialize() and no arguments (SLURM, "
        "Open MPI, TPU pods and Kubernetes launchers provide them); process 0 writes the run folder",
    )
    g.add_argument(
        "--coordinator",
        default=None,
        metavar="HOST:PORT",
        help="process 0's address, with --num-processes and --process-id (instead of --distributed)",
    )
    g.add_argument(
        "--num-processes",
        type=ranged(strict_int, Bounds(lo=1)),
        default=None,
        metavar="N",
        help="processes in the run (>= 1)",
    )
    g.add_argument(
        "--process-id",
        type=ranged(strict_int, Bounds(lo=0)),
        default=None,
        metavar="I",
        help="this process, 0..N-1 (>= 0)",
    )


def join(args):
    """Join the run's processes if the flags ask for it (before JAX starts); this process's
    :class:`~purejaxppo.run.processes.ProcessGroup` (one process when they do not)."""
    from purejaxppo.run import processes

    explicit = {
        "--coordinator": args.coordinator,
        "--num-processes": args.num_processes,
        "--process-id": args.process_id,
    }
    given = [k for k, v in explicit.items() if v is not None]
    if not args.distributed and not given:
        return processes.current()
    if args.distributed and given:
        raise UserError(
            f"--distributed takes the process layout from the launcher; drop {', '.join(given)} "
            "(or drop --distributed and give --coordinator, --num-processes and --process-id)"
        )
    if given and len(given) < 3:
        missing = [k for k in explicit if k not in given]
        raise UserError(
            f"{', '.join(given)} needs {', '.join(missing)} too: every process gets --coordinator "
            "HOST:PORT (process 0's address) --num-processes N --process-id I"
        )
    if given:
        host, _, port = args.coordinator.rpartition(":")
        if not host or not port.isdigit():
            raise UserError(
                f"--coordinator={args.coordinator!r} must be HOST:PORT (process 0's address), e.g. 127.0.0.1:12355"
            )
        if args.num_processes < 1 or not 0 <= args.process_id < args.num_processes:
            raise UserError(
                f"--process-id={args.process_id} must be in 0..{args.num_processes - 1} "
                f"(--num-processes={args.num_processes})"
            )
    run_dir = args.resume or args.run_dir
    if not run_dir:
        raise UserError("several processes need --run-dir (the same on every process; process 0 writes it)")
    if getattr(args, "eval_every", None):  # 0 (rlhf: off) is fine
        raise UserError(
            "--eval-every does not run across processes yet; train without it and evaluate the run "
            f"folder afterwards: python -m purejaxppo eval {run_dir}"
        )
    group = processes.initialize(
        args.coordinator,
        args.num_processes,
        args.process_id,
        on_loss=f" Start every process again with --resume {run_dir} to continue from the last checkpoint.",
    )
    if not group.writer:
        args.quiet = True  # process 0 shows the progress and the summary
    return group


def global_devices(spec: str, divides: int, what: str, check: bool = True) -> int:
    """``--devices`` across processes: every process's devices (``auto``/``all`` or that count),
    since each process runs its share of the one program."""
    import jax

    n = jax.device_count()
    if spec not in ("auto", "all") and spec != str(n):
        raise UserError(
            f"--devices={spec}: {jax.process_count()} processes have {n} devices together and a run "
            f"across processes uses all of them; pass --devices all"
        )
    if check and divides % n:
        raise UserError(f"{n} devices (all processes') must divide {what}; change the count or the processes")
    return n
