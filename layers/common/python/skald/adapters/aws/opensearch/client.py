"""The OpenSearch client of the records index: construction (endpoint, auth, signing) and how
the cluster's errors read (which 400s mean "this cluster cannot run that query")."""

from __future__ import annotations

import re
from typing import Any, Literal
from urllib.parse import urlparse

from opensearchpy import OpenSearch, RequestsAWSV4SignerAuth, RequestsHttpConnection
from opensearchpy.exceptions import TransportError

Auth = Literal["none", "sigv4-es", "sigv4-aoss", "basic"]


class OpenSearchIndexError(RuntimeError):
    """A write was refused by OpenSearch (per-document bulk errors, delete-by-query failures)."""


_AWS_REGION_RE = re.compile(r"\.([a-z]{2}(?:-[a-z]+)+-\d+)\.(?:es|aoss)\.amazonaws\.com")


def build_client(
    endpoint: str,
    *,
    auth: Auth = "none",
    region: str | None = None,
    username: str | None = None,
    password: str | None = None,
    timeout: float = 10.0,
    pool_maxsize: int = 16,
) -> OpenSearch:
    """An OpenSearch client for `endpoint` (a URL; https:// is assumed without a scheme).

    auth: "none"; "basic" (username/password); "sigv4-es" (an OpenSearch Service domain) or
    "sigv4-aoss" (an OpenSearch Serverless collection), both signing every request with the
    default boto3 credentials (refreshed as they rotate). The region defaults to the one in an
    AWS endpoint's host name, then to boto3's."""
    url = endpoint if "://" in endpoint else f"https://{endpoint}"
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"not an OpenSearch endpoint URL: {endpoint!r}")
    https = parsed.scheme == "https"
    options: dict[str, Any] = {
        "hosts": [url],
        "use_ssl": https,
        "verify_certs": https,
        "timeout": timeout,
        "max_retries": 3,
        "retry_on_timeout": True,
        "pool_maxsize": pool_maxsize,
    }
    if auth == "none":
        pass
    elif auth == "basic":
        if not username or password is None:
            raise ValueError("basic auth needs a username and a password")
        options["http_auth"] = (username, password)
    elif auth in ("sigv4-es", "sigv4-aoss"):
        import boto3  # only the AWS modes need it

        session = boto3.Session()
        credentials = session.get_credentials()
        if credentials is None:
            raise ValueError(f"{auth}: no AWS credentials found to sign requests")
        match = _AWS_REGION_RE.search(parsed.hostname)
        region = region or (match.group(1) if match else None) or session.region_name
        if not region:
            raise ValueError(f"{auth}: no AWS region given, none in the endpoint or the config")
        # "es" signs for managed domains, "aoss" for serverless collections.
        service = "es" if auth == "sigv4-es" else "aoss"
        options["http_auth"] = RequestsAWSV4SignerAuth(credentials, region, service)
        options["connection_class"] = RequestsHttpConnection
    else:
        raise ValueError(f"auth must be none, basic, sigv4-es or sigv4-aoss, not {auth!r}")
    return OpenSearch(**options)


def error_text(exc: TransportError) -> tuple[str, str]:
    """(error type, reason) of a failed request."""
    info = exc.info if isinstance(exc.info, dict) else {}
    err = info.get("error", exc.error)
    if isinstance(err, dict):
        return str(err.get("type", "")), str(err.get("reason", ""))
    return str(exc.error), str(err)


def is_unsupported(status: int, etype: str, reason: str) -> bool:
    """Whether a failure means the cluster lacks a feature (k-NN, neural search, a pipeline)
    rather than a bad request."""
    if status != 400:
        return False
    text = reason.lower()
    return etype in (
        "unsupported_operation_exception",
        "parsing_exception",
        "named_object_not_found_exception",
        "x_content_parse_exception",
    ) or any(s in text for s in ("not supported", "unknown query", "no registered", "pipeline"))
