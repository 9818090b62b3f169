"""A small markdown report writer shared by every reproduction.

Usage::

    rep = Report(out_dir, "Feldman, Lai & Zhang (2005): fixed-budget proportional share")
    rep.text("What was run ...")
    rep.table(dataframe, caption="Efficiency against number of users")
    rep.figure(fig, "efficiency", caption="...")   # saves efficiency.png
    rep.claims(claims)                             # a verdicts.Claims list (see below)
    path = rep.write()                             # out_dir/report.md (+ claims.csv)

Claims (:class:`marketsched.analysis.verdicts.Claims`) are the paper's quantitative claims with
our figure and the verdict of the one rule in :mod:`marketsched.analysis.verdicts` (v2, with
rule v1's beside it). The counts over every claims list of the report (lists marked ``ours``
excluded, and by v2 lists of ``settings``) go right under the title, and every row, ours
included, into ``claims.csv`` (columns ``verdict`` and ``counted`` for v2, ``verdict_v1`` and
``counted_v1`` for v1), which the scoreboard of ``docs/reproductions/README.md`` is built from.
"""

from __future__ import annotations

from pathlib import Path

VERDICT_LINK = "../README.md#how-verdicts-are-decided"  # the rule, in docs/reproductions/README.md


class Report:
    def __init__(self, out_dir, title: str):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.parts: list[str] = [f"# {title}\n"]
        self._claims: list = []

    def heading(self, text: str, level: int = 2) -> None:
        self.parts.append(f"{'#' * level} {text}\n")

    def text(self, text: str) -> None:
        self.parts.append(text.strip() + "\n")

    def table(self, df, caption: str | None = None, floatfmt: str = ".4g", index: bool = False) -> None:
        """Append a pandas DataFrame as a markdown table (also saved as CSV when captioned)."""
        if caption:
            self.parts.append(f"**{caption}**\n")
        self.parts.append(_markdown_table(df, floatfmt, index) + "\n")

    def figure(self, fig, stem: str, caption: str = "") -> Path:
        """Save a matplotlib figure as ``stem.png`` beside the report and link it."""
        import matplotlib.pyplot as plt

        path = self.out_dir / f"{stem}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        self.parts.append(f"![{caption or stem}]({path.name})\n\n*{caption}*\n" if caption else f"![{stem}]({path.name})\n")
        return path

    def claims(self, claims, intro: str = "") -> None:
        """Append a claims list (a :class:`~marketsched.analysis.verdicts.Claims`) as a table with its counts."""
        from marketsched.analysis.verdicts import counts_text

        self.heading(claims.title + (" (ours: not counted)" if claims.ours else
                                     " (settings: inputs, not counted)" if claims.settings else ""))
        if intro:
            self.text(intro)
        self.parts.append(f"*{counts_text(claims.counts())}* (rule v1: {counts_text(claims.counts('v1'))}).\n")
        self.parts.append(_markdown_table(claims.frame().drop(columns="verdict_v1"), ".4g", False) + "\n")
        self._claims.append(claims)

    def counts(self, rule: str = "v2") -> dict:
        """Verdict counts of ``rule`` over the report's counted claims (the paper's, not ours; by rule v2
        no settings either)."""
        from marketsched.analysis.verdicts import V1_VERDICTS, VERDICTS

        out = dict.fromkeys(VERDICTS if rule == "v2" else V1_VERDICTS, 0)
        for c in self._claims:
            if c.counted(rule):
                for k, v in c.counts(rule).items():
                    out[k] += v
        return out

    def write(self, name: str = "report.md") -> Path:
        parts = list(self.parts)
        if self._claims:
            import pandas as pd

            from marketsched.analysis.verdicts import counts_text

            parts.insert(1, f"**Scoreboard: {counts_text(self.counts())}** (the paper's claims only; verdicts by the "
                            "rule in [How verdicts are decided](../README.md#how-verdicts-are-decided); "
                            f"by its rule v1: {counts_text(self.counts('v1'))}).\n")
            frames = [c.frame().assign(section=c.title, counted=c.counted("v2"), counted_v1=c.counted("v1"))
                      for c in self._claims]
            pd.concat(frames, ignore_index=True).to_csv(self.out_dir / "claims.csv", index=False)
        path = self.out_dir / name
        path.write_text(self._local_links("\n".join(parts)))
        return path

    def _local_links(self, text: str) -> str:
        """``text`` with its link to the verdict rule kept where it resolves (a report under
        ``docs/reproductions/NAME``, beside the index) and otherwise pointed at ``verdicts.md``,
        the rule written beside the report (a report under ``results/NAME`` has no index above)."""
        target = f"]({VERDICT_LINK})"
        if target not in text:
            return text
        index = self.out_dir.parent / "README.md"
        if index.is_file() and "## How verdicts are decided" in index.read_text(encoding="utf-8"):
            return text
        from marketsched.analysis.verdicts import rule_markdown

        (self.out_dir / "verdicts.md").write_text(f"# How verdicts are decided\n\n{rule_markdown()}\n")
        return text.replace(target, "](verdicts.md)")


def _markdown_table(df, floatfmt: str, index: bool) -> str:
    if index:
        df = df.reset_index()
    header = [str(c) for c in df.columns]

    def fmt(v):
        if isinstance(v, float):
            return format(v, floatfmt)
        return str(v).replace("|", "\\|").replace("\n", " ")

    rows = [[fmt(v) for v in row] for row in df.itertuples(index=False, name=None)]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def scoreboard_markdown(docs_dir) -> str:
    """The scoreboard table of ``docs/reproductions/README.md``: verdict counts per report under rule v2
    and, on the row below, under rule v1, from each report's ``claims.csv`` (the paper's claims only),
    with the number of statements in the report's ``checklist.csv`` where it has one."""
    import pandas as pd

    from marketsched.analysis.verdicts import VERDICTS

    head = "| report | checklist | rule | rows | " + " | ".join(VERDICTS) + " |"
    lines = [head, "|" + "---|" * (4 + len(VERDICTS))]
    total = {rule: dict.fromkeys(VERDICTS, 0) for rule in ("v2", "v1")}
    for path in sorted(Path(docs_dir).glob("*/claims.csv")):
        df = pd.read_csv(path)
        name = path.parent.name
        for rule, counted, verdict in (("v2", "counted", "verdict"), ("v1", "counted_v1", "verdict_v1")):
            sub = df[df[counted]]
            n = {v: int((sub[verdict] == v).sum()) for v in VERDICTS}
            for v in VERDICTS:
                total[rule][v] += n[v]
            label = f"[{name}]({name}/report.md)" if rule == "v2" else ""
            checklist = path.parent / "checklist.csv"
            listed = str(len(pd.read_csv(checklist))) if rule == "v2" and checklist.is_file() else \
                "-" if rule == "v2" else ""
            lines.append(f"| {label} | {listed} | {rule} | {len(sub)} | "
                         + " | ".join(str(n[v]) for v in VERDICTS) + " |")
    for rule in ("v2", "v1"):
        lines.append(f"| {'**all**' if rule == 'v2' else ''} |  | {rule} | {sum(total[rule].values())} | "
                     + " | ".join(str(total[rule][v]) for v in VERDICTS) + " |")
    return "\n".join(lines)


RULE_BEGIN, RULE_END = "<!-- verdict rule: generated -->", "<!-- end of the verdict rule -->"
BOARD_BEGIN, BOARD_END = "<!-- scoreboard: generated -->", "<!-- end of the scoreboard -->"


def update_index(docs_dir) -> Path:
    """Rewrite the generated blocks of ``docs_dir/README.md`` (the verdict rule and the scoreboard)
    between their markers: ``python -m marketsched.experiments.report docs/reproductions``."""
    from marketsched.analysis.verdicts import rule_markdown

    path = Path(docs_dir) / "README.md"
    text = path.read_text()
    for begin, end, body in ((RULE_BEGIN, RULE_END, rule_markdown()), (BOARD_BEGIN, BOARD_END,
                                                                      scoreboard_markdown(docs_dir))):
        if begin not in text or end not in text:
            raise ValueError(f"{path}: the markers {begin!r} and {end!r} are missing")
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{begin}\n{body}\n{end}{tail}"
    path.write_text(text)
    return path


if __name__ == "__main__":
    import sys

    print(update_index(sys.argv[1] if len(sys.argv) > 1 else "docs/reproductions"))
