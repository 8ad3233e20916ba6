"""The benchmark summary's TLS rows: tcp+tls over tcp of the same run, per workload and rate."""

from bench.run_all import tls_ratios


def test_tls_cost_is_tls_over_plain_of_the_same_run():
    cpu = {"rows": [{"apply_mode": "binlog", "transport": t, "workload": "single-row", "bridge_processes_us": us}
                    for t, us in (("shm", 100.0), ("tcp", 400.0), ("tcp+tls", 440.0))]}
    lag = {t: {"rates": [{"rate": 500, "bridge": {"p50_us": p50, "p99_us": 1000.0}}]}
           for t, p50 in (("tcp", 800.0), ("tcp+tls", 1000.0))}
    out = tls_ratios({"cpu": cpu, "lag_tls": lag})
    assert out == {
        "TLS cost: CPU of both bridge processes per txn, single-row (binlog apply), with TLS over without "
        "(lower is better)": 1.1,
        "TLS cost: bridge lag p50 at 500 txn/s over tcp, with TLS over without (lower is better)": 1.25,
        "TLS cost: bridge lag p99 at 500 txn/s over tcp, with TLS over without (lower is better)": 1.0,
    }


def test_the_compiled_hot_paths_gain_is_compiled_over_its_twin_of_the_same_run():
    from bench.cpu import hot_path_ratios

    rows = [{"apply_mode": "binlog", "transport": "shm", "workload": w, "hot_path": h, "bridge_processes_us": us}
            for w, h, us in (("single-row", "compiled", 300.0), ("single-row", "pure", 400.0),
                             ("3-row update", "compiled", 330.0))]  # no twin row: no ratio
    rows.append({"apply_mode": "binlog", "transport": "tcp+tls", "workload": "single-row", "bridge_processes_us": 1.0})
    assert hot_path_ratios({"rows": rows}) == {
        "compiled hot path: CPU of both bridge processes per txn, single-row over shm (binlog apply), compiled "
        "over its pure-Python twin (lower is better)": 0.75}
    tls = tls_ratios({"cpu": {"rows": rows}})  # the twin's rows are not the plain tcp baseline of anything
    assert tls == {}
