"""The CDK stack takes up a new worker from its catalogue entry alone (tests/support/
toy_worker.py): its queue with a DLQ, its function with the entry file's handler, the event
source mapping, and its variables and grants on the functions that observe every queue."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("aws_cdk", reason="infra extra not installed (pip install -e '.[infra]')")
pytest.importorskip("cdk_nag", reason="infra extra not installed (pip install -e '.[infra]')")
from aws_cdk import CfnElement, Stack  # noqa: E402
from aws_cdk.assertions import Template  # noqa: E402
from constructs import IConstruct  # noqa: E402

from skald import catalog  # noqa: E402
from tests.support.toy_worker import NAME, toy_worker  # noqa: E402

pytestmark = pytest.mark.infra


def test_the_stack_builds_a_new_workers_queue_and_function(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from infra.app import build
    from tests.infra.conftest import MODES, cdk_context

    with toy_worker(tmp_path, monkeypatch):
        assets = tmp_path / "assets"
        (assets / "layer" / "python").mkdir(parents=True)
        for fn in catalog.FUNCTIONS:
            folder = assets / "functions" / fn.code
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{fn.handler.split('.')[0]}.py").write_text("def handler(e, c): ...\n")
        stack = build(cdk_context(MODES["dev"], assets), outdir=str(tmp_path / "cdk"))
        template = Template.from_stack(stack)

        toy = stack.functions.by_name[NAME]
        props = template.find_resources("AWS::Lambda::Function")[_logical_id(stack, toy)][
            "Properties"
        ]
        assert props["Handler"] == "toy.handler"
        assert _logical_id(stack, toy).startswith("FunctionsToy")
        queue = stack.workers.queues[NAME]
        assert _logical_id(stack, queue).startswith("WorkersToyQueue")
        assert NAME in stack.workers.dead_letter_queues
        queue_id = _logical_id(stack, queue)
        mappings = template.find_resources("AWS::Lambda::EventSourceMapping").values()
        assert {"Fn::GetAtt": [queue_id, "Arn"]} in [
            m["Properties"]["EventSourceArn"]
            for m in mappings
            if m["Properties"]["FunctionName"]["Ref"] == _logical_id(stack, toy)
        ]
        content = stack.functions.by_name["content"]
        variables = template.find_resources("AWS::Lambda::Function")[_logical_id(stack, content)][
            "Properties"
        ]["Environment"]["Variables"]
        assert {"SKALD_TOY_QUEUE_URL", "SKALD_TOY_DLQ_URL"} <= set(variables)


def _logical_id(stack: Stack, construct: IConstruct) -> str:
    child = construct.node.default_child
    assert isinstance(child, CfnElement), f"{construct.node.path} renders no resource"
    return stack.get_logical_id(child)
