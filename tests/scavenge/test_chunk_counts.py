"""The chunk figures of a run's progress count the phase's own chunks: chunk execution reports the
database's completed chunks below the scavenge point, not accumulation's count added to its own (the
dashboard showed ``chunks 98 of 107`` for a 58-chunk database)."""

from __future__ import annotations

from test_runs import fill

from evdb.scavenge.service import ScavengeRequest


def test_execution_counts_the_database_s_chunks_once(make_harness, tmp_path):
    h = make_harness(tmp_path / "counts")
    fill(h)
    h.complete_chunk()
    completed = sum(1 for c in h.db.log.distinct_chunks() if c.is_completed)
    h.service.start(ScavengeRequest())
    assert h.service.wait(60)
    figures = h.service.last_progress()
    assert figures.result == "Success", figures
    # the last phase that counts chunks (execution) counted each completed chunk below the point once
    assert (figures.chunks_done, figures.chunks_total) == (completed, completed)
