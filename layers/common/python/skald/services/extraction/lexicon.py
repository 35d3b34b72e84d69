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
    r"(?=(?:i|i'm|i've|i'd|my|we|we're|our)\b)|,\s+(?=(?:i|i'm|my)\b)",
    FLAGS,
)
NAME = r"[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*){0,2}"
NAME_ANY_CASE = r"[^\W\d_][\w'-]*(?:\s+[A-Z][\w'-]*){0,3}"

PREFERENCES: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(
            r"\bmy\s+favou?rite\s+(?P<topic>[\w' -]{1,40}?)\s+(?:is|are)\s+(?P<obj>.+)", FLAGS
        ),
        "favourite",
    ),
    (
        re.compile(
            r"\bI\s+(?:really\s+|much\s+|strongly\s+|generally\s+|usually\s+)?"
            r"prefer\s+(?P<obj>.+)",
            FLAGS,
        ),
        "prefers",
    ),
    (re.compile(r"\bI(?:'d|\s+would)\s+rather\s+(?P<obj>.+)", FLAGS), "would rather"),
    (
        re.compile(
            r"\bI\s+(?:do\s+not|don't|dont)\s+(?:really\s+)?(?:like|enjoy)\s+(?P<obj>.+)", FLAGS
        ),
        "does not like",
    ),
    (
        re.compile(
            r"\bI\s+(?:really\s+|truly\s+)?(?P<verb>hate|dislike|detest|can't\s+stand|"
            r"cannot\s+stand)\s+(?P<obj>.+)",
            FLAGS,
        ),
        "",
    ),
    (
        re.compile(
            r"\bI\s+(?:really\s+|also\s+|just\s+|absolutely\s+|truly\s+)?"
            r"(?P<verb>like|love|enjoy|adore)\s+(?P<obj>.+)",
            FLAGS,
        ),
        "",
    ),
    (
        re.compile(
            r"\bI\s+(?:now\s+|still\s+|also\s+)?(?P<adv>always|usually|mostly|normally|"
            r"typically|never)\s+use\s+(?P<obj>.+)",
            FLAGS,
        ),
        "",
    ),
    (
        re.compile(r"\bI(?:'m|\s+am)\s+(?:a\s+)?(?:big\s+|huge\s+)?fan\s+of\s+(?P<obj>.+)", FLAGS),
        "is a fan of",
    ),
]
VERB_3RD = {
    "hate": "hates",
    "dislike": "dislikes",
    "detest": "detests",
    "like": "likes",
    "love": "loves",
    "enjoy": "enjoys",
    "adore": "adores",
}

IDENTITY: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"\b(?i:my\s+name\s+is|my\s+name's)\s+(?P<name>{NAME_ANY_CASE})"), "Name"),
    (
        re.compile(
            rf"\b(?i:call\s+me|I\s+go\s+by|I(?:'m|\s+am)\s+called|people\s+call\s+me)"
            rf"\s+(?P<name>{NAME_ANY_CASE})"
        ),
        "Preferred name",
    ),
]

# (pattern, template of the profile line, category of an entity named by the object)
PROFILE: list[tuple[re.Pattern[str], str, str | None]] = [
    (
        re.compile(r"\bI\s+(?:currently\s+)?work\s+(?:at|for)\s+(?P<obj>.+)", FLAGS),
        "{subj} works at {obj}.",
        "organization",
    ),
    (
        re.compile(
            r"\bI(?:'m|\s+am)\s+(?:currently\s+)?(?:working|employed)\s+(?:at|for)\s+"
            r"(?P<obj>.+)",
            FLAGS,
        ),
        "{subj} works at {obj}.",
        "organization",
    ),
    (re.compile(r"\bI\s+work\s+as\s+(?P<obj>.+)", FLAGS), "{subj} works as {obj}.", None),
    (
        re.compile(r"\bmy\s+(?:job|role|position|occupation|profession)\s+is\s+(?P<obj>.+)", FLAGS),
        "{poss_cap} job is {obj}.",
        None,
    ),
    (
        re.compile(r"\bI\s+(?:currently\s+)?live\s+in\s+(?P<obj>.+)", FLAGS),
        "{subj} lives in {obj}.",
        "place",
    ),
    (
        re.compile(r"\bI(?:'m|\s+am)\s+(?:originally\s+)?from\s+(?P<obj>.+)", FLAGS),
        "{subj} is from {obj}.",
        "place",
    ),
    (
        re.compile(r"\bI\s+(?:just\s+|recently\s+)?moved\s+to\s+(?P<obj>.+)", FLAGS),
        "{subj} moved to {obj}.",
        "place",
    ),
    (
        re.compile(r"\bI(?:'m|\s+am)\s+(?P<obj>\d{1,3})\s+years?\s+old\b", FLAGS),
        "{subj} is {obj} years old.",
        None,
    ),
    (
        re.compile(
            r"\bI(?:'m|\s+am)\s+(?P<obj>an?\s+(?!bit\b|little\b|lot\b|(?:big\s+|huge\s+)?"
            r"fan\b)\w.*)",
            FLAGS,
        ),
        "{subj} is {obj}.",
        None,
    ),
    (re.compile(r"\bI\s+speak\s+(?P<obj>.+)", FLAGS), "{subj} speaks {obj}.", None),
]

RELATIONS = (
    r"colleague|co-?worker|friend|best\s+friend|boss|manager|wife|husband|partner|"
    r"sister|brother|mother|mom|mum|father|dad|son|daughter|teammate|neighbou?r|"
    r"cousin|uncle|aunt|girlfriend|boyfriend|mentor|client|grandmother|grandfather"
)
PETS = r"dog|cat|puppy|kitten|horse|parrot|rabbit|hamster|bird|pet|turtle"
RELATION_ENTITY = re.compile(
    rf"\b(?i:my)\s+(?P<rel>(?i:{RELATIONS}))(?:,)?\s+(?:(?i:named|called)\s+)?(?P<name>{NAME})"
)
PET_ENTITY = re.compile(
    rf"\b(?i:my)\s+(?P<rel>(?i:{PETS}))(?:'s\s+(?i:name\s+is)|\s+(?i:is\s+)?(?i:named|called)"
    rf"|,)?\s+(?P<name>{NAME})"
)
# Employers and home places stated in a profile clause; the profile detector names them.
PROFILE_NAMED = re.compile(
    rf"\b(?i:work(?:s|ed|ing)?\s+(?:at|for)|employed\s+(?:at|for|by)|live[sd]?\s+in|"
    rf"living\s+in|moved\s+to|(?:I'm|I\s+am)\s+(?:originally\s+)?from)\s+(?P<name>{NAME})"
)
STUDY_ORG = re.compile(
    rf"\b(?P<verb>(?i:intern(?:ed|ing)?\s+at|stud(?:y|ied|ying)\s+at|joined|"
    rf"(?:was|got)\s+hired\s+by))\s+(?P<name>{NAME})"
)
TRAVEL = re.compile(
    rf"\b(?i:trip\s+to|travel(?:l)?(?:ing|ed)?\s+to|fly\s+to|flew\s+to|flying\s+to|"
    rf"visit(?:ing|ed)?|going\s+to)\s+(?P<name>{NAME})"
)
CAP_RUN = re.compile(r"\b[A-Z][\w'&.-]*(?:\s+(?:[A-Z][\w'&.-]*|of|de|van|von|der|la|&))+")
ORG_SUFFIXES = frozenset(
    {
        "inc",
        "corp",
        "corporation",
        "ltd",
        "gmbh",
        "llc",
        "ag",
        "sa",
        "university",
        "bank",
        "labs",
        "group",
        "company",
        "foundation",
        "institute",
        "co",
        "systems",
        "technologies",
        "software",
        "college",
    }
)
PLACE_SUFFIXES = frozenset(
    {
        "city",
        "street",
        "park",
        "river",
        "mountain",
        "mountains",
        "lake",
        "airport",
        "station",
        "island",
        "beach",
        "valley",
        "county",
    }
)


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


ORG_PREFIXES = frozenset({"university", "bank", "department", "ministry", "college"})
PLACE_PREFIXES = frozenset({"lake", "mount", "mt", "fort", "cape", "isle", "port"})
CAP_STOPWORDS = _wordset(
    "i i'm i've i'd my the a an we our on in at yesterday today tomorrow last next this that "
    "these those hi hello hey thanks thank please can could would should will also and but so "
    "then it he she they you your dear ok okay yes no monday tuesday wednesday thursday "
    "friday saturday sunday january february march april may june july august september "
    "october november december when what why how where who if as for with by from"
)

MONTHS = {
    name: i
    for i, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
MONTH_RE = "|".join(sorted(MONTHS, key=len, reverse=True))
WEEKDAYS = {
    d: i
    for i, d in enumerate(
        ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
    )
}
NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
}
DATE_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("iso", re.compile(r"\b(?:on\s+)?(?P<y>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})\b", FLAGS)),
    (
        "month_day",
        re.compile(
            rf"\b(?:on\s+)?(?P<mon>{MONTH_RE})\.?\s+(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\b"
            r"(?:,?\s+(?P<y>\d{4})\b)?",
            FLAGS,
        ),
    ),
    (
        "day_month",
        re.compile(
            rf"\b(?:on\s+)?(?:the\s+)?(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?"
            rf"(?P<mon>{MONTH_RE})\b\.?(?:,?\s+(?P<y>\d{{4}})\b)?",
            FLAGS,
        ),
    ),
    (
        "relative",
        re.compile(
            r"\b(?P<w>the\s+day\s+before\s+yesterday|the\s+day\s+after\s+tomorrow|yesterday|today|"
            r"tonight|tomorrow|this\s+(?:morning|afternoon|evening))\b",
            FLAGS,
        ),
    ),
    (
        "weekday",
        re.compile(
            r"\b(?:on\s+)?(?P<dir>last|next|this\s+past|this\s+coming|this)\s+"
            r"(?P<wd>monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b",
            FLAGS,
        ),
    ),
    (
        "ago",
        re.compile(
            r"\b(?P<n>\d{1,3}|a|an|one|two|three|four|five|six|seven|eight|nine|ten)\s+"
            r"(?P<unit>days?|weeks?)\s+ago\b",
            FLAGS,
        ),
    ),
    (
        "in",
        re.compile(
            r"\bin\s+(?P<n>\d{1,3}|a|an|one|two|three|four|five|six|seven|eight|nine|ten)\s+"
            r"(?P<unit>days?|weeks?)\b",
            FLAGS,
        ),
    ),
]
RELATIVE_DAYS = {
    "the day before yesterday": -2,
    "yesterday": -1,
    "today": 0,
    "tonight": 0,
    "this morning": 0,
    "this afternoon": 0,
    "this evening": 0,
    "tomorrow": 1,
    "the day after tomorrow": 2,
}
REQUEST = re.compile(r"\b(?:you|your|please|can\s+we|could\s+we|let's|help\s+me)\b", FLAGS)
LEADING_FILLER = _wordset(
    "hi hello hey thanks please on at in i we i've we've i'm we're then so and but also "
    "finally just actually well oh ok okay um"
)
NAME_TAIL_DROP = _wordset(
    "a an the my our your their with to for of and or but so in on at by from"
)

PRONOUNS_3RD = [
    (re.compile(r"\bI'm\b", FLAGS), "they're"),
    (re.compile(r"\bI've\b", FLAGS), "they've"),
    (re.compile(r"\bmyself\b", FLAGS), "themselves"),
    (re.compile(r"\bmine\b", FLAGS), "theirs"),
    (re.compile(r"\bmy\b", FLAGS), "their"),
    (re.compile(r"\bme\b", FLAGS), "them"),
    (re.compile(r"\bI\b"), "they"),
]
VAGUE_HEADS = _wordset(
    "it that this them these those you your yours him her me us one things "
    "stuff everything anything something what how"
)
TOPIC_CUT = re.compile(
    r"\s+(?:when|if|because|since|while|unless|whenever|as\s+long\s+as|over|rather\s+than|"
    r"in\s+the|after|during|every|each|"
    r"instead\s+of|than|compared\s+to)\s+.*$|,.*$",
    FLAGS,
)
TOPIC_DROP = _wordset("a an the my our your their some any using to")
TOPIC_TAIL_DROP = _wordset("very much a lot too as well the most best more")

# -------------------------------------------------------------------------- evolving facts
# A change of tool or habit: the old one is retracted, the new one remembered.
SWITCH = re.compile(
    r"\b(?:I|we)(?:'ve|\s+have)?\s+(?:just\s+|recently\s+|finally\s+|now\s+)?"
    r"(?:moved|switched|migrated|changed|transitioned|went)\s+(?:over\s+)?"
    r"from\s+(?P<old>.+?)\s+to\s+(?P<new>.+)",
    FLAGS,
)
INSTEAD = re.compile(
    r"\b(?:I|we)\s+(?:now\s+|mostly\s+|always\s+)*use\s+(?P<new>.+?)\s+instead\s+of\s+"
    r"(?P<old>.+)",
    FLAGS,
)
# "I no longer ...": the fact is retracted.
RETRACT: list[re.Pattern[str]] = [
    re.compile(
        r"\b(?:I|we)(?:'m|'re|\s+am|\s+are)?\s+(?:(?:do\s+not|don't)\s+)?no\s+longer\s+"
        r"(?P<obj>.+)",
        FLAGS,
    ),
    re.compile(r"\b(?:I|we)\s+(?:do\s+not|don't|dont)\s+(?P<obj>.+?)\s+any\s*more\b", FLAGS),
    re.compile(
        r"\b(?:I|we)(?:'ve|\s+have)?\s+(?:stopped|quit|given\s+up(?:\s+on)?|gave\s+up"
        r"(?:\s+on)?)\s+(?P<obj>.+)",
        FLAGS,
    ),
]
# Verbs and particles before the thing a retraction is about ("use Poetry" -> "Poetry").
RETRACT_LEAD = _wordset(
    "use uses using used drink drinks drinking eat eats eating work works working at for with "
    "on in a an the to be being have having own owning play playing go going like liking love "
    "loving do doing my our live living attend attending take taking run running into"
)
# Trailing confirmations that are no part of a stated object ("uv, still true").
CONFIRMATION_TAIL = re.compile(
    r"[,;\s-]*(?:(?:that's|that\s+is|this\s+is|it's|it\s+is)\s+)?(?:still\s+true|still\s+the\s+"
    r"case|as\s+before|as\s+I\s+said|as\s+always|like\s+before)\s*$",
    FLAGS,
)

# Reporting lines: "my manager is Dana", "I report to Dana", "Dana is my manager".
WORK_RELATIONS = (
    r"manager|boss|team\s+lead|tech\s+lead|lead|supervisor|skip[- ]level"
    r"(?:\s+manager)?|director|mentor"
)
REPORTS_TO: list[re.Pattern[str]] = [
    re.compile(
        rf"\b(?i:my)\s+(?P<rel>(?i:{WORK_RELATIONS}))(?:\s+(?i:is)|,)?\s+"
        rf"(?:(?i:named|called)\s+)?(?P<name>{NAME})"
    ),
    re.compile(
        rf"\b(?i:I)\s+(?i:report|reported)\s+(?:(?i:directly)\s+)?(?i:to)\s+"
        rf"(?P<name>{NAME})"
    ),
    re.compile(
        rf"(?P<name>{NAME})\s+(?i:is)\s+(?i:my)\s+(?:(?i:new|direct)\s+)?"
        rf"(?P<rel>(?i:{WORK_RELATIONS}))\b"
    ),
]
DIRECT_REPORT = re.compile(
    rf"(?:\b(?i:I)\s+(?i:manage)\s+(?P<name>{NAME}))|(?:(?P<name2>{NAME})\s+(?i:reports)\s+"
    rf"(?:(?i:directly)\s+)?(?i:to)\s+(?i:me)\b)"
)

# Tools and platforms in use: "we use Snowflake and dbt".
TOOLS = re.compile(
    r"\b(?P<who>we|I|our\s+team|my\s+team|the\s+team|our\s+company)(?:'re|\s+are|\s+am|'m)?"
    r"\s+(?:mostly\s+|mainly\s+|currently\s+|now\s+|also\s+|heavily\s+)*"
    r"(?P<verb>use|using|rely\s+on|relying\s+on|run\s+on|running\s+on|build\s+on|"
    r"deploy\s+(?:on|to)|work\s+with|standardi[sz]ed\s+on)\s+(?P<obj>.+)",
    FLAGS,
)
WHEN_TAIL = re.compile(
    r"(?:\s+(?:(?:last|this|next)\s+(?:year|month|week|summer|winter|spring|fall|autumn)|"
    r"\w+\s+(?:days?|weeks?|months?|years?)\s+ago|yesterday|today|recently|lately|now|"
    r"anymore|any\s+more|altogether|completely|entirely))+\s*$",
    FLAGS,
)
TOOL_SPLIT = re.compile(r"\s*(?:,|\band\b|&|\bplus\b|/)\s*", FLAGS)
TOOL_TAIL = re.compile(
    r"\s+(?:for|to|in|at|on|with|because|since|as|which|that|when|every|across|from)\s+.*$", FLAGS
)
TOOL_STOP = _wordset(
    "it that this them these those something anything everything stuff things lots a an the "
    "some many more most our my your their all both"
)

# Recurring schedules: "standup every weekday at 9:30", "we have a retro every other Friday".
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_TIME = (
    r"\d{1,2}(?::\d{2})?\s*(?:am|pm|a\.m\.|p\.m\.|h)?"
    r"(?:\s*(?:-|to|until)\s*\d{1,2}(?::\d{2})?\s*(?:am|pm|a\.m\.|p\.m\.)?)?"
)
SCHEDULE_WHEN = re.compile(
    rf"\b(?P<when>(?:every\s+(?:other\s+|single\s+)?(?:day|weekday|workday|business\s+day|"
    rf"morning|evening|night|week|month|quarter|year|weekend|(?:{_DAYS}))s?|daily|weekly|"
    rf"biweekly|fortnightly|monthly|nightly|on\s+(?:(?:{_DAYS})s|weekdays|weekends))"
    rf"(?:\s+(?:and\s+)?(?:(?:{_DAYS})s?))*"
    rf"(?:\s+(?:at|around|from|by)\s+{_TIME}|\s+(?:morning|afternoon|evening|night))?)",
    FLAGS,
)
SCHEDULE_TIME = re.compile(rf"\b(?:at|around|from)\s+(?P<time>{_TIME})", FLAGS)
SCHEDULE_LEAD = _wordset(
    "i we our my the a an team there is are have has had usually always also go to attend "
    "do does run runs hold holds join joins it's its it happens takes place which that use "
    "used like love enjoy try tries went"
)

# Error-then-fix sequences told in words.
ERROR_CUE = re.compile(
    r"\b(?:error|exception|traceback|failed|fails|failing|failure|crash(?:ed|es|ing)?|"
    r"broke|broken|doesn't\s+work|does\s+not\s+work|not\s+working|won't\s+\w+|"
    r"keeps?\s+(?:failing|crashing)|segfault(?:s|ed)?|timed?\s*out|timeout)\b",
    FLAGS,
)
ERROR_NAME = re.compile(r"\b(?P<err>[A-Z]\w*(?:Error|Exception|Failure|Fault)\b(?::[^\n]{0,120})?)")
FIX_CUE = re.compile(
    r"\b(?:fixed|solved|resolved|the\s+fix\s+was|the\s+solution\s+was|turned\s+out|"
    r"worked\s+after|works\s+now|working\s+now|that\s+did\s+it|that\s+worked|it\s+worked|"
    r"that\s+fixed|this\s+fixed|got\s+it\s+working)\b",
    FLAGS,
)
FIX_DETAIL = re.compile(r"\b(?:by|with|after|was|were|out|to)\s+(?P<how>\S.{6,})$", FLAGS)
