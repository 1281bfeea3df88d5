"""Console parameters at the calendar's and the integers' ends answer 400 with a message that
names the parameter's range, never a 500 or a false "database down" 503."""

from __future__ import annotations

import pytest

from tests.plugin.console_bot import ALICE, ConsoleBot


@pytest.mark.parametrize(
    ("path", "named"),
    [
        (f"/memory/session?key={ALICE}&to=9999-12-31", "超出范围"),
        (f"/memory/session?key={ALICE}&from=0001-01-01", "超出范围"),
        (f"/memory/session?key={ALICE}&page={2**63 - 1}", "页码"),
        (f"/memory/sessions?page={2**63 - 1}", "页码"),
        (f"/memory/audit?page={2**62}", "页码"),
    ],
)
async def test_out_of_range_parameters_are_a_400_that_says_why(
    console_wire: ConsoleBot, path: str, named: str
):
    async with console_wire.logged_in() as client:
        answer = await client.get(path)
        assert answer.status_code == 400, (path, answer.status_code, answer.text[:300])
        assert named in answer.text
        # The database is fine, and the console says so by working.
        assert (await client.get(f"/memory/session?key={ALICE}")).status_code == 200


async def test_a_debugger_time_at_the_calendars_end_is_a_400(console_wire: ConsoleBot):
    async with console_wire.logged_in() as client:
        page = await client.get("/memory/debug")
        csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        answer = await client.post(
            "/memory/debug",
            data={"csrf": csrf, "user": str(ALICE), "message": "狗", "at": "0001-01-01T00:00"},
        )
        assert answer.status_code == 400 and "超出范围" in answer.text
