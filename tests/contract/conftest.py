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
def synthesised(
    fake_assets: Path,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Synthesised:
    pytest.importorskip("aws_cdk", reason="infra extra not installed (pip install -e '.[infra]')")
    from aws_cdk.assertions import Template as CdkTemplate

    from infra.app import build
    from tests.contract.seams import function_ids

    stack = build(
        cdk_context(CONTRACT_CONTEXT, fake_assets),
        outdir=str(tmp_path_factory.mktemp("cdk-contract")),
    )
    doc = json.loads(json.dumps(CdkTemplate.from_stack(stack).to_json()))
    return Synthesised(doc, function_ids(stack))


@pytest.fixture
def template(synthesised: Synthesised) -> Iterator[Any]:
    from tests.contract.cfn import Template

    yield Template.of(synthesised.doc)


@dataclass
class Recording:
    """What the drive of the emulated stack recorded (see harness.py and scenario.py)."""

    template: Any  # cfn.Template, bound to the emulated resources
    function_ids: dict[str, str]
    calls: list[Any]  # recorder.AwsCall
    hits: list[Any]  # harness.Hit
    principals: dict[str, str]  # extra recorded principals (the scheduler) -> role id
    cold_started: list[str]  # functions whose cold start ran while the recorder listened


@pytest.fixture(scope="session")
def recording(synthesised: Synthesised, tmp_path_factory: pytest.TempPathFactory) -> Recording:
    pytest.importorskip("moto", reason="dev extra not installed (pip install -e '.[dev]')")
    pytest.importorskip("osmem_server", reason="dev extra not installed")
    from tests.contract.harness import Deployment
    from tests.contract.scenario import drive

    deployment = Deployment(synthesised.doc, synthesised.function_ids)
    with deployment.running() as emulated:
        drive(deployment, emulated.url, emulated.root_key, tmp_path_factory.mktemp("drive"))
        return Recording(
            deployment.template,
            dict(synthesised.function_ids),
            list(emulated.recorder.calls),
            list(emulated.hits),
            dict(emulated.principals),
            sorted(k for k, h in deployment.hosts.items() if h.handler),
        )
