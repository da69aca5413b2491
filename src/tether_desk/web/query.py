"""A page's query parameters as one pydantic model, validated in one call.

FastAPI validates each query parameter of a route on its own, in Python, on every request;
for the pages asked most (the inbox, search) that was a tenth of a page's CPU.
:func:`query_of` makes one dependency that validates the whole query string with the
model (pydantic's core does the work) and answers an invalid one as FastAPI does (422,
each error located at ``("query", name)``); :func:`documented` lists the model's fields in
the route's OpenAPI description, as FastAPI would have.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


def query_of(model: type[M]) -> Callable[[Request], Awaitable[M]]:
    """A dependency giving ``model`` validated from the request's query string (the last
    value of a repeated name, as FastAPI takes it; names the model lacks are ignored)."""

    async def parse(request: Request) -> M:
        try:
            return model.model_validate(dict(request.query_params))
        except ValidationError as exc:
            errors = [{**e, "loc": ("query", *e["loc"])} for e in exc.errors(include_url=False)]
            raise RequestValidationError(errors) from None

    parse.__name__ = f"query_{model.__name__}"
    return parse


def documented(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` for a route that takes ``model`` through :func:`query_of`: its
    fields as query parameters."""
    schema = model.model_json_schema()
    required = set(schema.get("required", ()))
    return {
        "parameters": [
            {"name": name, "in": "query", "required": name in required, "schema": field}
            for name, field in schema["properties"].items()
        ]
    }
