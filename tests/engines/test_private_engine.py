"""The test tree's private engines (``tests/private_engine.py``) never share an address."""

from __future__ import annotations

import shutil

import pytest

from tests.private_engine import PrivateDockerd


@pytest.mark.skipif(shutil.which("ip") is None, reason="needs iproute2's ip")
def test_engines_made_in_a_row_each_reserve_a_subnet_of_their_own():
    # A subnet is put on an interface only when an engine starts: engines made before any
    # starts (the fleet bench makes 8, then starts them in parallel) once picked theirs
    # from the interfaces alone, and two could share an address (two runtimes at one
    # engine, one of them never followed). 60 picks out of 256 collide almost surely.
    engines = [PrivateDockerd("subnet", tcp=True) for _ in range(60)]
    try:
        subnets = [engine.subnet for engine in engines]
        assert len(set(subnets)) == len(subnets), sorted(subnets)
        freed = engines.pop()
        freed.destroy()
        again = PrivateDockerd("subnet", tcp=True)
        engines.append(again)
        assert again.subnet not in {engine.subnet for engine in engines[:-1]}, again.subnet
    finally:
        for engine in engines:
            engine.destroy()
