"""rdma-bridge: binlog → framed ring → replica applier, exactly once, in order."""

__version__ = "0.1.0"
