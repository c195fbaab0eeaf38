"""Commands tied to one run kind refuse a folder of another kind (a plain run's folder here):
``resume_pbt`` and the rlhf export each raise one clear error naming what to do instead."""

import pytest

from purejaxppo import PPOConfig
from purejaxppo.config import ConfigError
from purejaxppo.programs.pbt_run import resume_pbt
from purejaxppo.programs.rlhf_export import final_policy
from purejaxppo.programs.runs import train_chunked
from purejaxppo.run.checkpoint import CheckpointError


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory):
    run_dir = str(tmp_path_factory.mktemp("plain") / "run")
    cfg = PPOConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 2, update_epochs=1, num_minibatches=1)
    train_chunked(cfg, run_dir=run_dir, chunk_updates=2)
    return run_dir


def test_resume_pbt_refuses_a_plain_run(plain_run):
    with pytest.raises(
        CheckpointError,
        match=r"is not a PBT run but a PPO \(run or sweep\) run; continue it with python -m purejaxppo train --resume",
    ):
        resume_pbt(plain_run)


def test_export_refuses_a_plain_run(plain_run):
    with pytest.raises(
        ConfigError, match=r"holds a PPO \(run or sweep\) run; export takes a run folder of: token-level PPO \(rlhf\)$"
    ):
        final_policy(plain_run)
