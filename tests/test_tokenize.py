from __future__ import annotations

import gzip
import itertools
import json
import random
from dataclasses import replace

import pytest
from sacremoses import MosesDetokenizer
from sacremoses import MosesTokenizer as SacreMosesTokenizer

from alignmt.analysis.scores import corpus_scores
from alignmt.checkpoint.format import header_metadata, parse_header
from alignmt.config import Config, DataConfig
from alignmt.text.escape import moses_escape, moses_unescape
from alignmt.text.prepare import Text, prepare_text
from alignmt.text.tokenize import (
    CharTokenizer,
    D2lTokenizer,
    MosesTokenizer,
    SentencePieceTokenizer,
    SpaceTokenizer,
    Tokenizer,
    build_tokenizer,
    tokenizer_from_json,
)
from alignmt.text.vocab import UNK, Vocab
from tests.conftest import SHARED, needs_shared_data

WORDS = ["Ein", "Mann", "Frau", "Hund", "läuft", "über", "die", "Straße"]
WORDS += ["the", "dog", "runs", "across", "a", "green", "field"]


def synthetic_sentences(n: int = 200, seed: int = 0) -> list[str]:
    """Sentences of 3-9 words from `WORDS`, some with commas, each ending in "." or "!"."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(n):
        words = rng.choices(WORDS, k=rng.randint(3, 9))
        if rng.random() < 0.3:
            words[0] += ","
        sentences.append(" ".join(words) + rng.choice(".!"))
    return sentences


@pytest.fixture(scope="module")
def sentences() -> list[str]:
    return synthetic_sentences()


@pytest.fixture(scope="module")
def sp(sentences) -> SentencePieceTokenizer:
    return SentencePieceTokenizer.train(sentences, vocab_size=60)


# --- Moses --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lang", "text"),
    [
        ("en", "Don't stop."),
        ("en", "The dog's ball, \"red\" and (small), isn't here!"),
        ("de", 'Ein Mann, der "Hallo" sagt.'),
        ("de", "Zwei Hunde spielen im Schnee; einer trägt 3,5 kg: viel?"),
    ],
)
def test_moses_decode_restores_the_sentence_it_encoded(lang, text):
    tokenizer = MosesTokenizer(lang=lang)
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_moses_splits_punctuation_and_leaves_apostrophes_and_quotes_unescaped():
    tokenizer = MosesTokenizer(lang="en")
    assert tokenizer.encode("Don't stop.") == ["Don", "'t", "stop", "."]
    assert tokenizer.encode('Tom & "Jerry".') == ["Tom", "&", '"', "Jerry", '"', "."]


def test_moses_decode_keeps_unk_tokens_as_written():
    tokenizer = MosesTokenizer(lang="en")
    tokens = ["<unk>", "dog", "sat", "on", "the", "<unk>", ",", "<unk>", "."]
    assert tokenizer.decode(tokens) == "<unk> dog sat on the <unk>, <unk>."


def test_moses_decode_does_not_unescape_entities_it_never_escaped():
    assert MosesTokenizer(lang="en").decode(["AT", "&amp;", "T"]) == "AT &amp; T"


def test_moses_lowercases_only_when_asked():
    assert MosesTokenizer(lang="de").encode("Ein Mann.") == ["Ein", "Mann", "."]
    assert MosesTokenizer(lang="de", lowercase=True).encode("Ein Mann.") == ["ein", "mann", "."]


# --- Characters ---------------------------------------------------------------------------


def test_char_tokens_are_characters_with_visible_spaces():
    assert CharTokenizer().encode("a b") == ["a", "▁", "b"]
    assert CharTokenizer().encode("Ab c") == ["A", "b", "▁", "c"]


def test_char_decode_restores_every_space():
    tokenizer = CharTokenizer()
    text = " Ein  Mann, über 3 Hunde. "
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_char_lowercases_only_when_asked():
    assert CharTokenizer(lowercase=True).encode("Ab") == ["a", "b"]
    assert CharTokenizer(lowercase=False).encode("Ab") == ["A", "b"]


# --- SentencePiece ------------------------------------------------------------------------


def test_sentencepiece_decode_restores_the_sentences(sp, sentences):
    unseen = ["Ein Hund läuft, the Frau runs!", "a green Hund."]
    for text in [*sentences, *unseen]:
        assert sp.decode(sp.encode(text)) == text


def test_sentencepiece_learns_pieces_longer_than_one_character(sp, sentences):
    pieces = {piece for text in sentences for piece in sp.encode(text)}
    assert max(len(piece.lstrip("▁")) for piece in pieces) > 1
    assert len(pieces) <= 60


@pytest.mark.parametrize("model_type", ["bpe", "unigram"])
def test_sentencepiece_training_twice_gives_the_same_model_bytes(sentences, model_type):
    first = SentencePieceTokenizer.train(sentences, vocab_size=60, model_type=model_type)
    second = SentencePieceTokenizer.train(sentences, vocab_size=60, model_type=model_type)
    assert first.model == second.model


def test_sentencepiece_lowercases_before_training_and_before_encoding(sentences):
    sp = SentencePieceTokenizer.train(sentences, vocab_size=60, lowercase=True)
    lowered = SentencePieceTokenizer.train([s.lower() for s in sentences], vocab_size=60)
    cased = SentencePieceTokenizer.train(sentences, vocab_size=60)
    assert sp.model == lowered.model != cased.model
    pieces = sp.encode("Ein Mann läuft über die Straße.")
    assert pieces == sp.encode("ein mann läuft über die straße.")
    assert sp.decode(pieces) == "ein mann läuft über die straße."


def test_sentencepiece_decodes_pieces_the_model_lacks_as_its_unknown_mark(sp):
    tokens = [*sp.encode("the dog"), "<unk>", "not-a-piece", *sp.encode("runs.")]
    # " ⁇ " is SentencePiece's surface for an unknown piece; the raw piece must not leak.
    assert sp.decode(tokens) == "the dog" + " ⁇ " * 2 + " runs."


# --- A corpus tokenised already (space) -------------------------------------------------

# Lines as Moses-preprocessed data comes: tokenised, special characters escaped.
ESCAPED = [
    "Parliament &apos;s prerogative , &quot; he said &quot; .",
    "Smith &amp; Wesson &#124; 1 &lt; 2 &gt; 0",
    "see &#91; 3 &#93; , the Commission &apos;s view",
    "&amp;",
]


def test_moses_cuts_escaped_entities_apart_which_is_why_space_exists():
    assert MosesTokenizer(lang="en").encode(ESCAPED[0])[:4] == ["Parliament", "&", "apos", ";"]


def test_space_keeps_the_corpus_tokens_intact():
    assert SpaceTokenizer().encode(ESCAPED[0]) == ESCAPED[0].split(" ")
    assert SpaceTokenizer().encode("  a\xa0b  c ") == ["a\xa0b", "c"]  # spaces alone split


@pytest.mark.parametrize(
    ("escaped", "text"),
    [
        ("&apos;s", "'s"),
        ("&quot;", '"'),
        ("&amp;", "&"),
        ("&#124;", "|"),
        ("&lt;unk&gt;", "<unk>"),
        ("&#91;3&#93;", "[3]"),
        ("&bar; &bra; &ket;", "| [ ]"),  # older Moses releases' names
        ("&amp;apos;", "&apos;"),  # an escaped entity is text
        ("AT&T &nbsp; &APOS;", "AT&T &nbsp; &APOS;"),  # no entity of Moses'
    ],
)
def test_unescape_gives_the_characters_moses_escaped(escaped, text):
    assert moses_unescape(escaped) == text
    assert MosesDetokenizer().unescape_xml(escaped) == text  # sacremoses agrees


def test_escape_writes_the_entities_moses_writes():
    text = "a & b | c < d > e ' f \" g [ h ] &amp;"
    assert moses_escape(text) == SacreMosesTokenizer().escape_xml(text)
    assert moses_unescape(moses_escape(text)) == text


def test_unescaping_space_gives_real_characters_and_decodes_to_the_line_again():
    tokenizer = SpaceTokenizer(unescape=True)
    assert tokenizer.encode(ESCAPED[0])[:5] == ["Parliament", "'s", "prerogative", ",", '"']
    assert tokenizer.encode(ESCAPED[1]) == ["Smith", "&", "Wesson", "|", "1", "<", "2", ">", "0"]
    assert tokenizer.encode(ESCAPED[2])[:4] == ["see", "[", "3", "]"]
    for line in ESCAPED:
        assert tokenizer.decode(tokenizer.encode(line)) == line
        assert SpaceTokenizer().decode(SpaceTokenizer().encode(line)) == line


def test_space_decode_escapes_tokens_but_not_unk():
    tokenizer = SpaceTokenizer(unescape=True)
    assert tokenizer.decode(["it", "'s", UNK, "<b>"]) == "it &apos;s <unk> &lt;b&gt;"


def test_space_unescapes_before_lowercasing():
    tokenizer = SpaceTokenizer(lowercase=True, unescape=True)
    assert tokenizer.encode("The &QUOT; &quot; Dog") == ["the", "&quot;", '"', "dog"]


def test_unescaped_output_scores_full_bleu_against_the_escaped_references():
    tokenizer = SpaceTokenizer(unescape=True)
    hyps = [tokenizer.decode(tokenizer.encode(line)) for line in ESCAPED]
    assert corpus_scores(hyps, ESCAPED).bleu == pytest.approx(100)


def test_a_checkpoint_header_gives_back_the_space_tokenizer():
    tokenizers = (SpaceTokenizer(unescape=True), SpaceTokenizer(lowercase=True))
    vocab = Vocab(["a"])
    meta = header_metadata(Config(), vocab, vocab, 3, tokenizers)
    header = parse_header("x.safetensors", meta)
    assert header.src_tokenizer.encode(ESCAPED[0])[1] == "'s"
    assert header.tgt_tokenizer.encode("&APOS;s")[0] == "&apos;s"
    assert [header.src_tokenizer.to_json(), header.tgt_tokenizer.to_json()] == [
        t.to_json() for t in tokenizers
    ]


ESCAPED_DE = ["das Recht , &quot; sagte er &quot; .", "A &amp; B &#124; 1 &lt; 2", "x", "&amp;"]


def prepare_escaped(tmp_path, **data) -> Text:
    """An escaped corpus (ESCAPED -> ESCAPED_DE) prepared with `data`; it validates on
    itself."""
    for lang, lines in (("en", ESCAPED), ("de", ESCAPED_DE)):
        (tmp_path / f"train.{lang}").write_text("".join(line + "\n" for line in lines))
    prefix = str(tmp_path / "train")
    cache = str(tmp_path / "cache")
    cfg = DataConfig(task="corpus", train=prefix, valid=prefix, cache_dir=cache, workers=1)
    return prepare_text(replace(cfg, **data), seed=1)


def entity_tokens(text: Text) -> set[str]:
    tokens = {*text.src_vocab.itos, *text.tgt_vocab.itos}
    return {token for token in tokens if "apos" in token or "quot" in token or "#" in token}


def test_moses_makes_words_of_an_escaped_corpus_s_entity_names(tmp_path):
    assert {"apos", "quot"} <= entity_tokens(prepare_escaped(tmp_path, tokenizer="moses"))


def test_an_escaped_corpus_prepared_with_unescaping_space_has_the_characters(tmp_path):
    text = prepare_escaped(tmp_path, tokenizer="space", unescape=True)
    assert not entity_tokens(text)
    assert {"'s", '"', "&", "|", "<", ">", "[", "]"} <= {*text.src_vocab.itos}
    src, tgt = text.tokenizers
    assert [src.decode(src.encode(p.src)) for p in text.valid] == ESCAPED
    assert [tgt.decode(tgt.encode(p.tgt)) for p in text.valid] == ESCAPED_DE
    assert all(text.src_vocab.unk_id not in ids for ids, _ in text.valid_ids)
    first = text.train.pairs([0])[0][0]
    assert [text.src_vocab.itos[i] for i in first][:2] == ["Parliament", "'s"]


# --- JSON and the factory -----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["moses", "char", "sentencepiece", "d2l", "space"])
@pytest.mark.parametrize("lowercase", [False, True])
def test_from_json_rebuilds_a_tokenizer_that_encodes_the_same(kind, lowercase, sentences):
    original = build_tokenizer(
        kind, lang="de", lowercase=lowercase, train_sentences=sentences, vocab_size=60
    )
    text = original.to_json()
    rebuilt = tokenizer_from_json(text)
    assert isinstance(text, str) and json.loads(text)["kind"] == kind
    assert type(rebuilt) is type(original)
    assert rebuilt.to_json() == text
    probes = [*sentences[:20], 'Der Hund\'s Ball, "grün"!']
    assert [rebuilt.encode(s) for s in probes] == [original.encode(s) for s in probes]


@pytest.mark.parametrize("kind", ["moses", "char", "sentencepiece", "d2l", "space"])
@pytest.mark.parametrize("lowercase", [False, True])
def test_encode_batch_gives_the_tokens_encode_gives(kind, lowercase, sentences):
    tokenizer = build_tokenizer(
        kind, lang="de", lowercase=lowercase, train_sentences=sentences, vocab_size=60
    )
    # Characters the SentencePiece model never saw: unknown pieces keep their own text.
    probes = [*sentences[:30], "Größe: ÄÖÜ ß €5 — ok", "", "Zoë says ☃ ☃"]
    encoded = tokenizer.encode_batch(probes)
    assert encoded.lengths.tolist() == [len(tokenizer.encode(s)) for s in probes]
    flat = [encoded.table[code] for code in encoded.codes.tolist()]
    assert flat == [token for s in probes for token in tokenizer.encode(s)]
    assert len(set(encoded.table)) == len(encoded.table)


def test_from_json_rejects_an_unknown_kind_and_names_it():
    with pytest.raises(ValueError, match="'wordpiece'"):
        tokenizer_from_json(json.dumps({"kind": "wordpiece", "lowercase": False}))


@pytest.mark.parametrize(
    ("kind", "cls"),
    [
        ("moses", MosesTokenizer),
        ("char", CharTokenizer),
        ("sentencepiece", SentencePieceTokenizer),
        ("d2l", D2lTokenizer),
        ("space", SpaceTokenizer),
    ],
)
def test_build_tokenizer_makes_the_kind_asked_for(kind, cls, sentences):
    tokenizer = build_tokenizer(
        kind, lang="en", lowercase=True, train_sentences=sentences, vocab_size=60
    )
    assert isinstance(tokenizer, cls) and isinstance(tokenizer, Tokenizer)
    assert tokenizer.encode("The DOG") == tokenizer.encode("the dog")


def test_build_tokenizer_refuses_sentencepiece_without_training_sentences():
    with pytest.raises(ValueError, match="train_sentences"):
        build_tokenizer("sentencepiece", lang="en", lowercase=False)


def test_build_tokenizer_rejects_an_unknown_kind():
    with pytest.raises(ValueError, match="'words'"):
        build_tokenizer("words", lang="en", lowercase=False)  # type: ignore[arg-type]


# --- Real data ----------------------------------------------------------------------------


@pytest.mark.needs_shared_data
@needs_shared_data
def test_moses_round_trip_restores_almost_every_multi30k_german_line():
    with gzip.open(SHARED / "data" / "multi30k" / "val.de.gz", "rt", encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in itertools.islice(f, 200)]
    tokenizer = MosesTokenizer(lang="de")
    changed = [s for s in lines if tokenizer.decode(tokenizer.encode(s)) != s]
    # One line is known to change: "120\xa0cm" comes back with an ordinary space.
    assert len(lines) == 200
    assert len(changed) <= 2, changed


# --- the browser's twins (static/web/tokenize.js, for `alignmt export --web`) ----------------

TRICKY = [
    "I'm home.",
    "Hello,world!Is it?  Yes .",
    "ΟΔΟΣ Σ İstanbul STRASSE ß",
    "caf\u00e9\u202fau\u00a0lait , d'accord ?",
    "tabs\tstay\tinside  two  spaces",
    "&amp;apos; &apos;s &quot;q&quot; &#124; &bar; &lt;b&gt; &AMP; & bare",
    "emoji 👍🏽 e\u0301 ▁ underline",
    "",
]


@pytest.mark.slow
def test_the_browser_tokenizers_equal_the_python_ones(browser):
    """static/web/tokenize.js, which `alignmt export --web` ships, run in Chromium."""
    from benchmarks.browser import StaticHost

    from alignmt.answers.site import STATIC
    from alignmt.text.tokenizer_json import tokenizer_json

    corpus = [f"{a} {b}, {c}!" for a in TRICKY[:4] for b in TRICKY[2:6] for c in ("x", "y.")]
    tokenizers = [
        CharTokenizer(lowercase=False),
        CharTokenizer(lowercase=True),
        D2lTokenizer(lowercase=True),
        D2lTokenizer(lowercase=False),
        SpaceTokenizer(lowercase=False, unescape=False),
        SpaceTokenizer(lowercase=True, unescape=True),
        MosesTokenizer(lang="en", lowercase=True),
        MosesTokenizer(lang="fr", lowercase=False),
        SentencePieceTokenizer.train(corpus, vocab_size=60, model_type="bpe"),
        SentencePieceTokenizer.train(corpus, vocab_size=60, model_type="unigram", lowercase=True),
    ]
    specs = [json.loads(t.to_json()) for t in tokenizers]
    files = [tokenizer_json(t.model) if t.kind == "sentencepiece" else None for t in tokenizers]
    with StaticHost(STATIC / "web") as url:
        browser.get(f"{url}tokenize.js")  # a document of that origin, to import the module from
        got = browser.execute_async_script(
            """
            const [specs, files, texts, done] = arguments;
            import(new URL("tokenize.js", location.href).href).then(async ({ tokenizer }) => {
              const answers = [];
              for (const [i, spec] of specs.entries()) {
                const t = await tokenizer(spec, files[i]);
                answers.push(texts.map((text) => {
                  const tokens = t.encode(text);
                  return [tokens, t.decode(tokens)];
                }));
              }
              done(answers);
            }).catch((error) => done(String(error)));
            """,
            specs,
            files,
            TRICKY,
        )
    assert isinstance(got, list), got
    for tok, answers in zip(tokenizers, got, strict=True):
        for text, (tokens, decoded) in zip(TRICKY, answers, strict=True):
            want = tok.encode(text)
            if tok.kind == "sentencepiece":  # a piece it lacks: its text or <unk>, both unknown
                known = {tok._sp.id_to_piece(i) for i in range(tok._sp.get_piece_size())}
                want, tokens = ([t if t in known else UNK for t in ts] for ts in (want, tokens))
            assert tokens == want, (tok, text)
            assert decoded == tok.decode(tok.encode(text)), (tok, text)
