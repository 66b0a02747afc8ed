"""Studies as data: conf/study/<name>.yaml run, followed and reported by ``python -m bench.study``."""
