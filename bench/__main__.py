import os
import sys

from bench.help import show_help, wants_help

if __name__ == "__main__" and wants_help(sys.argv):  # before the training stack is imported: ~1 s, not ~5
    show_help()
    sys.exit(0)

from bench.app import check_hydra_settings, main, multirun_flag_first, resume_in_place  # noqa: E402
from bench.console import wants_verbose  # noqa: E402
from bench.errors import BenchError  # noqa: E402
from bench.sweep import CHECKED_ENV, jobs_from_command_line, refuse_bad_jobs  # noqa: E402

if __name__ == "__main__":
    try:
        # `python -m bench loss=slk -m seed=0,1,2` as well as `-m loss=slk seed=0,1,2`
        sys.argv = resume_in_place(multirun_flag_first(wants_verbose(sys.argv)))
        check_hydra_settings(sys.argv)
        # every job (a single run's one, a sweep's each) is composed and checked before Hydra starts
        # any: Hydra would print a page for a bad option, and stop a sweep at the first job that does
        # not compose (even before the sweep, for the default config) without naming it
        jobs = jobs_from_command_line(sys.argv)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    refuse_bad_jobs(jobs)
    if jobs:
        os.environ[CHECKED_ENV] = str(len(jobs))
    main()
