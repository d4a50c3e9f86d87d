"""Stopping a ``BoundPortController`` (the sink's, ``herald serve``'s inbound server's, the test
servers') lets every session's task end before the server's loop closes.

aiosmtpd's own stop stops the loop and cancels the tasks in the same turn; a task whose
cancellation took more turns than the loop then ran was closed with the loop while still
pending, and its garbage warned "Task was destroyed but it is pending!" later, in whatever code
ran when it was collected (once, another test's setup). Here a real client sits in DATA while a
handler's clean-up takes several turns of the loop, and the stop must wait for it."""

from __future__ import annotations

import asyncio
import smtplib
import threading
from typing import Any

from aiosmtpd.smtp import SMTP

from herald.sink import BoundPortController

DEADLINE = 10.0  # seconds; only a broken stop comes near it
CLEAN_UP_TURNS = 5  # turns of the loop the handler's clean-up takes


class SlowToLetGo:
    """Holds every DATA until the session is cancelled, then cleans up over several turns."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.cleaned_up = threading.Event()
        self.tasks: list[asyncio.Task[Any]] = []

    async def handle_DATA(self, server: SMTP, session: object, envelope: object) -> str:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.append(task)
        self.entered.set()
        try:
            await asyncio.Event().wait()  # nobody sets it: only the stop ends this
        finally:
            for _ in range(CLEAN_UP_TURNS):
                await asyncio.sleep(0)
            self.cleaned_up.set()
        return "250 never"


def send_in_background(port: int) -> threading.Thread:
    def send() -> None:
        try:
            with smtplib.SMTP("127.0.0.1", port, timeout=DEADLINE) as client:
                client.sendmail("a@example.test", ["b@example.test"], b"Subject: x\r\n\r\nx\r\n")
        except (smtplib.SMTPException, OSError):
            pass  # the server went away mid-DATA, as it should

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_a_stop_waits_for_cancelled_sessions_to_end() -> None:
    handler = SlowToLetGo()
    controller = BoundPortController(handler, hostname="127.0.0.1", port=0)
    controller.start()
    loop = controller.loop
    client = send_in_background(controller.port)
    assert handler.entered.wait(DEADLINE), "the client never reached DATA"

    controller.stop()

    assert handler.cleaned_up.is_set(), "the session's clean-up was cut off by the stop"
    assert handler.tasks
    assert all(task.done() for task in handler.tasks)
    assert loop.is_closed()
    assert not [task for task in asyncio.all_tasks(loop) if not task.done()]
    client.join(DEADLINE)
    assert not client.is_alive()


class WaitsToLetGo:
    """Holds every DATA until the session is cancelled; its clean-up then waits for
    ``release`` (set by the test, in its thread)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.letting_go = threading.Event()
        self.release = threading.Event()
        self.cleaned_up = threading.Event()

    async def handle_DATA(self, server: SMTP, session: object, envelope: object) -> str:
        self.entered.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.letting_go.set()
            await asyncio.to_thread(self.release.wait, DEADLINE)
            self.cleaned_up.set()
        return "250 never"


def test_a_stopping_server_takes_no_new_session_while_its_sessions_end() -> None:
    handler = WaitsToLetGo()
    controller = BoundPortController(handler, hostname="127.0.0.1", port=0)
    controller.start()
    port = controller.port
    client = send_in_background(port)
    assert handler.entered.wait(DEADLINE), "the client never reached DATA"
    stopping = threading.Thread(target=controller.stop, daemon=True)
    stopping.start()
    assert handler.letting_go.wait(DEADLINE), "the session was never cancelled"

    assert stopping.is_alive(), "the stop did not wait for the session's clean-up"
    try:
        with smtplib.SMTP("127.0.0.1", port, timeout=DEADLINE):
            raise AssertionError("a stopping server accepted a new session")
    except (ConnectionRefusedError, smtplib.SMTPServerDisconnected):
        pass
    handler.release.set()
    stopping.join(DEADLINE)
    assert not stopping.is_alive()
    assert handler.cleaned_up.is_set()
    client.join(DEADLINE)
    assert not client.is_alive()
