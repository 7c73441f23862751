"""The Java exception a Kafka error code becomes, as Kafka's tools print a failure
(`org.apache.kafka.common.errors.SecurityDisabledException: No Authorizer is configured.`).

Kafka's `Errors` enum names each code's exception after the code: SECURITY_DISABLED is
SecurityDisabledException. The authorization and authentication failures drop `_FAILED`
(TOPIC_AUTHORIZATION_FAILED is TopicAuthorizationException), and a few differ outright.
"""

from __future__ import annotations

PACKAGE = "org.apache.kafka.common.errors."
# Codes whose exception is not the code's name in PascalCase plus "Exception" (Errors.java).
_IRREGULAR = {
    "UNKNOWN_SERVER_ERROR": "UnknownServerException",
    "REQUEST_TIMED_OUT": "TimeoutException",
    "NETWORK_EXCEPTION": "NetworkException",
    "NOT_CONTROLLER": "NotControllerException",
    "DELEGATION_TOKEN_AUTH_DISABLED": "DelegationTokenDisabledException",
    "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED": "UnsupportedByAuthenticationException",
}
# Errors.java's default message of the codes the tools may meet without a broker message.
_DEFAULT_MESSAGES = {
    "CLUSTER_AUTHORIZATION_FAILED": "Cluster authorization failed.",
    "SECURITY_DISABLED": "Security features are disabled.",
    "RESOURCE_NOT_FOUND": "A request illegally referred to a resource that does not exist.",
    "DUPLICATE_RESOURCE": "A request illegally referred to the same resource twice.",
    "UNACCEPTABLE_CREDENTIAL": "Requested credential would not meet criteria for acceptability.",
    "NOT_CONTROLLER": "This is not the correct controller for this cluster.",
    "DELEGATION_TOKEN_AUTH_DISABLED": "Delegation Token feature is not enabled.",
    "DELEGATION_TOKEN_NOT_FOUND": "Delegation Token is not found on server.",
    "DELEGATION_TOKEN_OWNER_MISMATCH": "Specified Principal is not valid Owner/Renewer.",
    "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED": "Delegation Token requests are not allowed on "
                                            "PLAINTEXT/1-way SSL channels and on delegation "
                                            "token authenticated channels.",
    "DELEGATION_TOKEN_AUTHORIZATION_FAILED": "Delegation Token authorization failed.",
    "DELEGATION_TOKEN_EXPIRED": "Delegation Token is expired.",
    "INVALID_PRINCIPAL_TYPE": "Supplied principalType is not supported.",
}


def java_exception(error_name: str) -> str:
    """The fully qualified exception class of an error code's name (`RESOURCE_NOT_FOUND`)."""
    simple = _IRREGULAR.get(error_name)
    if simple is None:
        name = error_name
        if name.endswith(("_AUTHORIZATION_FAILED", "_AUTHENTICATION_FAILED")):
            name = name[:-len("_FAILED")]
        simple = "".join(part.capitalize() for part in name.split("_")) + "Exception"
    return PACKAGE + simple


def java_error(error_name: str, message: str | None) -> str:
    """`<exception class>: <message>`, as Kafka's tools print an ExecutionException's cause;
    Errors.java's default message when the broker sent none."""
    text = message or _DEFAULT_MESSAGES.get(error_name, error_name)
    return f"{java_exception(error_name)}: {text}"
