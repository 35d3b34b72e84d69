"""One DynamoDB table for everything transactional (its layout: keys.py).

- statestore.py: DynamoStateStore: tasks, and accounts through accounts.py
- accounts.py: DynamoAccounts: accounts, users, API keys, tombstones
- account_writes.py: the conditions and operations its transactions are built from
- state_items.py: the items of tasks, users, accounts and keys
- sessionstore.py: DynamoSessionStore: sessions, messages, archives
- session_items.py: the items of sessions, messages and archives
- archive_writes.py: an archive's updates, with the session's failed_archive
- commits.py: the commit outbox: unsealed commits found and rolled back
- audit.py: DynamoAuditLog: the audit trail
- extras.py: job counters, dedup claims and the recall ledger
- keys.py: the item layout and its key builders
- table.py: DynamoTable: consistent reads, paginated queries, transactions
- codec.py: attribute value codecs
"""

__all__ = [
    "account_writes",
    "accounts",
    "archive_writes",
    "audit",
    "codec",
    "commits",
    "extras",
    "keys",
    "session_items",
    "sessionstore",
    "state_items",
    "statestore",
    "table",
]
