"""Fixtures of corenn-distributed's tests; the helpers live in distributed_jobs.py (a name no other test folder uses)."""
from distributed_jobs import _no_default_group_left, launch  # noqa: F401  (fixtures)
