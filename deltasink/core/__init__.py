"""The engine-free two-phase-commit core (Flink's ``TwoPhaseCommitSinkFunction``):
versions, the pending set, ordering, timeouts, direct publish and coalescing, decided
from plain values the engines return."""
