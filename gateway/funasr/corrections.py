"""Hotwords on every result, streaming partials too: text-level corrections (sans I/O).

No streaming Paraformer is biased at decode time (FunASR's C++ runtime: "Online model does
not support Hotword yet!"); the state of the art corrects the text afterwards, as FunASR
1.4's post-process hotwords (``wrong=>right`` rules and pinyin-fuzzy matching, on finished
sentences) and sherpa-onnx's homophone replacer (on its partials) do. So does this, on
partials and finals alike:

- **rules**: ``wrong=>right``, exact text, the longest first, in one pass: a session's own
  (a hotword written ``wrong=>right``, in any dialect's hotword field) and the server's
  (``ASR_HOTWORD_RULES``, a file of such lines);
- **pinyin**: a Chinese hotword (CJK characters only, 2 to ``MAX_FUZZY_CHARS``) replaces
  a run of as many characters that sounds like it and is not already it. Sounding alike is
  scored per syllable (toneless pinyin): 1 for the same syllable (a homophone: "界" for
  "戒"), 0.75 for one whose initial or final is a pair Mandarin speakers commonly merge
  (f/h, l/n, z/zh, c/ch, s/sh, r/l; an/ang, en/eng, in/ing, ian/iang, uan/uang: "福南人"
  for "湖南人"), else 0; a run whose mean is at least ``PINYIN_SIMILARITY`` matches. So
  "玄界芯片" and "悬界心骗" become "玄戒芯片", and "选择芯片", one syllable wholly other, does
  not. The replacement has the same length, so token times still match the text.

Bounded per result: at most ``MAX_RULES`` rules and ``MAX_FUZZY_HOTWORDS`` pinyin hotwords
a session, and the pinyin pass only over the first ``MAX_FUZZY_TEXT_CHARS`` characters; a
character's pinyin is looked up once per process (``_syllable``). A streaming partial that
is new text only (a Paraformer delta) is corrected alone, so a hotword split across two
deltas is corrected in the final, not in the partials.

SeACo-Paraformer's decode-time biasing stays where the model has it (the offline pass);
these corrections apply on top.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

RULE_ARROW = "=>"
MAX_RULES = 1024  # a session's and the server's together
MAX_FUZZY_HOTWORDS = 64
MAX_FUZZY_CHARS = 16
MAX_FUZZY_TEXT_CHARS = 2000
PINYIN_SIMILARITY = 0.85  # FunASR 1.4's post-process threshold, on our per-syllable score
MERGED_SCORE = 0.75  # a syllable one merged initial or final away
# Mandarin's initials, the longest first ("zh" before "z").
_INITIALS = ("zh", "ch", "sh", *"bpmfdtnlgkhjqxrzcsyw")
_MERGED_INITIALS = {
    frozenset(p)
    for p in (("f", "h"), ("l", "n"), ("z", "zh"), ("c", "ch"), ("s", "sh"), ("r", "l"))
}
_MERGED_FINALS = {
    frozenset(p)
    for p in (("an", "ang"), ("en", "eng"), ("in", "ing"), ("ian", "iang"), ("uan", "uang"))
}
_CJK = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


@dataclass(frozen=True, slots=True)
class Rule:
    wrong: str
    right: str


def parse_rule(text: str) -> Rule | None:
    """``wrong=>right`` as a rule (``None``: not one; an empty side is not one)."""
    wrong, arrow, right = text.partition(RULE_ARROW)
    wrong, right = wrong.strip(), right.strip()
    if not arrow or not wrong or not right or wrong == right:
        return None
    return Rule(wrong, right)


def read_rules(lines: Iterable[str], where: str) -> tuple[Rule, ...]:
    """The rules of a file's lines (blank lines and ``#`` comments skipped); a line that
    is not a rule is a ``ValueError`` naming it."""
    rules: list[Rule] = []
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        rule = parse_rule(text)
        if rule is None:
            raise ValueError(f"{where}:{number}: not a rule 'wrong=>right': {text[:60]!r}")
        rules.append(rule)
    if len(rules) > MAX_RULES:
        raise ValueError(f"{where}: {len(rules)} rules, at most {MAX_RULES}")
    return tuple(rules)


def load_hotword_rules(path: str | None) -> tuple[Rule, ...]:
    """``ASR_HOTWORD_RULES``' rules (none without a file); a file that cannot be read or
    holds a line that is not a rule is a ``ValueError`` in one line: serving does not start."""
    if path is None:
        return ()
    try:
        with open(path, encoding="utf-8") as file:
            return read_rules(file, f"ASR_HOTWORD_RULES={path}")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"ASR_HOTWORD_RULES={path}: cannot read it: {exc}") from None


def split_hotwords(words: Sequence[str]) -> tuple[tuple[str, ...], tuple[Rule, ...]]:
    """A session's hotwords as the words a model is biased with, and its rules."""
    plain: list[str] = []
    rules: list[Rule] = []
    for word in words:
        rule = parse_rule(word) if RULE_ARROW in word else None
        if rule is not None:
            rules.append(rule)
        elif RULE_ARROW not in word:
            plain.append(word)
    return tuple(plain), tuple(rules)


@functools.lru_cache(maxsize=65536)
def _syllable(char: str) -> str:
    """A CJK character's most common toneless pinyin (one per character: the context
    that picks a polyphone's reading is not looked at)."""
    from pypinyin import lazy_pinyin

    return lazy_pinyin(char)[0]


# Syllables that one merge makes alike share a key: the merged initials' class and the
# merged finals' class. Alike (equal, or one merge away) implies the same key, so a window
# is scored only against the hotwords whose first syllables' key its first syllable has.
_INITIAL_CLASS = {"n": "l", "r": "l", "h": "f", "zh": "z", "ch": "c", "sh": "s"}
_FINAL_CLASS = {"ang": "an", "eng": "en", "ing": "in", "iang": "ian", "uang": "uan"}


@functools.lru_cache(maxsize=4096)
def _sound_key(syllable: str) -> str:
    initial, final = _split(syllable)
    return f"{_INITIAL_CLASS.get(initial, initial)}-{_FINAL_CLASS.get(final, final)}"


@functools.lru_cache(maxsize=4096)
def _split(syllable: str) -> tuple[str, str]:
    """A toneless syllable's initial and final ("zhang": "zh", "ang"; "an": "", "an")."""
    initial = next((i for i in _INITIALS if syllable.startswith(i)), "")
    return initial, syllable[len(initial) :]


def _alike(spoken: str, meant: str) -> float:
    """How alike two syllables sound: 1, ``MERGED_SCORE`` or 0."""
    if spoken == meant:
        return 1.0
    (i1, f1), (i2, f2) = _split(spoken), _split(meant)
    if (f1 == f2 and frozenset((i1, i2)) in _MERGED_INITIALS) or (
        i1 == i2 and frozenset((f1, f2)) in _MERGED_FINALS
    ):
        return MERGED_SCORE
    return 0.0


@dataclass(frozen=True, slots=True)
class _Fuzzy:
    word: str
    syllables: tuple[str, ...]  # its toneless pinyin


@dataclass(slots=True)
class Corrections:
    """A session's corrections: ``apply`` to each result's text."""

    rules: tuple[Rule, ...] = ()
    hotwords: tuple[str, ...] = ()
    _pattern: re.Pattern[str] | None = field(init=False, default=None)
    _by_wrong: dict[str, str] = field(init=False, default_factory=dict)
    _fuzzy: tuple[_Fuzzy, ...] = field(init=False, default=())
    # The hotwords by their first syllable's sound key; and those long enough (7+) that one
    # unlike syllable still passes, by their second's too.
    _by_first: dict[str, list[_Fuzzy]] = field(init=False, default_factory=dict)
    _by_second: dict[str, list[_Fuzzy]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.rules = self.rules[:MAX_RULES]
        self._by_wrong = {rule.wrong: rule.right for rule in self.rules}
        if self._by_wrong:
            wrongs = sorted(self._by_wrong, key=len, reverse=True)  # the longest first
            self._pattern = re.compile("|".join(re.escape(w) for w in wrongs))
        chinese = [
            w
            for w in dict.fromkeys(self.hotwords)
            if 2 <= len(w) <= MAX_FUZZY_CHARS and _CJK.fullmatch(w)
        ]
        self._fuzzy = tuple(
            _Fuzzy(w, tuple(_syllable(c) for c in w)) for w in chinese[:MAX_FUZZY_HOTWORDS]
        )
        for fuzzy in self._fuzzy:
            self._by_first.setdefault(_sound_key(fuzzy.syllables[0]), []).append(fuzzy)
            if (len(fuzzy.word) - 1) / len(fuzzy.word) >= PINYIN_SIMILARITY:
                self._by_second.setdefault(_sound_key(fuzzy.syllables[1]), []).append(fuzzy)

    @staticmethod
    def of(hotwords: Sequence[str], server_rules: Sequence[Rule] = ()) -> Corrections:
        """A session's corrections: its hotwords' and the server's rules. Made once per
        hotword set (an utterance starts at every Deepgram pause; the rules' pattern and
        the hotwords' pinyin are not made again for each); ``apply`` changes nothing."""
        return _corrections(tuple(hotwords), tuple(server_rules))

    def __bool__(self) -> bool:
        return bool(self._pattern is not None or self._fuzzy)

    def apply(self, text: str) -> str:
        if not text:
            return text
        if self._pattern is not None:
            text = self._pattern.sub(lambda match: self._by_wrong[match.group()], text)
        if self._fuzzy and _CJK.search(text):
            head, tail = text[:MAX_FUZZY_TEXT_CHARS], text[MAX_FUZZY_TEXT_CHARS:]
            text = _CJK.sub(lambda run: self._fuzzy_run(run.group()), head) + tail
        return text

    def _fuzzy_run(self, run: str) -> str:
        """``run`` (CJK characters only) with each window that sounds like a hotword
        replaced by it, left to right, the best match at each place."""
        syllables = [_syllable(c) for c in run]
        keys = [_sound_key(s) for s in syllables]
        out: list[str] = []
        at = 0
        while at < len(run):
            candidates = self._by_first.get(keys[at], [])
            if at + 1 < len(run):
                candidates = candidates + self._by_second.get(keys[at + 1], [])
            exact = next((f.word for f in candidates if run.startswith(f.word, at)), None)
            if exact is not None:  # already the hotword: kept whole, never re-matched
                out.append(exact)
                at += len(exact)
                continue
            best: tuple[float, _Fuzzy] | None = None
            for fuzzy in candidates:
                size = len(fuzzy.word)
                window = run[at : at + size]
                if len(window) < size:
                    continue
                pairs = zip(syllables[at : at + size], fuzzy.syllables, strict=True)
                score = sum(_alike(spoken, meant) for spoken, meant in pairs) / size
                if score >= PINYIN_SIMILARITY and (best is None or score > best[0]):
                    best = (score, fuzzy)
            if best is None:
                out.append(run[at])
                at += 1
            else:
                out.append(best[1].word)
                at += len(best[1].word)
        return "".join(out)


@functools.lru_cache(maxsize=256)
def _corrections(hotwords: tuple[str, ...], server_rules: tuple[Rule, ...]) -> Corrections:
    words, rules = split_hotwords(hotwords)
    # The server's first: a session's rules cannot push them past MAX_RULES (a session's
    # own rule for the same text wins, for that session).
    return Corrections((*server_rules, *rules), words)
