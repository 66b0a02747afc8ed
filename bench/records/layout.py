"""The files of a run folder and the states a run is in: names every records module shares
(they import nothing, so the lock and the schema need not import each other)."""

RESULTS_FILE = "results.json"
PER_USER_FILE = "per_user_test.npz"
RUN_CONFIG_FILE = "run_config.yaml"
CHECKPOINT_DIR = "checkpoints"

RUNNING, COMPLETED, FAILED, INTERRUPTED = "running", "completed", "failed", "interrupted"
#: the training loss became non-finite or exploded (``train.divergence_factor``): the run ended
#: without a test, and its numbers are not results
DIVERGED = "diverged"
#: set by a sweep for its jobs (:class:`bench.sweep.SweepCallback`): each run records it, so the
#: sweep's summary tells its own runs from those an earlier sweep left in the folder
SWEEP_ID_ENV = "BENCH_SWEEP_ID"
#: what a run writes into its folder: a new run (or ``force=true``) clears these, and nothing else,
#: before it writes, so no file of an earlier run (a ``last.ckpt`` a later resume would pick up) is
#: mistaken for its own
RUN_ARTIFACTS = ("results.json", "per_user_test.npz", "run_config.yaml", "checkpoints", ".hydra", "bench.log", "csv",
                 "lightning_logs", "wandb", "export", "threshold_study")
