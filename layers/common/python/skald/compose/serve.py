"""`skald serve`: one composition with every router, the job workers and the idle timer.

local: the data dir's stores; worker threads drain the SQLite queue with the job handlers.
aws-local: emulators started here, the AWS adapters against them, and each queue drained by
its worker function's Lambda handler (its own composition, as in the cloud) fed real SQS
messages. Either way startup runs the same setup as `skald admin init`.
"""

from __future__ import annotations

import functools
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import uvicorn

from skald import catalog
from skald.adapters.factory import SetupReport
from skald.compose.composition import Composition
from skald.compose.entrypoints import adapter_factory, lambda_handler
from skald.config import Settings
from skald.domain.access.call_context import tenant_scope
from skald.jobs.deadline import job_deadline, job_slice
from skald.jobs.registry import BATCH_HANDLERS, HANDLERS, job_died, payload_tenant, refused
from skald.services.metering.jobs import metered_batch, metered_job

if TYPE_CHECKING:
    from skald.adapters.aws.local_stack import LocalAwsStack
    from skald.ports import Job

log = logging.getLogger("skald")


class IdleTimer:
    """The idle auto-commit timer, which also sweeps half-done commits now and then and
    queues the re-fetch of due watches. Deadlines live in the state and blob stores, so a
    restart picks up where it left off."""

    def __init__(self, services: Composition, interval_s: float = 1.0) -> None:
        self.services = services
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="skald-idle-timer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        services = self.services
        sweep_every = max(1, round(services.settings.commit_recovery_grace_s / 2 / self.interval_s))
        ticks = 0
        while not self._stop.wait(self.interval_s):
            ticks += 1
            try:
                services.sessions.enqueue_due_commits(services.clock())
                services.watches.run_due()  # watches whose re-fetch is due
                if ticks % sweep_every == 0:
                    services.recover_commits()
                    services.tenant_deletion.resume()  # purges whose job was lost
            except Exception:  # the timer must survive a transient failure
                log.exception("idle auto-commit tick failed")


class AnnouncingServer(uvicorn.Server):
    """uvicorn's server, which logs one line once it listens (uvicorn's own startup lines are
    below the level `skald serve` shows)."""

    def __init__(
        self,
        config: uvicorn.Config,
        ready: str,
        on_shutdown: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(config)
        self.ready = ready
        self.on_shutdown = on_shutdown

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            log.info(self.ready)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn ends a SIGTERM'd process by raising the signal again once it has shut down,
        # before `run()` returns to its caller: what must happen at exit happens here.
        await super().shutdown(sockets)
        if self.on_shutdown is not None:
            try:
                self.on_shutdown()
            except Exception:
                log.exception("shutdown step failed")


def _pool_kinds() -> dict[str, str]:
    """The job kinds the local pool takes -> the kind each runs as: every kind, and each of an
    earlier release as the kind it became (its rows may wait in the queue still)."""
    return {**{j.kind: j.kind for j in catalog.JOBS}, **catalog.KIND_ALIASES}


class JobDispatch:
    """What the local worker pool runs for a job kind: its handler, for one job or for jobs
    waiting together, inside the job's account scope, with the configured time budget as the
    deadline, each job's outcome and time recorded in the metrics. The handlers are looked up
    per job, so one set in the registry later (tests) is the one that runs."""

    def __init__(self, services: Composition, budget_s: float | None) -> None:
        self.services = services
        self.metrics = services.metrics
        self.budget_s = budget_s

    def deadline(self) -> float | None:
        return None if self.budget_s is None else time.monotonic() + self.budget_s

    def single(self, kind: str) -> Callable[[Job], None]:
        return functools.partial(self.run, kind)

    def batch(self, kind: str) -> Callable[[list[Job]], list[str | None]]:
        return functools.partial(self.run_batch, kind)

    def run(self, kind: str, job: Job) -> None:
        started, outcome = time.perf_counter(), "error"
        try:
            with (
                job_deadline(self.deadline()),
                job_slice(self.services.settings.job_slice_s),
                tenant_scope(payload_tenant(job.payload)),
            ):
                if not refused(self.services, kind, job.payload):
                    with metered_job(self.services, kind, job.payload):
                        HANDLERS[kind](self.services, job.payload)
            outcome = "ok"
        finally:
            self.metrics.job(job.queue, kind, outcome, time.perf_counter() - started)

    def run_batch(self, kind: str, jobs: list[Job]) -> list[str | None]:
        """One error (None: done) per job, in order; every job counts as failed until the
        handler answered for all of them."""
        started = time.perf_counter()
        errors: list[str | None] = ["failed"] * len(jobs)
        try:
            with job_deadline(self.deadline()), job_slice(self.services.settings.job_slice_s):
                errors = self._by_account(kind, jobs)
            return errors
        finally:
            share = (time.perf_counter() - started) / max(len(jobs), 1)
            for job, error in zip(jobs, errors, strict=False):
                self.metrics.job(job.queue, kind, "ok" if error is None else "error", share)

    def _by_account(self, kind: str, jobs: list[Job]) -> list[str | None]:
        # One account at a time: a job may touch its own account's data only.
        groups: dict[str | None, list[int]] = {}
        for i, job in enumerate(jobs):
            groups.setdefault(payload_tenant(job.payload), []).append(i)
        answers: list[str | None] = ["failed"] * len(jobs)
        for members in groups.values():
            for i, error in zip(
                members, self._one_account(kind, [jobs[i] for i in members]), strict=True
            ):
                answers[i] = error
        return answers

    def _one_account(self, kind: str, jobs: list[Job]) -> list[str | None]:
        """One account's jobs in one pass of the batch handler; a job refused (its account or
        user being deleted) is dropped, which counts as done."""
        with tenant_scope(payload_tenant(jobs[0].payload)):
            errors: list[str | None] = [None] * len(jobs)
            kept = [
                i for i, job in enumerate(jobs) if not refused(self.services, kind, job.payload)
            ]
            if kept:
                payloads = [jobs[i].payload for i in kept]
                # Stopped at a plan limit, a batch's tasks have failed: its jobs are done.
                answers: list[str | None] = [None] * len(kept)
                with metered_batch(self.services, kind, payloads):
                    answers = BATCH_HANDLERS[kind](self.services, payloads)
                for i, error in zip(kept, answers, strict=True):
                    errors[i] = error
            return errors


class ServeRuntime:
    def __init__(self, settings: Settings) -> None:
        self.stack: LocalAwsStack | None = None
        if settings.backend == "aws-local":
            from skald.adapters.aws.local_stack import LocalAwsStack

            self.stack = LocalAwsStack(settings)
            settings = self.stack.start()
        self.factory = adapter_factory(settings)
        try:
            self.setup: SetupReport = self.factory.setup()
        except BaseException:
            self._close_backend()
            raise
        self.services = Composition(settings, self.factory, name="serve")
        self.services.meter.start()  # usage flushed in the background, and at stop()
        self._workers: Any = None
        self._lock = threading.Lock()
        self._timer: IdleTimer | None = None

    @property
    def settings(self) -> Settings:
        return self.services.settings

    def ready_line(self, url: str) -> str:
        """What `skald serve` says once it listens: where, on which data, how callers are
        authenticated (never the key itself)."""
        s = self.settings
        if self.stack is not None:  # its settings name the emulators as an AWS backend
            backend, data = "aws-local", "in-memory emulators (moto, osmem-server), gone at exit"
        elif s.backend == "aws":
            backend, data = "aws", f"s3://{s.bucket}"
        else:
            backend, data = s.backend, str(s.data_dir.resolve())
        auth = self.services.auth_mode
        how = (
            "API keys required"
            if auth == "api_key"
            else "no API key, every caller trusted: loopback only"
        )
        return f"Skald is ready at {url} (backend {backend}; data {data}; auth {auth}: {how})"

    def recover_commits(self) -> dict[str, int]:
        """Before the workers and the first request: with embedded storage every unsealed
        commit now is an orphan of a previous process (kill -9, power loss), finished or rolled
        back here. A shared deployed table also has live functions: only commits past the
        grace there. A tombstone whose purge was never queued (a crash between the two) gets
        its purge now; a purge cut short is in the queue still and runs again."""
        local = self.settings.backend != "aws"
        done = self.services.recover_commits(grace_s=0 if local else None)
        self.services.tenant_deletion.resume(stale_after_s=0 if local else None)
        return done

    def start_idle_timer(self, interval_s: float = 1.0) -> None:
        self._timer = IdleTimer(self.services, interval_s)
        self._timer.start()

    def start_workers(self) -> None:
        with self._lock:
            if self._workers is not None or self.settings.worker_threads < 1:
                return  # none: another process drains the queues (or nothing does, in tests)
            if self.stack is not None:
                self.stack.drain(
                    {q.name: lambda_handler(q.worker, factory=self.factory) for q in catalog.QUEUES}
                )
                self._workers = self.stack
            else:
                self._workers = self._worker_pool()

    def _worker_pool(self) -> Any:
        from skald.adapters.local.workers import JobWorkerPool

        services, queue = self.services, self.services.queue
        dispatch = JobDispatch(services, self.settings.job_time_budget_s)
        release = getattr(queue, "release_leases", None)
        if callable(release):
            release()  # leases of a previous process of this data dir are dead
        kinds = _pool_kinds()
        pool = JobWorkerPool(
            queue,
            {k: dispatch.single(kind) for k, kind in kinds.items()},
            queues=[q.name for q in catalog.QUEUES],
            threads=self.settings.worker_threads,
            batch_handlers={
                k: dispatch.batch(kind) for k, kind in kinds.items() if kind in BATCH_HANDLERS
            },
            batch_sizes={q.name: q.local_batch for q in catalog.QUEUES if q.local_batch > 1},
        )
        pool.on_dead(lambda job, error: job_died(services, job.kind, job.payload, error))
        pool.start()
        return pool

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.stop()
        with self._lock:
            if self._workers is not None and self._workers is not self.stack:
                self._workers.stop()
            self._workers = None
        try:
            self.services.meter.close()
        except Exception:
            log.exception("the last usage flush failed")
        self._close_backend()

    def _close_backend(self) -> None:
        factory = getattr(self, "factory", None)
        if factory is not None:
            factory.close()
        if self.stack is not None:
            self.stack.stop()
