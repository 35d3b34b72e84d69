"""API: the REST API in front of the HTTP functions, with the API-key authorizer on every
method except the public probes. Which paths reach which function is the catalogue's
`routes` and `public_paths` (skald/catalog.py).

The edge around it (infra/edge.py): a regional or private endpoint, an optional custom domain
and WAF web ACL, and the usage plans that throttle each account: the API's key source is the
authorizer, which names the caller's account key, and every method behind the authorizer
requires one (the public probes and console files do not: they have no account)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct

from infra import edge
from infra.nag import suppress
from infra.settings import DeploySettings, Edge
from skald import catalog

STAGE = "prod"
# Gateway-made errors in the OpenViking envelope, so SDK clients raise the typed exception.
_GATEWAY_ERRORS: dict[apigw.ResponseType, tuple[str, str, str]] = {
    apigw.ResponseType.UNAUTHORIZED: ("401", "UNAUTHENTICATED", "Missing or invalid API key"),
    apigw.ResponseType.ACCESS_DENIED: ("403", "PERMISSION_DENIED", "Access denied"),
    # No method on the path: API Gateway's default is a confusing 403 token error.
    apigw.ResponseType.MISSING_AUTHENTICATION_TOKEN: ("404", "NOT_FOUND", "Not Found"),
    apigw.ResponseType.THROTTLED: ("429", "RESOURCE_EXHAUSTED", "Too many requests"),
    # The caller's account key is in no usage plan (an account the edge has not placed yet).
    apigw.ResponseType.INVALID_API_KEY: (
        "403",
        "PERMISSION_DENIED",
        "This account has no usage plan at the edge yet",
    ),
    apigw.ResponseType.QUOTA_EXCEEDED: ("429", "RESOURCE_EXHAUSTED", "Quota exceeded"),
    apigw.ResponseType.INTEGRATION_TIMEOUT: ("504", "DEADLINE_EXCEEDED", "Request timed out"),
    apigw.ResponseType.REQUEST_TOO_LARGE: ("413", "INVALID_ARGUMENT", "Request too large"),
    apigw.ResponseType.AUTHORIZER_FAILURE: ("500", "INTERNAL", "Authorizer failure"),
}


# One JSON line per request. Beside the standard fields: who called (the authorizer's
# principal and context: account, user, role, key id) and the gateway's request id, which the
# functions answer as X-Request-ID and put in each audit record, so a record and its access
# log line join on it.
ACCESS_LOG_FIELDS = {
    "requestId": "$context.requestId",
    "ip": "$context.identity.sourceIp",
    "requestTime": "$context.requestTime",
    "httpMethod": "$context.httpMethod",
    "resourcePath": "$context.resourcePath",
    "status": "$context.status",
    "protocol": "$context.protocol",
    "responseLength": "$context.responseLength",
    "responseLatency": "$context.responseLatency",
    "principalId": "$context.authorizer.principalId",
    "accountId": "$context.authorizer.account_id",
    "userId": "$context.authorizer.user_id",
    "role": "$context.authorizer.role",
    "keyId": "$context.authorizer.key_id",
    "authorizerError": "$context.authorizer.error",
}


class Api(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: DeploySettings,
        functions: Mapping[str, lambda_.IFunction],
        authorizer: lambda_.IFunction,
    ) -> None:
        super().__init__(scope, construct_id)
        access_logs = logs.LogGroup(
            self,
            "AccessLogs",
            retention=logs.RetentionDays.ONE_YEAR
            if settings.production
            else logs.RetentionDays.TWO_WEEKS,
            removal_policy=RemovalPolicy.RETAIN if settings.production else RemovalPolicy.DESTROY,
        )
        front = settings.edge
        self.rest_api = apigw.RestApi(
            self,
            "RestApi",
            rest_api_name=f"{settings.stack_name}-api",
            description="Skald: OpenViking-compatible /api/v1",
            endpoint_configuration=self._endpoint(front),
            policy=edge.private_policy(front.vpc_endpoint_ids) if front.private else None,
            disable_execute_api_endpoint=front.disable_execute_api_endpoint or None,
            # The usage plan key comes from the authorizer's answer (usageIdentifierKey), never
            # from the client's x-api-key header, which carries its Skald key.
            api_key_source_type=apigw.ApiKeySourceType.AUTHORIZER,
            # Uploads and file reads are binary; Mangum decodes base64 bodies both ways.
            binary_media_types=["*/*"],
            # Execution logs need the account-level API Gateway -> CloudWatch role.
            cloud_watch_role=True,
            cloud_watch_role_removal_policy=RemovalPolicy.RETAIN,
            deploy_options=apigw.StageOptions(
                stage_name=STAGE,
                throttling_rate_limit=settings.api_rate_limit,
                throttling_burst_limit=settings.api_burst_limit,
                access_log_destination=apigw.LogGroupLogDestination(access_logs),
                access_log_format=apigw.AccessLogFormat.custom(json.dumps(ACCESS_LOG_FIELDS)),
                tracing_enabled=True,
                metrics_enabled=True,
                logging_level=apigw.MethodLoggingLevel.ERROR,
                # Bodies may hold customer content: never copy them into execution logs.
                data_trace_enabled=False,
            ),
        )
        for response_type, (status, code, message) in _GATEWAY_ERRORS.items():
            body = {"status": "error", "result": None, "error": {"code": code, "message": message}}
            self.rest_api.add_gateway_response(
                f"Gateway{response_type.response_type}",
                type=response_type,
                status_code=status,
                templates={"application/json": json.dumps(body)},
                # A throttled caller (the stage's or its usage plan's limit) may retry soon:
                # the token buckets refill every second.
                response_headers={"Retry-After": "'1'"} if status == "429" else None,
            )

        self.web_acl = edge.web_acl(self, settings, self.rest_api) if front.waf else None
        if self.web_acl is None:
            suppress(
                self.rest_api.deployment_stage,
                "APIG3",
                "Abuse control is the stage throttle, the per-account usage plans and a "
                "per-request API-key check; -c waf=true adds a web ACL (docs/deploy.md).",
            )
        self.authorizer = self._authorizer(settings, authorizer)
        self._resources: dict[str, apigw.IResource] = {"": self.rest_api.root}
        probes = []
        for spec in catalog.functions("http"):
            # One invoke permission per function instead of one per method and stage.
            integration = apigw.LambdaIntegration(
                functions[spec.name], scope_permission_to_method=False
            )
            for path in spec.public_paths:
                probes.append(self._resource(path).add_method("GET", integration))
            for path in spec.routes:
                self._resource(path).add_method(
                    "ANY",
                    integration,
                    authorization_type=apigw.AuthorizationType.CUSTOM,
                    authorizer=self.authorizer,
                    # the caller's account key, named by the authorizer: its usage plan
                    api_key_required=True,
                )
        self.usage_plans = edge.UsagePlans(
            self, "UsagePlans", namespace=settings.stack_name, api=self.rest_api
        )
        self.domain = edge.custom_domain(self, front, self.rest_api) if front.domain_name else None

        for method in probes:
            suppress(
                method,
                "APIG4",
                "Liveness/readiness probes are public by contract "
                "(OpenViking /health and /ready need no key).",
            )
            suppress(method, "COG4", "Public probe: no authorizer of any kind.")
        suppress(
            self.rest_api,
            "COG4",
            "Clients authenticate with Skald API keys (X-API-Key or "
            "Bearer) resolved by the Lambda REQUEST authorizer; there are no Cognito users.",
            children=True,
        )
        suppress(
            self.rest_api,
            "APIG2",
            "Greedy proxy resources carry no models; the functions "
            "validate every request with pydantic and answer 400 in the OpenViking "
            "envelope.",
            children=True,
        )
        cloud_watch_role = self.rest_api.node.find_child("CloudWatchRole")
        NagSuppressions.add_resource_suppressions(
            cloud_watch_role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM4",
                    applies_to=[
                        "Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                        "AmazonAPIGatewayPushToCloudWatchLogs"
                    ],
                    reason="The account-level API Gateway logging role is meant to carry this "
                    "AWS-managed policy (it only writes API Gateway's own log groups).",
                )
            ],
        )

    def _endpoint(self, front: Edge) -> apigw.EndpointConfiguration:
        if not front.private:
            return apigw.EndpointConfiguration(types=[apigw.EndpointType.REGIONAL])
        endpoints = [
            ec2.InterfaceVpcEndpoint.from_interface_vpc_endpoint_attributes(
                self, f"ApiEndpoint{index}", vpc_endpoint_id=vpce, port=443
            )
            for index, vpce in enumerate(front.vpc_endpoint_ids)
        ]
        return apigw.EndpointConfiguration(
            types=[apigw.EndpointType.PRIVATE], vpc_endpoints=endpoints
        )

    def _resource(self, path: str) -> apigw.IResource:
        """The resource of `path`, made along with its parents on first use."""
        path = path.rstrip("/")  # "/" is the root resource
        if path not in self._resources:
            parent_path, _, part = path.rpartition("/")
            parent = self._resource(parent_path)
            self._resources[path] = (
                parent.add_proxy(any_method=False)
                if part == catalog.PROXY
                else parent.add_resource(part)
            )
        return self._resources[path]

    def _authorizer(
        self, settings: DeploySettings, handler: lambda_.IFunction
    ) -> apigw.RequestAuthorizer:
        ttl = settings.authorizer_cache_ttl
        # API Gateway only calls a caching REQUEST authorizer when EVERY identity source is
        # present, so "X-API-Key or Authorization" can only be expressed without caching: the
        # authorizer then runs on each request (and keeps its own warm lookup cache). With
        # -c authorizerCacheTtl=N the gateway caches per X-API-Key and Bearer-only clients get
        # 401 from the gateway.
        authorizer = apigw.RequestAuthorizer(
            self,
            "ApiKeyAuthorizer",
            handler=handler,
            identity_sources=[apigw.IdentitySource.header("X-API-Key")] if ttl else [],
            results_cache_ttl=Duration.seconds(ttl),
            authorizer_name=f"{settings.stack_name}-api-key",
        )
        if not ttl:
            cfn = authorizer.node.default_child
            assert isinstance(cfn, apigw.CfnAuthorizer)
            # An empty string is not a valid identity source; leave the property out instead.
            cfn.add_property_deletion_override("IdentitySource")
        return authorizer
