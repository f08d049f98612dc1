"""The gpulab REST API (/api/v1/) over the standard library, for the command line.

Only what a student needs: submit, list, show, cancel, logs, quotas. Errors come back as one
`ApiError` whose message is what the API said, with the field named, so the command line
prints it as is.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

REQUEST_TIMEOUT_SECONDS = 30.0
USER_AGENT = "gpulab-cli/1"


# `ApiError.status` for an answer that is not the API's (a login page, a URL urllib cannot
# use): a wrong address, not an outage, so nothing is tried again.
NOT_THE_API = -1

# The fields of the API's job (detail) answer that the commands read without a default:
# an answer without them is not a job.
JOB_KEYS = (
    "id", "name", "owner", "state", "image", "command", "num_gpus", "accepted_types",
    "walltime_seconds", "attained_gpu_hours", "attempt", "preemption_count", "submitted_at",
)  # fmt: skip


class ApiError(Exception):
    """The API refused (4xx/5xx), could not be reached (`status` 0), or what answered is
    not the gpulab API (NOT_THE_API)."""

    def __init__(self, status: int, message: str, code: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """urllib would follow a redirect with the token to any host, even from https to
    http: refuse, so a wrong URL is an error instead."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_opener = urllib.request.build_opener(_RefuseRedirects)


def error_message(body: Any) -> tuple[str, str]:
    """(message, code) from an error body: {"detail", "code"} or {field: [messages]}."""
    if isinstance(body, dict):
        if "detail" in body:
            return str(body["detail"]), str(body.get("code", ""))
        parts = []
        for field, problems in body.items():
            if isinstance(problems, dict):  # nested: {"env": {"NAME": [...]}}
                text = "; ".join(f"{key}: {_joined(value)}" for key, value in problems.items())
            else:
                text = _joined(problems)
            parts.append(f"{field}: {text}")
        if parts:
            return "; ".join(parts), "invalid"
    if isinstance(body, list):
        return _joined(body), "invalid"
    return str(body), ""


def _joined(value: Any) -> str:
    return " ".join(str(item) for item in value) if isinstance(value, list) else str(value)


class Client:
    def __init__(self, url: str, token: str) -> None:
        self.base = url.rstrip("/")
        self.token = token
        self.jobs_total = 0  # how many jobs the last `jobs` listing matched in all

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
        body: Any = None,
    ) -> Any:
        url = f"{self.base}{path}"
        if params:
            url = f"{url}?{urllib.parse.urlencode(params)}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Authorization", f"Token {self.token}")
        request.add_header("Accept", "application/json")
        request.add_header("User-Agent", USER_AGENT)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with _opener.open(request, timeout=REQUEST_TIMEOUT_SECONDS) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise self._refusal(exc) from None
        except ValueError as exc:  # a URL urllib cannot use (a port that is not a number)
            raise ApiError(NOT_THE_API, f"cannot use {self.base}: {exc}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise ApiError(0, f"cannot reach {self.base}: {reason}") from None
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise ApiError(NOT_THE_API, self._not_the_api()) from None

    def _not_the_api(self) -> str:
        return (
            f"{self.base} answered with something other than the gpulab API (a login or "
            "proxy page?): give GPULAB_URL as the server's own address, without a path"
        )

    def _refusal(self, exc: urllib.error.HTTPError) -> ApiError:
        raw = exc.read()
        try:
            message, code = error_message(json.loads(raw))
        except ValueError:
            message, code = raw.decode(errors="replace").strip()[:200] or exc.reason, ""
            if exc.code == 404 or raw.lstrip()[:1] == b"<":
                message = f"{exc.code}: {self._not_the_api()}"
        if 300 <= exc.code < 400:
            where = urllib.parse.urlsplit(exc.headers.get("Location", ""))
            server = f"{where.scheme}://{where.netloc}" if where.netloc else "elsewhere"
            message = f"the server redirects to {server}: give GPULAB_URL as that address"
        if exc.code == 401:
            message = f"{message} (check GPULAB_TOKEN, or run `gpulab login`)"
        return ApiError(exc.code, message, code)

    # ------------------------------------------------------------------ the endpoints

    def submit(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        return self._job_answer(self.request("POST", "/api/v1/jobs/", body=dict(spec)))

    def job(self, job_id: int) -> dict[str, Any]:
        return self._job_answer(self.request("GET", f"/api/v1/jobs/{int(job_id)}/"))

    def cancel(self, job_id: int) -> dict[str, Any]:
        return self._job_answer(self.request("POST", f"/api/v1/jobs/{int(job_id)}/cancel/"))

    def cancel_array(self, array_id: int) -> dict[str, Any]:
        data = self.request("POST", f"/api/v1/arrays/{int(array_id)}/cancel/")
        if not isinstance(data, dict) or not isinstance(data.get("cancelled"), list):
            raise ApiError(NOT_THE_API, self._not_the_api())
        return data

    def quotas(self) -> list[dict[str, Any]]:
        """The caller's own account and lab groups, each with its usage and limits."""
        data = self.request("GET", "/api/v1/quotas/")
        if not isinstance(data, dict) or not isinstance(data.get("accounts"), list):
            raise ApiError(NOT_THE_API, self._not_the_api())
        return data["accounts"]

    def username(self) -> str:
        """The caller's user name: the API has no "who am I", but the quotas list the
        caller's own account (kind "user") by name. "" when it is not there."""
        for account in self.quotas():
            if isinstance(account, dict) and account.get("kind") == "user":
                return str(account.get("name") or "")
        return ""

    def logs(self, job_id: int, stream: str) -> dict[str, Any]:
        data = self.request(
            "GET", f"/api/v1/agents/jobs/{int(job_id)}/logs/", params={"stream": stream}
        )
        if not isinstance(data, dict) or not isinstance(data.get("text"), str):
            raise ApiError(NOT_THE_API, self._not_the_api())
        return data

    def _job_answer(self, data: Any) -> dict[str, Any]:
        """`data` if it is a job as the API gives one (what the commands read of it), so
        a 200 from something else is said so rather than ending in a traceback."""
        if not isinstance(data, dict) or not all(key in data for key in JOB_KEYS):
            raise ApiError(NOT_THE_API, self._not_the_api())
        return data

    def jobs(
        self,
        *,
        states: Sequence[str] = (),
        owner: str | None = None,
        array: int | None = None,
        limit: int = 50,
    ) -> Iterator[dict[str, Any]]:
        """Jobs newest first (an array's tasks by index), following pages until `limit`."""
        params: list[tuple[str, str]] = [("state", ",".join(states))] if states else []
        if owner:
            params.append(("owner", owner))
        if array is not None:
            params.append(("array", str(int(array))))
        page, given = 1, 0
        while given < limit:
            data = self.request("GET", "/api/v1/jobs/", params=[*params, ("page", str(page))])
            if not isinstance(data, dict) or not isinstance(data.get("results"), list):
                raise ApiError(NOT_THE_API, self._not_the_api())
            self.jobs_total = int(data.get("count") or 0)
            for job in data["results"]:
                yield job
                given += 1
                if given >= limit:
                    return
            if not data.get("next"):
                return
            page += 1
