"""The engine's named statements, loaded once."""

from __future__ import annotations

from paymanager.db.sql import load_queries

Q = load_queries("paymanager.jobs", "jobs.sql")

# NOTIFY channels: a queue name on `available` wakes its workers; a job id on `cancel` tells the
# worker running it; lifecycle events are JSON on `events`; a queue name on `queue` says its limits
# changed.
CHANNEL_AVAILABLE = "pm_job_available"
CHANNEL_CANCEL = "pm_job_cancel"
CHANNEL_EVENTS = "pm_job_events"
CHANNEL_QUEUE = "pm_job_queue"
