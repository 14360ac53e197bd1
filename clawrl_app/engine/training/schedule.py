"""When the trainer may run: a cron window (apscheduler syntax) and an idle-time rule."""

from __future__ import annotations

from datetime import datetime, timedelta


def cron_allows(expression: str, now: datetime) -> bool:
    """True when `now`'s minute matches the crontab `expression` (`always` matches all)."""
    if expression.strip().lower() == "always":
        return True
    from apscheduler.triggers.cron import CronTrigger

    trigger = CronTrigger.from_crontab(expression, timezone=now.tzinfo)
    minute = now.replace(second=0, microsecond=0)
    fire = trigger.get_next_fire_time(None, minute - timedelta(microseconds=1))
    return fire is not None and fire.replace(second=0, microsecond=0) == minute


def check_cron(expression: str) -> str | None:
    """None when valid, else an error message naming the problem."""
    if expression.strip().lower() == "always":
        return None
    try:
        from apscheduler.triggers.cron import CronTrigger

        CronTrigger.from_crontab(expression)
    except ValueError as exc:
        return f"train.schedule {expression!r} is not a crontab expression ({exc})"
    return None


def gate(
    expression: str, idle_s: float, seconds_since_user: float, now: datetime
) -> tuple[bool, str]:
    """(allowed, reason) for the trainer right now."""
    if not cron_allows(expression, now):
        return False, f"outside the training schedule {expression!r}"
    if idle_s > 0 and seconds_since_user < idle_s:
        return False, f"waiting for {idle_s:.0f} s without user requests"
    return True, "training allowed"
