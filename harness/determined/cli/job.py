"""`det job list | update` (`det j`): the scheduler's queue, and a job's
priority, weight or slot cap changed while it waits or runs."""

import argparse
from typing import Any

from determined.cli import _args
from determined.cli._as_of import add_as_of_arguments, as_of, print_as_of
from determined.cli._client import Gateway, connect
from determined.cli._output import format_time, message_dict, print_json, print_table

HEADERS = [
    "#",
    "ID",
    "Type",
    "Job Name",
    "Priority",
    "Submitted",
    "Slots (acquired/needed)",
    "State",
    "User",
    "Waiting because",
]


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    job = commands.add_parser("job", aliases=["j"], help="the scheduler's queue of jobs")
    verbs = job.add_subparsers(dest="verb", metavar="<verb>")
    job.set_defaults(run=list_jobs, json=False, resource_pool="", at=None, at_seq=None)
    listing = verbs.add_parser(
        "list", aliases=["ls"], help="the queue of each pool, in the order it is served"
    )
    listing.add_argument("-p", "--resource-pool", default="", metavar="POOL", help="only this pool")
    listing.add_argument("--json", action="store_true")
    add_as_of_arguments(listing)
    listing.set_defaults(run=list_jobs)

    update = verbs.add_parser("update", help="change a job's priority, weight or max slots")
    update.add_argument(
        "job_id", type=_args.job_id, metavar="JOB_ID", help="experiment/7 (or 7), or task/<task id>"
    )
    add_resource_options(update)
    update.set_defaults(run=update_job)


def add_resource_options(parser: argparse.ArgumentParser) -> None:
    """--priority | --weight | --max-slots: one of them, checked as typed."""
    change = parser.add_mutually_exclusive_group(required=True)
    change.add_argument("--priority", type=_args.priority, help="1 to 99; lower runs first (priority pools)")
    change.add_argument("--weight", type=_args.weight, help="share of the slots (fair-share pools), above 0")
    change.add_argument(
        "--max-slots",
        type=_args.max_slots,
        metavar="N",
        help="the most slots the job may hold; none for no cap",
    )


def list_jobs(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    gateway = connect(args)
    response = gateway.call(
        gateway.stub.GetJobs, api_pb2.GetJobsRequest(resource_pool=args.resource_pool, as_of=as_of(args))
    )
    if args.json:
        print_json(message_dict(response))
        return 0
    print_as_of(response)
    pools = sorted({job.resource_pool for job in response.jobs})
    if not pools:
        print("No jobs are queued or running")
        return 0
    for index, pool in enumerate(pools):
        scheduler = response.schedulers.get(pool, "fair_share")
        if len(pools) > 1 or args.resource_pool:
            print(("\n" if index else "") + f"Resource pool {pool} ({scheduler.replace('_', ' ')}):")
        print_table(
            job_headers(scheduler),
            [job_row(job, scheduler) for job in response.jobs if job.resource_pool == pool],
        )
    return 0


def job_headers(scheduler: str) -> list[str]:
    """Priority in a priority pool, Weight in a fair-share one."""
    return [("Priority" if scheduler == "priority" else "Weight") if h == "Priority" else h for h in HEADERS]


def job_row(job: Any, scheduler: str) -> list[Any]:
    rank = job.priority if scheduler == "priority" else f"{job.weight:g}"
    return [
        job.position,
        job.job_id,
        job.type,
        job.name,
        rank,
        format_time(job.submitted_at_ns),
        f"{job.slots_acquired}/{job.slots_needed}",
        job.state,
        job.owner,
        job.waiting_reason,
    ]


def update_job(args: argparse.Namespace) -> int:
    print(
        send_update(
            connect(args), args.job_id, priority=args.priority, weight=args.weight, max_slots=args.max_slots
        )
    )
    return 0


def send_update(
    gateway: Gateway,
    job_id: str,
    *,
    priority: int | None = None,
    weight: float | None = None,
    max_slots: int | None = None,
) -> str:
    """Sends UpdateJob; what to tell the user (what changed, or why nothing did)."""
    from determined.proto import api_pb2

    request = api_pb2.UpdateJobRequest(job_id=job_id)
    if priority is not None:
        request.priority = priority
    if weight is not None:
        request.weight = weight
    if max_slots is not None:
        request.max_slots = max_slots
    response = gateway.call(gateway.stub.UpdateJob, request)
    return (
        response.unchanged_reason or f"Updated job {job_id}: {describe_change(priority, weight, max_slots)}"
    )


def describe_change(priority: int | None, weight: float | None, max_slots: int | None) -> str:
    if priority is not None:
        return f"priority {priority}"
    if weight is not None:
        return f"weight {weight:g}"
    return f"max slots {max_slots or 'none (no cap)'}"
