"""What an object store's error means, and calls retried while the store says "later".

Each client has its own errors: botocore's `ClientError` (and its connection errors),
Beam's S3 client errors, pyarrow's `OSError` with "AWS Error ACCESS_DENIED" in its text,
google-api-core's exceptions. `kind` reads any of them as one of

  "denied"       the credentials may not do this (403, AccessDenied, an expired token)
  "missing"      no such object or bucket (404, NoSuchKey)
  "throttled"    the store asks to slow down or failed for a moment (429, 503, SlowDown, 500)
  "unreachable"  no answer: the connection failed or timed out

and `retried` runs a read or a listing again, with bounded backoff, while the store
throttles or does not answer, then turns what remains into a `StoreAccessError` naming
the URI and what to check. A missing object stays a `FileNotFoundError`, which callers
already treat as such.
"""

from __future__ import annotations

import errno
import re
import time
from collections.abc import Callable
from typing import TypeVar

from beam_shards.errors import StoreAccessError

T = TypeVar("T")

# Backoff between attempts of a call the store throttled or did not answer: 0.2 s, then 0.4 s, 0.8 s.
ATTEMPTS = 4
FIRST_DELAY_SECONDS = 0.2

_DENIED_CODES = {"accessdenied", "forbidden", "invalidaccesskeyid", "signaturedoesnotmatch", "expiredtoken",
                 "invalidtoken", "allaccessdisabled", "accountproblem", "unauthorized", "403", "401"}
_MISSING_CODES = {"nosuchkey", "nosuchbucket", "notfound", "404"}
_THROTTLED_CODES = {"slowdown", "throttling", "throttlingexception", "requestlimitexceeded", "toomanyrequests",
                    "requesttimeout", "serviceunavailable", "internalerror", "503", "429", "500", "502", "504"}
# An HTTP status in a message, not a number in the object's path (`_versions/503.json`).
_STATUS = r"(?:HTTP|[Ss]tatus(?: [Cc]ode)?|[Rr]esponse [Cc]ode)[ :=]{0,3}"
_TEXT = [  # pyarrow's and other clients' messages, read when an error carries no code
    ("denied", re.compile(rf"ACCESS_DENIED|AccessDenied|Forbidden|{_STATUS}40[13]\b|INVALID_ACCESS_KEY|"
                          r"SignatureDoesNotMatch")),
    ("throttled", re.compile(rf"SLOW_DOWN|SlowDown|THROTTL|Throttl|TooManyRequests|{_STATUS}(?:429|503)\b|"
                             r"SERVICE_UNAVAILABLE")),
    ("unreachable", re.compile(r"NETWORK_CONNECTION|Could not connect|Couldn't connect|Connection refused|"
                               r"timed out|Timeout|ENDPOINT_CONNECTION|Failed to establish")),
]
_HINTS = {
    "denied": "check the credentials this process uses (AWS_ACCESS_KEY_ID, AWS_PROFILE, "
              "GOOGLE_APPLICATION_CREDENTIALS or the machine's default account) and that they may read it",
    "throttled": "the store kept asking to slow down or failing for a moment; try again later, or read with "
                 "fewer workers at once",
    "unreachable": "check the endpoint (AWS_ENDPOINT_URL, STORAGE_EMULATOR_HOST) and the network",
}


def kind(error: BaseException) -> str | None:
    """"denied", "missing", "throttled" or "unreachable" for a store's error; None for any other error."""
    if isinstance(error, StoreAccessError):
        return None
    if isinstance(error, FileNotFoundError):
        return "missing"
    code = _code(error)
    if code in _DENIED_CODES:
        return "denied"
    if code in _MISSING_CODES:
        return "missing"
    if code in _THROTTLED_CODES:
        return "throttled"
    names = {cls.__name__ for cls in type(error).__mro__}
    if names & {"EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError",
                "ConnectionError", "TimeoutError", "RetryError", "TransportError"}:
        return "unreachable"
    if isinstance(error, OSError) or "BeamIOError" in names:
        text = str(error)
        for name, pattern in _TEXT:
            if pattern.search(text):
                return name
    # Only an explicit `raise ... from cause`: an error raised while another was handled is not that error.
    cause = error.__cause__
    return kind(cause) if isinstance(cause, BaseException) and cause is not error else None


def _code(error: BaseException) -> str | None:
    """The store's error code or HTTP status, lower case, when the error carries one."""
    response = getattr(error, "response", None)
    if isinstance(response, dict):  # botocore
        details = response.get("Error", {})
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return str(details.get("Code") or status or "").lower() or None
    for attribute in ("code", "status_code", "status"):  # Beam's S3 client, google-api-core
        value = getattr(error, attribute, None)
        if isinstance(value, (int, str)) and not isinstance(value, bool) and str(value):
            return str(value).lower()
    return None


def access_error(path: str, action: str, error: BaseException, found: str) -> StoreAccessError:
    """The error to raise for `error`, of kind `found`, met while doing `action` on `path`."""
    reason = {"denied": "the store denied access", "throttled": "the store throttled every attempt",
              "unreachable": "the store did not answer"}[found]
    detail = " ".join(str(error).split())[:300]
    return StoreAccessError(f"cannot {action} {path}: {reason} ({type(error).__name__}: {detail}); "
                            f"{_HINTS[found]}")


def retried(path: str, action: str, call: Callable[[], T]) -> T:
    """`call()`, run again with bounded backoff while the store throttles or does not answer.

    Raises:
      StoreAccessError: the store denied access, or still throttled or did not answer
        after ATTEMPTS attempts (the error names `path`, `action` and what to check).
      FileNotFoundError: no such object (naming `path`).
      Any other error of `call`, as it is.
    """
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(FIRST_DELAY_SECONDS * 2 ** (attempt - 1))
        try:
            return call()
        except Exception as error:  # noqa: BLE001 - each client raises its own kinds; unknown ones go on as they are
            found = kind(error)
            if found == "missing":
                if isinstance(error, FileNotFoundError):
                    raise
                raise FileNotFoundError(errno.ENOENT, "no such object", path) from None
            if found is None:
                raise
            if found == "denied" or attempt == ATTEMPTS - 1:
                raise access_error(path, action, error, found) from None
