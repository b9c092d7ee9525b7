"""SubjectAccessReview bodies, asked alike by both delegated authorizers (`/metrics` and insights).

Each has its own user type (a TokenReview's answer, the front proxy's headers); both carry what a
review's subject needs: name, uid, groups and extra.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from .client import SUBJECT_ACCESS_REVIEWS


class Subject(Protocol):
    """Who is asking: what SubjectAccessReviewSpec says of the user."""

    @property
    def name(self) -> str: ...

    @property
    def uid(self) -> str: ...

    @property
    def groups(self) -> Sequence[str]: ...

    @property
    def extra(self) -> Mapping[str, Sequence[str]]: ...


def subject_access_review(user: Subject, **attributes: Any) -> dict[str, Any]:
    """May ``user`` do what ``attributes`` say (``resourceAttributes=`` or ``nonResourceAttributes=``)?

    uid and extra are sent only when known, as kube-apiserver's delegating authorizer does.
    """
    spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups), **attributes}
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {key: list(values) for key, values in user.extra.items()}
    return {"apiVersion": SUBJECT_ACCESS_REVIEWS.api_version, "kind": SUBJECT_ACCESS_REVIEWS.kind, "spec": spec}
