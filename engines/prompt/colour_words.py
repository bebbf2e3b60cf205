"""Colour words in the prompt languages -> palette names (engines/colours.py).

A colour is read from the words, not from the encoder: an embedding places "coral lipstick" and "berry
lipstick" close together (both are lipstick), while the shade is exactly the word. The encoder decides
which edit a clause asks for; this table decides its colour. Words in Latin script match whole words,
CJK words match anywhere; longer words win ("hot pink" before "pink", "正红" before "红", "口红" - lipstick,
no colour - before "红"), and a span is read once. English and German "rouge" is blush, French "rouge" red:
the bare word is read as no colour (the edit's default shade), "rouges" as red.
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Mapping

from engines.colours import PALETTE

_BY_COLOUR: dict[str, tuple[str, ...]] = {
    "red": ("red", "cherry", "crimson", "scarlet", "classic red", "true red",
            "红", "红色", "正红", "大红", "番茄红", "赤", "赤い", "レッド", "真っ赤", "빨간", "빨강", "레드",
            "rojo", "roja", "rojos", "rojas", "rouges", "rot", "rote", "roter", "roten", "rotem", "rotes", "vermelho", "vermelha", "vermelhos"),
    "rose": ("rose", "玫瑰", "玫瑰色", "ローズ", "로즈", "장미"),
    "pink": ("pink", "rosy", "红润", "粉", "粉色", "粉红", "粉红色", "ピンク", "핑크", "분홍", "분홍색", "rosa", "rosado", "rosada"),
    "hot pink": ("hot pink", "fuchsia", "magenta", "玫红", "桃红", "ホットピンク", "フューシャ", "핫핑크",
                 "fucsia", "pink vif", "knallpink", "pink choque"),
    "nude": ("nude", "beige", "裸色", "肉色", "ヌード", "ヌーディー", "베이지", "누드"),
    "coral": ("coral", "珊瑚", "珊瑚色", "コーラル", "코랄", "corail", "koralle", "korallfarben", "korallfarbene",
              "korallrot"),
    "peach": ("peach", "桃色", "蜜桃", "蜜桃色", "ピーチ", "피치", "복숭아", "melocotón", "durazno", "pêche",
              "pfirsich", "pfirsichfarben", "pfirsichfarbenes", "pfirsichfarbene", "pêssego"),
    "orange": ("orange", "oranger", "orangen", "orangefarben", "橘色", "橙色", "橘红", "オレンジ", "오렌지", "주황", "주황색",
               "naranja", "laranja"),
    "brick": ("brick", "terracotta", "rust", "砖红", "砖红色", "テラコッタ", "レンガ", "벽돌", "테라코타",
              "teja", "terracota", "brique", "ziegelrot", "terrakotta", "tijolo"),
    "dusty rose": ("dusty rose", "豆沙", "豆沙色", "くすみピンク", "말린 장미", "rosa palo", "vieux rose", "altrosa",
                   "rosa antigo"),
    "berry": ("berry", "莓果", "莓果色", "浆果色", "ベリー", "베리", "baya", "frutos rojos", "baie", "fruits rouges",
              "beere", "beerenfarben", "beerenfarbene", "frutas vermelhas"),
    "plum": ("plum", "梅子色", "李子色", "プラム", "플럼", "자두", "ciruela", "prune", "pflaume", "ameixa"),
    "wine": ("wine", "burgundy", "maroon", "oxblood", "酒红", "酒红色", "ワイン", "ボルドー", "와인", "버건디",
             "vino", "burdeos", "granate", "bordeaux", "lie de vin", "weinrot", "weinrote", "weinroter", "vinho", "bordô"),
    "mauve": ("mauve", "dusty purple", "藕色", "モーブ", "모브", "malva", "altlila"),
    "purple": ("purple", "violet", "lilac", "紫", "紫色", "パープル", "紫色の", "보라", "보라색", "퍼플",
               "morado", "morada", "violeta", "lila", "violett", "roxo", "roxa"),
    "brown": ("brown", "chocolate", "coffee", "mocha", "棕色", "咖啡色", "大地色", "茶色", "ブラウン", "브라운", "갈색",
              "marrón", "marrones", "castaño", "castaña", "castaños", "castañas", "café", "marron", "brun", "bruns", "brune", "brunes", "braun", "braune", "brauner",
              "braunen", "marrom", "castanho", "castanhos", "castanha", "castanhas", "こげ茶"),
    "bronze": ("bronze", "bronzy", "古铜", "古铜色", "ブロンズ", "브론즈", "bronce"),
    "gold": ("gold", "golden", "金色", "金", "ゴールド", "금색", "골드", "dorado", "dorada", "doré", "dorée", "goldene",
             "goldener", "goldenen", "dourado", "dourada"),
    "black": ("black", "jet black", "黑", "黑色", "黒", "黒い", "ブラック", "검정", "검은", "블랙", "negro", "negra", "negros",
              "negras", "noir", "noire", "noirs", "noires", "schwarz", "schwarzer", "schwarze", "schwarzen", "preto", "preta",
              "pretos", "pretas"),
    "blue": ("blue", "navy", "蓝", "蓝色", "青", "ブルー", "파란", "파랑", "블루", "azul", "bleu", "bleue", "blau"),
    "green": ("green", "emerald", "olive", "绿", "绿色", "グリーン", "緑", "초록", "녹색", "그린", "verde", "vert", "verte", "grün"),
}

# words that hold a colour word but name no colour: lipstick and blush themselves (口红, 腮红), youth (青春),
# tanning (美黑, 晒黑), dark circles (黑眼圈), an influencer (网红); matched first, read as nothing
NOT_COLOURS: tuple[str, ...] = ("口红", "腮红", "网红", "青春", "美黑", "晒黑", "黑眼圈", "rouge à lèvres")

WORDS: Mapping[str, str] = MappingProxyType({w.lower(): c for c, ws in _BY_COLOUR.items() for w in ws}
                                            | {w: "" for w in NOT_COLOURS})
assert set(_BY_COLOUR) == set(PALETTE), "every palette colour has words and every word a palette colour"


def _is_cjk(word: str) -> bool:
    return any(ord(ch) > 0x2E80 for ch in word)


def _pattern() -> re.Pattern[str]:
    parts = []
    for word in sorted(WORDS, key=len, reverse=True):
        escaped = re.escape(word)
        parts.append(escaped if _is_cjk(word) else rf"(?<![\w]){escaped}(?![\w])")
    return re.compile("|".join(parts), re.IGNORECASE)


_PATTERN = _pattern()


def colours_in(text: str) -> list[str]:
    """The palette names the text's colour words name, in the order they appear (each once)."""
    found = (WORDS[m.group(0).lower()] for m in _PATTERN.finditer(text))
    return list(dict.fromkeys(c for c in found if c))
