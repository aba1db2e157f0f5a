"""`turnout plot availability` draws the on/off matrix of a config's availability model."""

from pathlib import Path

import numpy as np

from turnout.app.cli import main
from turnout.recorders.plots import availability_matrix

QUICKSTART = Path(__file__).resolve().parents[1] / "experiments" / "quickstart.yaml"


def test_plot_availability_writes_png(tmp_path, capsys):
    out = tmp_path / "cyc.png"
    assert main(["plot", "availability", str(QUICKSTART), "--set", "availability.name=cyclic",
                 "--set", "availability.m=5", "--rounds", "12", "--clients", "30", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_availability_bad_args_are_one_line_errors(tmp_path, capsys):
    assert main(["plot", "availability", str(QUICKSTART), "--out", str(tmp_path / "x.jpg")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--out" in err[0] and ".png" in err[0]
    assert main(["plot", "availability", str(QUICKSTART), "--rounds", "0", "--out", str(tmp_path / "x.png")]) == 2
    assert main(["plot", "availability", str(QUICKSTART), "--set", "availability.name=nope",
                 "--out", str(tmp_path / "x.png")]) == 2
    assert not (tmp_path / "x.png").exists()


def test_availability_matrix_matches_model():
    class Every3rd:
        def available(self, r, t):
            return (np.arange(9) % 3) == (r % 3)

    m = availability_matrix(Every3rd(), rounds=6, round_s=1.0, clients=9)
    assert m.shape == (9, 6) and m.sum(axis=0).tolist() == [3] * 6 and m[0].tolist() == [1, 0, 0, 1, 0, 0]
