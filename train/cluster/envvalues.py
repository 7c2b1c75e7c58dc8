"""The forms of the contract's variables: one value parsed and checked, named when it is wrong.

Pure functions used by `train.cluster.distenv` (which re-exports the public ones, their documented home).
"""

from __future__ import annotations

import re

import hostlist

from train.errors import UserError

# MASTER_PORT from the job id: the whole id (not its last four digits: jobs 12345 and 22345 would
# share a port) folded into 10000..32767, below Linux's ephemeral range (32768-60999), so no
# outgoing connection of the node holds the port by chance. Two jobs get one port only when their
# ids differ by a multiple of PORT_SPAN and they share a first node at the same time; rank 0 then
# fails at once naming the port and its holder (train.cluster.procgroup).
PORT_BASE = 10000
PORT_SPAN = 22768


def parse_int(name: str, value: str, minimum: int) -> int:
    """`value` of variable `name` as an integer >= minimum; `UserError` naming both otherwise."""
    try:
        number = int(value)
    except ValueError:
        raise UserError(f"{name}={value!r} is not an integer; expected an integer >= {minimum}.") from None
    if number < minimum:
        raise UserError(f"{name}={value!r} is out of range; expected an integer >= {minimum}.")
    return number


_TASKS_ITEM = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def expand_tasks_per_node(name: str, value: str) -> list[int]:
    """SLURM's compressed tasks-per-node form, e.g. "2(x3),1" -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for item in value.split(","):
        match = _TASKS_ITEM.match(item.strip())
        if not match or int(match.group(1)) < 1 or int(match.group(2) or 1) < 1:
            raise UserError(
                f"{name}={value!r} is not a tasks-per-node list; expected a form like '4' or '2(x3),1'."
            )
        count, repeat = int(match.group(1)), int(match.group(2) or 1)
        counts.extend([count] * repeat)
    return counts


def expand_nodelist(name: str, value: str) -> list[str]:
    """A SLURM node list such as "gpu[007-008],cpu1" expanded with python-hostlist."""
    try:
        hosts = hostlist.expand_hostlist(value)
    except hostlist.BadHostlist as exc:
        raise UserError(f"{name}={value!r} is not a valid node list ({exc}); "
                        "expected e.g. 'node[01-04],gpu7'.") from None
    hosts = [h.strip() for h in hosts]  # "a, b": spaces after commas are not part of a name
    if not hosts or any(not h or any(c.isspace() for c in h) for h in hosts):
        raise UserError(f"{name}={value!r} is not a valid node list; expected e.g. 'node[01-04],gpu7'.")
    return hosts


_HOST = re.compile(r"^[A-Za-z0-9_.:%-]+$")  # a hostname, an IPv4 or an IPv6 address


def check_master_addr(name: str, value: str) -> str:
    """One host: not a host-list expression (`n[1-4]`, `a,b`), no spaces."""
    if _HOST.match(value):
        return value
    hint = ""
    if any(c in value for c in "[],") and not any(c.isspace() for c in value):
        try:
            hint = f" (its first host is {hostlist.expand_hostlist(value)[0]!r})"
        except (hostlist.BadHostlist, IndexError):
            hint = ""
        problem = "is a host-list expression"
    elif any(c.isspace() for c in value):
        problem = "contains spaces"
    else:
        problem = "is not a hostname or an IP address"
    raise UserError(f"{name}={value!r} {problem}; expected one host, e.g. MASTER_ADDR=node01 or 10.0.0.1{hint}.")


def parse_job_id(name: str, value: str) -> int:
    """A SLURM job id as a number; the array form A_T counts as A and T."""
    if not re.fullmatch(r"\d+(_\d+)?", value):
        raise UserError(f"{name}={value!r} is not a numeric job id; set MASTER_PORT explicitly.")
    parent, _, task = value.partition("_")
    return int(parent) + int(task or 0)


def port_for_job(job_id: str, name: str = "SLURM_JOB_ID") -> int:
    """The master port of a job when MASTER_PORT is unset: PORT_BASE + job id mod PORT_SPAN."""
    return PORT_BASE + parse_job_id(name, job_id) % PORT_SPAN
