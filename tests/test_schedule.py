"""The op scheduler: dependencies, shared resources, background chunks, critical path."""

from hypothesis import given, settings
from hypothesis import strategies as st

from components.sim.engine import Engine
from components.sim.flows import Flow
from components.sim.schedule import Scheduler, Stage, critical_path


def fixed(ticks):
    return lambda now: ticks


def make():
    engine = Engine()
    sched = Scheduler(engine)
    for name in ("gpu", "mem"):
        sched.resource(name)
    return engine, sched


def test_dependencies_and_resource_serialise():
    engine, sched = make()
    a = sched.op("a", "bottom_mlp", 0, "gpu", fixed(100))
    b = sched.op("b", "embedding", 0, "mem", fixed(300))
    c = sched.op("c", "top_mlp", 0, "gpu", fixed(50), deps=[a, b])
    d = sched.op("d", "top_mlp", 0, "gpu", fixed(10))
    engine.run()
    assert (a.record.start, a.record.end) == (0, 100)
    assert (b.record.start, b.record.end) == (0, 300)
    assert (d.record.start, d.record.end) == (100, 110)  # gpu free before c is ready
    assert (c.record.start, c.record.end) == (300, 350)
    path = critical_path(sched.records, c.record.uid, 0)
    assert path == {"top_mlp": 50, "embedding": 300}


def test_background_waits_behind_foreground_and_its_stall_is_charged():
    engine, sched = make()
    busy = sched.op("busy", "embedding", 0, "mem", fixed(50))
    log = sched.op("log", "checkpoint", 0, "mem", fixed(400), background=True)
    look = sched.op("lookup", "embedding", 0, "mem", fixed(200))
    gpu = sched.op("top", "top_mlp", 0, "gpu", fixed(450))
    update = sched.op("update", "embedding", 0, "mem", fixed(100), deps=[gpu, log])
    engine.run()
    # the lookup, queued after the log, still goes first: foreground has priority
    assert (busy.record.end, look.record.start, look.record.end) == (50, 50, 250)
    assert (log.record.start, log.record.end) == (250, 650)
    assert update.record.start == 650 and update.record.end == 750
    path = critical_path(sched.records, update.record.uid, 0)
    # the update waited 200 ticks past its foreground dependency (the GPU) for the log
    assert path == {"embedding": 100, "checkpoint": 200, "top_mlp": 450}
    assert sum(path.values()) == update.record.end


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(1, 500), st.sampled_from(["gpu", "mem"]), st.booleans(), st.integers(0, 3)
        ),
        min_size=1,
        max_size=12,
    )
)
def test_critical_path_always_sums_to_window(ops):
    engine, sched = make()
    handles = []
    for index, (ticks, unit, background, ndeps) in enumerate(ops):
        deps = handles[max(0, index - ndeps) : index]
        handles.append(
            sched.op(
                f"op{index}",
                "embedding" if unit == "mem" else "top_mlp",
                0,
                unit,
                fixed(ticks),
                deps=deps,
                background=background,
            )
        )
    engine.run()
    last = max(handles, key=lambda h: (h.record.end, h.record.uid))
    for window_start in (0, last.record.end // 2):
        path = critical_path(sched.records, last.record.uid, window_start)
        assert sum(path.values()) == last.record.end - window_start
        assert all(v > 0 for v in path.values())


def log_beside_lookup():
    """A background log (600 ticks of media) and a lookup (300) sharing the media."""
    engine = Engine()
    sched = Scheduler(engine)
    log = sched.op(
        "log", "checkpoint", 0, "dma", lambda now: Stage([Flow({"media": 600})]), background=True
    )
    look = sched.op("lookup", "embedding", 0, "nmp", lambda now: Stage([Flow({"media": 300})]))
    return engine, sched, log, look


def test_contention_on_the_critical_path_is_charged_to_whom_it_came_from():
    engine, sched, log, look = log_beside_lookup()
    top = sched.op("top", "top_mlp", 0, "gpu", fixed(100), deps=[look])
    engine.run()
    # sharing the media evenly, the lookup takes 600 instead of 300, the log 900
    assert (look.record.end, log.record.end) == (600, 900)
    assert look.record.wait == 300 and look.record.waited_on == {log.record.uid: 300}
    blame = {}
    path = critical_path(sched.records, top.record.uid, 0, blame)
    assert path == {"top_mlp": 100, "embedding": 300, "contention": 300}
    assert blame == {"checkpoint": 300}


def test_a_stall_on_a_slowed_background_op_is_partly_contention():
    engine, sched, log, look = log_beside_lookup()
    update = sched.op("update", "embedding", 0, "nmp", fixed(100), deps=[look, log])
    engine.run()
    # shared evenly until the lookup ends at 600, the log then runs alone to 900: it
    # lost 300 of its 900 ticks; the update waited 300 past the lookup, a third of it
    # (the log's own share of slowed time) is the lookup's contention
    assert (look.record.end, log.record.end, update.record.end) == (600, 900, 1000)
    assert log.record.wait == 300
    blame = {}
    path = critical_path(sched.records, update.record.uid, 0, blame)
    assert path == {"embedding": 100 + 300, "contention": 300 + 100, "checkpoint": 200}
    assert blame == {"checkpoint": 300, "embedding": 100}
