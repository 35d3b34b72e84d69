"""What operators and the console read, and the back-pressure that protects the queues.

- observer.py: ObserverService: the status of each component and of the system
- stats.py: StatsService: memory health and per-session extraction numbers
- consistency.py: ConsistencyService: a subtree's index records against its files
- index_inspector.py: IndexInspector: the caller's index records as the index holds them
- admission.py: Admission: work refused while the job queues are too deep (429)
"""

__all__ = ["admission", "consistency", "index_inspector", "observer", "stats"]
