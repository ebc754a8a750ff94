"""Model-written text made inert before a person's terminal, browser or git log shows it.

A lane's summary, its assumptions and its edits' reasons are written by a model that may have read a hostile
repository. Printed raw, an OSC sequence retitles the terminal or plants a link (OSC 8), CSI 2J clears the
screen, a carriage return overwrites the line before it with something else, and BEL rings. `inert` removes
every escape sequence whole (CSI, OSC, DCS and the other string commands, in their 7-bit and 8-bit forms),
then every other C0 and C1 control character and the bidirectional overrides that reorder what is shown;
newline and tab stay, as text needs them. It never raises, and is idempotent.
"""

from __future__ import annotations

import re

# ESC [ or CSI (0x9b): parameters and intermediates, then one final byte; an unfinished one runs to the end.
_CSI = r"(?:\x1b\[|\x9b)[\x20-\x3f]*[\x40-\x7e]?"
# OSC, DCS, SOS, PM, APC (ESC ] P X ^ _, or 0x9d 0x90 0x98 0x9e 0x9f): a string ended by BEL or ST (ESC \ or
# 0x9c); an unended one swallows the rest, as a terminal would.
_STRING = r"(?:\x1b[\]PX^_]|[\x9d\x90\x98\x9e\x9f])(?:[^\x07\x1b\x9c]|\x1b(?!\\))*(?:\x07|\x1b\\|\x9c)?"
_ESC_PAIR = r"\x1b[\x20-\x7e]?"  # any other escape: ESC and the character after it
_SEQUENCES = re.compile(f"{_STRING}|{_CSI}|{_ESC_PAIR}")
# What is left: C0 but newline and tab, DEL, C1, and the bidi embeddings, overrides and isolates.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_LINE_BREAKS = re.compile("[\n\t\u2028\u2029]+")


def inert(text: str) -> str:
    """`text` with escape sequences and control characters removed; newline and tab kept."""
    if not isinstance(text, str):
        return text
    if not _CONTROLS.search(text):
        return text  # the common case, and no work
    return _CONTROLS.sub("", _SEQUENCES.sub("", text))


def inert_line(text: str) -> str:
    """One line of inert text (a name, a heading): newlines and tabs become spaces."""
    return _LINE_BREAKS.sub(" ", inert(text)).strip()


def inert_text(value: str | list[str]) -> str | list[str]:
    """`inert` of a text or of each text in a list (a contract's field validator for either)."""
    return [inert(item) for item in value] if isinstance(value, list) else inert(value)


_TITLE = re.compile(r"<title[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)
_HTML = re.compile(r"<(?:!doctype\s+html|html|head|body)\b", re.IGNORECASE)
_HTML_DROPPED = re.compile(r"<(script|style|head)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]{0,2000}>")
_ENTITIES = {"&amp;": "&", "&lt;": "<", "&gt;": ">", "&quot;": '"', "&#39;": "'", "&nbsp;": " "}
ERROR_LINE_CHARS = 300


def error_line(text: str, limit: int = ERROR_LINE_CHARS) -> str:
    """An error as one bounded line for a terminal or a review: a provider's HTML page (a 503 from a proxy) becomes
    its title, or its text with the tags stripped; any other text its lines joined. Status, review and watch all
    show errors through this, so the raw page stays in the JSON alone."""
    text = inert(text) if isinstance(text, str) else str(text)
    if (match := _HTML.search(text)) is not None:
        before = text[:match.start()].strip()  # what the caller said first ("openai model: HTTP 503: ")
        title = _TITLE.search(text)
        body = title.group(1) if title is not None and title.group(1).strip() else \
            _TAG.sub(" ", _HTML_DROPPED.sub(" ", text[match.start():]))
        for entity, char in _ENTITIES.items():
            body = body.replace(entity, char)
        text = f"{before} {body} (an HTML page)" if before else f"{body} (an HTML page)"
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:max(0, limit - 3)].rstrip() + "..."
