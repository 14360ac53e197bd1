"""Chat: talk to the served model (streaming); the conversation is recorded like any other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Footer, Header, Input, Static

from clawrl_app.tui.client import new_chat_session_id
from clawrl_app.tui.screens.base import EngineScreen


class ChatScreen(EngineScreen):
    """One conversation at a time with the served policy (alias `clawrl`)."""

    CSS_PATH = "chat.tcss"
    AUTO_FOCUS = "#chat-input"
    """Typing goes to the message box as soon as the screen opens (not to the log above)."""
    BINDINGS = [
        Binding("ctrl+n", "new_chat", "New chat", id="chat.new"),
        Binding("escape", "leave_input", "Leave input", id="chat.leave_input"),
    ]

    @dataclass
    class AnswerGrew(Message):
        """The streamed answer so far (only the newest waits in the queue)."""

        text: str

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, ChatScreen.AnswerGrew)

    @dataclass
    class AnswerFinished(Message):
        """The stream ended: the whole answer, or the error."""

        text: str
        error: str | None = None

    def __init__(self) -> None:
        super().__init__()
        self.session_id = new_chat_session_id()
        """Sent as X-Session-Id: this pane's conversation is one session."""
        self.messages: list[dict[str, Any]] = []
        self._answer: Static | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="chat-session")
        yield VerticalScroll(id="chat-log")
        yield Input(placeholder="Message the model (enter sends)", id="chat-input")
        yield Footer()

    def on_mount(self) -> None:
        self._show_session()

    def on_screen_resume(self) -> None:
        """Coming back to the chat (key 4) puts the cursor in the message box again, even
        after Escape moved focus off it to use the screen keys. (Textual also runs
        `EngineScreen.on_screen_resume`: handlers are called along the class hierarchy.)"""
        self.query_one("#chat-input", Input).focus()

    def _show_session(self) -> None:
        self.query_one("#chat-session", Static).update(
            f"session {self.session_id} · ctrl+n starts a new one"
        )

    def action_leave_input(self) -> None:
        """Move focus off the input so the screen keys (1-5) work again."""
        self.query_one("#chat-log", VerticalScroll).focus()

    def action_new_chat(self) -> None:
        self.session_id = new_chat_session_id()
        self.messages = []
        self.query_one("#chat-log", VerticalScroll).remove_children()
        self._show_session()

    @on(Input.Submitted, "#chat-input")
    def _send(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text or self._answer is not None:
            return
        event.input.value = ""
        self.messages.append({"role": "user", "content": text})
        log = self.query_one("#chat-log", VerticalScroll)
        log.mount(Static(text, classes="user"))
        self._answer = Static("…", classes="assistant")
        log.mount(self._answer)
        log.scroll_end(animate=False)
        self.stream(list(self.messages), self.session_id)

    @work(thread=True, group="chat", exclusive=True)
    def stream(self, messages: list[dict[str, Any]], session_id: str) -> None:
        text = ""
        try:
            for delta in self.client.chat_stream(messages, session_id):
                text += delta
                self.post_message(self.AnswerGrew(text))
        except Exception as exc:
            self.post_message(self.AnswerFinished(text, f"{type(exc).__name__}: {exc}"))
            return
        self.post_message(self.AnswerFinished(text))

    @on(AnswerGrew)
    def _grew(self, message: AnswerGrew) -> None:
        if self._answer is not None:
            self._answer.update(message.text)
            self.query_one("#chat-log", VerticalScroll).scroll_end(animate=False)

    @on(AnswerFinished)
    def _finished(self, message: AnswerFinished) -> None:
        if self._answer is not None:
            self._answer.update(message.text or "(empty answer)")
        self._answer = None
        if message.error:
            self.notify(message.error, title="Chat failed", severity="error")
            self.messages.pop()  # the user may send it again
            return
        self.messages.append({"role": "assistant", "content": message.text})
