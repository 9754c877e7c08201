"""A trace's process groups as the map step keeps them (collectors/traces/trace_map.py): one compact string per
trace, read back exactly, so that thousands of traces' groups do not hold O(ranks^2) rank lists in the driver."""

from __future__ import annotations

from perftracker.collectors.traces.trace_map import compact_pg_config, expand_ranks, pg_groups


def test_groups_round_trip_with_their_ranks_and_hostile_entries_are_left_out() -> None:
    # GIVEN a pg_config as a 4096-rank trace has it (the world, 8 DP groups of stride 8, 512 TP groups of 8),
    # plus an irregular group and entries that are not groups
    raw: list[object] = [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 4096, "ranks": list(range(4096))}]
    raw += [{"pg_name": f"dp{i}", "pg_desc": "dp", "pg_size": 512, "ranks": list(range(i, 4096, 8))} for i in range(8)]
    raw += [{"pg_name": f"tp{j}", "pg_desc": "tp", "pg_size": 8, "ranks": list(range(8 * j, 8 * j + 8))}
            for j in range(512)]
    raw += [{"pg_name": "odd", "pg_desc": "x", "pg_size": 3, "ranks": [5, 2, 9]}, {"no": "name"}, "junk",
            {"pg_name": "bad", "pg_size": True, "ranks": ["a"]}]
    # WHEN compacted and read back
    text = compact_pg_config(raw)
    groups = pg_groups(text)
    # THEN every group keeps its name, description, size and ranks, in one short string
    assert len(groups) == 1 + 8 + 512 + 2 and len(text) < 40_000
    by_name = {g[0]: g for g in groups}
    assert expand_ranks(by_name["0"][3]) == list(range(4096))
    assert expand_ranks(by_name["dp3"][3]) == list(range(3, 4096, 8)) and by_name["dp3"][1:3] == ("dp", 512)
    assert expand_ranks(by_name["odd"][3]) == [5, 2, 9]
    assert by_name["bad"][2] == -1 and expand_ranks(by_name["bad"][3]) == []


def test_what_is_not_a_pg_config_reads_as_no_groups() -> None:
    assert pg_groups(compact_pg_config(None)) == [] and pg_groups(compact_pg_config({"a": 1})) == []
    assert pg_groups("") == [] and pg_groups("{not json") == [] and pg_groups('{"a": [1]}') == []
    assert expand_ranks("1:x:2") == []
