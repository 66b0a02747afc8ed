"""A sweep's jobs, checked before any of them starts.

Hydra composes a job's config only when the launcher reaches it, so a job whose overrides do not
compose (``-m loss=slk,sl loss.k=10``: SL has no ``k``) would abort the sweep half-way with an
error that names no job. :func:`check_jobs` composes every job of a basic sweep up front and runs
the checks a run makes before touching its folder (:func:`bench.run.check_settings`), and the
sweep stops before its first job, naming each bad one.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from bench.composition import compose
from bench.run import check_settings

#: the sweeper whose jobs are the product of comma lists and ranges (others choose as they go)
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
#: jobs composed up front at most (a bigger grid is checked as it runs)
MAX_CHECKED = 2000


def sweep_jobs(config: DictConfig) -> list[list[str]] | None:
    """Each job's overrides, in launch order, of the multirun ``config`` (the sweep's own config,
    as a Hydra callback gets it); None for a sweeper that picks jobs as it goes (Optuna)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if str(config.hydra.sweeper.get("_target_")) != BASIC_SWEEPER:
        return None
    # the sweeper's own params (a sweeper config's grid) come first, as the basic sweeper puts them
    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    parsed = OverridesParser.create().parse_overrides([*params, *config.hydra.overrides.task])
    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def jobs_from_command_line(argv: list[str]) -> list[list[str]] | None:
    """The jobs of a ``python -m bench [-m] ...`` command line (one for a single run), each with the
    command's Hydra settings, or None when it names another sweeper or Hydra flags this check does
    not follow (Hydra then reports alone).

    Raises:
        BenchError: an override does not parse (one line, instead of Hydra's grammar page).
    """
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from bench.errors import BenchError

    args = argv[1:]
    overrides = [a for a in args if a not in ("-m", "--multirun")]
    if any(a.startswith("-") for a in overrides) or any(a.lstrip("+~").startswith("hydra/sweeper") for a in overrides):
        return None
    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_overrides([override])
        except Exception as exc:
            first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
            raise BenchError(f"{override!r} is no override Hydra can read ({first}); write key=value, quoting "
                             "a value with spaces or brackets ('key=[1,2]', key='a b')") from None
    if not any(a in ("-m", "--multirun") for a in args):
        return [overrides]
    hydra = [a for a in overrides if a.lstrip("+~").startswith("hydra")]
    parsed = parser.parse_overrides([a for a in overrides if a not in hydra])
    return [[*job, *hydra] for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def _why(exc: BaseException) -> str:
    """One line for a job's error: a missing option names the options its group has."""
    import re

    from bench.errors import find_user_error

    error = find_user_error(exc) or exc
    text = str(error)
    missing = re.search(r"Could not find '([\w/]+)/([^']+)'", text)
    options = re.search(r"Available options in '([\w/]+)':\n((?:\t[^\n]*\n?)+)", text)
    if missing and options:
        choices = ", ".join(o.strip() for o in options.group(2).splitlines() if o.strip())
        return f"{missing.group(1)}={missing.group(2)} is not an option of {missing.group(1)}; choose one of {choices}"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "; ".join(line.rstrip(".") for line in lines[:2]) or type(error).__name__


def check_jobs(jobs: list[list[str]]) -> list[str]:
    """One line per job that would fail before training: its overrides do not compose, or a
    setting is out of range. [] when every job may start."""
    from contextlib import nullcontext

    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from bench.composition import CONFIG_DIR

    problems = []
    # a job is named by what sets it apart (the swept values), not by the overrides all jobs share
    shared = set.intersection(*(set(j) for j in jobs)) if len(jobs) > 1 else set()
    inside = GlobalHydra.instance().is_initialized()
    with nullcontext() if inside else initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        for number, job in enumerate(jobs[:MAX_CHECKED]):
            try:
                cfg: Any = compose([*job, "output_dir=unused"])
                if not cfg.get("resume"):
                    check_settings(cfg, writes=False)  # where a job writes is checked where it runs
            except Exception as exc:
                own = [o for o in job if o not in shared] or job
                problems.append(f"job {number} ({' '.join(own)}): {_why(exc)}")
    return problems


#: set once the command line has checked the sweep's jobs, so the sweep's callback does not again
CHECKED_ENV = "BENCH_SWEEP_CHECKED"


def refuse_bad_jobs(jobs: list[list[str]] | None) -> None:
    """Exit with status 2, naming each bad job, when any job of the sweep would fail before training."""
    import os
    import sys

    if jobs and os.environ.get(CHECKED_ENV) == str(len(jobs)):
        return  # the same jobs, checked by `python -m bench` before Hydra started
    problems = check_jobs(jobs) if jobs else []
    if problems and len(jobs or []) == 1:  # a single run: its error, in one line
        print(f"error: {problems[0].split(': ', 1)[1]}", file=sys.stderr)
        sys.exit(2)
    if problems:
        print(f"error: {len(problems)} of {len(jobs or [])} jobs would fail before training; no job was started:",
              file=sys.stderr)
        for line in problems:
            print(f"  {line}", file=sys.stderr)
        sys.exit(2)
