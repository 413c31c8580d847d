"""This master's identity in the portal: its instance id and fencing epoch, and the takeover button.

The Nodes page embeds :func:`render_master_identity`. The takeover asks first (it fences off every
older master, the one it replaces included) and goes through the room's :mod:`.actions` as the
portal's administrator, so it is audited as the API's is.
"""

from __future__ import annotations

from nicegui import ui

from mirbad_master._composition import MasterServices
from mirbad_master.ui._marks import testid
from mirbad_master.ui._refusals import PORTAL_ACTOR, REFUSED, act
from mirbad_orchestration.fleet import MasterIdentity

from . import actions

__all__ = ["identity_text", "render_master_identity"]


def identity_text(identity: MasterIdentity) -> str:
    """One line on who this master is to its fleet."""
    return f"This master: {identity.instance_id} at fencing epoch {identity.epoch}"


async def render_master_identity(services: MasterServices) -> None:
    """The master's card: its identity line and "Take over the fleet" behind a confirmation."""
    with testid(ui.card().classes("w-full gap-2"), "master-identity"):
        ui.label("Master").classes("text-h6")
        line = testid(ui.label(""), "master-identity-text")
        shown = await act(actions.master_identity(services))
        if shown is not REFUSED:
            line.text = identity_text(shown)

        with ui.dialog() as confirm, ui.card():
            ui.label(
                "Raise the fencing epoch? Every node follows this master from now on and refuses the "
                "commands of any older master, the one this replaces included."
            )
            with ui.row():

                async def take_over() -> None:
                    confirm.close()
                    taken = await act(
                        actions.take_over(services, PORTAL_ACTOR), done="This master now commands the fleet"
                    )
                    if taken is not REFUSED:
                        line.text = identity_text(
                            MasterIdentity(instance_id=taken.instance_id, epoch=taken.epoch)
                        )
                        for claim in taken.nodes:
                            if not claim.claimed:
                                ui.notify(f"node {claim.node_id}: {claim.reason}", type="warning")

                testid(ui.button("Take over", on_click=take_over), "master-takeover-confirm")
                ui.button("Cancel", on_click=confirm.close).props("flat")
        testid(ui.button("Take over the fleet", on_click=confirm.open).props("outline"), "master-takeover")
