"""``python -m purejaxppo export RUN_DIR OUT_DIR`` (cli/export_cmd.py, programs/rlhf_export.py).

A short LoRA rlhf run from a local GPT-2 folder; the export must load with ``load_pretrained``
and hold the merged weights ``W + alpha/r * A @ B`` computed here in NumPy from the run's own
checkpoint (the adapters read straight from its leaves), and give the logits of those weights.
A bad RUN_DIR or a used OUT_DIR exits 2 with one ``error:`` line.
"""

import json
import os
import subprocess

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo.cli.main import main
from purejaxppo.lm.ppo.token_config import TokenPPOConfig
from purejaxppo.lm.models.gpt2 import GPT2
from purejaxppo.lm.checkpoints.gpt2_hf import save_gpt2
from purejaxppo.lm.checkpoints.pretrained import load_pretrained
from purejaxppo.programs.rlhf_export import final_policy
from purejaxppo.programs.rlhf_settings import RLHFSettings
from purejaxppo.programs.rlhf_run import resume_rlhf, train_rlhf
from purejaxppo.run.checkpoint import latest_checkpoint, read_leaves

RANK, ALPHA = 2, 4.0


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    module = GPT2(16, 16, 32, 2, 2)
    params = module.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32), jnp.ones((1, 4), bool))
    save_gpt2(root / "gpt2", module, params, value_head=False)
    (root / "gpt2" / "tokenizer.json").write_text("{}")  # copied as it is
    cfg = TokenPPOConfig(
        batch_size=8,
        num_iterations=2,
        num_minibatches=2,
        update_epochs=1,
        actor_lr=1e-2,
        lora_rank=RANK,
        lora_alpha=ALPHA,
        lora_targets=("c_attn", "c_fc"),
    )
    settings = RLHFSettings(
        task="reverse",
        task_options=(("max_len", 4), ("max_new", 6)),
        init=str(root / "gpt2"),
        sft_steps=0,
        eval_every=0,
    )
    train_rlhf(cfg, settings, run_dir=str(root / "run"), chunk_updates=1)
    # the same run stopped after one iteration, to resume (test_a_lora_run_resumes_exactly)
    train_rlhf(cfg, settings, run_dir=str(root / "part"), chunk_updates=1, stop_after=1)
    return root


def test_a_lora_run_resumes_exactly(lora_run):
    """Stopped after iteration 1 and resumed, a LoRA run's last checkpoint (adapters, their Adam
    moments, the frozen base, beta, key) equals the uninterrupted run's bit for bit."""
    resume_rlhf(str(lora_run / "part"))
    whole, _ = read_leaves(latest_checkpoint(str(lora_run / "run" / "checkpoints")))
    again, _ = read_leaves(latest_checkpoint(str(lora_run / "part" / "checkpoints")))
    assert sorted(whole) == sorted(again) and any("lora_b" in k for k in whole)
    for k in whole:
        np.testing.assert_array_equal(np.asarray(again[k]), np.asarray(whole[k]), err_msg=k)


def test_export_holds_the_merged_weights_and_loads_back(lora_run):
    root = lora_run
    out = root / "out"
    assert main(["export", str(root / "run"), str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["model_type"] == "gpt2"
    assert (out / "tokenizer.json").read_text() == "{}"
    model, params = load_pretrained(out)
    leaves, _ = read_leaves(latest_checkpoint(str(root / "run" / "checkpoints")))
    moved = 0
    for i in range(2):
        for path in (("attn", "c_attn"), ("mlp", "c_fc"), ("attn", "c_proj")):
            at = "".join(f"['{k}']" for k in ("params", f"h_{i}", *path, "kernel"))
            base = leaves[f".reference{at}"][0]
            if path[-1] == "c_proj":  # not a target: the base as it was
                want = base
            else:
                a = leaves[f".train.params['policy'].tree{at}['lora_a']"][0].astype(np.float64)
                b = leaves[f".train.params['policy'].tree{at}['lora_b']"][0].astype(np.float64)
                want = base + ALPHA / RANK * a @ b
                moved += float(np.abs(want - base).max()) > 0
            got = np.asarray(params["params"][f"h_{i}"][path[0]][path[1]]["kernel"])
            np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-6)
    assert moved == 4  # the run trained every adapter
    # the exported model computes what the run's policy computes (float32 stored: bit for bit)
    _, lm, policy, update = final_policy(str(root / "run"))
    assert update == 2
    tokens, valid = jnp.array([[0, 3, 4, 5, 6], [3, 4, 5, 6, 7]]), jnp.array([[False] + [True] * 4, [True] * 5])
    np.testing.assert_array_equal(model.logits(params, tokens, valid), lm.logits(policy, tokens, valid))


@pytest.mark.parametrize("case", ["missing", "not-a-run", "used-out"])
def test_bad_run_dir_exits_2_with_one_error_line(lora_run, tmp_path, capsys, case):
    run, out = str(lora_run / "run"), str(tmp_path / "out")
    if case == "missing":
        run = str(tmp_path / "nowhere")
    elif case == "not-a-run":
        run = str(lora_run / "gpt2")
    else:
        os.makedirs(out)
        open(os.path.join(out, "x"), "w").close()
    assert main(["export", run, out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert case == "used-out" or not os.path.exists(out)


CROSS = """
import json, sys, torch, transformers
model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1]).eval()
with torch.no_grad():
    print(json.dumps(model(torch.tensor(json.loads(sys.argv[2]))).logits.tolist()))
"""


def test_transformers_loads_the_export_with_the_same_logits(lora_run, tmp_path):
    from test_reward_model import _torch_python

    python = _torch_python()
    if not python:
        pytest.skip("no Python with torch and transformers (set PUREJAXPPO_TORCH_PYTHON)")
    out = tmp_path / "out"
    assert main(["export", str(lora_run / "run"), str(out)]) == 0
    rows = [[3, 4, 5, 6, 7], [9, 2, 11, 4, 5]]
    got = subprocess.run([python, "-c", CROSS, str(out), json.dumps(rows)], capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-2000:]
    theirs = np.asarray(json.loads(got.stdout.strip().splitlines()[-1]))
    _, lm, policy, _ = final_policy(str(lora_run / "run"))
    ours = lm.logits(policy, jnp.asarray(rows), jnp.ones((2, 5), bool))
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=1e-4)
