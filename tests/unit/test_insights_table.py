"""`kubectl get foohealths` rendering: ages as kubectl prints them, cells in column order, row objects."""

from __future__ import annotations

import datetime

import pytest

from insights.health import foo_health
from insights.table import COLUMNS, age, human_duration, table

NOW = datetime.datetime(2025, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    "seconds, shown",
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (59, "59s"),
        (119, "119s"),
        (120, "2m"),
        (330, "5m30s"),
        (600, "10m"),
        (179 * 60, "179m"),
        (3 * 3600, "3h"),
        (7 * 3600 + 30 * 60, "7h30m"),
        (8 * 3600, "8h"),
        (47 * 3600, "47h"),
        (48 * 3600, "2d"),
        (7 * 86400 + 5 * 3600, "7d5h"),
        (8 * 86400, "8d"),
        (729 * 86400, "729d"),
        (730 * 86400, "2y"),
        (800 * 86400, "2y70d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_duration_matches_apimachinery(seconds: int, shown: str) -> None:
    assert human_duration(seconds) == shown


def test_age_of_a_missing_or_broken_timestamp_is_unknown() -> None:
    assert age(None, NOW) == "<unknown>"
    assert age("yesterday", NOW) == "<unknown>"
    assert age("2025-01-01T11:55:00Z", NOW) == "5m"


def _health() -> dict:  # type: ignore[type-arg]
    return foo_health(
        {
            "apiVersion": "samplecontroller.k8s.io/v1",
            "kind": "Foo",
            "metadata": {
                "name": "web",
                "namespace": "shop",
                "uid": "u",
                "generation": 1,
                "creationTimestamp": "2025-01-01T10:00:00Z",
            },
            "spec": {"deployment": {"name": "web-nginx", "image": "nginx:1.27"}, "replicas": 2},
            "status": {
                "observedGeneration": 1,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "ReplicasAvailable",
                        "message": "",
                        "lastTransitionTime": "2025-01-01T11:59:30Z",
                    }
                ],
            },
        },
        None,
        [],
        [],
        resource_version="7",
    )


def test_table_cells_follow_the_column_definitions() -> None:
    rendered = table([_health()], resource_version="7", now=NOW)
    assert rendered["kind"] == "Table" and rendered["apiVersion"] == "meta.k8s.io/v1"
    assert rendered["metadata"] == {"resourceVersion": "7"}
    cells = dict(zip([c["name"] for c in COLUMNS], rendered["rows"][0]["cells"], strict=True))
    assert cells == {
        "Name": "web",
        "Health": "Unavailable",
        "Ready": "0/2",
        "Up-to-date": 0,
        "Available": 0,
        "Rollout": "Missing",
        "Last Sync": "30s",
        "Last Error": "<none>",
        "Age": "120m",
        "Deployment": "web-nginx",
        "Image": "nginx:1.27",
        "Restarts": 0,
        "Synced": "True",
        "Message": 'Deployment "web-nginx" does not exist',
    }


def test_wide_columns_are_priority_one_and_the_name_column_is_formatted_as_a_name() -> None:
    assert COLUMNS[0]["format"] == "name"
    assert [c["name"] for c in COLUMNS if c["priority"] == 1] == [
        "Deployment",
        "Image",
        "Restarts",
        "Synced",
        "Message",
    ]


@pytest.mark.parametrize(
    "include, expected_object",
    [
        ("None", None),
        ("Metadata", {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1"}),
        ("Object", {"kind": "FooHealth", "apiVersion": "insights.samplecontroller.k8s.io/v1alpha1"}),
    ],
)
def test_row_objects_follow_include_object(include: str, expected_object: dict | None) -> None:  # type: ignore[type-arg]
    row = table([_health()], include_object=include, now=NOW)["rows"][0]  # type: ignore[arg-type]
    if expected_object is None:
        assert "object" not in row
    else:
        assert {k: row["object"][k] for k in expected_object} == expected_object
        assert row["object"]["metadata"]["name"] == "web"


def test_a_table_without_headers_has_no_column_definitions() -> None:
    assert table([_health()], headers=False, now=NOW)["columnDefinitions"] == []
