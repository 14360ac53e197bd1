"""Requests to change the answer, however they are worded: pure functions over a user reply.

Keyword lists hear "too long" but not "That is a lot of text. Keep it to about a dozen
words, please." This module reads each sentence of a reply (and each comma clause of it)
and decides whether it asks to change the answer's length, format, tone or content:

- an imperative whose verb works on the answer ("trim it down", "put it in a table",
  "drop the exclamation marks", "add an example"), after politeness and question framing
  are peeled off ("please", "can you", "could you", "I'd like you to"); a generic verb
  ("make", "keep", "use", "give", "write", "be") counts only with a target that names the
  answer or its form (`it`/`that`, words, a list, bullets, the tone, an example, a
  comparative such as "shorter" or "more formal", a limit such as "at most 15");
- a request without a verb: a target plus a request marker ("A dozen words max please",
  "bullets pls", "A table would be easier to read", "TLDR?"), a preference ("I'd prefer a
  list", "I only need the number"), or an opening "less / more / fewer / no / without"
  ("Less jargon please", "No emojis");
- a complaint about the answer's form ("that's a lot of text", "way too peppy", "this
  reads like a novel", "more than I needed", "I didn't ask for an essay").

A new task ("Write a haiku about autumn", "List three rivers in Africa", "Could you
explain how vaccines work?") names no target and is not a change request.

`request_hint` returns the request sentences themselves (the OPD hint): the user's own
instruction, whatever its words, without the complaint that led to it.
"""

from __future__ import annotations

import re

_I = re.IGNORECASE

# Verbs that work on an answer already given; they need no target ("Elaborate.").
_SELF_VERBS = r"elaborate|rephrase|reword|shorten|condense|summari[sz]e it|tldr"
# Verbs that take the answer (or a part of it) as object; they need a target.
_VERBS = (
    r"make|keep|use|put|give|write|answer|show|add|include|mention|cover|list|return|output|"
    r"turn|convert|format|reformat|restructure|rewrite|redo|split|break|separate|wrap|fit|"
    r"limit|cap|stick|start|begin|lead|end|number|bullet|be|sound|talk|speak|go|"
    r"walk|try|do|summari[sz]e|compare|rank|justify|illustrate|back|arrange|group|trim|cut|pare|tighten|simplify|expand|clarify|tone|dial|drop|remove|delete|omit|"
    r"skip|ditch|lose|leave|avoid|stop|cite|reduce|lower|lighten|soften|sum|boil|get|say|"
    r"spell|present|lay|organi[sz]e|structure|order|sort|swap|replace|change|switch|move|open|"
    r"state|word|phrase|fix|correct|double[- ]?check|re-?check|fact[- ]?check|verify|amend|"
    r"rework|revise|adjust|tweak|polish|edit|adapt|tailor|rejig"
)
# Verbs of removal: any definite object is a part of the answer ("drop the jokes").
_REMOVE_VERBS = r"drop|remove|delete|omit|skip|ditch|lose|cut|leave out|get rid of|strip"
# Verbs of addition: "too" / "as well" / "also" makes the object a part of the answer.
_ADD_VERBS = (
    r"add|include|mention|cover|list|give|show|note|state|explain|tell|say|"
    r"(?:throw|chuck|toss|work|weave|put|slip) in"
)

_FORM_NOUNS = (
    r"words?|sentences?|lines?|paragraphs?|para|bullets?|bullet ?points?|points|list|table|"
    r"steps?|headings?|headers?|sections?|code ?block|markdown|json|csv|yaml|prose|points?|"
    r"plain text|text|tone|voice|register|style|emojis?|emoticons|exclamation (?:marks?|"
    r"points?)|exclamations|asterisks|bold|italics|jargon|fluff|filler|waffle|intro|"
    r"introduction|preamble|summary|conclusion|tl;?dr|gist|examples?|details?|sources?|"
    r"references?|citations?|reasoning|working|explanation|length|spelling|person|"
    r"enthusiasm|jokes|the joke|checklist|columns?|dashes|headline|depth|items|hype|essays?|novels?|lectures?|humou?r|apolog(?:y|ies|ising|izing)|sorry|caveats|disclaimers?|"
    r"format|formatting|layout|structure|characters|chars|answers?|reply|replies|response|"
    r"version|wording|pun|puns|slang|numbers|units|hedging|background|context|"
    r"q ?(?:and|&|n) ?a|faqs?|timeline|chart|outline|rows?"
)
_COMPARATIVES = (
    r"shorter|longer|briefer|brief|concise|succinct|short|simpler|simple|plainer|plain|"
    r"clearer|tighter|crisper|punchier|kinder|warmer|friendlier|nicer|softer|gentler|"
    r"calmer|cooler|funnier|lighter|livelier|snappier|cheerier|wittier|formal(?:ly)?|informal|casual(?:ly)?|professional(?:ly)?|friendly|"
    r"relaxed|neutral|calm|direct(?:ly)?|specific|concrete|serious|polite|empathetic|"
    r"human|detailed|precise|objective|matter-of-fact|honest|blunt|plainly|simply|"
    r"step by step|properly|correctly|differently|instead|deeper|further|calmly|neutrally|"
    r"normally|naturally|like a (?:normal )?(?:person|human|friend)|"
    r"in (?:half|full|detail|more detail|depth|plain \w+|english|french|spanish|german)"
)
_ANAPHORA = (
    r"it|that|this|them|those|these|your (?:answer|reply|response|text|answers)|"
    r"the (?:above|answer|reply|response|last one|first one)"
)
_LIMIT = (
    r"at most|no more than|not more than|max(?:imum)?|tops|under \d+|below \d+|"
    r"or (?:fewer|less)|a dozen|dozen|\d+ (?:words|lines|sentences|bullets|points|chars)"
)
_FORM_TARGET_RE = re.compile(
    rf"\b(?:(?:{_FORM_NOUNS})\b(?!\s+of\s+(?!it|that|this|them|the above))|"
    rf"(?:{_COMPARATIVES})\b|(?:{_LIMIT})\b|(?:more|less|fewer|a bit|a little|a lot) \w+|"
    r"first\b|(?:actual|real|exact|specific|concrete) \w+|(?:different|another|other|new) "
    r"(?:\w+ )?(?:approach|way|option|one|answer|version|method|angle|solution|take)\b|"
    r"(?:just|only)(?: need| want)? the (?:answer|number|result|facts|code|command|gist|final \w+))",
    _I,
)
_JUST_DID_RE = re.compile(
    r"^\W*(?:i )?(?:just|only) (?:\w+ed|sent|got|made|did|bought|ran|took|went|paid)\b", _I
)
"""News of what the user just did ("just booked the point-to-point tickets"), not a request."""
_ANAPHORA_RE = re.compile(rf"\b(?:{_ANAPHORA})\b(?!\s+(?:is|was|are)\b)", _I)
# "explain" / "tell me" ask for a new answer unless they point at this one ("explain why").
_EXPLAIN_RE = re.compile(
    r"^(?:explain|tell me|say)\b(?:\s+(?:it|that|this|your \w+|why\s*(?:$|[.,!?;]|that|this|"
    r"it|not|so)|like i'?m|(?:more )?simply|better|again|properly|differently|more\b))",
    _I,
)
_ASKED_RE = re.compile(
    r"\b(?:(?:can|could|would|will|won'?t) (?:you|u)|would you mind|do you mind|"
    r"i (?:want|need) you to|you (?:should|could|need to|might want to|must|can))\b",
    _I,
)
_QUESTION_WORD_RE = re.compile(
    r"^(?:(?:or|and|so) )?(?:how|what|whats|which|who|when|where|why|does|do|did|is|are|was|have|has|will|"
    r"should|can|could|would(?! be\b))\b",
    _I,
)


def _target(text: str) -> bool:
    return bool(_FORM_TARGET_RE.search(text) or _ANAPHORA_RE.search(text))


def names_a_form(text: str) -> bool:
    """Whether `text` names a form of the answer ("shorter", "bullets", "at most 15")."""
    return bool(_FORM_TARGET_RE.search(text))


def bare_form(text: str) -> bool:
    """Whether the whole of `text` is a form of the answer and nothing more ("one line.",
    "as json", "bullets?", "diff only", "just the command, no walkthrough"): read only
    where no approval was heard ("good length")."""
    core = _core(text)
    if _ONLY_RE.match(text.strip()):
        return True
    return bool(core) and bool(_BARE_FORM_RE.match(core)) and names_a_form(core)


def _new_thing(rest: str) -> bool:
    """Whether a verb's object is a new thing to make ("a short poem about the sea")."""
    m = _NEW_THING_RE.search(rest)
    if m is None:
        return False
    if _ANAPHORA_RE.search(rest):
        return False
    thing = m.group("thing").split()
    if not _FORM_NOUN_RE.search(m.group("thing")):
        return True
    after = rest[m.end() :]
    # "a shopping list for a lasagne", "a bulleted packing list for a weekend": a form noun
    # with a noun of a new topic, for a new topic
    new_word = any(w.lower() not in _FORM_WORDS and not _FORM_NOUN_RE.fullmatch(w) for w in thing)
    if len(thing) > 1 and new_word and _INDEFINITE_RE.match(after):
        return True
    # "three bullet points on why sleep matters": a form on a new question
    return bool(_NEW_QUESTION_RE.match(after))


_MARKER_RE = re.compile(
    r"\b(?:please|pls|plz|max(?:imum)?|tops|only|would be (?:\w+ )?(?:\w+er|better|ideal|"
    r"easier|great|good|helpful|clearer|fine|enough|nice|lovely|handy|preferable|welcome)|would help|is enough|will do|instead|"
    r"next time|from now on|in future|going forward|at most|no more than|or (?:fewer|less)|"
    r"up top|at the top)\b|\bfirst\W*$|\?\s*$|^\W*(?:just|only)\b",
    _I,
)

# Leading words that frame a request without changing it: peeled off before the verb.
_FRAMING_RE = re.compile(
    r"^(?:(?:no|nope|nah|ok|okay|oh|ah|hmm+|um+|well|also|and|but|except|though|however|so|"
    r"now|then|please|pls|remember|"
    r"plz|just|maybe|actually|again|hey|whoa|wow|ugh|yeah|yes|sure|great|thanks|thank you|"
    r"cool|nice|perfect|good|fine|alright|honestly|seriously|kindly|next time|from now on|"
    r"in future|going forward|instead|(?:can|could|would|will|won'?t) (?:you|u|we)|"
    r"if (?:you|u) (?:could|can|would)|"
    r"would you mind|do you mind|(?:i'?d|i would) (?:like|love|prefer|appreciate it if) "
    r"(?:you|it if you|if you)(?: to)?|i (?:want|need) you to|try (?:to|and)|"
    r"you (?:should|could|need to|might want to|must|can)|(?:can|could|may) (?:i|we) "
    r"(?:get|have|see)|let'?s (?:have|get|see)|is it possible to|mind|"
    r"is there (?:a|any) (?:way|chance) (?:to|you could|you can|of)|any chance (?:you could|of)?)"
    r"\b[\s,.!:;-]*)+",
    _I,
)
_IMPERATIVE_RE = re.compile(
    rf"^(?:(?:don'?t|do not|never|stop|quit|avoid)\b|(?:{_SELF_VERBS})\b)", _I
)
_VERB_RE = re.compile(rf"^(?:{_VERBS})\b", _I)
_REMOVE_RE = re.compile(rf"^(?:{_REMOVE_VERBS})\s+(?:the|those|these|all|that|your|any)\b", _I)
# Formatting verbs: any definite object is a part of the answer ("number the facts").
_FORMAT_VERBS = (
    r"number|bullet(?:[- ]?point)?|bold|embolden|highlight|itali[cs]i[sz]e|underline|indent|"
    r"tabulate|capitali[sz]e"
)
_FORMAT_RE = re.compile(
    rf"^(?:{_FORMAT_VERBS})\s+(?:the|those|these|all|each|every|your|its|key)\b", _I
)
# "Could this be a table?": a question about the answer's own form.
_COULD_IT_BE_RE = re.compile(
    r"^(?:could|can|would|should|might) (?:it|this|that|the answer|your answer) "
    r"(?:be|go|come|sound|read|look|feel)\b",
    _I,
)
# "Perfect, keep doing that.", "answer like this every time": keep the answer as it is.
ENDORSEMENT_RE = re.compile(
    r"\bkeep (?:it|this|that) up\b|\bkeep (?:doing|writing|answering|it like) (?:it |them )?"
    r"(?:that|this|so|like (?:this|that))?\s*(?:$|[.,!;]|every|from|going|in future)|"
    r"\blike (?:this|that) (?:every time|all the time|from now on|always|going forward|in future)\b|"
    r"\bexactly (?:the \w+ |what |how )i (?:want|like|need)\b|"
    r"\bexactly (?:the |what |how )(?:[\w-]+ ){1,5}?i (?:wanted|needed|was after)\b|"
    r"\b(?:not a thing|nothing|not one thing) (?:wrong with (?:it|this|that)|(?:to|i'?d|i would) "
    r"change)\b|"
    r"^(?:\w+\W+){0,3}(?:this|that|the|your) (?:length|size|format|tone|style|amount of detail|"
    r"level of detail) is (?:\w+ )?(?:good|fine|right|perfect|great|ideal|spot on|just right)\b|"
    r"\bnot too (?:long|short|wordy|brief)\W+(?:and |but |or )?not too (?:long|short|wordy|brief)\b|"
    # "clear and not too long, exactly what I needed": praise by what it is not
    r"\b(?:clear|short|simple|concise|quick|easy|friendly|good|nice|helpful),? and not too "
    r"(?:long|short|wordy|technical|much|brief)\b|"
    r"^\W*no [\w -]{1,30}, (?:just )?[\w -]{1,30}, (?:just )?the way i like (?:it|them)\b|"
    r"\b(?:answers?|replies|responses|this|that|it) (?:like (?:this|that) )?(?:is|are|was) "
    r"(?:just )?(?:ideal|perfect|spot on)\b|"
    r"\bnot (?:a|one) (?:single )?(?:word|sentence|line) too (?:many|much|long)\b|"
    r"^\W*no (?:complaints|notes|changes|edits|objections|corrections|issues)\b"
    r"(?! (?:about|on|with|to)\b)(?:\W+(?:at all|whatsoever|needed|from me|here|perfect|great|"
    r"thanks|thank you|love it|nice|cheers))*\W*$|"
    r"(?:[,;\u2014\u2013-]\s*|\bbut\s+)no (?:complaints|issues|problems|notes|objections)"
    r"(?: (?:here|at all|whatsoever|from me))?(?=\s*(?:$|[,.!;\u2014\u2013-]))|"
    # praise by a negated complaint: "can't fault it", "not bad at all", "nothing to add"
    r"\bcan'?t (?:fault|knock|complain about) (?:it|this|that)\b|\bcan'?t fault\b|"
    r"\bnothing (?:(?:more|else) )?to add\b|\b(?:that|this|it) (?:about |pretty much |just about )?"
    r"covers it\b|\b(?:matches|lines up with|squares with|agrees with) what i (?:know|knew|"
    r"remember|read|learned)\b|\bnot (?:bad|too shabby|half bad) at all\b|"
    r"\b(?:wouldn'?t|would not|don'?t|do not|couldn'?t|could not) change a (?:thing|word)\b|"
    r"^\W*nothing (?:wrong|to (?:change|fix))(?: with (?:it|this|that))?(?=\W*(?:$|[,.!;]))|"
    r"\bdon'?t (?:make it|go) any (?:longer|shorter)\b|\bdon'?t change (?:it|anything|a thing)\b",
    _I,
)
_ADD_TOO_RE = re.compile(rf"^(?:{_ADD_VERBS})\b.*\b(?:too|as well|also)\W*$", _I)
_ALSO_ADD_RE = re.compile(rf"^\W*(?:please\s+)?also\W+(?:please\s+)?(?:{_ADD_VERBS})\b", _I)
# "can u expand", "elaborate pls": a change verb with no object but the answer
_BARE_CHANGE_RE = re.compile(
    r"^(?:expand|elaborate|condense|shorten|simplify|summari[sz]e|trim|tighten|abridge)"
    r"(?: (?:on )?(?:it|this|that|a bit|a little|more|please|pls|plz))*\W*$|"
    r"^(?:half|a third of|a quarter of|a tenth of) (?:that|it|this|the length)\W*$|"
    r"^(?:remove|delete|drop|lose|ditch)(?: (?:it|them|those|these|that|please|pls))*\W*$|"
    r"\btake (?:it|them|those|these|that) out\W*$",
    _I,
)
# "diff only", "code only", "just the command, no walkthrough": one thing and nothing else
_ONLY_RE = re.compile(
    r"^(?:the )?[\w-]+(?: [\w-]+)? only\W*$|^(?:just|only) (?:the|a|an|one) [\w-]+(?: [\w-]+)?"
    r"(?:\W+(?:no|without) [\w-]+(?: [\w-]+)?)?\W*$",
    _I,
)
# "add something about the lights at night": more on the answer's own subject
_ADD_ABOUT_RE = re.compile(
    r"^(?:add|include|mention) (?:something|a (?:bit|line|sentence|note|word|section|"
    r"paragraph)|more|some (?:info|information|details?|facts?|words?)|info|details?|a few "
    r"(?:words|lines|facts)) (?:about|on|re|regarding)\b",
    _I,
)
# "one line.", "as json", "bullets?": the reply is a form of the answer and nothing more
_BARE_FORM_RE = re.compile(
    r"^(?!(?:an?|the)\b)(?:(?:as|in|into|just|only|make it)\s+)?(?:\w+[ -]?){1,2}\W*$", _I
)
_PHRASAL_RE = re.compile(
    r"^(?!look|pick|sign|log|set|hang|give|back|hold|turn off)\w+ (?:it|that|this|them) "
    r"(?:down|back|up|out)\b",
    _I,
)
# "a short poem about the sea": a new thing to make, named by a noun that is not the answer's.
_NEW_THING_RE = re.compile(
    r"^(?:me |us )?(?:a|an|some|another|one|two|three)\s+(?P<thing>(?:[\w-]+\s+){0,3}?[\w-]+)"
    r"\s+(?:about|on|for|of|that|to|with|where|in)\b",
    _I,
)
_FORM_NOUN_RE = re.compile(rf"\b(?:{_FORM_NOUNS})\b", _I)
_FORM_WORDS = frozenset(
    [
        "short",
        "shorter",
        "brief",
        "quick",
        "bulleted",
        "numbered",
        "simple",
        "simpler",
        "plain",
        "clear",
        "one",
        "two",
        "three",
        "four",
        "five",
        "bullet",
        "point",
        "single",
        "little",
        "tiny",
        "small",
        "compact",
        "concise",
        "proper",
        "new",
        "better",
    ]
)
_NEW_QUESTION_RE = re.compile(r"\s*(?:why|how|what|whether|when|where|who)\b", _I)
_INDEFINITE_RE = re.compile(r"\s*(?:a|an|my|our|some|\d+)\b", _I)
_NOT_A_REQUEST_RE = re.compile(
    r"^keep (?:it|them|that|things|this) (?:up|coming|going|like (?:this|that)|"
    r"(?:this|that) way|(?:this|that|so) \w+)\b|"
    # "keep this for later", "save it for Friday": the user keeps the answer
    r"^(?:keep|save|store|remember) (?:it|them|that|this)(?: \w+)? for (?:later|tomorrow|next|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|the \w+)\b|"
    # the user's own doings: "back from Iceland - ...", "don't want to thrash the disk"
    r"^(?:just )?(?:back|home) (?:from|at|in)\b|^(?:don'?t|do not) want to\b|"
    r"^never (?:understood|knew|realised|realized|thought|got|noticed|saw|heard)\b|"
    # "dropped it in, dragged it down, ...": what the user did, not what to do
    r"^\w+ed (?:it|them|this|that) (?:in|down|up|out|over|on|into|across)\b|^no point\b|"
    # "do they round differently?": a question about the world, not a request
    r"^(?:do|does|did) (?:they|i|we|he|she|people|both|these|those)\b",
    _I,
)
_OPENING_RE = re.compile(
    rf"^(?:(?:a (?:bit|little|lot)|much|way|far) )?(?:less|more|fewer)\s+\w+|"
    rf"^(?:no|without)\s+(?!point\s+\w+ing\b)(?:more\s+)?(?:\w+\s+)?(?:{_FORM_NOUNS})\b"
    r"(?!\s+and (?:the|it|its|all)\b)|^only\b",
    _I,
)
_PREFERENCE_RE = re.compile(
    r"^i(?:'?d| would)? (?:much )?(?:prefer|rather|have preferred)\b|^i(?:'?d| would) (?:like|love)\b|"
    r"^i (?:only |just |really )?(?:want|need|wanted|needed|asked for|was (?:after|hoping for)|"
    r"meant)\b|^i (?:really )?(?:like|prefer) (?:my |your |the )?(?:answers?|replies|responses)\b|"
    rf"^i like (?:it|them) (?:{_COMPARATIVES})\b",
    _I,
)
_COMPLAINT_RE = re.compile(
    r"^(?:(?:that|this|it|that'?s|this is|it'?s|that is|it is|you'?re|you are|you sound|"
    r"sounds?|way|far|much|a bit|bit|a little|rather|kinda|kind of|still|pretty|really|"
    r"slightly|somewhat|just|all|waaa*y|so|and|but|also)\W+)*too\s+"
    r"(?!bad\b|late\b|early\b|kind\b|good\b|sweet\b|funny\b|\W*$)\w+|"
    r"\ba lot of (?:text|words|info|information|detail|reading|scrolling|waffle|fluff|filler|"
    r"padding)\b|\b(?:rambl(?:e|es|ed|ing)|waffl(?:e|es|ed|ing)|long-?winded)\b|"
    r"\bwall of text\b|\btoo (?:much|many)\b|\ba bit much\b|\boverkill\b|\bmouthful\b|"
    r"\b(?:reads|sounds|looks) like (?:a|an) (?:\w+ )?(?:novel|essay|ad|advert|brochure|lecture|"
    r"textbook|robot|sales pitch|press release|wikipedia|thesis|book|manual)\b|"
    r"\byou sound like\b|\b(?:came|comes|coming) across as\b|\bmissing\b|\bwhere'?s the\b|"
    r"\bnothing (?:about|on)\b|\b(?:is|are) (?:just )?(?:false|untrue|inaccurate|made up)\b|"
    r"\boff by\b|\bi don'?t think (?:that'?s|it'?s|this is) (?:right|accurate|correct|true)\b|"
    r"\bhow do you know\b|\bneeds? (?:more|less)\b|\bthat'?s all i (?:need|want)\b|"
    r"^(?:ease|let) up\b|\bmore than i (?:need|needed|want|wanted|asked)|"
    r"\bdidn'?t (?:ask|want) (?:for )?(?:an? |the )?(?:essay|novel|lecture|list|table|"
    r"story|history|explanation|paragraph|details?)\b|\bnot the time for\b|"
    r"\b(?:hard|difficult) to (?:read|follow|skim)\b|\btl;?dr\b|\bget to the point\b|"
    r"\bno need (?:for|to)\b|\banswered (?:a |the )?(?:different|wrong|another) question\b|"
    r"\b(?:doesn'?t|does not|didn'?t|did not) answer\b|\b(?:on|off)[- ]topic\b|"
    r"\b(?:it|this|that|the \w+|your \w+) (?:crash(?:es|ed)|throws|threw|raises|raised|hangs|"
    r"freezes|segfaults|errors out)\b|"
    r"\b(?:(?:don'?t|do not) have|haven'?t got|have not got|have no|got no|no) (?:the )?time "
    r"(?:to read|for (?:all )?(?:this|that)\b|for (?:a|an|the) (?:whole|long|full|entire) \w+)|"
    r"\bcould(?:'?ve| have) (?:been|said|put|done|written)\b.*\b(?:sentences?|words?|half|shorter|"
    r"less|lines?|fewer|briefer|quicker)\b|\bwho(?:'?s| is| has time to| would) (?:going to )?"
    r"read(?:ing)? (?:all )?(?:that|this)\b|"
    r"\b(?:shorter|briefer|simpler|quicker|compact|condensed|abridged|short|quick|brief|cliff'?s?|"
    r"\d+[- ]?(?:second|minute)|one[- ]line|more (?:compact|condensed|concise|succinct)) "
    r"(?:version|notes|take|rundown)\b|\bcliff ?notes\b|"
    r"\b(?:drawn[- ]out|long[- ]drawn|verbose|wordy|bloated)\b|\bto{1,2} (?:long|wordy)\b|"
    r"^why (?:so|such an?) (?:cheerful|chirpy|peppy|excited|enthusiastic|formal|stiff|long|wordy|"
    r"serious|dramatic|upbeat|bubbly|preachy|salesy|hyped|loud|gushing)\b|"
    r"^why (?:the|all the|so many|all those) (?:\w+ )?(?:exclamation|emojis?|caps|hype|bold|"
    r"bullets?|jargon|fluff|waffle|intro|preamble|lecture|essay)|"
    r"(?:^|\b(?:that|this|it|which)|\byour(?: \w+){1,8}?)(?:'s| is| are| was| seems| looks) "
    r"(?:a bit |way |slightly |a little |totally )?off\b(?! to\b)|"
    r"\b(?:you'?ve|you have|you|u) (?:\w+ )?(?:mixed|muddled) up\b|"
    r"\b(?:you'?ve|you have|you|u) got (?:it|that|this|the \w+|them) (?:wrong|backwards|mixed up)\b|"
    r"^\W*(?:wow|whoa|geez|jeez|omg|lol|yikes)\W+(?:an?|the|a whole|a full) (?:\w+ )?(?:essay|novel|"
    r"book|thesis|lecture|saga|speech|sermon|dissertation|encyclopa?edia entry)\b|"
    r"\bpaid by the word\b|\b(?:chill|go easy|easy|lay off) (?:with|on) (?:the|all the|your)\b|"
    r"\b(?:i|we) (?:really |only |just |actually )?(?:need(?:ed)?|want(?:ed)?|hoped for|expected|"
    r"was after|were after|asked for)\b[^.!?]*?,\s*not\b|"
    r"\bwhat (?:i|we) (?:really |actually |only )?(?:need|want|wanted|needed) (?:is|was)\b|"
    # "why do you always write essays", "can you not be so condescending?"
    r"^why (?:do|does|did|must|would) (?:you|u) (?:always|keep|have to|need to|insist)\b|"
    r"\b(?:can|could) (?:you|u) not be\b|\b(?:don'?t|do not|stop|quit) (?:be(?:ing)?|"
    r"sound(?:ing)?) so\b|"
    # "the 'Great question!' opener has to go", "that's python 2 syntax, I'm on 3.12",
    # "you fixed the symptom, not the bug"
    r"\b(?:the|that|this|those|these|your) [\w'!?. -]{1,40}? (?:has|have|needs?|got) to go\b|"
    r"^(?:that'?s|thats|this is|it'?s|its)\b[^.?!]*,\s*(?:but )?i'?m (?:on|using|running)\b|"
    r"\bnot the (?:real |actual |root )?(?:bug|problem|issue|cause|question|point)\b",
    _I,
)
# "Now ..." / "Next, ..." moves on unless it points at this answer or its shape.
_MOVING_ON_RE = re.compile(r"^\W*(?:(?:ok|okay|good|great|cool|thanks)\W+)?(?:now|next)\b", _I)
_SHAPE_RE = re.compile(rf"\b(?:{_COMPARATIVES}|{_LIMIT})\b|\b(?:more|less|fewer) \w+", _I)
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+|\n+")
_CLAUSE_RE = re.compile(r"\s*(?:,|;(?!dr)|\s-\s|:|—)\s*", _I)
_HINT_FILLER_RE = re.compile(
    r"^(?:(?:no|nope|nah|ok|okay|oh|hmm+|um+|ugh|whoa|wow|well|thanks|thank you|great|"
    r"perfect|cool|nice|good)\s*[,.!:;-]+\s*|but\s+)+",
    _I,
)
_MAX_HINT_SENTENCES = 3


def sentences(text: str) -> list[str]:
    """The sentences of `text` (split after . ! ? and at line breaks), whitespace folded."""
    parts = (" ".join(s.split()) for s in _SENTENCE_RE.split(text.strip()))
    return [p for p in parts if p]


# "As a tour guide I need this to sound lively": the speaker's role before "I" / "we"
_ROLE_RE = re.compile(r"^as an? (?:[\w'-]+ ){1,3}?(?=(?:i|we)\b)", _I)


def _core(clause: str) -> str:
    """The clause without framing words ("please", "can you", "ok so") or the speaker's
    role ("as a nurse, ..."), apostrophes unified."""
    text = _ROLE_RE.sub("", clause.replace("\u2019", "'").strip(), count=1)
    return _FRAMING_RE.sub("", text.strip(), count=1).strip()


# "I'm writing a 500-word essay on Paris": the form words are the user's own piece's
_OWN_WORK_RE = re.compile(
    r"^\W*(?:i'?m|i am|we'?re|we are) (?:currently |now )?(?:writing|working on|preparing|"
    r"drafting|putting together|making|giving|planning|designing) (?:a|an|my|our|some)\b",
    _I,
)
# "Recommend a good sci-fi novel?": a verb of a new task; its object is a new thing
_NEW_TASK_VERB_RE = re.compile(
    r"^(?:recommend|suggest|name|find|pick|choose|book|translate|calculate|compute|search|"
    r"look up|remind)\b",
    _I,
)


def request_kind(clause: str) -> str | None:
    """Why `clause` asks to change the answer (a short name), or None."""
    text = clause.replace("\u2019", "'").strip()
    if _OWN_WORK_RE.search(text):
        return None
    if _OPENING_RE.search(text):
        return "less / more / no ..."
    if _MOVING_ON_RE.search(text) and not (_ANAPHORA_RE.search(text) or _SHAPE_RE.search(text)):
        return None  # "Now write the intro.": the next step, not a change to this answer
    core = _core(text)
    if not core or _NOT_A_REQUEST_RE.search(core) or ENDORSEMENT_RE.search(text):
        return None
    if _OPENING_RE.search(core):
        return "less / more / no ..."
    if _IMPERATIVE_RE.search(core):
        return "imperative"
    if _REMOVE_RE.search(core) or _ADD_TOO_RE.search(core) or _PHRASAL_RE.search(core):
        return "imperative"
    if _ALSO_ADD_RE.search(text) or _EXPLAIN_RE.search(core) or _FORMAT_RE.search(core):
        return "imperative"
    if _BARE_CHANGE_RE.search(core) or _ADD_ABOUT_RE.search(core):
        return "imperative"
    if _COULD_IT_BE_RE.search(core) and _target(core.split(None, 3)[-1]):
        return "question about the answer's form"
    rest = core.split(None, 1)[1] if " " in core else ""
    if _VERB_RE.search(core) and _target(rest) and not _new_thing(rest):
        return "imperative with a target"
    if _PREFERENCE_RE.search(core) and (_target(core) or "rather" in core.lower()):
        return "preference"
    if _ASKED_RE.search(text) or _QUESTION_WORD_RE.search(core):
        return None  # "can you draft ...": a verb we do not know, so a new task
    if _NEW_TASK_VERB_RE.search(core) and not _ANAPHORA_RE.search(core):
        return None
    if (
        _FORM_TARGET_RE.search(core)
        and _MARKER_RE.search(text)
        and len(core.split()) <= 12
        and not _JUST_DID_RE.search(text)
    ):
        return "request without a verb"
    return None


def clauses(sentence: str) -> list[str]:
    """The clauses of a sentence (split at commas, semicolons, colons, dashes)."""
    return [c for c in _CLAUSE_RE.split(sentence) if c.strip()]


def request_sentences(text: str) -> list[str]:
    """The parts of `text` that ask to change the answer, as the user wrote them.

    Each sentence is read whole and clause by clause; a sentence that opens with a
    complaint and then asks ("Too long, keep it under 15 words") keeps the request only.
    """
    found = []
    for sentence in sentences(text):
        parts = clauses(sentence)
        asking = [i for i, c in enumerate(parts) if request_kind(c)]
        if asking and asking[0] > 0 and not request_kind(sentence):
            found.append(", ".join(parts[asking[0] :]))
        elif asking or request_kind(sentence):
            found.append(sentence)
    return found


_OWN_CONDITION_RE = re.compile(r"^\W*(?:if|when|since|as|because) (?:i|we)\b[^,?]*,\s*", _I)
"""A leading clause about the user's own circumstances ("If I only have a short stopover,"):
its words describe the user's situation, not the answer; the rest of the sentence decides."""


def change_request(text: str) -> str | None:
    """The name of the first change request or complaint about the answer in `text`."""
    for sentence in sentences(text):
        sentence = _OWN_CONDITION_RE.sub("", sentence) or sentence
        for clause in [sentence, *clauses(sentence)]:
            kind = request_kind(clause)
            if kind:
                return f"change request: {kind}"
            if _complains(_core(clause)) or _complains(clause):
                return "complaint about the answer"
    return None


_NEGATED_RE = re.compile(r"(?:\bnot|n't|\bno|\bnever)\s+(?:an?\s+|the\s+)?$", _I)
_NOT_BEFORE_RE = re.compile(r"\bnot\s+$", _I)


def _complains(clause: str) -> bool:
    """Whether `clause` complains about the answer; a complaint noun after a negation
    ("love that it's not a wall of text") is praise, not a complaint, and so is "not too
    long" (round 17), though "no, too long" complains."""
    for match in _COMPLAINT_RE.finditer(clause):
        before = clause[max(0, match.start() - 16) : match.start()]
        # "no, too long" complains; "not too long" praises
        too = match.group(0).lower().startswith("too")
        if not (_NOT_BEFORE_RE if too else _NEGATED_RE).search(before):
            return True
    return False


def request_hint(text: str) -> str | None:
    """The user's request sentences (at most three), fillers before them dropped, or None."""
    found = [_HINT_FILLER_RE.sub("", s).strip() for s in request_sentences(text)]
    found = [s for s in found if s][:_MAX_HINT_SENTENCES]
    if not found:
        return None
    hint = " ".join(found)
    return hint[0].upper() + hint[1:]


# Leading filler stripped from a corrective reply before it becomes a hint.
_FILLER_RE = re.compile(
    r"^\s*(?:no|nope|nah|wrong|that'?s wrong|that is wrong|incorrect|that'?s incorrect|"
    r"not quite|hmm+|ugh|thanks|thank you|ok|okay)\b\s*[,.!:;-]*\s*(?:but\s+)?",
    _I,
)
_SENTENCE_END_RE = re.compile(r"(?<=[.!?])\s+")
_MIN_HINT_CHARS = 10


def corrective_hint(text: str) -> str | None:
    """The user's corrective words as a hint.

    The reply's request sentences when it has any ("That is a lot of text. Keep it to
    about a dozen words, please." -> "Keep it to about a dozen words, please."); otherwise
    the whole reply, fillers stripped, at most three sentences, None when fewer than 10
    characters remain unless they name a form of the answer ("shorter") or complain
    about it ("too peppy").
    """
    request = request_hint(text)
    if request is not None:
        return request
    remaining = " ".join(text.split())
    while True:
        stripped = _FILLER_RE.sub("", remaining, count=1)
        if stripped == remaining:
            break
        remaining = stripped
    sentences = [s for s in _SENTENCE_END_RE.split(remaining) if s]
    hint = " ".join(sentences[:3]).strip()
    if len(hint) < _MIN_HINT_CHARS and not (
        names_a_form(hint) or change_request(hint) or bare_form(hint)
    ):
        return None  # "try again" says no more than -1 does; "too peppy" says what to change
    return hint[0].upper() + hint[1:]
