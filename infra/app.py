"""CDK entry point (`cdk synth` / `cdk deploy`, see cdk.json).

Deploy modes, all chosen with context:
  (default)                         dev: no VPC, small single-node search domain
  -c vpc=new                        dev in its own isolated VPC
  -c mode=saas [-c search=serverless]   hosted SaaS: new VPC, multi-AZ, data retained
  -c vpcId=vpc-... -c subnetIds=subnet-a,subnet-b   customer VPC (mode=customer)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aws_cdk import App, Aspects, Tags
from cdk_nag import AwsSolutionsChecks

from infra.settings import REPO_ROOT, DeploySettings
from infra.stack import SkaldStack


def build(context: Mapping[str, Any] | None = None, outdir: str | None = None) -> SkaldStack:
    """Build the app and its one stack.

    Without arguments the CDK CLI's context and output directory apply (the CLI passes them
    through the environment). With a context (tests, scripts) it is laid over cdk.json's, so
    the feature flags are the same as under `cdk synth`.
    """
    if context is not None:
        defaults = json.loads((REPO_ROOT / "cdk.json").read_text()).get("context", {})
        context = {**defaults, **context}
    app = App(context=dict(context) if context is not None else None, outdir=outdir)
    settings = DeploySettings.from_context(app.node)
    # Env-agnostic on purpose: no lookups, so synth never needs credentials; account and
    # region come from the deploying profile.
    stack = SkaldStack(app, settings.stack_name, settings=settings)
    Tags.of(stack).add("project", "skald")
    Tags.of(stack).add("skald:mode", settings.mode)
    Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    return stack


def main() -> None:
    app = build().node.root
    assert isinstance(app, App)
    app.synth()


if __name__ == "__main__":
    main()
