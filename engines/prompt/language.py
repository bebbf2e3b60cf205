"""The rules of a prompt's language that need no model: normalising, clauses, negation, the length limit."""

from __future__ import annotations

import re
import unicodedata


# the longest prompt, in characters: every interface refuses a longer one, and the encoder reads no more
# (its token limit cuts again after)
MAX_PROMPT_CHARS = 500


def latin_only(s: str) -> bool:
    """Every letter is Latin script: what an English-only encoder has a vocabulary for."""
    return all(not ch.isalpha() or ch.isascii() or unicodedata.name(ch, "").startswith("LATIN") for ch in s)


# A terminal's escape sequence pasted with a prompt (colour codes: ESC [ 31 m): control, not text, whole.
_TERMINAL_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|[@-Z\\-_])")


def normalise_prompt(text: str) -> str:
    """The cache key and the encoder's input: NFKC (full-width -> ASCII, compatibility forms folded),
    terminal escape sequences, control and format characters (zero-width, bidi overrides) dropped,
    whitespace collapsed, lower case,
    cut one character past MAX_PROMPT_CHARS so a pasted novel cannot stall the tokenizer (the reading cuts
    the last one and says it was cut)."""
    if not isinstance(text, str):
        raise TypeError(f"prompt must be a string, got {type(text).__name__}")
    text = unicodedata.normalize("NFKC", text[: MAX_PROMPT_CHARS * 2])
    text = _TERMINAL_ESCAPE.sub("", text)
    kept = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in "\t\n\r" or cat == "Zs":
            kept.append(" ")
        elif cat[0] == "C":          # Cc control, Cf format, Cs surrogate, Co private use, Cn unassigned
            continue
        else:
            kept.append(ch)
    return re.sub(r"\s+", " ", "".join(kept)).strip().lower()[:MAX_PROMPT_CHARS + 1]


# Negation words: before what they negate in English, Spanish, Portuguese, French, German and Chinese (a
# prefix, so no word boundary; 别 not inside 特别 "especially"), after it in the endings Japanese and Korean
# requests use (なし not inside おとなしい) and in German's "... lieber nicht". The stem is the clause without them.
# Portuguese "no" is also "em" + "o", "in / on the": before the nouns a face-filter prompt puts there ("blush no
# rosto", "sorriso no rosto", "no máximo", "no dia do casamento") or a possessive ("no seu rosto") it is no
# negation; those words are Portuguese only, so English and Spanish "no" keep negating ("no smile", "no sonrisa").
_PT_NO_PLACE = (r"máximo|mínimo|rosto|rostinho|olhar|olho|lábio|cabelo|queixo|nariz|pescoço|canto|cantinho|meio|centro|"
                r"topo|fundo|espelho|vídeo|contorno|buço|maxilar|sorriso|tom|estilo|jeito|dia|natal|carnaval|casamento|"
                r"trabalho|verão|inverno|final|geral|ponto|capricho|momento|lugar|mesmo|próprio|seu|meu|teu|nosso")
_NEGATION = re.compile(
    r"(?:\b(?:don't want|do not want|don't|do not|stop|quit|no more|not|no(?!\s+(?:" + _PT_NO_PLACE + r")\b)|without|never|sin|nada de|deja de|dejá de|"
    r"não|sem|nunca|pare de|para de|chega de|sans|pas de|pas d'|pas|zéro|arrête de|arrêtez de|arrête|jamais|keine|keinen|kein|"
    r"nicht|ohne|hör auf mit|hör auf zu|hör auf|brauche ich nicht|lieber nicht|will ich nicht)\b|不想要|不想|不要|(?<!特)别|没有|停止|"
    r"なし(?!い)|はいらない|いらない|じゃなくていい|はやめて|やめて|없이|말고|빼고|싫어)\s*")


NEGATION_FLOOR = 0.05


def negation_before(clause: str, index: int) -> bool:
    """A negation word ends at or before `index` in `clause`: "no nudity", "不想看起来像小孩子"."""
    m = _NEGATION.search(clause)
    return m is not None and m.start() < index


# The negations Japanese and Korean write after what they negate (and German's postposed ones): "ヌードはなしで",
# "子供っぽく見えるのはやめて", "누드 말고", and the "so that it does not look ..." / "not X but" forms: "子供っぽく
# 見えないように", "ロリ系じゃなくてきれいめ系", "어린애처럼 안 보이게", "어린애 같지 않게". A clause ends its wish with
# them (clauses() splits after the first ones where another wish follows), so one of them after a word
# negates that word for the policy's terms (the classifier still reads the clause).
_NEGATION_AFTER = re.compile(
    r"なし(?!い)|いらない|じゃなくていい|やめて|없이|말고|빼고|싫어|\b(?:lieber nicht|will ich nicht|brauche ich nicht)\b"
    r"|(?:に|く)?(?:見えない|見られない|ならない|ならず|しない|されない)|じゃなくて|じゃなく|ではなく|が嫌|は嫌"
    r"|같지\s*않|(?:지|게)\s*않|안\s*(?:보이|되|나|입)|아니게|아닌")


def negation_after(clause: str, index: int) -> bool:
    """A negation that follows its word starts at or after `index` in `clause`: "누드 말고" (not nude)."""
    return _NEGATION_AFTER.search(clause, index) is not None


def negation_stem(clause: str) -> str | None:
    """The clause without its (first) negation word: "give me without self-assured" -> "give me
    self-assured"; None when the clause negates nothing."""
    m = _NEGATION.search(clause)
    if m is None:
        return None
    before = clause[:m.start()]
    if m.group(0).startswith("pas"):   # French "ne ... pas (de)": the "ne" before the verb goes too
        before = _FRENCH_NE.sub(" ", before)
    stem = " ".join((before + " " + clause[m.end():]).split())
    return stem or None


_FRENCH_NE = re.compile(r"\bne\b|\bn'")


# Wishes are joined by punctuation (、。 stay after NFKC) or 'and / with / also / but' and their
# Spanish, Portuguese, French and German words ('plus' only after a comma, which splits anyway: the French
# comparative, "un menton plus court", is one wish and means "shorter"); Chinese joins 还有 / 加上 / 并且 / 同时 / 但是 / 可是 / 不过 /
# 而且 and 和 where it is not part of a word (温和, 柔和, 平和, 暖和, 和谐 ...). Korean joins with the words 그리고 / 및 / 하고 ("X 하고
# Y": do X and Y; not 하고 싶어, "want to"), and its negations 없이 / 말고 / 빼고 end their wish ("X 빼고 Y":
# leave X out, and Y) unless only a request ending follows ("X 빼고 해줘"). Japanese particles that join
# (と, に) are parts of words too (ちょっと, もっと), so Japanese splits at its punctuation and after its
# negations (なし / いらない / やめて / じゃなくていい, with the particle that joins: "メイクなしで笑顔")
# where a wish follows.
_KO_REQUEST_END = r"(?:해|해줘|해주세요|해 주세요|부탁해|부탁해요|부탁합니다|적용해줘|적용해 줘|주세요)\s*$"
_JA_REQUEST_END = r"(?:で|に|と)?(?:お願い(?:します)?|よろしく|して(?:ください)?|ください)?\s*$"
_CLAUSE_SPLIT = re.compile(
    r"\s*(?:[,;.!?+/|、。]|\b(?:and|with|also|but|y|con|pero|e|com|mas|et|avec|mais|und|mit|aber)\b|"
    r"还有|加上|并且|同时|但是|可是|不过|而且|(?<![温柔平缓暖随祥亲总])和(?![谐善蔼])|"
    r"(?<!\S)(?:그리고|및|하고(?!\s*싶))(?!\S))\s*"
    r"|(?<=없이|말고|빼고)\s+(?!" + _KO_REQUEST_END + r")"
    r"|(?:(?<=なし)(?!い)|(?<=いらない)|(?<=やめて)|(?<=じゃなくていい))(?!" + _JA_REQUEST_END + r")(?:で|に|と)?\s*")


MAX_CLAUSES = 8

# A run of emoji or pictographs between words ends a wish as a comma does ("big smile 💄 red lips"): read
# inside a clause, an emoji drags the words' reading down ("red lips" 0.89, among emoji 0.25), and on its own
# the encoder reads it as next to nothing a person meant ("💄": brow_raise 0.18). A prompt of emoji only is
# left whole.
_EMOJI_RUN = re.compile("[\U0001F300-\U0001FAFF\u2600-\u27BF\u2B00-\u2BFF\uFE0F\u200D]+")

# Chinese "不要 X 要 Y" (no X, Y instead): a negated wish, then a wanted one after 要 (not 想要 / 需要 / 只要 /
# 主要 / 重要), in one run of characters.
_ZH_NEGATED_THEN_WANTED = re.compile(r"^((?:不想要|不要|不用|没有|别|不)[^要]{1,12}?)((?<![想需只主重])要(?!不要).+)$")


def _zh_negated_then_wanted(part: str) -> tuple[str, ...]:
    m = _ZH_NEGATED_THEN_WANTED.match(part.strip())
    return (m.group(1), m.group(2)) if m else (part,)


# Portuguese says where a wish goes with "no / na / nos / nas" + the face or the lips ("blush no rosto", "batom
# vermelho no lábio"): the place adds nothing a wish does not already say, and "no" reads to the encoder
# as the English and Spanish negation that half of the corpus' "sem X no rosto" carry, so a head learnt to
# turn "X no rosto" down. Each clause is read without it, by the head and by the negation gate alike.
_PT_FACE_PLACE = re.compile(r"\s+(?:no|na|nos|nas)\s+(?:(?:meu|minha|seu|sua)\s+)?(?:rosto|rostinho|lábios?|boca)\b")


def clauses(text: str) -> list[str]:
    """The wishes in a prompt: split at punctuation, at 'and / with / also / but' (and their
    words in the languages above) and around emoji; a repeated
    wish counts once (pasting "red lips, red lips, ..." must not stack). Capped at MAX_CLAUSES (the rest
    joins the last clause, where the encoder's token limit applies)."""
    if _EMOJI_RUN.sub("", text).strip():
        text = _EMOJI_RUN.sub(",", text)
    parts = (_PT_FACE_PLACE.sub("", piece).strip() for part in _CLAUSE_SPLIT.split(text)
             for piece in _zh_negated_then_wanted(part))
    found = list(dict.fromkeys(c for c in parts if c))
    if len(found) > MAX_CLAUSES:
        found = found[:MAX_CLAUSES - 1] + [" ".join(found[MAX_CLAUSES - 1:])]
    return found
