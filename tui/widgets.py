"""Small widgets of the dashboard: the key bar that wraps, and tick boxes drawn ``[x]`` / ``[ ]``."""

from __future__ import annotations

from dataclasses import dataclass

from textual.content import Content
from textual.geometry import Size
from textual.screen import Screen
from textual.style import Style
from textual.widget import Widget
from textual.widgets import Checkbox

__all__ = ["KeyBar", "TickBox"]


class TickBox(Checkbox):
    """A checkbox whose state reads without colour: ``[x]`` ticked, ``[ ]`` not."""

    def __init__(self, label: str = "", value: bool = False, *, id: str | None = None) -> None:
        super().__init__(label, value, id=id, compact=True)

    @property
    def _button(self) -> Content:
        style = self.get_visual_style("toggle--button")
        return Content.assemble(("[x]" if self.value else "[ ]", style))


@dataclass(frozen=True)
class _Key:
    key: str
    description: str
    enabled: bool
    action: str
    target: str  # "app." or "screen.": where a click runs the action ("": nowhere)

    @property
    def width(self) -> int:
        return len(self.key) + 1 + len(self.description)


class KeyBar(Widget):
    """The screen's keys on as many lines as the width needs (at most ``max_lines``): keys that cannot
    act now are dimmed, and the keys of ``last`` (help, quit, back) are always shown, at the end. When
    not all fit, help says how many more it lists."""

    DEFAULT_CSS = """
    KeyBar {
        dock: bottom;
        height: auto;
        padding: 0 1;
        background: $footer-background;
        color: $footer-foreground;
    }
    """

    def __init__(
        self, *, last: tuple[str, ...] = ("help", "quit_dashboard", "back"), max_lines: int = 2
    ) -> None:
        super().__init__()
        self.last = last
        self.max_lines = max_lines

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: Screen) -> None:
        if self.is_attached and screen is self.screen:
            self.refresh(layout=True)

    def keys(self) -> list[_Key]:
        out = []
        for active in self.screen.active_bindings.values():
            binding = active.binding
            if binding.show:
                key = self.app.get_key_display(binding)
                target = (
                    "app." if active.node is self.app else "screen." if active.node is self.screen else ""
                )
                out.append(_Key(key, binding.description, active.enabled, binding.action, target))
        return out

    def lines(self, width: int) -> list[list[_Key]]:
        keys = self.keys()
        last = [k for k in keys if k.action in self.last]
        rest = [k for k in keys if k.action not in self.last]
        width = max(width, 1)
        while True:
            packed = _pack([*rest, *last], width)
            if len(packed) <= self.max_lines or not rest:
                return packed
            rest = rest[:-1]  # the least important keys (the last bound) give way; help lists them

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return max(1, len(self.lines(width)))

    def render(self) -> Content:
        width = self.content_region.width or self.size.width
        lines = self.lines(width)
        hidden = len(self.keys()) - sum(len(line) for line in lines)
        pieces: list[tuple[str, Style] | str] = []
        for n, line in enumerate(lines):
            if n:
                pieces.append("\n")
            for i, k in enumerate(line):
                if i:
                    pieces.append("  ")
                description = k.description
                if k.action == "help" and hidden:
                    description = f"{description} (+{hidden})"
                click = Style.from_meta({"@click": f"{k.target}{k.action}"}) if k.target else Style()
                dim = Style(dim=True) if not k.enabled else Style()
                pieces.append((k.key, Style(bold=True) + dim + click))
                pieces.append((f" {description}", dim + click))
        return Content.assemble(*pieces)


def _pack(keys: list[_Key], width: int) -> list[list[_Key]]:
    lines: list[list[_Key]] = [[]]
    used = 0
    for key in keys:
        needed = key.width + (2 if lines[-1] else 0)
        if lines[-1] and used + needed > width:
            lines.append([])
            used, needed = 0, key.width
        lines[-1].append(key)
        used += needed
    return lines if lines[0] else []
