"""Fixtures of the contract tests: the synthesised template they check (dev mode with a Bedrock
reranker, so every optional grant is present) and the aws-local drive whose recorded calls the
IAM contract evaluates (see harness.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.infra.conftest import cdk_context, fake_assets  # noqa: F401  (fixture re-used)

RERANK_MODEL = "amazon.rerank-v1:0"
CONTRACT_CONTEXT = {"bedrockRerankModel": RERANK_MODEL}


@dataclass
class Synthesised:
    doc: dict[str, Any]
    function_ids: dict[str, str]  # function key -> logical id of its Lambda function


@pytest.fixture(scope="session")
def synthesised(fake_assets: Path,  # noqa: F811
                tmp_path_factory: pytest.TempPathFactory) -> Synthesised:
    pytest.importorskip("aws_cdk", reason="infra extra not installed (pip install -e '.[infra]')")
    from aws_cdk.assertions import Template as CdkTemplate

    from infra.app import build
    from tests.contract.seams import function_ids

    stack = build(cdk_context(CONTRACT_CONTEXT, fake_assets),
                  outdir=str(tmp_path_factory.mktemp("cdk-contract")))
    doc = json.loads(json.dumps(CdkTemplate.from_stack(stack).to_json()))
    return Synthesised(doc, function_ids(stack))


@pytest.fixture
def template(synthesised: Synthesised) -> Iterator[Any]:
    from tests.contract.cfn import Template

    yield Template.of(synthesised.doc)
