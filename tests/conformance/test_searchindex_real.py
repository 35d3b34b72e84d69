"""The whole SearchIndex conformance suite, k-NN and hybrid included, against a real OpenSearch.

Skipped unless SKALD_TEST_OPENSEARCH_URL is set (see docs/opensearch.md):

    SKALD_TEST_OPENSEARCH_URL       endpoint, e.g. https://search-dev-xyz.eu-west-1.es.amazonaws.com
    SKALD_TEST_OPENSEARCH_AUTH      none (default) | basic | sigv4-es | sigv4-aoss
    SKALD_TEST_OPENSEARCH_REGION    for SigV4 when the endpoint does not name it
    SKALD_TEST_OPENSEARCH_USER / SKALD_TEST_OPENSEARCH_PASSWORD   for basic
    SKALD_TEST_OPENSEARCH_PIPELINE  optional: a search pipeline name; it is created (RRF) and
                                    hybrid search fuses server-side through it

Each test writes to its own index, `skald-test-<random>`, deleted afterwards. Managed domains
get `refresh=True` (read-your-writes, which the suite checks). OpenSearch Serverless has no
refresh control and is eventually consistent: expect read-after-write tests to fail there.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from skald.adapters.aws.opensearch.index import OpenSearchIndex, build_client
from tests.conformance.test_searchindex import *  # noqa: F403  (the suite's tests, re-collected)
from tests.conformance.test_searchindex import DIM, Env

URL = os.environ.get("SKALD_TEST_OPENSEARCH_URL", "")

pytestmark = [
    pytest.mark.real_opensearch,
    pytest.mark.skipif(not URL, reason="SKALD_TEST_OPENSEARCH_URL is not set"),
]


def _client() -> Any:
    return build_client(
        URL,
        auth=os.environ.get("SKALD_TEST_OPENSEARCH_AUTH", "none"),  # type: ignore[arg-type]
        region=os.environ.get("SKALD_TEST_OPENSEARCH_REGION") or None,
        username=os.environ.get("SKALD_TEST_OPENSEARCH_USER") or None,
        password=os.environ.get("SKALD_TEST_OPENSEARCH_PASSWORD"),
        timeout=60.0,
    )


@pytest.fixture  # type: ignore[no-redef]
def index_env() -> Iterator[Env]:
    """Overrides the suite's parametrised fixture: one real-cluster backend, k-NN on."""
    serverless = os.environ.get("SKALD_TEST_OPENSEARCH_AUTH") == "sigv4-aoss"
    pipeline = os.environ.get("SKALD_TEST_OPENSEARCH_PIPELINE") or None
    name = f"skald-test-{uuid.uuid4().hex[:12]}"
    opened: list[OpenSearchIndex] = []

    def open_index(*, production: bool = False) -> OpenSearchIndex:
        # `production`: the deployed write policy, refresh=False.
        index = OpenSearchIndex(
            _client(),
            name,
            dimension=DIM,
            hybrid_pipeline=pipeline,
            refresh=not (serverless or production),
            serverless=serverless,
        )
        index.ensure_index()
        opened.append(index)
        return index

    if pipeline:
        open_index().ensure_hybrid_pipeline()
    try:
        yield Env("opensearch-real", True, open_index, lambda: open_index(production=True))
    finally:
        for index in reversed(opened):
            index.close()
        admin = OpenSearchIndex(_client(), name, dimension=DIM)
        with admin:
            admin.delete_index()
