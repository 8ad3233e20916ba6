"""Pure wire formats: frame header + crc32c, payload codec, control messages. No I/O."""
