"""What a replay needs of a board, read off its op plans (pure: no m5): the generator
pools, the routes its transfers take and the sides that issue or receive traffic.

Requesters stand in for whoever issues each stream: the embedding engine and
checkpoint DMA beside the tables ("mem", "mem{m}"), the GPU's DMA/DCOH ("gpu",
"gpu{g}"), the host ("host"; on the host systems also the tables' requester).
Generators come in pools, one per (side, window, table write), sized for the most
streams a pool runs at once.
"""

from __future__ import annotations

from collections import Counter

from components.gem5.ops import LinearStream, OpPlan, TraceStream, table_devices


def pool_key(stream: TraceStream | LinearStream) -> tuple[str, int, bool]:
    """Generators are interchangeable within (side, window, writes to the tables)."""
    return (stream.side, stream.window, isinstance(stream, TraceStream) and stream.write)


def pool_sizes(plans: list[OpPlan]) -> Counter:
    """Generators each pool needs: a unit runs one op at a time, so per unit the most
    streams of the key one of its stages runs; ops without a unit overlap as in the
    built-in schedule, plus one."""
    per_unit: dict[tuple[str, tuple], int] = {}
    events = []
    for plan in plans:
        unit = plan.trace.record.resource
        for stage in plan.stages:
            counts = Counter(pool_key(stream) for stream in stage.streams)
            for key, count in counts.items():
                if unit is None:
                    events.append((plan.trace.record.start, 1, key))
                    events.append((plan.trace.record.end, -1, key))
                else:
                    per_unit[(unit, key)] = max(per_unit.get((unit, key), 0), count)
    sizes: Counter = Counter()
    for (_, key), count in per_unit.items():
        sizes[key] += count
    live, most = Counter(), Counter()
    for _, step, key in sorted(events, key=lambda e: (e[0], e[1])):
        live[key] += step
        most[key] = max(most[key], live[key])
    for key, count in most.items():
        sizes[key] += count + 1
    return sizes


def routes(plans: list[OpPlan]) -> set[tuple[str, str, str]]:
    """(issuer side, target side, message class) of every transfer."""
    return {
        stream.route
        for plan in plans
        for stage in plan.stages
        for stream in stage.streams
        if isinstance(stream, LinearStream)
    }


def sides(board, plans: list[OpPlan]) -> list[str]:
    """The sides with a requester or a transfer target (the table engines' always)."""
    used = {side for side, _, _ in table_devices(board)}
    for issuer, target, _ in routes(plans):
        used |= {issuer, target}
    return sorted(used)


def targets(plans: list[OpPlan]) -> list[tuple[str, str]]:
    """(side, message class) of every transfer target."""
    return sorted({(target, kind) for _, target, kind in routes(plans)})
