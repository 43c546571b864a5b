"""The browser's Moses tokenizer and detokenizer (static/web/moses.js) against sacremoses, as
alignmt's MosesTokenizer runs it: the same tokens and the same text on every sentence of the
corpora the catalogue gets, cased and lowercased, and on sentences made to reach every rule."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from alignmt.answers.site import STATIC
from alignmt.answers.web_tokenizers import MOSES_LANGS
from alignmt.text.corpus import read_lines
from alignmt.text.tokenize import MosesTokenizer

# Each reaches rules the corpora rarely do: runs of dots, numbers with commas, nonbreaking
# prefixes (numeric-only ones too), every language's apostrophes, quotes, brackets,
# currency, symbols, control characters, other spaces, CJK and characters outside the BMP.
EDGES = [
    'He said... "no"...',
    "It costs $5,300.50 (approx.)!",
    "Mr. Smith met Dr. Jones at 5 p.m. on Jan. 3.",
    "No. 5 and No. 6. No. Never. Art. 12 Nr. 3 z.B. usw.",
    "l'homme qu'il a vu aujourd'hui ; c'est l'été !",
    "The Jones' house isn't 'big'. Rock 'n' roll in the '90s, 5's and 6's.",
    'A--B -- c and/or [x] {y} <z> a&b|c"f',
    "tab\there\u00a0no-break\u202fnarrow\u3000ideographic\x0bvertical",
    "東京 に 行く 東京タワー",
    "€5 £3 ¥7 ₹9 ¿Qué? ¡Sí! 30°C 50% #tag @user",
    "„Anführungszeichen“ und »Guillemets« «français» ‚einfach‘",
    "emoji 😀 here. 𝒳 outside the BMP.",
    "x.. y.... z. .. . '",
    "\x01control\x1fcharacters\x7f",
    "He said: 'hi.'",
    "e.g. U.S.A. St. Louis Hello World. This is",
    "",
    "   ",
]


def corpus_sentences(root: Path) -> dict[str, list[str]]:
    """Language -> every sentence of every file the catalogue got into `root`."""
    by_lang: dict[str, list[str]] = {lang: [] for lang in MOSES_LANGS}
    for path in sorted(root.rglob("*.gz")):  # multi30k's train.en.gz, ...
        by_lang[path.name.split(".")[1]] += read_lines(path)
    for path in sorted(root.rglob("*.tsv")):  # tatoeba's english<TAB>french<TAB>attribution
        rows = [line.split("\t") for line in read_lines(path)]
        by_lang["en"] += [row[0] for row in rows]
        by_lang["fr"] += [row[1] for row in rows]
    return by_lang


def cases(by_lang: dict[str, list[str]]) -> list[dict]:
    """What sacremoses says of each sentence, cased and lowercased, and of token sequences no
    sentence has: each language's tokens shuffled into 2,000 random sequences, for the
    detokenizer's quote counting and contractions."""
    out = []
    rng = random.Random(0)
    for lang, sentences in by_lang.items():
        for lowercase in (False, True):
            moses = MosesTokenizer(lang=lang, lowercase=lowercase)
            tokens = [moses.encode(s) for s in sentences]
            vocab = [*sorted({t for ts in tokens for t in ts}), "'", '"', "„", "“", "``", "s"]
            tokens += [rng.choices(vocab, k=rng.randint(1, 12)) for _ in range(2000)]
            out.append(
                {
                    "lang": lang,
                    "lowercase": lowercase,
                    "sentences": sentences,
                    "tokens": tokens,
                    "texts": [moses.decode(ts) for ts in tokens],
                }
            )
    return out


# The page: fetches the cases, runs moses.js on them, and returns the counts and the first
# differences (not 100,000 answers through WebDriver).
PAGE = """<!doctype html><script type="module">
import { MosesDetokenizer, MosesTokenizer } from "./moses.js";
const cases = await (await fetch("cases.json")).json();
const result = { sentences: 0, sequences: 0, differ: [] };
for (const c of cases) {
  const [cut, join] = [new MosesTokenizer(c.lang), new MosesDetokenizer(c.lang)];
  c.sentences.forEach((s, i) => {
    const got = cut.tokenize(c.lowercase ? s.toLowerCase() : s);
    const want = c.tokens[i];
    if (JSON.stringify(got) !== JSON.stringify(want)) result.differ.push([s, got, want]);
  });
  c.tokens.forEach((tokens, i) => {
    const got = join.detokenize(tokens);
    if (got !== c.texts[i]) result.differ.push([tokens, got, c.texts[i]]);
  });
  result.sentences += c.sentences.length;
  result.sequences += c.tokens.length;
}
window.result = result;
</script>"""


def run_in_page(browser, host, folder: Path, checked: list[dict]) -> dict:
    """moses.js's answers to `checked` in Chromium: {sentences, sequences, differ}."""
    for name in ("moses.js", "moses_tables.js"):
        shutil.copy(STATIC / "web" / name, folder / name)
    (folder / "cases.json").write_text(json.dumps(checked, ensure_ascii=False), encoding="utf-8")
    (folder / "index.html").write_text(PAGE, encoding="utf-8")
    browser.get(host(folder) + "index.html")
    browser.set_script_timeout(300)
    return browser.execute_async_script(
        """const done = arguments[0];
        const wait = () => (window.result ? done(window.result) : setTimeout(wait, 50));
        wait();"""
    )


def test_the_twin_cuts_and_joins_every_corpus_sentence_as_sacremoses(
    _shared_corpora, browser, host, tmp_path
):
    by_lang = corpus_sentences(_shared_corpora)
    checked = cases(by_lang)
    result = run_in_page(browser, host, tmp_path, checked)
    assert result["differ"] == []
    # Multi30k's English and German train, val and test_2016_flickr; Tatoeba's 5,000 pairs
    assert sum(map(len, by_lang.values())) == 2 * (29000 + 1014 + 1000) + 2 * 5000
    assert result["sentences"] == 2 * sum(map(len, by_lang.values()))
    assert result["sequences"] == result["sentences"] + 2 * 2000 * len(MOSES_LANGS)


def test_the_twin_reaches_every_rule_as_sacremoses(browser, host, tmp_path):
    checked = cases({lang: EDGES for lang in MOSES_LANGS})
    result = run_in_page(browser, host, tmp_path, checked)
    assert result["differ"] == []
    # the edges do reach the rules: dots, prefixes, apostrophes and quotes all move
    english = MosesTokenizer(lang="en").encode(EDGES[0] + " " + EDGES[2])
    assert english[:4] == ["He", "said", "...", '"'] and "p.m." in english and "3" in english


def test_the_tables_are_sacremoses_own(tmp_path):
    from web.moses_tables import LANGS, write

    assert LANGS == MOSES_LANGS
    written = write(tmp_path / "moses_tables.js")
    committed = (STATIC / "web" / "moses_tables.js").read_text(encoding="utf-8")
    assert written == committed, "run `python web/moses_tables.py` (sacremoses changed)"


@pytest.mark.parametrize("lang", ["cs", "es"])
def test_a_language_without_tables_is_refused_in_the_page_by_name(lang, browser, host, tmp_path):
    for name in ("moses.js", "moses_tables.js"):
        shutil.copy(STATIC / "web" / name, tmp_path / name)
    (tmp_path / "index.html").write_text("<!doctype html><title>moses</title>", encoding="utf-8")
    browser.get(host(tmp_path) + "index.html")
    said = browser.execute_async_script(
        """const [lang, done] = arguments;
        import("./moses.js").then(({ MosesTokenizer }) => {
          try { new MosesTokenizer(lang); done("made"); } catch (e) { done(e.message); }
        });""",
        lang,
    )
    assert said == f"Moses' rules for {lang} do not run in the browser (it has en, de, fr)"
