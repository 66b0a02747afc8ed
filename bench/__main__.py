import sys

from bench.app import main, multirun_flag_first, resume_in_place

if __name__ == "__main__":
    # `python -m bench loss=slk -m seed=0,1,2` as well as `-m loss=slk seed=0,1,2`
    sys.argv = resume_in_place(multirun_flag_first(sys.argv))
    main()
