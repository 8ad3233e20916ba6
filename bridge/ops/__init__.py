"""What an operator sees and runs around the two bridge processes: per-stage metrics and
the Prometheus text (``metrics``), the status document's shape (``statusdoc``), the HTML
report (``report``), the checks before a start (``doctor``) and the TLS certificates
``rdma-bridge tls-certs`` makes (``certs``)."""
