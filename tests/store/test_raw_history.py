"""Store.raw_history: one GPU's raw samples as columns (the screens' 1 s charts), from chunks and from the
head's parts alike, the same samples gpu_history's raw series has."""

from __future__ import annotations

from gpufleet.collector.store.store import Store

from tests.builders import snap
from tests.builders import store_gpu as gpu

T0 = 1_765_000_000.0 // 60 * 60  # a minute's start: the first 90 s span two minutes


async def test_raw_history_columns_from_chunks_and_parts(store: Store) -> None:
    for i in range(90):
        util = None if i == 7 else i % 101
        store.submit_snapshot("h1", snap(gpu(0, util=util, mem=i << 20, temp=40 + i % 3, power=100.5 + i),
                                         gpu(1, util=1), ts=T0 + i), T0 + i)
    await store.flush()
    await store.run_maintenance(T0 + 75)  # the first minute compacted into its chunk; the rest in parts
    late = snap(gpu(0, util=99, mem=0, temp=50, power=1.0), gpu(1, util=1), ts=T0 + 30.5)
    store.submit_snapshot("h1", late, T0 + 91)  # a late sample in the compacted minute
    await store.flush()

    series = await store.raw_history("h1", gpu=0, since=T0 + 10, until=T0 + 80)
    assert [(s.host, s.index, s.uuid) for s in series] == [("h1", 0, "GPU-0000")]
    raw = series[0]
    expect = sorted([T0 + i for i in range(10, 81)] + [T0 + 30.5])
    assert raw.ts == expect
    at = {t: k for k, t in enumerate(raw.ts)}
    assert raw.util[at[T0 + 7 + 10]] == 17 and raw.util[at[T0 + 30.5]] == 99
    assert raw.mem_used[at[T0 + 70]] == 70 << 20 and raw.temp[at[T0 + 70]] == 41
    assert raw.power[at[T0 + 70]] == 170.5
    # the same samples gpu_history gives as a raw series
    hist = await store.gpu_history("h1", gpu=0, since=T0 + 10, until=T0 + 80, max_points=1000)
    assert hist[0].resolution == "raw"
    assert [(p.ts, p.util_mean, p.mem_used_mean, p.temp_max, p.power_mean) for p in hist[0].points] == \
        list(zip(raw.ts, raw.util, raw.mem_used, raw.temp, raw.power, strict=True))

    nulls = await store.raw_history("h1", gpu=0, since=T0 + 7, until=T0 + 7)
    assert nulls[0].ts == [T0 + 7] and nulls[0].util == [None]
    assert await store.raw_history("h1", gpu=5, since=T0, until=T0 + 90) == []
    assert await store.raw_history("nope", gpu=0, since=T0, until=T0 + 90) == []
    assert await store.raw_history("h1", gpu=0, since=T0 + 80, until=T0 + 10) == []
