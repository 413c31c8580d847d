"""The admin API's OpenAPI document tells the truth: statuses, the error envelope, bodies and media types.

The last test lets schemathesis loose on the live schema against a master served on loopback: no
server error, every status documented, every JSON answer matching its documented schema.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
from tests._support.asgi_server import serve_asgi
from tests.master._stack import running_master

from mirbad_master._app import create_master_app

pytestmark = pytest.mark.anyio

ENVELOPE = "#/components/schemas/AdminErrorBody"
CONFLICTS = {
    ("POST", "/api/models"),
    ("PUT", "/api/models/{model_id}"),
    ("DELETE", "/api/models/{model_id}"),
    ("POST", "/api/models/{model_id}/start"),
    ("POST", "/api/models/{model_id}/restart"),
    ("POST", "/api/nodes"),
    ("DELETE", "/api/nodes/{node_id}"),
}
STARTS = {("POST", "/api/models/{model_id}/start"), ("POST", "/api/models/{model_id}/restart")}


async def openapi(tmp_path: Path) -> dict[str, Any]:
    async with running_master(tmp_path) as master:
        response = await master.anonymous.get("/openapi.json")
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    return document


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            yield method.upper(), path, operation


def refusal_statuses(operation: dict[str, Any]) -> set[str]:
    statuses = set()
    for status, response in operation["responses"].items():
        if status.startswith(("4", "5")):
            assert response["content"]["application/json"]["schema"] == {"$ref": ENVELOPE}, status
            statuses.add(status)
    return statuses


async def test_every_admin_route_documents_its_refusals_in_the_envelope(tmp_path: Path) -> None:
    document = await openapi(tmp_path)

    for method, path, operation in operations(document):
        if not path.startswith("/api"):
            continue
        documented = refusal_statuses(operation)
        if (method, path) == ("DELETE", "/api/session"):
            assert documented == set()
            continue
        expected = {"401", "429"}
        if operation.get("parameters") or operation.get("requestBody"):
            expected.add("400")
        if "{" in path or (method, path) == ("GET", "/api/keys/usage"):  # ?keyId= of no key is 404
            expected.add("404")
        if (method, path) in CONFLICTS:
            expected.add("409")
        if (method, path) in STARTS:
            expected |= {"422", "502", "503", "504"}
        assert expected <= documented, (method, path, documented)
    assert "HTTPValidationError" not in document["components"]["schemas"]


async def test_sign_in_refusals_document_their_headers(tmp_path: Path) -> None:
    responses = (await openapi(tmp_path))["paths"]["/api/models"]["get"]["responses"]

    assert set(responses["429"]["headers"]) == {"Retry-After"}
    assert set(responses["401"]["headers"]) == {"WWW-Authenticate"}


async def test_the_envelope_is_documented(tmp_path: Path) -> None:
    schemas = (await openapi(tmp_path))["components"]["schemas"]

    assert schemas["AdminErrorBody"]["required"] == ["error"]
    assert set(schemas["AdminError"]["properties"]) >= {"code", "message", "field", "nodeId", "modelId"}


async def test_non_json_answers_have_their_media_types(tmp_path: Path) -> None:
    paths = (await openapi(tmp_path))["paths"]

    assert set(paths["/metrics"]["get"]["responses"]["200"]["content"]) == {"text/plain"}
    assert set(paths["/api/models/{model_id}/logs"]["get"]["responses"]["200"]["content"]) == {
        "text/event-stream"
    }


async def test_answers_have_real_schemas(tmp_path: Path) -> None:
    schemas = (await openapi(tmp_path))["components"]["schemas"]

    empty = sorted(name for name, schema in schemas.items() if schema == {} and name != "JsonValue")
    assert empty == []
    assert {"definition", "status", "restartPending"} <= set(schemas["ModelView"]["properties"])


async def test_placement_is_typed_and_described(tmp_path: Path) -> None:
    schemas = (await openapi(tmp_path))["components"]["schemas"]
    placement = next(schema for name, schema in schemas.items() if name.startswith("Placement"))

    assert placement["required"] == ["nodeId"]
    assert placement["properties"]["nodeId"]["description"]
    assert placement["properties"]["gpuUuids"]["description"]
    assert placement["description"]


async def test_a_bad_query_or_path_value_is_400_in_the_envelope(tmp_path: Path) -> None:
    async with running_master(tmp_path) as master:
        tail = await master.admin.get("/api/models/ornith-9b-fp8/logs", params={"tail": -1})
        force = await master.admin.post("/api/models/ornith-9b-fp8/start", params={"force": "perhaps"})

    for response, field in ((tail, "tail"), (force, "force")):
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == "invalid_request"
        assert response.json()["error"]["field"] == field


# ---------------------------------------------------------------- schemathesis

KNOWN = {"model_id": "ornith-9b-fp8", "node_id": "local"}
"""Path parameters of what a fresh master has: its seeded example model and its local node."""
FAKE_AGENT_LACKS = ("/host/", "/image-pulls")
"""Routes the fake agent does not serve (their tests run the real agent): a 502 there is the fake's."""
MAX_EXAMPLES = 8
"""Examples per operation: enough to find a 500 on each route, few enough for well under a minute."""


async def test_schemathesis_finds_no_server_error_and_no_undocumented_answer(tmp_path: Path) -> None:
    schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed")
    from hypothesis import HealthCheck, given, settings

    # Typed when installed; the ignore is for a checkout without it (the test then skips).
    from schemathesis.checks import not_a_server_error  # type: ignore[import-not-found, unused-ignore]
    from schemathesis.specs.openapi.checks import (  # type: ignore[import-not-found, unused-ignore]
        response_schema_conformance,
        status_code_conformance,
    )

    checks = [not_a_server_error, status_code_conformance, response_schema_conformance]
    async with (
        running_master(tmp_path) as master,
        serve_asgi(create_master_app(master.services, master.auth)) as url,
    ):
        document = (await master.anonymous.get("/openapi.json")).json()
        schema = schemathesis.openapi.from_dict(document)
        # Issue 31 "keep it true": the master's own Origin too, as the portal's browser sends it, so a
        # write is never refused as cross-origin before it reaches its route.
        headers = {"Authorization": f"Bearer {master.password}", "Origin": url}
        failures: list[str] = []

        def explore(operation: Any) -> None:
            @given(case=operation.as_strategy())
            @settings(
                max_examples=MAX_EXAMPLES,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
                derandomize=True,
            )
            def one(case: Any) -> None:
                case.call_and_validate(base_url=url, headers=headers, checks=checks, timeout=10)
                # Generated ids name nothing, so a write would only ever meet its 404: each case is
                # sent again with the ids of what exists (the seeded model, the local node).
                named = {name: value for name, value in KNOWN.items() if name in (case.path_parameters or {})}
                if named and not any(part in case.path for part in FAKE_AGENT_LACKS):
                    case.path_parameters = {**case.path_parameters, **named}
                    case.call_and_validate(base_url=url, headers=headers, checks=checks, timeout=10)

            try:
                one()
            except (Exception, BaseExceptionGroup) as exc:  # schemathesis groups what it found
                failures.append(f"{operation.method.upper()} {operation.path}: {exc}")

        operations = [result.ok() for result in schema.get_all_operations()]
        # Deletes last: the other writes meet the seeded model and node before anything removes them.
        for operation in sorted(operations, key=lambda operation: operation.method.upper() == "DELETE"):
            # Signing in and out is throttled per client and would lock the admin out of the rest.
            if operation.path != "/api/session":
                await anyio.to_thread.run_sync(explore, operation)

    assert failures == [], "\n\n".join(failures)


async def test_speculative_is_documented_as_vllms_own_object(tmp_path: Path) -> None:
    schemas = (await openapi(tmp_path))["components"]["schemas"]
    speculative = [schema for name, schema in schemas.items() if name.startswith("SpeculativeDecoding")]

    assert speculative
    for schema in speculative:
        assert set(schema["properties"]) == {"method", "model", "num_speculative_tokens"}
        assert schema["additionalProperties"] is True
        assert schema["properties"]["num_speculative_tokens"]["maximum"] == 1024


async def test_objects_say_they_have_no_other_fields(tmp_path: Path) -> None:
    # Request bodies refuse unknown fields and answers never carry any: the schema says so.
    schemas = (await openapi(tmp_path))["components"]["schemas"]

    for wanted in (
        "ModelDefinition",
        "Placement",
        "ApiKeyCreate",
        "NodeCreate",
        "AdminErrorBody",
        "ModelView",
    ):
        found = [schema for name, schema in schemas.items() if name.split("-")[0] == wanted]
        assert found, wanted
        assert all(schema["additionalProperties"] is False for schema in found), wanted
