"""A model folder's tokenizer, read locally: ``load_tokenizer(folder) -> TextTokenizer``.

The vocabulary comes from ``tokenizer.json`` through the ``tokenizers`` package (no
``transformers`` at run time, nothing downloaded). The special ids, first found wins:

* EOS (the stop ids, several allowed): ``generation_config.json``'s ``eos_token_id``, then
  ``config.json``'s, then ``tokenizer_config.json``'s ``eos_token`` (a string, looked up in the
  vocabulary). ``generation_config.json`` first because it is what ``generate`` itself stops on
  (Llama 3's instruct models list ``<|eot_id|>`` there beside ``<|end_of_text|>``).
* pad: ``generation_config.json``'s ``pad_token_id``, then ``config.json``'s, then
  ``tokenizer_config.json``'s ``pad_token``. Token-level PPO's sampler never draws the pad id,
  so a pad that is also a stop id (the usual ``pad = eos`` habit, GPT-2 has no pad at all) is
  replaced by the highest id of the model's vocabulary that is not a stop id: a row's padding
  then never collides with a real ending. Give ``pad_id=`` to choose another.

A chat template (``tokenizer_config.json``'s ``chat_template``) is rendered with jinja2 the way
Hugging Face renders it: ``messages``, ``add_generation_prompt``, ``bos_token``,
``eos_token`` and ``raise_exception`` in scope, ``trim_blocks`` and ``lstrip_blocks`` on.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional, Sequence

from purejaxppo.lm.checkpoints.hf_folder import read_json_object
from purejaxppo.lm.checkpoints.pretrained import CheckpointFolderError


@dataclasses.dataclass(frozen=True, eq=False)
class TextTokenizer:
    """Text <-> ids for one model folder, made by :func:`load_tokenizer`.

    Attributes:
      backend: the ``tokenizers.Tokenizer`` read from ``tokenizer.json``.
      stop_ids: tuple of int, the EOS ids (a response ends at the first of any).
      pad_id: int, never a stop id (so padding never collides with a real ending).
      bos_token: the BOS string (for templates), or None.
      eos_token: the EOS string (for templates), or None.
      chat_template: the jinja2 chat template, or None.
      vocab_size: the tokenizer's size (added tokens included), which may be below the
        model's embedding rows.
    """

    backend: object  # tokenizers.Tokenizer
    stop_ids: tuple
    pad_id: int
    bos_token: Optional[str]
    eos_token: Optional[str]
    chat_template: Optional[str]
    vocab_size: int

    def encode(self, text: str) -> list:
        """Encode text.

        Args:
          text: the string.

        Returns:
          A list of int ids, without added special tokens (a template writes its own).
        """
        return self.backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        """Decode ids; the caller strips padding and stop tokens first (:func:`strip_special`).

        Args:
          ids: a sequence of ints (or int arrays' elements).

        Returns:
          The text, special tokens written out.
        """
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=False)

    def render_chat(self, messages: list, add_generation_prompt: bool = True) -> str:
        """Render a chat through the folder's template, as Hugging Face renders it.

        Args:
          messages: ``[{"role": ..., "content": ...}, ...]``.
          add_generation_prompt: end with the assistant's turn opened.

        Returns:
          The prompt text (encode it with :meth:`encode`).

        Raises:
          ValueError: the folder has no template, or the template refuses the messages.
        """
        if not self.chat_template:
            raise ValueError("the model folder's tokenizer_config.json has no chat_template")
        return _template(self.chat_template).render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token or "",
            eos_token=self.eos_token or "",
        )


def _raise(message):
    raise ValueError(f"the chat template refused the messages: {message}")


def _template(source: str):
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.Undefined)
    env.globals["raise_exception"] = _raise
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, indent=indent, ensure_ascii=False)
    return env.from_string(source)


def _read_json(folder: str, name: str) -> dict:
    path = os.path.join(folder, name)
    return read_json_object(path) if os.path.isfile(path) else {}


def _token_text(value) -> Optional[str]:
    """tokenizer_config.json writes a special token as a string or as ``{"content": ...}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _ids(value) -> tuple:
    if value is None:
        return ()
    values = value if isinstance(value, list) else [value]
    return tuple(int(v) for v in values if isinstance(v, int) and not isinstance(v, bool))


def load_tokenizer(
    folder: str | os.PathLike, model_vocab: Optional[int] = None, pad_id: Optional[int] = None
) -> TextTokenizer:
    """The tokenizer of a local model folder (``tokenizer.json`` through the ``tokenizers``
    package; nothing downloaded). The stop and pad ids are found as the module says.

    Args:
      folder: the model folder.
      model_vocab: the model's embedding rows (default: the tokenizer's size); a missing or
        EOS-equal pad becomes the highest id below it that is not a stop id.
      pad_id: the pad id to use instead of the one found.

    Returns:
      A :class:`TextTokenizer`.

    Raises:
      CheckpointFolderError: no ``tokenizer.json`` or one the package cannot read, a broken
        JSON file, or no EOS id anywhere (the message names the file and the fix).
    """
    from tokenizers import Tokenizer

    folder = os.fspath(folder)
    path = os.path.join(folder, "tokenizer.json")
    if not os.path.isfile(path):
        raise CheckpointFolderError(
            f"{folder} has no tokenizer.json (save the tokenizer in its fast format there, "
            "e.g. tokenizer.save_pretrained(folder) with transformers)"
        )
    try:
        backend = Tokenizer.from_file(path)
    except Exception as e:  # the Rust side raises its own exception type
        raise CheckpointFolderError(f"{path} cannot be read by the tokenizers package ({e})") from None
    gen, cfg, tok = (_read_json(folder, n) for n in ("generation_config.json", "config.json", "tokenizer_config.json"))
    eos_text, bos_text = _token_text(tok.get("eos_token")), _token_text(tok.get("bos_token"))
    lookup = lambda text: backend.token_to_id(text) if text else None  # noqa: E731
    stops = _ids(gen.get("eos_token_id")) or _ids(cfg.get("eos_token_id")) or _ids(lookup(eos_text))
    if not stops:
        raise CheckpointFolderError(
            f"{folder}: no EOS id found (generation_config.json or config.json eos_token_id, "
            "or tokenizer_config.json eos_token); add one so responses can end"
        )
    vocab = model_vocab or backend.get_vocab_size(with_added_tokens=True)
    if pad_id is None:
        found = (
            _ids(gen.get("pad_token_id"))
            or _ids(cfg.get("pad_token_id"))
            or _ids(lookup(_token_text(tok.get("pad_token"))))
        )
        pad_id = found[0] if found and found[0] not in stops else max(i for i in range(vocab) if i not in stops)
    if eos_text is None:
        eos_text = backend.id_to_token(stops[0])
    return TextTokenizer(
        backend,
        stops,
        int(pad_id),
        bos_text,
        eos_text,
        _chat_template(folder, tok),
        backend.get_vocab_size(with_added_tokens=True),
    )


def _chat_template(folder: str, tok: dict) -> Optional[str]:
    """``chat_template`` of tokenizer_config.json (a string, or a list of named templates: the
    ``default`` one), else a ``chat_template.jinja`` file (transformers 4.43+ writes it there)."""
    found = tok.get("chat_template")
    if isinstance(found, list):
        found = next((t.get("template") for t in found if isinstance(t, dict) and t.get("name") == "default"), None)
    path = os.path.join(folder, "chat_template.jinja")
    if not found and os.path.isfile(path):
        with open(path) as f:
            found = f.read()
    return found if isinstance(found, str) and found else None


def strip_special(ids: Sequence[int], stop_ids: Sequence[int], pad_id: int) -> list:
    """A response's ids up to (not including) its first stop token, padding dropped.

    Args:
      ids: one row of ids (a list or a 1-D array).
      stop_ids: the stop ids.
      pad_id: the pad id.

    Returns:
      A list of Python ints, ready for :meth:`TextTokenizer.decode`.
    """
    out = []
    for i in ids:
        i = int(i)
        if i in stop_ids:
            break
        if i != pad_id:
            out.append(i)
    return out
