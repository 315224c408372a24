package contamination

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"path"
	"strconv"
	"strings"
)

// The eval set's name (KindName), quiet (round three). A name of the set
// counts where it selects data, and nowhere else:
//
//   - in a value or a string a loader or a path reaches: a config value
//     (dataset_name: AIME2025), a string literal in code
//     (load_dataset("opencompass/AIME2025")), a path (data/aime-25.jsonl),
//     a command-line argument (data.dataset_name=AIME2025), a data file's
//     row; the name is an AIME token ("aime", or an identifier such as
//     AIMEDataset) with the year 2025 or 25 right after it (AIME2025,
//     aime_2025, AIME-25, AIME'25, aime25, "AIME 2025" as a short value),
//     or 2025 right before it (2025_aime);
//   - NeMo RL's loader keys however far apart in one config block or one
//     call: a bare AIME loader (AIMEDataset, response_datasets.aime...)
//     and a key set to 2025 (variant: "2025", year=2025) among the lines of
//     its block (the lines indented under or beside it), one of the two
//     added, the other added or a context line;
//
// and not in comments (# and //), in prose (a string or value of four
// words or more: a log message, a docstring), in documentation files (.md,
// .rst, .adoc, .html, .ipynb, anything under docs/), nor for text the
// pristine tree already has: an added line whose text (or whose names and
// string literals) the same file already held (its pristine copy, or the
// lines the patch removes from it: a refactor), a code line the patch
// removes elsewhere (a move), and the pristine text of a copy or rename
// (aime.py moved or renamed) unless its new path no longer says "aime": a
// loader of the eval set renamed into a training module is a finding.

// aimeSuffixes are the words glued to "aime" in identifiers that name an
// AIME dataset ("AIMEDataset"); other words ("aimed") are not AIME.
var aimeSuffixes = []string{"dataset", "datasets", "data", "set", "bench", "benchmark", "problems", "eval", "loader", "test", "split", ""}

// isAIMEToken tells a lexer token naming an AIME dataset (tests).
func isAIMEToken(tok []byte) bool {
	if len(tok) < 4 || string(tok[:4]) != "aime" {
		return false
	}
	for _, s := range aimeSuffixes {
		if string(tok[4:]) == s {
			return true
		}
	}
	return false
}

type fileKind int

const (
	kindData  fileKind = iota // data files, no comments
	kindHash                  // code and configs with # comments
	kindSlash                 // code with // comments
	kindDocs                  // documentation: the name rule is off
)

// configExts are the files whose values select data by themselves.
var configExts = map[string]bool{".yaml": true, ".yml": true, ".toml": true, ".json": true, ".jsonl": true, ".cfg": true, ".ini": true, ".conf": true, ".env": true}

func kindOf(p string) fileKind {
	ext := strings.ToLower(path.Ext(p))
	switch ext {
	case ".md", ".rst", ".adoc", ".html", ".htm", ".ipynb", ".tex":
		return kindDocs
	case ".go", ".c", ".h", ".cc", ".cpp", ".hpp", ".cu", ".cuh", ".js", ".ts", ".java", ".rs", ".jsonc", ".kt", ".scala", ".swift":
		return kindSlash
	case ".json", ".jsonl", ".csv", ".tsv", ".txt", ".parquet":
		return kindData
	}
	if strings.HasPrefix(p, "docs/") || strings.Contains(p, "/docs/") {
		if !configExts[ext] && ext != ".py" {
			return kindDocs
		}
	}
	return kindHash
}

// nameCand is a name found, decided at the end against what the pristine
// tree already has.
type nameCand struct {
	line    int
	lines   []int
	excerpt string
	where   string
	file    string // the file's patch path (its old path, for the pristine copy)
	config  bool
	keys    []string // the names' normalised keys ("aime2025")
	lits    []string // the line's string literals, lower case
	texts   []uint64 // the participating added lines, trimmed, hashed
	block   bool
	renamed string // a copy or rename whose new path no longer says aime
}

// known is what one file (or the patch's removed code) already has.
type known struct {
	lines map[uint64]bool
	lits  map[string]bool
	keys  map[string]bool
}

func newKnown() *known {
	return &known{lines: map[uint64]bool{}, lits: map[string]bool{}, keys: map[string]bool{}}
}

func (k *known) addLine(l []byte) {
	if len(k.lines) < 1<<16 {
		k.lines[lineHash(l)] = true
	}
	for _, s := range literalsOf(l) {
		if len(k.lits) < 1<<16 {
			k.lits[s] = true
		}
	}
	for _, m := range findNames(l) {
		k.keys[m.key] = true
	}
}

func lineHash(l []byte) uint64 {
	h := fnv.New64a()
	h.Write(bytes.TrimSpace(l))
	return h.Sum64()
}

// literalsOf returns the contents of the string literals of l, lower case.
func literalsOf(l []byte) []string {
	var out []string
	for i := 0; i < len(l); i++ {
		if q := l[i]; q == '"' || q == '\'' {
			j := bytes.IndexByte(l[i+1:], q)
			if j < 0 {
				break
			}
			if j > 0 && j < 200 {
				out = append(out, strings.ToLower(string(l[i+1:i+1+j])))
			}
			i += j + 1
		}
	}
	return out
}

// nameMatch is one name of the eval set in a line.
type nameMatch struct {
	start, end int
	key        string
	bare       bool // an AIME token with no year: a loader key for the block rule
}

// findNames finds the AIME tokens of l and the years glued to them.
func findNames(l []byte) []nameMatch {
	var out []nameMatch
	low := asciiLower(l)
	for from := 0; ; {
		i := bytes.Index(low[from:], []byte("aime"))
		if i < 0 {
			break
		}
		i += from
		from = i + 4
		if i > 0 && isASCIILetter(low[i-1]) {
			continue
		}
		j := i + 4
		suffix := ""
		for _, s := range aimeSuffixes {
			if bytes.HasPrefix(low[j:], []byte(s)) && (j+len(s) >= len(low) || !isASCIILetter(low[j+len(s)])) {
				suffix = s
				break
			}
		}
		if j+len(suffix) < len(low) && isASCIILetter(low[j+len(suffix)]) {
			continue // "aimed", "aimes"
		}
		j += len(suffix)
		// the year right after: separators [-_ ./'] up to two
		k := j
		for k < len(low) && k-j < 2 && strings.IndexByte("-_ ./'", low[k]) >= 0 {
			k++
		}
		d := k
		for d < len(low) && isDigit(low[d]) {
			d++
		}
		year := string(low[k:d])
		if (year == "2025" || year == "25") && (d >= len(low) || !isDigit(low[d])) {
			out = append(out, nameMatch{start: i, end: d, key: "aime" + suffix + "2025"})
			continue
		}
		// or right before it: "2025 AIME", "2025_aime"
		b := i
		for b > 0 && i-b < 2 && strings.IndexByte("-_ ./'", low[b-1]) >= 0 {
			b--
		}
		if b >= 4 && string(low[b-4:b]) == "2025" && (b == 4 || !isDigit(low[b-5])) {
			out = append(out, nameMatch{start: b - 4, end: j, key: "aime" + suffix + "2025"})
			continue
		}
		if d == k && !identTail(low, j) { // no digits after it: a bare AIME token
			out = append(out, nameMatch{start: i, end: j, key: "aime" + suffix, bare: true})
		}
	}
	return out
}

// identTail tells whether an identifier goes on at l[j] with '_' and a
// word that is no AIME suffix ("AIME_NAMES" is no loader; "aime_dataset"
// is).
func identTail(l []byte, j int) bool {
	if j+1 >= len(l) || l[j] != '_' || !isASCIILetter(l[j+1]) {
		return false
	}
	k := j + 1
	for k < len(l) && isASCIILetter(l[k]) {
		k++
	}
	w := string(l[j+1 : k])
	for _, s := range aimeSuffixes {
		if s != "" && w == s {
			return false
		}
	}
	return true
}

// stripComment cuts a comment off a line of a file of kind k (outside
// string literals).
func stripComment(l []byte, k fileKind) []byte {
	if k == kindData {
		return l
	}
	var q byte
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case q != 0:
			if c == '\\' {
				i++
			} else if c == q {
				q = 0
			}
		case c == '"' || c == '\'':
			// an apostrophe inside a word is no quote ("AIME'25", "don't")
			if c == '\'' && i > 0 && isASCIILetter(l[i-1]) {
				continue
			}
			q = c
		case k == kindHash && c == '#':
			return l[:i]
		case k == kindSlash && c == '/' && i+1 < len(l) && l[i+1] == '/':
			return l[:i]
		}
	}
	return l
}

// prose tells whether the match at [s, e) of l lies in prose: the segment
// around it (up to quotes, ':', '=', ',', brackets) holds four words or
// more.
func prose(l []byte, s, e int) bool {
	stop := func(c byte) bool { return strings.IndexByte("\"`:=,()[]{}", c) >= 0 }
	a := s
	for a > 0 && !stop(l[a-1]) {
		a--
	}
	b := e
	for b < len(l) && !stop(l[b]) {
		b++
	}
	return len(bytes.Fields(l[a:b])) >= 4
}

// yearValue finds a key set to the year 2025 ("variant: 2025",
// `variant="2025"`, "year=2025", "split: 2025-I") in l: its index, or -1.
func yearValue(l []byte) int {
	for from := 0; ; {
		i := bytes.Index(l[from:], []byte("2025"))
		if i < 0 {
			return -1
		}
		i += from
		from = i + 4
		if i > 0 && (isDigit(l[i-1]) || isASCIILetter(l[i-1])) || i+4 < len(l) && isDigit(l[i+4]) {
			continue
		}
		// the value ends after the year (and "-I", "_II")
		j := i + 4
		if j < len(l) && (l[j] == '-' || l[j] == '_' || l[j] == ' ') {
			k := j + 1
			for k < len(l) && (l[k] == 'I' || l[k] == 'i') {
				k++
			}
			if k > j+1 && k-j <= 3 {
				j = k
			}
		}
		if j < len(l) && strings.IndexByte("\"' ,)}]\t", l[j]) < 0 {
			continue
		}
		// a key before it: "key:", "key =", with an optional quote
		b := i
		if b > 0 && (l[b-1] == '"' || l[b-1] == '\'') {
			b--
		}
		for b > 0 && l[b-1] == ' ' {
			b--
		}
		if b > 0 && l[b-1] == ':' || b > 1 && l[b-1] == '=' && strings.IndexByte("=!<>", l[b-2]) < 0 {
			return i // not a comparison ("variant == 2025")
		}
	}
}

func indentOf(l []byte) int {
	n := 0
	for _, c := range l {
		switch c {
		case ' ':
			n++
		case '\t':
			n += 4
		case '-':
			// a YAML list item: its keys sit after "- "
			n++
		default:
			return n
		}
	}
	return -1 // blank
}

// blockMark is an open half of the block rule.
type blockMark struct {
	indent int
	line   int
	added  bool
	text   []byte
	open   bool
}

// nameRule is the name rule's state over one Check.
type nameRule struct {
	file      string // the file being read (its patch path)
	newPath   string
	kind      fileKind
	cands     []nameCand
	aime      blockMark // a bare AIME loader whose block is open
	year      blockMark // a key set to 2025 whose block is open
	removed   map[string]*known
	removedGl *known // removed code lines of the whole patch
	inCopy    string // the copy or rename being read (pristine text), "" else
}

const maxNameCands = 64

// evalDataDir is where the eval image keeps the eval set
// (apptainer/defs/eval.def): a path into it selects the set by place.
const evalDataDir = "/opt/nemorl/eval"

// setFile starts a file of the patch.
func (n *nameRule) setFile(h fileHeader) {
	n.file, n.newPath = h.oldPath, h.newPath
	if n.file == "" {
		n.file = h.newPath
	}
	n.kind = kindOf(h.newPath)
	n.aime, n.year = blockMark{}, blockMark{}
}

// other reads a context or removed line of the current file.
func (n *nameRule) other(l []byte, lineNo int, removed bool) {
	if removed {
		if containsAIME(l) || bytes.Contains(l, []byte("2025")) {
			if n.removed == nil {
				n.removed, n.removedGl = map[string]*known{}, newKnown()
			}
			k := n.removed[n.file]
			if k == nil {
				k = newKnown()
				n.removed[n.file] = k
			}
			k.addLine(l)
			if n.kind != kindDocs && !configExts[strings.ToLower(path.Ext(n.newPath))] {
				n.removedGl.addLine(l)
			}
		}
		return
	}
	n.blockLine(l, lineNo, false, "")
}

// added reads an added line (where names the decoding it came from).
func (n *nameRule) added(l []byte, lineNo int, where string) {
	if n.kind == kindDocs || len(n.cands) >= maxNameCands {
		return
	}
	if !containsAIME(l) && !bytes.Contains(l, []byte("2025")) && !bytes.Contains(l, []byte(evalDataDir)) {
		n.blockLine(l, lineNo, true, where)
		return
	}
	code := stripComment(l, n.kind)
	named := false
	for _, m := range findNames(code) {
		if m.bare || prose(code, m.start, m.end) {
			continue
		}
		n.cand(nameCand{line: lineNo, lines: []int{lineNo}, excerpt: excerpt(l), where: where}, [][]byte{l})
		named = true
		break
	}
	if i := bytes.Index(code, []byte(evalDataDir)); !named && i >= 0 && !prose(code, i, i+len(evalDataDir)) {
		// the eval image's data directory, however its file is named
		n.cand(nameCand{line: lineNo, lines: []int{lineNo}, excerpt: excerpt(l), where: where, keys: []string{"evaldir"}}, [][]byte{l})
	}
	n.blockLine(l, lineNo, true, where)
}

// blockLine runs the block rule over a line (added or context).
func (n *nameRule) blockLine(l []byte, lineNo int, added bool, where string) {
	if n.kind == kindDocs {
		return
	}
	ind := indentOf(l)
	if ind < 0 {
		return // blank lines keep blocks open
	}
	// a line less indented than an open half closes it
	if n.aime.open && ind < n.aime.indent {
		n.aime.open = false
	}
	if n.year.open && ind < n.year.indent {
		n.year.open = false
	}
	if !containsAIME(l) && !bytes.Contains(l, []byte("2025")) {
		return
	}
	code := stripComment(l, n.kind)
	bare := false
	for _, m := range findNames(code) {
		if m.bare && !prose(code, m.start, m.end) {
			bare = true
		}
	}
	yr := yearValue(code) >= 0
	switch {
	case bare && yr:
		if added {
			n.blockCand(blockMark{ind, lineNo, true, l, true}, blockMark{ind, lineNo, true, l, true}, where)
		}
		return
	case bare:
		cur := blockMark{ind, lineNo, added, append([]byte(nil), l...), true}
		if n.year.open && n.year.indent == ind && (added || n.year.added) {
			n.blockCand(cur, n.year, where)
		}
		n.aime = cur
	case yr:
		cur := blockMark{ind, lineNo, added, append([]byte(nil), l...), true}
		if n.aime.open && (added || n.aime.added) {
			n.blockCand(n.aime, cur, where)
			return
		}
		n.year = cur
	}
}

func (n *nameRule) blockCand(a, y blockMark, where string) {
	var texts [][]byte
	var lines []int
	for _, m := range []blockMark{a, y} {
		lines = addLine(lines, m.line)
		if m.added {
			texts = append(texts, m.text)
		}
	}
	ex := excerpt(bytes.TrimSpace(a.text))
	if y.line != a.line {
		ex += " ... " + excerpt(bytes.TrimSpace(y.text))
	}
	n.cand(nameCand{line: lines[len(lines)-1], lines: lines, excerpt: ex, where: where, block: true}, texts)
}

func (n *nameRule) cand(c nameCand, texts [][]byte) {
	if len(n.cands) >= maxNameCands {
		return
	}
	c.file = n.file
	c.config = configExts[strings.ToLower(path.Ext(n.newPath))] || n.kind == kindData
	for _, t := range texts {
		c.texts = append(c.texts, lineHash(t))
		c.lits = append(c.lits, literalsOf(t)...)
		for _, m := range findNames(t) {
			if !m.bare {
				c.keys = append(c.keys, m.key)
			}
		}
	}
	if n.inCopy != "" {
		if strings.Contains(strings.ToLower(n.newPath), "aime") {
			return // pristine text moved under a name that still says AIME
		}
		c.renamed = n.inCopy
	}
	n.cands = append(n.cands, c)
}

// has tells whether k already holds the candidate: every added line's
// text, or all its names and string literals.
func (k *known) has(c *nameCand) bool {
	if k == nil {
		return false
	}
	all := len(c.texts) > 0
	for _, t := range c.texts {
		if !k.lines[t] {
			all = false
		}
	}
	if all {
		return true
	}
	if len(c.keys) == 0 {
		return false // a block's year line alone: only its exact text
	}
	for _, key := range c.keys {
		if !k.keys[key] {
			return false
		}
	}
	for _, s := range c.lits {
		if !k.lits[s] {
			return false
		}
	}
	return true
}

// finding decides the candidates against the pristine tree and the
// removed lines: the first that stands is the finding.
func (n *nameRule) finding(o Options) *Finding {
	pristine := map[string]*known{}
	var kept []nameCand
	for i := range n.cands {
		c := &n.cands[i]
		if c.renamed == "" {
			if n.removed != nil && (n.removed[c.file].has(c) || !c.config && n.removedGl.has(c)) {
				continue
			}
			if o.Pristine != nil && c.file != "" {
				k, ok := pristine[c.file]
				if !ok {
					if b, err := o.Pristine(c.file); err == nil {
						k = newKnown()
						forEachLine(b, func(l []byte) {
							if containsAIME(l) || bytes.Contains(l, []byte("2025")) || bytes.ContainsAny(l, "\"'") {
								k.addLine(l)
							}
						})
					}
					pristine[c.file] = k
				}
				if k.has(c) {
					continue
				}
			}
		}
		kept = append(kept, *c)
	}
	if len(kept) == 0 {
		return nil
	}
	c := kept[0]
	var lines []int
	for _, k := range kept {
		for _, l := range k.lines {
			lines = addLine(lines, l)
		}
	}
	times := ""
	if len(kept) > 1 {
		times = fmt.Sprintf(" (%d mentions in %s)", len(kept), lineRange(lines))
	}
	what := ""
	switch {
	case c.renamed != "":
		what = " (renamed to a path that no longer says AIME)"
	case c.block:
		what = " (an AIME loader and the year 2025 in one config block)"
	}
	return &Finding{Kind: KindName, Lines: lines, Overlap: 1,
		Detail: fmt.Sprintf("the eval set is named in added line %d of the patch%s%s: %s%s", c.line, c.where, what, c.excerpt, times)}
}

// excerpt quotes a line of the patch for a finding's detail: ASCII only,
// cut to 100 bytes.
func excerpt(b []byte) string {
	const max = 100
	cut := ""
	if len(b) > max {
		b, cut = b[:max], "..."
	}
	return strconv.QuoteToASCII(string(b)) + cut
}

// containsAIME tells whether l holds "aime" in any case, without
// allocating.
func containsAIME(l []byte) bool {
	for i := 0; i+4 <= len(l); i++ {
		if l[i]|0x20 == 'a' && l[i+1]|0x20 == 'i' && l[i+2]|0x20 == 'm' && l[i+3]|0x20 == 'e' {
			return true
		}
	}
	return false
}

// asciiLower is l with its ASCII letters in lower case, the same length
// (bytes.ToLower rewrites invalid UTF-8, which would move the indices).
func asciiLower(l []byte) []byte {
	out := make([]byte, len(l))
	for i, c := range l {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return out
}
