"""Connection snippets for the Access page: curl, Python (openai) and JavaScript against ``/v1``."""

from __future__ import annotations

import json
from typing import Final

__all__ = ["JAVASCRIPT_FILE_NAME", "KEY_PLACEHOLDER", "SNIPPET_LANGUAGES", "SNIPPET_TIMEOUT_S", "snippets"]

KEY_PLACEHOLDER: Final = "$MIRBAD_API_KEY"
"""What stands for the key in a snippet unless a real one is given (the secret is never stored)."""

SNIPPET_TIMEOUT_S: Final = 60
"""Seconds a snippet waits for its answer.

The clients' defaults (ten minutes, and two retries that honour the router's ``Retry-After: 30``) make
a request for a model that is not Ready hang for a minute before it fails; the snippets fail at once
with the router's message instead, and give a slow answer a minute.
"""

JAVASCRIPT_FILE_NAME: Final = "mirbad-chat.mjs"
"""The file the JavaScript snippet says to save it as.

It uses ``import`` and a top-level ``await``: Node runs those only in an ES module, which a ``.mjs``
file always is, whatever the ``package.json`` around it says (a ``.js`` file under a CommonJS package
fails with a syntax error).
"""

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
        f"curl --max-time {SNIPPET_TIMEOUT_S} {url}/chat/completions \\\n"
        f'  -H "Authorization: Bearer {curl_key}" \\\n'
        '  -H "Content-Type: application/json" \\\n'
        f"  -d '{body}'"
    )
    python = (
        "import os\n\nfrom openai import APIConnectionError, APIStatusError, OpenAI\n\n"
        "client = OpenAI(\n"
        f'    base_url="{url}",\n'
        f"    api_key={python_key},\n"
        f"    timeout={SNIPPET_TIMEOUT_S},\n"
        "    max_retries=0,  # a model that is not Ready is refused with the reason: show it at once\n"
        ")\n"
        "try:\n"
        "    reply = client.chat.completions.create(\n"
        f'        model="{model}",\n'
        '        messages=[{"role": "user", "content": "Hello!"}],\n'
        "    )\n"
        "except APIStatusError as error:\n"
        '    reason = error.body.get("message") if isinstance(error.body, dict) else error.message\n'
        '    raise SystemExit(f"refused ({error.status_code}): {reason}") from None\n'
        "except APIConnectionError as error:\n"
        '    raise SystemExit(f"no answer from {client.base_url}: {error}") from None\n'
        "print(reply.choices[0].message.content)"
    )
    javascript = (
        f"// Save as {JAVASCRIPT_FILE_NAME} (an ES module: import and top-level await need one).\n"
        f"// npm install openai && node {JAVASCRIPT_FILE_NAME}\n"
        'import OpenAI from "openai";\n\n'
        "const client = new OpenAI({\n"
        f'  baseURL: "{url}",\n'
        f"  apiKey: {js_key},\n"
        f"  timeout: {SNIPPET_TIMEOUT_S * 1000},\n"
        "  maxRetries: 0, // a model that is not Ready is refused with the reason: show it at once\n"
        "});\n"
        "try {\n"
        "  const reply = await client.chat.completions.create({\n"
        f'    model: "{model}",\n'
        '    messages: [{ role: "user", content: "Hello!" }],\n'
        "  });\n"
        "  console.log(reply.choices[0].message.content);\n"
        "} catch (error) {\n"
        "  if (error instanceof OpenAI.APIError && error.status) {\n"
        "    console.error(`refused (${error.status}): ${error.error?.message ?? error.message}`);\n"
        "  } else {\n"
        "    console.error(`no answer from ${client.baseURL}: ${error.message}`);\n"
        "  }\n"
        "  process.exitCode = 1;\n"
        "}"
    )
    return {"curl": curl, "python": python, "javascript": javascript}
