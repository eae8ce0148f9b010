"""zerolab.base.interpreter.poll_shell_in_slices: nbclient asks for a cell's reply in slices of a second, so a poll that
misses its wake-up (pyzmq under load) costs a second, not the whole cell timeout; the timeout itself still holds."""
import asyncio
from queue import Empty
from types import SimpleNamespace

import pytest

from zerolab.base.interpreter import poll_shell_in_slices


class Channel:
    """A shell channel whose reply is there, but whose polls wait out their timeout before they see it."""

    def __init__(self, reply=True):
        self.asked, self.reply = [], reply

    async def get_msg(self, timeout=None):
        self.asked.append(timeout)
        if len(self.asked) > 1 and self.reply:  # the next look finds the reply that arrived meanwhile
            return {"msg_type": "execute_reply"}
        await asyncio.sleep(timeout)
        raise Empty


def sliced(channel, slice_s):
    client = SimpleNamespace(kc=SimpleNamespace(shell_channel=channel))
    poll_shell_in_slices(client, slice_s=slice_s)(notebook=None)
    return client.kc.shell_channel.get_msg


def test_a_missed_wake_up_costs_one_slice_not_the_cell_timeout():
    channel = Channel()
    assert asyncio.run(sliced(channel, 0.05)(timeout=300)) == {"msg_type": "execute_reply"}
    assert channel.asked == [0.05, 0.05]


def test_no_reply_within_the_timeout_is_still_a_timeout():
    channel = Channel(reply=False)
    with pytest.raises(Empty):
        asyncio.run(sliced(channel, 0.05)(timeout=0.2))
    assert 4 <= len(channel.asked) <= 6 and max(channel.asked) <= 0.05
