"""``rlhf --export DIR`` and LoRA from the command line (purejaxppo/cli/rlhf_cmd.py,
purejaxppo/programs/rlhf_export.py), on a tiny random Llama checkpoint made here.

* ``rlhf --model DIR --lora-rank 4 ... --export OUT``: the run trains its adapters, and OUT
  holds the merged weights ``W + alpha/r * A @ B`` computed here in NumPy from the run's own
  checkpoint leaves (base from the reference, factors from the adapters); ``load_pretrained(OUT)``
  gives the run's final policy's logits (float32 stored: bit for bit), and the ``export``
  command writes the same files.
* The same command stopped after one iteration (``--stop-after 1``: no export yet) and
  continued with ``rlhf --resume RUN --export OUT2`` ends at the uninterrupted run's checkpoint
  bit for bit (adapters, their Adam moments, the frozen base) and exports the same bytes.
* ``--export`` refusals before any work: a used folder, a built-in TinyLM (no HF layout).
"""

import csv
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo.cli.main import main
from purejaxppo.lm.checkpoints.pretrained import load_pretrained
from purejaxppo.programs.rlhf_export import final_policy
from purejaxppo.run.checkpoint import latest_checkpoint, read_leaves

RANK, ALPHA = 4, 8.0


def _base(root) -> list:
    """The LoRA text run's command (the model folder, prompts and reward under ``root``)."""
    return [
        "rlhf",
        "--model",
        str(root / "model"),
        "--prompts",
        str(root / "prompts.jsonl"),
        "--reward",
        f"{root / 'reward.py'}:score",
        "--lora-rank",
        str(RANK),
        "--lora-alpha",
        str(ALPHA),
        "--actor-lr",
        "1e-2",
        "--iterations",
        "2",
        "--batch",
        "4",
        "--minibatches",
        "2",
        "--epochs",
        "1",
        "--max-new-tokens",
        "4",
        "--eval-every",
        "0",
        "--chunk",
        "1",
        "--quiet",
    ]


pytestmark = pytest.mark.slow  # three short LoRA runs (compiles) in the fixture


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from _lm_fixtures import tiny_llama_folder

    root = tmp_path_factory.mktemp("lora_cli")
    tiny_llama_folder(root / "model", "llama")
    (root / "prompts.jsonl").write_text(
        "".join(json.dumps({"prompt": p}) + "\n" for p in ("what is one plus two", "hello", "reverse cat dog"))
    )
    (root / "reward.py").write_text("def score(prompts, responses):\n    return [len(r) / 10 for r in responses]\n")
    base = _base(root)
    assert main([*base, "--run-dir", str(root / "whole"), "--export", str(root / "out")]) == 0
    assert main([*base, "--run-dir", str(root / "part"), "--stop-after", "1", "--export", str(root / "out2")]) == 0
    assert not (root / "out2").exists()  # stopped: nothing exported yet
    assert latest_checkpoint(str(root / "part" / "checkpoints")).endswith("update_00000001")
    assert main(["rlhf", "--resume", str(root / "part"), "--export", str(root / "out2"), "--quiet"]) == 0
    return root


def _rows(run):
    """metrics.csv's header and rows without ``reward_fn_s`` (the text reward's wall time)."""
    with open(run / "metrics.csv") as f:
        rows = list(csv.reader(f))
    keep = [i for i, name in enumerate(rows[0]) if name != "reward_fn_s"]
    return [rows[0][i] for i in keep], [[r[i] for i in keep] for r in rows[1:]]


def _last(run) -> dict:
    return read_leaves(latest_checkpoint(str(run / "checkpoints")))[0]


def test_a_stopped_lora_run_resumed_from_the_command_line_equals_the_whole_run(runs):
    whole, again = _last(runs / "whole"), _last(runs / "part")
    assert sorted(whole) == sorted(again) and sum("lora_b" in k for k in whole) >= 14  # 7 projections x 2 layers
    for k in whole:
        np.testing.assert_array_equal(np.asarray(again[k]), np.asarray(whole[k]), err_msg=k)
    (ha, ra), (hb, rb) = _rows(runs / "whole"), _rows(runs / "part")
    assert ha == hb and len(ra) == 2 and ra == rb  # every column but the host reward's wall time
    for name in os.listdir(runs / "out"):  # the resumed run's export: the same bytes
        assert (runs / "out" / name).read_bytes() == (runs / "out2" / name).read_bytes(), name


def test_export_holds_the_merged_adapters_and_gives_the_runs_logits(runs, tmp_path):
    leaves = _last(runs / "whole")
    model, params = load_pretrained(runs / "out")
    exported = {jax.tree_util.keystr(p): np.asarray(x) for p, x in jax.tree_util.tree_flatten_with_path(params)[0]}
    policy = ".train.params['policy'].tree"
    adapted = {k[len(policy) : -len("['lora_a']")] for k in leaves if k.startswith(policy) and k.endswith("['lora_a']")}
    assert len(adapted) >= 14
    moved = 0
    for at, got in exported.items():
        base = np.asarray(leaves[f".reference{at}"], np.float64)[0]
        if at in adapted:  # the merge, in NumPy
            a = np.asarray(leaves[f"{policy}{at}['lora_a']"], np.float64)[0]
            b = np.asarray(leaves[f"{policy}{at}['lora_b']"], np.float64)[0]
            want = base + ALPHA / RANK * (a @ b).reshape(base.shape)
            moved += float(np.abs(want - base).max()) > 0
        else:  # not adapted (embeddings, norms): the base as it was
            want = base
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-6, err_msg=at)
    assert moved == len(adapted)  # the run trained every adapter
    _, lm, policy_params, update = final_policy(str(runs / "whole"))
    assert update == 2
    tokens = jnp.array([[0, 3, 4, 5, 6], [3, 4, 5, 6, 7]])
    valid = jnp.array([[False] + [True] * 4, [True] * 5])
    np.testing.assert_array_equal(model.logits(params, tokens, valid), lm.logits(policy_params, tokens, valid))
    # the export command writes the same files as --export
    assert main(["export", str(runs / "whole"), str(tmp_path / "cmd")]) == 0
    assert sorted(os.listdir(tmp_path / "cmd")) == sorted(os.listdir(runs / "out"))
    for name in os.listdir(runs / "out"):
        assert (tmp_path / "cmd" / name).read_bytes() == (runs / "out" / name).read_bytes(), name


@pytest.mark.parametrize("case", ["used", "tinylm", "resume-used"])
def test_export_flag_refusals_before_any_work(runs, tmp_path, monkeypatch, capsys, case):
    monkeypatch.chdir(tmp_path)
    used = tmp_path / "used"
    used.mkdir()
    (used / "x").write_text("x")
    if case == "used":
        argv = [*_base(runs), "--run-dir", str(tmp_path / "r"), "--export", str(used)]
        message = f"--export {used} exists and is not an empty folder"
    elif case == "tinylm":
        argv = ["rlhf", "--task", "reverse", "--export", str(tmp_path / "new")]
        message = "trains a built-in TinyLM, which has no Hugging Face layout"
    else:
        argv = ["rlhf", "--resume", str(runs / "whole"), "--export", str(used)]
        message = f"--export {used} exists and is not an empty folder"
    before = sorted(os.listdir(tmp_path))
    assert main([*argv, "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert sorted(os.listdir(tmp_path)) == before
