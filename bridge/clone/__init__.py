"""`rdma-bridge clone`: a live primary copied into empty replica schemas at one
consistent GTID position, recorded as a channel's start, so that `start-primary`
streams from exactly there (no gap, no duplicate).

snapshot.py opens the consistent snapshot(s) and reads their GTID position;
schema.py reads and creates the schema objects in dependency order; rows.py copies
rows with bounded memory, exactly (values as the server prints them, with the few
types whose text is lossy read another way); run.py orders it all, throttles, shows
progress and records the channel."""
