"""Deploy facts from the CI system's own variables, so the CI step that reports a deploy is one line.

GitHub Actions: the id is `gh-<run id>-<attempt>`, the service the repository, the version the commit (12 characters),
the URL the workflow run. GitLab CI: `gl-<job id>`, the project path, the short commit, the job URL. The target comes
from RADAR_DEPLOY_TARGET when --target is not given. Flags always win over these.
"""

from __future__ import annotations

from collections.abc import Mapping

TARGET_VAR = "RADAR_DEPLOY_TARGET"


def ci_defaults(env: Mapping[str, str]) -> dict[str, str]:
    """The deploy fields the environment can give: deploy_id, target, service, version, url, source (any subset)."""
    out: dict[str, str] = {}
    if env.get(TARGET_VAR):
        out["target"] = env[TARGET_VAR]
    if env.get("GITHUB_ACTIONS") == "true" and env.get("GITHUB_RUN_ID"):
        repo = env.get("GITHUB_REPOSITORY", "")
        out["deploy_id"] = f"gh-{env['GITHUB_RUN_ID']}-{env.get('GITHUB_RUN_ATTEMPT', '1')}"
        out["source"] = "github-actions"
        if repo:
            out["service"] = repo
            out["url"] = (
                f"{env.get('GITHUB_SERVER_URL', 'https://github.com')}/{repo}/actions/runs/{env['GITHUB_RUN_ID']}"
            )
        if env.get("GITHUB_SHA"):
            out["version"] = env["GITHUB_SHA"][:12]
    elif env.get("GITLAB_CI") == "true" and env.get("CI_JOB_ID"):
        out["deploy_id"] = f"gl-{env['CI_JOB_ID']}"
        out["source"] = "gitlab-ci"
        if env.get("CI_PROJECT_PATH"):
            out["service"] = env["CI_PROJECT_PATH"]
        if env.get("CI_COMMIT_SHORT_SHA") or env.get("CI_COMMIT_SHA"):
            out["version"] = env.get("CI_COMMIT_SHORT_SHA") or env["CI_COMMIT_SHA"][:12]
        if env.get("CI_JOB_URL"):
            out["url"] = env["CI_JOB_URL"]
    return out
