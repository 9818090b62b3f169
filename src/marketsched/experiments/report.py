"""A small markdown report writer shared by every reproduction.

Usage::

    rep = Report(out_dir, "Feldman et al. 2005: fixed-budget proportional share")
    rep.text("What was run ...")
    rep.table(dataframe, caption="Efficiency against number of users")
    rep.figure(fig, "efficiency", caption="...")   # saves efficiency.png
    path = rep.write()                             # out_dir/report.md
"""

from __future__ import annotations

from pathlib import Path


class Report:
    def __init__(self, out_dir, title: str):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.parts: list[str] = [f"# {title}\n"]

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

    def write(self, name: str = "report.md") -> Path:
        path = self.out_dir / name
        path.write_text("\n".join(self.parts))
        return path


def _markdown_table(df, floatfmt: str, index: bool) -> str:
    if index:
        df = df.reset_index()
    header = [str(c) for c in df.columns]

    def fmt(v):
        if isinstance(v, float):
            return format(v, floatfmt)
        return str(v)

    rows = [[fmt(v) for v in row] for row in df.itertuples(index=False, name=None)]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
