"""When a long job should stop and hand the rest of its work to a new job.

A worker Lambda is killed at its timeout (at most 900 s) and its message is then retried from
the start, so a job that cannot finish in one invocation would never finish. Such a job works
in steps (groups of files) and, between steps, stops while there is still time to save what
is left as a new job.
"""

from __future__ import annotations

# Floor of the time kept in hand: the directory refresh that ends a job (an LLM call per
# directory level) and queueing the continuation must fit in it.
MIN_MARGIN_S = 60.0


def margin_s(slowest_step_s: float) -> float:
    """Time to keep in hand before starting another step: twice the slowest step so far (the
    next one may be slower still, a larger file, a slower LLM answer), at least MIN_MARGIN_S."""
    return max(MIN_MARGIN_S, 2.0 * slowest_step_s)


def must_hand_on(now: float, deadline: float | None, slowest_step_s: float) -> bool:
    """True when the time left before `deadline` (same clock as `now`; None: no limit) is
    below the margin: stop here and continue in a new job."""
    return deadline is not None and deadline - now < margin_s(slowest_step_s)


def turn_over(now: float, begun: float, slice_s: float | None) -> bool:
    """True when a job that began at `begun` has had its turn (`slice_s`; None: no turns):
    it hands the rest on, behind the jobs that waited meanwhile, however much time it has."""
    return slice_s is not None and now - begun >= slice_s
