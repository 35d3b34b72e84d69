"""Job handlers: pure functions of (container, job payload), run by local worker threads and
by the SQS worker Lambdas alike."""
