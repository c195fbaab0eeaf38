"""A worker process of :class:`~purejaxppo.lm.rewards.check_pool.CheckPool`, run as a script
(``python check_worker.py CHECK``): it imports nothing of the package, so it starts in the
time its check's own imports take.

``CHECK`` is ``math`` (:func:`math_check`, math-verify with its own SIGALRM timeouts off: the
pool bounds the time by killing the process), ``module:function``, or ``pickle`` (the check is
the first stdin line: a base64 pickle). It prints one JSON line
``{"ready": true}`` (or ``{"fatal": message}``) once imported, then for each JSON line of
arguments on stdin one line ``{"value": result}`` or ``{"error": message}``.
"""

import base64
import importlib
import json
import logging
import pickle
import sys


def _wrapped(text: str) -> str:
    """``text`` as one boxed expression (math-verify's highest-priority form)."""
    return text if "\\boxed" in text else "\\boxed{" + text + "}"


def math_check(gold: str, answer: str) -> bool:
    """Whether ``answer`` equals ``gold`` for math-verify (``1,000 == 1000``, ``0.5 == 1/2``, LaTeX)."""
    from math_verify import parse, verify

    g = parse(_wrapped(gold), parsing_timeout=None)
    a = parse(_wrapped(answer), parsing_timeout=None)
    return bool(g) and bool(a) and bool(verify(g, a, timeout_seconds=None))


def _target(spec: str):
    if spec == "math":
        logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout disabled" on every call
        import math_verify  # noqa: F401  (imported before "ready": startup is not a check's time)

        return math_check
    if spec == "pickle":
        return pickle.loads(base64.b64decode(sys.stdin.readline()))
    module, _, name = spec.rpartition(":")
    return getattr(importlib.import_module(module), name)


def main() -> None:
    """The worker's loop (see the module)."""
    here = sys.path[0]  # this script's folder: its modules are no top-level modules
    sys.path[:] = [p for p in sys.path if p != here]
    out = sys.stdout
    sys.stdout = sys.stderr  # a check's prints must not break the protocol
    try:
        fn = _target(sys.argv[1])
    except Exception as e:
        hint = " (a check sent pickled by reference must import here: define it at a module's top level)"
        out.write(json.dumps({"fatal": f"{type(e).__name__}: {e}" + (hint if sys.argv[1] == "pickle" else "")}) + "\n")
        out.flush()
        return
    out.write('{"ready": true}\n')
    out.flush()
    for line in sys.stdin:
        try:
            reply = {"value": fn(*json.loads(line))}
        except Exception as e:
            reply = {"error": f"{type(e).__name__}: {e}"}
        try:
            text = json.dumps(reply)
        except (TypeError, ValueError):
            text = json.dumps({"error": f"the check returned {type(reply['value']).__name__}, not JSON"})
        out.write(text + "\n")
        out.flush()


if __name__ == "__main__":
    main()
