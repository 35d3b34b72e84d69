"""Context parsing: deploy modes and the mistakes an operator can make on the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("aws_cdk", reason="infra extra not installed (pip install -e '.[infra]')")
pytest.importorskip("cdk_nag", reason="infra extra not installed (pip install -e '.[infra]')")
from aws_cdk import App  # noqa: E402

from infra.app import build  # noqa: E402
from infra.settings import DeploySettings, SettingsError  # noqa: E402

pytestmark = pytest.mark.infra

VPC = "vpc-0123456789abcdef0"
SUBNETS = "subnet-0123456789abcdef0,subnet-0123456789abcdef1"


def settings(**context: Any) -> DeploySettings:
    return DeploySettings.from_context(App(context=context).node)


def test_dev_is_the_default_without_a_vpc() -> None:
    result = settings()
    assert (result.mode, result.vpc, result.search) == ("dev", "none", "domain")
    assert not result.production
    assert result.stack_name == "SkaldDev"


def test_saas_creates_its_own_vpc() -> None:
    result = settings(mode="saas", search="serverless")
    assert (result.mode, result.vpc, result.search) == ("saas", "new", "serverless")
    assert result.production and result.stack_name == "Skald"


def test_a_vpc_id_means_customer_mode() -> None:
    result = settings(vpcId=VPC, subnetIds=SUBNETS, availabilityZones="eu-west-1a,eu-west-1b")
    assert (result.mode, result.vpc) == ("customer", "imported")
    assert result.imported_vpc is not None
    assert result.imported_vpc.subnet_ids == tuple(SUBNETS.split(","))
    assert result.imported_vpc.create_endpoints is False


def test_cli_strings_are_parsed() -> None:
    result = settings(workerMaxConcurrency="7", authorizerCacheTtl="300", vpc="new")
    assert result.worker_max_concurrency == 7
    assert result.authorizer_cache_ttl == 300
    assert result.vpc == "new"


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"mode": "saas", "vpcId": VPC, "subnetIds": SUBNETS}, "mode=saas creates its own VPC"),
        ({"mode": "customer"}, "mode=customer needs"),
        ({"vpcId": VPC}, "subnetIds"),
        ({"vpcId": "vpc-1", "subnetIds": SUBNETS}, "not a VPC id"),
        ({"vpcId": VPC, "subnetIds": "subnet-x"}, "malformed"),
        ({"vpcId": VPC, "subnetIds": SUBNETS, "availabilityZones": "eu-west-1a"}, "one zone"),
        ({"vpcId": VPC, "subnetIds": SUBNETS, "createEndpoints": "true"}, "availabilityZones"),
        ({"search": "elastic"}, "expected one of"),
        ({"workerMaxConcurrency": "1"}, "out of range"),
        ({"createEndpoints": "maybe", "vpcId": VPC, "subnetIds": SUBNETS}, "true or false"),
    ],
)
def test_bad_context_is_rejected(context: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        settings(**context)


def test_customer_domain_across_zones_needs_the_zones(tmp_path: Path) -> None:
    (tmp_path / "layer").mkdir()
    with pytest.raises(SettingsError, match="availabilityZones"):
        build({"vpcId": VPC, "subnetIds": SUBNETS, "assetsDir": str(tmp_path)})


def test_authorizer_cache_keys_on_x_api_key_when_enabled(tmp_path: Path) -> None:
    # Construct-level check (no synth): with a cache the gateway needs an identity source.
    from aws_cdk import aws_apigateway as apigw

    from skald import catalog

    (tmp_path / "layer").mkdir()
    for fn in catalog.FUNCTIONS:
        (tmp_path / "functions" / fn.code).mkdir(parents=True, exist_ok=True)
    stack = build({"authorizerCacheTtl": "300", "assetsDir": str(tmp_path)})
    cfn = stack.api.authorizer.node.default_child
    assert isinstance(cfn, apigw.CfnAuthorizer)
    assert cfn.identity_source == "method.request.header.X-API-Key"
    assert cfn.authorizer_result_ttl_in_seconds == 300
