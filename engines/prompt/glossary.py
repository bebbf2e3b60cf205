"""Chinese -> English glossary for prompts, so Chinese works with the bundled English-only MiniLM.

MiniLM's vocabulary holds single CJK characters but it learnt no meaning for them, so a Chinese prompt is
translated phrase by phrase (longest match first) before encoding. Latin text passes through; CJK
characters no entry covers are dropped and reported, so the client can be told what was not understood.
A multilingual encoder calibrated with `livefuse calibrate --encoder PATH --no-glossary` reads Chinese
directly and skips this.
"""

from __future__ import annotations

import re
from functools import cache

# Longest match wins, so a whole phrase ("不要笑") beats its parts ("不要" + "笑").
GLOSSARY: dict[str, str] = {
    # frames and joins
    "让我": "make me", "给我": "give me", "我想要": "i want", "我要": "i want", "请": "please", "帮我": "help me get",
    "看起来": "look", "显得": "look", "一些": "some", "的": " ", "和": " and ", "还有": " and ", "加上": ", plus ",
    "并且": " and ", "同时": " and ", "，": ", ", "、": ", ", "；": "; ", "。": ". ", "！": "! ", "又": " and ",
    # intensities and negation
    "稍微": "slightly", "有点": "a bit", "一点": "a bit", "一点点": "a little", "淡淡": "subtle", "轻微": "slight",
    "微微": "slightly", "略微": "slightly", "很": "very", "非常": "very", "超级": "super", "特别": "extremely",
    "极其": "extremely", "更": "more", "更加": "more", "多一点": "more", "不要": "no", "别": "don't", "没有": "without",
    "不": "not", "无": "no", "去掉": "remove the",
    # smile
    "微笑": "smile", "笑一笑": "smile", "笑": "smile", "开心的表情": "happy expression", "开心": "happy",
    "微微一笑": "a slight smile", "淡淡的微笑": "a subtle smile", "浅浅的笑": "a soft smile", "大笑": "a big grin",
    "咧嘴大笑": "grinning widely", "灿烂的笑容": "a huge smile", "笑得很开心": "laughing happily",
    "不要笑": "don't smile", "别笑": "don't smile", "别笑一笑": "don't smile", "不要笑一笑": "don't smile",
    "没有笑一笑": "without a smile", "不笑": "not smiling", "严肃的表情": "serious face",
    "严肃": "serious", "皱眉": "frown",
    # eyes
    "大眼睛": "big eyes", "眼睛放大": "bigger eyes", "眼睛大一点": "slightly bigger eyes", "超大眼睛": "huge anime eyes",
    "小眼睛": "smaller eyes", "眯眼": "squint", "眼睛小一点": "slightly smaller eyes",
    # face shape
    "瘦脸": "slimmer face", "v脸": "v-shaped face", "小脸": "thinner face", "脸瘦一点": "slightly slimmer face",
    "圆脸": "rounder face", "脸圆一点": "slightly fuller face", "婴儿肥": "chubby cheeks",
    # nose
    "瘦鼻": "narrower nose", "窄鼻子": "slimmer nose", "鼻子窄一点": "slightly narrower nose",
    "宽鼻子": "wider nose", "鼻子宽一点": "slightly wider nose",
    # brows
    "挑眉": "raised eyebrows", "惊讶": "surprised", "眉毛抬高": "lifted brows", "低眉": "lowered brows",
    "压眉": "furrowed brows",
    # skin
    "磨皮": "smooth skin", "皮肤光滑": "smooth skin", "美颜": "airbrushed", "无瑕肌肤": "flawless skin",
    "保留皮肤纹理": "natural skin texture", "真实肤质": "detailed skin texture", "锐化": "sharpen details",
    "暖色调": "warm skin tone", "暖黄皮": "warm undertones", "暖一点": "a bit warmer", "健康肤色": "warm healthy skin tone",
    "冷白皮": "cool pale skin", "冷色调": "cool skin tone", "瓷白肌": "porcelain skin",
    "提亮": "brighter", "亮一点": "a bit brighter", "肤色提亮": "lighter skin", "发光": "glowing", "透亮": "luminous",
    "暗一点": "darker", "暗沉": "dull and dark", "阴郁": "moody",
    "鲜艳": "vivid colors", "色彩鲜艳": "vibrant colors", "高饱和": "saturated colors",
    "低饱和": "muted colors", "淡雅": "desaturated", "黑白": "black and white",
    # makeup
    # tanning
    "小麦色": "tanned", "小麦色皮肤": "tanned skin", "晒黑": "a tan", "黝黑的皮肤": "deeply tanned skin", "古铜色皮肤": "bronzed skin",
    "美黑": "a tan", "皮肤": "skin",
    # makeup shades (the shade itself is read from the words: engines/prompt/colour_words.py)
    "豆沙色": "dusty rose", "珊瑚色": "coral", "莓果色": "berry", "酒红色": "wine red", "橘色": "orange", "梅子色": "plum",
    "唇妆": "lip makeup", "蜜桃色": "peach", "粉色": "pink", "杏色": "apricot", "大地色": "brown", "金色": "gold",
    "紫色": "purple", "棕色": "brown", "黑色": "black", "眼影": "eyeshadow",
    "红唇": "red lips", "口红": "lipstick", "大红唇": "bold red lipstick", "咬唇妆": "tinted lips",
    "裸色唇": "nude lips", "淡唇": "pale lips", "腮红": "blush", "红润的脸颊": "rosy cheeks", "粉嫩脸颊": "pink cheeks",
    "修容": "contour", "立体轮廓": "defined cheekbones", "高颧骨": "sharp cheekbones",
    "烟熏妆": "smoky eyes", "眼线": "eyeliner", "眼妆": "eye makeup", "浓眼妆": "dramatic eye makeup",
    "烟熏眼妆": "smoky eye makeup", "上扬眼线": "winged eyeliner", "猫眼线": "cat eye liner", "画眼线": "eyeliner",
    "眼尾上挑的眼线": "a winged liner", "涂眼影": "eyeshadow", "画眼影": "eyeshadow", "珠光眼影": "shimmery eyeshadow",
    "咖啡色": "brown", "蓝色": "blue",
    "素颜": "no makeup", "不化妆": "no makeup", "裸妆": "bare face", "浓妆": "heavy makeup", "全妆": "full glam",
    "淡妆": "light makeup", "化妆": "makeup",
    # brows
    "浓眉": "bold brows", "眉毛加深": "darker eyebrows", "画眉": "filled-in brows", "野生眉": "fuller natural brows",
    "眉毛浓一点": "slightly darker eyebrows", "淡眉": "lighter eyebrows", "眉毛淡一点": "slightly lighter eyebrows",
    "黑色眉毛": "black eyebrows", "棕色眉毛": "brown brows", "深棕色眉毛": "dark brown eyebrows", "深棕色": "dark brown",
    "眉毛": "eyebrows",
    # chin, nose length, lip gloss, glow
    "尖下巴": "a pointed chin", "v字下巴": "a v-line chin", "下巴长一点": "a slightly longer chin",
    "下巴尖一点": "a slightly more pointed chin", "短下巴": "a shorter chin", "下巴短一点": "a slightly shorter chin",
    "下巴小一点": "a slightly smaller chin", "短鼻子": "a shorter nose", "鼻子短一点": "a slightly shorter nose",
    "小翘鼻": "a cute upturned nose", "鼻头上翘": "a lifted nose tip", "长鼻子": "a longer nose",
    "鼻子长一点": "a slightly longer nose", "水光唇": "glossy lips", "唇釉": "lip gloss", "镜面唇": "wet-look lips",
    "亮晶晶的嘴唇": "shiny lips", "水润唇": "juicy glossy lips", "哑光唇": "matte lips", "雾面唇": "a matte lip",
    "丝绒唇": "velvet matte lips", "高光": "highlighter", "打高光": "highlighter on my cheekbones", "光泽肌": "dewy skin",
    "水光感": "a dewy glow", "自然光泽": "a healthy glow", "哑光肌": "matte skin", "雾面妆": "a matte finish",
    "控油": "shine-free skin", "雾面肌": "powdered matte skin", "不油光": "an oil-free matte face",
    # even tone, forehead
    "肤色均匀": "an even skin tone", "匀肤": "even out my skin tone", "去红血丝": "less redness",
    "改善肤色不均": "an even complexion", "遮盖泛红": "no red patches", "泛红": "redness", "红血丝": "redness",
    "小额头": "a smaller forehead", "额头小一点": "a slightly smaller forehead", "额头短一点": "a slightly shorter forehead",
    "发际线低一点": "a slightly lower hairline", "高额头": "a higher forehead", "额头高一点": "a slightly higher forehead",
    "大额头": "a bigger forehead", "额头长一点": "a slightly longer forehead", "发际线": "hairline", "额头": "forehead",
    # lips' shape
    "丰唇": "fuller lips", "嘟嘟唇": "pouty lips", "嘴唇丰满一点": "slightly fuller lips", "厚嘴唇": "thick lips",
    "嘴唇饱满": "full lips", "薄嘴唇": "thin lips", "嘴唇薄一点": "slightly thinner lips", "小嘴唇": "small lips",
    # gaze
    "看镜头": "look at the camera", "眼神看镜头": "eyes on the camera", "直视镜头": "looking straight into the camera",
    "眼神交流": "eye contact", "看着摄像头": "looking at the camera", "眼神": "eyes", "镜头": "camera", "摄像头": "camera",
    # styles
    "韩系清透裸妆": "k-beauty glass skin", "韩系": "korean style", "韩式水光肌": "korean glass skin look",
    "韩妆": "dewy korean makeup", "水光肌": "glass skin", "清透": "dewy",
    "温柔的日系妆容感": "soft japanese look", "日系妆容": "japanese style makeup", "日系温柔妆": "gentle japanese makeup",
    "日系": "japanese style", "温柔": "gentle", "妆容感": "makeup look", "妆容": "makeup",
    "欧美妆": "western glam makeup", "欧美立体妆容": "sculpted western contours", "欧美": "western style",
    "职业形象": "professional look", "专业形象": "polished professional", "商务照": "business headshot", "专业": "professional",
    "自信": "confident", "更自信": "more confident", "气场强": "self-assured",
    "疲惫": "tired", "累": "exhausted", "困": "sleepy", "没精神": "worn out",
    "显年轻": "look younger", "年轻": "youthful", "减龄": "younger looking",
    "显老": "look older", "老一点": "older looking", "成熟": "aged",
    "保持原样": "keep my face as it is", "原样": "original look", "无变化": "no edits", "不变": "no change",
}

_CJK = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")


@cache
def _pattern() -> re.Pattern[str]:
    keys = sorted(GLOSSARY, key=len, reverse=True)
    return re.compile("|".join(re.escape(k) for k in keys))


def has_cjk(text: str) -> bool:
    return bool(_CJK.search(text))


def translate(text: str) -> tuple[str, tuple[str, ...]]:
    """(English text, CJK characters left untranslated). Text without CJK comes back unchanged."""
    if not has_cjk(text):
        return text, ()
    pieces: list[str] = []
    unknown: list[str] = []
    pos = 0
    pattern = _pattern()
    for m in pattern.finditer(text):
        pieces.append(_keep_latin(text[pos:m.start()], unknown))
        pieces.append(f" {GLOSSARY[m.group(0)]} ")
        pos = m.end()
    pieces.append(_keep_latin(text[pos:], unknown))
    out = re.sub(r"\s+([,.;!])", r"\1", re.sub(r"\s+", " ", "".join(pieces))).strip(" ,;")
    return out, tuple(unknown)


def _keep_latin(chunk: str, unknown: list[str]) -> str:
    bad = _CJK.findall(chunk)
    unknown.extend(bad)
    return _CJK.sub(" ", chunk)
