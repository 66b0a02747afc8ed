import os
import sys

from bench.app import main, multirun_flag_first, resume_in_place
from bench.sweep import CHECKED_ENV, jobs_from_command_line, refuse_bad_jobs

if __name__ == "__main__":
    # `python -m bench loss=slk -m seed=0,1,2` as well as `-m loss=slk seed=0,1,2`
    sys.argv = resume_in_place(multirun_flag_first(sys.argv))
    # a sweep's every job is composed and checked before Hydra starts any: Hydra would stop at the
    # first that does not compose (even before the sweep, for the default config) without naming it
    jobs = jobs_from_command_line(sys.argv)
    refuse_bad_jobs(jobs)
    if jobs:
        os.environ[CHECKED_ENV] = str(len(jobs))
    main()
