"""CT-Transformer punctuation (``ASR_PUNC_MODEL``), under PyTorch or ONNX Runtime.

An offline engine hands the final texts of one step to ``Punctuator.punctuate`` and gets,
per text, its punctuated text or why that one failed: one text's failure fails only its
utterance (as FunASR's server, which punctuates one text per call).

- :class:`FunasrPunctuator`: funasr's ``AutoModel.generate(input=text)``, one text per
  call (funasr's CT-Transformer takes no batch).
- :class:`OnnxPunctuator`: funasr's ``CTTransformer.inference`` ported line by line, with
  the export of ``workers.models.export.punctuation`` in place of the forward pass: the same words
  (per character, or jieba words for a word-level model), the same mini-sentences of 20
  (``split_size``), the same carry-over of each mini-sentence's unfinished sentence into
  the next, the same sentence-end fix-up at the end. The texts of one call advance
  together, mini-sentence by mini-sentence: their k-th mini-sentences (each with its own
  carry-over) share ONNX calls, padded, with their lengths; the graph masks by length, so
  each text's punctuation is its own. Neither torch nor funasr is imported.

Where the ONNX path differs from funasr's, on purpose: funasr's ``generate`` reads a text
that names an existing file (a list file if it ends in ``.txt``, ``.scp``...) and
downloads one that starts with ``http://``; the ONNX path only ever punctuates the text.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from shared.engines import Precision
from workers.engines.runtime.onnx_files import PuncOnnxFiles, punc_up_to_date
from workers.engines.runtime.onnx_session import open_session

logger = logging.getLogger(__name__)

# funasr's CTTransformer.inference: a mini-sentence longer than this with no sentence end
# is cut at its last comma.
CACHE_POP_TRIGGER_LIMIT = 200
# Rows of one ONNX call are padded to the longest: rows at most this much longer than the
# call's shortest (or at most 2 mini-sentences long) share it.
LENGTH_RATIO = 2.0
_ENGLISH = re.compile("^[a-zA-Z']+$")  # funasr's ct_transformer.utils.isEnglish
# The full-width marks funasr compares the classes with (escaped: they look like ASCII).
COMMA = "\uff0c"
FULL_STOP = "\u3002"
QUESTION_MARK = "\uff1f"
ENUMERATION_COMMA = "\u3001"
SENTENCE_ENDS = (FULL_STOP, QUESTION_MARK)
# After an ASCII word, funasr writes the ASCII marks.
_ASCII_PUNCTUATION = {COMMA: ",", FULL_STOP: ".", QUESTION_MARK: "?"}


@dataclass(frozen=True, slots=True)
class Punctuated:
    """One text's punctuation: its text, or why it failed (``"punctuation error: ..."``)."""

    text: str
    error: str | None = None


class Punctuator(Protocol):
    def punctuate(self, texts: Sequence[str]) -> list[Punctuated]:
        """Each of ``texts`` punctuated, in order; an empty text stays empty."""
        ...


def punctuation_error(exc: BaseException) -> Punctuated:
    return Punctuated("", f"punctuation error: {type(exc).__name__}: {exc}")


def load_punctuator(
    model_dir: str, device: str, threads: int, onnx: bool, precision: Precision = "fp32"
) -> Punctuator:
    """The punctuator of a CT-Transformer directory: funasr's, or the ONNX one when the
    engine runs ONNX (``onnx``). The ONNX graph is fp32 at either ``precision`` (see
    ``workers.models.export.punctuation``: an int8 one would punctuate differently)."""
    if not onnx:
        return FunasrPunctuator.load(model_dir, device, threads)
    if precision != "fp32":
        logger.info("the punctuation model runs fp32 (it has no %s export)", precision)
    return OnnxPunctuator.load(Path(model_dir), device, threads)


class FunasrPunctuator:
    """funasr's PyTorch CT-Transformer, one text per ``generate`` call."""

    def __init__(self, model: Any) -> None:
        self._model = model

    @classmethod
    def load(cls, model_dir: str, device: str, threads: int) -> FunasrPunctuator:
        from workers.engines.paraformer.streaming import load_automodel

        return cls(load_automodel(model_dir, device, threads))

    def punctuate(self, texts: Sequence[str]) -> list[Punctuated]:
        return [self._one(text) for text in texts]

    def _one(self, text: str) -> Punctuated:
        try:
            result = self._model.generate(input=text, disable_pbar=True)
        except Exception as exc:
            return punctuation_error(exc)
        return Punctuated(str(result[0].get("text", "")))


@dataclass(frozen=True, slots=True)
class PuncConfig:
    """What funasr's inference reads besides the network (the export's punctuation.json)."""

    punc_list: list[str]
    sentence_end_id: int
    split_size: int
    tokens: list[str]
    unk_id: int
    word_level: bool

    @classmethod
    def read(cls, path: Path) -> PuncConfig:
        meta = json.loads(path.read_text(encoding="utf-8"))
        return cls(
            punc_list=[str(p) for p in meta["punc_list"]],
            sentence_end_id=int(meta["sentence_end_id"]),
            split_size=int(meta["split_size"]),
            tokens=[str(t) for t in meta["tokens"]],
            unk_id=int(meta["unk_id"]),
            word_level=bool(meta["word_level"]),
        )


class Words:
    """funasr's tokenisation for a CT-Transformer: ``split_words`` (per character, ASCII
    runs kept whole; or, for a word-level model, jieba words with English kept whole) and
    ``CharTokenizer.encode`` of those words (each word's id, the unknown id if none)."""

    def __init__(self, tokens: Sequence[str], unk_id: int, jieba_dict: Path | None) -> None:
        self._ids = {token: i for i, token in enumerate(tokens)}
        self._unk_id = unk_id
        self._jieba: Any = None
        if jieba_dict is not None:
            import jieba  # type: ignore[import-untyped]

            # funasr loads the dictionary into jieba's global tokenizer; a tokenizer of our
            # own (jieba's same default dictionary, plus this one) cuts the same words.
            self._jieba = jieba.Tokenizer()
            self._jieba.load_userdict(str(jieba_dict))

    def split(self, text: str) -> list[str]:
        if self._jieba is not None:
            return self._split_jieba(text)
        words = []
        for seg in text.split():
            current_word = ""
            for c in seg:
                if len(c.encode()) == 1:
                    current_word += c
                else:
                    if len(current_word) > 0:
                        words.append(current_word)
                        current_word = ""
                    words.append(c)
            if len(current_word) > 0:
                words.append(current_word)
        return words

    def _split_jieba(self, text: str) -> list[str]:
        """funasr's ``split_words`` with a jieba dictionary: runs of English words kept,
        the runs between them joined and cut by jieba (no HMM)."""
        runs: list[tuple[list[str], bool]] = []  # (tokens, English)
        run: list[str] = []
        english: bool | None = None
        for token in text.split():
            is_english = _is_english(token)
            if run and english is not None and is_english != english:
                runs.append((run, english))
                run = []
            run.append(token)
            english = is_english
        if run and english is not None:
            runs.append((run, english))
        words: list[str] = []
        for tokens, is_english in runs:
            if is_english:
                words.extend(tokens)
            else:
                words.extend(self._jieba.cut(_join_chinese_and_english(tokens), HMM=False))
        return words

    def ids(self, words: Sequence[str]) -> list[int]:
        return [self._ids.get(word, self._unk_id) for word in words]


def _is_english(token: str) -> bool:
    return _ENGLISH.search(token) is not None


def _join_chinese_and_english(tokens: Sequence[str]) -> str:
    line = ""
    for token in tokens:
        line = line + " " + token if _is_english(token) else line + token
    return line.strip()


def _mini_sentences(words: list[Any], limit: int) -> list[list[Any]]:
    """funasr's ``split_to_mini_sentence``: runs of ``limit``, the rest last."""
    if len(words) <= limit:
        return [words]
    return [words[i : i + limit] for i in range(0, len(words), limit)]


@dataclass(slots=True)
class _Text:
    """One text on its way through funasr's mini-sentence loop."""

    words: list[list[str]]  # its mini-sentences
    ids: list[list[int]]
    index: int = 0  # the mini-sentence the next call punctuates
    cache_words: list[str] = field(default_factory=list)  # the unfinished sentence carried
    cache_ids: list[int] = field(default_factory=list)
    out: str = ""  # funasr's new_mini_sentence
    result: str | None = None

    def pending(self) -> tuple[list[str], list[int]]:
        """The next call's words and ids: the carried sentence, then the next mini-sentence."""
        return (
            self.cache_words + self.words[self.index],
            self.cache_ids + self.ids[self.index],
        )


class _Host:
    """funasr's ``CTTransformer.inference`` after the forward pass, for one mini-sentence."""

    def __init__(self, config: PuncConfig) -> None:
        self._punc_list = config.punc_list
        self._sentence_end_id = config.sentence_end_id

    def advance(self, text: _Text, punctuations: list[int]) -> None:
        """Takes the punctuation of ``text.pending()``; sets ``text.result`` after the last."""
        punc_list = self._punc_list
        mini_sentence, mini_sentence_id = text.pending()
        if len(punctuations) != len(mini_sentence):
            raise ValueError(f"{len(punctuations)} punctuations for {len(mini_sentence)} words")
        last = text.index == len(text.words) - 1
        if not last:
            # The last sentence end (from the second-to-last word back to the third) closes
            # what is written now; the rest is carried into the next mini-sentence.
            sentence_end = -1
            last_comma_index = -1
            for i in range(len(punctuations) - 2, 1, -1):
                if punc_list[punctuations[i]] in SENTENCE_ENDS:
                    sentence_end = i
                    break
                if last_comma_index < 0 and punc_list[punctuations[i]] == COMMA:
                    last_comma_index = i
            if (
                sentence_end < 0
                and len(mini_sentence) > CACHE_POP_TRIGGER_LIMIT
                and last_comma_index >= 0
            ):
                # The sentence is too long: cut off at a comma.
                sentence_end = last_comma_index
                punctuations[sentence_end] = self._sentence_end_id
            text.cache_words = mini_sentence[sentence_end + 1 :]
            text.cache_ids = mini_sentence_id[sentence_end + 1 :]
            mini_sentence = mini_sentence[0 : sentence_end + 1]
            punctuations = punctuations[0 : sentence_end + 1]
        words_with_punc = []
        for i in range(len(mini_sentence)):
            # An ASCII word is capitalised at the start and after a sentence end, and spaced
            # from the ASCII word before it (and at the start). The word before may have
            # been given its space already: its first character is then " ", one byte.
            if (i == 0 or punc_list[punctuations[i - 1]] in SENTENCE_ENDS) and len(
                mini_sentence[i][0].encode()
            ) == 1:
                mini_sentence[i] = mini_sentence[i].capitalize()
            if i == 0 and len(mini_sentence[i][0].encode()) == 1:
                mini_sentence[i] = " " + mini_sentence[i]
            if (
                i > 0
                and len(mini_sentence[i][0].encode()) == 1
                and len(mini_sentence[i - 1][0].encode()) == 1
            ):
                mini_sentence[i] = " " + mini_sentence[i]
            words_with_punc.append(mini_sentence[i])
            if punc_list[punctuations[i]] != "_":
                punc_res = punc_list[punctuations[i]]
                if len(mini_sentence[i][0].encode()) == 1:
                    punc_res = _ASCII_PUNCTUATION.get(punc_res, punc_res)
                words_with_punc.append(punc_res)
        text.out += "".join(words_with_punc)
        text.index += 1
        if last:
            text.result = _close(text.out)


def _close(out: str) -> str:
    """funasr's "Add Period for the end of the sentence"."""
    if out[-1] == COMMA or out[-1] == ENUMERATION_COMMA:
        return out[:-1] + FULL_STOP
    if out[-1] == ",":
        return out[:-1] + "."
    if out[-1] not in SENTENCE_ENDS and len(out[-1].encode()) != 1:
        return out + FULL_STOP
    if out[-1] != "." and out[-1] != "?" and len(out[-1].encode()) == 1:
        return out + "."
    return out


class OnnxPunctuator:
    """The CT-Transformer's export under ONNX Runtime, with funasr's host logic."""

    def __init__(self, files: PuncOnnxFiles, device: str, threads: int) -> None:
        config = PuncConfig.read(files.meta)
        self._split_size = config.split_size
        self._words = Words(
            config.tokens, config.unk_id, files.jieba_dict if config.word_level else None
        )
        self._host = _Host(config)
        self._session = open_session(files.model, device, threads)

    @classmethod
    def load(cls, model_dir: Path, device: str, threads: int) -> OnnxPunctuator:
        if not punc_up_to_date(model_dir):
            raise FileNotFoundError(
                f"no up-to-date ONNX export of the punctuation model in {model_dir}:"
                f" run python -m workers.models.export.punctuation {model_dir}"
            )
        return cls(PuncOnnxFiles.of(model_dir), device, threads)

    def punctuate(self, texts: Sequence[str]) -> list[Punctuated]:
        results: list[Punctuated | None] = [None] * len(texts)
        active: dict[int, _Text] = {}
        for index, text in enumerate(texts):
            if not text or not text.strip():
                results[index] = Punctuated("")  # funasr's answer for an empty text
                continue
            try:
                active[index] = self._start(text)
            except Exception as exc:
                results[index] = punctuation_error(exc)
        while active:
            for index, outcome in self._round(active):
                if isinstance(outcome, BaseException):
                    results[index] = punctuation_error(outcome)
                    del active[index]
                    continue
                state = active[index]
                try:
                    self._host.advance(state, outcome)
                except Exception as exc:
                    results[index] = punctuation_error(exc)
                    del active[index]
                    continue
                if state.result is not None:
                    results[index] = Punctuated(state.result)
                    del active[index]
        assert all(result is not None for result in results)
        return [result for result in results if result is not None]

    def _start(self, text: str) -> _Text:
        words = self._words.split(text)
        ids = self._words.ids(words)
        return _Text(
            _mini_sentences(words, self._split_size), _mini_sentences(ids, self._split_size)
        )

    def _round(self, active: dict[int, _Text]) -> Iterator[tuple[int, list[int] | BaseException]]:
        """Each active text's punctuation of its next mini-sentence: rows of similar
        lengths share a call; a call that fails is retried row by row, so that only the
        rows that fail alone fail."""
        rows = {index: state.pending()[1] for index, state in active.items()}
        for call in _calls(rows, self._split_size):
            try:
                outcomes: list[list[int] | BaseException] = list(self._run([rows[i] for i in call]))
            except Exception as exc:
                if len(call) > 1:
                    yield from ((index, self._run_alone(rows[index])) for index in call)
                    continue
                outcomes = [exc]
            yield from zip(call, outcomes, strict=True)

    def _run_alone(self, row: list[int]) -> list[int] | BaseException:
        try:
            return self._run([row])[0]
        except Exception as exc:
            return exc

    def _run(self, rows: list[list[int]]) -> list[list[int]]:
        """One ONNX call: each row's punctuation class per token (funasr's top-1)."""
        lengths = np.array([len(row) for row in rows], dtype=np.int32)
        inputs = np.zeros((len(rows), int(lengths.max())), dtype=np.int32)
        for r, row in enumerate(rows):
            inputs[r, : len(row)] = row
        (logits,) = self._session.run(["logits"], {"inputs": inputs, "text_lengths": lengths})
        classes = np.asarray(logits).argmax(axis=-1)
        return [classes[r, :length].tolist() for r, length in enumerate(lengths.tolist())]


def _calls(rows: dict[int, list[int]], split_size: int) -> list[list[int]]:
    """The rows (by text index) that share each ONNX call: sorted by length, a call takes
    rows at most ``LENGTH_RATIO`` times its shortest, or at most two mini-sentences long
    (padding a short row that far costs less than a call of its own)."""
    order = sorted(rows, key=lambda i: len(rows[i]))
    calls: list[list[int]] = []
    for index in order:
        length = len(rows[index])
        if calls:
            shortest = len(rows[calls[-1][0]])
            if length <= max(LENGTH_RATIO * shortest, 2 * split_size):
                calls[-1].append(index)
                continue
        calls.append([index])
    return calls
