"""Deploy facts from the CI system's own variables, so the CI step that reports a deploy is one line.

GitHub Actions: the id is `gh-<run id>-<attempt>`, the service the repository, the version the commit (12 characters),
the URL the workflow run; for statuses, the full commit, the repository, the API's URL (GitHub Enterprise too) and,
in a run started by a `deployment` event, the deployment's id (from the event's payload). In a `pull_request` run,
GITHUB_SHA is GitHub's synthetic merge commit: the commit is the request's head (pull_request.head.sha). GitLab CI:
`gl-<job id>`, the project path, the short commit, the job URL; for statuses, the full commit, the project path and
the API's URL (self-hosted too). Flags always win over these. Only the CI system's own variables are read here; the
target's default, RADAR_DEPLOY_TARGET, is one of radar's settings (config.settings).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

# What each deploy field comes from, per CI: named by the warnings when it is missing.
SOURCES = {
    "github": {"commit_sha": "GITHUB_SHA", "repository": "GITHUB_REPOSITORY", "service": "GITHUB_REPOSITORY",
               "version": "GITHUB_SHA"},
    "gitlab": {"commit_sha": "CI_COMMIT_SHA", "repository": "CI_PROJECT_PATH", "service": "CI_PROJECT_PATH",
               "version": "CI_COMMIT_SHA"},
}  # fmt: skip
FLAGS = {"commit_sha": "--commit", "repository": "--repository", "service": "--service", "version": "--version"}


def ci_kind(env: Mapping[str, str]) -> str | None:
    """The CI this runs in, as its code host's name: github (GitHub Actions), gitlab (GitLab CI), or None."""
    if env.get("GITHUB_ACTIONS") == "true" and env.get("GITHUB_RUN_ID"):
        return "github"
    if env.get("GITLAB_CI") == "true" and env.get("CI_JOB_ID"):
        return "gitlab"
    return None


def ci_defaults(env: Mapping[str, str]) -> dict[str, str]:
    """The deploy fields the CI's environment can give: deploy_id, service, version, url, source, and for statuses
    commit_sha, repository, code_host, api_url, run_url, github_deployment_id (any subset)."""
    out: dict[str, str] = {}
    kind = ci_kind(env)
    if kind == "github":
        repo = env.get("GITHUB_REPOSITORY", "")
        out["deploy_id"] = f"gh-{env['GITHUB_RUN_ID']}-{env.get('GITHUB_RUN_ATTEMPT', '1')}"
        out["source"] = "github-actions"
        out["code_host"] = "github"
        if repo:
            out["service"] = out["repository"] = repo
            out["url"] = out["run_url"] = (
                f"{env.get('GITHUB_SERVER_URL', 'https://github.com')}/{repo}/actions/runs/{env['GITHUB_RUN_ID']}"
            )
        commit = _github_head(env) or env.get("GITHUB_SHA")
        if commit:
            out["version"] = commit[:12]
            out["commit_sha"] = commit
        if env.get("GITHUB_API_URL"):
            out["api_url"] = env["GITHUB_API_URL"]
        deployment = _github_deployment(env)
        if deployment:
            out["github_deployment_id"] = deployment
    elif kind == "gitlab":
        out["deploy_id"] = f"gl-{env['CI_JOB_ID']}"
        out["source"] = "gitlab-ci"
        out["code_host"] = "gitlab"
        if env.get("CI_PROJECT_PATH"):
            out["service"] = out["repository"] = env["CI_PROJECT_PATH"]
        if env.get("CI_COMMIT_SHORT_SHA") or env.get("CI_COMMIT_SHA"):
            out["version"] = env.get("CI_COMMIT_SHORT_SHA") or env["CI_COMMIT_SHA"][:12]
        if env.get("CI_COMMIT_SHA"):
            out["commit_sha"] = env["CI_COMMIT_SHA"]
        if env.get("CI_JOB_URL"):
            out["url"] = out["run_url"] = env["CI_JOB_URL"]
        if env.get("CI_API_V4_URL"):
            out["api_url"] = env["CI_API_V4_URL"]
    return out


def _github_payload(env: Mapping[str, str], events: tuple[str, ...], key: str) -> dict:
    """The `key` object of the event's payload (the JSON file at GITHUB_EVENT_PATH) when the run was started by one
    of `events`, else (or when it cannot be read) an empty one."""
    if env.get("GITHUB_EVENT_NAME") not in events or not env.get("GITHUB_EVENT_PATH"):
        return {}
    try:
        payload = json.loads(Path(env["GITHUB_EVENT_PATH"]).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    found = payload.get(key) if isinstance(payload, dict) else None
    return found if isinstance(found, dict) else {}


def _github_deployment(env: Mapping[str, str]) -> str | None:
    """The deployment's id when the run was started by a `deployment` (or `deployment_status`) event: GitHub names
    it only in the event's payload."""
    found = _github_payload(env, ("deployment", "deployment_status"), "deployment").get("id")
    return str(found) if isinstance(found, int) and not isinstance(found, bool) and found > 0 else None


def _github_head(env: Mapping[str, str]) -> str | None:
    """The pull request's head commit in a run started by a `pull_request` (or `pull_request_target`) event."""
    head = _github_payload(env, ("pull_request", "pull_request_target"), "pull_request").get("head")
    sha = head.get("sha") if isinstance(head, dict) else None
    return sha if isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", sha) else None


def ci_warnings(env: Mapping[str, str], fields: Mapping[str, object]) -> list[str]:
    """One line per fact a deploy recorded in a CI lacks: no commit or repository (so no status can be sent), an
    empty service or version; each names the CI variable it comes from and the flag that gives it. Outside a CI
    (GitHub Actions, GitLab CI, or any other that sets CI=true), none."""
    kind = ci_kind(env)
    if kind is None:
        if env.get("CI") != "true" or (fields.get("commit_sha") and fields.get("repository")):
            return []
        return [
            "warning: neither GitHub Actions nor GitLab CI was recognised (GITHUB_ACTIONS with GITHUB_RUN_ID, or "
            "GITLAB_CI with CI_JOB_ID): no commit status for this deploy unless --commit, --repository and "
            "--code-host are given"
        ]
    lines = []
    for name, variable in SOURCES[kind].items():
        if fields.get(name):
            continue
        what = "no commit status can be sent" if name in ("commit_sha", "repository") else f"{name} is empty"
        lines.append(f"warning: {variable} is not set: {what} (give {FLAGS[name]})")
    return lines
