"""The commands that read run and sweep folders: list, show, diff, report, runs (and ``list runs``)."""

import argparse

from rich.console import Console

from decpriv.errors import ConfigError, bad_value


def list_command(ns: argparse.Namespace, console: Console) -> int:
    from decpriv.api import did_you_mean
    from decpriv.report.show import config_options, print_groups

    if ns.groups == ["sandbox"]:  # not a group: the attack process's limits (config.yaml's sandbox)
        from decpriv.seal.sandbox import described

        console.print(described(), highlight=False)
        return 0
    groups = sorted({group for group, _, _ in config_options()})
    unknown = [g for g in ns.groups if g not in groups]
    if unknown:
        hint = did_you_mean(unknown[0], [*groups, "runs"]) or "groups: " + ", ".join(groups)
        raise ConfigError(f"{unknown[0]}: no such config group; {hint}")
    if ns.format == "markdown":
        from decpriv.report.show import group_table

        print(group_table(ns.groups))
        return 0
    print_groups(console, ns.groups)
    return 0


def show_command(ns: argparse.Namespace, console: Console) -> int:
    if ns.rows < 0:
        raise bad_value("--rows", ns.rows, "is a number of rows", "give 0 or more (0: the titles alone)")
    from decpriv.report.show import show_run

    return show_run(ns.run, console, ns.rows)


def diff_command(ns: argparse.Namespace, console: Console) -> int:
    for key in ("rtol", "atol"):
        if not getattr(ns, key) >= 0:  # a negative tolerance would call equal numbers different
            raise bad_value(f"--{key}", getattr(ns, key), "is a tolerance", "give 0 or more")
    from decpriv.report.show import print_diff

    return print_diff(ns.a, ns.b, ns.rtol, ns.atol, console, ns.format, ns.brief)


def report_command(ns: argparse.Namespace, console: Console) -> int:
    from decpriv.report.document import report
    from decpriv.report.text import print_frame

    doc, out = report(ns.target)
    console.print(f"[bold]{doc.title}[/]", highlight=False)
    for fact in doc.facts:
        console.print(fact, highlight=False)
    for caption, table in doc.tables:
        print_frame(table, caption, console, more="report.md")
    if doc.claim is not None:
        from decpriv.report.claims import print_claim

        print_claim(doc.claim, console, out)
    console.print(
        f"report: [bold]{out / 'report.html'}[/] (also report.md, aggregate.csv, {len(doc.figures)} plot(s))",
        highlight=False,
    )
    return 0


def runs_command(ns: argparse.Namespace, console: Console) -> int:
    from decpriv.report.runs_index import for_terminal, index, parse_filters
    from decpriv.report.text import markdown_table, print_frame

    table = index(ns.root, parse_filters(ns.filters))
    if ns.format == "csv":
        print(table.to_csv(index=False, float_format="%.10g", lineterminator="\n"), end="")
    elif ns.format == "markdown":
        print(markdown_table(table))
    else:
        shown = for_terminal(table, ns.root, console.width)
        title = f"{len(table)} run(s) under {ns.root} (runs relative to it; whole paths: --format csv)"
        print_frame(shown, title, console, rows=len(table))
    return 0
