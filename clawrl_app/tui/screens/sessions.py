"""Sessions: the live list, one session's turns with rewards, review/rating keys, delete."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import DataTable, Footer, Header, Static

from clawrl_app.tui import views
from clawrl_app.tui.screens.base import EngineScreen
from clawrl_app.tui.screens.modals import ConfirmModal, PromptModal

FILTERS: tuple[str | None, ...] = (None, "pending", "approved", "excluded")
SESSION_COLUMNS = ("session", "source", "turns", "reward", "review", "created")
TURN_COLUMNS = ("#", "type", "prompt", "answer", "reward", "votes", "hint", "trained in")


class SessionsScreen(EngineScreen):
    """Review recorded conversations: approve, exclude, rate, teach and delete."""

    CSS_PATH = "sessions.tcss"
    RELOAD_ON = frozenset(
        {"TurnRecorded", "SessionClosed", "SampleCreated", "SampleJudged", "TurnRated"}
    )
    BINDINGS = [
        Binding("a", "review('approved')", "Approve", id="sessions.approve"),
        Binding("x", "review('excluded')", "Exclude", id="sessions.exclude"),
        Binding("u", "review('pending')", "Unreview", id="sessions.pending"),
        Binding("plus,equals_sign", "rate(1)", "+1", key_display="+", id="sessions.rate_up"),
        Binding("minus", "rate(-1)", "-1", key_display="-", id="sessions.rate_down"),
        Binding("h", "hint", "Hint", id="sessions.hint"),
        Binding("f", "cycle_filter", "Filter", id="sessions.filter"),
        Binding("d", "delete", "Delete", id="sessions.delete"),
    ]

    review_filter: reactive[str | None] = reactive(None, init=False)
    """Only sessions in this review state (None = all)."""
    selected: reactive[str | None] = reactive(None, init=False)
    """The session shown in the detail pane."""

    @dataclass
    class SessionsLoaded(Message):
        """The session list arrived from a worker."""

        sessions: list[dict[str, Any]]

    @dataclass
    class DetailLoaded(Message):
        """One session's turns arrived from a worker."""

        detail: dict[str, Any] | None

    def __init__(self) -> None:
        super().__init__()
        self.detail: dict[str, Any] | None = None
        self._rows: list[tuple[str, ...]] = []
        self._turn_rows: list[tuple[str, ...]] = []

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="sessions-body"):
            with Vertical(id="list-pane"):
                yield Static("all sessions", id="filter-label")
                yield DataTable(id="sessions", cursor_type="row", zebra_stripes=True)
            with Vertical(id="detail-pane"):
                yield Static("select a session", id="detail-title")
                yield DataTable(id="turns", cursor_type="row")
                yield Static("", id="turn-text")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#sessions", DataTable).add_columns(*SESSION_COLUMNS)
        self.query_one("#turns", DataTable).add_columns(*TURN_COLUMNS)

    # -- loading ----------------------------------------------------------------------
    def reload(self) -> None:
        self.load_sessions(self.review_filter)
        if self.selected is not None:
            self.load_detail(self.selected)

    @work(thread=True, group="sessions-list", exclusive=True)
    def load_sessions(self, review_state: str | None) -> None:
        self.post_message(self.SessionsLoaded(self.client.sessions(review_state)))

    @work(thread=True, group="sessions-detail", exclusive=True)
    def load_detail(self, session_id: str) -> None:
        self.post_message(self.DetailLoaded(self.client.session_detail(session_id)))

    def watch_review_filter(self, value: str | None) -> None:
        self.query_one("#filter-label", Static).update(f"{value or 'all'} sessions (f: filter)")
        self.load_sessions(value)

    @on(SessionsLoaded)
    def _show_sessions(self, message: SessionsLoaded) -> None:
        rows = [views.session_row(s) for s in message.sessions]
        if rows == self._rows:
            return
        self._rows = rows
        table = self.query_one("#sessions", DataTable)
        keep = self.selected
        table.clear()
        for s, row in zip(message.sessions, rows, strict=True):
            table.add_row(*row, key=s["id"])
        ids = [s["id"] for s in message.sessions]
        if keep in ids:
            table.move_cursor(row=ids.index(keep))
        elif ids:
            self.selected = ids[0]

    @on(DataTable.RowHighlighted, "#sessions")
    def _session_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None and event.row_key.value != self.selected:
            self.selected = event.row_key.value

    def watch_selected(self, value: str | None) -> None:
        if value is not None:
            self.load_detail(value)

    @on(DetailLoaded)
    def _show_detail(self, message: DetailLoaded) -> None:
        detail = self.detail = message.detail
        title = self.query_one("#detail-title", Static)
        if detail is None:
            title.update("select a session")
            return
        episode = views.episode_line(detail.get("episode"))
        title.update(
            f"[b]{detail['id']}[/b] · {views.source_label(detail)} · {detail['review_state']}"
            + (" · closed" if detail["closed"] else " · open")
            + (f"\n{episode}" if episode else "")
        )
        rows = [views.turn_row(t) for t in detail["turns"]]
        if rows == self._turn_rows:
            return
        self._turn_rows = rows
        table = self.query_one("#turns", DataTable)
        row_index = table.cursor_row
        table.clear()
        for t, row in zip(detail["turns"], rows, strict=True):
            table.add_row(*row, key=str(t["turn_id"]))
        if rows:
            table.move_cursor(row=min(row_index, len(rows) - 1))
        self._show_turn()

    @on(DataTable.RowHighlighted, "#turns")
    def _turn_highlighted(self) -> None:
        self._show_turn()

    def _show_turn(self) -> None:
        turn = self.selected_turn()
        text = self.query_one("#turn-text", Static)
        if turn is None:
            text.update("")
            return
        text.update(
            f"[b]prompt[/b] {views.short(turn['prompt'], 300)}\n"
            f"[b]answer[/b] {views.short(turn['response'], 300)}\n"
            f"[b]next[/b]   {views.short(turn['next_state'] or views.NONE, 200)}\n"
            f"[b]reward[/b] {views.reward(turn['reward'])}  [b]votes[/b] "
            f"{views.votes_text(turn['votes'])}  [b]hint[/b] {turn['hint'] or views.NONE}  "
            f"[b]trained in[/b] {turn['trained_in'] or views.NONE}"
        )

    def selected_turn(self) -> dict[str, Any] | None:
        if not self.detail or not self.detail["turns"]:
            return None
        row = self.query_one("#turns", DataTable).cursor_row
        turns: list[dict[str, Any]] = self.detail["turns"]
        return turns[row] if 0 <= row < len(turns) else None

    # -- commands ---------------------------------------------------------------------
    def action_cycle_filter(self) -> None:
        self.review_filter = FILTERS[(FILTERS.index(self.review_filter) + 1) % len(FILTERS)]

    def action_review(self, state: str) -> None:
        if self.selected is None:
            return
        trained = views.trained_versions(self.detail) if self.detail else []
        self.set_review(self.selected, state, offer_rollback=state == "excluded" and bool(trained))

    @work(thread=True, group="sessions-cmd")
    def set_review(self, session_id: str, state: str, offer_rollback: bool) -> None:
        try:
            self.client.set_review(session_id, state)
        except Exception as exc:
            self.post_message(self.CommandFinished("review", str(exc)))
            return
        self.post_message(self.CommandFinished(f"{session_id} {state}"))
        if offer_rollback:
            trained = views.trained_versions(self.detail) if self.detail else []
            self.app.call_from_thread(
                self._offer_rollback,
                session_id,
                f"{', '.join(trained)} already trained on {session_id}; excluding keeps it out "
                "of future steps only.",
            )

    def _offer_rollback(self, session_id: str, why: str) -> None:
        text = (
            f"{why} Roll back to the newest checkpoint that never saw it? Serving "
            "switches at once and the trainer restarts from that checkpoint; later "
            "checkpoints stay on disk (roll forward on the Checkpoints screen)."
        )

        def answered(yes: bool | None) -> None:
            if yes:
                self.rollback_before(session_id)

        self.app.push_screen(ConfirmModal("Roll back to before this session?", text), answered)

    @work(thread=True, group="sessions-cmd")
    def rollback_before(self, session_id: str) -> None:
        try:
            r = self.client.rollback(before_session=session_id)
        except Exception as exc:
            self.post_message(self.CommandFinished("rollback", str(exc)))
            return
        self.post_message(self.CommandFinished(f"serving {r['to']} (was {r['from']})"))

    def action_delete(self) -> None:
        session_id, detail = self.selected, self.detail
        if session_id is None or detail is None or detail["id"] != session_id:
            return
        trained = views.trained_versions(detail)
        text = views.delete_text(session_id, len(detail["turns"]), trained)

        def answered(yes: bool | None) -> None:
            if yes:
                self.delete_session(session_id, trained)

        self.app.push_screen(ConfirmModal("Delete this session?", text), answered)

    @work(thread=True, group="sessions-cmd")
    def delete_session(self, session_id: str, trained: list[str]) -> None:
        try:
            gone = self.client.delete_session(session_id)
        except Exception as exc:
            self.post_message(self.CommandFinished("delete", str(exc)))
            return
        self.post_message(self.CommandFinished(f"{session_id} deleted" if gone else "gone"))
        if gone and trained:
            self.app.call_from_thread(
                self._offer_rollback,
                session_id,
                f"The session is deleted; {', '.join(trained)} trained on it and keep their "
                "weights.",
            )

    def action_rate(self, rating: int) -> None:
        turn = self.selected_turn()
        if self.selected is not None and turn is not None:
            self.rate(self.selected, turn["turn_id"], rating, None)

    def action_hint(self) -> None:
        turn, session_id = self.selected_turn(), self.selected
        if turn is None or session_id is None:
            return

        def answered(hint: str | None) -> None:
            if hint:
                self.rate(session_id, turn["turn_id"], -1, hint)

        text = (
            f"Turn {turn['idx']}: what should the answer have done? The hint is used directly "
            "for distillation and the turn is rated -1."
        )
        self.app.push_screen(PromptModal("Teach", text, "e.g. answer in one sentence"), answered)

    @work(thread=True, group="sessions-cmd")
    def rate(self, session_id: str, turn_id: int, rating: int, hint: str | None) -> None:
        try:
            self.client.rate(session_id, turn_id, rating, hint)
        except Exception as exc:
            self.post_message(self.CommandFinished("rating", str(exc)))
            return
        self.post_message(self.CommandFinished(f"turn rated {rating:+d}"))
