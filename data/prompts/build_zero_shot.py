"""Writes zero_shot.jsonl: hand-written prompts in Japanese, Korean, Spanish, French, German and Portuguese
that no fit ever trains on (engines/prompt/calibration.py scores them as held-out, per language).

The projector and head are trained on English and Chinese only; these measure what the multilingual
encoder's cross-lingual alignment carries to other languages. Each prompt names the corpus atoms it
means (build_corpus.ATOMS), so its target is the corpus' own vector for that idea: `("smile", 1)` the
atom, `("smile", 0.5)` / `1.4` its "slightly" / "very" forms, `("lips", "neg")` its negation, and
several atoms a combination. The phrasings are mine, written the way a streamer would type them, not
translations of corpus lines.

    python data/prompts/build_zero_shot.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from build_corpus import ATOMS  # noqa: E402

N, LOW, HIGH = 1, 0.5, 1.4

PROMPTS: dict[str, list[tuple[str, list[tuple[str, float | str]]]]] = {
    "ja": [
        ("笑顔", [("smile", N)]), ("満面の笑み", [("smile_high", N)]), ("真顔で", [("serious", N)]),
        ("目を大きく", [("eyes_big", N)]), ("小顔にして", [("slim", N)]), ("鼻を細く", [("nose_narrow", N)]),
        ("眉を上げて", [("brows_up", N)]), ("肌をなめらかに", [("smooth", N)]), ("日焼けした肌", [("tan", N)]),
        ("青白い肌", [("cool", N)]), ("顔を明るく", [("bright", N)]), ("暗い雰囲気", [("dark", N)]),
        ("鮮やかな色", [("vivid", N)]), ("モノクロ", [("muted", N)]), ("赤い口紅", [("lips", N)]),
        ("ピンクのチーク", [("blush", N)]), ("シェーディングで立体感", [("contour", N)]),
        ("スモーキーなアイメイク", [("eye_makeup", N)]), ("すっぴん", [("no_makeup", N)]), ("濃いメイク", [("heavy_makeup", N)]),
        ("疲れた顔", [("tired", N)]), ("若く見せて", [("younger", N)]), ("少しだけ笑って", [("smile", LOW)]),
        ("とても大きな目", [("eyes_big", HIGH)]), ("笑顔、赤い口紅", [("smile", N), ("lips", N)]),
        ("口紅なし", [("lips", "neg")]), ("プロっぽい雰囲気", [("professional", N)]), ("自信のある表情", [("confident", N)]),
    ],
    "ko": [
        ("미소", [("smile", N)]), ("활짝 웃는 얼굴", [("smile_high", N)]), ("무표정", [("serious", N)]),
        ("눈을 크게", [("eyes_big", N)]), ("갸름한 얼굴", [("slim", N)]), ("콧볼을 좁게", [("nose_narrow", N)]),
        ("눈썹을 올려", [("brows_up", N)]), ("매끈한 피부", [("smooth", N)]), ("구릿빛 피부", [("tan", N)]),
        ("차가운 톤의 하얀 피부", [("cool", N)]), ("얼굴을 밝게", [("bright", N)]), ("어두운 분위기", [("dark", N)]),
        ("선명한 색감", [("vivid", N)]), ("흑백", [("muted", N)]), ("빨간 립스틱", [("lips", N)]),
        ("핑크 블러셔", [("blush", N)]), ("또렷한 광대 컨투어", [("contour", N)]), ("스모키 눈화장", [("eye_makeup", N)]),
        ("생얼", [("no_makeup", N)]), ("진한 화장", [("heavy_makeup", N)]), ("피곤한 얼굴", [("tired", N)]),
        ("더 어려 보이게", [("younger", N)]), ("살짝 미소", [("smile_low", N)]), ("아주 큰 눈", [("eyes_big", HIGH)]),
        ("미소, 빨간 입술", [("smile", N), ("lips", N)]), ("자신감 있는 모습", [("confident", N)]),
        ("나이 들어 보이게", [("older", N)]),
    ],
    "es": [
        ("una sonrisa", [("smile", N)]), ("una sonrisa enorme", [("smile_high", N)]), ("cara seria", [("serious", N)]),
        ("ojos más grandes", [("eyes_big", N)]), ("cara más delgada", [("slim", N)]), ("nariz más fina", [("nose_narrow", N)]),
        ("cejas levantadas", [("brows_up", N)]), ("piel suave", [("smooth", N)]), ("piel bronceada", [("tan", N)]),
        ("piel de porcelana", [("cool", N)]), ("cara más luminosa", [("bright", N)]), ("más oscuro", [("dark", N)]),
        ("colores vivos", [("vivid", N)]), ("labios rojos", [("lips", N)]), ("mejillas sonrosadas", [("blush", N)]),
        ("pómulos marcados", [("contour", N)]), ("ojos ahumados", [("eye_makeup", N)]), ("sin maquillaje", [("no_makeup", N)]),
        ("maquillaje intenso", [("heavy_makeup", N)]), ("cara cansada", [("tired", N)]), ("parecer más joven", [("younger", N)]),
        ("un poco de rubor", [("blush", LOW)]), ("muy sonriente", [("smile", HIGH)]),
        ("labios rojos y ojos ahumados", [("lips", N), ("eye_makeup", N)]), ("sin labios rojos", [("lips", "neg")]),
        ("aspecto profesional", [("professional", N)]), ("más segura de sí misma", [("confident", N)]),
    ],
    "fr": [
        ("un sourire", [("smile", N)]), ("un grand sourire", [("smile_high", N)]), ("visage sérieux", [("serious", N)]),
        ("des yeux plus grands", [("eyes_big", N)]), ("visage plus fin", [("slim", N)]), ("nez plus fin", [("nose_narrow", N)]),
        ("sourcils relevés", [("brows_up", N)]), ("peau lisse", [("smooth", N)]), ("peau bronzée", [("tan", N)]),
        ("peau de porcelaine", [("cool", N)]), ("visage plus lumineux", [("bright", N)]), ("plus sombre", [("dark", N)]),
        ("couleurs vives", [("vivid", N)]), ("rouge à lèvres rouge", [("lips", N)]), ("joues rosées", [("blush", N)]),
        ("pommettes sculptées", [("contour", N)]), ("yeux charbonneux", [("eye_makeup", N)]), ("sans maquillage", [("no_makeup", N)]),
        ("maquillage glamour complet", [("heavy_makeup", N)]), ("visage fatigué", [("tired", N)]),
        ("paraître plus jeune", [("younger", N)]), ("légèrement souriant", [("smile_low", N)]),
        ("des yeux très grands", [("eyes_big", HIGH)]), ("un sourire et des joues rosées", [("smile", N), ("blush", N)]),
        ("pas de rouge à lèvres", [("lips", "neg")]), ("look professionnel", [("professional", N)]), ("air confiant", [("confident", N)]),
    ],
    "de": [
        ("ein Lächeln", [("smile", N)]), ("ein breites Grinsen", [("smile_high", N)]), ("ernstes Gesicht", [("serious", N)]),
        ("größere Augen", [("eyes_big", N)]), ("schmaleres Gesicht", [("slim", N)]), ("schmalere Nase", [("nose_narrow", N)]),
        ("hochgezogene Augenbrauen", [("brows_up", N)]), ("glatte Haut", [("smooth", N)]), ("gebräunte Haut", [("tan", N)]),
        ("kühle blasse Haut", [("cool", N)]), ("helleres Gesicht", [("bright", N)]), ("dunkler", [("dark", N)]),
        ("kräftige Farben", [("vivid", N)]), ("rote Lippen", [("lips", N)]), ("rosige Wangen", [("blush", N)]),
        ("markante Wangenknochen", [("contour", N)]), ("dunkler Lidstrich", [("eyeliner", N)]), ("ungeschminkt", [("no_makeup", N)]),
        ("starkes Make-up", [("heavy_makeup", N)]), ("müdes Gesicht", [("tired", N)]), ("jünger aussehen", [("younger", N)]),
        ("ein leichtes Lächeln", [("smile_low", N)]), ("sehr große Augen", [("eyes_big", HIGH)]),
        ("rote Lippen und rosige Wangen", [("lips", N), ("blush", N)]), ("keine roten Lippen", [("lips", "neg")]),
        ("professioneller Look", [("professional", N)]), ("selbstbewusst", [("confident", N)]),
    ],
    "pt": [
        ("um sorriso", [("smile", N)]), ("um sorriso enorme", [("smile_high", N)]), ("rosto sério", [("serious", N)]),
        ("olhos maiores", [("eyes_big", N)]), ("rosto mais fino", [("slim", N)]), ("nariz mais fino", [("nose_narrow", N)]),
        ("sobrancelhas levantadas", [("brows_up", N)]), ("pele lisa", [("smooth", N)]), ("pele bronzeada", [("tan", N)]),
        ("pele de porcelana", [("cool", N)]), ("rosto mais iluminado", [("bright", N)]), ("mais escuro", [("dark", N)]),
        ("cores vivas", [("vivid", N)]), ("batom vermelho", [("lips", N)]), ("bochechas rosadas", [("blush", N)]),
        ("maçãs do rosto marcadas", [("contour", N)]), ("olho esfumado", [("eye_makeup", N)]), ("sem maquiagem", [("no_makeup", N)]),
        ("maquiagem pesada", [("heavy_makeup", N)]), ("rosto cansado", [("tired", N)]), ("parecer mais jovem", [("younger", N)]),
        ("um leve sorriso", [("smile_low", N)]), ("olhos muito grandes", [("eyes_big", HIGH)]),
        ("batom vermelho com olho esfumado", [("lips", N), ("eye_makeup", N)]), ("sem batom vermelho", [("lips", "neg")]),
        ("visual profissional", [("professional", N)]), ("mais confiante", [("confident", N)]),
    ],
}


def target(recipe: list[tuple[str, float | str]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for atom, how in recipe:
        base, negated = ATOMS[atom][2], ATOMS[atom][4]
        part = dict(negated or {}) if how == "neg" else {k: max(-1.0, min(1.0, v * float(how))) for k, v in base.items()}
        for k, v in part.items():
            out[k] = round(max(-1.0, min(1.0, out.get(k, 0.0) + v)), 3)
    return {k: v for k, v in sorted(out.items()) if v != 0}


def kind(recipe: list[tuple[str, float | str]]) -> str:
    if len(recipe) > 1:
        return "combination"
    return "negation" if recipe[0][1] == "neg" else ("intensity" if recipe[0][1] != N else "base")


def rows() -> list[dict]:
    return [{"text": text, "lang": lang, "kind": kind(recipe), "target": target(recipe)}
            for lang, items in PROMPTS.items() for text, recipe in items]


def main() -> None:
    with (HERE / "zero_shot.jsonl").open("w", encoding="utf-8") as f:
        for r in rows():
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(json.dumps({lang: len(items) for lang, items in PROMPTS.items()}))


if __name__ == "__main__":
    main()
