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
