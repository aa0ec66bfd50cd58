"""The console's POST bodies: URL-encoded forms, read bounded, without python-multipart."""

from __future__ import annotations

from urllib.parse import parse_qs

from starlette.requests import Request

__all__ = ["MAX_FORM_BYTES", "MAX_FORM_FIELDS", "FormError", "read_form"]

MAX_FORM_BYTES = 256 * 1024
"""A dead-letters form names at most a page of ids: far less than this."""
MAX_FORM_FIELDS = 1000


class FormError(Exception):
    """A body that is not a form this console sends; `status` is the HTTP answer."""

    def __init__(self, status: int, problem: str) -> None:
        self.status = status
        self.problem = problem
        super().__init__(problem)


async def read_form(request: Request) -> dict[str, list[str]]:
    """The posted form's fields (each a list of its values, in order)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise FormError(415, "expected a form (application/x-www-form-urlencoded)")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise FormError(413, f"form larger than {MAX_FORM_BYTES} bytes")
    try:
        return parse_qs(
            body.decode(), keep_blank_values=True, strict_parsing=False,
            max_num_fields=MAX_FORM_FIELDS,
        )  # fmt: skip
    except (UnicodeDecodeError, ValueError) as exc:
        raise FormError(400, f"malformed form: {exc}") from None
