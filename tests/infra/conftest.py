"""Synthesise each deploy mode once per test session.

Nothing here imports aws_cdk at module level: without the infra extra the test modules skip
themselves (pytest.importorskip) and this file must still import cleanly.

The app reads its Lambda code from `assetsDir`; the tests point it at a tiny fake tree (an
empty layer, one stub per handler) so they never need `make lambda-assets`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the `infra` package lives at the repo root, not in skald

if TYPE_CHECKING:
    from aws_cdk.assertions import Template

    from infra.stack import SkaldStack

VPC_ID = "vpc-0123456789abcdef0"
SUBNETS = ("subnet-0123456789abcdef0", "subnet-0123456789abcdef1")
ZONES = ("eu-west-1a", "eu-west-1b")
SECURITY_GROUP = "sg-0123456789abcdef0"

MODES: dict[str, dict[str, str]] = {
    "dev": {},
    "saas": {"mode": "saas"},
    "saas_serverless": {"mode": "saas", "search": "serverless"},
    "customer": {
        "vpcId": VPC_ID,
        "subnetIds": ",".join(SUBNETS),
        "availabilityZones": ",".join(ZONES),
        "securityGroupId": SECURITY_GROUP,
    },
}

# Synthesised on demand only (not one of `any_mode`'s).
VPC_ENDPOINTS = ("vpce-0123456789abcdef0", "vpce-0123456789abcdef1")
CERTIFICATE = "arn:aws:acm:eu-west-1:123456789012:certificate/0a1b2c3d-4e5f-6789-abcd-ef0123456789"
EXTRA_MODES: dict[str, dict[str, str]] = {
    "dev_without_tenant_credentials": {"tenantCredentials": "false"},
    # The edge options (docs/deploy.md, "The edge").
    "customer_private": {
        **MODES["customer"],
        "apiEndpoint": "private",
        "apiVpcEndpointIds": ",".join(VPC_ENDPOINTS),
        "domainName": "skald.corp.internal",
        "certificateArn": CERTIFICATE,
        "waf": "true",
    },
    "saas_domain_waf": {
        "mode": "saas",
        "domainName": "api.example.com",
        "certificateArn": CERTIFICATE,
        "hostedZoneId": "Z0123456789ABCDEFGHIJ",
        "hostedZoneName": "example.com",
        "disableExecuteApiEndpoint": "true",
        "waf": "true",
        "wafRateLimit": "500",
        "authorizerReservedConcurrency": "80",
    },
    "dev_no_reserved_concurrency": {"authorizerReservedConcurrency": "0"},
}


@dataclass
class Synth:
    name: str
    stack: SkaldStack
    template: Template

    @property
    def json(self) -> Mapping[str, Any]:
        return self.template.to_json()

    def resources(self, cfn_type: str) -> Mapping[str, Mapping[str, Any]]:
        return self.template.find_resources(cfn_type)

    def logical_id(self, construct: Any) -> str:
        node = getattr(construct, "node", construct)
        child = node.default_child
        assert child is not None, f"{node.path} renders no resource"
        return self.stack.get_logical_id(child)


def cdk_context(extra: dict[str, str], assets: Path) -> dict[str, Any]:
    """Overrides on top of cdk.json's context (build() merges them, feature flags included)."""
    context: dict[str, Any] = {**extra, "assetsDir": str(assets)}
    # Keep nag errors as annotations instead of failing synth, so a finding fails only
    # test_nag_reports_no_unsuppressed_errors, with the list of findings.
    context["@aws-cdk/core:annotationsInValidationReport"] = False
    return context


@pytest.fixture(scope="session")
def fake_assets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("assets")
    (root / "layer" / "python").mkdir(parents=True)
    stub = "def handler(event, context):\n    return None\n"
    from skald import catalog

    for fn in catalog.FUNCTIONS:
        folder = root / "functions" / fn.code
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{fn.handler.split('.')[0]}.py").write_text(stub)
    return root


@pytest.fixture(scope="session")
def synth(
    fake_assets: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], Synth]]:
    cache: dict[str, Synth] = {}

    # Imported here: without the infra extra the test modules skip before any fixture runs.
    from aws_cdk.assertions import Template

    from infra.app import build

    def get(name: str) -> Synth:
        if name not in cache:
            outdir = tmp_path_factory.mktemp(f"cdk-{name}")
            stack = build(
                cdk_context({**MODES, **EXTRA_MODES}[name], fake_assets), outdir=str(outdir)
            )
            cache[name] = Synth(name, stack, Template.from_stack(stack))
        return cache[name]

    yield get


@pytest.fixture(params=list(MODES))
def any_mode(request: pytest.FixtureRequest, synth: Callable[[str], Synth]) -> Synth:
    return synth(request.param)


@pytest.fixture
def dev(synth: Callable[[str], Synth]) -> Synth:
    return synth("dev")


@pytest.fixture
def saas(synth: Callable[[str], Synth]) -> Synth:
    return synth("saas")


@pytest.fixture
def saas_serverless(synth: Callable[[str], Synth]) -> Synth:
    return synth("saas_serverless")


@pytest.fixture
def customer(synth: Callable[[str], Synth]) -> Synth:
    return synth("customer")
