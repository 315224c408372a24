package contamination

import (
	"fmt"
	"strconv"
)

// The eval set's name. An added line that names the set (a config's
// dataset_name, a loader's class or registry key, a Hugging Face dataset
// id, a file name) trains on it as surely as a copy does when the data is
// reachable, so naming it is a finding (KindName). Read on the lexer's
// tokens, which split letters from digits and drop punctuation: a year
// token ("2025", or "25" right after) within nameWindow tokens after an
// AIME token, or
// "2025" right before "aime". That covers "AIME2025", "aime_2025",
// "AIME-2025", "AIME 2025 I", "AIME'25", "aime25", the Hugging Face ids
// (opencompass/AIME2025, MathArena/aime_2025, MathArena/aime_2025_I,
// yentinglin/aime_2025, HuggingFaceH4/aime_2025, math-ai/aime25,
// TIGER-Lab/AIME25), NeMo RL's registry keys and classes ("AIME2025",
// "aime2025", AIME2025Dataset, partial(AIMEDataset, variant="2025")), NeMo
// Gym's benchmarks/aime25 and "the 2025 AIME".

// nameWindow is how many tokens after an AIME token the year "2025" may
// come (a loader's class and its variant="2025" a few config keys apart);
// the short form "25" must come right after it ("AIME 2024
// accuracy was 25" is no name).
const (
	nameWindow      = 12
	shortNameWindow = 1
)

// aimeSuffixes are the words glued to "aime" in identifiers that name an
// AIME dataset ("AIMEDataset"); other words ("aimed") are not AIME.
var aimeSuffixes = []string{"", "dataset", "datasets", "data", "set", "bench", "benchmark", "problems", "eval", "loader", "test", "split"}

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

// nameState tracks the eval set's name in the added text.
type nameState struct {
	count   int
	lines   []int
	first   int    // line of the first mention
	excerpt string // that line, quoted and cut
}

// nameToken checks whether the newest token completes a name of the eval
// set.
func (c *checker) nameToken() {
	tokAt := func(back int64) []byte {
		s := &c.ring[(c.pos-1-back)&(ringSize-1)]
		return s.b[:s.n]
	}
	cur := tokAt(0)
	found := false
	switch {
	case string(cur) == "2025" || string(cur) == "25":
		window := int64(nameWindow)
		if string(cur) == "25" {
			window = shortNameWindow
		}
		for k := int64(1); k <= window && k < c.pos; k++ {
			// "American Invitational Mathematics Examination 2025" too
			if t := tokAt(k); isAIMEToken(t) || string(t) == "invitational" && k+1 < c.pos && string(tokAt(k+1)) == "american" {
				found = true
				break
			}
		}
	case isAIMEToken(cur):
		found = c.pos >= 2 && string(tokAt(1)) == "2025"
	}
	if !found {
		return
	}
	n := &c.names
	n.count++
	if n.count == 1 {
		n.first = c.line
		n.excerpt = excerpt(c.text)
	}
	n.lines = appendLine(n.lines, c.line)
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

func (c *checker) nameFinding() *Finding {
	n := &c.names
	if n.count == 0 {
		return nil
	}
	times := ""
	if n.count > 1 {
		times = fmt.Sprintf(" (%d mentions in %s)", n.count, lineRange(n.lines))
	}
	return &Finding{
		Kind: KindName, Lines: n.lines, Overlap: 1,
		Detail: fmt.Sprintf("the eval set is named in added line %d of the patch%s: %s%s",
			n.first, c.where(n.first), n.excerpt, times),
	}
}
