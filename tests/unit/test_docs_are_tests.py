"""Every shell block of the pages users run commands from is run by an e2e test, or says why not
(tests/docs.py has the markers): a command added to a page without either fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs import DOCS, REPO_ROOT, DocSession, blocks, shell_blocks, step_blocks, stray_markers


@pytest.mark.parametrize("doc", DOCS)
def test_every_shell_block_is_run_by_a_test_or_says_why_not(doc: str) -> None:
    unmarked = [b.where for b in shell_blocks(doc) if b.run_by is None and not b.skip_reason]
    assert not unmarked, (
        f"shell blocks with no `<!-- doc-test: tests/e2e/test_x.py#step -->` (run by that test) and no "
        f"`<!-- doc-test: skip: reason -->` on the line before the fence: {unmarked}"
    )


@pytest.mark.parametrize("doc", DOCS)
def test_every_named_test_runs_that_step_of_that_page(doc: str) -> None:
    for block in shell_blocks(doc):
        if block.run_by is None:
            continue
        test, step = block.run_by
        source = REPO_ROOT / test
        assert source.is_file(), f"{block.where}: {test} does not exist"
        assert f'"{doc}", "{step}"' in source.read_text(), f"{block.where}: {test} never runs ({doc!r}, {step!r})"


@pytest.mark.parametrize("doc", DOCS)
def test_every_marker_stands_before_a_fence(doc: str) -> None:
    assert stray_markers(doc) == []


def test_a_page_is_read_as_github_renders_it(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# t\n\n<!-- doc-test: tests/e2e/test_release.py#verify -->\n```sh\necho one\n```\n\n"
        "<!-- doc-test: skip: placeholders -->\n\n```bash\nkind load <archive>\n```\n\n"
        "```yaml\na: 1\n```\n\n```sh\nunmarked\n```\n\n<!-- doc-test: skip: gone -->\ntext\n"
    )
    found = blocks("page.md", tmp_path)
    assert [(b.line, b.lang, b.text) for b in found] == [
        (4, "sh", "echo one\n"),
        (10, "bash", "kind load <archive>\n"),
        (14, "yaml", "a: 1\n"),
        (18, "sh", "unmarked\n"),
    ]
    assert found[0].run_by == ("tests/e2e/test_release.py", "verify") and found[0].skip_reason is None
    assert found[1].skip_reason == "placeholders" and found[1].run_by is None
    assert found[3].marker is None
    assert [b.line for b in shell_blocks("page.md", tmp_path)] == [4, 10, 18]
    assert step_blocks("page.md", "tests/e2e/test_release.py", "verify", tmp_path) == [found[0]]
    assert stray_markers("page.md", tmp_path) == ["page.md:22"]


def test_a_step_runs_its_blocks_in_one_shell_session_with_the_substitutions(tmp_path: Path) -> None:
    (tmp_path / "page.md").write_text(
        "<!-- doc-test: tests/e2e/test_x.py#one -->\n```sh\nVERSION=1.2.3\nURL=https://upstream.example/v$VERSION\n```\n"
        "<!-- doc-test: tests/e2e/test_x.py#other -->\n```sh\nexit 3\n```\n"
        '<!-- doc-test: tests/e2e/test_x.py#one -->\n```sh\necho "$URL" > got\n```\n'
    )
    (tmp_path / "user").mkdir()
    session = DocSession(
        "tests/e2e/test_x.py",
        tmp_path / "user",
        {"PATH": "/usr/bin:/bin"},
        {"https://upstream.example": "https://127.0.0.1:1"},
        root=tmp_path,
    )
    session.run("page.md", "one")
    assert (tmp_path / "user" / "got").read_text() == "https://127.0.0.1:1/v1.2.3\n"
    assert session.ran == ["page.md:2", "page.md:11"]
    with pytest.raises(AssertionError, match=r"page.md:7 failed \(exit 3\)"):
        session.run("page.md", "other")
