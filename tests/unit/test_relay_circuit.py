"""The relay circuit breaker (dispatch.relay_circuit.RelayCircuit), on a clock the test owns."""

from __future__ import annotations

import asyncio

from dispatch.relay_circuit import CircuitState, RelayCircuit
from dispatch.transport import RelayUnavailable

DOWN = RelayUnavailable("connection refused", relay="smtp://relay.test:25")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_first_failure_opens_it_and_says_so_once() -> None:
    clock = Clock()
    circuit = RelayCircuit(base=1, cap=30, clock=clock)
    assert circuit.wait() == 0
    assert not circuit.holding()
    assert circuit.failed(DOWN) is True  # an outage begins: the one line is logged
    assert circuit.failed(DOWN) is False  # sends already under way: nothing new to say
    assert circuit.state is CircuitState.OPEN
    assert circuit.holding()
    assert circuit.wait() == 1
    assert circuit.error is DOWN


def test_failed_probes_double_the_backoff_up_to_the_cap() -> None:
    async def scenario() -> list[float]:
        clock = Clock()
        circuit = RelayCircuit(base=1, cap=8, clock=clock)
        circuit.failed(DOWN)
        waits = [circuit.wait()]
        for _ in range(6):
            assert await circuit.admit() == (False, False)  # still open: handed back
            clock.now += circuit.wait()
            assert not circuit.holding()  # due: claims resume, the next send probes
            assert await circuit.admit() == (True, True)
            assert circuit.holding()  # the probe is out
            assert circuit.failed(DOWN) is False  # a failed probe is the same outage
            waits.append(circuit.wait())
        return waits

    assert asyncio.run(scenario()) == [1, 2, 4, 8, 8, 8, 8]


def test_one_probe_at_a_time_and_the_others_follow_its_verdict() -> None:
    async def scenario(succeeds: bool) -> list[tuple[bool, bool]]:
        clock = Clock()
        circuit = RelayCircuit(base=1, cap=30, clock=clock)
        circuit.failed(DOWN)
        clock.now += 1
        assert await circuit.admit() == (True, True)
        waiting = [asyncio.create_task(circuit.admit()) for _ in range(3)]
        await asyncio.sleep(0)
        assert not any(task.done() for task in waiting)  # they wait for the probe
        clock.now += 5
        if succeeds:
            assert circuit.succeeded(probe=True) == 6  # the outage lasted from the first failure
        else:
            circuit.failed(DOWN)
        return list(await asyncio.gather(*waiting))

    assert asyncio.run(scenario(True)) == [(True, False)] * 3
    assert asyncio.run(scenario(False)) == [(False, False)] * 3


def test_a_success_closes_it_and_forgets_the_backoff() -> None:
    async def scenario() -> None:
        clock = Clock()
        circuit = RelayCircuit(base=1, cap=30, clock=clock)
        circuit.failed(DOWN)
        clock.now += 1
        assert await circuit.admit() == (True, True)
        assert circuit.succeeded(probe=True) == 1
        assert circuit.succeeded(probe=False) is None  # no outage to end
        assert circuit.closed
        assert circuit.failed(DOWN) is True  # a new outage, from the base backoff again
        assert circuit.wait() == 1

    asyncio.run(scenario())


def test_only_the_probe_closes_an_open_breaker() -> None:
    """A send admitted before the outage, answered on a connection made before it, says nothing
    about the relay now: the breaker stays open (claims held) until its probe is answered, and
    the outage is announced once."""

    async def scenario() -> None:
        clock = Clock()
        circuit = RelayCircuit(base=1, cap=30, clock=clock)
        assert await circuit.admit() == (True, False)  # a send on a pooled connection
        assert circuit.failed(DOWN) is True  # another send's new connection is refused
        assert circuit.succeeded(probe=False) is None  # the first one is answered
        assert circuit.state is CircuitState.OPEN
        assert circuit.holding()
        assert circuit.failed(DOWN) is False  # the next refusal: the same outage, no new line
        clock.now += circuit.wait()
        assert await circuit.admit() == (True, True)
        assert circuit.succeeded(probe=False) is None  # still not the probe's answer
        assert circuit.holding()  # its probe is still out
        clock.now += 2
        assert circuit.succeeded(probe=True) == 3
        assert circuit.closed

    asyncio.run(scenario())


def test_a_probe_that_ends_without_a_verdict_lets_the_next_send_probe() -> None:
    async def scenario() -> tuple[bool, bool]:
        clock = Clock()
        circuit = RelayCircuit(base=1, cap=30, clock=clock)
        circuit.failed(DOWN)
        clock.now += 1
        await circuit.admit()
        circuit.abandon_probe()
        assert circuit.state is CircuitState.OPEN
        return await circuit.admit()

    assert asyncio.run(scenario()) == (True, True)


def test_the_line_names_the_cause_and_the_relay() -> None:
    assert DOWN.line == "relay unreachable: connection refused (smtp://relay.test:25)"
