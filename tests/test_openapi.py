"""/api/openapi.json describes every route as it answers (issue: "every route declares its
response and error schemas (`{detail}` errors); the documented status codes are the real ones").

Every operation declares a 2xx answer with a JSON schema; every route behind the bearer check
declares its 401 and 403; every declared error is a JSON object whose schema requires a string
`detail`; and every route the site serves is in the document -- the webhook route, answered
before Django, included (crewlet_site.api merges notify.openapi).
"""
from __future__ import annotations

import re

import pytest
from django.test import Client

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(30)]

METHODS = ("get", "put", "post", "delete", "patch")


@pytest.fixture(scope="module")
def document() -> dict:
    response = Client().get("/api/openapi.json")
    assert response.status_code == 200 and response["Content-Type"].startswith("application/json")
    return response.json()


def operations(document: dict):
    for path, item in document["paths"].items():
        for method in METHODS:
            if method in item:
                yield f"{method.upper()} {path}", item[method]


def resolve(document: dict, schema: dict) -> dict:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = document["components"]["schemas"][name]
    return schema


def json_schema(document: dict, answer: dict) -> dict | None:
    content = (answer.get("content") or {}).get("application/json")
    return resolve(document, content["schema"]) if content and "schema" in content else None


def test_every_route_declares_a_success_with_a_schema(document):
    for name, op in operations(document):
        successes = {code: answer for code, answer in op["responses"].items() if str(code).startswith("2")}
        assert successes, f"{name} declares no 2xx answer"
        for code, answer in successes.items():
            schema = json_schema(document, answer)
            assert schema and (schema.get("properties") or schema.get("type") == "object"), f"{name} {code} has no JSON schema"


def test_every_error_is_a_detail_and_every_bearer_route_declares_401_and_403(document):
    for name, op in operations(document):
        codes = {str(c) for c in op["responses"]}
        if op.get("security") != []:  # behind the bearer check
            assert {"401", "403", "503"} <= codes, f"{name} declares {sorted(codes)}"
        for code, answer in op["responses"].items():
            if int(code) < 400:
                continue
            schema = json_schema(document, answer)
            assert schema is not None, f"{name} {code} declares no JSON body"
            assert "detail" in schema.get("required", []), f"{name} {code} does not require detail"
            assert schema["properties"]["detail"]["type"] == "string", f"{name} {code}"


def test_the_document_lists_every_route_the_site_serves(document):
    from crewlet_site.api import api

    documented = set(document["paths"])
    served = {"/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", str(p.pattern)) for p in api.urls[0]
              if p.name not in ("openapi-json", "openapi-view", "api-root")}  # the root: the API index, no operation
    assert served <= documented, served - documented
    assert "/webhooks/{source}" in documented  # answered before Django, documented all the same
    assert "/seats/{handle}/tasks" in served


def test_the_docs_page_serves_swagger_from_the_installed_package(document):
    page = Client().get("/api/docs")
    assert page.status_code == 200
    html = page.content.decode()
    assert "/static/ninja/swagger-ui-bundle.js" in html and "cdn" not in html.lower()
    bundle = Client().get("/static/ninja/swagger-ui-bundle.js")
    assert bundle.status_code == 200
