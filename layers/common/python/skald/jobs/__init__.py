"""Job handlers: pure functions of (the services they need, job payload), run by local
worker threads and by the SQS worker Lambdas alike. `skald.catalog` says which runs which
kind."""
