"""``bench.smtp_e2e``'s series of sink runs: every run stores into a Maildir of its own, and
none is removed before the series ends (removing one run's thousands of files just before the
next run creates its own slowed that run's sink on ext4 without a journal: ``run_maildir``)."""

from __future__ import annotations

from pathlib import Path

from bench.smtp_e2e import measure_bare_smtp, measure_smtp, run_maildir

MESSAGES = 6


def test_a_series_keeps_every_runs_maildir_until_the_series_folder_goes(
    tmp_path: Path, db_url: str
) -> None:
    series = tmp_path / "series"
    series.mkdir()
    bare = measure_bare_smtp(MESSAGES, 2, series=series)
    herald = measure_smtp(db_url, MESSAGES, 2, series=series)

    assert bare.messages == MESSAGES
    assert herald.stored == MESSAGES
    runs = sorted(series.iterdir())
    assert len(runs) == 2
    for run in runs:
        assert len(list((run / "Maildir" / "new").iterdir())) == MESSAGES


def test_without_a_series_a_run_removes_its_own_maildir(tmp_path: Path) -> None:
    with run_maildir(None) as maildir:
        maildir.mkdir(parents=True)
        (maildir / "message").write_text("kept for the run")
        assert maildir.parent.exists()
    assert not maildir.parent.exists()


def test_runs_of_one_series_never_share_a_maildir(tmp_path: Path) -> None:
    with run_maildir(tmp_path) as first, run_maildir(tmp_path) as second:
        assert first != second
        assert first.parent.parent == second.parent.parent == tmp_path
    assert first.parent.exists()
    assert second.parent.exists()
