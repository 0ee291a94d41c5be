"""Every option of `pipeplan plan` and `pipeplan jobs create`, once: the CLI's
flag, the Python client's keyword and the pipeplan.v1 field it sets. The client
(plan, create_job, replan_job) takes exactly these keywords, and
tests/python/test_client_options.py compares the table with the flags
`pipeplan plan --help` and `pipeplan jobs create --help` list, so the two cannot
drift apart: a new CLI flag fails that test until it is added here.

PLAN: PlanOptions fields (plan(), create_job(), replan_job() keywords).
TRAINING: TrainingSpec fields (the keys of create_job's `training` dict).
NOT_REQUEST: CLI flags that shape the command's output or name its input
files, with the Python argument that stands for them (None: none needed).
"""

import collections

Option = collections.namedtuple("Option", "flag keyword field kind")

# kind: int, float, str, bool, or a dict of the names a wire enum takes.
PLAN = (
    Option("ranks", "ranks", "num_ranks", int),
    Option("replicas", "replicas", "num_replicas", int),
    Option("max-replicas", "max_replicas", "max_replicas", int),
    Option("microbatches", "microbatches", "microbatches", int),
    Option("global-batch", "global_batch", "global_batch", int),
    Option("allreduce-bucket-bytes", "allreduce_bucket_bytes", "allreduce_bucket_bytes", int),
    Option("schedule", "schedule", "schedule", "schedule"),
    Option("chunks-per-rank", "chunks_per_rank", "chunks_per_rank", int),
    Option("method", "method", "method", "method"),
    Option("comm", "comm_model", "comm_model", "comm_model"),
    Option("optimizer", "optimizer", "optimizer", "optimizer"),
    Option("precision", "precision", "precision", "precision"),
    Option("optimizer-multiplier", "optimizer_state_multiplier", "optimizer_state_multiplier",
           float),
    Option("cut-granularity", "cut_granularity", "cut_granularity", str),
    Option("time-limit", "time_limit_seconds", "time_limit_seconds", float),
    Option("gap", "relative_gap", "relative_gap", float),
)

# `jobs create`'s training flags. --optimizer is both: the memory model's
# optimizer (PLAN) and the one that trains; as in the CLI, the plan keyword
# `optimizer` also names the training optimizer when `training` gives none.
TRAINING = (
    Option("model-package", "model_package", "model_package", str),
    Option("data", "data", "data", str),
    Option("batch-size", "batch_size", "batch_size", int),
    Option("optimizer", "optimizer", "optimizer", str),
    Option("lr", "lr", "lr", float),
    Option("weight-decay", "weight_decay", "weight_decay", float),
    Option("momentum", "momentum", "momentum", float),
    Option("clip-grad-norm", "clip_grad_norm", "clip_grad_norm", float),
    Option("loss", "loss", "loss", str),
    Option("max-steps", "max_steps", "max_steps", int),
    Option("checkpoint-dir", "checkpoint_dir", "checkpoint_dir", str),
    Option("checkpoint-every", "checkpoint_every", "checkpoint_every", int),
    Option("dtype", "dtype", "dtype", str),
    Option("skip-nonfinite-steps", "skip_nonfinite_steps", "skip_nonfinite_steps", bool),
    Option("seed", "seed", "seed", int),
    Option("snapshot-every", "snapshot_every", "snapshot_every", int),
)

# The CLI's defaults for training fields the user leaves out (training_flags.cc).
TRAINING_DEFAULTS = {"optimizer": "adamw", "lr": 1e-3, "dtype": "float32"}

NOT_REQUEST = {
    "graph": "graph", "cluster": "cluster", "name": "name",  # positional in Python
    "explain": None, "svg": None,  # what `pipeplan plan` prints or draws
}

# Deprecated CLI spellings (`--stages` for --ranks, `--chunks`).
CLI_ALIASES = {"stages": "ranks", "chunks": "chunks-per-rank"}


def plan_keywords():
    return [o.keyword for o in PLAN]


def training_keys():
    return [o.keyword for o in TRAINING]
