package contamination

// fracArgs marks \frac-like commands: the name is dropped, and unbraced
// arguments ("\frac mn", "\frac12") are split into single characters so that
// they read like "m/n" and "1/2".
const fracArgs = "\x00frac"

// latex maps known LaTeX command names to what they become: "" (dropped:
// layout, fonts, operators and relations, whose ASCII spellings such as
// "<=" or "*" are punctuation and dropped too), fracArgs, or the token they
// are read as. Unknown commands are kept as their lowercase letters, unless
// their first letter is that of a string escape (\n, \t, \r, \f, \b, \v, \a),
// in which case the escape is a separator and the rest a word ("\nFind").
// Every command beginning with such a letter that a statement may use must
// be listed here, or it would be read as an escape.
var latex = map[string]string{
	// fractions
	"frac": fracArgs, "dfrac": fracArgs, "tfrac": fracArgs, "cfrac": fracArgs,
	// layout, sizing, fonts, boxes
	"left": "", "right": "", "middle": "", "big": "", "Big": "", "bigg": "", "Bigg": "",
	"bigl": "", "bigr": "", "Bigl": "", "Bigr": "", "biggl": "", "biggr": "", "Biggl": "", "Biggr": "",
	"bigm": "", "Bigm": "",
	"displaystyle": "", "textstyle": "", "scriptstyle": "", "scriptscriptstyle": "",
	"text": "", "textbf": "", "textit": "", "textrm": "", "texttt": "", "textsf": "", "textsc": "",
	"textup": "", "textnormal": "", "textmd": "", "textsl": "", "emph": "", "underline": "",
	"mathrm": "", "mathbf": "", "mathit": "", "mathsf": "", "mathtt": "", "mathcal": "", "mathbb": "",
	"mathfrak": "", "mathscr": "", "mathnormal": "", "boldsymbol": "", "bm": "", "pmb": "",
	"operatorname": "", "mbox": "", "hbox": "", "fbox": "", "boxed": "", "framebox": "",
	"rm": "", "bf": "", "it": "", "sf": "", "tt": "", "cal": "", "em": "", "sl": "",
	"quad": "", "qquad": "", "hspace": "", "vspace": "", "enspace": "", "thinspace": "",
	"medspace": "", "thickspace": "", "negthinspace": "", "negmedspace": "", "negthickspace": "",
	"kern": "", "mkern": "", "hskip": "", "vskip": "", "hfill": "", "vfill": "", "smallskip": "",
	"medskip": "", "bigskip": "", "noindent": "", "indent": "", "newline": "", "linebreak": "",
	"par": "", "centering": "", "label": "", "tag": "", "nonumber": "", "notag": "",
	"phantom": "", "hphantom": "", "vphantom": "", "color": "", "textcolor": "", "colorbox": "",
	"tiny": "", "scriptsize": "", "footnotesize": "", "small": "", "normalsize": "", "large": "",
	"Large": "", "LARGE": "", "huge": "", "Huge": "", "limits": "", "nolimits": "",
	"mathop": "", "mathord": "", "mathrel": "", "mathbin": "", "mathpunct": "", "mathopen": "",
	"mathclose": "", "hline": "", "cline": "", "toprule": "", "midrule": "", "bottomrule": "",
	"displaylines": "", "ensuremath": "", "item": "", "itemize": "", "enumerate": "",
	// dots
	"dots": "", "ldots": "", "cdots": "", "vdots": "", "ddots": "", "dotsc": "", "dotsb": "",
	"dotsm": "", "dotsi": "", "dotso": "",
	// delimiters
	"lbrace": "", "rbrace": "", "langle": "", "rangle": "", "lvert": "", "rvert": "", "lVert": "",
	"rVert": "", "vert": "", "Vert": "", "lceil": "", "rceil": "", "lfloor": "", "rfloor": "",
	"backslash": "", "lbrack": "", "rbrack": "", "lparen": "", "rparen": "",
	// operators, relations, arrows, logic
	"le": "", "leq": "", "leqslant": "", "ge": "", "geq": "", "geqslant": "", "ne": "", "neq": "",
	"lt": "", "gt": "", "ll": "", "gg": "", "pm": "", "mp": "", "times": "", "cdot": "", "div": "",
	"ast": "", "star": "", "bullet": "", "equiv": "", "approx": "", "sim": "", "simeq": "",
	"cong": "", "propto": "", "to": "", "rightarrow": "", "leftarrow": "", "Rightarrow": "",
	"Leftarrow": "", "leftrightarrow": "", "Leftrightarrow": "", "longrightarrow": "",
	"Longrightarrow": "", "implies": "", "iff": "", "mapsto": "", "uparrow": "", "downarrow": "",
	"in": "", "notin": "", "ni": "", "subset": "", "subseteq": "", "subsetneq": "", "supset": "",
	"supseteq": "", "cup": "", "cap": "", "setminus": "", "mid": "", "nmid": "", "parallel": "",
	"perp": "", "wedge": "", "vee": "", "land": "", "lor": "", "neg": "", "lnot": "", "not": "",
	"oplus": "", "otimes": "", "odot": "", "forall": "", "exists": "", "nexists": "",
	"because": "", "therefore": "", "prime": "", "nleq": "", "ngeq": "", "nless": "", "ngtr": "",
	"bigcup": "", "bigcap": "", "bigoplus": "", "bigotimes": "", "sqcup": "", "sqcap": "",
	"triangleq": "", "coloneqq": "", "eqqcolon": "", "doteq": "", "models": "", "vdash": "",
	"top": "", "bot": "", "circledast": "", "cdotp": "", "colon": "",
	// kept words
	"sqrt": "sqrt", "angle": "angle", "measuredangle": "angle", "triangle": "triangle",
	"overline": "overline", "overarc": "overarc", "wideparen": "overarc", "overrightarrow": "overrightarrow",
	"widehat": "hat", "hat": "hat", "bar": "bar", "vec": "vec", "tilde": "tilde", "widetilde": "tilde",
	"dot": "dot", "ddot": "ddot", "breve": "breve", "check": "check", "acute": "acute", "grave": "grave",
	"circ": "circ", "degree": "circ", "infty": "infty", "partial": "partial", "nabla": "nabla",
	"emptyset": "emptyset", "varnothing": "emptyset", "ell": "ell", "hbar": "hbar", "aleph": "aleph",
	"sin": "sin", "cos": "cos", "tan": "tan", "cot": "cot", "sec": "sec", "csc": "csc",
	"arcsin": "arcsin", "arccos": "arccos", "arctan": "arctan", "sinh": "sinh", "cosh": "cosh",
	"tanh": "tanh", "coth": "coth", "log": "log", "ln": "ln", "lg": "lg", "exp": "exp",
	"lim": "lim", "liminf": "liminf", "limsup": "limsup", "sup": "sup", "inf": "inf", "max": "max",
	"min": "min", "arg": "arg", "det": "det", "dim": "dim", "deg": "deg", "ker": "ker", "gcd": "gcd",
	"lcm": "lcm", "mod": "mod", "bmod": "mod", "pmod": "mod", "binom": "binom", "tbinom": "binom",
	"dbinom": "binom", "choose": "binom", "sum": "sum", "prod": "prod", "int": "int", "iint": "iint",
	"oint": "oint", "Re": "re", "Im": "im", "begin": "begin", "end": "end", "over": "over",
	"atop": "atop", "stackrel": "stackrel", "overbrace": "overbrace", "underbrace": "underbrace",
	"square": "square", "blacksquare": "square", "box": "square", "diamond": "diamond",
	"heartsuit": "heartsuit", "spadesuit": "spadesuit", "clubsuit": "clubsuit",
	"diamondsuit": "diamondsuit", "flat": "flat", "natural": "natural", "sharp": "sharp",
	"overleftrightarrow": "overleftrightarrow", "underset": "underset", "overset": "overset",
	"textdegree": "circ", "bmatrix": "bmatrix", "pmatrix": "pmatrix", "vmatrix": "vmatrix",
	"ref": "ref", "eqref": "ref", "cite": "cite", "url": "url", "href": "href",
	"section": "section", "subsection": "subsection", "textasciitilde": "",
	"newcommand": "newcommand", "renewcommand": "newcommand", "def": "def", "usepackage": "usepackage",
	"documentclass": "documentclass", "bibliography": "bibliography", "bibitem": "bibitem",
	"textsuperscript": "", "textsubscript": "",
	// Greek
	"alpha": "alpha", "beta": "beta", "gamma": "gamma", "delta": "delta", "epsilon": "epsilon",
	"varepsilon": "epsilon", "zeta": "zeta", "eta": "eta", "theta": "theta", "vartheta": "theta",
	"iota": "iota", "kappa": "kappa", "lambda": "lambda", "mu": "mu", "nu": "nu", "xi": "xi",
	"omicron": "omicron", "pi": "pi", "varpi": "pi", "rho": "rho", "varrho": "rho", "sigma": "sigma",
	"varsigma": "sigma", "tau": "tau", "upsilon": "upsilon", "phi": "phi", "varphi": "phi",
	"chi": "chi", "psi": "psi", "omega": "omega", "Gamma": "gamma", "Delta": "delta",
	"Theta": "theta", "Lambda": "lambda", "Xi": "xi", "Pi": "pi", "Sigma": "sigma",
	"Upsilon": "upsilon", "Phi": "phi", "Psi": "psi", "Omega": "omega", "varkappa": "kappa",
	"digamma": "digamma",
}

// orphanTails are the rest of LaTeX commands whose first letter a string
// escape ate and whose control character was then lost as whitespace
// ("\frac" written with one backslash in JSON is a form feed and "rac";
// a copy that reflows the text turns the form feed into a space): a word
// that starts after whitespace and is one of these is read as its command.
// Only tails that are no English word, code word or command of their own.
var orphanTails = map[string]string{
	"rac": "frac", "riangle": "triangle", "riangleq": "triangleq", "imes": "times", "heta": "theta",
	"ilde": "tilde", "lpha": "alpha", "abla": "nabla", "ight": "right", "ightarrow": "rightarrow",
	"egin": "begin", "ext": "text", "extbf": "textbf", "extit": "textit", "extrm": "textrm",
	"oxed": "boxed", "pprox": "approx", "orall": "forall", "herefore": "therefore", "ecause": "because",
	"inom": "binom", "rccos": "arccos", "rcsin": "arcsin", "rctan": "arctan", "ullet": "bullet",
	"leph": "aleph", "arepsilon": "varepsilon", "arphi": "varphi", "artheta": "vartheta", "otin": "notin",
	"ewline": "newline", "oindent": "noindent", "onumber": "nonumber", "oldsymbol": "boldsymbol",
	"igcup": "bigcup", "igcap": "bigcap", "anh": "tanh", "ackslash": "backslash",
}

// symbols maps non-ASCII characters to what they become: "" (a separator)
// or a word, so that "≤", "√2", "60°", "π" and "△ABC" read like their LaTeX
// spellings.
var symbols = map[rune]string{
	'≤': "", '≥': "", '≠': "", '≈': "", '≡': "", '∼': "", '×': "", '·': "", '⋅': "", '÷': "",
	'±': "", '∓': "", '−': "", '–': "", '—': "", '…': "", '⋯': "", '∈': "", '∉': "", '⊂': "",
	'⊆': "", '∪': "", '∩': "", '∣': "", '∥': "", '⊥': "", '→': "", '⇒': "", '⟹': "", '↔': "",
	'⇔': "", '∀': "", '∃': "", '¬': "", '∧': "", '∨': "", '′': "", '″': "", '«': "", '»': "",
	'“': "", '”': "", '‘': "", '’': "", '\u00a0': "", '\u2009': "",
	'√': "sqrt", '∠': "angle", '△': "triangle", '∆': "triangle", '°': "circ", '∞': "infty",
	'∂': "partial", '∇': "nabla", '∅': "emptyset", '∑': "sum", '∏': "prod", '∫': "int",
	'α': "alpha", 'β': "beta", 'γ': "gamma", 'δ': "delta", 'ε': "epsilon", 'ϵ': "epsilon",
	'ζ': "zeta", 'η': "eta", 'θ': "theta", 'ϑ': "theta", 'ι': "iota", 'κ': "kappa",
	'λ': "lambda", 'μ': "mu", 'ν': "nu", 'ξ': "xi", 'ο': "omicron", 'π': "pi", 'ρ': "rho",
	'σ': "sigma", 'ς': "sigma", 'τ': "tau", 'υ': "upsilon", 'φ': "phi", 'ϕ': "phi", 'χ': "chi",
	'ψ': "psi", 'ω': "omega", 'Γ': "gamma", 'Δ': "delta", 'Θ': "theta", 'Λ': "lambda",
	'Ξ': "xi", 'Π': "pi", 'Σ': "sigma", 'Φ': "phi", 'Ψ': "psi", 'Ω': "omega",
}

// common lists words that carry little evidence on their own: English
// function words, the stock vocabulary of competition problems, and the
// LaTeX command words above. A word n-gram made only of such words (plus
// single characters and one-digit numbers) is "generic": phrases such as
// "find the sum of all positive integers n such that" or "where m and n are
// relatively prime positive integers" recur across unrelated problems, so
// generic n-grams are not used as evidence.
var common = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range []string{
		// function words
		"the", "of", "to", "in", "on", "at", "by", "for", "from", "with", "and", "or", "but", "not",
		"no", "nor", "so", "as", "is", "are", "was", "were", "be", "been", "being", "has", "have",
		"had", "do", "does", "did", "can", "could", "will", "would", "shall", "should", "may",
		"might", "must", "this", "that", "these", "those", "it", "its", "they", "them", "their",
		"there", "here", "then", "than", "which", "who", "whom", "whose", "what", "when", "where",
		"why", "how", "if", "else", "each", "every", "all", "any", "some", "many", "more", "most",
		"much", "few", "other", "another", "such", "same", "both", "either", "neither", "into",
		"onto", "over", "under", "between", "among", "through", "about", "above", "below",
		"after", "before", "up", "down", "out", "off", "again", "once", "we", "you", "he", "she",
		"his", "her", "our", "your", "me", "my", "us", "an", "also", "only", "very", "just", "let",
		"while", "whether", "per", "via", "one", "two", "three", "four", "five", "six", "seven",
		"eight", "nine", "ten", "first", "second", "third", "last", "next", "new", "own", "like",
		"within", "without", "inside", "outside", "along", "around", "against", "toward",
		"towards", "until", "since", "because", "though", "although", "however", "thus",
		"hence", "therefore", "given", "respectively", "inclusive", "exactly", "least", "most",
		"at", "end", "begin",
		// stock problem vocabulary
		"find", "compute", "determine", "evaluate", "calculate", "show", "prove", "suppose",
		"assume", "call", "define", "defined", "denote", "denotes", "say", "write", "written",
		"expressed", "express", "form", "value", "values", "number", "numbers", "sum", "product",
		"difference", "quotient", "remainder", "integer", "integers", "positive", "negative",
		"nonnegative", "nonzero", "real", "complex", "rational", "irrational", "whole", "digit",
		"digits", "prime", "primes", "relatively", "divided", "divisible", "divides", "divisor",
		"divisors", "factor", "factors", "multiple", "multiples", "greatest", "largest",
		"smallest", "possible", "distinct", "different", "ordered", "unordered", "pair", "pairs",
		"triple", "triples", "set", "sets", "subset", "subsets", "element", "elements", "point",
		"points", "line", "lines", "segment", "segments", "side", "sides", "area", "length",
		"lengths", "equal", "equals", "total", "answer", "given", "such", "satisfy", "satisfies",
		"satisfying", "holds", "hold", "true", "false", "exist", "exists", "unique", "function",
		"functions", "equation", "equations", "system", "solution", "solutions", "root", "roots",
		"polynomial", "coefficient", "coefficients", "square", "squares", "cube", "cubes",
		"circle", "circles", "radius", "triangle", "triangles", "angle", "angles", "degrees",
		"probability", "expected", "ways", "way", "order", "ratio", "mean", "average", "time",
		"times", "minimum", "maximum", "result", "following", "above", "shown", "diagram",
		"figure", "example", "problem", "question", "step", "reason", "final", "put", "within",
		"box", "boxed", "please", "solve", "note", "case", "cases", "also", "term", "terms",
		"sequence", "series", "count", "counting", "remainder", "modulo", "mod", "base",
		"expression", "simplest", "simplify", "common", "fraction", "fractions", "whose",
		"coordinate", "coordinates", "plane", "graph", "axis", "origin", "interval", "range",
		"center", "centered", "tangent", "perimeter", "volume", "region", "regions", "string",
		"list", "table", "row", "rows", "column", "columns", "grid", "random", "randomly",
		"chosen", "selected", "choose", "chooses", "pick", "picks", "make", "made", "get", "gets",
		"take", "takes", "use", "uses", "used", "using", "need", "needs", "want", "wants",
		// LaTeX command words
		"sqrt", "circ", "overline", "overarc", "hat", "bar", "vec", "tilde", "pi", "log", "ln",
		"sin", "cos", "tan", "infty", "binom", "alpha", "beta", "gamma", "delta", "epsilon",
		"theta", "lambda", "mu", "sigma", "phi", "omega", "asy", "align", "cases", "array",
	} {
		m[w] = true
	}
	return m
}()

// isCommon reports whether a token is weak evidence on its own.
func isCommon(tok string) bool {
	if len(tok) <= 1 {
		return true // single letters (variables) and one-digit numbers
	}
	return common[tok]
}
