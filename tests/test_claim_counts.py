"""The results overview's counts line and claim tables are the pages': counted by one function, checked here."""

import shutil
from pathlib import Path

import pytest

from turnout.app.reproduce.claims import count_claims, counts_line, main, read_claims, readme_problems

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"

HEAD = "| claim | paper | ours | verdict | why it differs |\n|---|---|---|---|---|\n"


def page(folder: Path, stem: str, rows: str, head: str = HEAD) -> Path:
    path = folder / f"{stem}.md"
    path.write_text(f"# {stem}\n\nSome text.\n\n{head}{rows}\nWhat comes out: prose.\n\n| method | x |\n|---|---|\n")
    return path


def test_readme_counts_line_and_tables_are_the_pages():
    problems = readme_problems(RESULTS)
    assert problems == [], "; ".join(problems) + " (run `python -m turnout.app.reproduce.claims docs/results --write`)"
    counts = count_claims(RESULTS)
    assert counts_line(counts) in (RESULTS / "README.md").read_text()
    from turnout.app.reproduce.spec import names

    assert counts.pages == len(names())  # every seed paper's page; turnout's own studies (privacy.md) claim nothing


def test_counts_by_hand(tmp_path):
    """a: three rows; b: a repeat of a's first claim (linked, qualifier added), a qualified verdict and the same
    words as a's second claim without a link (a second setting: counted); c has no claim table.
    Distinct claims: a's 3 + b's 2 = 5 — reproduced 1, partly 2, not reproduced 1, not testable 1."""
    page(tmp_path, "a", "| Claim one | Fig. 1 | 1 vs 2 | **reproduced** (was partly) | — |\n"
                        "| Claim two | Fig. 2 | 3 | **partly** | smaller |\n"
                        "| Claim three | Fig. 3 | 4 | **≈ B; not testable under the reconstruction** | lost |\n")
    page(tmp_path, "b", "| **partly** (at K = 10) | Claim two | 5 |\n"
                        "| **not reproduced** (DV); TV **reproduced** | Claim four | 6 |\n"
                        "| **reproduced** | Claim *one* (App. H) | on [a's page](a.md) |\n",
         head="| verdict | claim | ours |\n|---|---|---|\n")
    (tmp_path / "c.md").write_text("# c\n\n| method | x |\n|---|---|\n| a | 1 |\n")
    (tmp_path / "README.md").write_text("overview\n")
    counts = count_claims(tmp_path)
    assert counts.by_verdict == {"reproduced": 1, "partly": 2, "not reproduced": 1, "not testable": 1}
    assert (counts.total, counts.pages, counts.repeats) == (5, 2, 1)
    assert [c.repeats for c in read_claims(tmp_path)] == [None, None, None, None, None, "a"]
    assert counts_line(counts) == ("**5 claims** over the 2 pages: 1 reproduced, 2 partly, 1 not reproduced, "
                                   "1 not testable (counted from the pages' claim tables below; 1 row repeating "
                                   "another page's claim is counted there).")


def test_a_repeat_must_agree_and_a_verdict_must_be_bold(tmp_path, capsys):
    page(tmp_path, "a", "| Claim one | Fig. 1 | 1 | **reproduced** | — |\n")
    page(tmp_path, "b", "| Claim one | Fig. 1 | [there](a.md) | **partly** | — |\n")
    (tmp_path / "README.md").write_text("overview\n")
    with pytest.raises(ValueError, match="b.md repeats a.md's claim 'Claim one' with the verdict 'partly'"):
        count_claims(tmp_path)
    page(tmp_path, "b", "| Claim one | Fig. 1 | elsewhere | reproduced | — |\n")
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: b.md line 7: verdict cell 'reproduced' does not start with a bold verdict (reproduced, "
                   "partly, not reproduced, not testable)"]


def test_check_fails_when_the_readme_drifts_and_write_mends_it(tmp_path, capsys):
    for p in RESULTS.glob("*.md"):
        shutil.copy(p, tmp_path / p.name)
    readme = tmp_path / "README.md"
    good = readme.read_text()
    assert main([str(tmp_path)]) == 0
    line = counts_line(count_claims(tmp_path))
    readme.write_text(good.replace(line, "**77 claims**: 34 reproduced, 20 partly, 22 not reproduced, 1 not testable."))
    assert readme_problems(tmp_path) == ["README.md's counts line or a page's claims block differs from the pages"]
    # a page's claims left out of the overview (as gluefl_k10's were)
    start, end = good.index("<!-- claims: gluefl_k10 -->"), good.index("<!-- /claims -->", good.index("gluefl_k10 -->"))
    readme.write_text(good[:start] + good[end + len("<!-- /claims -->"):])
    assert readme_problems(tmp_path) == ["README.md has no <!-- claims: gluefl_k10 --> block: the gluefl_k10 page's "
                                         "claims are left out"]
    assert main([str(tmp_path)]) == 1
    # a page's claim row edited, the overview not regenerated: the check fails; --write mends it
    readme.write_text(good)
    k10 = tmp_path / "gluefl_k10.md"
    k10.write_text(k10.read_text().replace("| **reproduced** |", "| **partly** |", 1))
    assert main([str(tmp_path)]) == 1
    assert main([str(tmp_path), "--write"]) == 0
    assert readme_problems(tmp_path) == []
    before, after = count_claims(RESULTS).by_verdict, count_claims(tmp_path).by_verdict
    assert (after["reproduced"], after["partly"]) == (before["reproduced"] - 1, before["partly"] + 1)
    assert counts_line(count_claims(tmp_path)) in readme.read_text()
