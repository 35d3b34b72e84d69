"""In-process worker threads draining a JobQueue (the embedded stand-in for SQS -> Lambda).

Each thread round-robins over its queues (and the queue's lease() over accounts: the SQLite
queue serves the account served least recently first), leases one job at a time and runs
`handlers[job.kind](job)`: success acks, an exception (or an unknown kind) nacks with the
exception text. A queue listed in `batch_sizes` is leased up to that many jobs at once, and jobs
of a kind with a batch handler run together, as SQS hands a batch to a Lambda: the handler
returns an error (or None) per job, and each job is acked or nacked on its own.
A heartbeat thread extends the leases of running jobs, so a job that outlives
`visibility_s` is not delivered twice while it still runs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from skald.adapters.local.sqlite.jobqueue import SqliteJobQueue
from skald.domain.ops.quiescence import settle_mark, wait_quiet
from skald.ports import Job, JobQueue, Lease

log = logging.getLogger(__name__)

JobHandler = Callable[[Job], None]
# Jobs -> one error (None = done) per job, in order.
BatchHandler = Callable[[list[Job]], list[str | None]]
DeadCallback = Callable[[Job, str], None]


class JobWorkerPool:
    def __init__(
        self,
        queue: JobQueue,
        handlers: dict[str, JobHandler],
        *,
        queues: list[str],
        threads: int = 2,
        visibility_s: float = 300,
        poll_interval_s: float = 0.05,
        idle_poll_max_s: float = 1.0,
        batch_handlers: dict[str, BatchHandler] | None = None,
        batch_sizes: dict[str, int] | None = None,
    ) -> None:
        if threads < 1:
            raise ValueError("threads must be >= 1")
        if not queues:
            raise ValueError("at least one queue is needed")
        self._queue = queue
        self._handlers = dict(handlers)
        self._batch_handlers = dict(batch_handlers or {})
        self._batch_sizes = dict(batch_sizes or {})
        if any(n < 1 for n in self._batch_sizes.values()):
            raise ValueError("batch sizes must be >= 1")
        self._queues = list(queues)
        self._thread_count = threads
        self._visibility_s = visibility_s
        self._poll_s = poll_interval_s
        # Idle, a thread polls at poll_interval_s, then twice as long after each empty pass up
        # to idle_poll_max_s: an idle server's workers wake a few times a second, not 20
        # times per thread (4 SQLite queries a wake). A queue that tells of its enqueues
        # (SqliteJobQueue.on_enqueue) wakes them at once; other processes' jobs and delayed
        # retries wait at most idle_poll_max_s.
        self._idle_max_s = max(idle_poll_max_s, poll_interval_s)
        self._wake = threading.Condition()
        self._wakes = 0  # enqueues told of so far
        self._unsubscribe: Callable[[], None] | None = None
        self._dead_callbacks: list[DeadCallback] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._running: dict[str, Lease] = {}  # receipt -> lease of a job being handled
        self._active = 0  # jobs leased by this pool whose handling is not finished

    def on_dead(self, callback: DeadCallback) -> None:
        """`callback(job, error)` runs after a nack dead-letters a job of this pool."""
        self._dead_callbacks.append(callback)

    @property
    def running(self) -> bool:
        return bool(self._threads)

    def start(self) -> None:
        if self._threads:
            raise RuntimeError("worker pool already started")
        self._stop.clear()
        workers = []
        for i in range(self._thread_count):
            # Each thread starts at a different queue so no queue starves another.
            shift = i % len(self._queues)
            order = self._queues[shift:] + self._queues[:shift]
            workers.append(
                threading.Thread(
                    target=self._work, args=(order,), name=f"skald-worker-{i}", daemon=True
                )
            )
        subscribe = getattr(self._queue, "on_enqueue", None)
        if callable(subscribe):
            self._unsubscribe = subscribe(self._nudge)
        heartbeat = threading.Thread(
            target=self._heartbeat, args=(workers,), name="skald-worker-heartbeat", daemon=True
        )
        # Heartbeat last: stop() joins in this order, and it outlives the workers.
        self._threads = [*workers, heartbeat]
        for t in self._threads:
            t.start()

    def stop(self, timeout_s: float | None = None) -> None:
        """Stops leasing, lets running jobs finish and joins the threads."""
        self._stop.set()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._nudge()  # idle threads see the stop now
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for t in self._threads:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self._threads = [t for t in self._threads if t.is_alive()]

    def __enter__(self) -> JobWorkerPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_idle(self, timeout_s: float) -> bool:
        """True once every queue of the pool has nothing pending (delayed retries included) or
        in flight and no handler or dead-letter callback of this pool is still running, all at
        one instant (`domain.ops.quiescence`: two quiet readings with the same settle counts)."""
        return wait_quiet(
            self._reading,
            timeout_s,
            clock=time.monotonic,
            sleep=time.sleep,
            first_delay_s=self._poll_s,
            max_delay_s=self._poll_s,
        )

    def _reading(self) -> tuple[int, ...] | None:
        # Stats first, then the local count: a job acked between the two reads is still
        # counted as active until its callbacks are done.
        mark = settle_mark(self._queue.stats(q) for q in self._queues)
        with self._lock:
            return mark if self._active == 0 else None

    # ---------------------------------------------------------------------------------------

    def _nudge(self) -> None:
        with self._wake:
            self._wakes += 1
            self._wake.notify_all()

    def _idle(self, delay_s: float, seen: int) -> bool:
        """Waits up to `delay_s` for an enqueue after the `seen`-th or for stop(); True when
        woken by an enqueue (or the stop) rather than by the time."""
        with self._wake:
            return self._wake.wait_for(lambda: self._wakes != seen or self._stop.is_set(), delay_s)

    def _work(self, queues: list[str]) -> None:
        delay = self._poll_s
        while not self._stop.is_set():
            seen = self._wakes  # read before the pass: an enqueue during it is not missed
            worked = False
            for q in queues:
                if self._stop.is_set():
                    break
                try:
                    leases = self._queue.lease(
                        q, max_jobs=self._batch_sizes.get(q, 1), visibility_s=self._visibility_s
                    )
                except Exception:
                    log.exception("leasing from queue %s failed", q)
                    leases = []
                worked = worked or bool(leases)
                self._handle_all(leases)
            # Busy, or woken by an enqueue: poll again soon; else back off.
            if worked or self._idle(delay, seen):
                delay = self._poll_s
            else:
                delay = min(delay * 2, self._idle_max_s)

    def _handle_all(self, leases: list[Lease]) -> None:
        by_kind: dict[str, list[Lease]] = {}
        for lease in leases:
            by_kind.setdefault(lease.job.kind, []).append(lease)
        for kind, group in by_kind.items():
            batch = self._batch_handlers.get(kind)
            if batch is not None:
                self._run(batch, group)
            else:
                single = self._one_at_a_time(kind)
                for lease in group:  # each settled as soon as it is done
                    self._run(single, [lease])

    def _one_at_a_time(self, kind: str) -> BatchHandler:
        """The plain handler of `kind` seen as a batch handler."""
        handler = self._handlers.get(kind)

        def run(jobs: list[Job]) -> list[str | None]:
            errors: list[str | None] = []
            for job in jobs:
                if handler is None:
                    errors.append(f"no handler for job kind {job.kind!r}")
                    log.error("job %s: %s", job.job_id, errors[-1])
                    continue
                try:
                    handler(job)
                    errors.append(None)
                except Exception as exc:
                    log.exception(
                        "job %s (%s) failed on attempt %d", job.job_id, job.kind, job.attempts
                    )
                    errors.append(f"{type(exc).__name__}: {exc}")
            return errors

        return run

    def _run(self, handler: BatchHandler, leases: list[Lease]) -> None:
        """Runs `leases` through `handler` and settles each: ack, or nack with its error."""
        with self._lock:
            self._active += len(leases)
            for lease in leases:
                self._running[lease.receipt] = lease
        try:
            jobs = [lease.job for lease in leases]
            try:
                errors = handler(jobs)
                if len(errors) != len(jobs):
                    raise RuntimeError(
                        f"batch handler answered {len(errors)} outcomes for {len(jobs)} jobs"
                    )
            except Exception as exc:
                log.exception("batch of %d %s jobs failed", len(jobs), jobs[0].kind)
                errors = [f"{type(exc).__name__}: {exc}"] * len(jobs)
            with self._lock:
                for lease in leases:
                    self._running.pop(lease.receipt, None)
            for lease, error in zip(leases, errors, strict=True):
                try:
                    if error is None:
                        if not self._queue.ack(lease):
                            log.warning(
                                "job %s finished after its lease was lost", lease.job.job_id
                            )
                    else:
                        self._fail(lease, error)
                except Exception:
                    # The queue itself failed (e.g. the database is locked for too long): the
                    # lease expires and the job is delivered again.
                    log.exception("could not settle job %s", lease.job.job_id)
        finally:
            with self._lock:
                for lease in leases:
                    self._running.pop(lease.receipt, None)
                self._active -= len(leases)

    def _fail(self, lease: Lease, error: str) -> None:
        if isinstance(self._queue, SqliteJobQueue):
            dead = self._queue.nack_outcome(lease, error) == "dead"
        else:
            # Generic port: nack returns nothing, so look for the job among the dead letters.
            self._queue.nack(lease, error)
            dead = any(
                d.job.job_id == lease.job.job_id for d in self._queue.dead_letters(lease.job.queue)
            )
        if not dead:
            return
        for callback in list(self._dead_callbacks):
            try:
                callback(lease.job, error)
            except Exception:
                log.exception("dead-letter callback failed for job %s", lease.job.job_id)

    def _heartbeat(self, workers: list[threading.Thread]) -> None:
        interval = max(self._visibility_s / 3, self._poll_s)
        while not self._stop.wait(interval):
            self._extend_running()
        # Jobs still finishing after stop() keep their leases until their workers end.
        for t in workers:
            t.join(interval)
            while t.is_alive():
                self._extend_running()
                t.join(interval)

    def _extend_running(self) -> None:
        with self._lock:
            leases = list(self._running.values())
        for lease in leases:
            try:
                self._queue.extend(lease, self._visibility_s)
            except Exception:
                log.exception("could not extend the lease of job %s", lease.job.job_id)
