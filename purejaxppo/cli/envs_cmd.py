"""``envs [--suite SUITE]``: the environment suites, which are installed, and their env names."""

from __future__ import annotations


def cmd_envs(args) -> int:
    from purejaxppo.envs import SUITES, env_names, installed, pip_command

    if args.suite:
        names = env_names(args.suite)  # unknown suite / missing extra: ConfigError
        prefix = "" if args.suite == "gymnax" else f"{args.suite}:"
        print("\n".join(prefix + n for n in names))
        return 0
    print("gymnax      installed  (no prefix, e.g. CartPole-v1)")
    for name, suite in SUITES.items():
        state = "installed " if installed(name) else "missing   "
        how = f"e.g. {suite.example}" if installed(name) else pip_command(name)
        print(f"{name:<11} {state} {suite.about}; {how}")
    print('all suites: pip install "purejaxppo[suites]"; names of one: python -m purejaxppo envs --suite SUITE')
    return 0
