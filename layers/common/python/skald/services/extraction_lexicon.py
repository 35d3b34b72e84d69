"""The rule extractor's lexicon: the English patterns and word lists it reads statements
with (preferences, identity, profile, entities, dates, fillers). Data only, no logic."""

from __future__ import annotations

import re

FLAGS = re.IGNORECASE
CODE_BLOCK = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
SENTENCES = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|\s*\n+\s*")
CLAUSES = re.compile(
    r"\s*;\s*|,?\s+(?:and|but|so|because|though|although)\s+"
    r"(?=(?:i|i'm|i've|i'd|my|we|we're|our)\b)|,\s+(?=(?:i|i'm|my)\b)", FLAGS)
NAME = r"[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*){0,2}"
NAME_ANY_CASE = r"[^\W\d_][\w'-]*(?:\s+[A-Z][\w'-]*){0,3}"

PREFERENCES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\bmy\s+favou?rite\s+(?P<topic>[\w' -]{1,40}?)\s+(?:is|are)\s+(?P<obj>.+)",
                FLAGS), "favourite"),
    (re.compile(r"\bI\s+(?:really\s+|much\s+|strongly\s+|generally\s+|usually\s+)?"
                r"prefer\s+(?P<obj>.+)", FLAGS), "prefers"),
    (re.compile(r"\bI(?:'d|\s+would)\s+rather\s+(?P<obj>.+)", FLAGS), "would rather"),
    (re.compile(r"\bI\s+(?:do\s+not|don't|dont)\s+(?:really\s+)?(?:like|enjoy)\s+(?P<obj>.+)",
                FLAGS), "does not like"),
    (re.compile(r"\bI\s+(?:really\s+|truly\s+)?(?P<verb>hate|dislike|detest|can't\s+stand|"
                r"cannot\s+stand)\s+(?P<obj>.+)", FLAGS), ""),
    (re.compile(r"\bI\s+(?:really\s+|also\s+|just\s+|absolutely\s+|truly\s+)?"
                r"(?P<verb>like|love|enjoy|adore)\s+(?P<obj>.+)", FLAGS), ""),
    (re.compile(r"\bI\s+(?P<adv>always|usually|mostly|normally|typically|never)\s+"
                r"use\s+(?P<obj>.+)", FLAGS), ""),
    (re.compile(r"\bI(?:'m|\s+am)\s+(?:a\s+)?(?:big\s+|huge\s+)?fan\s+of\s+(?P<obj>.+)",
                FLAGS), "is a fan of"),
]
VERB_3RD = {"hate": "hates", "dislike": "dislikes", "detest": "detests", "like": "likes",
            "love": "loves", "enjoy": "enjoys", "adore": "adores"}

IDENTITY: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"\b(?i:my\s+name\s+is|my\s+name's)\s+(?P<name>{NAME_ANY_CASE})"), "Name"),
    (re.compile(rf"\b(?i:call\s+me|I\s+go\s+by|I(?:'m|\s+am)\s+called|people\s+call\s+me)"
                rf"\s+(?P<name>{NAME_ANY_CASE})"), "Preferred name"),
]

# (pattern, template of the profile line, category of an entity named by the object)
PROFILE: list[tuple[re.Pattern[str], str, str | None]] = [
    (re.compile(r"\bI\s+(?:currently\s+)?work\s+(?:at|for)\s+(?P<obj>.+)", FLAGS),
     "{subj} works at {obj}.", "organization"),
    (re.compile(r"\bI(?:'m|\s+am)\s+(?:currently\s+)?(?:working|employed)\s+(?:at|for)\s+"
                r"(?P<obj>.+)", FLAGS), "{subj} works at {obj}.", "organization"),
    (re.compile(r"\bI\s+work\s+as\s+(?P<obj>.+)", FLAGS), "{subj} works as {obj}.", None),
    (re.compile(r"\bmy\s+(?:job|role|position|occupation|profession)\s+is\s+(?P<obj>.+)",
                FLAGS), "{poss_cap} job is {obj}.", None),
    (re.compile(r"\bI\s+(?:currently\s+)?live\s+in\s+(?P<obj>.+)", FLAGS),
     "{subj} lives in {obj}.", "place"),
    (re.compile(r"\bI(?:'m|\s+am)\s+(?:originally\s+)?from\s+(?P<obj>.+)", FLAGS),
     "{subj} is from {obj}.", "place"),
    (re.compile(r"\bI\s+(?:just\s+|recently\s+)?moved\s+to\s+(?P<obj>.+)", FLAGS),
     "{subj} moved to {obj}.", "place"),
    (re.compile(r"\bI(?:'m|\s+am)\s+(?P<obj>\d{1,3})\s+years?\s+old\b", FLAGS),
     "{subj} is {obj} years old.", None),
    (re.compile(r"\bI(?:'m|\s+am)\s+(?P<obj>an?\s+(?!bit\b|little\b|lot\b|(?:big\s+|huge\s+)?"
                r"fan\b)\w.*)", FLAGS), "{subj} is {obj}.", None),
    (re.compile(r"\bI\s+speak\s+(?P<obj>.+)", FLAGS), "{subj} speaks {obj}.", None),
]

RELATIONS = (r"colleague|co-?worker|friend|best\s+friend|boss|manager|wife|husband|partner|"
             r"sister|brother|mother|mom|mum|father|dad|son|daughter|teammate|neighbou?r|"
             r"cousin|uncle|aunt|girlfriend|boyfriend|mentor|client|grandmother|grandfather")
PETS = r"dog|cat|puppy|kitten|horse|parrot|rabbit|hamster|bird|pet|turtle"
RELATION_ENTITY = re.compile(
    rf"\b(?i:my)\s+(?P<rel>(?i:{RELATIONS}))(?:,)?\s+(?:(?i:named|called)\s+)?(?P<name>{NAME})")
PET_ENTITY = re.compile(
    rf"\b(?i:my)\s+(?P<rel>(?i:{PETS}))(?:'s\s+(?i:name\s+is)|\s+(?i:is\s+)?(?i:named|called)"
    rf"|,)?\s+(?P<name>{NAME})")
# Employers and home places stated in a profile clause; the profile detector names them.
PROFILE_NAMED = re.compile(
    rf"\b(?i:work(?:s|ed|ing)?\s+(?:at|for)|employed\s+(?:at|for|by)|live[sd]?\s+in|"
    rf"living\s+in|moved\s+to|(?:I'm|I\s+am)\s+(?:originally\s+)?from)\s+(?P<name>{NAME})")
STUDY_ORG = re.compile(
    rf"\b(?P<verb>(?i:intern(?:ed|ing)?\s+at|stud(?:y|ied|ying)\s+at|joined|"
    rf"(?:was|got)\s+hired\s+by))\s+(?P<name>{NAME})")
TRAVEL = re.compile(
    rf"\b(?i:trip\s+to|travel(?:l)?(?:ing|ed)?\s+to|fly\s+to|flew\s+to|flying\s+to|"
    rf"visit(?:ing|ed)?|going\s+to)\s+(?P<name>{NAME})")
CAP_RUN = re.compile(r"\b[A-Z][\w'&.-]*(?:\s+(?:[A-Z][\w'&.-]*|of|de|van|von|der|la|&))+")
ORG_SUFFIXES = frozenset({"inc", "corp", "corporation", "ltd", "gmbh", "llc", "ag", "sa",
                          "university", "bank", "labs", "group", "company", "foundation",
                          "institute", "co", "systems", "technologies", "software", "college"})
PLACE_SUFFIXES = frozenset({"city", "street", "park", "river", "mountain", "mountains", "lake",
                            "airport", "station", "island", "beach", "valley", "county"})


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


ORG_PREFIXES = frozenset({"university", "bank", "department", "ministry", "college"})
PLACE_PREFIXES = frozenset({"lake", "mount", "mt", "fort", "cape", "isle", "port"})
CAP_STOPWORDS = _wordset(
    "i i'm i've i'd my the a an we our on in at yesterday today tomorrow last next this that "
    "these those hi hello hey thanks thank please can could would should will also and but so "
    "then it he she they you your dear ok okay yes no monday tuesday wednesday thursday "
    "friday saturday sunday january february march april may june july august september "
    "october november december when what why how where who if as for with by from")

MONTHS = {name: i for i, names in enumerate(
    [("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",),
     ("june", "jun"), ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"),
     ("october", "oct"), ("november", "nov"), ("december", "dec")], start=1) for name in names}
MONTH_RE = "|".join(sorted(MONTHS, key=len, reverse=True))
WEEKDAYS = {d: i for i, d in enumerate(
    ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"])}
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
           "seven": 7, "eight": 8, "nine": 9, "ten": 10}
DATE_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("iso", re.compile(r"\b(?:on\s+)?(?P<y>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})\b", FLAGS)),
    ("month_day", re.compile(
        rf"\b(?:on\s+)?(?P<mon>{MONTH_RE})\.?\s+(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\b"
        r"(?:,?\s+(?P<y>\d{4})\b)?", FLAGS)),
    ("day_month", re.compile(
        rf"\b(?:on\s+)?(?:the\s+)?(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?"
        rf"(?P<mon>{MONTH_RE})\b\.?(?:,?\s+(?P<y>\d{{4}})\b)?", FLAGS)),
    ("relative", re.compile(
        r"\b(?P<w>the\s+day\s+before\s+yesterday|the\s+day\s+after\s+tomorrow|yesterday|today|"
        r"tonight|tomorrow|this\s+(?:morning|afternoon|evening))\b", FLAGS)),
    ("weekday", re.compile(
        r"\b(?:on\s+)?(?P<dir>last|next|this\s+past|this\s+coming|this)\s+"
        r"(?P<wd>monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b", FLAGS)),
    ("ago", re.compile(
        r"\b(?P<n>\d{1,3}|a|an|one|two|three|four|five|six|seven|eight|nine|ten)\s+"
        r"(?P<unit>days?|weeks?)\s+ago\b", FLAGS)),
    ("in", re.compile(
        r"\bin\s+(?P<n>\d{1,3}|a|an|one|two|three|four|five|six|seven|eight|nine|ten)\s+"
        r"(?P<unit>days?|weeks?)\b", FLAGS)),
]
RELATIVE_DAYS = {"the day before yesterday": -2, "yesterday": -1, "today": 0, "tonight": 0,
                 "this morning": 0, "this afternoon": 0, "this evening": 0, "tomorrow": 1,
                 "the day after tomorrow": 2}
REQUEST = re.compile(r"\b(?:you|your|please|can\s+we|could\s+we|let's|help\s+me)\b", FLAGS)
LEADING_FILLER = _wordset(
    "hi hello hey thanks please on at in i we i've we've i'm we're then so and but also "
    "finally just actually well oh ok okay um")
NAME_TAIL_DROP = _wordset(
    "a an the my our your their with to for of and or but so in on at by from")

PRONOUNS_3RD = [(re.compile(r"\bI'm\b", FLAGS), "they're"),
                (re.compile(r"\bI've\b", FLAGS), "they've"),
                (re.compile(r"\bmyself\b", FLAGS), "themselves"),
                (re.compile(r"\bmine\b", FLAGS), "theirs"),
                (re.compile(r"\bmy\b", FLAGS), "their"),
                (re.compile(r"\bme\b", FLAGS), "them"),
                (re.compile(r"\bI\b"), "they")]
VAGUE_HEADS = _wordset("it that this them these those you your yours him her me us one things "
                       "stuff everything anything something what how")
TOPIC_CUT = re.compile(
    r"\s+(?:when|if|because|since|while|unless|whenever|as\s+long\s+as|over|rather\s+than|"
    r"instead\s+of|than|compared\s+to)\s+.*$|,.*$", FLAGS)
TOPIC_DROP = _wordset("a an the my our your their some any using to")
TOPIC_TAIL_DROP = _wordset("very much a lot too as well the most best more")
