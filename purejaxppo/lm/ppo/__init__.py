"""Token-level PPO: the token stages, group advantages, experience, the update, the iteration's
phases and their composition (:func:`~purejaxppo.lm.ppo.token_ppo.make_token_ppo`), the
data-parallel split and export of the trained policy."""
