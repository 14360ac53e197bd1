"""What words in a user reply signal: a correction (redo, complaint, "too long") or an
acceptance (thanks, praise, moving on), as named patterns the heuristic judge reads
(`heuristic_judge.py`: which of them wins, and what the rest of the reply says)."""

from __future__ import annotations

import re

from clawrl_app.engine.judging.change_requests import ENDORSEMENT_RE

_I = re.IGNORECASE

_CODE_THINGS = r"tests?|build|script|code|query|command"
"""What of an answer's code can fail or be broken."""

_NOT_REPORTED = (
    r"(?<!\bsay you're )(?<!\bsay you are )(?<!\bsays you're )(?<!\bsay it's )"
    r"(?<!\bsay i'm )(?<!\bsaid you're )(?<!\bthink you're )(?<!\bnothing )(?<!\bnot a thing )"
)
"""No reported speech before a word ("he'll say you're wrong no matter what")."""

USER_NEGATIVE_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    (
        "no",
        re.compile(
            r"^\s*(?:no|nope|nah)\b(?!\s+(?:problem|worries|need|rush|complaints?|notes|issues|"
            r"objections|changes|edits|corrections)\b)",
            _I,
        ),
    ),
    (
        "wrong",
        # not in reported speech: "he'll say you're wrong no matter what", nor in a question
        # about the user's own "if": "what happens if I get the W-4 wrong, is there a fine?"
        # (round 17)
        re.compile(
            rf"{_NOT_REPORTED}\bwrong\b(?!\s+(?:evening|night|day|week|moment|month|year) to\b)"
            r"(?![^.!?]*\?)|"
            r"(?:^|[.!?]\s*)(?![^.!?]*\bif\b[^.!?]*\bwrong\b)[^.!?]*"
            rf"{_NOT_REPORTED}\bwrong\b(?=[^.!?]*\?)",
            _I,
        ),
    ),
    ("incorrect", re.compile(r"\bincorrect\b", _I)),
    ("not what I asked", re.compile(r"\bnot what i (?:asked|wanted|meant)\b", _I)),
    ("try again", re.compile(r"\btry (?:it )?again\b", _I)),
    (
        "again",
        # not a retry that worked: "ran it again and it imported fine, cheers" (round 17)
        re.compile(
            r"(?<!thanks )(?<!thank you )\bagain\b(?!\s+and (?:now )?(?:it|that|this)\b[^.!?]{0,30}"
            r"\b(?:fine|worked|works|perfectly|no problem)\b)",
            _I,
        ),
    ),
    ("redo", re.compile(r"\bre-?do\b", _I)),
    ("I said", re.compile(r"\bi said\b", _I)),
    ("I asked", re.compile(r"\bi asked\b", _I)),
    ("please don't", re.compile(r"\bplease (?:don'?t|do not)\b", _I)),
    (
        "stop",
        # not a place to stop ("anywhere good to stop for lunch?", "which metro stop")
        re.compile(
            r"(?<!\ba )(?<!\bthe )(?<!\bbus )(?<!\bmetro )(?<!\bnext )(?<!\bpit )(?<!\bthey )"
            r"(?<!\bto )(?<!\bi )(?<!\bonce you )(?<!\bwhen you )(?<!\bif you )\bstop\b"
            r"(?!\s+(?:for|at|by|off|over)\b)|\bto stop (?:doing|adding|using|"
            r"writing|saying|putting|being|it|that|this)\b",
            _I,
        ),
    ),
    (
        "shorter",
        re.compile(
            r"(?<!much )(?<!way )(?<!far )\bshorter\b(?!\s+[\w-]+\s+(?:for|of|in|on) (?:my|our)\b)"
            r"(?!\s+(?:way|method|route|trick|formula|path) (?:to|of)\b)(?!\s+(?:fuse|temper)\b)|"
            r"\bin (?:about |roughly |maybe )?(?:half|a third|a quarter) (?:the|of the) "
            r"(?:space|length|words|size)\b|\bhalf as long\b|"
            r"\b(?:much|way|far) shorter\b(?!\W+(?:thanks|thank you|thx|ty|cheers)\b)"
            r"(?!\s+(?:fuse|temper|\w+ than (?:my|his|her|our|their|the last))\b)",
            _I,
        ),
    ),
    ("too long", re.compile(r"(?<!\bnot )\btoo (?:long|short|verbose|wordy)\b", _I)),
    (
        "instead",
        # not in a question about what the user does ("should I be checking it ... instead?"),
        # nor in the answer's own advice praised ("the bit about putting X instead of Y ...")
        re.compile(
            r"^(?![^.?!]*\b(?:should|do|can|could|must|shall) i\b[^.?!]*\binstead\b)"
            r"(?!\W*the (?:bit|part|line|tip|idea|trick) (?:about|of|where|with)\b).*?\binstead\b",
            _I,
        ),
    ),
    ("should be", re.compile(r"\bshould be\b", _I)),
    ("you forgot", re.compile(r"\b(?:you|u) (?:forgot|missed|didn'?t)\b", _I)),
    (
        "doesn't work",
        re.compile(
            r"\b(?:doesn'?t|does not|didn'?t|did not|isn'?t|is not|not) work(?:s|ing)?\b", _I
        ),
    ),
    (
        "broken",
        # the answer or its code broken, not a thing of the user's ("the heating's broken")
        re.compile(
            r"^\W*(?:still )?broken\b|\bstill (?:fails|failing)\b|\b(?:it|this|that|still|"
            rf"{_CODE_THINGS}|link|output|answer|function|formatting|table|markdown)"
            r"(?:'s|\s+is|\s+was|\s+are|\s+looks|\s+seems)?\s+(?:still\s+)?broken\b",
            _I,
        ),
    ),
    (
        "would have done",
        # "thanks for the dissertation. one line would've done": less was wanted
        re.compile(
            # and "... one fix would have done, thanks": whatever the one thing is
            r"\b(?:one|a|a single|two|three|a few|a couple of|\d+) (?:short |quick |simple )?"
            r"[\w-]+ (?:would(?:'ve| have)? (?:done|sufficed|been (?:enough|fine|plenty))|"
            r"would (?:do|suffice|have been enough))\b"
            r"(?!\s+(?:it|that|this|me|us|him|her|them|the|so|better|worse|nicely)\b)|"
            r"\bwould(?:'ve| have) (?:been (?:plenty|enough)|sufficed)\b(?!\s+(?:to|for)\b)|"
            # "three tips, one short line each": a size for each part of the answer
            r"\b(?:one|a|two|three|\d+) (?:short |brief )?(?:lines?|sentences?|words?|bullets?) "
            r"(?:each|apiece|per (?:item|tip|point|step|day|thing|one))\b",
            _I,
        ),
    ),
    (
        "another version",
        re.compile(
            r"\b(?:do|give me|write|make|try|need) (?:a|the|another) (?:\w+ )?version (?:for|of it|"
            r"that|with|without|in)\b",
            _I,
        ),
    ),
    (
        "was after",
        # "I was actually after its role in WWII": the answer missed what was asked
        re.compile(
            r"(?<!what )\bi was (?:actually |really |more |rather )?(?:after|hoping for|asking "
            r"about)(?=\s+[a-z0-9])",
            _I,
        ),
    ),
    (
        "fails",
        re.compile(
            rf"\b(?:the )?(?:{_CODE_THINGS}|job) (?:still )?fail(?:s|ed)?\b",
            _I,
        ),
    ),
    (
        "not how",
        re.compile(
            r"\b(?:is|are|'s) not how (?:we|you|i|people|one|it|this|that)\b|"
            r"\b(?:isn'?t|aren'?t) how (?:we|you|i|people|one)\b",
            _I,
        ),
    ),
    (
        "answered another",
        re.compile(r"\byou answered\b[^.!?]*\bbut\b[^.!?]*\b(?:asked|wanted|meant|needed)\b", _I),
    ),
    (
        "don't need",
        re.compile(
            r"\bdon'?t need (?:the|all (?:the|that|this)|any|so much|an?) [\w' -]{1,40}?\W+(?:just|only)\b",
            _I,
        ),
    ),
    (
        "not right",
        re.compile(r"\b(?:not|doesn'?t|does not) (?:sound|look|seem)s? (?:right|correct)\b", _I),
    ),
    (
        "reports an error",
        # also "oh great, swapped to the f-string and now it's SyntaxError": a fix that failed
        re.compile(
            r"\b(?:i get|i got|getting|it throws|throws|threw|gives me|now (?:it'?s|it is|it "
            r"says|i get|i'?m getting|there'?s|it throws)) (?:an? |the )?"
            r"(?:error|exception|traceback|\w+Error|\w+Exception)\b|"
            r"\bnow it (?:crashes|fails|errors|breaks|hangs)\b|\bsomething'?s (?:off|wrong|not right)\b|"
            # a pasted error: "find: -printf: unknown primary or operator. awesome."
            r"(?:^|\s)[\w./-]+: (?:[^\s:]+: )?(?:unknown|invalid|illegal|unrecogni[sz]ed|no such|"
            r"command not found|permission denied|cannot|can't)\b|\b\w+(?:Error|Exception): \w|"
            # "it stopped looping. it also stopped updating": the fix broke something else
            r"\b(?:also|now|just) stopped (?:working|updating|loading|saving|showing|syncing|"
            r"responding|rendering|printing|running|opening)\b|\bso that'?s (?:fun|great|nice)\W*$|"
            r"\b(?:worse|stiffer|sorer|slower|weaker|tighter|more painful) than (?:before|it was|"
            r"yesterday|last time)\b|\banything else (?:i|we) (?:can|could|should|might) try\b|"
            r"\b(?:don'?t|doesn'?t|won'?t|didn'?t) match\b|\breturns? (?:an? )?(?:empty|blank|nothing|"
            r"none|null|nan)\b|\band now it says\b|\bwhat did i miss\b|"
            r"\b(?:examples?|details?|info|numbers?|format) i gave you\b",
            _I,
        ),
    ),
    (
        "just tell me",
        # "my phone's on 3%, just tell me which one to grab": the answer said too much
        re.compile(r"\bjust (?:tell|give|show) me (?:which|what|the|one|a|how)\b", _I),
    ),
    (
        "won't get through",
        # "they won't get past line three", "he's not getting through four numbered points"
        re.compile(
            r"\b(?:won'?t|wouldn'?t|will never|never|not|can'?t) (?:get(?:ting)? (?:past|through)|"
            r"read(?:ing)? (?:all|past|through|beyond|that much))\b|\battention span\b|"
            r"\breads? (?:it |them |those |these |this )?on (?:his|her|my|their|a) phone\b",
            _I,
        ),
    ),
    (
        "can't it",
        # "can't it print MB or GB like a normal human?": a request put as a complaint
        re.compile(
            r"\bcan'?t (?:it|you|this|that) (?:just )?(?:print|show|say|use|give|be|list|output|"
            r"display|do|sound|read)\b|"
            r"\b(?:isn'?t|is not|that'?s not|wasn'?t) (?:a|an|really an?) (?:recommendation|answer|"
            r"explanation|summary|fix|solution|plan|comparison)\b|"
            r"\bwhat about\b[^.?!]*\?+\s*(?:that'?s|this is|it'?s) (?:kind of |sort of |really |"
            r"actually )?what i (?:was hoping for|wanted|was after|needed|asked)",
            _I,
        ),
    ),
    (
        "just the one",
        # "I just wanted the one formula, honestly", "Could I get just the SQL?", "query only pls"
        re.compile(
            r"(?<!what )(?<!that )\bi (?:just|only|really only) (?:wanted|needed|asked for) (?:the|a|"
            r"one|an)\b|\b(?:could|can|may) i (?:get|have) (?:just|only) (?:the|a|an)\b|"
            r"\b[\w-]+ only,? (?:pls|please|plz)\b|\b(?:alone|only) next time\b|"
            r"\blike a (?:normal|real|regular) (?:person|human|human being)\b|"
            r"\bsomething (?:less|more|a bit less|a bit more) \w+\W*\?|"
            r"\bcan (?:the|it|this) \w+ (?:come|go|be) (?:first|last|at the top|earlier|up top)\b|"
            r"\bwhat should (?:that|this|it) (?:bit |part |line )?(?:actually )?be\b|"
            r"\bwhere (?:does|do|should) [\w ]{1,30} (?:go|fit|come in) in (?:all )?(?:this|that|it)\b|"
            r"\b(?:explain|go (?:through|over)) (?:the|that|this|it)\b[^.?!]{0,40}\b(?:more|in more) "
            r"(?:thoroughly|slowly|detail|depth|carefully)\b|"
            # round 16: "the first snippet was all I needed", "asked for one groupby, got ..."
            r"\b(?:the first|the one|just the|only the) [\w -]{1,30} (?:was|is) all i (?:needed|"
            r"wanted|asked for)\b|\basked for (?:one|a|an|just) [\w -]{1,20}, (?:got|and got|you "
            r"gave me)\b|\bappreciate the (?:enthusiasm|effort|detail|thoroughness)\W+but\b|"
            r"\bcould (?:the|it|this|that) (?:actual |whole )?(?:\w+ )?be (?:a bit |a little |much |way )?"
            r"(?:less|more|shorter|longer|\w+er)\b|\b(?:about |roughly |maybe )?(?:a quarter|a third) "
            r"of (?:this|that|it)\b|\bi need the (?:one|two|three|four|five|\d+) \w+|"
            r"\b(?:one or two|a couple of|two or three) (?:things|items|bits|steps|points)\W*$|"
            r"\bwhat do i (?:check|do|need|try|buy) first\b|"
            r"^\W*(?:ok|okay|right|sure)\W+but what (?:do i do |about |if |when )|"
            r"\b(?:is|'s|was|looks|are) (?:completely |totally |basically )?(?:unreadable|illegible|"
            r"hard to (?:read|follow))\b",
            _I,
        ),
    ),
    (
        "fix failed",
        # round 17: "did python -m pip install requests like you said, still
        # ModuleNotFoundError", "selected the interpreter and nope, same error"
        re.compile(
            r"\b(?:like|as) (?:you (?:said|suggested|told me)|suggested)\b[^.!?]{0,60}\b(?:still|same)\b|"
            r"\b(?:nope|no luck|no joy|no dice|no change)\W+(?:same|still)\b|"
            # not the user's own: "I've had the same issue for months, this fixed it!"
            r"(?<!\bhad the )(?<!\bhave the )(?<!\bhaving the )(?<!\bhas the )(?<!\bsolved the )"
            r"\bsame (?:error|problem|issue|message|result)\b(?!\s+as\b)|"
            r"\bit'?s still (?:flat|broken|failing|dead|the same|not \w+ing|doing it|happening)\b|"
            r"\bthat (?:wouldn'?t|won'?t|doesn'?t|can'?t) (?:help|work|fix)\b",
            _I,
        ),
    ),
    (
        "misses the point",
        # "This doesn't tell me whether I'll owe or not, which was the whole point."
        re.compile(
            r"\b(?:this|that|it|the answer) (?:doesn'?t|does not|didn'?t|did not) (?:tell|show) me\b|"
            r"\bwhich was the (?:whole|entire|only|main) (?:point|question)\b|"
            r"\b(?:rushed|skipped|glossed) (?:past|over|through)\b|\bexpand on\b|"
            # a size for the answer, at the start: "needs to be under 50 words, ..."
            r"(?:^|[.!?;,]\s*)(?:it |this |that |the answer |the \w+ you wrote )?(?:needs|has) to be "
            r"(?:under|below|less than|at most|no more than|within|shorter|one|a single)\b",
            _I,
        ),
    ),
    (
        "tone or level",
        # "i'm a dev, you don't need to explain what a terminal is. talk to me at my level"
        re.compile(
            r"\byou (?:don'?t|do not) (?:need|have) to explain\b|"
            r"\b(?:talk|speak|write) to me (?:at my level|like an? (?:adult|grown-?up|"
            r"professional|colleague|peer|dev|developer|engineer))\b|"
            r"\btone (?:it|this|that|things) down\b|\btone down the (?:pep|cheer\w*|enthusiasm|"
            r"excitement|emoji\w*|exclamation\w*|hype|positivity|energy|jargon|formality|sales\w*)\b",
            _I,
        ),
    ),
    (
        "longer on it",
        re.compile(r"\b(?:spend|take|go|stay) (?:\w+ ){0,2}longer on (?:it|this|that|each)\b", _I),
    ),
    (
        "does it have to be",
        re.compile(
            r"\b(?:does|did|do) (?:it|this|that|they|these|the \w+) (?:have|need) to (?:be|sound|look|read) "
            r"(?:a |so |this |that |quite so |such an? )?(?:whole |full |entire |long |\w+ )?"
            r"\w+\s*\?",
            _I,
        ),
    ),
    (
        "set it out as",
        re.compile(
            r"\b(?:set|lay) (?:it|this|that|them|these|those) out\b|"
            r"\b(?:turn|put|present|format|arrange|recast|redo|rewrite) (?:it|this|that|them|"
            r"these|those) (?:as|into) (?:a|an|one|two|three|\d+)\b|"
            # a wish for another form: "would love this as a grid: ..." (round 17)
            r"\b(?:would|'d) love (?:it|this|that|them) (?:as|in) (?:a|an|one|two|bullet|plain)\b",
            _I,
        ),
    ),
    (
        "pitch it for",
        # "pitch it for a year 5 class please, they won't follow the a/b stuff"
        re.compile(
            r"\bpitch (?:it|this|that) (?:at|for|to)\b|\b(?:they|he|she|i|we|kids|people) "
            r"(?:won'?t|wouldn'?t|can'?t|couldn'?t|didn'?t|don'?t) (?:follow|understand|get) "
            r"(?:the|this|that|it|any of|all)\b",
            _I,
        ),
    ),
    (
        "none of these",
        re.compile(
            r"\bnone of (?:these|those|them|this|that|your \w+)\b(?!\s+(?:is|are) (?:wrong|bad|a "
            r"problem)\b)",
            _I,
        ),
    ),
    (
        "sources",
        # "is any of this backed by actual studies? link me the research please"
        re.compile(
            r"\b(?:link|cite|add|give|show|send|include) (?:me |us )?(?:the |some |a few |any )?"
            r"(?:links?|sources?|citations?|references?|research|studies|evidence)\b|"
            r"\bbacked (?:up )?by\b|\bwhere (?:are|is|did|do) (?:these|this|those|that|the \w+)"
            r" (?:\w+ )?(?:from|come from)\b",
            _I,
        ),
    ),
]
"""Redo / correction / complaint signals in a user reply."""

USER_POSITIVE_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("thanks", re.compile(r"\b(?:thanks|thank you|thx|ty|tysm|cheers|merci|gracias|danke)\b", _I)),
    ("great", re.compile(r"\bgreat\b", _I)),
    ("perfect", re.compile(r"\bperfect\b", _I)),
    (
        "that works",
        re.compile(r"(?<!why )(?<!how )(?<!if )\b(?:that|this|it) works\b|^\W*works\b", _I),
    ),
    ("exactly", re.compile(r"\bexactly\b", _I)),
    ("awesome", re.compile(r"\bawesome\b", _I)),
    ("got it", re.compile(r"\bgot it\b", _I)),
    ("nice", re.compile(r"\bnice\b", _I)),
    ("cool", re.compile(r"\bcool\b", _I)),
    ("looks good", re.compile(r"\blooks good\b|\blgtm\b|\bsounds good\b|\bis fine\b", _I)),
    ("excellent", re.compile(r"\bexcellent\b", _I)),
    ("next,", re.compile(r"\bnext\s*[,:]", _I)),
    ("now let's", re.compile(r"\bnow let'?s\b", _I)),
    ("ok, now", re.compile(r"\b(?:ok|okay)\s*,?\s*now\b", _I)),
    (
        "love it",
        # not a wish: "would love this as a grid: ..." asks for another form (round 17)
        re.compile(r"(?<!would )(?<!'d )\blove (?:it|this|that)\b(?!\s+as\b)", _I),
    ),
    ("sweet", re.compile(r"\b(?:sweet|neat|good one|much better|not bad)\b", _I)),
    (
        "better",
        re.compile(
            r"^\W*(?:much |way |far |a lot |so much )?better\W*$|\bmore like it\b|"
            r"(?<!not )(?<!not the )(?<!n't the )\b(?:right|good|perfect|nice|ideal) "
            r"(?:length|size|amount|format|tone|level of detail)\b|"
            r"^\W*(?:yes|yeah|yep|yup)\W+(?:\w+ )?like (?:that|this)\b",
            _I,
        ),
    ),
    (
        "it worked",
        re.compile(
            r"\b(?:that|it) (?:did it|did the trick|was it)\b|\b(?:fixed|solved|worked)\b|"
            r"\b(?:they|tests?|it|all) pass(?:es|ed)?\b|\b(?:is|are|all|now) green\b",
            _I,
        ),
    ),
    (
        "uses it",
        re.compile(
            r"\bi'?ll use (?:it|this|that)\b|\busing (?:it|this|that)\b|^\W*sent\b|"
            r"\bsending it\b|\bdoing it now\b|\bas you said\b|\bas is\W*$|"
            r"\bthat'?s what i'?ll (?:send|use|post|say|print|submit|go with)\b|"
            r"\b(?:printing|posting|submitting|forwarding) (?:it|this|that)(?: (?:now|off|out|over))*\W*$|"
            r"\bit compiles\b|\bcompiles now\b|"
            # "pushed the abortcontroller version, ...", "went with the Kobo after this"
            r"\b(?:pushed|deployed|shipped|merged|committed|applied|installed) (?:it|this|that|the "
            r"(?:[\w-]+ ){0,2}(?:version|fix|change|patch|one))\b|"
            r"\b(?:went|going|gone) with (?:the|your) (?!flow\b)\w+|"
            r"\b(?!what\b|where\b|how\b|who\b|why\b|which\b|when\b)\w+ it is\W*$",
            _I,
        ),
    ),
    (
        "helpful",
        # "that'd be really helpful" closes a request; it approves nothing yet
        re.compile(
            r"(?<!\bbe )(?<!\bbe really )(?<!\bbe very )(?<!\bbe super )(?<!\bbe so )"
            r"\bhelpful\b|\bhelps\b(?!\s+(?:me|us)\b)",
            _I,
        ),
    ),
    (
        "spot on",
        re.compile(
            r"\bspot on\b|\bnailed it\b|\bbang on\b|\bthat'?s the one\b|\bthat'?ll do\b|"
            r"\bthat'?s it\b(?!\s*\?)|\bmakes (?:total |perfect )?sense\b|"
            r"\bcan'?t argue with (?:that|this)\b|\b(?:couldn'?t|could not) (?:be|have been) "
            r"better\b|\b(?:ship|merge) it\b|\b(?:really|so|super|crystal) clear\b|"
            r"\b(?:everyone|we all|they all|finally) (?:actually )?(?:got|understood) it\b|"
            r"\bi (?:understand|get it) now\b|\bunderstood\b",
            _I,
        ),
    ),
    (
        "yes, right",
        re.compile(
            r"^\W*(?:yes|yep|yup|yeah|yea)\W+(?:that'?s |it'?s )?(?:right|correct|true)\b|"
            r"^\W*correct\W*$|\b(?:this|that|it)(?: one)? is (?:correct|right)\b(?!\s*\?)",
            _I,
        ),
    ),
    (
        "appreciated",
        re.compile(
            r"(?<!'d )(?<!would )\bappreciated?\b|\blife ?saver\b|\byou(?:'re| are) the best\b|"
            r"\byou rock\b|(?<!'d )(?<!would )\bi (?:really )?like (?:it|this|that|these)\b|"
            r"\bsaved (?:me|my|us|our|the day)\b|\bwent (?:really |so |super )?(?:well|great|"
            r"smoothly)\b|\bi'?m (?:stealing|borrowing|keeping) (?:that|this|it)\b|"
            r"\bloved (?:it|this|that|the|these|those|your|how)\b|\bcomplimented\b|"
            # the outcome reported: "the kids scraped the pan clean", "huge hit"
            r"\b(?:huge|big|real|massive|total|smash) (?:hit|success)\b|\b(?:was|is) a (?:hit|success)\b|\bscraped (?:the|their) "
            r"\w+ clean\b|\bwent down a (?:treat|storm)\b|\bcleared (?:the|their) plates?\b|"
            r"\b(?:that'?s|this is|just|exactly) (?:the \w+ |what )i (?:wanted|needed|asked for)\b",
            _I,
        ),
    ),
    (
        "good answer",
        re.compile(
            r"\b(?:good|brilliant|cracking|superb|fantastic|wonderful|fab|terrific|top|solid) "
            r"(?:answer|job|stuff|work|explanation|reply|response)\b|\blovely\b|"
            r"\bwhat i was (?:after|looking for)\b|\b(?:is|was) all i (?:needed|wanted|asked for)\b|"
            r"\bchef'?s kiss\b|\b(?:is|it'?s|this is|that'?s) (?:very|really|so|pretty) good\b|"
            r"^\W*(?:ace|ta|brill|champion)\b|\bta (?:very much|muchly)\b|"
            r"^\W*good\W*(?:$|[,!.]\s*(?:that'?s|this is|thanks|thank you|now|next)\b)|"
            r"\b(?:that'?s|this is|it'?s) (?:good|great)\W*$|"
            r"\b(?:banger|goated|slaps|bussin|ftw)\b|[,.!]\s*ta\b\W*$|\byes,? chef\b|"
            r"\bi'?ll take it\b|\b(?:a )?fair (?:summary|answer|point|enough)\b|"
            r"\blegend\W*$|^\W*legend\b|\byou(?:'re| are) a legend\b|"
            r"\b(?:was|is|so|really|very|super|genuinely|actually|incredibly) useful\b|"
            r"\bfirst (?:time|one) (?:in my life|ever|in years|since)\b|\bworth the whole\b|"
            r"\b(?:works|runs|shifts|rides|drives|sounds|looks) like new\b|\bwithout a single "
            r"(?:skip|error|problem|issue|hiccup)\b|\bgot the (?:job|offer|place|flat|house|part|role|"
            r"contract)\b|\bone of the (?:best|strongest)\b|"
            r"\bgot (?:an? )?(?:[A-F][+-]?|\d+(?:/\d+)?|full marks|top marks) (?:on|for) (?:it|this|"
            r"that|the \w+)\b|\bthe way i like (?:it|them)\b|"
            r"\byou were (?:right|spot on|correct)\b|\bfair play\b|\bis (?:pure )?gold\b|"
            r"(?:^|[.!]\s*)keeping (?:that|this|it)\b|\bsorted (?:it|this|that)\b|"
            # round 17: "bingo", "yep, that was the culprit", "..., brilliant", "saved a ton"
            r"^\W*bingo\b|\bthat was (?:the|my) (?:culprit|problem|issue|fix)\b|,\s*brilliant\W*$|"
            r"\bsaved (?:me )?(?:a ton|a fortune|loads|heaps|a bundle|so much)\b",
            _I,
        ),
    ),
    (
        "love the",
        re.compile(r"(?<!'d )(?<!\bd )(?<!would )\blove (?:the|these|those|your|how)\b", _I),
    ),
    (
        "emoji",
        re.compile(
            "[\U0001f44d\U0001f64c\U0001f4aa\U0001f525\U0001f389\u2705\U0001f64f\U0001f44c"
            "\U0001f44f\U0001f4af\U0001f60d\U0001f973\u2764]"
        ),
    ),
    ("keep it like this", ENDORSEMENT_RE),
    (
        "praise",
        re.compile(
            r"^\W*(?:wonderful|brilliant|fantastic|amazing|superb|marvell?ous|splendid|"
            r"terrific|outstanding|fabulous|stellar|impeccable)\b|\bjust right\b",
            _I,
        ),
    ),
]
"""Acceptance / thanks / moving-on signals in a user reply."""
