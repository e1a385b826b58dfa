"""Optimizers (spec 000 §3.8): hyperparameter objects with pure, compiled, pytree-aware
updates, their learning-rate schedules, and the ``Trainer`` that fuses an update with its
gradient into one compiled step (§3.7)."""

from . import schedules
from .optimizers import SGD, Adam, Optimizer
from .trainer import Trainer

__all__ = ["Adam", "SGD", "Optimizer", "Trainer", "schedules"]
