"""Writes the phrase corpus (train.jsonl, heldout.jsonl) from the hand-written atoms below.

Each atom is one idea a streamer might type, with the edit vector it should produce: its English and
Chinese phrases are here, its Japanese, Korean, Spanish, French, German and Portuguese phrases in
lexicon/<lang>.json, each language with its own templates for intensity ("slightly", "很", "少しだけ{}"),
negation ("no ...", "不要...", "{}なし", "sin {}"), request frames ("make me ...", "让我...") and joins.
Prompts are built from atoms with those templates and as combinations of two or three atoms. The held-out
split is decided by a hash of the prompt; English and Chinese keep their own generator and every other
language has one of its own, so adding a language moves no existing prompt. The hand-written
zero_shot.jsonl prompts are never generated (a generated prompt equal to one is skipped), so they stay
held out. A lexicon may add a "more" block (more phrases per atom, negations written whole such as "웃지 마",
and more templates); its prompts are drawn last with their own generator, so they move no earlier prompt, and
split by the same hash. Deterministic: same file every run.

    python data/prompts/build_corpus.py
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
HELDOUT_PERCENT = 20
SEED = 5

# name: (english phrases, chinese phrases, target at normal intensity, gradable, negated target or None)
# Negating a feature that adds something ("no red lips") asks for a little of its opposite; negating a
# mood or style ("not tired") asks for nothing, so those negations target all zeros.
ATOMS: dict[str, tuple[list[str], list[str], dict[str, float], bool, dict[str, float] | None]] = {
    "smile": (["smile", "smiling", "a smile", "happy expression", "cheerful face", "a warm smile"],
              ["微笑", "笑一笑", "开心的表情", "开心"], {"smile": 0.6}, True, {"smile": -0.4}),
    "smile_low": (["a slight smile", "a subtle smile", "a hint of a smile", "a soft smile", "slightly smiling"],
                  ["微微一笑", "淡淡的微笑", "浅浅的笑"], {"smile": 0.3}, False, None),
    "smile_high": (["a big grin", "a huge smile", "beaming", "grinning widely", "laughing happily", "a wide toothy smile"],
                   ["大笑", "咧嘴大笑", "灿烂的笑容", "笑得很开心"], {"smile": 0.9}, False, None),
    "serious": (["serious face", "stern expression", "don't smile", "not smiling", "straight face"],
                ["不要笑", "别笑", "不笑", "严肃的表情", "严肃"], {"smile": -0.5}, False, None),
    "frown": (["frown", "frowning", "scowl", "grumpy look"], ["皱眉"], {"smile": -0.4, "brow_raise": -0.4}, False, None),
    "eyes_big": (["bigger eyes", "big eyes", "larger eyes", "wide eyes", "enlarge my eyes"],
                 ["大眼睛", "眼睛放大"], {"eye_size": 0.6}, True, {"eye_size": -0.3}),
    "eyes_big_low": (["slightly bigger eyes", "a bit larger eyes", "eyes a little bigger"], ["眼睛大一点"], {"eye_size": 0.3}, False, None),
    "eyes_big_high": (["huge anime eyes", "much bigger eyes", "enormous doll eyes"], ["超大眼睛"], {"eye_size": 0.9}, False, None),
    "eyes_small": (["smaller eyes", "narrow eyes", "squint", "squinting"], ["小眼睛", "眯眼", "眼睛小一点"], {"eye_size": -0.5}, True, None),
    "slim": (["slimmer face", "v-shaped face", "thinner face", "slim my face", "a narrower jaw"],
             ["瘦脸", "v脸", "小脸", "脸瘦一点"], {"face_slim": 0.6}, True, {"face_slim": -0.3}),
    "round": (["fuller face", "rounder face", "chubby cheeks", "a wider jaw"], ["圆脸", "脸圆一点", "婴儿肥"], {"face_slim": -0.5}, True, None),
    "nose_narrow": (["narrower nose", "slimmer nose", "a thin nose", "refine my nose"], ["瘦鼻", "窄鼻子", "鼻子窄一点"], {"nose_width": -0.5}, True, {"nose_width": 0.3}),
    "nose_wide": (["wider nose", "broader nose", "a wide nose"], ["宽鼻子", "鼻子宽一点"], {"nose_width": 0.5}, True, None),
    "brows_up": (["raised eyebrows", "surprised", "lifted brows", "arched eyebrows", "eyebrows up"],
                 ["挑眉", "惊讶", "眉毛抬高"], {"brow_raise": 0.6}, True, {"brow_raise": -0.3}),
    "brows_down": (["lowered brows", "furrowed brows", "brows down"], ["低眉", "压眉"], {"brow_raise": -0.5}, True, None),
    "smooth": (["smooth skin", "airbrushed", "flawless skin", "soft skin", "retouched skin", "blur my pores"],
               ["磨皮", "皮肤光滑", "美颜", "无瑕肌肤"], {"skin_smooth": 0.7}, True, {"skin_smooth": -0.3}),
    "texture": (["natural skin texture", "detailed skin texture", "sharpen details", "crisp detailed skin"],
                ["保留皮肤纹理", "真实肤质", "锐化"], {"skin_smooth": -0.4}, True, None),
    "warm": (["warm skin tone", "warmer skin", "golden warm glow", "a warmer complexion", "warm undertones"],
             ["暖色调", "暖一点", "健康肤色", "暖黄皮"], {"skin_warmth": 0.6}, True, {"skin_warmth": -0.3}),
    "cool": (["cool skin tone", "cool pale skin", "porcelain skin", "cooler skin", "icy cool tone"],
             ["冷白皮", "冷色调", "瓷白肌"], {"skin_warmth": -0.5, "brightness": 0.3}, True, None),
    "tan": (["a tan", "a deep sun tan", "tanned skin", "bronzed skin", "a beach tan", "sun-kissed tanned skin"],
            ["小麦色皮肤", "晒黑", "古铜色皮肤", "美黑", "黝黑的皮肤"], {"tan": 0.7}, True, {"tan": -0.3}),
    "bright": (["brighter", "lighter skin", "glowing", "luminous", "brighten my face", "a bright face"],
               ["提亮", "亮一点", "肤色提亮", "发光", "透亮"], {"brightness": 0.6}, True, {"brightness": -0.3}),
    "dark": (["darker", "dim", "moody", "a darker face", "dull and dark"], ["暗一点", "暗沉", "阴郁"], {"brightness": -0.5}, True, None),
    "vivid": (["vivid colors", "vibrant colors", "saturated colors", "more color", "colorful"],
              ["鲜艳", "色彩鲜艳", "高饱和"], {"saturation": 0.6}, True, {"saturation": -0.3}),
    "muted": (["muted colors", "desaturated", "black and white", "washed out colors", "faded colors"],
              ["低饱和", "淡雅", "黑白"], {"saturation": -0.6}, True, None),
    "lips": (["red lips", "lipstick", "bold red lipstick", "tinted lips", "rose lips", "pink lipstick"],
             ["红唇", "口红", "大红唇", "咬唇妆"], {"lip_tint": 0.7}, True, {"lip_tint": -0.3}),
    # a colour word names the shade (engines/prompt/colour_words.py); the encoder only has to see lipstick
    "lips_colour": (["coral lipstick", "berry lips", "plum lipstick", "a wine red lip", "orange lipstick",
                     "dusty rose lipstick", "a hot pink lip", "brick red lipstick"],
                    ["豆沙色口红", "珊瑚色口红", "莓果色口红", "酒红色口红", "橘色口红", "梅子色唇妆"], {"lip_tint": 0.7}, True,
                    {"lip_tint": -0.3}),
    "lips_nude": (["nude lips", "pale lips", "natural lip color"], ["裸色唇", "淡唇"], {"lip_tint": -0.4}, True, None),
    "lips_full": (["fuller lips", "plump lips", "bigger lips", "a lip filler look", "poutier lips", "thicker lips"],
                  ["丰唇", "嘟嘟唇", "嘴唇丰满一点", "厚嘴唇", "嘴唇饱满"], {"lip_fullness": 0.6}, True, {"lip_fullness": -0.3}),
    "lips_thin": (["thinner lips", "thin lips", "smaller lips", "less pouty lips"], ["薄嘴唇", "嘴唇薄一点", "小嘴唇"],
                  {"lip_fullness": -0.5}, True, None),
    "blush": (["blush", "rosy cheeks", "pink cheeks", "flushed cheeks", "a bit of blush"],
              ["腮红", "红润的脸颊", "粉嫩脸颊"], {"blush": 0.6}, True, {"blush": -0.3}),
    "contour": (["contour", "defined cheekbones", "sharp cheekbones", "chiseled face", "sculpted cheekbones"],
                ["修容", "立体轮廓", "高颧骨"], {"contour": 0.6}, True, {"contour": -0.3}),
    "blush_colour": (["peach blush", "coral blush", "pink blush", "a rose blush", "berry blush"],
                     ["蜜桃色腮红", "珊瑚色腮红", "粉色腮红", "杏色腮红"], {"blush": 0.6}, True, {"blush": -0.3}),
    "eyeshadow_colour": (["brown eyeshadow", "gold eyeshadow", "purple eyeshadow", "bronze smoky eyes", "plum eyeshadow"],
                         ["大地色眼影", "金色眼影", "紫色眼影", "棕色眼影"], {"eye_makeup": 0.7}, True, {"eye_makeup": -0.3}),
    "eyeliner_colour": (["black eyeliner", "brown eyeliner", "navy eyeliner", "a black liquid liner", "bronze eyeliner"],
                        ["黑色眼线", "棕色眼线", "咖啡色眼线", "蓝色眼线"], {"eyeliner": 0.7}, True, {}),
    # a smoky eye is shadow and liner together; "eyeshadow" and "eyeliner" are one each
    "eye_makeup": (["smoky eyes", "eye makeup", "dramatic eye makeup", "smoky eye makeup", "a smoky eye look"],
                   ["烟熏妆", "眼妆", "浓眼妆", "烟熏眼妆"], {"eye_makeup": 0.7, "eyeliner": 0.6}, True, {"eye_makeup": -0.3}),
    "eyeshadow": (["eyeshadow", "eye shadow", "shimmery eyelids", "a wash of eyeshadow", "shadow on my lids"],
                  ["眼影", "涂眼影", "画眼影", "珠光眼影"], {"eye_makeup": 0.7}, True, {"eye_makeup": -0.3}),
    "eyeliner": (["eyeliner", "winged eyeliner", "eyeliner wings", "a winged liner", "liquid eyeliner", "a sharp eyeliner flick"],
                 ["眼线", "上扬眼线", "猫眼线", "画眼线", "眼尾上挑的眼线"], {"eyeliner": 0.7}, True, {}),
    "no_makeup": (["no makeup", "bare face", "makeup-free", "barefaced natural look", "remove my makeup"],
                  ["素颜", "不化妆", "裸妆"], {"lip_tint": -0.3, "eye_makeup": -0.4, "blush": -0.3, "contour": -0.3}, False, None),
    "heavy_makeup": (["heavy makeup", "full glam", "full face of makeup", "glamorous makeup", "drag queen makeup"],
                     ["浓妆", "全妆"], {"lip_tint": 0.7, "eye_makeup": 0.8, "eyeliner": 0.7, "blush": 0.4, "contour": 0.5}, False, {}),
    "light_makeup": (["light makeup", "a little makeup", "natural everyday makeup", "minimal makeup"],
                     ["淡妆"], {"lip_tint": 0.3, "eye_makeup": 0.3, "blush": 0.2}, False, {}),
    "k_beauty": (["k-beauty glass skin", "korean glass skin look", "dewy korean makeup", "glass skin", "korean idol makeup"],
                 ["韩系清透裸妆", "韩式水光肌", "韩妆", "水光肌"],
                 {"skin_smooth": 0.7, "brightness": 0.4, "lip_tint": 0.3, "blush": 0.3, "skin_glow": 0.4}, False, {}),
    "j_soft": (["soft japanese look", "japanese style makeup", "gentle japanese makeup", "kawaii japanese look"],
               ["温柔的日系妆容感", "日系妆容", "日系温柔妆"],
               {"blush": 0.5, "skin_smooth": 0.4, "skin_warmth": 0.3, "eye_size": 0.3, "saturation": -0.2}, False, {}),
    "western": (["sculpted western contours", "western glam makeup", "instagram baddie makeup", "hollywood glam"],
                ["欧美妆", "欧美立体妆容"],
                {"contour": 0.7, "eye_makeup": 0.6, "eyeliner": 0.5, "face_slim": 0.4, "lip_tint": 0.4, "nose_width": -0.3}, False, {}),
    "professional": (["professional look", "polished professional", "business headshot", "corporate headshot", "linkedin photo"],
                     ["职业形象", "专业形象", "商务照"],
                     {"skin_smooth": 0.4, "brightness": 0.2, "saturation": -0.2, "smile": 0.3}, False, {}),
    "confident": (["confident", "look more confident", "self-assured", "bold and confident", "powerful look"],
                  ["自信", "更自信", "气场强"], {"smile": 0.3, "contour": 0.3, "brightness": 0.2}, True, {}),
    "tired": (["tired", "exhausted", "sleepy", "worn out", "drained"], ["疲惫", "累", "困", "没精神"],
              {"brightness": -0.4, "saturation": -0.4, "eye_size": -0.3, "skin_smooth": -0.3}, True, {}),
    "younger": (["look younger", "younger looking", "youthful", "a younger face", "ten years younger"],
                ["显年轻", "年轻", "减龄"], {"skin_smooth": 0.7, "brightness": 0.3, "eye_size": 0.2, "face_slim": 0.2}, True, {}),
    "older": (["look older", "older looking", "aged", "an older face", "ten years older"], ["显老", "老一点", "成熟"],
              {"skin_smooth": -0.6, "saturation": -0.3, "brightness": -0.2}, True, {}),
    "neutral": (["keep my face as it is", "no edits", "original look", "no change", "leave it natural", "as is"],
                ["保持原样", "原样", "无变化", "不变"], {}, False, None),
    "eye_contact": (["eye contact", "looking at the camera", "direct eye contact", "eyes on the camera",
                     "a gaze into the lens", "looking straight into the camera"],
                    ["看镜头", "眼神看镜头", "直视镜头", "眼神交流", "看着摄像头"], {"eye_contact": 0.9}, False, None),
    "brows_fill": (["darker eyebrows", "fuller brows", "filled-in brows", "bold brows", "defined eyebrows", "thicker eyebrows"],
                   ["浓眉", "眉毛加深", "画眉", "野生眉", "眉毛浓一点"], {"brow_tint": 0.6}, True, {"brow_tint": -0.3}),
    "brows_light": (["lighter eyebrows", "blonde brows", "softer brows"], ["淡眉", "眉毛淡一点"], {"brow_tint": -0.5}, True, None),
    "brow_colour": (["black eyebrows", "brown brows", "dark brown eyebrows"], ["黑色眉毛", "棕色眉毛", "深棕色眉毛"],
                    {"brow_tint": 0.7}, False, None),
    "chin_v": (["a v-line chin", "a longer chin", "a pointed chin", "a sharper chin", "a more defined chin"],
               ["尖下巴", "v字下巴", "下巴长一点", "下巴尖一点"], {"chin": 0.6}, True, {"chin": -0.3}),
    "chin_short": (["a shorter chin", "a smaller chin", "a short chin", "less chin"], ["短下巴", "下巴短一点", "下巴小一点"],
                   {"chin": -0.5}, True, None),
    "nose_short": (["a shorter nose", "a button nose", "a lifted nose tip", "a cute upturned nose", "a short nose"],
                   ["短鼻子", "鼻子短一点", "小翘鼻", "鼻头上翘"], {"nose_length": -0.6}, True, {"nose_length": 0.3}),
    "nose_long": (["a longer nose", "a long nose", "a longer nose bridge"], ["长鼻子", "鼻子长一点"], {"nose_length": 0.5}, True, None),
    "lips_gloss": (["glossy lips", "lip gloss", "shiny lips", "a glossy lip", "juicy glossy lips", "wet-look lips"],
                   ["水光唇", "唇釉", "镜面唇", "亮晶晶的嘴唇", "水润唇"], {"lip_gloss": 0.7}, True, {"lip_gloss": -0.3}),
    "lips_matte": (["matte lips", "a matte lip", "velvet matte lips", "a powdery matte lip finish"], ["哑光唇", "雾面唇", "丝绒唇"],
                   {"lip_gloss": -0.6}, True, None),
    "skin_glow": (["dewy skin", "a dewy glow", "highlighter", "highlighter on my cheekbones", "a healthy glow", "radiant dewy skin"],
                  ["高光", "打高光", "光泽肌", "水光感", "自然光泽"], {"skin_glow": 0.7}, True, {"skin_glow": -0.3}),
    "skin_matte": (["matte skin", "a matte finish", "no shine", "shine-free skin", "an oil-free matte face", "powdered matte skin"],
                   ["哑光肌", "雾面妆", "控油", "雾面肌", "不油光"], {"skin_glow": -0.6}, True, None),
    "tone_even": (["an even skin tone", "even out my skin tone", "less redness", "no red patches", "an even complexion",
                   "uniform skin tone"], ["肤色均匀", "匀肤", "去红血丝", "改善肤色不均", "遮盖泛红"], {"even_tone": 0.7}, True, None),
    "forehead_small": (["a smaller forehead", "a shorter forehead", "a lower hairline", "less forehead", "reduce my forehead"],
                       ["小额头", "额头小一点", "额头短一点", "发际线低一点"], {"forehead": -0.6}, True, None),
    "forehead_high": (["a higher forehead", "a taller forehead", "a bigger forehead", "a higher hairline", "a longer forehead"],
                      ["高额头", "额头高一点", "大额头", "额头长一点"], {"forehead": 0.5}, True, None),
}

EN_LOW = ["slightly", "a bit", "a little", "somewhat"]
EN_HIGH = ["very", "extremely", "super", "really"]
ZH_LOW = ["稍微", "有点", "一点", "略微"]
ZH_HIGH = ["非常", "超级", "特别", "很"]
EN_NEG = ["no {}", "without {}", "not {}", "don't want {}"]
ZH_NEG = ["不要{}", "没有{}", "别{}"]
EN_FRAME = ["{}", "{}", "make me look {}", "give me {}", "i want {}", "please, {}"]
ZH_FRAME = ["{}", "{}", "让我{}", "给我{}", "我想要{}", "请{}"]
EN_JOIN = [", ", " and ", " with ", ", plus "]
ZH_JOIN = ["，", "和", "、", "加上"]
LOW, HIGH = 0.5, 1.4
# Languages beyond English and Chinese: lexicon/<lang>.json holds each atom's phrases in that language and
# its own templates ({} is the phrase) for intensity, negation, request frames and joins.
LEXICON = HERE / "lexicon"
ZERO_SHOT = HERE / "zero_shot.jsonl"   # hand-written held-out prompts (build_zero_shot.py)
COMBOS = {"en": 320, "zh": 260}
COMBOS_OTHER = 160
COMBOS_MORE = {"ko": 80}   # combinations of a lexicon's "more" prompts; 30 where a language has no entry here


@dataclass(frozen=True)
class More:
    """A lexicon's second phrase lists: prompts drawn after all others with their own generator."""
    phrases: dict[str, list[str]]     # atom name -> more phrases
    negations: dict[str, list[str]]   # atom name -> negations written whole ("웃지 마"); target: the atom's negated one
    low: list[str]                    # more templates, used with the atom's first and more phrases
    high: list[str]
    neg: list[str]
    frame: list[str]


@dataclass(frozen=True)
class Language:
    code: str
    phrases: dict[str, list[str]]   # atom name -> phrases
    low: list[str]                  # templates, "{}" is the phrase
    high: list[str]
    neg: list[str]
    frame: list[str]
    join: list[str]
    more: More | None = None


def _more(path: Path, block: dict | None) -> More | None:
    if block is None:
        return None
    unknown = (set(block.get("atoms", {})) | set(block.get("negations", {}))) - set(ATOMS)
    if unknown:
        raise SystemExit(f"{path}: unknown atoms in more: {sorted(unknown)}")
    cannot = [k for k in block.get("negations", {}) if ATOMS[k][4] is None]
    if cannot:
        raise SystemExit(f"{path}: more.negations for atoms without a negated target: {sorted(cannot)}")
    return More({k: list(v) for k, v in block.get("atoms", {}).items()}, {k: list(v) for k, v in block.get("negations", {}).items()},
                block.get("low", []), block.get("high", []), block.get("neg", []), block.get("frame", []))


def languages() -> list[Language]:
    en = Language("en", {k: a[0] for k, a in ATOMS.items()}, [w + " {}" for w in EN_LOW], [w + " {}" for w in EN_HIGH],
                  EN_NEG, EN_FRAME, EN_JOIN)
    zh = Language("zh", {k: a[1] for k, a in ATOMS.items()}, [w + "{}" for w in ZH_LOW], [w + "{}" for w in ZH_HIGH],
                  ZH_NEG, ZH_FRAME, ZH_JOIN)
    out = [en, zh]
    for path in sorted(LEXICON.glob("*.json")):
        lex = json.loads(path.read_text(encoding="utf-8"))
        missing = set(ATOMS) - set(lex["atoms"])
        if missing:
            raise SystemExit(f"{path}: atoms missing: {sorted(missing)}")
        out.append(Language(lex["lang"], {k: list(lex["atoms"][k]) for k in ATOMS}, lex["low"], lex["high"], lex["neg"],
                            lex["frame"], lex["join"], _more(path, lex.get("more"))))
    return out


def _scaled(target: dict[str, float], k: float) -> dict[str, float]:
    return {n: round(max(-1.0, min(1.0, v * k)), 3) for n, v in target.items()}


def _variants(lang: Language, rng: random.Random) -> list[tuple[str, dict[str, float], str]]:
    """Single-atom prompts: (text, target, kind)."""
    out = []
    for name, (_, _, target, gradable, negated) in ATOMS.items():
        for p in lang.phrases[name]:
            out.append((p, dict(target), "base"))
            if gradable:
                out.append((rng.choice(lang.low).format(p), _scaled(target, LOW), "intensity"))
                out.append((rng.choice(lang.high).format(p), _scaled(target, HIGH), "intensity"))
            if negated is not None:  # every negation form: "no", "without", "not" must all switch an idea off
                out.extend((form.format(p), dict(negated), "negation") for form in lang.neg)
    return out


def _combos(lang: Language, singles: list[tuple[str, dict[str, float], str]], n: int, rng: random.Random):
    out = []
    while len(out) < n:
        k = 2 if rng.random() < 0.7 else 3
        parts = rng.sample(singles, k)
        keys = [set(t) for _, t, _ in parts]
        if any(keys[i] & keys[j] for i in range(k) for j in range(i + 1, k)):
            continue  # two atoms on one edit would sum to an ambiguous target
        text = parts[0][0]
        for p in parts[1:]:
            text += rng.choice(lang.join) + p[0]
        target: dict[str, float] = {}
        for _, t, _ in parts:
            target.update(t)
        out.append((text, target, "combination"))
    return out


def _row(text: str, lang: str, kind: str, target: dict[str, float]) -> dict:
    split = "heldout" if int(hashlib.sha256(text.encode()).hexdigest(), 16) % 100 < HELDOUT_PERCENT else "train"
    return {"text": text, "lang": lang, "kind": kind, "split": split,
            "target": {k: v for k, v in sorted(target.items()) if v != 0}}


def build() -> list[dict]:
    langs = languages()
    rows = []
    # the hand-written zero-shot prompts stay held out: a generated prompt that happens to equal one is skipped
    seen = {json.loads(line)["text"] for line in ZERO_SHOT.read_text(encoding="utf-8").splitlines() if line.strip()}
    rng = random.Random(SEED)   # English and Chinese share one generator (their prompts predate the others')
    for lang in langs:
        r = rng if lang.code in ("en", "zh") else random.Random(f"{SEED}-{lang.code}")
        singles = _variants(lang, r)
        combos = _combos(lang, [s for s in singles if s[2] != "negation" or r.random() < 0.5],
                         COMBOS.get(lang.code, COMBOS_OTHER), r)
        for text, target, kind in singles + combos:
            text = r.choice(lang.frame).format(text) if kind != "negation" else text
            if text in seen:
                continue
            seen.add(text)
            rows.append(_row(text, lang.code, kind, target))
    # Negations inside a request frame ("give me without self-assured", "我想要不要笑"): without these the
    # frame words were only ever seen around wishes, and a framed negated mood leaked its edits. Drawn with
    # their own generator after everything above, so the earlier prompts (and their split) do not change.
    extra = random.Random(SEED + 1)
    for lang in langs:
        r = extra if lang.code in ("en", "zh") else random.Random(f"{SEED + 1}-{lang.code}")
        frames = [f for f in lang.frame if f != "{}"]
        for name, (_, _, _, _, negated) in ATOMS.items():
            if negated is None:
                continue
            for p in lang.phrases[name]:
                text = r.choice(frames).format(r.choice(lang.neg).format(p))
                if text in seen:
                    continue
                seen.add(text)
                rows.append(_row(text, lang.code, "negation", negated))
    # A lexicon's "more" block, drawn after everything above with its own generator per language (so no earlier
    # prompt or split changes): the more phrases as base, intensity and three negation forms each, the more
    # templates once on each first-list phrase, the negations written whole, and combinations of these.
    for lang in langs:
        if lang.more is None:
            continue
        m, r = lang.more, random.Random(f"{SEED + 2}-{lang.code}")
        low, high, neg, frame = lang.low + m.low, lang.high + m.high, lang.neg + m.neg, lang.frame + m.frame
        singles = []
        for name, (_, _, target, gradable, negated) in ATOMS.items():
            for p in m.phrases.get(name, []):
                singles.append((p, dict(target), "base"))
                if gradable:
                    singles.append((r.choice(low).format(p), _scaled(target, LOW), "intensity"))
                    singles.append((r.choice(high).format(p), _scaled(target, HIGH), "intensity"))
                if negated is not None:
                    singles.extend((form.format(p), dict(negated), "negation") for form in r.sample(neg, 3))
            for p in lang.phrases[name]:
                if gradable and m.low:
                    singles.append((r.choice(m.low).format(p), _scaled(target, LOW), "intensity"))
                if gradable and m.high:
                    singles.append((r.choice(m.high).format(p), _scaled(target, HIGH), "intensity"))
                if negated is not None and m.neg:
                    singles.append((r.choice(m.neg).format(p), dict(negated), "negation"))
            if negated is not None:
                singles.extend((p, dict(negated), "negation") for p in m.negations.get(name, []))
        combos = _combos(lang, [s for s in singles if s[2] != "negation" or r.random() < 0.5],
                         COMBOS_MORE.get(lang.code, 30), r)
        for text, target, kind in singles + combos:
            text = r.choice(frame).format(text) if kind != "negation" else text
            if text in seen:
                continue
            seen.add(text)
            rows.append(_row(text, lang.code, kind, target))
    return rows


def main() -> None:
    rows = build()
    for split in ("train", "heldout"):
        with (HERE / f"{split}.jsonl").open("w", encoding="utf-8") as f:
            for r in rows:
                if r["split"] == split:
                    f.write(json.dumps({k: v for k, v in r.items() if k != "split"}, ensure_ascii=False) + "\n")
    counts = {}
    for r in rows:
        key = f"{r['split']}/{r['lang']}"
        counts[key] = counts.get(key, 0) + 1
    print(json.dumps({"prompts": len(rows), **counts}))


if __name__ == "__main__":
    main()
