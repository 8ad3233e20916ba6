"""MySQL's binary JSON to the text MySQL prints (bridge.wire.mysqljson), from bytes laid
out as sql/json_binary.h describes them; the same against a real MySQL server is in
tests/integration/test_types.py."""

import pytest

from bridge.errors import RemoteProtocolError
from bridge.wire import mysqljson


@pytest.mark.parametrize("data, text", [
    (b"", "null"),
    (b"\x04\x00", "null"), (b"\x04\x01", "true"), (b"\x04\x02", "false"),
    (b"\x05\xff\xff", "-1"), (b"\x06\xff\xff", "65535"), (b"\x0a" + b"\xff" * 8, "18446744073709551615"),
    (b"\x0b" + bytes.fromhex("000000000000f83f"), "1.5"),
    (b"\x0c\x03abc", '"abc"'),
    # a small array: count 2, size 12, an inline int16 and a string at offset 10
    (b"\x02" + b"\x02\x00\x0c\x00" + b"\x05\x01\x00" + b"\x0c\x0a\x00" + b"\x01a", '[1, "a"]'),
    # a small object: count 1, size 12, key "k" at offset 11, an inline true
    (b"\x00" + b"\x01\x00\x0c\x00" + b"\x0b\x00\x01\x00" + b"\x04\x01\x00" + b"k", '{"k": true}'),
    # opaque: a DATE (field type 10) packed as MySQL packs it, and a binary string (15)
    (b"\x0f\x0a\x08" + (((2024 * 13 + 2) << 5 | 29) << 17 << 24).to_bytes(8, "little"), '"2024-02-29"'),
    (b"\x0f\x0f\x02\x00\xff", '"base64:type15:AP8="'),
])
def test_values_read_as_mysql_prints_them(data, text):
    assert mysqljson.to_text(data) == text


@pytest.mark.parametrize("value, text", [
    (1.0, "1.0"), (100.0, "100.0"), (1e14, "100000000000000.0"), (1e15, "1e15"), (1.5e16, "1.5e16"),
    (1234567890123456.8, "1234567890123456.8"), (0.1, "0.1"), (1e-7, "0.0000001"), (1.234e-15, "0.000000000000001234"),
    (1e-16, "1e-16"), (-0.0, "-0.0"), (5e-324, "5e-324"), (1.7976931348623157e308, "1.7976931348623157e308"),
])
def test_doubles_as_my_gcvt_writes_them(value, text):
    assert mysqljson.double_text(value) == text


def test_strings_keep_mysqls_escapes_and_non_ascii():
    assert mysqljson.quote('a"b\\c\td\ne\x01ü😀/') == '"a\\"b\\\\c\\td\\ne\\u0001ü😀/"'


@pytest.mark.parametrize("data", [b"\x0c\x05ab", b"\x02\x05\x00\xff\x00", b"\x0d", b"\x04\x07", b"\x0b\x00"])
def test_damaged_values_are_protocol_errors(data):
    with pytest.raises(RemoteProtocolError, match="mysql json"):
        mysqljson.to_text(data)
