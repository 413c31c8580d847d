"""Connection snippets for the Access page: curl, Python (openai) and JavaScript against ``/v1``."""

from __future__ import annotations

import json
from typing import Final

__all__ = ["KEY_PLACEHOLDER", "SNIPPET_LANGUAGES", "snippets"]

KEY_PLACEHOLDER: Final = "$MIRBAD_API_KEY"
"""What stands for the key in a snippet unless a real one is given (the secret is never stored)."""

SNIPPET_LANGUAGES: Final = {"curl": "bash", "python": "python", "javascript": "javascript"}
"""Each snippet's name and the language its code block is highlighted as."""


def snippets(base_url: str, model: str, *, key: str | None = None) -> dict[str, str]:
    """The three snippets for ``model`` at ``base_url`` (the ``/v1`` URL), by :data:`SNIPPET_LANGUAGES` name.

    Args:
        base_url: the router's URL, ending in ``/v1``.
        model: the served name to call.
        key: a key to write in; the snippets read ``MIRBAD_API_KEY`` from the environment otherwise.
    """
    url = base_url.rstrip("/")
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Hello!"}]}, indent=2)
    curl_key = key or KEY_PLACEHOLDER
    python_key = repr(key) if key else 'os.environ["MIRBAD_API_KEY"]'
    js_key = json.dumps(key) if key else "process.env.MIRBAD_API_KEY"
    curl = (
        f"curl {url}/chat/completions \\\n"
        f'  -H "Authorization: Bearer {curl_key}" \\\n'
        '  -H "Content-Type: application/json" \\\n'
        f"  -d '{body}'"
    )
    python = (
        "import os\n\nfrom openai import OpenAI\n\n"
        f'client = OpenAI(base_url="{url}", api_key={python_key})\n'
        "reply = client.chat.completions.create(\n"
        f'    model="{model}",\n'
        '    messages=[{"role": "user", "content": "Hello!"}],\n'
        ")\n"
        "print(reply.choices[0].message.content)"
    )
    javascript = (
        'import OpenAI from "openai";\n\n'
        f'const client = new OpenAI({{ baseURL: "{url}", apiKey: {js_key} }});\n'
        "const reply = await client.chat.completions.create({\n"
        f'  model: "{model}",\n'
        '  messages: [{ role: "user", content: "Hello!" }],\n'
        "});\n"
        "console.log(reply.choices[0].message.content);"
    )
    return {"curl": curl, "python": python, "javascript": javascript}
