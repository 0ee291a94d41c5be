"""The losses a pipeplan job trains with, under their old module name: what
pipeplan.loss holds, for the scripts and tests that import pipeplan_loss."""

from pipeplan.loss import LOSSES, check_targets, compute  # noqa: F401 (re-exported)
