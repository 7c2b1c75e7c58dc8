"""Which transport NCCL will use between nodes, what the node's links should give, and the all-reduce judged against
them: pure functions of what each rank saw (probes.probe_links), no sockets, no torch.

NCCL picks, between nodes: the transport NCCL_NET names; else InfiniBand/RoCE (its IB transport) where the
container sees HCAs (/dev/infiniband: enroot's 99-mellanox hook mounts them only with MELLANOX_VISIBLE_DEVICES set,
jobs/lib/steps.sh) and NCCL_IB_DISABLE is not 1; else TCP sockets (NCCL_SOCKET_IFNAME). Within one node it uses
NVLink or PCIe (P2P) and shared memory, no network.
"""

from __future__ import annotations

from dataclasses import dataclass

from train.doctor.findings import OK, WARN, Finding, by_host
from train.doctor.records import Hca, Links, RankRecord

# The all-reduce's bus bandwidth below this share of the links' is judged slow: NCCL's all-reduce reaches 80-95 %
# of a link's line rate on large messages (nccl-tests' busbw on InfiniBand); a quarter leaves room for small
# messages and a busy fabric, and still catches TCP where IB was meant (a tenth or less).
SLOW_SHARE = 0.25


@dataclass(frozen=True)
class Transport:
    """NCCL's transport between the job's nodes, why, and the slowest node's links in GB/s (None: unknown)."""

    name: str  # IB, Socket, a forced NCCL_NET, or "none" (one node)
    why: str
    link_gbs: float | None


def selected_hcas(hcas: list[Hca], spec: str | None) -> list[Hca]:
    """The HCAs NCCL_IB_HCA lets NCCL use: a list of name prefixes ("mlx5_0,mlx5_1"; "=" exact names; "^" those
    excluded), each name optionally with ":port"; all when unset."""
    if not spec:
        return hcas
    exclude, exact = spec.startswith("^"), spec.lstrip("^").startswith("=")
    wanted = [w.strip() for w in spec.lstrip("^").lstrip("=").split(",") if w.strip()]

    def matches(name: str) -> bool:
        device, port = name.split(":", 1)
        for w in wanted:
            want_device, _, want_port = w.partition(":")
            if (device == want_device if exact else device.startswith(want_device)) and want_port in ("", port):
                return True
        return False

    return [h for h in hcas if matches(h.name) != exclude]


def node_link(links: Links) -> tuple[str, str, float | None]:
    """(transport, why, GB/s) of one node from its rank's probe_links."""
    hcas = selected_hcas(links.hcas, links.ib_hca)
    iface, mbps = links.iface, links.iface_mbps
    socket_gbs = mbps / 8000 if mbps and mbps > 0 else None
    socket_why = f"TCP over {iface or '?'}" + (f" at {mbps / 1000:g} Gb/s" if socket_gbs else "")
    forced = (links.nccl_net or "").strip()
    if forced:
        ib = forced.upper() == "IB"
        return forced, f"NCCL_NET={forced}", (sum(h.gbps for h in hcas) / 8 or None) if ib else socket_gbs
    if links.ib_disable:
        return "Socket", f"NCCL_IB_DISABLE=1: {socket_why}", socket_gbs
    if hcas and links.devices:
        names = ", ".join(f"{h.name} {h.gbps:g} Gb/s" for h in hcas)
        return "IB", f"InfiniBand/RoCE: {names}", sum(h.gbps for h in hcas) / 8
    if hcas:
        return "Socket", (f"the node has HCAs ({', '.join(h.name for h in hcas)}) but /dev/infiniband is not in the "
                          f"container (enroot's 99-mellanox hook mounts it where MELLANOX_VISIBLE_DEVICES is set): "
                          f"{socket_why}"), socket_gbs
    return "Socket", socket_why, socket_gbs


def nccl_transport(records: list[RankRecord]) -> Transport:
    """The transport between the job's nodes (the one node's ranks need none) and its slowest node's links."""
    hosts = by_host(records)
    if len(hosts) < 2:
        return Transport("none", "one node: NVLink or PCIe and shared memory, no network", None)
    per_node = {host: node_link(rs[0].links) for host, rs in sorted(hosts.items())}
    names = {name for name, _, _ in per_node.values()}
    speeds = [gbs for _, _, gbs in per_node.values()]
    slowest = min(speeds) if all(s is not None for s in speeds) else None
    if len(names) == 1:
        (name,) = names
        whys = {why for _, why, _ in per_node.values()}
        return Transport(name, "; ".join(sorted(whys)), slowest)
    said = "; ".join(f"{host}: {why}" for host, (_, why, _) in per_node.items())
    return Transport("Socket", f"the nodes differ, so NCCL falls back to what all share: {said}", slowest)


def check_transport(records: list[RankRecord]) -> list[Finding]:
    """The transport NCCL will use between nodes: a warning where a node has HCAs that NCCL will not use."""
    if not any(r.backend == "nccl" for r in records):
        return [Finding(OK, "transport", f"{records[0].backend} over TCP between ranks (no NCCL)")]
    transport = nccl_transport(records)
    link = f"; links {transport.link_gbs:.1f} GB/s a node" if transport.link_gbs else ""
    line = f"NCCL between nodes: {transport.name} ({transport.why}{link})"
    wasted = transport.name == "Socket" and any(selected_hcas(r.links.hcas, r.links.ib_hca) for r in records)
    if wasted:
        return [Finding(WARN, "transport", line + ": ten times slower or worse than the HCAs; see docs/cluster.md "
                        "(InfiniBand)")]
    return [Finding(OK, "transport", line)]


def judge_bandwidth(busbw_gbs: float | None, transport: Transport) -> Finding | None:
    """The largest all-reduce's bus bandwidth against the links between nodes (None where there is nothing to judge:
    one node, or links of unknown speed)."""
    if busbw_gbs is None or transport.link_gbs is None or transport.name == "none":
        return None
    share = busbw_gbs / transport.link_gbs
    said = (f"all-reduce bus bandwidth {busbw_gbs:.2f} GB/s is {share:.0%} of the {transport.link_gbs:.1f} GB/s the "
            f"links between nodes give ({transport.name})")
    if share < SLOW_SHARE:
        return Finding(WARN, "bandwidth", said + f", below {SLOW_SHARE:.0%}: check NCCL's transport "
                       "(NCCL_DEBUG=INFO names it), NCCL_IB_HCA and the fabric")
    return Finding(OK, "bandwidth", said)
