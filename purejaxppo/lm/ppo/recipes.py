"""The loss family's published recipes as :class:`~purejaxppo.lm.ppo.token_config.TokenPPOConfig`
overrides: :data:`RECIPES` (name -> ``{field: value}``) and :func:`apply_recipe`.

Every recipe names the same fields (:data:`RECIPE_FIELDS`: the advantage, the clip ranges, the
importance ratio, the aggregation, the KL, the length shaping and dynamic sampling), so applying
one leaves none of another's behind. ``ppo`` is today's defaults; the others change them to the
papers' values:

=========== ===================== ========= ======== ============== ================= ========
recipe      advantage             clip      ratio    aggregation    KL                dynamic
=========== ===================== ========= ======== ============== ================= ========
ppo         gae (a critic)        0.2/0.2   token    token-mean     reward, k1, 0.05  off
grpo        grpo (group, / std)   0.2/0.2   token    seq-mean       loss, k3, 0.04    off
dapo        grpo (group, / std)   0.2/0.28  token    token-mean     none (beta 0)     on
dr-grpo     dr-grpo (no std)      0.2/0.2   token    token-sum-norm none (beta 0)     off
gspo        grpo (group, / std)   3e-4/4e-4 sequence seq-mean       none (beta 0)     off
reinforce++ reinforce++ (batch)   0.2/0.2   token    token-mean     reward, k1, 0.05  off
rloo        rloo (leave-one-out)  0.2/0.2   token    token-mean     reward, k1, 0.05  off
=========== ===================== ========= ======== ============== ================= ========

``dapo`` also turns on the soft overlong punishment (factor 1) over the last fifth of the
response budget: DAPO's 4096-token buffer of a 20480-token budget (Yu et al. 2025), and its
dynamic sampling (``dynamic`` above: the groups whose scores are all equal are dropped and more
prompts drawn, at most ``max_extra_draws`` batches more, which the recipe leaves as set). Group
recipes take ``group_size`` as given (2 or more: the config's validation refuses 1). Sources: Schulman et al. 2017 / Ouyang et al. 2022 (ppo), Shao et
al. 2024 (grpo), Yu et al. 2025 (dapo), Liu et al. 2025 (dr-grpo), Zheng et al. 2025 (gspo), Hu
2025 (reinforce++), Ahmadian et al. 2024 (rloo).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from purejaxppo.config import ConfigError
from purejaxppo.lm.ppo.token_config import TokenPPOConfig, validate_token_config

#: the fields every recipe sets
RECIPE_FIELDS = (
    "advantage",
    "clip_eps",
    "clip_eps_high",
    "dual_clip",
    "importance_level",
    "aggregation",
    "kl_in",
    "kl_estimator",
    "beta",
    "overlong_buffer",
    "overlong_penalty",
    "mask_truncated",
    "dynamic_sampling",
)


def fifth_of_the_budget(cfg: TokenPPOConfig) -> int:
    """DAPO's overlong buffer for ``cfg``'s budget: 4096 of 20480 tokens, a fifth (at least 1)."""
    return max(1, cfg.max_new_tokens // 5)


_PPO = dict(
    advantage="gae",
    clip_eps=0.2,
    clip_eps_high=0.0,  # = clip_eps
    dual_clip=0.0,
    importance_level="token",
    aggregation="token-mean",
    kl_in="reward",
    kl_estimator="k1",
    beta=0.05,
    overlong_buffer=0,
    overlong_penalty=1.0,
    mask_truncated=False,
    dynamic_sampling=False,
)
_NO_KL = dict(kl_in="reward", kl_estimator="k1", beta=0.0)

RECIPES: dict = {
    "ppo": _PPO,
    "grpo": {
        **_PPO,
        "advantage": "grpo",
        "aggregation": "seq-mean",
        "kl_in": "loss",
        "kl_estimator": "k3",
        "beta": 0.04,
    },
    "dapo": {
        **_PPO,
        **_NO_KL,
        "advantage": "grpo",
        "clip_eps_high": 0.28,
        "overlong_buffer": fifth_of_the_budget,
        "dynamic_sampling": True,
    },
    "dr-grpo": {**_PPO, **_NO_KL, "advantage": "dr-grpo", "aggregation": "token-sum-norm"},
    "gspo": {
        **_PPO,
        **_NO_KL,
        "advantage": "grpo",
        "clip_eps": 3e-4,
        "clip_eps_high": 4e-4,
        "importance_level": "sequence",
        "aggregation": "seq-mean",
    },
    "reinforce++": {**_PPO, "advantage": "reinforce++"},
    "rloo": {**_PPO, "advantage": "rloo"},
}


def apply_recipe(
    cfg: TokenPPOConfig, name: str, given=frozenset(), flag_of: Optional[Callable[[str], str]] = None
) -> TokenPPOConfig:
    """``cfg`` with a recipe's values, but for the fields the user set explicitly.

    A value that depends on the config (``dapo``'s overlong buffer, a fifth of
    ``max_new_tokens``) is computed from ``cfg``: apply the recipe to the config with its final
    response budget.

    Args:
      cfg: the :class:`~purejaxppo.lm.ppo.token_config.TokenPPOConfig` to change.
      name: a key of :data:`RECIPES`.
      given: the names of the fields the user set explicitly (``TokenPPOConfig`` field names,
        e.g. ``{"clip_eps"}``); they keep ``cfg``'s values.
      flag_of: maps a field name to the flag the user typed, for the messages (None: field names).
    Returns:
      The changed config, validated.
    Raises:
      ConfigError: an unknown recipe, a ``given`` name that is not a field, or a result the
        config's validation refuses (e.g. a group recipe with ``group_size`` 1).
    """
    if name not in RECIPES:
        raise ConfigError(f"recipe {name!r} is not one of {tuple(RECIPES)}")
    fields = {f.name for f in dataclasses.fields(TokenPPOConfig)}
    unknown = sorted(set(given) - fields)
    if unknown:
        raise ConfigError(f"given names {unknown}, which are not TokenPPOConfig fields (give field names, not flags)")
    changes = {k: (v(cfg) if callable(v) else v) for k, v in RECIPES[name].items() if k not in given}
    return validate_token_config(dataclasses.replace(cfg, **changes), flag_of)
