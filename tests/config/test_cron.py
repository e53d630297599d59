"""A schedule's due times on the company's clock (engine.config.cron, over cronsim): daylight
saving included, strictly after the instant asked, and the missed ones counted, not walked."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from engine.config.cron import due_between, next_fires, previous_fire

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")


def test_a_weekday_schedule_skips_the_weekend():
    friday_noon = datetime(2025, 6, 6, 12, tzinfo=UTC)
    assert [d.weekday() for d in next_fires("0 9 * * 1-5", UTC, friday_noon, 3)] == [0, 1, 2]


def test_fires_follow_the_company_clock_not_utc():
    fires = next_fires("0 9 * * *", BERLIN, datetime(2025, 1, 10, tzinfo=UTC), 1)
    assert fires == [datetime(2025, 1, 10, 8, tzinfo=UTC)]  # 09:00 CET is 08:00 UTC


def test_a_time_the_spring_change_skips_fires_once_at_the_change_and_a_repeated_hour_once():
    # 2025-03-30 Berlin skips 02:00-03:00: a 02:30 job runs once, at 03:00 CEST (01:00 UTC), as Debian cron does
    spring = next_fires("30 2 * * *", BERLIN, datetime(2025, 3, 29, 12, tzinfo=UTC), 2)
    assert spring == [datetime(2025, 3, 30, 1, tzinfo=UTC), datetime(2025, 3, 31, 0, 30, tzinfo=UTC)]
    # 2025-10-26 repeats 02:00-03:00: once, not twice
    autumn = next_fires("30 2 * * *", BERLIN, datetime(2025, 10, 25, 12, tzinfo=UTC), 2)
    assert autumn == [datetime(2025, 10, 26, 0, 30, tzinfo=UTC), datetime(2025, 10, 27, 1, 30, tzinfo=UTC)]


def test_after_is_strict_so_a_fired_due_time_is_not_due_again():
    due = datetime(2025, 1, 1, 9, tzinfo=UTC)
    assert next_fires("0 9 * * *", UTC, due, 1) == [due + timedelta(days=1)]
    assert previous_fire("0 9 * * *", UTC, due) == due


def test_downtime_yields_the_latest_due_time_and_how_many_there_were():
    after = datetime(2025, 1, 1, 9, tzinfo=UTC)
    latest, count = due_between("0 9 * * *", UTC, after, after + timedelta(days=3, hours=2), cap=100)
    assert (latest, count) == (datetime(2025, 1, 4, 9, tzinfo=UTC), 3)
    assert due_between("0 9 * * *", UTC, after, after + timedelta(hours=23), cap=100) == (None, 0)


def test_a_long_downtime_of_a_seconds_schedule_is_counted_up_to_the_cap_with_the_true_latest():
    after = datetime(2025, 1, 1, tzinfo=UTC)
    latest, count = due_between("* * * * * *", UTC, after, after + timedelta(days=2), cap=500)
    assert latest == after + timedelta(days=2) and count == 500


def test_a_seconds_schedule_yields_every_second_strictly_after():
    after = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert next_fires("* * * * * *", UTC, after, 2) == [after + timedelta(seconds=1), after + timedelta(seconds=2)]
    assert next_fires("* * * * * *", UTC, after + timedelta(microseconds=500), 1) == [after + timedelta(seconds=1)]
    assert due_between("* * * * * *", UTC, after, after + timedelta(seconds=5), cap=100) == (after + timedelta(seconds=5), 5)
    assert previous_fire("* * * * * *", UTC, after + timedelta(microseconds=500)) == after
