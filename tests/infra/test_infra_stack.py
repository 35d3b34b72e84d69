"""What the synthesised templates must guarantee, whatever the deploy mode."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("aws_cdk", reason="infra extra not installed (pip install -e '.[infra]')")
pytest.importorskip("cdk_nag", reason="infra extra not installed (pip install -e '.[infra]')")
from aws_cdk import CfnElement  # noqa: E402
from aws_cdk.assertions import Annotations, Match  # noqa: E402

from skald import catalog  # noqa: E402

if TYPE_CHECKING:
    from tests.infra.conftest import Synth

pytestmark = pytest.mark.infra

# The functions serving traffic or jobs; the stack adds the setup function and its trigger.
RUNTIME_FUNCTIONS = 10  # + the deploy-time setup function, + CDK's trigger provider


def _ours(synth: Synth) -> dict[str, tuple[catalog.Function, dict[str, Any]]]:
    """Logical id -> (catalogue entry, properties) of every Skald function."""
    functions = synth.resources("AWS::Lambda::Function")
    ours = {synth.logical_id(fn): name for name, fn in synth.stack.functions.by_name.items()}
    return {
        logical_id: (catalog.function(name), functions[logical_id]["Properties"])
        for logical_id, name in ours.items()
    }


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _statements(document: dict[str, Any]) -> list[dict[str, Any]]:
    return _list(document.get("Statement", []))


def _policy_documents(synth: Synth) -> list[tuple[str, dict[str, Any]]]:
    """Every IAM and resource policy document in the template, with its owner."""
    docs: list[tuple[str, dict[str, Any]]] = []
    for cfn_type, prop in (
        ("AWS::IAM::Policy", "PolicyDocument"),
        ("AWS::IAM::ManagedPolicy", "PolicyDocument"),
        ("AWS::S3::BucketPolicy", "PolicyDocument"),
        ("AWS::SQS::QueuePolicy", "PolicyDocument"),
        ("AWS::SNS::TopicPolicy", "PolicyDocument"),
        ("AWS::KMS::Key", "KeyPolicy"),
        ("AWS::OpenSearchService::Domain", "AccessPolicies"),
    ):
        for logical_id, resource in synth.resources(cfn_type).items():
            if prop in resource["Properties"]:
                docs.append((logical_id, resource["Properties"][prop]))
    for logical_id, role in synth.resources("AWS::IAM::Role").items():
        for policy in role["Properties"].get("Policies", []):
            docs.append((logical_id, policy["PolicyDocument"]))
    return docs


def _resolved_json(value: Any) -> str:
    """A JSON string CloudFormation joins from parts, with `Fn::GetAtt [X, Arn]` as `ROLE:X`."""
    if isinstance(value, str):
        return value
    parts = value["Fn::Join"][1]
    return "".join(p if isinstance(p, str) else f"ROLE:{p['Fn::GetAtt'][0]}" for p in parts)


def _method_paths(synth: Synth) -> dict[str, tuple[str, dict[str, Any]]]:
    """Method logical id -> (resource path, method properties)."""
    parts = {
        logical_id: (resource["Properties"]["ParentId"], resource["Properties"]["PathPart"])
        for logical_id, resource in synth.resources("AWS::ApiGateway::Resource").items()
    }

    def path(resource_id: Any) -> str:
        if isinstance(resource_id, dict) and "Ref" in resource_id:
            parent, part = parts[resource_id["Ref"]]
            return f"{path(parent)}/{part}"
        return ""  # the API root (Fn::GetAtt RestApi.RootResourceId)

    return {
        logical_id: (path(method["Properties"]["ResourceId"]), method["Properties"])
        for logical_id, method in synth.resources("AWS::ApiGateway::Method").items()
    }


# -- every mode -------------------------------------------------------------------------------


def test_every_mode_synthesises(any_mode: Synth) -> None:
    any_mode.template.resource_count_is("AWS::Lambda::Function", len(catalog.FUNCTIONS) + 1)
    assert len(catalog.FUNCTIONS) == RUNTIME_FUNCTIONS + 1
    any_mode.template.resource_count_is("AWS::ApiGateway::RestApi", 1)
    outputs = any_mode.json["Outputs"]
    assert {"ApiUrl", "RootApiKeySecretArn", "SearchEndpoint"} <= set(outputs)


def test_nag_reports_no_unsuppressed_errors(any_mode: Synth) -> None:
    errors = Annotations.from_stack(any_mode.stack).find_error(
        "*", Match.string_like_regexp("AwsSolutions-.*")
    )
    findings = [f"{e.id}: {str(e.entry.data)[:120]}" for e in errors]
    assert findings == []


def test_blob_bucket_is_encrypted_versioned_private_and_expires_uploads(any_mode: Synth) -> None:
    bucket_id = any_mode.logical_id(any_mode.stack.storage.bucket)
    blobs = any_mode.resources("AWS::S3::Bucket")[bucket_id]
    props = blobs["Properties"]
    sse = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
    assert sse["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    assert "KMSMasterKeyID" in sse["ServerSideEncryptionByDefault"]
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert all(props["PublicAccessBlockConfiguration"].values())
    assert "LoggingConfiguration" in props
    rules = {rule.get("Prefix"): rule for rule in props["LifecycleConfiguration"]["Rules"]}
    assert rules["_uploads/"]["ExpirationInDays"] == 1
    assert rules[None]["NoncurrentVersionExpiration"]["NoncurrentDays"] == 30
    assert blobs["DeletionPolicy"] == "Retain"


def test_buckets_deny_plain_http(any_mode: Synth) -> None:
    for logical_id in any_mode.resources("AWS::S3::Bucket"):
        denies = [
            statement
            for policy in any_mode.resources("AWS::S3::BucketPolicy").values()
            if policy["Properties"]["Bucket"] == {"Ref": logical_id}
            for statement in _statements(policy["Properties"]["PolicyDocument"])
            if statement["Effect"] == "Deny"
            and statement.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"
        ]
        assert denies, f"{logical_id} accepts plain HTTP"


def test_state_table_layout_encryption_pitr_and_ttl(any_mode: Synth) -> None:
    storage = any_mode.stack.storage
    table = any_mode.resources("AWS::DynamoDB::Table")[any_mode.logical_id(storage.state_table)]
    props = table["Properties"]
    assert props["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    indexes = {gsi["IndexName"]: gsi["KeySchema"] for gsi in props["GlobalSecondaryIndexes"]}
    assert [k["AttributeName"] for k in indexes["gsi1"]] == ["gsi1pk", "gsi1sk"]
    assert [k["AttributeName"] for k in indexes["idle"]] == ["idle_pk", "idle_at"]
    types = {a["AttributeName"]: a["AttributeType"] for a in props["AttributeDefinitions"]}
    assert types["idle_at"] == "N" and types["idle_pk"] == "S"
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["SSESpecification"]["SSEEnabled"] is True
    assert props["SSESpecification"]["SSEType"] == "KMS"
    assert props["SSESpecification"]["KMSMasterKeyId"]
    assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
    assert props["TimeToLiveSpecification"] == {"AttributeName": "ttl", "Enabled": True}


def test_idempotency_table(any_mode: Synth) -> None:
    storage = any_mode.stack.storage
    table = any_mode.resources("AWS::DynamoDB::Table")[
        any_mode.logical_id(storage.idempotency_table)
    ]["Properties"]
    assert table["KeySchema"] == [{"AttributeName": "id", "KeyType": "HASH"}]
    assert table["TimeToLiveSpecification"] == {"AttributeName": "expiration", "Enabled": True}
    assert table["SSESpecification"]["SSEEnabled"] is True


def test_work_queues_have_a_dead_letter_queue_and_encryption(any_mode: Synth) -> None:
    workers = any_mode.stack.workers
    queues = any_mode.resources("AWS::SQS::Queue")
    for name, queue in workers.queues.items():
        props = queues[any_mode.logical_id(queue)]["Properties"]
        dlq_id = any_mode.logical_id(workers.dead_letter_queues[name])
        assert props["RedrivePolicy"] == {
            "deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]},
            "maxReceiveCount": catalog.queue(name).max_receive_count,
        }
        worker = catalog.worker_of(name)
        assert props["VisibilityTimeout"] == 6 * worker.timeout_s
    for logical_id, resource in queues.items():
        assert resource["Properties"].get("SqsManagedSseEnabled") is True, logical_id
    assert len(any_mode.resources("AWS::SQS::QueuePolicy")) == len(queues)


def test_workers_report_partial_batch_failures(any_mode: Synth) -> None:
    mappings = any_mode.resources("AWS::Lambda::EventSourceMapping").values()
    assert len(mappings) == len(catalog.QUEUES)
    batch = {
        any_mode.logical_id(any_mode.stack.workers.queues[q.name]): q.batch_size
        for q in catalog.QUEUES
    }
    for mapping in mappings:
        props = mapping["Properties"]
        assert props["BatchSize"] == batch[props["EventSourceArn"]["Fn::GetAtt"][0]]
        assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert props["ScalingConfig"]["MaximumConcurrency"] >= 2


def test_worker_handlers_and_queues(any_mode: Synth) -> None:
    functions = any_mode.resources("AWS::Lambda::Function")
    expected = {
        "semantic": "semantic.handler",
        "memory": "memory.handler",
        "autocommit": "autocommit.handler",
        "fetch": "fetch.handler",
        "purge": "purge.handler",
    }
    for queue, fn in any_mode.stack.workers.functions.items():
        assert functions[any_mode.logical_id(fn)]["Properties"]["Handler"] == expected[queue]
    mappings = any_mode.resources("AWS::Lambda::EventSourceMapping").values()
    consumers = {
        m["Properties"]["FunctionName"]["Ref"]: m["Properties"]["EventSourceArn"] for m in mappings
    }
    for spec in catalog.QUEUES:
        fn = any_mode.stack.functions.by_name[spec.worker]
        arn = {"Fn::GetAtt": [any_mode.logical_id(any_mode.stack.workers.queues[spec.name]), "Arn"]}
        assert consumers[any_mode.logical_id(fn)] == arn


def test_functions_follow_the_catalogue(any_mode: Synth) -> None:
    for logical_id, (spec, props) in _ours(any_mode).items():
        assert props["Handler"] == spec.handler, logical_id
        assert props["MemorySize"] == spec.memory_mb, logical_id
        assert props["Timeout"] == spec.timeout_s, logical_id
        assert logical_id.startswith(f"Functions{spec.construct_id}")


def test_alarm_topic_is_encrypted(any_mode: Synth) -> None:
    for topic in any_mode.resources("AWS::SNS::Topic").values():
        assert topic["Properties"]["KmsMasterKeyId"]


def test_alarms_notify_the_topic(any_mode: Synth) -> None:
    alarms = list(any_mode.resources("AWS::CloudWatch::Alarm").values())
    topic = {"Ref": any_mode.logical_id(any_mode.stack.observability.topic)}
    assert all(alarm["Properties"]["AlarmActions"] == [topic] for alarm in alarms)
    metrics = [alarm["Properties"].get("MetricName") for alarm in alarms]
    assert metrics.count("ApproximateNumberOfMessagesVisible") == len(catalog.QUEUES)
    assert metrics.count("5XXError") == 1
    assert metrics.count("Throttles") == RUNTIME_FUNCTIONS
    assert metrics.count("Errors") == len(catalog.functions("worker"))


def test_layer_is_attached_to_every_function(any_mode: Synth) -> None:
    layer = {"Ref": any_mode.logical_id(any_mode.stack.functions.layer)}
    for logical_id, (_, props) in _ours(any_mode).items():
        assert props["Layers"] == [layer], logical_id
        assert props["Runtime"] == "python3.12"
        assert props["TracingConfig"] == {"Mode": "Active"}


def test_each_function_gets_the_environment_the_catalogue_lists(any_mode: Synth) -> None:
    for logical_id, (spec, props) in _ours(any_mode).items():
        env = props["Environment"]["Variables"]
        expected = set(catalog.environment(spec))
        assert set(env) <= expected, (logical_id, set(env) - expected)
        assert expected - set(env) <= catalog.OPTIONAL_ENV, (logical_id, expected - set(env))
        assert env["SKALD_BACKEND"] == "aws"
        if catalog.INDEX in spec.uses:
            assert env["SKALD_OPENSEARCH_INDEX"] == "skald-records"  # the alias
        if catalog.EMBEDDER in spec.uses:
            assert env["SKALD_EMBEDDING_PROVIDER"] == "bedrock"
        if catalog.QUEUE in spec.uses:
            assert env["SKALD_JOB_MAX_ATTEMPTS"] == "5"
        # Only the authorizer reads the root key: the HTTP functions trust its context.
        assert ("SKALD_ROOT_API_KEY_SECRET_ARN" in env) == (spec.kind == "authorizer")


def test_only_the_authorizer_may_read_the_root_key(any_mode: Synth) -> None:
    secret = any_mode.logical_id(any_mode.stack.storage.root_api_key)
    readers: set[str] = set()
    for policy in any_mode.resources("AWS::IAM::Policy").values():
        if "secretsmanager:GetSecretValue" in json.dumps(policy) and secret in json.dumps(policy):
            readers.update(role["Ref"] for role in policy["Properties"]["Roles"])
    assert readers == {any_mode.logical_id(any_mode.stack.functions.authorizer.role)}


def test_setup_runs_at_deploy_time_before_the_api(any_mode: Synth) -> None:
    [(trigger_id, trigger)] = any_mode.resources("Custom::Trigger").items()
    props = trigger["Properties"]
    setup = any_mode.logical_id(any_mode.stack.functions.setup)
    # Its current version: a new one (code, layer, environment) reruns the trigger.
    version = any_mode.json["Resources"][props["HandlerArn"]["Ref"]]
    assert version["Type"] == "AWS::Lambda::Version"
    assert version["Properties"]["FunctionName"] == {"Ref": setup}
    assert props["InvocationType"] == "RequestResponse"  # a failure fails the deploy
    assert props["ExecuteOnHandlerChange"] is True
    depends = set(trigger["DependsOn"])
    storage, workers = any_mode.stack.storage, any_mode.stack.workers
    for construct in (storage.state_table, storage.bucket, *workers.queues.values()):
        assert any_mode.logical_id(construct) in depends
    search = any_mode.stack.search
    searched = search.domain if any_mode.stack.settings.search == "domain" else search.collection
    resource = searched.node.default_child or searched  # the collection is its own resource
    assert isinstance(resource, CfnElement)
    assert any_mode.stack.get_logical_id(resource) in depends
    api = any_mode.logical_id(any_mode.stack.api.rest_api)
    assert trigger_id in any_mode.json["Resources"][api].get("DependsOn", [])


def test_index_management_is_setups_alone(any_mode: Synth) -> None:
    """Runtime roles query and write records; creating indexes, aliases and pipelines (PUT,
    DELETE, aoss:CreateIndex) is the setup function's."""
    setup_role = any_mode.logical_id(any_mode.stack.functions.setup.role)
    if any_mode.stack.settings.search == "domain":
        domain = next(iter(any_mode.resources("AWS::OpenSearchService::Domain").values()))
        for statement in _statements(domain["Properties"]["AccessPolicies"]):
            roles = {p["Fn::GetAtt"][0] for p in _list(statement["Principal"]["AWS"])}
            admin = {"es:ESHttpPut", "es:ESHttpDelete"} & set(_list(statement["Action"]))
            assert not admin or roles == {setup_role}, statement
    else:
        access = next(iter(any_mode.resources("AWS::OpenSearchServerless::AccessPolicy").values()))[
            "Properties"
        ]["Policy"]
        for entry in json.loads(_resolved_json(access)):
            rules = json.dumps(entry["Rules"])
            if "aoss:CreateIndex" in rules or "CollectionItems" in rules:
                assert entry["Principal"] == [f"ROLE:{setup_role}"], entry


def test_no_wildcard_actions_anywhere(any_mode: Synth) -> None:
    offenders = []
    for owner, document in _policy_documents(any_mode):
        for statement in _statements(document):
            if statement["Effect"] != "Allow":
                continue  # deny-wildcards (e.g. enforce SSL) only narrow access
            if owner.startswith("StorageDataKey") and json.dumps(statement["Principal"]).count(
                ":root"
            ):
                continue  # the key policy's delegation to IAM in this account
            for action in _list(statement["Action"]):
                if action == "*" or action.endswith(":*"):
                    offenders.append(f"{owner}: {action}")
    assert offenders == []


def test_roles_only_use_named_resources_for_data(any_mode: Synth) -> None:
    """`Resource: *` is kept for services without resource scoping (X-Ray, ENIs, Rerank)."""
    allowed = ("xray:", "ec2:", "bedrock:Rerank")
    for owner, document in _policy_documents(any_mode):
        if not owner.startswith("Functions"):
            continue
        for statement in _statements(document):
            if "*" in _list(statement["Resource"]):
                assert all(a.startswith(allowed) for a in _list(statement["Action"])), owner


def test_authorizer_guards_every_method_except_probes(any_mode: Synth) -> None:
    authorizer = {"Ref": any_mode.logical_id(any_mode.stack.api.authorizer)}
    methods = _method_paths(any_mode)
    public = {path for path, props in methods.values() if props["AuthorizationType"] == "NONE"}
    # the probes and the console's static files ("" is the API root, "/")
    assert public == {"/health", "/ready", "", "/console", "/console/{proxy+}"}
    for path, props in methods.values():
        if path not in public:
            assert props["AuthorizationType"] == "CUSTOM", path
            assert props["AuthorizerId"] == authorizer, path


def test_routes_reach_the_right_function(any_mode: Synth) -> None:
    http = any_mode.stack.functions.http
    expected = {
        "/health": "content",
        "/ready": "content",
        "/api/v1/{proxy+}": "content",
        "/api/v1/search/{proxy+}": "search",
        "/api/v1/skills": "content",
        "/api/v1/skills/{proxy+}": "content",
        "/api/v1/skills/find": "search",
        "/api/v1/sessions": "sessions",
        "/api/v1/sessions/{proxy+}": "sessions",
        "/mcp": "mcp",
        "/": "content",
        "/console": "content",
        "/console/{proxy+}": "content",
    }
    assert {p: catalog.route_owner(p).name for p in expected} == expected  # type: ignore[union-attr]
    routes = {
        path or "/": json.dumps(props["Integration"]["Uri"])
        for path, props in _method_paths(any_mode).values()
    }
    assert set(routes) == set(expected)
    for path, function in expected.items():
        assert any_mode.logical_id(http[function]) in routes[path], path


def test_authorizer_accepts_either_key_header(any_mode: Synth) -> None:
    # Without caching API Gateway calls the authorizer even when X-API-Key is absent, so
    # `Authorization: Bearer` keeps working (see infra/api.py).
    for authorizer in any_mode.resources("AWS::ApiGateway::Authorizer").values():
        props = authorizer["Properties"]
        assert props["Type"] == "REQUEST"
        assert props["AuthorizerResultTtlInSeconds"] == 0
        assert "IdentitySource" not in props


def test_stage_throttles_logs_and_traces(any_mode: Synth) -> None:
    stage = next(iter(any_mode.resources("AWS::ApiGateway::Stage").values()))["Properties"]
    assert stage["TracingEnabled"] is True
    assert stage["AccessLogSetting"]["DestinationArn"]
    settings = stage["MethodSettings"][0]
    assert settings["ThrottlingRateLimit"] > 0 and settings["ThrottlingBurstLimit"] > 0
    assert settings["LoggingLevel"] == "ERROR" and settings["DataTraceEnabled"] is False


def test_access_log_names_the_principal_and_the_request(any_mode: Synth) -> None:
    stage = next(iter(any_mode.resources("AWS::ApiGateway::Stage").values()))["Properties"]
    line = json.loads(stage["AccessLogSetting"]["Format"])
    assert line["requestId"] == "$context.requestId"
    assert line["ip"] == "$context.identity.sourceIp"
    assert line["principalId"] == "$context.authorizer.principalId"
    # the authorizer context the functions receive (skald.api.authorizer), key by key
    assert {line[k] for k in ("accountId", "userId", "role", "keyId")} == {
        f"$context.authorizer.{k}" for k in ("account_id", "user_id", "role", "key_id")
    }
    assert {"httpMethod", "resourcePath", "status", "requestTime"} <= set(line)


def test_scheduler_role_may_only_send_to_the_queues_of_its_schedules(any_mode: Synth) -> None:
    workers = any_mode.stack.workers
    role_id = any_mode.logical_id(workers.scheduler_role)
    role = any_mode.resources("AWS::IAM::Role")[role_id]["Properties"]
    trust = _statements(role["AssumeRolePolicyDocument"])
    assert trust[0]["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert "aws:SourceAccount" in json.dumps(trust[0]["Condition"])
    statements = [
        statement
        for policy in any_mode.resources("AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
        for statement in _statements(policy["Properties"]["PolicyDocument"])
    ]
    autocommit = any_mode.logical_id(workers.queues[catalog.QUEUE_AUTOCOMMIT])
    fetch = any_mode.logical_id(workers.queues[catalog.QUEUE_FETCH])  # the watch sweep
    purge = any_mode.logical_id(workers.queues[catalog.QUEUE_PURGE])  # the purge sweep
    assert statements == [
        {
            "Action": "sqs:SendMessage",
            "Effect": "Allow",
            "Resource": [{"Fn::GetAtt": [q, "Arn"]} for q in (autocommit, fetch, purge)],
        }
    ]
    group = any_mode.resources("AWS::Scheduler::ScheduleGroup")
    assert [g["Properties"]["Name"] for g in group.values()] == ["skald-idle-commit"]


def test_a_rate_schedule_sweeps_half_done_commits(any_mode: Synth) -> None:
    from skald.jobs.registry import HANDLERS
    from skald.services.sessions.recovery import JOB_RECOVER_COMMITS

    workers = any_mode.stack.workers
    schedules = any_mode.resources("AWS::Scheduler::Schedule")
    assert len(schedules) == 3  # and the watch and purge sweeps
    schedule = schedules[any_mode.stack.get_logical_id(workers.commit_sweeper)]
    props = schedule["Properties"]
    assert props["ScheduleExpression"].startswith("rate(")
    assert props["GroupName"] == "skald-idle-commit"
    assert any_mode.logical_id(workers.schedule_group) in schedule["DependsOn"]
    target = props["Target"]
    autocommit = any_mode.logical_id(workers.queues[catalog.QUEUE_AUTOCOMMIT])
    assert target["Arn"] == {"Fn::GetAtt": [autocommit, "Arn"]}
    assert target["RoleArn"] == {"Fn::GetAtt": [any_mode.logical_id(workers.scheduler_role), "Arn"]}
    # the auto-commit worker takes the kind from this envelope, and knows the kind
    message = json.loads(target["Input"])
    assert message == {"kind": JOB_RECOVER_COMMITS, "payload": {}}
    assert JOB_RECOVER_COMMITS in HANDLERS


def test_a_rate_schedule_sweeps_due_watches(any_mode: Synth) -> None:
    from skald.jobs.registry import HANDLERS

    workers = any_mode.stack.workers
    props = any_mode.resources("AWS::Scheduler::Schedule")[
        any_mode.stack.get_logical_id(workers.watch_sweeper)
    ]["Properties"]
    assert props["ScheduleExpression"].startswith("rate(")
    target = props["Target"]
    fetch = any_mode.logical_id(workers.queues[catalog.QUEUE_FETCH])
    assert target["Arn"] == {"Fn::GetAtt": [fetch, "Arn"]}
    assert json.loads(target["Input"]) == {"kind": catalog.JOB_WATCHES_DUE, "payload": {}}
    assert catalog.JOB_WATCHES_DUE in HANDLERS


def test_only_the_session_writers_manage_schedules(any_mode: Synth) -> None:
    """Adding messages arms a session's idle timer: the sessions function, and MCP's
    remember."""
    writers = {
        any_mode.logical_id(any_mode.stack.functions.http[name].role)
        for name in ("sessions", "mcp")
    }
    holders: set[str] = set()
    for policy in any_mode.resources("AWS::IAM::Policy").values():
        document = json.dumps(policy["Properties"]["PolicyDocument"])
        if "scheduler:CreateSchedule" in document:
            assert "iam:PassRole" in document and "iam:PassedToService" in document
            holders.update(role["Ref"] for role in policy["Properties"]["Roles"])
    assert holders == writers


# -- per mode ---------------------------------------------------------------------------------


def test_dev_runs_outside_a_vpc_and_can_be_torn_down(dev: Synth) -> None:
    for fn in dev.resources("AWS::Lambda::Function").values():
        assert "VpcConfig" not in fn["Properties"]
    dev.template.resource_count_is("AWS::EC2::VPC", 0)
    for table in dev.resources("AWS::DynamoDB::Table").values():
        assert table["Properties"]["DeletionProtectionEnabled"] is False


def test_saas_puts_functions_in_its_isolated_vpc(saas: Synth) -> None:
    saas.template.resource_count_is("AWS::EC2::VPC", 1)
    saas.template.resource_count_is("AWS::EC2::NatGateway", 0)
    saas.template.resource_count_is("AWS::EC2::InternetGateway", 0)
    subnets = {json.dumps({"Ref": subnet_id}) for subnet_id in saas.resources("AWS::EC2::Subnet")}
    # CDK's trigger provider only calls the Lambda API: it stays outside the VPC. So does
    # the fetch worker: it reaches the internet, which isolated subnets cannot.
    for logical_id, (spec, props) in _ours(saas).items():
        if spec.internet:
            assert "VpcConfig" not in props, logical_id
            continue
        config = props["VpcConfig"]
        assert {json.dumps(s) for s in config["SubnetIds"]} == subnets, logical_id
    services = [
        json.dumps(endpoint["Properties"]["ServiceName"])
        for endpoint in saas.resources("AWS::EC2::VPCEndpoint").values()
    ]
    for service in (
        "s3",
        "dynamodb",
        "sqs",
        "scheduler",
        "bedrock-runtime",
        "logs",
        "kms",
        "secretsmanager",
    ):
        assert any(f".{service}" in name for name in services), service


def test_saas_protects_its_data(saas: Synth) -> None:
    state = saas.resources("AWS::DynamoDB::Table")[saas.logical_id(saas.stack.storage.state_table)]
    assert state["Properties"]["DeletionProtectionEnabled"] is True
    assert state["DeletionPolicy"] == "Retain"
    assert (
        next(iter(saas.resources("AWS::OpenSearchService::Domain").values()))["DeletionPolicy"]
        == "Retain"
    )


def test_customer_vpc_is_imported_not_created(customer: Synth) -> None:
    imported = customer.stack.settings.imported_vpc
    assert imported is not None
    customer.template.resource_count_is("AWS::EC2::VPC", 0)
    customer.template.resource_count_is("AWS::EC2::Subnet", 0)
    for logical_id, (_, props) in _ours(customer).items():
        config = props["VpcConfig"]
        assert config["SubnetIds"] == list(imported.subnet_ids), logical_id
        assert config["SecurityGroupIds"] == [imported.security_group_id], logical_id


@pytest.mark.parametrize("mode", ["dev", "saas", "customer"])
def test_search_domain_is_encrypted_and_role_restricted(mode: str, synth: Any) -> None:
    result: Synth = synth(mode)
    domain = next(iter(result.resources("AWS::OpenSearchService::Domain").values()))["Properties"]
    assert domain["EncryptionAtRestOptions"]["Enabled"] is True
    assert domain["EncryptionAtRestOptions"]["KmsKeyId"]
    assert domain["NodeToNodeEncryptionOptions"] == {"Enabled": True}
    assert domain["DomainEndpointOptions"]["EnforceHTTPS"] is True
    assert domain["DomainEndpointOptions"]["TLSSecurityPolicy"] == "Policy-Min-TLS-1-2-2019-07"
    roles = {
        result.logical_id(result.stack.functions.by_name[spec.name].role)
        for spec in catalog.FUNCTIONS
        if catalog.INDEX in spec.uses
    }
    principals = set()
    for statement in _statements(domain["AccessPolicies"]):
        for principal in _list(statement["Principal"]["AWS"]):
            principals.add(principal["Fn::GetAtt"][0])
    assert principals == roles
    assert ("VPCOptions" in domain) == (mode != "dev")


def test_serverless_collection_is_encrypted_private_and_role_restricted(
    saas_serverless: Synth,
) -> None:
    policies = {
        p["Properties"]["Type"]: p["Properties"]
        for p in saas_serverless.resources("AWS::OpenSearchServerless::SecurityPolicy").values()
    }
    encryption = json.dumps(policies["encryption"]["Policy"])
    assert '\\"AWSOwnedKey\\":false' in encryption and "KmsARN" in encryption
    network = json.dumps(policies["network"]["Policy"])
    assert '\\"AllowFromPublic\\":false' in network and "SourceVPCEs" in network
    saas_serverless.template.resource_count_is("AWS::OpenSearchServerless::VpcEndpoint", 1)
    collection = next(
        iter(saas_serverless.resources("AWS::OpenSearchServerless::Collection").values())
    )["Properties"]
    assert collection["Type"] == "VECTORSEARCH"
    access = next(
        iter(saas_serverless.resources("AWS::OpenSearchServerless::AccessPolicy").values())
    )["Properties"]
    assert access["Type"] == "data"
    search_role = saas_serverless.logical_id(saas_serverless.stack.functions.http["search"].role)
    assert search_role in json.dumps(access["Policy"])
    for spec, props in _ours(saas_serverless).values():
        if catalog.INDEX in spec.uses:
            assert props["Environment"]["Variables"]["SKALD_OPENSEARCH_AUTH"] == "sigv4-aoss"


def test_a_rate_schedule_restarts_lost_purges(any_mode: Synth) -> None:
    from skald.jobs.registry import HANDLERS

    workers = any_mode.stack.workers
    schedule = any_mode.resources("AWS::Scheduler::Schedule")[
        any_mode.stack.get_logical_id(workers.purge_sweeper)
    ]
    target = schedule["Properties"]["Target"]
    purge = any_mode.logical_id(workers.queues[catalog.QUEUE_PURGE])
    assert target["Arn"] == {"Fn::GetAtt": [purge, "Arn"]}
    assert json.loads(target["Input"]) == {"kind": catalog.JOB_RESUME_PURGES, "payload": {}}
    assert catalog.JOB_RESUME_PURGES in HANDLERS
