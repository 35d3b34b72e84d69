"""Tenant-scoped access on AWS.

- rules.py: which stored items are an account's and which the control plane's: the one rule
  the clients, the IAM policies and the tests share
- clients.py: S3 and DynamoDB calls signed with the current tenant's credentials
"""

__all__ = ["clients", "rules"]
