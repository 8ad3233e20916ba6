"""The ring shared by both ends: header layout, producer, consumer. Pure, over a buffer."""
