"""Form bodies as the portal's pages send them, read with the standard library (no
python-multipart): ``application/x-www-form-urlencoded`` and ``multipart/form-data`` (a file
upload). The body's size is already bounded by the server's ``BodyLimit``."""

from __future__ import annotations

from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from urllib.parse import parse_qs

from fastapi import Request


@dataclass
class Form:
    """A form's fields (first value of each) and its uploaded files (name, bytes)."""

    fields: dict[str, str] = field(default_factory=dict)
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)

    def get(self, name: str, default: str = "") -> str:
        return self.fields.get(name, default)


async def read(request: Request) -> Form:
    body = await request.body()
    kind = request.headers.get("content-type", "")
    if kind.startswith("multipart/form-data"):
        return multipart(kind, body)
    pairs = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return Form(fields={k: v[0] for k, v in pairs.items()})


def multipart(content_type: str, body: bytes) -> Form:
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = BytesParser(policy=HTTP).parsebytes(head + body)
    form = Form()
    if not message.is_multipart():
        return form
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            continue
        data = part.get_payload(decode=True) or b""
        filename = part.get_filename()
        if filename is not None:
            form.files[name] = (filename, data)
        else:
            form.fields[name] = data.decode("utf-8", "replace")
    return form
