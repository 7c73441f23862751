"""The security admin APIs: SCRAM credentials (DescribeUserScramCredentials 50,
AlterUserScramCredentials 51) and ACLs (DescribeAcls 29, CreateAcls 30, DeleteAcls 31).

Changes go to the active controller (forwarded like the other metadata changes) and come back
to every node as records; descriptions are answered from this node's image. As in Kafka, the
ACL APIs answer SECURITY_DISABLED when no authorizer is configured, and need ALTER (changes) or
DESCRIBE (DescribeAcls) on the cluster; the SCRAM APIs need ALTER / DESCRIBE on the cluster too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka_ext.controller.security_control import ScramDeletion, ScramUpsertion
from kafka_ext.protocol.api_keys import ApiKey
from kafka_ext.protocol.errors import ErrorCode
from kafka_ext.protocol.messages import registry
from kafka_ext.security.acl import (
    AclEntry,
    AclFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from kafka_ext.security.sasl import SCRAM_MECHANISMS
from kafka_ext.server.authorization import cluster_authorized

if TYPE_CHECKING:
    from kafka_ext.server.dispatcher import RequestContext

_reg = registry()
_NO_AUTHORIZER = "No Authorizer is configured."


def _response(api_key: ApiKey) -> Any:
    return _reg.responses[api_key].cls


# -- SCRAM credentials -------------------------------------------------------------------------

async def handle_describe_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    Response = _response(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)
    if not cluster_authorized(ctx, AclOperation.DESCRIBE):
        return Response(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                        error_message=None, results=[])
    credentials = ctx.broker.controller.image.scram_credentials
    names = ([u.name for u in request.users] if request.users else sorted(credentials))
    results = []
    for name in dict.fromkeys(names):
        if names.count(name) > 1:
            results.append(Response.DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.DUPLICATE_RESOURCE,
                error_message="Cannot describe SCRAM credentials for the same user twice in a "
                              "single request", credential_infos=[]))
            continue
        mechanisms = credentials.get(name)
        if not mechanisms:
            results.append(Response.DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                error_message=f"Attempt to describe a user credential that does not exist: "
                              f"{name}", credential_infos=[]))
            continue
        results.append(Response.DescribeUserScramCredentialsResult(
            user=name, error_code=0, error_message=None, credential_infos=[
                Response.DescribeUserScramCredentialsResult.CredentialInfo(
                    mechanism=SCRAM_MECHANISMS[m], iterations=c.iterations)
                for m, c in sorted(mechanisms.items())]))
    return Response(throttle_time_ms=0, error_code=0, error_message=None, results=results)


async def handle_alter_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    Response = _response(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
    users = list(dict.fromkeys([*(d.name for d in request.deletions),
                                *(u.name for u in request.upsertions)]))
    if not cluster_authorized(ctx, AclOperation.ALTER):
        return alter_user_scram_credentials_error(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                  None)
    outcomes = await ctx.broker.controller.alter_user_scram_credentials(
        [ScramDeletion(d.name, d.mechanism) for d in request.deletions],
        [ScramUpsertion(u.name, u.mechanism, u.iterations, bytes(u.salt),
                        bytes(u.salted_password)) for u in request.upsertions])
    return Response(throttle_time_ms=0, results=[
        Response.AlterUserScramCredentialsResult(user=user, error_code=outcomes[user][0],
                                                 error_message=outcomes[user][1])
        for user in users])


def alter_user_scram_credentials_error(request: Any, code: ErrorCode,
                                       message: str | None) -> Any:
    Response = _response(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
    users = dict.fromkeys([*(d.name for d in request.deletions),
                           *(u.name for u in request.upsertions)])
    return Response(throttle_time_ms=0, results=[Response.AlterUserScramCredentialsResult(
        user=user, error_code=code, error_message=message) for user in users])


# -- ACLs ----------------------------------------------------------------------------------------

async def handle_describe_acls(ctx: RequestContext, request: Any) -> Any:
    Response = _response(ApiKey.DESCRIBE_ACLS)
    if ctx.broker.authorizer is None:
        return Response(throttle_time_ms=0, error_code=ErrorCode.SECURITY_DISABLED,
                        error_message=_NO_AUTHORIZER, resources=[])
    if not cluster_authorized(ctx, AclOperation.DESCRIBE):
        return Response(throttle_time_ms=0, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                        error_message=None, resources=[])
    acl_filter = AclFilter(request.resource_type_filter, request.resource_name_filter,
                           request.pattern_type_filter, request.principal_filter,
                           request.host_filter, request.operation, request.permission_type)
    problem = _filter_problem(acl_filter)
    if problem is not None:
        return Response(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST,
                        error_message=problem, resources=[])
    resources: dict[tuple[int, str, int], list[Any]] = {}
    for acl in ctx.broker.controller.image.acls.values():
        if acl_filter.matches(acl):
            resources.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type),
                                 []).append(Response.DescribeAclsResource.AclDescription(
                principal=acl.principal, host=acl.host, operation=acl.operation,
                permission_type=acl.permission_type))
    return Response(throttle_time_ms=0, error_code=0, error_message=None, resources=[
        Response.DescribeAclsResource(resource_type=t, resource_name=n, pattern_type=p,
                                      acls=acls)
        for (t, n, p), acls in sorted(resources.items())])


def _filter_problem(acl_filter: AclFilter) -> str | None:
    """Why a filter is malformed (UNKNOWN values, which match nothing meaningful)."""
    if acl_filter.resource_type == ResourceType.UNKNOWN:
        return "Resource type filter is UNKNOWN"
    if acl_filter.pattern_type == PatternType.UNKNOWN:
        return "Pattern type filter is UNKNOWN"
    if acl_filter.operation == AclOperation.UNKNOWN:
        return "Operation filter is UNKNOWN"
    if acl_filter.permission_type == AclPermissionType.UNKNOWN:
        return "Permission type filter is UNKNOWN"
    return None


async def handle_create_acls(ctx: RequestContext, request: Any) -> Any:
    Response = _response(ApiKey.CREATE_ACLS)
    if ctx.broker.authorizer is None:
        return create_acls_error(request, ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER)
    if not cluster_authorized(ctx, AclOperation.ALTER):
        return create_acls_error(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    outcomes = await ctx.broker.controller.create_acls([
        AclEntry(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal,
                 c.host, c.operation, c.permission_type) for c in request.creations])
    return Response(throttle_time_ms=0, results=[
        Response.AclCreationResult(error_code=code, error_message=message)
        for code, message in outcomes])


def create_acls_error(request: Any, code: ErrorCode, message: str | None) -> Any:
    Response = _response(ApiKey.CREATE_ACLS)
    return Response(throttle_time_ms=0, results=[
        Response.AclCreationResult(error_code=code, error_message=message)
        for _ in request.creations])


async def handle_delete_acls(ctx: RequestContext, request: Any) -> Any:
    Response = _response(ApiKey.DELETE_ACLS)
    if ctx.broker.authorizer is None:
        return delete_acls_error(request, ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER)
    if not cluster_authorized(ctx, AclOperation.ALTER):
        return delete_acls_error(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    filters = [AclFilter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                         f.principal_filter, f.host_filter, f.operation, f.permission_type)
               for f in request.filters]
    problems = [_filter_problem(f) for f in filters]
    matched = await ctx.broker.controller.delete_acls(
        [f for f, problem in zip(filters, problems, strict=True) if problem is None])
    results = []
    matches = iter(matched)
    Result = Response.DeleteAclsFilterResult
    for problem in problems:
        if problem is not None:
            results.append(Result(error_code=ErrorCode.INVALID_REQUEST, error_message=problem,
                                  matching_acls=[]))
            continue
        results.append(Result(error_code=0, error_message=None, matching_acls=[
            Result.DeleteAclsMatchingAcl(
                error_code=0, error_message=None, resource_type=acl.resource_type,
                resource_name=acl.resource_name, pattern_type=acl.pattern_type,
                principal=acl.principal, host=acl.host, operation=acl.operation,
                permission_type=acl.permission_type) for acl in next(matches)]))
    return Response(throttle_time_ms=0, filter_results=results)


def delete_acls_error(request: Any, code: ErrorCode, message: str | None) -> Any:
    Response = _response(ApiKey.DELETE_ACLS)
    return Response(throttle_time_ms=0, filter_results=[Response.DeleteAclsFilterResult(
        error_code=code, error_message=message, matching_acls=[]) for _ in request.filters])


HANDLERS = {
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: handle_describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: handle_alter_user_scram_credentials,
    ApiKey.DESCRIBE_ACLS: handle_describe_acls,
    ApiKey.CREATE_ACLS: handle_create_acls,
    ApiKey.DELETE_ACLS: handle_delete_acls,
}
