"""Tasks: the built-in ones (prompts, demonstrations, a reward, metrics) and the user's own data
(a model folder's tokenizer, a prompt file, a reward) as a task."""
