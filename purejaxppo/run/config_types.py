"""Which config class each run kind records in ``config.json``.

``kind -> cls`` with ``cls.from_dict``, ``cls().to_dict()`` (the defaults a field missing from
an older folder compares as) and the chunk loop's ``num_updates`` / ``batch_size``. Plain runs,
sweeps and PBT record a :class:`~purejaxppo.config.PPOConfig`; another kind registers its own
(token-level PPO: :class:`purejaxppo.lm.config.TokenPPOConfig`, from :mod:`purejaxppo.programs.kinds`).
"""

from __future__ import annotations

from purejaxppo.config import PPOConfig

CONFIG_TYPES = {"run": PPOConfig, "sweep": PPOConfig, "pbt": PPOConfig}


def register_config_type(kind: str, cls) -> None:
    """Folders of ``kind`` record their config as ``cls.to_dict()`` and read it back with ``cls.from_dict``."""
    CONFIG_TYPES[kind] = cls
