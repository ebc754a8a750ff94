"""Pull requests through the GitHub REST API, over httpx.

GITHUB_TOKEN (and GITHUB_API_URL, for GitHub Enterprise or a test server)
come from the worker's environment. Errors are mapped at this seam: a bad
token or a missing repository is permanent; rate limits and 5xx may pass.
"""

from __future__ import annotations

import os
import re

import httpx
from temporalio.exceptions import ApplicationError

API_VERSION = "2022-11-28"


_OWNER_NAME = re.compile(r"(?!\.{1,2}/)[\w.-]+/(?!\.{1,2}$)[\w.-]+")


def github_repo_of(url: str) -> str | None:
    """owner/name from a GitHub remote URL (https or ssh), else None."""
    match = re.search(r"github\.com[:/]([\w.-]+)/([\w.-]+?)(?:\.git)?/?$", url.strip())
    found = f"{match.group(1)}/{match.group(2)}" if match else None
    return found if found and _OWNER_NAME.fullmatch(found) else None


def _client(transport: httpx.BaseTransport | None = None) -> httpx.Client:
    token = os.environ.get("GITHUB_TOKEN") or os.environ.get("GH_TOKEN")
    if not token:
        raise ApplicationError("a pull request needs GITHUB_TOKEN in the worker's environment", non_retryable=True)
    return httpx.Client(
        base_url=os.environ.get("GITHUB_API_URL", "https://api.github.com"), transport=transport,
        headers={"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
                 "X-GitHub-Api-Version": API_VERSION, "User-Agent": "reposwarm"},
        timeout=httpx.Timeout(30.0, connect=10.0),
    )


def _fail(response: httpx.Response, what: str) -> ApplicationError:
    try:
        detail = response.json().get("message", "")
    except ValueError:
        detail = response.text[:200]
    retryable = response.status_code in (429, 500, 502, 503, 504) or (
        response.status_code == 403 and "rate limit" in detail.lower())
    hint = {401: " (check GITHUB_TOKEN)", 404: " (no such repository, or the token cannot see it)"}.get(
        response.status_code, "")
    return ApplicationError(f"{what}: GitHub answered {response.status_code} {detail}{hint}",
                            non_retryable=not retryable)


def open_pull_request(repo: str, *, head: str, base: str, title: str, body: str, draft: bool = False,
                      transport: httpx.BaseTransport | None = None) -> str:
    """Open the pull request and return its URL; one already open for this branch is returned as is."""
    if not _OWNER_NAME.fullmatch(repo):  # it becomes the request's path: "../.." would reach another endpoint
        raise ApplicationError(f"delivery.github_repo {repo!r} is not owner/name", non_retryable=True)
    with _client(transport) as client:
        try:
            response = client.post(f"/repos/{repo}/pulls", json={
                "title": title, "head": head, "base": base, "body": body[:65_000], "draft": draft})
        except httpx.HTTPError as err:
            raise ApplicationError(f"cannot reach the GitHub API: {type(err).__name__}") from None
        if response.status_code == 201:
            return str(response.json()["html_url"])
        if response.status_code == 422 and "already exists" in response.text:
            owner = repo.split("/")[0]
            found = client.get(f"/repos/{repo}/pulls", params={"head": f"{owner}:{head}", "state": "open"})
            if found.status_code == 200 and found.json():
                return str(found.json()[0]["html_url"])
        raise _fail(response, f"opening a pull request on {repo}")
