"""The root API key in a Secrets Manager secret: the key itself, or a JSON object with a
`root_api_key` (or `api_key`) field. Read on demand: the caller (services/tenancy/root_key.py)
decides how long a value is trusted, so a rotated secret takes over within that bound."""

from __future__ import annotations

import json
import threading
from typing import Any


class SecretValue:
    def __init__(
        self, secret_arn: str, *, client: Any = None, endpoint_url: str | None = None
    ) -> None:
        self.secret_arn = secret_arn
        self._client = client
        self._endpoint_url = endpoint_url
        self._lock = threading.Lock()

    def _secrets(self) -> Any:
        with self._lock:
            if self._client is None:
                import boto3

                self._client = boto3.client("secretsmanager", endpoint_url=self._endpoint_url)
            return self._client

    def root_api_key(self) -> str:
        raw = self._secrets().get_secret_value(SecretId=self.secret_arn).get("SecretString")
        if not isinstance(raw, str) or not raw.strip():
            raise RuntimeError(f"secret {self.secret_arn} holds no SecretString")
        return key_in_secret(raw.strip())


def key_in_secret(raw: str) -> str:
    if raw.startswith("{"):
        try:
            doc = json.loads(raw)
        except ValueError:
            return raw
        for field in ("root_api_key", "api_key"):
            value = doc.get(field) if isinstance(doc, dict) else None
            if isinstance(value, str) and value:
                return value
        raise RuntimeError("secret JSON has no root_api_key / api_key field")
    return raw
