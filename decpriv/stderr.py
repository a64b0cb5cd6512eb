"""What decpriv says on stderr: one line each, rich markup, never wrapped (a log keeps it whole)."""

from rich.console import Console
from rich.markup import escape


def print_stderr(markup: str) -> None:
    """One line of rich markup on the stderr of the moment (a test's capture, a job's log)."""
    Console(stderr=True, soft_wrap=True).print(markup, highlight=False)


def print_error(message: str) -> None:
    """``error: <message>``: decpriv's one-sentence refusal of bad input."""
    print_stderr(f"[bold red]error:[/] {escape(message)}")
