"""The viewer's quotas (Slurm's sshare, Run:ai's quota view): the selector's numbers, the
queue page's "Your quotas" card and GET /api/v1/quotas/, and who sees whose."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import DeviceTypeQuota, LabGroup, User
from accounts.services import user_create
from cluster.models import DeviceType
from dashboard.selectors.quotas import QuotaStatus, TypeQuotaStatus, limit_mark, quota_status
from jobs.choices import JobState
from tests.dashboard.helpers import device, hold, logged_in
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def _cap(account: User | LabGroup, type_name: str, max_gpus: int) -> DeviceTypeQuota:
    owner = {"user": account} if isinstance(account, User) else {"group": account}
    return DeviceTypeQuota.objects.create(
        device_type=DeviceType.objects.get(name=type_name), max_gpus=max_gpus, **owner
    )


@pytest.fixture
def jobs(owner, teammate, outsider, vision, nlp, small_cluster):
    """alice (limits 4 GPUs, 2 running, 2 pending; v100 cap 1) in vision (6 GPUs, 2
    guaranteed, 3 running; a100 cap 3), speech (4 guaranteed) and empty; bob in vision;
    carol in nlp. Jobs holding GPUs, pending, lost and ended, of each of them."""
    speech = LabGroup.objects.create(name="speech", guaranteed_gpus=4)
    empty = LabGroup.objects.create(name="empty")
    owner.lab_groups.add(speech, empty)
    owner.max_gpus, owner.max_running_jobs, owner.max_pending_jobs = 4, 2, 2
    owner.save()
    vision.max_gpus, vision.guaranteed_gpus, vision.max_running_jobs = 6, 2, 3
    vision.save()
    _cap(owner, "v100", 1)
    _cap(vision, "a100", 3)
    _cap(nlp, "v100", 2)  # carol's group: never in alice's rows
    a0 = [device(small_cluster, "a0", i) for i in range(4)]
    ended = timezone.now() - timedelta(minutes=5)
    # alice: 2 a100 running in vision, 1 v100 starting in speech (a job in another group).
    hold(owner, a0[:2], group=vision)
    hold(owner, [device(small_cluster, "v0", 0)], group=speech, state=JobState.STARTING)
    # bob: 1 a100 preempting (still holding) and 1 pending, both charged to vision.
    hold(teammate, [device(small_cluster, "a1", 0)], group=vision, state=JobState.PREEMPTING)
    JobFactory(owner=teammate, group=vision, num_gpus=4)
    # alice pending in vision and in speech; neither holds nor waits: lost, ended ones.
    JobFactory(owner=owner, group=vision, num_gpus=3)
    JobFactory(owner=owner, group=speech, num_gpus=1)
    JobFactory(owner=owner, group=vision, state=JobState.LOST, num_gpus=2)
    hold(owner, a0[2:], group=vision, end=ended, state=JobState.SUCCEEDED)
    JobFactory(owner=owner, group=vision, state=JobState.CANCELLED)
    # carol: running and pending in nlp.
    hold(outsider, [device(small_cluster, "v0", 1)], group=nlp)
    JobFactory(owner=outsider, group=nlp)
    return {"speech": speech, "empty": empty}


ALICE = QuotaStatus(
    kind="user",
    name="alice",
    weight=1.0,
    gpus_in_use=3,  # 2 a100 in vision + 1 v100 in speech
    max_gpus=4,
    guaranteed_gpus=None,
    borrowed_gpus=None,
    running_jobs=2,
    max_running_jobs=2,
    pending_jobs=2,  # one in vision, one in speech
    max_pending_jobs=2,
    device_types=(TypeQuotaStatus("v100", 1, 1),),
)
EMPTY = QuotaStatus(
    kind="group",
    name="empty",
    weight=1.0,
    gpus_in_use=0,
    max_gpus=None,
    guaranteed_gpus=None,
    borrowed_gpus=None,
    running_jobs=0,
    max_running_jobs=None,
    pending_jobs=0,
    max_pending_jobs=None,
    device_types=(),
)
SPEECH = QuotaStatus(
    kind="group",
    name="speech",
    weight=1.0,
    gpus_in_use=1,
    max_gpus=None,
    guaranteed_gpus=4,
    borrowed_gpus=0,  # within its guarantee: nothing borrowed, not -3
    running_jobs=1,
    max_running_jobs=None,
    pending_jobs=1,
    max_pending_jobs=None,
    device_types=(),
)
VISION = QuotaStatus(
    kind="group",
    name="vision",
    weight=2.0,
    gpus_in_use=3,  # alice's 2 and bob's preempting 1
    max_gpus=6,
    guaranteed_gpus=2,
    borrowed_gpus=1,
    running_jobs=2,
    max_running_jobs=3,
    pending_jobs=2,  # alice's and bob's
    max_pending_jobs=None,
    device_types=(TypeQuotaStatus("a100", 3, 3),),
)


# ------------------------------------------------------------------------------ selector


def test_it_counts_holding_pending_and_per_type_usage_per_account(owner, jobs) -> None:
    assert quota_status(user=owner) == [ALICE, EMPTY, SPEECH, VISION]


def test_it_names_the_limits_reached(owner, jobs) -> None:
    alice, empty, speech, vision = quota_status(user=owner)
    assert alice.at_limit == ["max_running_jobs", "max_pending_jobs", "max_gpus[v100]"]
    assert (alice.gpus_mark, alice.running_mark) == ("", "at limit")
    assert vision.at_limit == ["max_gpus[a100]"]
    assert empty.at_limit == [] and speech.at_limit == []


def test_a_group_member_sees_the_group_with_everyone_s_jobs_but_only_their_own_row(
    teammate, jobs
) -> None:
    bob, vision = quota_status(user=teammate)
    assert (bob.kind, bob.name, bob.gpus_in_use, bob.running_jobs, bob.pending_jobs) == (
        "user", "bob", 1, 1, 1,
    )  # fmt: skip
    assert vision == VISION


@pytest.mark.parametrize(
    ("used", "limit", "mark"),
    [(0, None, ""), (5, None, ""), (1, 2, ""), (2, 2, "at limit"), (3, 2, "over limit"),
     (0, 0, "at limit")],
)  # fmt: skip
def test_a_count_is_marked_at_or_over_its_limit(used: int, limit: int | None, mark: str) -> None:
    assert limit_mark(used, limit) == mark


def test_it_reads_two_queries_however_many_jobs_groups_and_caps(
    owner, small_cluster, django_assert_max_num_queries
) -> None:
    types = list(DeviceType.objects.all())
    for n in range(6):
        group = LabGroup.objects.create(name=f"g{n}", guaranteed_gpus=1)
        owner.lab_groups.add(group)
        for device_type in types:
            _cap(group, device_type.name, 4)
        for state in (JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED):
            JobFactory.create_batch(3, owner=owner, group=group, state=state)
    hold(owner, small_cluster[:3], group=group)
    for device_type in types:
        _cap(owner, device_type.name, 2)

    with django_assert_max_num_queries(2):
        accounts = quota_status(user=owner)

    assert [account.name for account in accounts] == [
        "alice", "g0", "g1", "g2", "g3", "g4", "g5", "vision",
    ]  # fmt: skip
    assert all(len(account.device_types) == 2 for account in accounts[:-1])
    assert accounts[0].running_jobs == 6 * 3 + 1
    assert accounts[6].gpus_in_use == 3 + 3  # three 1-GPU running jobs and the 3-GPU one
    assert accounts[6].device_types[0] == TypeQuotaStatus("a100", 3, 4)


def test_a_user_without_groups_or_jobs_has_one_row_of_zeros(lab_admin) -> None:
    assert quota_status(user=lab_admin) == [
        QuotaStatus("user", "root", 1.0, 0, None, None, None, 0, None, 0, None, ())
    ]


# ------------------------------------------------------------------------------ the page


def _quota_card(html: str) -> str:
    match = re.search(r'<section[^>]*data-refresh-id="queue-quotas".*?</section>', html, re.S)
    assert match, "no quota card"
    return match.group(0)


def _text(html: str) -> str:
    """What a reader of `html` reads: the tags dropped, the spaces collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def test_the_queue_page_shows_the_viewer_s_rows_with_limits_and_markers(owner, jobs) -> None:
    page = logged_in(owner).get("/queue/")
    card = _quota_card(page.content.decode())

    assert [(a.kind, a.name) for a in page.context["quotas"]] == [
        ("user", "alice"), ("group", "empty"), ("group", "speech"), ("group", "vision"),
    ]  # fmt: skip
    assert "Your quotas" in card
    rows = re.findall(r"<tr[^>]*>.*?</tr>", card, re.S)[1:]
    text = [_text(row) for row in rows]
    assert text == [
        "alice (user) Per type: v100 1 / 1 at limit 3 / 4 — — 2 / 2 at limit 2 / 2 at limit",
        "empty (group) 0 / — — — 0 / — 0 / —",
        "speech (group) 1 / — 4 0 1 / — 1 / —",
        "vision (group) Per type: a100 3 / 3 at limit 3 / 6 2 1 2 / 3 2 / —",
    ]
    assert rows[0].startswith('<tr class="at-limit">') and rows[1].startswith("<tr>")
    assert card.count('<span class="badge-limit">at limit</span>') == 4


def test_a_limit_lowered_below_the_usage_is_marked_over(owner, jobs) -> None:
    owner.max_gpus = 1
    owner.save()
    card = _quota_card(logged_in(owner).get("/queue/").content.decode())
    assert '3 / 1 <span class="badge-limit">over limit</span>' in card


def test_the_page_never_shows_another_user_s_numbers(owner, outsider, jobs) -> None:
    card = _quota_card(logged_in(owner).get("/queue/").content.decode())
    assert "carol" not in card and "nlp" not in card

    theirs = _text(_quota_card(logged_in(outsider).get("/queue/").content.decode()))
    assert "carol (user) 1 / —" in theirs and "nlp (group) Per type: v100 1 / 2" in theirs
    for name in ("alice", "vision", "speech", "empty"):
        assert name not in theirs


def test_an_admin_sees_only_their_own_account_too(lab_admin, jobs) -> None:
    page = logged_in(lab_admin).get("/queue/")
    card = _text(_quota_card(page.content.decode()))
    assert [a.name for a in page.context["quotas"]] == ["root"]
    assert "root (user)" in card
    for name in ("alice", "bob", "carol", "vision", "nlp", "speech"):
        assert name not in card


# ------------------------------------------------------------------------------ the API


def _as_json(status: QuotaStatus) -> dict:
    return {
        "kind": status.kind,
        "name": status.name,
        "weight": status.weight,
        "gpus_in_use": status.gpus_in_use,
        "max_gpus": status.max_gpus,
        "guaranteed_gpus": status.guaranteed_gpus,
        "borrowed_gpus": status.borrowed_gpus,
        "running_jobs": status.running_jobs,
        "max_running_jobs": status.max_running_jobs,
        "pending_jobs": status.pending_jobs,
        "max_pending_jobs": status.max_pending_jobs,
        "device_types": [
            {
                "device_type": row.device_type,
                "gpus_in_use": row.gpus_in_use,
                "max_gpus": row.max_gpus,
                "at_limit": row.at_limit,
            }
            for row in status.device_types
        ],
        "at_limit": status.at_limit,
    }


def test_the_api_gives_the_same_numbers(owner, jobs, api_as) -> None:
    response = api_as(owner).get("/api/v1/quotas/")

    assert response.status_code == 200
    assert response.json() == {"accounts": [_as_json(a) for a in (ALICE, EMPTY, SPEECH, VISION)]}
    # Spelled out once, so the field names are pinned too, not only derived from the above.
    assert response.json()["accounts"][3]["device_types"] == [
        {"device_type": "a100", "gpus_in_use": 3, "max_gpus": 3, "at_limit": True}
    ]
    assert response.json()["accounts"][0]["at_limit"] == [
        "max_running_jobs", "max_pending_jobs", "max_gpus[v100]",
    ]  # fmt: skip


def test_the_api_answers_each_caller_with_their_own_accounts_only(
    owner, outsider, lab_admin, jobs, api_as
) -> None:
    def names(user) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
        accounts = api_as(user).get("/api/v1/quotas/").json()["accounts"]
        return [(account["kind"], account["name"]) for account in accounts]

    assert names(outsider) == [("user", "carol"), ("group", "nlp")]
    assert ("user", "carol") not in names(owner) and ("group", "nlp") not in names(owner)
    assert names(lab_admin) == [("user", "root")]
    carol_nlp = api_as(outsider).get("/api/v1/quotas/").json()["accounts"][1]
    assert (carol_nlp["gpus_in_use"], carol_nlp["pending_jobs"]) == (1, 1)
    assert carol_nlp["device_types"][0]["gpus_in_use"] == 1


def test_the_api_takes_a_session_too(owner, jobs) -> None:
    response = logged_in(owner).get("/api/v1/quotas")  # and without the slash
    assert response.status_code == 200
    assert response.json()["accounts"][0]["name"] == "alice"


def test_the_api_refuses_anonymous_callers(jobs) -> None:
    assert APIClient().get("/api/v1/quotas/").status_code == 401
    assert Client().get("/api/v1/quotas/").status_code in (401, 403)


def test_an_unknown_parameter_is_refused_not_ignored(owner, jobs, api_as) -> None:
    # `?user=carol` must not read as "carol's quotas" or quietly answer with alice's.
    response = api_as(owner).get("/api/v1/quotas/?user=carol")
    assert response.status_code == 400
    assert response.json() == {"user": ["Unknown query parameter. This endpoint takes none."]}


def test_the_schema_documents_the_endpoint_and_the_answer_matches_it(owner, jobs, api_as) -> None:
    import jsonschema

    from tests.dashboard.test_assets_and_schema import _json_schema

    client = api_as(owner)
    schema = client.get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/v1/quotas/"]["get"]
    assert operation["summary"] and {"200", "400", "401"} <= operation["responses"].keys()
    body = _json_schema(
        operation["responses"]["200"]["content"]["application/json"]["schema"], strict=True
    )
    validator = jsonschema.Draft7Validator(
        {**body, "components": _json_schema(schema["components"], strict=True)}
    )
    answer = client.get("/api/v1/quotas/").json()
    assert not [error.message for error in validator.iter_errors(answer)]
    account = schema["components"]["schemas"]["QuotaAccountOutput"]
    assert set(account["properties"]) == set(answer["accounts"][0])
    assert {"max_gpus", "guaranteed_gpus", "borrowed_gpus"} <= {
        name for name, field in account["properties"].items() if field.get("nullable")
    }


def test_a_new_member_sees_a_group_s_numbers_as_every_other_member_does(jobs, vision) -> None:
    dave = user_create(username="dave", password="pw-dave-1234", groups=[vision])
    assert quota_status(user=dave)[1] == VISION
