"""Supervised fine-tuning on a task's demonstrations, and evaluation of a policy by sampling."""
