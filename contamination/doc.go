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
// one string or wrapped over lines) is decoded; gzip, zlib, bzip2, xz,
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
// An added line that names the eval set (names.go: an AIME token, "aime"
// or an identifier such as AIMEDataset, followed within 12 tokens by
// "2025" (a loader and its variant a few config keys apart) or right after
// by "25", or "2025" right before "aime") is a finding quoting the line.
// This repository's own files name AIME25 (it is the evaluator); the
// false-positive measurement counts them apart.
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
// # Limits
//
// Out of reach: text that is encoded other than as above (hex, a cipher,
// parquet's compressed pages, an image), text generated at run time
// (a script that downloads or assembles the problems, a name built from
// parts), homoglyphs, paraphrase, translation, heavy rewording (a word
// changed every few words breaks every 10-gram), and answers written as
// words or spread thinly among many other numbers. A statement split across
// distant places is seen only as its parts. Problems made mostly of stock
// phrasing can be caught only by their full statements. Check is a filter
// for an operator, not a guarantee.
//
// # Cost
//
// Check streams the patch once with bounded state (the ring, a 60-number
// window, per-problem clusters); preparing the problems (tokens, index,
// Bloom filter) is cached for the last problem set. A 32 MiB patch takes
// about 1 s on one core of the reference machine with about 200 KB
// allocated (BenchmarkCheck32MiB).
package contamination
