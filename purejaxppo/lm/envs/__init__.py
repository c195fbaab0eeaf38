"""Text environments for the language model: tokens (JAX) or text (Python) as observations and
actions, one interface per kind, and the multi-turn episodes run on them. Above ``rewards``
(an environment may score a final answer with a verifier); the iteration in ``ppo`` takes an
episode's sampler as its sample phase, so ``ppo`` never imports this package."""
