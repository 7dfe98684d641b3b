"""Checks of this project's own that schemathesis runs beside its built-in ones (the
OpenAPI fuzz test names this module in SCHEMATHESIS_HOOKS).

Every refusal must be the API's JSON error body, so a client can branch on `code`; a
framework's plain-text rejection or an empty 404/405 would slip past the schema checks,
which only see what the document promises.
"""

import schemathesis


@schemathesis.check
def error_has_code(ctx, response, case):
    if not 400 <= response.status_code < 500:
        return None
    content_type = response.headers.get("content-type", [""])
    if isinstance(content_type, list):
        content_type = content_type[0] if content_type else ""
    if not content_type.startswith("application/json"):
        raise AssertionError(
            f"{response.status_code} answered with content-type {content_type!r}, not the JSON error body"
        )
    try:
        body = response.json()
    except ValueError as error:
        raise AssertionError(f"{response.status_code} answered with a body that is not JSON: {error}")
    if not isinstance(body, dict) or not isinstance(body.get("code"), str) or not body["code"]:
        raise AssertionError(f"{response.status_code} answered without a `code`: {body!r}")
    if not isinstance(body.get("message"), str):
        raise AssertionError(f"{response.status_code} answered without a `message`: {body!r}")
    return None
