// Package contamination checks a policy's patch (change.diff) for the eval
// problems: it runs inside the trusted eval job and reports whether the
// added lines hold the AIME25 statements, their answers as a list, or parts
// of statements with their answers, so that a policy cannot train on the
// eval set. A finding is evidence for an operator to review, not a proof.
//
// # What is read
//
// Only added lines of hunks count: a line starting with '+' after an
// "@@ -a,b +c,d @@" header while the header's counts last (a "+++ " line
// inside a hunk is content); after a hunk whose counts ran out, or whose
// header has none, '+' lines still count while the lines look like a hunk's
// (not "+++ " headers). Removed and context lines, file headers and text
// outside hunks (a non-diff input has none) are ignored. Line numbers are
// 1-based lines of the patch. Rows of added data files (JSONL, CSV, YAML)
// are added lines like any other.
//
// "GIT binary patch" sections (binsection.go, gitbinary.go) are decoded as
// git apply decodes them: the forward hunk's base85 lines, inflated; a
// "literal" is the new content, a "delta" is applied to the pristine file
// the diff header names (Options.Pristine), whose git blob id must be the
// index line's, as must the result's. The decoded text is read as added
// lines, each credited to the patch line of the hunk's header. A section
// that cannot be decoded or rebuilt, or more than Options.MaxDecoded bytes
// decoded in all, is a KindBinary finding: refused, never passed. After a
// section, lines are read again from the outside state (git apply takes a
// traditional "---"/"+++" patch there).
//
// Encoded text (feed.go, containers.go): what a binary section decodes to
// and every base64 blob of the added text (minBase64 characters or more,
// one string or wrapped over lines; more forms since round three, below) is decoded; gzip, zlib, bzip2, xz,
// zstd, zip and tar are unpacked, nested up to maxUnpackDepth; the result
// is read as added lines credited to the line where it began. A stream cut
// short yields what came before the cut; 7z and rar, or more than
// Options.MaxDecoded bytes decoded in all, are refused. A copy or rename
// ("copy from", "rename from") puts the pristine source's text at a new
// path with no '+' line: the source is read (Options.Pristine) as added
// text, or the patch refused without it.
//
// # Normalisation
//
// Statements and added lines go through the same lexer, which yields
// lowercase tokens: runs of letters or of ASCII digits (a letter/digit
// boundary splits, "12x" is "12 x"); everything else is a separator, so
// whitespace, punctuation, '$', '^', '_' and braces do not matter. LaTeX:
// \frac, \dfrac, \tfrac, \cfrac are dropped, so "\frac{a}{b}" reads like
// "a/b", and unbraced arguments ("\frac mn", "\frac12") are split into single
// characters; \boxed, \left, \right, \(, \), \[, \], font, spacing and
// sizing commands, and operators and relations (\cdot, \times, \le, \neq,
// \in, ..., whose ASCII forms are punctuation anyway) are dropped; other
// commands are kept as their letters (\sqrt, \angle, \triangle, \overline,
// Greek letters; unknown ones too), and the Unicode forms (√, π, △, °, ≤)
// read like them. String escapes: any run of backslashes counts as one, so a
// statement JSON-encoded once or twice matches; \uXXXX, \UXXXXXXXX and \xXX
// are decoded; a backslash followed by letters is a known LaTeX command when
// the letters name one (\neq, \notin, \nu, \times, \theta, \right, \frac,
// \binom...), else, when the first letter is that of a string escape
// (n t r f b v a), the escape is a separator and the rest a word, so
// "\nFind the" is "find the" while "\neq" stays LaTeX; other unknown
// commands are kept as words. A control character that a string escape
// produces (tab, form feed, backspace, CR, newline...) immediately followed
// by letters that complete a known command ("\t" +
// "riangle") is read as that command, which is how a statement that lost
// its backslashes to string escaping still matches. Python implicit
// concatenation ("..." "..."), backslash continuations and triple quotes
// need nothing special: quotes are separators and the token stream runs on
// across added lines; only an unbraced \frac's arguments may follow after
// quotes or a line break. Asymptote drawings ("[asy] ... [/asy]") are left
// out of the statements' n-grams (drawing code is no evidence, and a copy
// without it must still match).
//
// # Statement rule (KindStatement)
//
// Each problem's distinct word n-grams (n = N = 10; n = max(6, T-5) for a
// problem of T < N+5 tokens) go into a hash index; the added text is
// streamed token by token through a 32-token ring, the n-gram at each
// position is hashed, filtered through a 1 Mbit Bloom filter, looked up, and
// every hit is verified token by token (bytes and 64-bit token hashes), so a
// hash collision cannot make a finding. Matches of one problem less than
// 2n+16 tokens apart (plus the length of its drawings) form a cluster. A
// cluster flags the statement when it holds at least Threshold = 60% of the
// problem's n-grams, or one contiguous run of matches covering at least
// 60% of its tokens (and 12 tokens); either way the cluster must hold at
// least MinRare = 2 "rare" n-grams (the overlap rule accepts fewer when the
// problem has fewer).
//
// Rare n-grams: an n-gram made only of common words (English function
// words, the stock vocabulary of competition problems such as "find",
// "positive", "integers", "relatively", "prime", "remainder", LaTeX command
// words, single characters and one-digit numbers) is generic, and one that
// two problems of the set share is a stock phrase of the set; neither is
// evidence. Phrases such as "find the sum of all positive integers n such
// that" or "where m and n are relatively prime positive integers find m n"
// recur in ordinary math data; they count towards a cluster's overlap but
// cannot make a finding alone.
//
// # Answers rule (KindAnswers)
//
// The standalone numbers of the added text (digit runs with no letter glued
// on, so not "x86" or "int64") are scanned in order with a window of
// 2 x len(problems) numbers. Answers below 10 are too common in code to
// count; the rule flags a window holding at least K = ceil(50%) of the
// distinct eligible answers (15 of AIME25's 30, all of which are >= 10), and
// is off when fewer than 6 answers are eligible. The window admits one
// other number per answer (an id, an index) between the answers.
//
// Answers by column (columns.go): each standalone number is also filed
// under the word before it (its key) and its position among the numbers
// of its line; each column has its own window of 2 x len(problems) values
// and flags at the same K, so answer-key records ({year, exam, idx,
// points, answer} rows, CSV rows, YAML maps) that put several other
// numbers between two answers are found. Measured on the corpus, the best
// column held 4 stand-in answers and 10 real ones (the number window's
// figure too), against K = 15. Columns are bounded (maxColumns); when full,
// those with the fewest answers in their window go first.
//
// # Name rule (KindName)
//
// A name of the eval set counts where it selects data (names.go): an AIME
// token ("aime", or an identifier such as AIMEDataset) with "2025" or
// "25" glued to it or one separator away (AIME2025, aime_2025, AIME-25,
// AIME'25, "AIME 2025" as a short value), or "2025" right before it, in a
// config value, a string literal, a path or an argument; an AIME loader
// and a key set to 2025 (variant: "2025") however far apart in one config
// block or call, one of them added and the other added or a context line;
// a path into the eval image's /opt/nemorl/eval. It does not count in
// comments, in prose (a string or value of four words or more), in
// documentation files, nor for text the pristine tree already has: the
// same line, or the same names and string literals, in the file's
// pristine copy (Options.Pristine) or in the lines the patch removes from
// it, code moved from elsewhere in the patch, the pristine text of a copy
// or rename whose new path still says aime. A loader renamed to a path
// that no longer says AIME is a finding. This repository's own files name
// AIME25 (it is the evaluator); the false-positive measurement counts them
// apart.
//
// # Pair rule (KindPair)
//
// A cluster below the statement rule that holds at least 25% of a problem's
// n-grams, or a run of at least 25% of its tokens, with at least 2 rare
// n-grams, flags a pair when the problem's answer appears as a standalone
// number within 3 lines of it, before or after it. A number inside matched
// text of any statement does not count, nor does one on a line that holds
// another problem's matched text and none of this one's (the previous
// row's).
//
// # Why these values (measured)
//
// Measured on 3,747 ordinary patches (each file turned into an added-file
// patch: 700 from golang.org/x in the Go module cache, 500 other modules,
// 500 Python standard library, 400 /usr/lib/python3/dist-packages, 700
// sympy with its LaTeX docstrings, 300 mpmath and networkx, 300
// /usr/share/doc, 6 .tex files, 281 files of this repository, 60 generated
// math training files of GSM8K- and competition-style problems using the
// stock phrases), against the real AIME25 set (calibration only, not in the
// repository) and the stand-in set the tests generate, plus the 30 AIME
// 2024 problems (a prompt-suffixed JSONL) against the real set:
//
//   - n: over ordinary patches, the highest overlap any real problem reached
//     was 0.357 with n = 8, 0.250 with n = 10, 0.137 with n = 12 (all on
//     real problem 17, whose 21 words are all stock phrasing, so the rare
//     gate excludes it anyway); every must-catch transform reached 1.000 for
//     each n. n = 10 keeps short problems (19 tokens) matchable with room on
//     both sides.
//   - Threshold 0.6: half a statement (the pair case) reached at most 0.500
//     (real) and 0.450 (stand-in), ordinary patches at most 0.250 (real) and
//     0.049 (stand-in), and every full-statement transform 1.000 (verbatim,
//     reflowed, collapsed, extra spaces, LaTeX removed with \boxed answer,
//     JSONL rows, Python escaped, triple-quoted, concatenated and
//     backslash-continued strings, one line among 5,000 of code).
//   - Rare gate 2: no ordinary patch produced a cluster with 2 rare n-grams
//     of any problem (0 of 3,747, for either set; AIME 2024 neither, its
//     best cluster being 0.170 of stock phrases). The longest ordinary run,
//     12 of the 21 tokens (57%) of real problem 17, was stock phrasing.
//   - Pair 0.25: caught half statements reached 0.355-0.500 (real) and
//     0.364-0.450 (stand-in). Of the real set, the first halves of problems
//     1, 4, 15, 17 and 24 are stock phrasing only (openings of the "find
//     the number of ordered pairs" kind, variables and one-digit numbers):
//     nothing tells them from ordinary math text, so their half-plus-answer
//     pairs are not flagged (75 of 90 pair cases caught; their full
//     statements are).
//   - Answers K = 50% of those >= 10: the most distinct real answers in any
//     60-number window of an ordinary patch was 10 of 30 (syscall tables in
//     x/sys; a table counting 60..119 also holds 10), 5 of 26 for the
//     stand-in set; every list form (Python list, YAML list and mapping,
//     CSV) holds all of them.
//
// On 3,747 ordinary patches the false-positive count is 0 for both sets.
// Round two (the name, column, binary and encoded rules, the folding):
// 0 of 4,006 (stand-in) and 0 of 4,007 (real set; highest overlap 0.250,
// stock phrases; best column 10 answers), every real statement transform
// at overlap 1.000, 75 of 90 pairs.
// Measured again later with the real set from a public copy and 36 files of
// NeMo RL's and NeMo Gym's upstream sources (nemo_rl/, nemo_gym/, configs,
// docs) as NEMORL_CONTAM_EXTRA_NEG: 0 of 3,801; the same 75 of 90 pairs.
//
// # Round three: readable or refused (KindOpaque)
//
// Every added byte is read, or counted as opaque (opaque.go): decoded
// bytes that are not text (binary files, archive members, what a base-N
// run decodes to), in 4 KiB blocks; runs of a base16, base32, base64 or
// base85 alphabet that look like encoded data (the mix of cases, digits
// and symbols, and the spread of distinct characters, of random bytes)
// and decode to nothing readable, at their decoded size; integer arrays
// of 32 values or more that read as nothing as bytes, code points or
// 16/32-bit words and look like data, at their width; for a binary delta,
// the bytes it inserts. Text copied or renamed from the pristine tree is
// not counted. Above Options.MaxOpaque (DefaultMaxOpaque, 1,024 bytes) in
// all the patch is refused, naming the largest places and their chains. A
// zip member of a method Go cannot read (bzip2, zstd and xz are read), an
// encrypted member, 7z and rar are refused whatever their size.
//
// The bound (measured): NeMo RL's own tree (1,749 files, commit 7ea279a)
// as added files carries at most 278 opaque bytes in a text file (its
// README), 199 in the run with the real set; the eval set's statements
// take 5,084 bytes with xz -9e (real AIME25) and 3,388 (stand-in), so the
// bound is 3.7 times the most an ordinary NeMo RL text file carries and a
// fifth of the set compressed. What no bound refuses: the 30 answers
// alone fit in 60 bytes (the answers rules read them in every numeric form
// they know), and a problem or two compressed. Refused by design, and
// counted apart in the false-positive corpus: files that are themselves
// data (fonts, crypto test vectors, keys, Unicode tables, a lock file's
// hundreds of hashes, images), 26 of the 4,006 general-corpus files.
//
// # Round three: decoders
//
// Runs are assembled the ways code writes a long string: pieces of a
// base-N alphabet joined across string quotes ("ab" "cd", ["ab", "cd"],
// "ab" + "cd"), across JSON and Python escapes ("ab\ncd"), across line
// ends (wrapped blobs, YAML list items) (runs.go). A run of 64 characters
// or more is decoded as hex, base32, base64, or one of the base85 alphabets
// (RFC 1924, Z85, Ascii85); the first decoding that reads as text or a
// container is read. Lines with four or more percent or quoted-printable
// escapes (a fifth of the line) are read a second time decoded; string
// literals concatenated over lines are read a second time joined when a
// word is split between two of them. Decoded bytes (decoders.go): a
// container at offset 0 is unpacked; UTF-16 and UTF-32 (by byte order
// mark or zero bytes) transcoded; otherwise a container found by its magic
// anywhere in them, a raw deflate or an LZMA-alone stream is read.
//
// # Round three: folding and readings
//
// Before the n-grams, on both sides: TR39 confusables to their Latin
// skeleton (a Greek math letter standing alone keeps its reading), every
// default-ignorable code point dropped, decimal digits of any script read
// as ASCII, HTML tags removed (inline ones without a trace), Python
// \N{...} escapes read, hex literals (0x46) read as their values, number
// words ("two hundred and four") read as numbers for the answers rules
// (fold3.go, pool.go). Every added line is also read through ROT13,
// backwards (a block of consecutive lines read from its end) and with its
// words in reverse order, each by a checker of its own (readings.go); the
// paths of new files are read as a stream of their own, with the answers
// rules.
//
// # Round three: counted over the whole patch
//
// Per problem, every distinct n-gram matched anywhere, in any reading,
// is pooled (pool.go): 50 % of a problem's 10-grams with 2 rare ones
// pooled over the patch is a statement finding. Text cut shorter than a
// 10-gram (shuffled rows) is found by the problem's distinctive 3-word
// phrases (one word at least neither common nor a number, found in no
// other problem): 60 % of them, 6 at least, on 3 lines or more (a half
// statement on one line reaches 85 % for some problems: that is the pair
// rule's case). Measured on the stand-in set: rows of 5 to 8 words keep
// 62-100 % of a problem's distinctive phrases, rows of 4 to 7, 46-87 %;
// 5 of the 30 stand-in problems have fewer than 10 distinctive phrases
// (their templates share them) and cannot be found from short rows.
//
// Round three's measurement: 0 of 4,006 (stand-in set) and 0 of 5,693
// (real AIME25 from a public copy, with NeMo RL's 1,678 text files read as
// rewrites of their pristine copies and AIME 2024 in eight encodings:
// plain, hex, base64 of gzip as short literals, base85, Ascii85, ROT13,
// reversed, UTF-16) flagged; highest statement overlap 0.250 (stock
// phrases, no rare n-gram), most answers in one window 11 (x/sys error
// tables, hex literals now read as numbers) against 15; every real
// statement transform caught, 75 of 90 pairs as before.
//
// # Limits
//
// Out of reach: text generated at run time (a script that assembles the
// problems, or a name built from parts), a cipher with a key, paraphrase,
// translation and heavy rewording, answers spread thinly among many other
// numbers, and data below the opaque bound (the answers, a problem or
// two, compressed). A statement cut into parts shorter than 10 words is
// found only through its distinctive phrases, which template-like
// problems lack; problems made mostly of stock phrasing can be caught only
// by their full statements. Check is a filter for an operator, not a
// guarantee.
//
// # Cost
//
// Check streams the patch once with bounded state (the rings, the windows,
// per-problem clusters and the pool); the alternative readings lex each
// added line three more times, and a reversed block holds at most 1 MiB.
// Decoding is bounded by Options.MaxDecoded (second readings by a budget
// of the same size, skipped past it). Preparing the problems (tokens,
// index, Bloom filter) is cached for the last problem set. Figures:
// docs/BENCHMARKS.md (BenchmarkCheck32MiB, BenchmarkCheck32MiBBinary).
package contamination
